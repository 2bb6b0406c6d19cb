// magnet host --http scraped by a real Prometheus, in the direct lab: two
// guests send UDP at different rates, Prometheus (scrape interval 1 s; it
// asks for OpenMetrics, so its strict parser reads the page) stores the
// series, and its HTTP API answers with each VM's own figures, labelled
// with that VM's domain and UUID, agreeing with what iperf3 measured.
// And the live dashboard in a real browser (Debian's chromium driven by
// playwright-core, tests/e2e/browser/): both VMs' panels live during
// traffic, agreeing with `magnet top --json`, and the power chart (a power
// model given) with the host's and each VM's series; a tenant token sees its
// VM alone, and no host power.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "http.h"
#include "lab_fixture.h"

namespace magnet::e2e {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string UrlEncode(const std::string& s) {
  std::string o;
  char b[4];
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      o += static_cast<char>(c);
    } else {
      std::snprintf(b, sizeof b, "%%%02X", c);
      o += b;
    }
  }
  return o;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class MetricsDirect : public TwoGuestDirectSuite {};

// An instant query: the result vector (empty, and a test failure, when the
// API does not answer with success).
json Query(int port, const std::string& q, double at) {
  char t[32];
  std::snprintf(t, sizeof t, "%.3f", at);
  auto [status, body] = test::http_get(port, "/api/v1/query?query=" + UrlEncode(q) + "&time=" + t);
  auto j = json::parse(body, nullptr, false);
  if (status != 200 || j.is_discarded() || j.value("status", "") != "success") {
    ADD_FAILURE() << "query " << q << ": HTTP " << status << ": " << body.substr(0, 500);
    return json::array();
  }
  return j["data"]["result"];
}

// The value of the series of @result whose domain is @domain; -1 if none.
double ValueOf(const json& result, const std::string& domain) {
  for (const auto& s : result)
    if (s["metric"].value("domain", "") == domain) return std::stod(s["value"][1].get<std::string>());
  return -1;
}

// The port a daemon started with `--http 127.0.0.1:0` bound: group 1 of
// @re in its log at @path, once the line is there; -1 after a readiness bound.
int LoggedPort(const std::string& path, const std::string& re) {
  std::smatch m;
  std::string log;
  const std::regex line(re);
  if (!WaitFor([&] { return std::regex_search(log = ReadFileText(path), m, line); }, LabBounds().Ready())) return -1;
  return std::stoi(m[1]);
}

TEST_F(MetricsDirect, PrometheusScrapesPerVmSeriesThatAgreeWithIperf3) {
  const std::string art = ArtifactDir("MetricsDirect.Prometheus");
  const std::string magnet = BuildDir() + "/host/magnet";
  const std::string sock = "/tmp/magnet-e2e-metrics-" + std::to_string(getpid()) + ".sock";
  Background daemon(magnet + " -v host --socket " + sock + " --http 127.0.0.1:0 --duration " +
                        std::to_string(bounds().Test()),
                    art + "/host.log");
  const int port = LoggedPort(art + "/host.log", R"(\[http\] serving /metrics on http://127\.0\.0\.1:(\d+)/)");
  ASSERT_GT(port, 0) << ReadFileText(art + "/host.log");

  // The lab's domains and UUIDs, from libvirt.
  std::map<std::string, std::string> uuid;
  for (const std::string g : {"g1", "g2"}) {
    auto r = RunProcess({"virsh", "-c", "qemu:///system", "domuuid", g}, bounds().Quick());
    ASSERT_EQ(r.status, 0) << r.Describe();
    uuid[g] = Trim(r.out);
    ASSERT_EQ(uuid[g].size(), 36u) << r.out;
  }
  // The daemon knows both (its registry's first pass).
  std::string page;
  ASSERT_TRUE(WaitFor(
      [&] {
        page = test::http_get(port, "/metrics").second;
        for (const auto& [g, u] : uuid)
          if (page.find("magnet_vm_info{domain=\"" + g + "\",uuid=\"" + u + "\"") == std::string::npos) return false;
        return true;
      },
      bounds().Ready()))
      << page.substr(0, 3000);

  // Prometheus, scraping every second; ended by PID however the test ends.
  const int pport = test::free_port();
  ASSERT_GT(pport, 0);
  const std::string tsdb = art + "/tsdb";
  fs::remove_all(tsdb);
  std::ofstream(art + "/prometheus.yml", std::ios::trunc)
      << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
         "scrape_configs:\n  - job_name: magnet\n    static_configs:\n      - targets: ['127.0.0.1:"
      << port << "']\n";
  Background prom("prometheus --config.file=" + art + "/prometheus.yml --storage.tsdb.path=" + tsdb +
                      " --web.listen-address=127.0.0.1:" + std::to_string(pport),
                  art + "/prometheus.log");
  ASSERT_TRUE(WaitFor([&] { return test::http_get(pport, "/-/ready").first == 200; }, bounds().Ready()))
      << ReadFileText(art + "/prometheus.log").substr(0, 3000);
  ASSERT_TRUE(WaitFor([&] { return ValueOf(Query(pport, "magnet_vm_info", Now()), "g1") == 1; }, bounds().Ready()))
      << "Prometheus has no magnet_vm_info for g1: " << ReadFileText(art + "/prometheus.log").substr(0, 3000);
  {
    auto up = Query(pport, "up{job=\"magnet\"}", Now());
    ASSERT_EQ(up.size(), 1u) << up.dump();
    EXPECT_EQ(up[0]["value"][1], "1") << "the OpenMetrics page parsed: " << up.dump();
  }

  // UDP from each guest at its own rate to iperf3 servers in the lab network.
  struct guest {
    std::string name;
    int port;
    const char* rate;
    std::string json;
  };
  std::vector<guest> gs = {{"g1", 5621, "20M", ""}, {"g2", 5622, "5M", ""}};
  const double seconds = 20;
  std::vector<std::unique_ptr<Background>> servers;
  for (auto& g : gs) {
    g.json = art + "/iperf-" + g.name + ".json";
    ::unlink(g.json.c_str());
    servers.push_back(std::make_unique<Background>("ip netns exec magnetlab timeout " +
                                                       std::to_string(bounds().Linger(seconds)) +
                                                       " iperf3 -s -1 -B 10.77.0.1 -p " + std::to_string(g.port) + " -J",
                                                   g.json));
    ASSERT_TRUE(WaitFor([&] { return Listening("magnetlab", g.port); }, bounds().Ready()))
        << "iperf3 server on " << g.port;
  }
  usleep(2500000);  // two scrapes of the counters before the traffic
  const double t_before = Now();
  auto client = [&](const guest& g) {
    return lab()->Run(g.name, "iperf3 -c 10.77.0.1 -p " + std::to_string(g.port) + " -u -b " + g.rate +
                                  " -l 1400 -t " + std::to_string(static_cast<int>(seconds)) +
                                  " >/dev/null 2>&1; echo rc=$?",
                      bounds().Work(seconds));
  };
  const double t_start = Now();
  auto second = std::async(std::launch::async, client, gs[1]);
  auto first = client(gs[0]);
  for (const auto& c : {first, second.get()}) {
    ASSERT_EQ(c.status, 0) << c.Describe();
    ASSERT_NE(c.out.find("rc=0"), std::string::npos) << c.Describe();
  }
  usleep(3500000);  // the last bytes counted (100 ms tick) and scraped (1 s)
  const double t_after = Now();

  const std::string tx = "magnet_vm_network_transmit_bytes_total";
  const json before = Query(pport, tx, t_before), after = Query(pport, tx, t_after);
  // Mid-traffic: the rate over 10 s lying inside the 20 s of sending.
  const json rate = Query(pport, "rate(" + tx + "[10s])", t_start + 16);
  // Every series is one VM's: its domain with that domain's UUID.
  for (const json* r : {&before, &after, &rate}) {
    EXPECT_EQ(r->size(), 2u) << r->dump();
    for (const auto& s : *r) {
      const std::string d = s["metric"].value("domain", "");
      ASSERT_TRUE(uuid.count(d)) << "a series of no lab VM: " << s.dump();
      EXPECT_EQ(s["metric"].value("uuid", ""), uuid[d]) << s.dump();
    }
  }
  for (const auto& g : gs) {
    SCOPED_TRACE(g.name);
    json ip;
    ASSERT_TRUE(WaitFor([&] { return !(ip = json::parse(ReadFileText(g.json), nullptr, false)).is_discarded() &&
                                     ip.contains("end"); },
                        bounds().Quick()))
        << ReadFileText(g.json).substr(0, 2000);
    const double iperf_bytes = ip["end"]["sum_received"]["bytes"].get<double>();
    ASSERT_GT(iperf_bytes, 1e6) << ip.dump().substr(0, 2000);
    // At the tap each 1400-byte datagram has its IP and UDP headers: 1428.
    const double wire = 1428.0 / 1400.0;
    const double counted = ValueOf(after, g.name) - ValueOf(before, g.name);
    EXPECT_NEAR(counted / (iperf_bytes * wire), 1.0, 0.05)
        << "Prometheus: " << counted << " bytes sent by " << g.name << ", iperf3 received " << iperf_bytes;
    // A TCG guest sends in bursts: 5 % plus twice the standard error of
    // iperf3's own per-second rates over the middle of the run (as the
    // guest view tests bound their rates).
    // The reference is iperf3's rate over the middle of its run too (the
    // interquartile mean of its seconds 4 to 18), not its whole-run average.
    const double prom_bps = ValueOf(rate, g.name) * 8;
    const auto secs = IperfSeconds(ReadFileText(g.json), 4, seconds - 2);
    const double mid_bps = InterquartileMean(secs), spread = InterquartileRelativeError(secs);
    ASSERT_GT(mid_bps, 0) << "no per-second intervals in iperf3's report";
    EXPECT_NEAR(prom_bps / (mid_bps * wire), 1.0, 0.05 + 2 * spread)
        << "rate over 10 s " << prom_bps / 1e6 << " Mbit/s, iperf3 " << mid_bps / 1e6
        << " Mbit/s in the middle of its run; per-second spread " << spread;
    std::printf("[e2e] %s: Prometheus counted %.0f bytes (iperf3 %.0f x 1428/1400 = %.0f), rate %.3f Mbit/s "
                "(iperf3 mid-run %.3f x 1428/1400 = %.3f; allowed %.1f %%)\n",
                g.name.c_str(), counted, iperf_bytes, iperf_bytes * wire, prom_bps / 1e6, mid_bps / 1e6,
                mid_bps * wire / 1e6, (0.05 + 2 * spread) * 100);
    RecordProperty(g.name + "_prometheus_mbps", std::to_string(prom_bps / 1e6));
    RecordProperty(g.name + "_iperf3_mbps", std::to_string(mid_bps / 1e6));
  }
  // The other families, per VM: vCPU time, and packets at about one per datagram.
  const json run = Query(pport, "sum by (domain, uuid) (rate(magnet_vm_vcpu_seconds_total[10s]))", t_start + 16);
  const json pkts = Query(pport, "increase(magnet_vm_network_transmit_packets_total[30s])", t_after);
  for (const auto& [g, u] : uuid) {
    EXPECT_GT(ValueOf(run, g), 0.5) << "run + wait + halt of one vCPU: about 1 s per s: " << run.dump();
    EXPECT_LT(ValueOf(run, g), 1.5) << run.dump();
    EXPECT_GT(ValueOf(pkts, g), 1000) << pkts.dump();
  }
  const json q = Query(pport, "magnet_vm_host_queue_seconds_bucket{le=\"+Inf\",direction=\"transmit\"}", t_after);
  EXPECT_EQ(q.size(), 2u) << "a queueing histogram per VM: " << q.dump();
  prom.Stop();
  daemon.Stop();
}

// The relative difference of @a from @b (0 when both are 0).
double RelDiff(double a, double b) {
  if (a == b) return 0;
  return std::fabs(a - b) / std::max(std::fabs(a), std::fabs(b));
}

TEST_F(MetricsDirect, DashboardInChromiumShowsBothVmsLiveAndATenantOnlyItsOwn) {
  const std::string art = ArtifactDir("MetricsDirect.Dashboard");
  ASSERT_EQ(::access("/usr/bin/chromium", X_OK), 0) << "no /usr/bin/chromium: tools/setup.sh installs Debian's chromium";
  const std::string modules = BuildDir() + "/tests/e2e/browser/node_modules";
  ASSERT_EQ(::access((modules + "/playwright-core/package.json").c_str(), R_OK), 0)
      << "playwright-core is not in the build tree: cmake --build build --target e2e_browser_modules";
  const std::string magnet = BuildDir() + "/host/magnet";
  const std::string sock = "/tmp/magnet-e2e-dash-" + std::to_string(getpid()) + ".sock";

  // The lab's domains and UUIDs, from libvirt.
  std::map<std::string, std::string> uuid;
  for (const std::string g : {"g1", "g2"}) {
    auto r = RunProcess({"virsh", "-c", "qemu:///system", "domuuid", g}, bounds().Quick());
    ASSERT_EQ(r.status, 0) << r.Describe();
    uuid[g] = Trim(r.out);
    ASSERT_EQ(uuid[g].size(), 36u) << r.out;
  }
  // An operator token and g1's tenant token (random, mode 0600).
  auto token = [] {
    std::ifstream u("/dev/urandom", std::ios::binary);
    std::string t;
    const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for (int i = 0; i < 32; ++i) t += abc[static_cast<unsigned char>(u.get()) % 62];
    return t;
  };
  const std::string op = token(), tenant = token(), tokens = art + "/tokens";
  {
    std::ofstream f(tokens, std::ios::trunc);
    f << op << " all\n" << tenant << " g1\n";
  }
  ASSERT_EQ(::chmod(tokens.c_str(), 0600), 0);
  // A power model (the lab's host has no RAPL): the power chart has data.
  const std::string model = art + "/power-model.conf";
  std::ofstream(model, std::ios::trunc) << "# HP ProLiant ML110 G4, SPECpower_ssj2008\nidle = 86\nfull = 117\n";
  // One stream event per tick (100 ms): the page is at most a tick behind
  // `magnet top`, which the comparison below relies on.
  Background daemon(magnet + " -v host --socket " + sock + " --http 127.0.0.1:0 --http-tokens " + tokens +
                        " --http-stream-interval 100ms --power-model " + model + " --duration " +
                        std::to_string(bounds().Test()),
                    art + "/host.log");
  const int port = LoggedPort(art + "/host.log", R"(\[http\] dashboard on http://127\.0\.0\.1:(\d+)/ )");
  ASSERT_GT(port, 0) << ReadFileText(art + "/host.log");
  ASSERT_TRUE(WaitFor([&] {
    auto r = RunProcess({magnet, "top", "--socket", sock, "--json", "--count", "1"}, bounds().Quick());
    auto j = json::parse(r.out, nullptr, false);
    return !j.is_discarded() && j["vms"].size() == 2;
  }, bounds().Ready())) << "the daemon does not know both guests";

  // UDP from each guest at its own rate, for longer than the browser needs.
  struct guest {
    std::string name;
    int port;
    const char* rate;
  };
  const std::vector<guest> gs = {{"g1", 5631, "20M"}, {"g2", 5632, "5M"}};
  const int seconds = 60;
  std::vector<std::unique_ptr<Background>> servers;
  for (const auto& g : gs) {
    servers.push_back(std::make_unique<Background>("ip netns exec magnetlab timeout " +
                                                       std::to_string(bounds().Linger(seconds)) +
                                                       " iperf3 -s -1 -B 10.77.0.1 -p " + std::to_string(g.port),
                                                   art + "/iperf-server-" + g.name + ".log"));
    ASSERT_TRUE(WaitFor([&] { return Listening("magnetlab", g.port); }, bounds().Ready()))
        << "iperf3 server on " << g.port;
  }
  std::vector<std::future<ProcResult>> clients;
  for (const auto& g : gs)
    clients.push_back(std::async(std::launch::async, [&, g] {
      return lab()->Run(g.name, "iperf3 -c 10.77.0.1 -p " + std::to_string(g.port) + " -u -b " + g.rate +
                                    " -l 1400 -t " + std::to_string(seconds) + " >/dev/null 2>&1; echo rc=$?",
                        bounds().Work(seconds));
    }));
  // Traffic seen by the daemon on both taps before the browser opens.
  ASSERT_TRUE(WaitFor([&] {
    auto r = RunProcess({magnet, "top", "--socket", sock, "--json", "--count", "1"}, bounds().Quick());
    auto j = json::parse(r.out, nullptr, false);
    if (j.is_discarded()) return false;
    int busy = 0;
    for (const auto& v : j["vms"]) busy += v.value("tx_mbps", 0.0) > 1;
    return busy == 2;
  }, bounds().Ready())) << "no traffic from both guests";

  json cfg = {{"url", "http://127.0.0.1:" + std::to_string(port)},
              {"operator_token", op},
              {"tenant_token", tenant},
              {"tenant_vm", "g1"},
              {"other_vm", "g2"},
              {"other_uuid", uuid["g2"]},
              {"vms", {"g1", "g2"}},
              {"magnet", magnet},
              {"socket", sock},
              {"out_dir", art},
              {"snapshots", 7},
              {"need_traffic", true},
              {"need_power", true},
              {"quick_s", bounds().Quick()},
              {"ready_s", bounds().Ready()}};
  std::ofstream(art + "/browser-config.json", std::ios::trunc) << cfg.dump(1);
  // The browser's snapshots fall within the traffic's seconds; starting chromium is the crunch.
  auto b = RunProcess({"node", SourceDir() + "/tests/e2e/browser/dashboard_check.cjs", art + "/browser-config.json"},
                      bounds().Work(seconds) + bounds().Crunch(), {{"NODE_PATH", modules}});
  std::ofstream(art + "/browser.log", std::ios::trunc) << b.out << b.err;
  const json res = json::parse(ReadFileText(art + "/dashboard-result.json"), nullptr, false);
  ASSERT_EQ(b.status, 0) << b.Describe() << "\n" << (res.is_discarded() ? "" : res.value("failure", ""));
  ASSERT_FALSE(res.is_discarded());

  // The operator: both panels, live, non-zero, as `magnet top` says.
  const json& o = res["operator"];
  EXPECT_EQ(o["status"], 200);
  EXPECT_EQ(o["status_text"], "live");
  EXPECT_EQ(o["picker"], json({"", "g1", "g2"}));
  EXPECT_EQ(o["errors"], json::array()) << "console errors in the page";
  EXPECT_EQ(o["offsite"], json::array()) << "requests to anything but the daemon (a CDN?)";
  ASSERT_GE(o["snapshots"].size(), 5u) << "pairs of the page's numbers and magnet top";
  // Per VM and figure: the median over the pairs of |page - top| / max
  // (one pair may straddle a tick: the page then shows the one before).
  for (const std::string g : {"g1", "g2"}) {
    for (const auto& [attr, field] : std::vector<std::pair<std::string, std::string>>{
             {"tx-mbps", "tx_mbps"}, {"vcpu-run", "vcpu_run"}, {"vcpu-halt", "vcpu_halt"},
             {"power-watts", "power_watts"}}) {
      std::vector<double> diffs;
      double page_sum = 0;
      for (const auto& s : o["snapshots"]) {
        const double page = std::stod(s["dom"][g][attr].get<std::string>());
        double top = -1;
        for (const auto& v : s["top"]["vms"])
          if (v["name"] == g) top = v[field].get<double>();
        ASSERT_GE(top, 0) << g << " missing in magnet top";
        diffs.push_back(RelDiff(page, top));
        page_sum += page;
      }
      std::sort(diffs.begin(), diffs.end());
      const double median = diffs[diffs.size() / 2];
      EXPECT_LE(median, 0.05) << g << " " << attr << ": page and magnet top differ by " << median * 100 << " %";
      if (attr == "tx-mbps") {
        EXPECT_GT(page_sum / o["snapshots"].size(), 1.0) << g << ": no live bandwidth on its panel";
      }
      std::printf("[e2e] dashboard %s %s: mean on the page %.3f, median difference from magnet top %.2f %%\n",
                  g.c_str(), attr.c_str(), page_sum / o["snapshots"].size(), median * 100);
    }
  }
  // The power chart: the host's and each VM's series, drawn, with samples;
  // its "no power source" note hidden.
  const json& pw = o["power"];
  EXPECT_FALSE(pw["hidden"].get<bool>()) << pw.dump();
  EXPECT_FALSE(pw["chart_hidden"].get<bool>()) << pw.dump();
  EXPECT_TRUE(pw["note_hidden"].get<bool>()) << pw.dump();
  EXPECT_TRUE(pw["source"] == "model" || pw["source"] == "rapl") << pw.dump();
  EXPECT_EQ(pw["series"], json({"host", "g1", "g2"})) << pw.dump();
  EXPECT_GE(pw["samples"].get<int>(), 3) << pw.dump();
  EXPECT_TRUE(pw["canvas"].get<bool>()) << "uPlot drew the chart: " << pw.dump();
  EXPECT_EQ(pw["legend"], json({"host (" + pw["source"].get<std::string>() + ")", "g1", "g2"})) << pw.dump();
  if (pw["source"] == "model") {
    const double host_w = std::stod(pw["host_watts"].get<std::string>());
    EXPECT_GE(host_w, 86 - 1e-9) << pw.dump();
    EXPECT_LE(host_w, 117 + 1e-9) << pw.dump();
  }
  for (const std::string g : {"g1", "g2"}) {
    double sum = 0;
    for (const auto& s : o["snapshots"]) sum += std::stod(s["dom"][g]["power-watts"].get<std::string>());
    EXPECT_GT(sum, 0) << g << ": its vCPU ran with traffic, no share on its panel";
  }
  EXPECT_EQ(o["drill"]["title"], "views of g1");
  EXPECT_NE(std::find(o["drill"]["views"].begin(), o["drill"]["views"].end(), "guest-tx"), o["drill"]["views"].end());
  EXPECT_GE(o["drill"]["flows"].get<int>(), 1) << "g1's flow in its guest-tx view";
  EXPECT_TRUE(o["after_pick"]["g2"]["hidden"].get<bool>()) << "picking g1 hides g2's panel";

  // The tenant: g1 alone, in the page, the stream and the API.
  const json& t = res["tenant"];
  EXPECT_EQ(t["status"], 200);
  EXPECT_EQ(t["picker"], json({"", "g1"}));
  EXPECT_EQ(t["panels"].size(), 1u) << t["panels"].dump();
  EXPECT_TRUE(t["panels"].contains("g1"));
  const std::string html = t["html"];
  EXPECT_EQ(html.find("g2"), std::string::npos) << "g2's name in the tenant's page";
  EXPECT_EQ(html.find(uuid["g2"]), std::string::npos) << "g2's UUID in the tenant's page";
  EXPECT_NE(html.find(uuid["g1"]), std::string::npos);
  ASSERT_GE(t["stream"].size(), 3u);
  for (const auto& e : t["stream"]) {
    const std::string d = e;
    EXPECT_EQ(d.find("\"g2\""), std::string::npos) << d;
    EXPECT_EQ(d.find(uuid["g2"]), std::string::npos) << d;
    EXPECT_NE(d.find("\"g1\""), std::string::npos) << d;
  }
  // The tenant's power chart: its VM's share alone, never the host's.
  const json& tp = t["power"];
  EXPECT_FALSE(tp["chart_hidden"].get<bool>()) << tp.dump();
  EXPECT_EQ(tp["series"], json({"g1"})) << tp.dump();
  EXPECT_EQ(tp["legend"], json({"g1"})) << tp.dump();
  EXPECT_EQ(tp["source"], "share") << tp.dump();
  EXPECT_EQ(tp["host_watts"], "") << tp.dump();
  EXPECT_GE(tp["samples"].get<int>(), 3) << tp.dump();
  EXPECT_EQ(t["views_own"], 200);
  EXPECT_EQ(t["views_other"], 403);
  EXPECT_EQ(t["views_other_uuid"], 403);
  EXPECT_EQ(t["metrics"], 403);
  EXPECT_EQ(t["api_vms"].get<std::string>().find("g2"), std::string::npos);
  EXPECT_EQ(t["offsite"], json::array());
  for (const std::string shot : {"dashboard-operator.png", "dashboard-operator-g1-views.png", "dashboard-tenant-g1.png"}) {
    struct stat st;
    EXPECT_EQ(::stat((art + "/" + shot).c_str(), &st), 0) << shot;
    EXPECT_GT(st.st_size, 10000) << shot;
  }
  for (auto& c : clients) {
    auto r = c.get();
    EXPECT_NE(r.out.find("rc=0"), std::string::npos) << r.Describe();
  }
  daemon.Stop();
}

}  // namespace
}  // namespace magnet::e2e
