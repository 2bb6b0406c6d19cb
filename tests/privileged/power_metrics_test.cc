// magnet host's power figures on /metrics against a real daemon that follows
// two VMs of libvirt's test driver (g1, g2), its RAPL a synthetic powercap
// tree (--powercap-root) whose counters this test advances while it runs,
// one of them wrapping every two seconds: the host's watts are the rate
// written, and the VMs', idle and own joules add up to the host's.  And the
// daemon without a power source (none of it on /metrics), with a model and
// no RAPL, and with a tree it cannot read (it stops, naming the file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>
#include <tuple>

#include "http.h"
#include "proc.h"

namespace magnet {
namespace {

namespace fs = std::filesystem;
using test::child;

std::string tmp(const std::string& what) { return "/tmp/magnet-power-" + std::to_string(getpid()) + "-" + what; }

std::string node_file() {
  const std::string path = tmp("node.xml");
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
  std::string root = tmp("powercap");
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
  std::string sock = tmp("host.sock");
  std::unique_ptr<child> d;
  int port = 0;
  explicit daemon_run(std::vector<std::string> extra) {
    std::vector<std::string> argv = {MAGNET_BIN, "-v",        "host",         "--config", "/dev/null", "--uri",
                                     "test://" + node_file(), "--socket",     sock,       "--probes",  "net.dev",
                                     "--no-deliver",          "--http",       "127.0.0.1:0", "--duration", "60"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    d = std::make_unique<child>(argv);
  }
  ~daemon_run() {
    d.reset();
    ::unlink(tmp("node.xml").c_str());
  }
  ::testing::AssertionResult up() {
    if (!d->wait_for_stderr("[started]")) return ::testing::AssertionFailure() << d->stderr_text();
    std::smatch m;
    const std::string log = d->stderr_text();
    if (!std::regex_search(log, m, std::regex(R"(\[http\] serving /metrics on http://127\.0\.0\.1:(\d+)/metrics)")))
      return ::testing::AssertionFailure() << "no /metrics line: " << log;
    port = std::stoi(m[1]);
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
  const std::string model = tmp("model.conf");
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
  const std::string path = tmp("page");
  std::ofstream(path, std::ios::trunc) << p2;
  auto lint = test::run({"sh", "-c", "promtool check metrics < " + path});
  EXPECT_EQ(lint.status, 0) << lint.out << lint.err;
  ::unlink(path.c_str());
  EXPECT_EQ(t.d->stderr_text().find("[power] /"), std::string::npos) << "no reading failed: " << t.d->stderr_text();
}

TEST(PowerMetrics, NoSourceNoFiguresTheModelWithoutRaplAndAnUnreadableTreeStopsTheDaemon) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string empty = tmp("empty-powercap");
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
    const std::string model = tmp("model.conf");
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

}  // namespace
}  // namespace magnet
