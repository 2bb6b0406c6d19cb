// host/fleet: the Prometheus client (replies parsed, its errors against a
// server of this test on loopback), the fleet assembled from canned query
// results and libvirt facts, the plan's table and JSON, --apply's moves and
// rollback through a fake migrator, the fleet's prometheus.yml; and the
// command lines of `magnet place` and `magnet fleet-config`.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "magnet/fleet/apply.h"
#include "magnet/fleet/assemble.h"
#include "magnet/fleet/prometheus.h"
#include "magnet/fleet/prometheus_config.h"
#include "magnet/fleet/report.h"
#include "proc.h"

namespace magnet::fleet {
namespace {

using json = nlohmann::json;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ------------------------------------------------------------- replies ---

const std::string kWhere = "Prometheus at http://p:9090";

TEST(PrometheusReply, AVectorsLabelsAndValues) {
  const std::string body = R"({"status":"success","data":{"resultType":"vector","result":[
      {"metric":{"__name__":"magnet_libvirt_up","instance":"a","job":"magnet"},"value":[1700000000.5,"1"]},
      {"metric":{"uuid":"u-1"},"value":[1700000000.5,"0.25"]},
      {"metric":{"uuid":"u-2"},"value":[1700000000.5,"NaN"]},
      {"metric":{},"value":[1700000000.5,"+Inf"]}]}})";
  auto r = parse_query_reply(200, body, kWhere, "q");
  ASSERT_TRUE(r) << r.err().message;
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].labels.at("instance"), "a");
  EXPECT_EQ((*r)[0].labels.at("__name__"), "magnet_libvirt_up");
  EXPECT_EQ((*r)[0].value, 1);
  EXPECT_EQ((*r)[1].labels.at("uuid"), "u-1");
  EXPECT_DOUBLE_EQ((*r)[1].value, 0.25);
  EXPECT_TRUE(std::isnan((*r)[2].value));
  EXPECT_TRUE(std::isinf((*r)[3].value));
  EXPECT_TRUE((*r)[3].labels.empty());
  auto empty = parse_query_reply(200, R"({"status":"success","data":{"resultType":"vector","result":[]}})", kWhere, "q");
  ASSERT_TRUE(empty) << empty.err().message;
  EXPECT_TRUE(empty->empty());
}

TEST(PrometheusReply, ErrorsNameTheServerTheQueryAndWhy) {
  struct bad {
    int status;
    std::string body, want;
  };
  const std::vector<bad> cases = {
      // Prometheus's own refusal, whatever the status line.
      {400, R"({"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected <EOF>"})",
       "query 'q': bad_data: 1:5: parse error: unexpected <EOF>"},
      {503, R"({"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"})",
       "timeout: query timed out"},
      {404, "404 page not found\n", "query 'q': HTTP status 404: 404 page not found"},
      {502, "", "HTTP status 502"},
      {200, "{\"status\":\"success\",\"data\":{", "malformed JSON: "},
      {200, "<html>", "malformed JSON: "},
      {200, R"({"status":"success","data":{"resultType":"scalar","result":[1,"2"]}})",
       "a scalar where an instant vector was expected"},
      {200, R"({"status":"success"})", "a reply without data.result"},
      {200, R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}})",
       "whose value is not [time, \"number\"]"},
      {200, R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}})",
       "whose value is not"},
      {200, R"({"status":"success","data":{"resultType":"vector","result":[{"value":[1,"1"]}]}})",
       "a sample without its labels"},
      {200, R"({"status":"warning"})", "neither success nor error"},
  };
  for (const auto& c : cases) {
    auto r = parse_query_reply(c.status, c.body, kWhere, "q");
    ASSERT_FALSE(r) << c.body;
    EXPECT_TRUE(has(r.err().message, kWhere)) << r.err().message;
    EXPECT_TRUE(has(r.err().message, c.want)) << "want '" << c.want << "' in: " << r.err().message;
  }
}

TEST(PrometheusUrl, HostPortAndPrefix) {
  auto u = parse_prometheus_url("http://prom.example:9090/prometheus/");
  ASSERT_TRUE(u) << u.err().message;
  EXPECT_EQ(u->host, "prom.example");
  EXPECT_EQ(u->port, "9090");
  EXPECT_EQ(u->prefix, "/prometheus");
  auto v6 = parse_prometheus_url("http://[::1]:9090");
  ASSERT_TRUE(v6) << v6.err().message;
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->prefix, "");
  auto dflt = parse_prometheus_url("http://10.0.0.1");
  ASSERT_TRUE(dflt);
  EXPECT_EQ(dflt->port, "80");
  for (const char* bad : {"prom:9090", "http://", "http://:9090", "http://h:0", "http://h:99999", "http://h:x",
                          "http://::1:9090", "http://h:9090/?q=1", "ftp://h"})
    EXPECT_FALSE(parse_prometheus_url(bad)) << bad;
  auto tls = parse_prometheus_url("https://h:9090");
  ASSERT_FALSE(tls);
  EXPECT_TRUE(has(tls.err().message, "plain HTTP only")) << tls.err().message;
  EXPECT_EQ(url_encode("a{b=\"c\"}[5m] d"), "a%7Bb%3D%22c%22%7D%5B5m%5D%20d");
}

// ---------------------------------------------- the client on loopback ---

// A listening socket on 127.0.0.1 and a thread that answers each
// connection with @reply (or, with an empty one, reads and never answers),
// recording the request.
class canned_server {
 public:
  explicit canned_server(std::string reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 4) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n) != 0)
      ADD_FAILURE() << "cannot listen on loopback";
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~canned_server() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  std::string request() const {
    std::lock_guard lk(mu_);
    return request_;
  }

 private:
  void serve() {
    while (!stop_) {
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string req;
      char b[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = recv(c, b, sizeof b, 0);
        if (n <= 0) break;
        req.append(b, static_cast<size_t>(n));
      }
      {
        std::lock_guard lk(mu_);
        request_ = req;
      }
      if (reply_.empty()) {
        while (!stop_ && recv(c, b, sizeof b, MSG_DONTWAIT) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      } else {
        (void)!send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      }
      close(c);
    }
  }
  std::string reply_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string request_;
  std::thread thread_;
};

std::string http_reply(const std::string& status, const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

prometheus_client client_of(const std::string& url, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  return prometheus_client(parse_prometheus_url(url).value(), timeout);
}

TEST(PrometheusClient, QueriesTheApiUnderItsPrefixAndParsesTheVector) {
  canned_server s(http_reply("200 OK", R"({"status":"success","data":{"resultType":"vector","result":[
      {"metric":{"instance":"a"},"value":[1,"42.5"]}]}})"));
  const std::string url = "http://127.0.0.1:" + std::to_string(s.port()) + "/prom";
  auto r = client_of(url).query("avg_over_time(magnet_host_power_watts[10m])");
  ASSERT_TRUE(r) << r.err().message;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].value, 42.5);
  EXPECT_TRUE(has(s.request(), "GET /prom/api/v1/query?query=avg_over_time%28magnet_host_power_watts%5B10m%5D%29 HTTP/1.1\r\n"))
      << s.request();
}

TEST(PrometheusClient, StatusAndRefusalsFromTheServer) {
  canned_server s404(http_reply("404 Not Found", "404 page not found\n"));
  auto r = client_of("http://127.0.0.1:" + std::to_string(s404.port())).query("up");
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "HTTP status 404")) << r.err().message;
  canned_server bad(http_reply("400 Bad Request", R"({"status":"error","errorType":"bad_data","error":"parse error"})"));
  r = client_of("http://127.0.0.1:" + std::to_string(bad.port())).query("up{");
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "query 'up{': bad_data: parse error")) << r.err().message;
}

TEST(PrometheusClient, UnreachableNamesTheUrlAndTheSystemsReason) {
  int port = 0;
  {
    canned_server gone("x");  // a port that was free a moment ago, closed now
    port = gone.port();
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto r = client_of(url).query("up");
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "cannot reach Prometheus at " + url + ": connect: Connection refused"))
      << r.err().message;
}

TEST(PrometheusClient, ASilentServerIsATimeout) {
  canned_server silent("");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client_of("http://127.0.0.1:" + std::to_string(silent.port()), std::chrono::milliseconds(300)).query("up");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "did not answer within 300ms (--query-timeout sets this bound)"))
      << r.err().message;
  EXPECT_GE(took, 0.29);
  EXPECT_LT(took, 5.0);
}

// ------------------------------------------------------------ assembly ---

sample s(std::map<std::string, std::string> labels, double v) { return {std::move(labels), v}; }

power::power_model straight(double idle, double full) {
  power::power_model m;
  m.points = {{0, idle}, {1, full}};
  return m;
}

domain_facts dom(const std::string& name, const std::string& uuid, double vcpus, double mem_gib) {
  return {name, uuid, vcpus, mem_gib * (1ull << 30), true, true};
}

// Hosts a (instance "a") and b (instance "10.0.0.2:9477", mapped), VMs
// v1, v2 on a and v3 on b; Prometheus has both daemons.
struct canned_fleet {
  std::vector<host_input> hosts;
  prom_inputs in;
  canned_fleet() {
    host_input a{"a", "test:///a", "a", 1e9, straight(86, 117), {8, 16.0 * (1ull << 30), {}}};
    a.facts.domains = {dom("v2", "u-2", 2, 2), dom("v1", "u-1", 4, 4)};
    host_input b{"b", "test:///b", "10.0.0.2:9477", 0, straight(50, 100), {4, 8.0 * (1ull << 30), {}}};
    b.facts.domains = {dom("v3", "u-3", 1, 1)};
    hosts = {a, b};
    in.daemons = {s({{"instance", "a"}}, 1), s({{"instance", "10.0.0.2:9477"}}, 1), s({{"instance", "c"}}, 1)};
    for (auto [inst, u] : {std::pair{"a", "u-1"}, {"a", "u-2"}, {"10.0.0.2:9477", "u-3"}})
      in.vm_info.push_back(s({{"instance", inst}, {"uuid", u}, {"domain", "x"}}, 1));
    in.host_watts = {s({{"instance", "a"}, {"source", "model"}}, 99.5)};
    in.vm_watts = {s({{"uuid", "u-1"}}, 7.25)};
    // v1 moved in from elsewhere within the window: its rate comes in two series.
    in.cpu_mean = {s({{"uuid", "u-1"}}, 0.5), s({{"uuid", "u-1"}}, 0.25), s({{"uuid", "u-3"}}, 3.0)};
    in.cpu_peak = {s({{"uuid", "u-1"}}, 1.5), s({{"uuid", "u-3"}}, 0.1)};
    in.net_bps = {s({{"uuid", "u-2"}}, 8e6), s({{"uuid", "u-1"}}, std::nan(""))};
  }
};

TEST(FleetAssembly, HostsAndVmsFromPrometheusAndLibvirt) {
  canned_fleet c;
  auto r = assemble_fleet(c.hosts, c.in);
  ASSERT_TRUE(r) << r.err().message;
  const auto& f = r->fleet;
  ASSERT_EQ(f.hosts.size(), 2u);
  EXPECT_EQ(f.hosts[0].name, "a");
  EXPECT_EQ(f.hosts[0].cpus, 8);
  EXPECT_EQ(f.hosts[0].mem_bytes, 16.0 * (1ull << 30));
  EXPECT_EQ(f.hosts[0].link_bps, 1e9);
  EXPECT_EQ(f.hosts[0].watts_now, 99.5);
  EXPECT_EQ(f.hosts[0].model.idle_watts(), 86);
  EXPECT_EQ(f.hosts[1].name, "b");
  EXPECT_EQ(f.hosts[1].watts_now, -1) << "no power source: unknown";
  EXPECT_EQ(f.hosts[1].model.full_watts(), 100);
  ASSERT_EQ(f.vms.size(), 3u);
  // In name order per host, hosts in their order.
  EXPECT_EQ(f.vms[0].name, "v1");
  EXPECT_EQ(f.vms[1].name, "v2");
  EXPECT_EQ(f.vms[2].name, "v3");
  const auto& v1 = f.vms[0];
  EXPECT_EQ(v1.host, "a");
  EXPECT_EQ(v1.uuid, "u-1");
  EXPECT_DOUBLE_EQ(v1.cpu_cores, 0.75) << "the rates of its two series add up";
  EXPECT_DOUBLE_EQ(v1.cpu_peak_cores, 1.5);
  EXPECT_EQ(v1.vcpus, 4);
  EXPECT_EQ(v1.mem_bytes, 4.0 * (1ull << 30));
  EXPECT_EQ(v1.net_bps, 0) << "a NaN is no value";
  EXPECT_EQ(v1.watts_now, 7.25);
  EXPECT_TRUE(v1.migratable);
  const auto& v2 = f.vms[1];
  EXPECT_EQ(v2.cpu_cores, 0);
  EXPECT_EQ(v2.net_bps, 8e6);
  EXPECT_EQ(v2.watts_now, -1);
  const auto& v3 = f.vms[2];
  EXPECT_EQ(v3.host, "b");
  EXPECT_EQ(v3.cpu_cores, 1) << "never above its vCPUs";
  EXPECT_EQ(v3.cpu_peak_cores, 1) << "the peak never below the mean";
  // What was missing, said.
  std::string notes;
  for (const auto& n : r->notes) notes += n + "\n";
  EXPECT_TRUE(has(notes, "host b: no magnet_host_power_watts")) << notes;
  EXPECT_TRUE(has(notes, "VM v2 on a: no vCPU run time in Prometheus")) << notes;
  EXPECT_FALSE(has(notes, "VM v1")) << notes;
}

TEST(FleetAssembly, AVmThatCannotMoveStaysAndANoteSaysWhy) {
  canned_fleet c;
  c.hosts[0].facts.domains[0].persistent = false;  // v2
  c.hosts[1].facts.domains[0].running = false;     // v3, paused
  auto r = assemble_fleet(c.hosts, c.in);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_TRUE(r->fleet.vms[0].migratable);
  EXPECT_FALSE(r->fleet.vms[1].migratable);
  EXPECT_FALSE(r->fleet.vms[2].migratable);
  std::string notes;
  for (const auto& n : r->notes) notes += n + "\n";
  EXPECT_TRUE(has(notes, "VM v2 on a stays: it is transient")) << notes;
  EXPECT_TRUE(has(notes, "VM v3 on b stays: it is not running")) << notes;
}

TEST(FleetAssembly, AHostMissingFromPrometheusIsNamedWithTheInstancesThere) {
  canned_fleet c;
  c.hosts[1].instance = "b";  // no --host-label: its daemon is there as 10.0.0.2:9477
  auto r = assemble_fleet(c.hosts, c.in);
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "host b is missing from Prometheus: no magnet_libvirt_up{instance=\"b\"}"))
      << r.err().message;
  EXPECT_TRUE(has(r.err().message, "instances with a magnet daemon there: 10.0.0.2:9477, a, c")) << r.err().message;
  EXPECT_TRUE(has(r.err().message, "--host-label b=INSTANCE")) << r.err().message;
}

TEST(FleetAssembly, ARunningVmWithoutSeriesIsNamedWithItsHost) {
  canned_fleet c;
  c.hosts[1].facts.domains.push_back(dom("newcomer", "u-9", 1, 1));
  auto r = assemble_fleet(c.hosts, c.in);
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "VM newcomer (uuid u-9) runs on host b (test:///b) but Prometheus has no "
                                   "magnet_vm_info{instance=\"10.0.0.2:9477\",uuid=\"u-9\"}"))
      << r.err().message;
  // Seen by a daemon, but by another host's: still not this host's VM.
  c.in.vm_info.push_back(s({{"instance", "a"}, {"uuid", "u-9"}}, 1));
  r = assemble_fleet(c.hosts, c.in);
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "VM newcomer")) << r.err().message;
}

TEST(FleetAssembly, TwoHostsOfOneNameOrInstance) {
  canned_fleet c;
  auto twice = c.hosts;
  twice[1].name = "a";
  auto r = assemble_fleet(twice, c.in);
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "host a is given twice")) << r.err().message;
  auto shared = c.hosts;
  shared[1].instance = "a";
  r = assemble_fleet(shared, c.in);
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "share the Prometheus instance label 'a'")) << r.err().message;
}

TEST(FleetQueries, EachInputItsQueryOverTheWindowAndTheFirstErrorStops) {
  const auto q = make_queries(600'000);
  EXPECT_EQ(q.daemons, "magnet_libvirt_up");
  EXPECT_EQ(q.cpu_mean, "sum by (uuid) (rate(magnet_vm_vcpu_seconds_total{state=\"run\"}[600s]))");
  EXPECT_EQ(q.cpu_peak,
            "quantile_over_time(0.95, (sum by (uuid) (rate(magnet_vm_vcpu_seconds_total{state=\"run\"}[60s])))"
            "[600s:30s])");
  EXPECT_EQ(q.host_watts, "avg_over_time(magnet_host_power_watts[600s])");
  EXPECT_TRUE(has(make_queries(15'000).cpu_peak, "[1500ms])))[15s:750ms])")) << make_queries(15'000).cpu_peak;
  std::vector<std::string> asked;
  auto r = gather(
      [&](const std::string& promql) -> result<std::vector<sample>> {
        asked.push_back(promql);
        return std::vector<sample>{s({{"q", promql}}, static_cast<double>(asked.size()))};
      },
      q);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(asked.size(), 7u);
  EXPECT_EQ(r->net_bps.at(0).labels.at("q"), q.net_bps);
  EXPECT_EQ(r->vm_info.at(0).labels.at("q"), q.vm_info);
  asked.clear();
  auto failed = gather(
      [&](const std::string& promql) -> result<std::vector<sample>> {
        asked.push_back(promql);
        return error{"cannot reach Prometheus at http://x: connect: Connection refused"};
      },
      q);
  ASSERT_FALSE(failed);
  EXPECT_EQ(asked.size(), 1u);
  EXPECT_TRUE(has(failed.err().message, "Connection refused"));
}

// -------------------------------------------------------------- report ---

struct canned_plan {
  place::fleet f;
  place::plan p;
  plan_context ctx;
  canned_plan() {
    place::host_spec a{"a", 8, 16e9, 1e9, straight(86, 117), 100, 0, true};
    place::host_spec b{"b", 4, 8e9, 0, straight(50, 100), -1, 0, true};
    f.hosts = {a, b};
    f.vms = {{"v1", "u-1", "a", 0.5, 1, 2, 2e9, 1e6, 3, true}, {"v2", "u-2", "b", 0.25, 0.5, 1, 1e9, 0, -1, true}};
    p.moves = {{"v1", "u-1", "a", "b", 86.0}};
    p.hosts = {{"a", 0, 0, 0, 0, 100, 0, true}, {"b", 0.75, 1.5, 3e9, 1e6, 62.5, 69.0, false}};
    p.watts_before = 162.5;
    p.watts_after = 69.0;
    p.sla_risk = 0.0125;
    p.notes = {"a planner's note"};
    ctx = {&f, place::algorithm::pabfd, {}, 600, {"host b: no magnet_host_power_watts"}};
  }
};

TEST(PlanReport, TheTableHasTheTotalsTheMovesTheHostsAndTheNotes) {
  canned_plan c;
  const std::string t = plan_table(c.ctx, c.p);
  EXPECT_TRUE(has(t, "algorithm pabfd, demand over the last 600 s: 1 move(s), 1 host(s) emptied\n")) << t;
  EXPECT_TRUE(has(t, "predicted: 162.5 W now, 69.0 W after the plan, 93.5 W saved (57.5 %); SLA risk 0.013\n")) << t;
  EXPECT_TRUE(has(t, "HOST           VMS           CPU FREE   PEAK FREE  MEM FREE GiB LINK FREE Mbit/s    W NOW  W AFTER  EMPTIED\n")) << t;
  EXPECT_TRUE(has(t, "1    v1                       a              b                  86.0\n")) << t;
  // a: emptied, everything free; its link known.  b: 4 - 0.75 cores free, no link.
  EXPECT_TRUE(has(t, "a              1 -> 0          8.00/8      8.00/8     14.9/14.9        1000/1000    100.0      0.0  yes\n")) << t;
  EXPECT_TRUE(has(t, "b              1 -> 2          3.25/4      2.50/4       4.7/7.5                -     62.5     69.0  no\n")) << t;
  EXPECT_TRUE(has(t, "note: host b: no magnet_host_power_watts\nnote: a planner's note\n")) << t;
  c.p.moves.clear();
  EXPECT_TRUE(has(plan_table(c.ctx, c.p), "\nno move\n"));
}

TEST(PlanReport, TheJsonCarriesThePlanTheHostsTheVmsAndNullsForTheUnknown) {
  canned_plan c;
  const json j = plan_json(c.ctx, c.p);
  EXPECT_EQ(j["algorithm"], "pabfd");
  EXPECT_EQ(j["window_s"], 600);
  EXPECT_EQ(j["options"]["cpu_upper"], 0.8);
  EXPECT_EQ(j["watts_saved"], 93.5);
  EXPECT_EQ(j["sla_risk"], 0.0125);
  ASSERT_EQ(j["moves"].size(), 1u);
  EXPECT_EQ(j["moves"][0], json({{"vm", "v1"}, {"uuid", "u-1"}, {"from", "a"}, {"to", "b"}, {"watts_saved", 86.0}}));
  ASSERT_EQ(j["hosts"].size(), 2u);
  EXPECT_EQ(j["hosts"][0]["emptied"], true);
  EXPECT_EQ(j["hosts"][0]["vms_after"], 0);
  EXPECT_EQ(j["hosts"][0]["link_free_bps"], 1e9);
  EXPECT_EQ(j["hosts"][0]["watts_measured"], 100);
  EXPECT_TRUE(j["hosts"][1]["link_bps"].is_null());
  EXPECT_TRUE(j["hosts"][1]["link_free_bps"].is_null());
  EXPECT_TRUE(j["hosts"][1]["watts_measured"].is_null());
  EXPECT_EQ(j["hosts"][1]["cpu_free"], 3.25);
  EXPECT_EQ(j["hosts"][1]["mem_free_bytes"], 5e9);
  EXPECT_EQ(j["hosts"][1]["vms_after"], 2);
  ASSERT_EQ(j["vms"].size(), 2u);
  EXPECT_EQ(j["vms"][0]["watts"], 3);
  EXPECT_TRUE(j["vms"][1]["watts"].is_null());
  EXPECT_EQ(j["vms"][1]["cpu_peak_cores"], 0.5);
  EXPECT_EQ(j["notes"], json({"host b: no magnet_host_power_watts", "a planner's note"}));
  EXPECT_FALSE(j.contains("applied"));
}

// --------------------------------------------------------------- apply ---

// Hosts and their domains in memory: vm -> host -> {persistent, active}.
// A migration listed in fail_ fails in one of three ways.
class fake_migrator : public migrator {
 public:
  enum class failure { refused, lost_definition };
  std::map<std::string, std::map<std::string, std::pair<bool, bool>>> where;
  std::map<std::string, failure> fail;  // "vm from>to"
  std::set<std::string> unreachable;    // hosts that cannot be asked
  std::set<std::string> undefinable;    // VMs whose definition libvirt refuses
  std::vector<std::string> log;

  result<bool> persistent_on(const std::string& vm, const std::string& host) override {
    if (unreachable.count(host)) return error{"cannot open libvirt at test:///" + host};
    return where[vm].count(host) && where[vm][host].first;
  }
  result<bool> active_on(const std::string& vm, const std::string& host) override {
    if (unreachable.count(host)) return error{"cannot open libvirt at test:///" + host};
    return where[vm].count(host) && where[vm][host].second;
  }
  result<std::string> definition(const std::string& vm, const std::string& host) override {
    return "<domain><name>" + vm + "</name><!-- from " + host + " --></domain>";
  }
  status migrate(const std::string& vm, const std::string& from, const std::string& to,
                 std::chrono::milliseconds timeout, const progress_fn& progress) override {
    log.push_back("migrate " + vm + " " + from + ">" + to + " within " + std::to_string(timeout.count()) + "ms");
    progress({0.5, 100 << 20, 400 << 20, 300 << 20});
    auto f = fail.find(vm + " " + from + ">" + to);
    if (f == fail.end()) {
      where[vm].erase(from);
      where[vm][to] = {true, true};
      return {};
    }
    if (f->second != failure::refused) {  // running on the destination, defined nowhere
      where[vm].erase(from);
      where[vm][to] = {false, true};
    }
    return error{"migration of " + vm + " failed"};
  }
  status define(const std::string& vm, const std::string& host, const std::string& xml) override {
    log.push_back("define " + vm + " on " + host + " from " + xml);
    if (undefinable.count(vm)) return error{"define refused"};
    where[vm][host].first = true;
    return {};
  }
};

std::vector<place::move> three_moves() {
  return {{"v1", "u-1", "a", "b", 10}, {"v2", "u-2", "a", "c", 10}, {"v3", "u-3", "c", "b", 10}};
}

fake_migrator three_vms() {
  fake_migrator m;
  m.where["v1"]["a"] = {true, true};
  m.where["v2"]["a"] = {true, true};
  m.where["v3"]["c"] = {true, true};
  return m;
}

TEST(ApplyPlan, EveryMoveInOrderWithItsProgress) {
  auto m = three_vms();
  std::vector<std::string> lines;
  auto r = apply_moves(three_moves(), m, std::chrono::seconds(30), [&](const std::string& l) { lines.push_back(l); });
  EXPECT_TRUE(r.ok) << r.failure;
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(m.log, (std::vector<std::string>{"migrate v1 a>b within 30000ms", "migrate v2 a>c within 30000ms",
                                             "migrate v3 c>b within 30000ms"}));
  EXPECT_TRUE(m.where["v1"].count("b") && !m.where["v1"].count("a"));
  EXPECT_EQ(lines.at(0), "moving v1: a -> b");
  EXPECT_EQ(lines.at(1), "  v1: 0.5 s 25%, 100.0 MiB sent of 400.0 MiB, 300.0 MiB left");
  EXPECT_TRUE(lines.at(2).starts_with("moved v1: a -> b in ")) << lines.at(2);
  for (const auto& s : r.steps) EXPECT_FALSE(s.rollback);
}

TEST(ApplyPlan, AFailedStepRollsBackWhatThisRunMovedNewestFirst) {
  auto m = three_vms();
  m.fail["v3 c>b"] = fake_migrator::failure::refused;
  std::vector<std::string> lines;
  auto r = apply_moves(three_moves(), m, std::chrono::seconds(30), [&](const std::string& l) { lines.push_back(l); });
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has(r.failure, "step 3 of 3: moving v3 c -> b failed: migration of v3 failed; v3 is defined on c"))
      << r.failure;
  EXPECT_EQ(m.log, (std::vector<std::string>{"migrate v1 a>b within 30000ms", "migrate v2 a>c within 30000ms",
                                             "migrate v3 c>b within 30000ms", "migrate v2 c>a within 30000ms",
                                             "migrate v1 b>a within 30000ms"}));
  ASSERT_EQ(r.steps.size(), 5u);
  EXPECT_TRUE(r.steps[3].rollback && r.steps[3].ok && r.steps[3].vm == "v2" && r.steps[3].to == "a");
  EXPECT_TRUE(r.steps[4].rollback && r.steps[4].ok && r.steps[4].vm == "v1" && r.steps[4].to == "a");
  // Back where they were.
  EXPECT_TRUE(m.where["v1"].count("a") && m.where["v2"].count("a") && m.where["v3"].count("c"));
  EXPECT_TRUE(r.unsafe.empty());
  bool said = false;
  for (const auto& l : lines) said |= l == "rolling back the 2 move(s) of this run, newest first";
  EXPECT_TRUE(said);
}

TEST(ApplyPlan, AVmNotPersistentOnItsSourceIsNotMoved) {
  auto m = three_vms();
  m.where["v2"]["a"].first = false;  // transient
  auto r = apply_moves(three_moves(), m, std::chrono::seconds(1), [](const std::string&) {});
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has(r.failure, "step 2 of 3: v2 is not persistently defined on a: not moved")) << r.failure;
  EXPECT_EQ(m.log, (std::vector<std::string>{"migrate v1 a>b within 1000ms", "migrate v1 b>a within 1000ms"}));
}

TEST(ApplyPlan, AVmDefinedNowhereAfterAFailureIsDefinedAgainWhereItRuns) {
  auto m = three_vms();
  m.fail["v2 a>c"] = fake_migrator::failure::lost_definition;
  auto r = apply_moves(three_moves(), m, std::chrono::seconds(1), [](const std::string&) {});
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(has(r.failure, "v2 is defined on c again, from its definition saved before the move")) << r.failure;
  EXPECT_TRUE(m.where["v2"]["c"].first) << "persistent again on the host it runs on";
  EXPECT_EQ(m.log.at(2), "define v2 on c from <domain><name>v2</name><!-- from a --></domain>");
  EXPECT_EQ(m.log.at(3), "migrate v1 b>a within 1000ms");
  EXPECT_TRUE(r.unsafe.empty());
}

TEST(ApplyPlan, WhatCannotBeMadeSafeIsListedForTheOperator) {
  auto m = three_vms();
  m.fail["v1 a>b"] = fake_migrator::failure::lost_definition;
  m.undefinable.insert("v1");
  auto r = apply_moves(three_moves(), m, std::chrono::seconds(1), [](const std::string&) {});
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.unsafe.size(), 1u);
  EXPECT_TRUE(has(r.unsafe[0], "v1: defined on neither a nor b, and defining it again on b failed")) << r.unsafe[0];
  // And a host that cannot be asked after a failure: not known, said so.
  auto m2 = three_vms();
  m2.fail["v1 a>b"] = fake_migrator::failure::lost_definition;
  m2.unreachable.insert("b");
  r = apply_moves(three_moves(), m2, std::chrono::seconds(1), [](const std::string&) {});
  ASSERT_EQ(r.unsafe.size(), 1u);
  EXPECT_TRUE(has(r.unsafe[0], "v1: not defined on a, and b cannot be asked: cannot open libvirt at test:///b"))
      << r.unsafe[0];
  EXPECT_EQ(r.steps.size(), 1u) << "nothing moved before: nothing to roll back";
}

TEST(ApplyPlan, TheReportAsJson) {
  auto m = three_vms();
  m.fail["v2 a>c"] = fake_migrator::failure::refused;
  auto r = apply_moves(three_moves(), m, std::chrono::seconds(1), [](const std::string&) {});
  const json j = apply_json(r);
  EXPECT_EQ(j["ok"], false);
  EXPECT_TRUE(has(j["failure"].get<std::string>(), "step 2 of 3"));
  ASSERT_EQ(j["steps"].size(), 3u);
  EXPECT_EQ(j["steps"][0]["ok"], true);
  EXPECT_TRUE(j["steps"][0]["error"].is_null());
  EXPECT_EQ(j["steps"][1]["where"], "defined on a");
  EXPECT_EQ(j["steps"][2]["rollback"], true);
  EXPECT_EQ(j["steps"][2]["vm"], "v1");
  EXPECT_TRUE(j["unsafe"].empty());
}

// ------------------------------------------------------ prometheus.yml ---

TEST(FleetConfig, OneTargetPerHostLabelledWithItsName) {
  auto a = parse_scrape_target("host-1=10.0.0.1:9477");
  auto b = parse_scrape_target("host-2=[fd00::2]:9477");
  ASSERT_TRUE(a && b);
  auto y = prometheus_config({*a, *b}, {"fleet", 2000, "/etc/prometheus/magnet.token"});
  ASSERT_TRUE(y) << y.err().message;
  const YAML::Node n = YAML::Load(*y);
  EXPECT_EQ(n["global"]["scrape_interval"].as<std::string>(), "2s");
  EXPECT_EQ(n["global"]["scrape_timeout"].as<std::string>(), "2s");
  const auto job = n["scrape_configs"][0];
  EXPECT_EQ(job["job_name"].as<std::string>(), "fleet");
  EXPECT_EQ(job["authorization"]["credentials_file"].as<std::string>(), "/etc/prometheus/magnet.token");
  ASSERT_EQ(job["static_configs"].size(), 2u);
  EXPECT_EQ(job["static_configs"][0]["targets"][0].as<std::string>(), "10.0.0.1:9477");
  EXPECT_EQ(job["static_configs"][0]["labels"]["instance"].as<std::string>(), "host-1");
  EXPECT_EQ(job["static_configs"][1]["targets"][0].as<std::string>(), "[fd00::2]:9477");
  EXPECT_EQ(job["static_configs"][1]["labels"]["instance"].as<std::string>(), "host-2");
  auto slow = prometheus_config({*a}, {"magnet", 60000, ""});
  ASSERT_TRUE(slow);
  const YAML::Node sn = YAML::Load(*slow);
  EXPECT_EQ(sn["global"]["scrape_timeout"].as<std::string>(), "10s") << "never above the interval, 10s at most";
  EXPECT_FALSE(sn["scrape_configs"][0]["authorization"]);
}

TEST(FleetConfig, BadTargetsAreRefused) {
  for (const char* bad : {"10.0.0.1:9477", "=10.0.0.1:9477", "a=10.0.0.1", "a=10.0.0.1:0", "a=::1:9477", "a=h:x"})
    EXPECT_FALSE(parse_scrape_target(bad)) << bad;
  auto a = parse_scrape_target("a=h:1").value();
  auto r = prometheus_config({a, a}, {});
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "target name a is given twice")) << r.err().message;
  r = prometheus_config({a, {"b", "h:1"}}, {});
  ASSERT_FALSE(r);
  EXPECT_TRUE(has(r.err().message, "address h:1 is given twice")) << r.err().message;
  EXPECT_FALSE(prometheus_config({}, {}));
}

// ------------------------------------------------------- command lines ---

// `magnet place` and `magnet fleet-config` refusing bad command lines with
// exit status 2, naming the problem; Prometheus down is a failure (1).
TEST(PlaceCommand, UsageErrorsNameTheProblem) {
  const std::string model = "/tmp/magnet-fleet-test-" + std::to_string(getpid()) + ".model";
  const std::string bad_model = model + ".bad";
  std::FILE* f = std::fopen(model.c_str(), "w");
  std::fputs("idle = 86\nfull = 117\n", f);
  std::fclose(f);
  f = std::fopen(bad_model.c_str(), "w");
  std::fputs("idle = 86\n", f);
  std::fclose(f);
  const std::vector<std::string> ok = {MAGNET_BIN, "place", "--prometheus", "http://127.0.0.1:1",
                                       "--host",   "a=test:///default", "--power-model", model};
  auto with = [&](std::vector<std::string> extra, size_t drop_from = 0, size_t drop_n = 0) {
    auto v = ok;
    if (drop_n) v.erase(v.begin() + static_cast<long>(drop_from), v.begin() + static_cast<long>(drop_from + drop_n));
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {with({}, 2, 2), "no --prometheus URL"},
      {with({}, 4, 2), "no --host NAME=URI"},
      {with({"--prometheus", "prom:9090"}, 2, 2), "--prometheus: 'prom:9090': expected http://HOST[:PORT][/PREFIX]"},
      {with({"--host", "b"}), "--host: 'b' is not NAME=URI"},
      {with({"--host", "a=test:///x"}), "--host: a is given twice"},
      {with({"--host-label", "z=10.0.0.9:9477"}), "--host-label: 'z=10.0.0.9:9477' is not NAME=INSTANCE for a NAME"},
      {with({"--window", "5s"}), "--window: at least 10s"},
      {with({"--window", "ten"}), "--window: 'ten'"},
      {with({"--algorithm", "best"}), "--algorithm: "},
      {with({"--cpu-upper", "1.5"}), "--cpu-upper: '1.5' is not a fraction in (0, 1]"},
      {with({"--mem-upper", "0"}), "--mem-upper: '0' is not a fraction"},
      {with({"--link-bps", "fast"}), "--link-bps: "},
      {with({"--max-moves", "-1"}), "--max-moves: "},
      {with({"--timeout", "soon"}), "--timeout: 'soon'"},
      {with({"--host", "b=test:///b", "--power-model", "a=" + model}, 6, 2),
       "host b has no power model: --power-model b=FILE"},
      {with({"--power-model", "a=" + bad_model}, 6, 2), "--power-model: " + bad_model},
      {with({"--power-model", "a=/nonexistent/m"}, 6, 2), "/nonexistent/m"},
      {with({"--frobnicate"}), "--frobnicate"},
      {{MAGNET_BIN, "fleet-config"}, "no target"},
      {{MAGNET_BIN, "fleet-config", "--target", "a=h"}, "--target: 'a=h': expected NAME=HOST:PORT"},
      {{MAGNET_BIN, "fleet-config", "--target", "a=h:1", "--scrape-interval", "100ms"}, "--scrape-interval: '100ms' is below 1s"},
  };
  for (const auto& [argv, want] : cases) {
    auto r = test::run(argv, 20);
    std::string what;
    for (size_t i = 1; i < argv.size(); ++i) what += argv[i] + " ";
    EXPECT_EQ(r.status, 2) << what << ": " << r.err;
    EXPECT_TRUE(has(r.err, want)) << what << ": want '" << want << "' in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << what << ": " << r.out;
  }
  std::remove(model.c_str());
  std::remove(bad_model.c_str());
}

TEST(PlaceCommand, PrometheusDownIsAFailureNamingIt) {
  int port = 0;
  {
    canned_server gone("x");
    port = gone.port();
  }
  const std::string model = "/tmp/magnet-fleet-down-" + std::to_string(getpid()) + ".model";
  std::FILE* f = std::fopen(model.c_str(), "w");
  std::fputs("idle = 86\nfull = 117\n", f);
  std::fclose(f);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto r = test::run({MAGNET_BIN, "place", "--prometheus", url, "--host", "a=test:///default", "--power-model", model}, 20);
  std::remove(model.c_str());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(has(r.err, "magnet place: cannot reach Prometheus at " + url + ": connect: Connection refused"))
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(FleetConfigCommand, WritesTheFileItIsGiven) {
  const std::string path = "/tmp/magnet-fleet-config-" + std::to_string(getpid()) + ".yml";
  auto r = test::run({MAGNET_BIN, "fleet-config", "--target", "a=127.0.0.1:9477", "--target", "b=127.0.0.2:9477",
                      "-o", path, "--job", "j"},
                     20);
  ASSERT_EQ(r.status, 0) << r.err;
  const YAML::Node n = YAML::LoadFile(path);
  EXPECT_EQ(n["scrape_configs"][0]["job_name"].as<std::string>(), "j");
  EXPECT_EQ(n["scrape_configs"][0]["static_configs"][1]["labels"]["instance"].as<std::string>(), "b");
  std::remove(path.c_str());
  auto out = test::run({MAGNET_BIN, "fleet-config", "--target", "a=127.0.0.1:9477"}, 20);
  ASSERT_EQ(out.status, 0) << out.err;
  EXPECT_EQ(YAML::Load(out.out)["scrape_configs"][0]["static_configs"][0]["targets"][0].as<std::string>(),
            "127.0.0.1:9477");
}

}  // namespace
}  // namespace magnet::fleet
