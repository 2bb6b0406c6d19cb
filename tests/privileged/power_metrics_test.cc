// magnet host's power figures on /metrics against a real daemon that follows
// two VMs of libvirt's test driver (g1, g2), its RAPL a synthetic powercap
// tree (--powercap-root) whose counters this test advances while it runs,
// one of them wrapping every two seconds: the host's watts are the rate
// written, and the VMs', idle and own joules add up to the host's.  And the
// daemon without a power source (none of it on /metrics), with a model and
// no RAPL, and with a tree it cannot read (it stops, naming the file).
// Then each VM's share delivered into its guest, as stats of its view: the
// VMs' QEMU and guest agent are magnet_fake_qemu processes of this test (a
// vCPU thread by name, the guest's end of the view channel; no vsock),
// whose figures are /metrics' at the same tick; and magnet top's W column.
// And a VM's vhost worker and QEMU I/O thread (threads of the fake QEMU,
// named as theirs are) counted as its work: its energy follows all of its
// QEMU's threads' CPU time, not its vCPU's alone.
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <set>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "http.h"
#include "magnet/view.h"
#include "proc.h"

namespace magnet {
namespace {

namespace fs = std::filesystem;
using test::child;

std::string power_tmp(const std::string& what) { return "/tmp/magnet-power-" + std::to_string(getpid()) + "-" + what; }

std::string power_node_file() {
  const std::string path = power_tmp("node.xml");
  std::ofstream(path, std::ios::trunc)
      << "<node>\n"
      << "<domain type='test'><name>g1</name><uuid>11111111-2222-3333-4444-555555555511</uuid>"
      << "<memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>\n"
      << "<domain type='test'><name>g2</name><uuid>11111111-2222-3333-4444-555555555512</uuid>"
      << "<memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>\n"
      << "</node>\n";
  return path;
}

// A file replaced whole (rename), as a reader must never see it half written.
void put(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path + ".new", std::ios::trunc) << text;
  fs::rename(path + ".new", path);
}

// Two packages: package-0 at 30 W on a 60 J range starting at 50 J (it
// wraps after 1/3 s, then every 2 s), package-1 at 20 W; written every
// 10 ms from the test's clock, so the counters are always the energy so far.
struct rapl_tree {
  static constexpr double kWatts0 = 30, kWatts1 = 20;
  static constexpr uint64_t kRange0 = 60'000'000, kStart0 = 50'000'000;
  std::string root = power_tmp("powercap");
  std::atomic<bool> stop{false};
  std::thread writer;
  rapl_tree() {
    fs::remove_all(root);
    for (const auto& [z, name, max] : {std::tuple{"intel-rapl:0", "package-0", kRange0},
                                       std::tuple{"intel-rapl:1", "package-1", uint64_t{262143328850}}}) {
      put(root + "/" + z + "/name", std::string(name) + "\n");
      put(root + "/" + z + "/max_energy_range_uj", std::to_string(max) + "\n");
    }
    put(root + "/intel-rapl:0:0/name", "core\n");  // a subzone: not counted again
    write(0);
    writer = std::thread([this] {
      const auto t0 = std::chrono::steady_clock::now();
      while (!stop) {
        write(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  void write(double secs) {
    const auto uj0 = static_cast<uint64_t>(kStart0 + kWatts0 * secs * 1e6) % kRange0;
    const auto uj1 = static_cast<uint64_t>(kWatts1 * secs * 1e6);
    put(root + "/intel-rapl:0/energy_uj", std::to_string(uj0) + "\n");
    put(root + "/intel-rapl:1/energy_uj", std::to_string(uj1) + "\n");
  }
  ~rapl_tree() {
    stop = true;
    writer.join();
    fs::remove_all(root);
  }
};

struct daemon_run {
  std::string sock = power_tmp("host.sock");
  std::unique_ptr<child> d;
  int port = 0;
  explicit daemon_run(std::vector<std::string> extra) {
    std::vector<std::string> argv = {MAGNET_BIN, "-v",        "host",         "--config", "/dev/null", "--uri",
                                     "test://" + power_node_file(), "--socket",     sock,       "--probes",  "net.dev",
                                     "--no-deliver",          "--http",       "127.0.0.1:0", "--duration", "60"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    d = std::make_unique<child>(argv);
  }
  ~daemon_run() {
    d.reset();
    ::unlink(power_tmp("node.xml").c_str());
  }
  ::testing::AssertionResult up() {
    if (!d->wait_for_stderr("[started]")) return ::testing::AssertionFailure() << d->stderr_text();
    port = test::metrics_port(d->stderr_text());
    if (!port) return ::testing::AssertionFailure() << "no /metrics line: " << d->stderr_text();
    if (!d->wait_for_stderr("[vm.up] g1") || !d->wait_for_stderr("[vm.up] g2"))
      return ::testing::AssertionFailure() << d->stderr_text();
    return ::testing::AssertionSuccess();
  }
  std::string metrics() const { return test::http_get(port, "/metrics").second; }
};

// Every sample of @page whose name is @name: labels -> value.
std::map<std::string, double> samples(const std::string& page, const std::string& name) {
  std::map<std::string, double> out;
  std::regex re("^" + name + R"((\{[^}]*\})? (\S+)$)");
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, re)) out[m[1]] = std::stod(m[2]);
  }
  return out;
}

TEST(PowerMetrics, RaplTreeWattsAndEnergyAddUp) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  rapl_tree tree;
  const std::string model = power_tmp("model.conf");
  std::ofstream(model, std::ios::trunc) << "idle = 86\nfull = 117\n";
  daemon_run t({"--powercap-root", tree.root, "--power-model", model});
  ASSERT_TRUE(t.up());
  EXPECT_NE(t.d->stderr_text().find("[power] source rapl: package-0 (intel-rapl:0), package-1 (intel-rapl:1) under " +
                                    tree.root + "; --power-model " + model + " not used"),
            std::string::npos)
      << t.d->stderr_text();
  ::unlink(model.c_str());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past the first wrap, the window full
  const auto t1 = std::chrono::steady_clock::now();
  const std::string p1 = t.metrics();
  std::this_thread::sleep_for(std::chrono::seconds(4));  // two more wraps of package-0
  const auto t2 = std::chrono::steady_clock::now();
  const std::string p2 = t.metrics();
  const double want = rapl_tree::kWatts0 + rapl_tree::kWatts1;
  const std::string src = "{source=\"rapl\"}";
  ASSERT_EQ(samples(p2, "magnet_host_power_watts").count(src), 1u) << p2;
  EXPECT_NEAR(samples(p2, "magnet_host_power_watts")[src], want, 0.1 * want) << p2;
  const double e1 = samples(p1, "magnet_host_energy_joules_total")[src];
  const double e2 = samples(p2, "magnet_host_energy_joules_total")[src];
  const double secs = std::chrono::duration<double>(t2 - t1).count();
  EXPECT_NEAR((e2 - e1) / secs, want, 0.1 * want) << e1 << " J, then " << e2 << " J " << secs << " s later";
  // The page adds up: the VMs' joules, idle, own and gone are the host's.
  for (const std::string& page : {p1, p2}) {
    const auto vms = samples(page, "magnet_vm_energy_joules_total");
    ASSERT_EQ(vms.size(), 2u) << page;
    double sum = 0;
    for (const auto& [labels, j] : vms) {
      EXPECT_GE(j, 0) << labels;
      sum += j;
    }
    const auto parts = samples(page, "magnet_host_energy_part_joules_total");
    ASSERT_EQ(parts.size(), 3u) << page;
    for (const auto& [labels, j] : parts) sum += j;
    const double host = samples(page, "magnet_host_energy_joules_total")[src];
    EXPECT_GT(host, 0);
    EXPECT_NEAR(sum, host, 0.01 * host) << page;
    EXPECT_GE(parts.at("{source=\"rapl\",part=\"idle\"}"), 0);
  }
  EXPECT_EQ(samples(p2, "magnet_vm_power_watts").size(), 2u);
  // The text page with the power families passes promtool's lint (2.42
  // reads the text format only).
  const std::string path = power_tmp("page");
  std::ofstream(path, std::ios::trunc) << p2;
  auto lint = test::run({"sh", "-c", "promtool check metrics < " + path});
  EXPECT_EQ(lint.status, 0) << lint.out << lint.err;
  ::unlink(path.c_str());
  EXPECT_EQ(t.d->stderr_text().find("[power] /"), std::string::npos) << "no reading failed: " << t.d->stderr_text();
}

TEST(PowerMetrics, NoSourceNoFiguresTheModelWithoutRaplAndAnUnreadableTreeStopsTheDaemon) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string empty = power_tmp("empty-powercap");
  fs::create_directories(empty);
  {
    daemon_run t({"--powercap-root", empty});
    ASSERT_TRUE(t.up());
    EXPECT_NE(t.d->stderr_text().find("[power] no power source: no RAPL package zone under " + empty +
                                      " and no --power-model: no power figures"),
              std::string::npos)
        << t.d->stderr_text();
    const std::string page = t.metrics();
    ASSERT_NE(page.find("magnet_vm_info"), std::string::npos) << page;
    EXPECT_EQ(page.find("power"), std::string::npos) << page;
    EXPECT_EQ(page.find("energy"), std::string::npos) << page;
  }
  {
    // The model where there is no RAPL: its watts between idle and full,
    // and its page adding up as RAPL's does.
    const std::string model = power_tmp("model.conf");
    std::ofstream(model, std::ios::trunc) << "idle = 86\nfull = 117\npoint = 50% 102\n";
    daemon_run t({"--powercap-root", empty, "--power-model", model});
    ASSERT_TRUE(t.up());
    EXPECT_NE(t.d->stderr_text().find("[power] source model " + model +
                                      ": 86 W idle, 117 W full, 1 point between (no RAPL package zone under " +
                                      empty + ")"),
              std::string::npos)
        << t.d->stderr_text();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const std::string page = t.metrics();
    const std::string src = "{source=\"model\"}";
    ASSERT_EQ(samples(page, "magnet_host_power_watts").count(src), 1u) << page;
    // (up to floating point: the window's joules over its seconds)
    EXPECT_GE(samples(page, "magnet_host_power_watts")[src], 86 - 1e-9) << page;
    EXPECT_LE(samples(page, "magnet_host_power_watts")[src], 117 + 1e-9) << page;
    const double host = samples(page, "magnet_host_energy_joules_total")[src];
    double sum = 0;
    for (const auto& [labels, j] : samples(page, "magnet_vm_energy_joules_total")) sum += j;
    for (const auto& [labels, j] : samples(page, "magnet_host_energy_part_joules_total")) sum += j;
    EXPECT_GT(host, 86 * 0.5) << page;  // at least half a second at idle power
    EXPECT_NEAR(sum, host, 0.01 * host) << page;
    EXPECT_GE(samples(page, "magnet_host_energy_part_joules_total")["{source=\"model\",part=\"idle\"}"],
              86 * 0.5) << page;
    ::unlink(model.c_str());
  }
  put(empty + "/intel-rapl:0/name", "package-0\n");
  put(empty + "/intel-rapl:0/max_energy_range_uj", "1000\n");  // and no energy_uj
  daemon_run bad({"--powercap-root", empty});
  EXPECT_EQ(bad.d->stop(0, 20), 1) << bad.d->stderr_text();
  EXPECT_NE(bad.d->stderr_text().find("--powercap-root: " + empty + "/intel-rapl:0/energy_uj: No such file"),
            std::string::npos)
      << bad.d->stderr_text();
  fs::remove_all(empty);
}

// ------------------------------------------------- into each guest, top ---

uint64_t monotonic() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

// One stats frame as the fake guest agent got it: the tick its values are
// of (the frame's time less their age) and each stat by name.
struct guest_frame {
  uint64_t at_ns = 0;
  std::map<std::string, nlohmann::json> stats;  // index 0 only
};

// A test-driver VM whose QEMU is a magnet_fake_qemu of this test (libvirt's
// pid file names it; its vCPU thread runs @duty_ms in every 10 ms, an I/O
// thread @io_ms and a vhost worker @vhost_ms when above 0) and whose guest
// agent is that same process at the VM's view channel.
struct fake_vm {
  std::string name, uuid, chan, pidf;
  std::unique_ptr<child> qemu;
  fake_vm(const std::string& n, const std::string& u, int duty_ms, int io_ms = 0, int vhost_ms = 0)
      : name(n + std::to_string(getpid())), uuid(u), chan(power_tmp(n + ".chan")),
        pidf("/run/libvirt/qemu/" + name + ".pid") {
    std::vector<std::string> argv{MAGNET_FAKE_QEMU_BIN, chan, "60", std::to_string(duty_ms)};
    if (io_ms || vhost_ms) argv.insert(argv.end(), {std::to_string(io_ms), std::to_string(vhost_ms)});
    qemu = std::make_unique<child>(argv);
    if (!qemu->wait_for_stderr("ready")) ADD_FAILURE() << qemu->stderr_text();
    fs::create_directories("/run/libvirt/qemu");
    std::ofstream(pidf, std::ios::trunc) << qemu->pid() << "\n";
  }
  ~fake_vm() {
    qemu.reset();
    ::unlink(pidf.c_str());
    ::unlink(chan.c_str());
  }
  std::string domain() const {
    return "<domain type='test'><name>" + name + "</name><uuid>" + uuid +
           "</uuid><memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os><devices>"
           "<channel type='unix'><source mode='bind' path='" + chan +
           "'/><target type='virtio' name='org.magnet.view.0'/></channel></devices></domain>\n";
  }
  std::vector<guest_frame> frames() const {
    std::vector<guest_frame> out;
    std::istringstream in(qemu->stderr_text());
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] != '{') continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;  // a line still being written
      guest_frame f;
      uint64_t oldest = 0;
      if (j["stats"].size() < 2) continue;  // before the daemon's first tick of the VM
      for (const auto& s : j["stats"]) {
        if (s["index"] == 0) f.stats[s["name"].get<std::string>()] = s;
        oldest = std::max<uint64_t>(oldest, s["age_us"].get<uint64_t>());
      }
      // Values of one tick share its age, but for host.marker and the
      // delivery's own: the tick is the frame's time less the tick's age.
      if (f.stats.count("vcpu.count")) oldest = f.stats["vcpu.count"]["age_us"].get<uint64_t>();
      f.at_ns = j["ts_ns"].get<uint64_t>() - oldest * 1000;
      out.push_back(std::move(f));
    }
    return out;
  }
};

// The daemon over libvirt's test driver with @vms, delivering into them
// over their view channels (no vsock), the sched probe on (their vCPU run
// time), /metrics served.
struct delivering_daemon {
  std::string sock = power_tmp("deliver.sock"), node = power_tmp("deliver-node.xml");
  std::unique_ptr<child> d;
  int port = 0;
  delivering_daemon(const std::vector<const fake_vm*>& vms, std::vector<std::string> extra) {
    std::ofstream f(node, std::ios::trunc);
    f << "<node>\n";
    for (const auto* vm : vms) f << vm->domain();
    f << "</node>\n";
    f.close();
    std::vector<std::string> argv = {MAGNET_BIN, "-v", "host", "--config", "/dev/null", "--uri", "test://" + node,
                                     "--socket", sock, "--probes", "net.dev,sched", "--vsock", "off",
                                     "--http", "127.0.0.1:0", "--duration", "60"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    d = std::make_unique<child>(argv);
  }
  ~delivering_daemon() {
    d.reset();
    ::unlink(node.c_str());
    ::unlink(sock.c_str());
  }
  ::testing::AssertionResult up(const std::vector<const fake_vm*>& vms) {
    if (!d->wait_for_stderr("[started]")) return ::testing::AssertionFailure() << d->stderr_text();
    port = test::metrics_port(d->stderr_text());
    if (!port) return ::testing::AssertionFailure() << "no /metrics line: " << d->stderr_text();
    for (const auto* vm : vms)
      if (!d->wait_for_stderr("connected to view channel " + vm->chan) || !vm->qemu->wait_for_stderr("welcome"))
        return ::testing::AssertionFailure() << d->stderr_text() << "\n" << vm->qemu->stderr_text();
    return ::testing::AssertionSuccess();
  }
};

// /metrics read while the daemon ticks, with the monotonic times before the
// request and after the reply.
struct timed_scrape {
  uint64_t start = 0, end = 0;
  std::string page;
};

// The tick whose values a scrape shows, from the ticks the guests saw: the
// last one before the request when the next one they saw came after the
// reply and is the very next tick (100 ms later: none was missed between).
// 0 when the scrape cannot be placed so.
uint64_t tick_of(const timed_scrape& s, const std::set<uint64_t>& ticks) {
  auto next = ticks.upper_bound(s.start);
  if (next == ticks.begin() || next == ticks.end()) return 0;
  const uint64_t before = *std::prev(next);
  if (*next <= s.end || *next - before > 150'000'000) return 0;
  return before;
}

double vm_sample(const std::string& page, const std::string& family, const fake_vm& vm) {
  for (const auto& [labels, v] : samples(page, family))
    if (labels.find("domain=\"" + vm.name + "\"") != std::string::npos) return v;
  return std::nan("");
}

// Each guest gets its own power and energy, as stats of its view, and they
// are the figures /metrics has for its VM at the same tick, to the last
// digit; the other VM's differ.  The source says RAPL; no model error.
TEST(PowerMetrics, EachGuestGetsItsOwnPowerAsOnMetricsAtTheSameTick) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  rapl_tree tree;
  fake_vm a("mgpwa", "11111111-2222-3333-4444-5555555555a1", 1), b("mgpwb", "11111111-2222-3333-4444-5555555555b2", 4);
  delivering_daemon t({&a, &b}, {"--powercap-root", tree.root});
  ASSERT_TRUE(t.up({&a, &b}));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the meter's window full
  std::vector<timed_scrape> scrapes;
  for (int i = 0; i < 30; ++i) {
    timed_scrape s;
    s.start = monotonic();
    s.page = test::http_get(t.port, "/metrics").second;
    s.end = monotonic();
    scrapes.push_back(std::move(s));
    std::this_thread::sleep_for(std::chrono::milliseconds(37));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the frames of the last ticks
  int matched = 0;
  for (const fake_vm* vm : {&a, &b}) {
    SCOPED_TRACE(vm->name);
    const fake_vm& other = vm == &a ? b : a;
    std::map<uint64_t, guest_frame> by_tick;
    std::set<uint64_t> ticks;
    for (auto& f : vm->frames()) {
      ASSERT_EQ(f.stats.count("power.watts"), 1u) << "no power.watts in a frame: " << vm->qemu->stderr_text();
      ASSERT_EQ(f.stats.count("energy.joules"), 1u);
      ASSERT_EQ(f.stats.count("power.source"), 1u);
      EXPECT_EQ(f.stats["power.source"]["value"], MAGNET_VIEW_POWER_RAPL);
      EXPECT_EQ(f.stats.count("power.model_err_watts"), 0u) << "measured, not modelled";
      // Ages are whole microseconds: a tick is known to 1 us.
      auto near = ticks.lower_bound(f.at_ns > 2000 ? f.at_ns - 2000 : 0);
      const uint64_t tick = near != ticks.end() && *near <= f.at_ns + 2000 ? *near : f.at_ns;
      ticks.insert(tick);
      by_tick[tick] = f;
    }
    ASSERT_GT(ticks.size(), 20u) << vm->qemu->stderr_text();
    for (const auto& s : scrapes) {
      const uint64_t tick = tick_of(s, ticks);
      if (!tick) continue;
      ++matched;
      const auto& f = by_tick.at(tick);
      const double w = vm_sample(s.page, "magnet_vm_power_watts", *vm);
      const double e = vm_sample(s.page, "magnet_vm_energy_joules_total", *vm);
      EXPECT_TRUE(f.stats.at("power.watts")["valid"].get<bool>());
      EXPECT_DOUBLE_EQ(f.stats.at("power.watts")["value"].get<double>(), w) << "the same tick's";
      EXPECT_DOUBLE_EQ(f.stats.at("energy.joules")["value"].get<double>(), e) << "the same tick's";
      EXPECT_GE(f.stats.at("power.watts")["window_us"].get<uint32_t>(), 1'000'000u);
      EXPECT_EQ(f.stats.at("energy.joules")["window_us"], 0) << "a total";
      EXPECT_NE(f.stats.at("energy.joules")["value"].get<double>(),
                vm_sample(s.page, "magnet_vm_energy_joules_total", other))
          << "the other VM's";
    }
    // Its vCPU ran: a share of its own, more for the busier VM.
    const auto& last = by_tick.rbegin()->second;
    EXPECT_GT(last.stats.at("power.watts")["value"].get<double>(), 0) << vm->qemu->stderr_text();
    EXPECT_GT(last.stats.at("energy.joules")["value"].get<double>(), 0);
  }
  EXPECT_GE(matched, 4) << "scrapes placed at a tick both guests saw, of 60";
  const auto fa = a.frames(), fb = b.frames();
  EXPECT_GT(fb.back().stats.at("energy.joules")["value"].get<double>(),
            fa.back().stats.at("energy.joules")["value"].get<double>())
      << "b's vCPU runs four times as long as a's";
}

// The CPU time so far of each thread of @pid by name, in seconds
// (/proc/PID/task/*/schedstat, the kernel's own figure).
std::map<std::string, double> threads_cpu(pid_t pid) {
  std::map<std::string, double> out;
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& e : fs::directory_iterator(task)) {
    std::ifstream comm(e.path() / "comm"), stat(e.path() / "schedstat");
    std::string name;
    uint64_t ns = 0;
    if (std::getline(comm, name) && stat >> ns) out[name] += static_cast<double>(ns) / 1e9;
  }
  return out;
}

// A VM's vhost workers and QEMU's I/O threads are its work too: three VMs
// whose vCPU threads run alike (1 ms in 10), b with an I/O thread ("IO
// iothread1") and c with a vhost worker ("vhost-PID", a thread of its QEMU
// as since Linux 6.4) running 4 ms in 10 more.  Over the same seconds each
// VM's energy against a's is its QEMU's threads' CPU time against a's (all
// of them count: the vCPU's run time from the sched probe, the others from
// /proc), not its vCPU's alone (as before these threads were read).  What
// the threads get of a shared machine is measured, not assumed.
TEST(PowerMetrics, VhostWorkersAndIoThreadsCountForTheirVm) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  rapl_tree tree;
  fake_vm a("mghta", "11111111-2222-3333-4444-5555555555f1", 1),
      b("mghtb", "11111111-2222-3333-4444-5555555555f2", 1, 4, 0),
      c("mghtc", "11111111-2222-3333-4444-5555555555f3", 1, 0, 4);
  delivering_daemon t({&a, &b, &c}, {"--powercap-root", tree.root});
  ASSERT_TRUE(t.up({&a, &b, &c}));
  // The threads' files are read as the daemon runs: its privileges dropped,
  // under its syscall filter.
  EXPECT_NE(t.d->stderr_text().find("[privileges] capabilities kept: "), std::string::npos) << t.d->stderr_text();
  EXPECT_NE(t.d->stderr_text().find("[seccomp] syscall filter on"), std::string::npos) << t.d->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // every VM past its baseline
  std::map<const fake_vm*, std::map<std::string, double>> cpu1, cpu2;
  for (const fake_vm* vm : {&a, &b, &c}) cpu1[vm] = threads_cpu(vm->qemu->pid());
  const std::string p1 = test::http_get(t.port, "/metrics").second;
  std::this_thread::sleep_for(std::chrono::seconds(4));
  for (const fake_vm* vm : {&a, &b, &c}) cpu2[vm] = threads_cpu(vm->qemu->pid());
  const std::string p2 = test::http_get(t.port, "/metrics").second;
  struct work {
    double joules = 0, all_s = 0, vcpu_s = 0;
  };
  std::map<const fake_vm*, work> w;
  for (const fake_vm* vm : {&a, &b, &c}) {
    w[vm].joules = vm_sample(p2, "magnet_vm_energy_joules_total", *vm) -
                   vm_sample(p1, "magnet_vm_energy_joules_total", *vm);
    for (const auto& [name, s2] : cpu2[vm]) {
      const double ran = s2 - cpu1[vm][name];
      w[vm].all_s += ran;
      if (name == "CPU 0/KVM") w[vm].vcpu_s += ran;
    }
    std::printf("[power] %s: %.3f J in 4 s; its QEMU's threads ran %.3f s, its vCPU %.3f s\n", vm->name.c_str(),
                w[vm].joules, w[vm].all_s, w[vm].vcpu_s);
  }
  ASSERT_GT(w[&a].joules, 0) << "its vCPU ran: " << p2;
  for (const fake_vm* vm : {&b, &c}) {
    SCOPED_TRACE(vm->name);
    const double all = w[vm].all_s / w[&a].all_s, vcpu = w[vm].vcpu_s / w[&a].vcpu_s;
    ASSERT_GT(all, 1.5 * vcpu) << "its helper thread did not get enough CPU here to tell";
    const double got = w[vm].joules / w[&a].joules;
    EXPECT_NEAR(got, all, 0.25 * all) << "its energy over a's: " << got << "; its threads' CPU time over a's: "
                                      << all << "; its vCPU's over a's: " << vcpu;
  }
  // The page still adds up.
  const double host = samples(p2, "magnet_host_energy_joules_total")["{source=\"rapl\"}"];
  double sum = 0;
  for (const auto& [labels, j] : samples(p2, "magnet_vm_energy_joules_total")) sum += j;
  for (const auto& [labels, j] : samples(p2, "magnet_host_energy_part_joules_total")) sum += j;
  EXPECT_NEAR(sum, host, 0.01 * host) << p2;
  EXPECT_EQ(t.d->stderr_text().find("[power] /"), std::string::npos) << "no reading failed: " << t.d->stderr_text();
}

// magnet top: W, each VM's power, in the table and as power_watts in the
// JSON, as on /metrics; the help says what it is.
TEST(PowerMetrics, TopShowsEachVmsPower) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  rapl_tree tree;
  fake_vm a("mgtpa", "11111111-2222-3333-4444-5555555555c1", 2);
  delivering_daemon t({&a}, {"--powercap-root", tree.root});
  ASSERT_TRUE(t.up({&a}));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto j = test::run({MAGNET_BIN, "top", "--socket", t.sock, "--json", "--count", "1"});
  ASSERT_EQ(j.status, 0) << j.err;
  auto top = nlohmann::json::parse(j.out);
  ASSERT_EQ(top["vms"].size(), 1u) << j.out;
  ASSERT_TRUE(top["vms"][0]["power_watts"].is_number()) << j.out;
  const double w = top["vms"][0]["power_watts"].get<double>();
  EXPECT_GT(w, 0) << j.out;
  EXPECT_LT(w, rapl_tree::kWatts0 + rapl_tree::kWatts1) << j.out;
  auto text = test::run({MAGNET_BIN, "top", "--socket", t.sock, "--count", "1"});
  ASSERT_EQ(text.status, 0) << text.err;
  std::istringstream in(text.out);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  ASSERT_GT(header.size(), 2u);
  EXPECT_EQ(header.substr(header.size() - 2), " W") << header;
  const double shown = std::stod(row.substr(row.find_last_of(' ') + 1));
  EXPECT_NEAR(shown, w, std::max(1.0, 0.5 * w)) << "a second later: " << row;
  auto help = test::run({MAGNET_BIN, "top", "--help"});
  EXPECT_NE(help.out.find("W:\nits share of the host's power in watts"), std::string::npos) << help.out;
}

// Without a power source the guest gets no power stats at all (not 0), top
// shows '-' and its JSON null; with a model and no RAPL, power.source says
// so and the model's stated error comes as power.model_err_watts.
TEST(PowerMetrics, NoSourceNoPowerStatsAModelItsSourceAndError) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string empty = power_tmp("empty-powercap2"), model = power_tmp("model2.conf");
  struct cleanup {
    std::string dir, file;
    ~cleanup() {
      fs::remove_all(dir);
      ::unlink(file.c_str());
    }
  } c{empty, model};
  fs::create_directories(empty);
  {
    fake_vm a("mgnpa", "11111111-2222-3333-4444-5555555555d1", 2);
    delivering_daemon t({&a}, {"--powercap-root", empty});
    ASSERT_TRUE(t.up({&a}));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const auto frames = a.frames();
    ASSERT_GT(frames.size(), 5u) << a.qemu->stderr_text();
    for (const auto& f : frames) {
      EXPECT_EQ(f.stats.count("vcpu.count"), 1u) << "its other stats come";
      for (const char* n : {"power.watts", "energy.joules", "power.source", "power.model_err_watts"})
        EXPECT_EQ(f.stats.count(n), 0u) << n << " without a power source";
    }
    auto j = test::run({MAGNET_BIN, "top", "--socket", t.sock, "--json", "--count", "1"});
    ASSERT_EQ(j.status, 0) << j.err;
    auto top = nlohmann::json::parse(j.out);
    ASSERT_EQ(top["vms"].size(), 1u) << j.out;
    ASSERT_TRUE(top["vms"][0].contains("power_watts")) << j.out;
    EXPECT_TRUE(top["vms"][0]["power_watts"].is_null()) << j.out;
    auto text = test::run({MAGNET_BIN, "top", "--socket", t.sock, "--count", "1"});
    ASSERT_EQ(text.status, 0) << text.err;
    EXPECT_NE(text.out.find(" -\n"), std::string::npos) << text.out;
  }
  std::ofstream(model, std::ios::trunc) << "idle = 86\nfull = 117\npoint = 50% 102\nerror = 20%\n";
  fake_vm a("mgmpa", "11111111-2222-3333-4444-5555555555e1", 2);
  delivering_daemon t({&a}, {"--powercap-root", empty, "--power-model", model});
  ASSERT_TRUE(t.up({&a}));
  EXPECT_NE(t.d->stderr_text().find("1 point between, error 20% above idle"), std::string::npos)
      << t.d->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto frames = a.frames();
  ASSERT_GT(frames.size(), 5u) << a.qemu->stderr_text();
  const auto& f = frames.back();
  ASSERT_EQ(f.stats.count("power.source"), 1u) << a.qemu->stderr_text();
  EXPECT_EQ(f.stats.at("power.source")["value"], MAGNET_VIEW_POWER_MODEL);
  ASSERT_EQ(f.stats.count("power.model_err_watts"), 1u);
  const double w = f.stats.at("power.watts")["value"].get<double>();
  EXPECT_GT(w, 0);
  EXPECT_LE(w, 117 - 86) << "a share of the power above idle";
  EXPECT_TRUE(f.stats.at("power.model_err_watts")["valid"].get<bool>());
  EXPECT_DOUBLE_EQ(f.stats.at("power.model_err_watts")["value"].get<double>(), 0.2 * w);
}

}  // namespace
}  // namespace magnet
