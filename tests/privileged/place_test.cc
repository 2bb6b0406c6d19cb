// magnet place against a real fleet on this machine: two `magnet host`
// daemons, each over a libvirt test-driver host of its own (host a: 4 CPUs,
// 8 GiB; host b: 16 CPUs, 3 GiB), their power from a model file, scraped by
// a real Prometheus whose configuration `magnet fleet-config` wrote.  One VM
// of a has a vCPU thread (a magnet_fake_qemu running 3 ms in 10), so its CPU
// demand in Prometheus is real.  The plan is the one best plan of this
// fleet: b's VM to a (b's memory cannot take a's two), b emptied.  Then bad
// input: a host missing from Prometheus, a VM running in libvirt that no
// daemon follows, a libvirt URI that cannot be opened, Prometheus down.
// And --apply: libvirt's test driver has no peer-to-peer migration, so the
// first move fails, and the VM is found defined on its source (the
// rollback itself is tested with a fake migrator in tests/unit/fleet_test.cc;
// a real migration belongs to the lab).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "http.h"
#include "proc.h"

namespace magnet {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::child;

std::string place_tmp(const std::string& what) { return "/tmp/magnet-place-" + std::to_string(getpid()) + "-" + what; }

bool wait_until(const std::function<bool()>& ok, int seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return ok();
}

std::string place_domain(const std::string& name, const std::string& uuid, int vcpus, int mem_mib) {
  return "<domain type='test'><name>" + name + "</name><uuid>" + uuid + "</uuid><memory>" +
         std::to_string(mem_mib * 1024) + "</memory><vcpu>" + std::to_string(vcpus) +
         "</vcpu><os><type>hvm</type></os></domain>\n";
}

// One host: a node file for libvirt's test driver and a daemon over it.
struct fleet_host {
  std::string name, node, sock;
  std::unique_ptr<child> daemon;
  int port = 0;
  fleet_host(const std::string& n, const std::string& node_body, const std::string& model, const std::string& no_rapl)
      : name(n), node(place_tmp(n + ".xml")), sock(place_tmp(n + ".sock")) {
    std::ofstream(node, std::ios::trunc) << "<node>\n" << node_body << "</node>\n";
    daemon = std::make_unique<child>(std::vector<std::string>{
        MAGNET_BIN, "-v", "host", "--config", "/dev/null", "--uri", uri(), "--socket", sock, "--probes", "net.dev,sched",
        "--no-deliver", "--http", "127.0.0.1:0", "--duration", "120", "--power-model", model, "--powercap-root",
        no_rapl});
  }
  ~fleet_host() {
    daemon.reset();
    ::unlink(node.c_str());
  }
  std::string uri() const { return "test://" + node; }
  ::testing::AssertionResult up(const std::vector<std::string>& vms) {
    if (!daemon->wait_for_stderr("[started]")) return ::testing::AssertionFailure() << daemon->stderr_text();
    port = test::metrics_port(daemon->stderr_text());
    if (!port) return ::testing::AssertionFailure() << "no /metrics line: " << daemon->stderr_text();
    for (const auto& vm : vms)
      if (!daemon->wait_for_stderr("[vm.up] " + vm)) return ::testing::AssertionFailure() << daemon->stderr_text();
    return ::testing::AssertionSuccess();
  }
};

// A VM's vCPU run seconds on a daemon's page (summed over its vCPUs).
double run_seconds(const std::string& page, const std::string& vm) {
  const std::regex re("^magnet_vm_vcpu_seconds_total\\{domain=\"" + vm + "\",[^}]*state=\"run\"\\} (\\S+)$");
  double sum = 0;
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, re)) sum += std::stod(m[1]);
  }
  return sum;
}

const json* vm_in(const json& plan, const std::string& name) {
  for (const auto& v : plan["vms"])
    if (v["name"] == name) return &v;
  return nullptr;
}

class PlaceFleet : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
    fs::create_directories(no_rapl);
    std::ofstream(model, std::ios::trunc) << "idle = 86\nfull = 117\n";
    busy = "plcbusy" + std::to_string(getpid());
    idle = "plcidle" + std::to_string(getpid());
    lone = "plclone" + std::to_string(getpid());
    // The busy VM's QEMU: libvirt's pid file names it, as the registry reads it.
    qemu = std::make_unique<child>(std::vector<std::string>{MAGNET_FAKE_QEMU_BIN, place_tmp("busy.chan"), "120", "3"});
    ASSERT_TRUE(qemu->wait_for_stderr("ready")) << qemu->stderr_text();
    fs::create_directories("/run/libvirt/qemu");
    pidfile = "/run/libvirt/qemu/" + busy + ".pid";
    std::ofstream(pidfile, std::ios::trunc) << qemu->pid() << "\n";
    a = std::make_unique<fleet_host>(
        "a",
        "<cpu><nodes>1</nodes><sockets>1</sockets><cores>4</cores><threads>1</threads><mhz>2000</mhz></cpu>"
        "<memory>8388608</memory>\n" +
            place_domain(busy, "11111111-2222-3333-4444-5555555551a1", 2, 1024) +
            place_domain(idle, "11111111-2222-3333-4444-5555555551a2", 1, 1024),
        model, no_rapl);
    b = std::make_unique<fleet_host>("b", place_domain(lone, "11111111-2222-3333-4444-5555555551b1", 1, 2048), model,
                                     no_rapl);
    ASSERT_TRUE(a->up({busy, idle}));
    ASSERT_TRUE(b->up({lone}));
  }

  void TearDown() override {
    for (auto* p : {&fleet_prom, &global_prom, &receiver_prom}) {
      p->proc.reset();
      if (!p->tsdb.empty()) fs::remove_all(p->tsdb);
    }
    a.reset();
    b.reset();
    qemu.reset();
    if (!pidfile.empty()) ::unlink(pidfile.c_str());
    ::unlink(model.c_str());
    fs::remove_all(no_rapl);
    for (const char* f : {"prometheus.yml", "global.yml", "receiver.yml"}) ::unlink(place_tmp(f).c_str());
    ::unlink(place_tmp("busy.chan").c_str());
  }

  // A Prometheus of this test: @yml its configuration, on a free port.
  struct prometheus {
    std::unique_ptr<child> proc;
    int port = 0;
    std::string url, tsdb;
  };
  prometheus start_prometheus(const std::string& name, const std::string& yml, std::vector<std::string> flags = {}) {
    prometheus p;
    auto check = test::run({"promtool", "check", "config", yml});
    EXPECT_EQ(check.status, 0) << check.out << check.err;
    p.port = test::free_port();
    EXPECT_GT(p.port, 0);
    p.url = "http://127.0.0.1:" + std::to_string(p.port);
    p.tsdb = place_tmp(name + "-tsdb");
    fs::remove_all(p.tsdb);
    std::vector<std::string> argv = {"prometheus", "--config.file=" + yml, "--storage.tsdb.path=" + p.tsdb,
                                     "--web.listen-address=127.0.0.1:" + std::to_string(p.port)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    p.proc = std::make_unique<child>(argv);
    EXPECT_TRUE(wait_until([&] { return test::http_get(p.port, "/-/ready").first == 200; }, 30))
        << p.proc->stderr_text();
    return p;
  }

  // The fleet's Prometheus, scraping both daemons every second, from magnet
  // fleet-config's file (promtool checks it), with @append added to it.
  void start_fleet_prometheus(const std::string& append = "") {
    const std::string yml = place_tmp("prometheus.yml");
    auto cfg = test::run({MAGNET_BIN, "fleet-config", "--target", "a=127.0.0.1:" + std::to_string(a->port), "--target",
                          "b=127.0.0.1:" + std::to_string(b->port), "--scrape-interval", "1s", "-o", yml});
    ASSERT_EQ(cfg.status, 0) << cfg.err;
    std::ofstream(yml, std::ios::app) << append;
    fleet_prom = start_prometheus("fleet", yml);
    prom_url = fleet_prom.url;
  }

  test::run_result place(std::vector<std::string> extra, const std::string& url = "") {
    std::vector<std::string> argv = {MAGNET_BIN, "place",  "--prometheus", url.empty() ? prom_url : url, "--power-model",
                                     model,      "--window", "10s"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return test::run(argv, 60);
  }
  json ready_plan(const std::string& url);
  std::vector<std::string> both() const { return {"--host", "a=" + a->uri(), "--host", "b=" + b->uri()}; }

  std::string model = place_tmp("model.conf"), no_rapl = place_tmp("no-rapl"), pidfile;
  std::string busy, idle, lone, prom_url;
  prometheus fleet_prom, global_prom, receiver_prom;
  std::unique_ptr<child> qemu;
  std::unique_ptr<fleet_host> a, b;
};

// The plan from the Prometheus at @url once it has a window's worth of the
// busy VM's vCPU time (null after a bound).
json PlaceFleet::ready_plan(const std::string& url) {
  json plan;
  std::string last;
  const bool ready = wait_until(
      [&] {
        auto r = place([&] { auto v = both(); v.push_back("--json"); return v; }(), url);
        last = r.err;
        plan = json::parse(r.out, nullptr, false);
        const json* v = r.status == 0 && plan.is_object() ? vm_in(plan, busy) : nullptr;
        return v && (*v)["cpu_cores"].get<double>() > 0.01;
      },
      60);
  if (ready) return plan;
  ADD_FAILURE() << url << ": " << last << "\n" << plan.dump(1) << "\n" << a->daemon->stderr_text();
  return nullptr;
}

TEST_F(PlaceFleet, APlanFromARealPrometheusAndLibvirtThenBadInput) {
  start_fleet_prometheus();
  json plan = ready_plan(prom_url);
  ASSERT_FALSE(plan.is_null());
  // The demand against the daemon's own counters over the next 10 s.
  const double r1 = run_seconds(test::http_get(a->port, "/metrics").second, busy);
  std::this_thread::sleep_for(std::chrono::seconds(10));
  const double r2 = run_seconds(test::http_get(a->port, "/metrics").second, busy);
  auto out = place([&] { auto v = both(); v.push_back("--json"); return v; }());
  ASSERT_EQ(out.status, 0) << out.err;
  plan = json::parse(out.out);
  const json& vb = *vm_in(plan, busy);
  const double own = (r2 - r1) / 10;
  std::printf("[place] %s: %.3f cores (peak %.3f) through Prometheus, %.3f from the daemon's counters\n", busy.c_str(),
              vb["cpu_cores"].get<double>(), vb["cpu_peak_cores"].get<double>(), own);
  EXPECT_GT(own, 0.01);
  EXPECT_NEAR(vb["cpu_cores"].get<double>(), own, 0.5 * own) << "Prometheus's rate against the daemon's counters";
  EXPECT_GE(vb["cpu_peak_cores"].get<double>(), vb["cpu_cores"].get<double>());
  EXPECT_EQ(vb["host"], "a");
  EXPECT_EQ(vb["vcpus"], 2);
  EXPECT_EQ(vb["mem_bytes"], 1024.0 * 1024 * 1024);
  EXPECT_EQ(vb["migratable"], true);
  EXPECT_EQ((*vm_in(plan, idle))["cpu_cores"], 0) << "no vCPU thread: no demand";
  EXPECT_EQ((*vm_in(plan, lone))["host"], "b");
  ASSERT_EQ(plan["hosts"].size(), 2u);
  EXPECT_EQ(plan["hosts"][0]["name"], "a");
  EXPECT_EQ(plan["hosts"][0]["cpus"], 4);
  EXPECT_EQ(plan["hosts"][0]["mem_bytes"], 8.0 * 1024 * 1024 * 1024);
  for (const auto& h : plan["hosts"]) {
    EXPECT_GE(h["watts_measured"].get<double>(), 86 - 1e-9) << h.dump();  // the model's, through Prometheus
    EXPECT_LE(h["watts_measured"].get<double>(), 117 + 1e-9) << h.dump();
  }
  // The one best plan: b's VM to a, b emptied.
  ASSERT_EQ(plan["moves"].size(), 1u) << plan.dump(1);
  EXPECT_EQ(plan["moves"][0]["vm"], lone);
  EXPECT_EQ(plan["moves"][0]["from"], "b");
  EXPECT_EQ(plan["moves"][0]["to"], "a");
  EXPECT_EQ(plan["hosts"][1]["emptied"], true);
  EXPECT_GT(plan["watts_saved"].get<double>(), 0);
  auto table = place(both());
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("1 move(s), 1 host(s) emptied"), std::string::npos) << table.out;
  EXPECT_TRUE(std::regex_search(table.out, std::regex("\n1 +" + lone + " +b +a +"))) << table.out;

  // Bad input, each named.
  auto missing = place({"--host", "a=" + a->uri(), "--host", "c=" + b->uri()});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("host c is missing from Prometheus: no magnet_libvirt_up{instance=\"c\"} (instances "
                             "with a magnet daemon there: a, b)"),
            std::string::npos)
      << missing.err;
  auto stranger = place({"--host", "a=test:///default"});
  EXPECT_EQ(stranger.status, 1);
  EXPECT_NE(stranger.err.find("VM test (uuid 6695eb01-f6a4-8304-79aa-97f2502e193f) runs on host a (test:///default) "
                              "but Prometheus has no magnet_vm_info{instance=\"a\""),
            std::string::npos)
      << stranger.err;
  auto unopenable = place({"--host", "a=nosuch:///x"});
  EXPECT_EQ(unopenable.status, 1);
  EXPECT_NE(unopenable.err.find("host a: cannot open libvirt at nosuch:///x"), std::string::npos) << unopenable.err;

  // --apply: the test driver refuses peer-to-peer migration; the VM stays
  // defined on its source, said so, exit 1.
  auto apply = place([&] { auto v = both(); v.insert(v.end(), {"--apply", "--json"}); return v; }());
  EXPECT_EQ(apply.status, 1) << apply.out << apply.err;
  EXPECT_NE(apply.err.find("magnet place: moving " + lone + ": b -> a\n"), std::string::npos) << apply.err;
  EXPECT_NE(apply.err.find("--apply failed at step 1 of 1: moving " + lone + " b -> a failed: "), std::string::npos)
      << apply.err;
  EXPECT_NE(apply.err.find("p2p migration is not supported"), std::string::npos) << apply.err;
  const json applied = json::parse(apply.out, nullptr, false);
  ASSERT_TRUE(applied.contains("applied")) << apply.out;
  EXPECT_EQ(applied["applied"]["ok"], false);
  ASSERT_EQ(applied["applied"]["steps"].size(), 1u);
  EXPECT_EQ(applied["applied"]["steps"][0]["where"], "defined on b");

  // Prometheus down.
  ASSERT_EQ(fleet_prom.proc->stop(SIGTERM, 30), 0) << fleet_prom.proc->stderr_text();
  auto down = place(both());
  EXPECT_EQ(down.status, 1);
  EXPECT_NE(down.err.find("magnet place: cannot reach Prometheus at " + prom_url + ": connect: Connection refused"),
            std::string::npos)
      << down.err;
  EXPECT_TRUE(down.out.empty()) << down.out;
}

// Larger fleets (docs/placement.md, "The fleet"): a global Prometheus that
// federates the fleet's (honor_labels, match[] of the magnet job), and one
// that receives the fleet's samples by remote write.  The same plan from
// each as from the fleet's own.
TEST_F(PlaceFleet, TheSamePlanThroughFederationAndRemoteWrite) {
  const std::string receiver_yml = place_tmp("receiver.yml");
  std::ofstream(receiver_yml, std::ios::trunc) << "global:\n  scrape_interval: 1s\n";
  receiver_prom = start_prometheus("receiver", receiver_yml, {"--web.enable-remote-write-receiver"});
  start_fleet_prometheus("remote_write:\n  - url: " + receiver_prom.url + "/api/v1/write\n");
  const std::string global_yml = place_tmp("global.yml");
  std::ofstream(global_yml, std::ios::trunc)
      << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
         "scrape_configs:\n  - job_name: federate\n    honor_labels: true\n    metrics_path: /federate\n"
         "    params:\n      'match[]': ['{job=\"magnet\"}']\n"
         "    static_configs:\n      - targets: ['127.0.0.1:"
      << fleet_prom.port << "']\n";
  global_prom = start_prometheus("global", global_yml);
  for (const auto* p : {&fleet_prom, &global_prom, &receiver_prom}) ASSERT_FALSE(ready_plan(p->url).is_null());
  // A whole window in each, then the three at one moment.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  std::vector<json> plans;
  for (const auto* p : {&fleet_prom, &global_prom, &receiver_prom}) {
    auto r = place([&] { auto v = both(); v.push_back("--json"); return v; }(), p->url);
    ASSERT_EQ(r.status, 0) << p->url << ": " << r.err;
    plans.push_back(json::parse(r.out));
  }
  const json& own = plans[0];
  const double mine = (*vm_in(own, busy))["cpu_cores"].get<double>();
  for (size_t k = 1; k < plans.size(); ++k) {
    SCOPED_TRACE(k == 1 ? "federation" : "remote write");
    const json& other = plans[k];
    ASSERT_EQ(other["moves"].size(), own["moves"].size()) << other.dump(1);
    for (size_t i = 0; i < own["moves"].size(); ++i)
      for (const char* f : {"vm", "from", "to"}) EXPECT_EQ(other["moves"][i][f], own["moves"][i][f]);
    ASSERT_EQ(other["vms"].size(), own["vms"].size()) << other.dump(1);
    for (size_t i = 0; i < own["vms"].size(); ++i) {
      EXPECT_EQ(other["vms"][i]["name"], own["vms"][i]["name"]);
      EXPECT_EQ(other["vms"][i]["host"], own["vms"][i]["host"]);
    }
    const double theirs = (*vm_in(other, busy))["cpu_cores"].get<double>();
    std::printf("[place] %s: %.3f cores through %s, %.3f through the fleet's Prometheus\n", busy.c_str(), theirs,
                k == 1 ? "federation" : "remote write", mine);
    // The same samples, but for a scrape's lag behind the fleet's.
    EXPECT_NEAR(theirs, mine, 0.5 * mine);
    for (size_t i = 0; i < 2; ++i) EXPECT_FALSE(other["hosts"][i]["watts_measured"].is_null());
  }
}

}  // namespace
}  // namespace magnet
