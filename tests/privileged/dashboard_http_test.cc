// magnet host --http's dashboard against a real daemon that follows two
// VMs of libvirt's test driver (g1, g2, from a node file): the page and its
// embedded files, /api/... agreeing with `magnet top --json`, the event
// stream's ticks, tokens (401), tenants that see only their VM (403
// elsewhere) and only its share of the host's power, and a slow stream reader that costs dropped samples (counted
// exactly), not daemon memory.  And as an attacker tries it: a page of
// another name rebound onto 127.0.0.1, streams and idle connections by the
// dozen against the operator's scrape, refusals that would keep their
// connection, a token left in the address, a reply without nosniff.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "http.h"
#include "proc.h"

namespace magnet {
namespace {

using json = nlohmann::json;
using test::child;
using test::http_exchange;
using test::run;

const std::string kG1Uuid = "11111111-2222-3333-4444-555555555501";
const std::string kG2Uuid = "11111111-2222-3333-4444-555555555502";
const std::string kOp = "operator-token-0123456789abcdef";
const std::string kT1 = "tenant-g1-token-0123456789";
const std::string kT2 = "tenant-g2-by-uuid-0123456789";

std::string tmp(const std::string& what) { return "/tmp/magnet-dash-" + std::to_string(getpid()) + "-" + what; }

// libvirt's test driver with two running domains.
std::string node_file() {
  const std::string path = tmp("node.xml");
  std::ofstream(path, std::ios::trunc)
      << "<node>\n"
      << "<domain type='test'><name>g1</name><uuid>" << kG1Uuid
      << "</uuid><memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>\n"
      << "<domain type='test'><name>g2</name><uuid>" << kG2Uuid
      << "</uuid><memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>\n"
      << "</node>\n";
  return path;
}

struct reply {
  int status = 0;
  std::string head, body;
};
reply parse_reply(const std::string& out) {
  reply r;
  if (out.rfind("HTTP/1.", 0) == 0 && out.size() > 12) r.status = std::atoi(out.c_str() + 9);
  size_t at = out.find("\r\n\r\n");
  r.head = out.substr(0, at);
  if (at != std::string::npos) r.body = out.substr(at + 4);
  return r;
}
reply get(int port, const std::string& target, const std::string& extra = "", const std::string& host = "127.0.0.1") {
  return parse_reply(
      http_exchange(port, "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n" + extra + "\r\n"));
}
// A header's value in @head ("" when absent).
std::string header(const std::string& head, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(head, m, std::regex("\r\n" + name + ": ([^\r]*)", std::regex::icase))) return "";
  return m[1];
}
int responses_in(const std::string& r) {
  int n = 0;
  for (size_t at = r.find("HTTP/1.1 "); at != std::string::npos; at = r.find("HTTP/1.1 ", at + 1)) ++n;
  return n;
}
// A TCP connection to 127.0.0.1:@port (@rcvbuf: its receive buffer, 0:
// the kernel's default), -1 when refused.
int connect_to(int port, int rcvbuf = 0) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rcvbuf) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}
std::string bearer(const std::string& t) { return "Authorization: Bearer " + t + "\r\n"; }

// The daemon these tests start: this build's, or MAGNET_HTTP_TEST_BIN's
// (to show a test fails on an older build: the attacks below were run so
// against the build of 1d4a4a9, commit message of the Host check).
std::string daemon_bin() {
  const char* other = std::getenv("MAGNET_HTTP_TEST_BIN");
  return other && *other ? other : MAGNET_BIN;
}

// A daemon on the node file with --http on a free loopback port.
struct daemon_under_test {
  std::string sock = tmp("host.sock");
  std::unique_ptr<child> d;
  int port = 0;

  explicit daemon_under_test(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {daemon_bin(), "-v", "host", "--uri", "test://" + node_file(), "--socket", sock,
                                     "--probes",  "net.dev", "--no-deliver", "--http", "127.0.0.1:0",
                                     "--duration", "120"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    d = std::make_unique<child>(argv);
  }
  ~daemon_under_test() {
    d.reset();
    ::unlink(tmp("node.xml").c_str());  // read by the test driver when the daemon connected
  }
  // Up, serving, and both VMs known.
  ::testing::AssertionResult up() {
    if (!d->wait_for_stderr("[started]")) return ::testing::AssertionFailure() << d->stderr_text();
    std::smatch m;
    const std::string log = d->stderr_text();
    if (!std::regex_search(log, m, std::regex(R"(\[http\] dashboard on http://127\.0\.0\.1:(\d+)/ )")))
      return ::testing::AssertionFailure() << "no dashboard line: " << log;
    port = std::stoi(m[1]);
    if (!d->wait_for_stderr("[vm.up] g1") || !d->wait_for_stderr("[vm.up] g2"))
      return ::testing::AssertionFailure() << d->stderr_text();
    return ::testing::AssertionSuccess();
  }
  long rss_kb() const {
    std::ifstream f("/proc/" + std::to_string(d->pid()) + "/status");
    for (std::string l; std::getline(f, l);)
      if (l.rfind("VmRSS:", 0) == 0) return std::stol(l.substr(6));
    return -1;
  }
};

// An open event stream read by hand.  @rcvbuf: a receive buffer as small
// as the kernel allows (a slow reader's).
struct stream_reader {
  int fd = -1;
  std::string buf;
  stream_reader(int port, const std::string& extra = "", bool small = false, const std::string& host = "127.0.0.1",
                const std::string& target = "/api/stream") {
    fd = connect_to(port, small ? 1024 : 0);
    EXPECT_GE(fd, 0);
    const std::string req = "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra + "\r\n";
    EXPECT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  }
  // Whether the server ended the connection (EOF or reset) after what it sent.
  bool ended_by_server() {
    while (fill()) {
    }
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
  ~stream_reader() { close(fd); }
  bool fill() {
    char b[65536];
    errno = 0;
    ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n <= 0) return false;
    buf.append(b, static_cast<size_t>(n));
    return true;
  }
  // The response's head ("" when the connection ended first).
  std::string head() {
    while (buf.find("\r\n\r\n") == std::string::npos)
      if (!fill()) return "";
    size_t at = buf.find("\r\n\r\n");
    std::string h = buf.substr(0, at);
    buf.erase(0, at + 4);
    return h;
  }
  // The next event's fields (id, event, data); empty at the end.
  std::map<std::string, std::string> next() {
    while (true) {
      size_t at = buf.find("\n\n");
      if (at == std::string::npos) {
        if (!fill()) return {};
        continue;
      }
      std::string frame = buf.substr(0, at);
      buf.erase(0, at + 2);
      std::map<std::string, std::string> f;
      std::istringstream in(frame);
      for (std::string l; std::getline(in, l);) {
        size_t c = l.find(": ");
        if (c != std::string::npos) f[l.substr(0, c)] += l.substr(c + 2);
      }
      if (f.count("data") || f.count("id")) return f;
    }
  }
  std::map<std::string, std::string> next_sample() {
    for (auto f = next(); !f.empty(); f = next())
      if (f["event"] == "sample") return f;
    return {};
  }
};

std::set<std::string> names(const json& dash) {
  std::set<std::string> s;
  for (const auto& v : dash["vms"]) s.insert(v["name"].get<std::string>());
  return s;
}

TEST(Dashboard, PageAssetsApiAndStreamAgreeWithMagnetTop) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  daemon_under_test t({"--http-stream-interval", "100ms"});
  ASSERT_TRUE(t.up());

  reply r = get(t.port, "/");
  ASSERT_EQ(r.status, 200) << r.head;
  EXPECT_NE(r.head.find("Content-Type: text/html; charset=utf-8"), std::string::npos) << r.head;
  EXPECT_NE(r.head.find("Content-Security-Policy: default-src 'self'"), std::string::npos) << r.head;
  EXPECT_NE(r.body.find("<script src=\"/assets/uPlot.iife.min.js\"></script>"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("http://"), std::string::npos) << "nothing fetched from elsewhere";
  EXPECT_EQ(r.body.find("https://cdn"), std::string::npos);
  // uPlot as npm installed it into the build tree, byte for byte.
  for (const auto& [url, file] : std::vector<std::pair<std::string, std::string>>{
           {"/assets/uPlot.iife.min.js", MAGNET_UPLOT_DIST "/uPlot.iife.min.js"},
           {"/assets/uPlot.min.css", MAGNET_UPLOT_DIST "/uPlot.min.css"},
           {"/assets/dashboard.js", MAGNET_SOURCE_DIR "/host/http/web/dashboard.js"}}) {
    r = get(t.port, url);
    EXPECT_EQ(r.status, 200) << url;
    std::ifstream f(file);
    std::stringstream want;
    want << f.rdbuf();
    EXPECT_FALSE(want.str().empty()) << file;
    EXPECT_TRUE(r.body == want.str()) << url << ": " << r.body.size() << " bytes, " << file << " has "
                                      << want.str().size();
  }
  EXPECT_EQ(get(t.port, "/assets/nothing.js").status, 404);

  // /api/vms: `magnet top`'s rows, each with every field top has, same values.
  r = get(t.port, "/api/vms");
  ASSERT_EQ(r.status, 200) << r.head << r.body;
  json dash = json::parse(r.body);
  EXPECT_EQ(names(dash), (std::set<std::string>{"g1", "g2"}));
  auto top = run({MAGNET_BIN, "top", "--socket", t.sock, "--json", "--count", "1"});
  ASSERT_EQ(top.status, 0) << top.err;
  json tj = json::parse(top.out);
  ASSERT_EQ(tj["vms"].size(), 2u) << top.out;
  for (const auto& row : tj["vms"]) {
    const json* mine = nullptr;
    for (const auto& v : dash["vms"])
      if (v["name"] == row["name"]) mine = &v;
    ASSERT_TRUE(mine) << row.dump();
    for (const auto& [k, v] : row.items()) {
      ASSERT_TRUE(mine->contains(k)) << k;
      if (v.is_number()) {
        EXPECT_NEAR((*mine)[k].get<double>(), v.get<double>(), 1e-9) << k;  // idle test VMs
      }
    }
    EXPECT_EQ((*mine)["uuid"], row["name"] == "g1" ? kG1Uuid : kG2Uuid);
  }

  // A VM's views: what `magnet views --vm g1 --json` prints.
  r = get(t.port, "/api/vm/g1/views");
  ASSERT_EQ(r.status, 200) << r.body;
  json views = json::parse(r.body);
  ASSERT_FALSE(views.empty());
  uint32_t g1_id = 0;
  for (const auto& v : dash["vms"])
    if (v["name"] == "g1") g1_id = v["vm"];
  for (const auto& v : views) EXPECT_EQ(v["vm"], g1_id) << v.dump().substr(0, 200);
  auto cli = run({MAGNET_BIN, "views", "--vm", "g1", "--socket", t.sock, "--json"});
  ASSERT_EQ(cli.status, 0) << cli.err;
  json cj = json::parse(cli.out);
  ASSERT_EQ(cj.size(), views.size());
  for (size_t i = 0; i < cj.size(); ++i) EXPECT_EQ(cj[i]["view"], views[i]["view"]);
  EXPECT_EQ(get(t.port, "/api/vm/" + kG1Uuid + "/views").status, 200) << "by UUID";
  EXPECT_EQ(get(t.port, "/api/vm/nosuch/views").status, 404);
  EXPECT_EQ(get(t.port, "/api/vm/g1/other").status, 404);

  // The stream: ticks one after the other, every 100 ms here.
  stream_reader s(t.port);
  std::string h = s.head();
  ASSERT_EQ(h.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << h;
  EXPECT_NE(h.find("Content-Type: text/event-stream"), std::string::npos) << h;
  auto first = s.next_sample();
  ASSERT_FALSE(first.empty());
  uint64_t id = std::stoull(first["id"]);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    auto e = s.next_sample();
    ASSERT_FALSE(e.empty()) << "the stream ended";
    EXPECT_EQ(std::stoull(e["id"]), ++id) << "consecutive samples for a reader that keeps up";
    json j = json::parse(e["data"]);
    EXPECT_EQ(names(j), (std::set<std::string>{"g1", "g2"}));
    EXPECT_TRUE(j["vms"][0].contains("exits_by_reason"));
  }
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(took, 0.3) << "5 samples at 100 ms";
  EXPECT_LT(took, 3.0) << "5 samples at 100 ms";

  EXPECT_EQ(get(t.port, "/metrics").status, 200) << "no tokens: /metrics as before";
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
}

// --metrics-detail coarse: the daemon's page has histograms with one bound
// in four, and no other bound.
TEST(Dashboard, MetricsDetailCoarseServesOneBoundInFour) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  daemon_under_test t({"--metrics-detail", "coarse"});
  ASSERT_TRUE(t.up());
  reply r;
  std::set<std::string> les;
  // Until a tick has given both VMs their counters (their histograms).
  for (int i = 0; i < 50 && les.empty(); ++i) {
    r = get(t.port, "/metrics");
    ASSERT_EQ(r.status, 200) << r.body;
    std::regex le(R"re(_bucket\{[^}]*le="([^"]+)"\})re");
    for (auto it = std::sregex_iterator(r.body.begin(), r.body.end(), le); it != std::sregex_iterator(); ++it)
      les.insert((*it)[1]);
    if (les.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(les, (std::set<std::string>{"2.55e-07", "4.095e-06", "6.5535e-05", "0.001048575", "0.016777215",
                                        "0.268435455", "+Inf"}))
      << r.body.substr(0, 3000);
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
}

TEST(Dashboard, RefusesANonLoopbackAddressWithoutTokensAndAnOpenTokenFile) {
  auto r = run({MAGNET_BIN, "host", "--http", "0.0.0.0:0", "--duration", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not a loopback address, and no --http-tokens"), std::string::npos) << r.err;
  const std::string path = tmp("open-tokens");
  std::ofstream(path, std::ios::trunc) << kOp << " all\n";
  chmod(path.c_str(), 0644);
  r = run({MAGNET_BIN, "host", "--http", "127.0.0.1:0", "--http-tokens", path, "--duration", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("mode 0644 lets others read or change it"), std::string::npos) << r.err;
  chmod(path.c_str(), 0600);
  std::ofstream(path, std::ios::trunc) << kOp << " all\nshort g1\n";
  r = run({MAGNET_BIN, "host", "--http", "127.0.0.1:0", "--http-tokens", path, "--duration", "1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(path + ":2: the token is shorter than 16 characters"), std::string::npos) << r.err;
  unlink(path.c_str());
}

TEST(Dashboard, TokensAndTenantsSeeOnlyWhatTheyMay) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string tokens = tmp("tokens");
  {
    std::ofstream f(tokens, std::ios::trunc);
    f << "# operator\n" << kOp << " all\n" << kT1 << " g1\n" << kT2 << " " << kG2Uuid << "\n";
  }
  ASSERT_EQ(chmod(tokens.c_str(), 0600), 0);
  daemon_under_test t({"--http-tokens", tokens, "--http-stream-interval", "100ms"});
  ASSERT_TRUE(t.up());

  // No token, a wrong one: 401 everywhere, with why.
  for (const char* url : {"/", "/assets/dashboard.js", "/api/vms", "/api/vm/g1/views", "/metrics"}) {
    reply r = get(t.port, url);
    EXPECT_EQ(r.status, 401) << url;
    EXPECT_NE(r.body.find("this server needs a token"), std::string::npos) << r.body;
    EXPECT_NE(r.head.find("WWW-Authenticate: Bearer"), std::string::npos) << r.head;
    r = get(t.port, url, bearer("wrong-token-0123456789abcdef"));
    EXPECT_EQ(r.status, 401) << url;
    EXPECT_NE(r.body.find("unknown token"), std::string::npos) << r.body;
  }
  {
    stream_reader s(t.port);
    EXPECT_EQ(s.head().rfind("HTTP/1.1 401 ", 0), 0u) << "the stream too";
  }

  // The operator: everything.
  reply r = get(t.port, "/api/vms", bearer(kOp));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(names(json::parse(r.body)), (std::set<std::string>{"g1", "g2"}));
  EXPECT_EQ(get(t.port, "/metrics", bearer(kOp)).status, 200);
  EXPECT_EQ(get(t.port, "/api/vm/g2/views", bearer(kOp)).status, 200);

  // Tenant g1 (by name): its VM, never a trace of g2.
  r = get(t.port, "/api/vms", bearer(kT1));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(names(j), (std::set<std::string>{"g1"}));
  EXPECT_EQ(r.body.find("g2"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find(kG2Uuid), std::string::npos) << r.body;
  EXPECT_FALSE(j.contains("lost")) << "no host-wide figures for a tenant";
  EXPECT_EQ(get(t.port, "/api/vm/g1/views", bearer(kT1)).status, 200);
  uint32_t g2_id = 0;
  const json all = json::parse(get(t.port, "/api/vms", bearer(kOp)).body);
  for (const auto& v : all["vms"])
    if (v["name"] == "g2") g2_id = v["vm"];
  for (const std::string& other : {std::string("g2"), kG2Uuid, std::to_string(g2_id), std::string("nosuch")}) {
    r = get(t.port, "/api/vm/" + other + "/views", bearer(kT1));
    EXPECT_EQ(r.status, 403) << other << ": " << r.body;
    EXPECT_NE(r.body.find("this token may not see VM"), std::string::npos) << r.body;
  }
  r = get(t.port, "/metrics", bearer(kT1));
  EXPECT_EQ(r.status, 403) << "/metrics is the operator's";
  EXPECT_EQ(r.body.find("magnet_vm"), std::string::npos);
  {
    stream_reader s(t.port, bearer(kT1));
    ASSERT_EQ(s.head().rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
    for (int i = 0; i < 5; ++i) {
      auto e = s.next_sample();
      ASSERT_FALSE(e.empty());
      EXPECT_EQ(names(json::parse(e["data"])), (std::set<std::string>{"g1"}));
      EXPECT_EQ(e["data"].find("g2"), std::string::npos) << e["data"];
      EXPECT_EQ(e["data"].find(kG2Uuid), std::string::npos) << e["data"];
    }
  }

  // Tenant g2, named by UUID in the token file: g2 alone.
  r = get(t.port, "/api/vms", bearer(kT2));
  EXPECT_EQ(names(json::parse(r.body)), (std::set<std::string>{"g2"}));
  EXPECT_EQ(get(t.port, "/api/vm/g1/views", bearer(kT2)).status, 403);

  // The browser's way: the token once in the query (redirected to the
  // same page without it, as a cookie), then the cookie.
  r = get(t.port, "/?token=" + kT1);
  ASSERT_EQ(r.status, 303) << r.head;
  EXPECT_EQ(header(r.head, "Location"), "/");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.head, m, std::regex("\r\nSet-Cookie: (magnet_token=[^;]+); Path=/; HttpOnly; SameSite=Lax")))
      << r.head;
  const std::string cookie = "Cookie: " + m[1].str() + "\r\n";  // m points into r, reassigned next
  r = get(t.port, "/", cookie);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("<script"), std::string::npos);
  r = get(t.port, "/api/vms", cookie);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(names(json::parse(r.body)), (std::set<std::string>{"g1"}));
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
  unlink(tokens.c_str());
}

// The power chart's data: with a power model, an operator's JSON has the
// host's power (source, watts, energy) and each VM's share (power_watts,
// energy_joules, as /metrics has them); a tenant's has its VM's share and
// never the host's.  Without a source all of them are null.  The page has
// the chart and its note.
TEST(Dashboard, PowerTheHostsForOperatorsEachVmsShareNullWithoutASource) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string tokens = tmp("power-tokens"), model = tmp("power-model.conf"), empty = tmp("no-powercap");
  std::filesystem::create_directories(empty);
  std::ofstream(tokens, std::ios::trunc) << kOp << " all\n" << kT1 << " g1\n";
  ASSERT_EQ(chmod(tokens.c_str(), 0600), 0);
  std::ofstream(model, std::ios::trunc) << "idle = 86\nfull = 117\n";
  {
    daemon_under_test t({"--http-tokens", tokens, "--powercap-root", empty, "--power-model", model});
    ASSERT_TRUE(t.up());
    reply r = get(t.port, "/", bearer(kOp));
    EXPECT_NE(r.body.find("<section id=\"power\""), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("No power source on this host"), std::string::npos) << r.body;
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // the meter's window full
    json op = json::parse(get(t.port, "/api/vms", bearer(kOp)).body);
    ASSERT_TRUE(op["power"].is_object()) << op.dump();
    EXPECT_EQ(op["power"]["source"], "model");
    EXPECT_GE(op["power"]["watts"].get<double>(), 86 - 1e-9) << op.dump();
    EXPECT_LE(op["power"]["watts"].get<double>(), 117 + 1e-9) << op.dump();
    EXPECT_GT(op["power"]["energy_joules"].get<double>(), 86) << "over a second at least idle";
    ASSERT_EQ(op["vms"].size(), 2u);
    for (const auto& v : op["vms"]) {
      EXPECT_TRUE(v["power_watts"].is_number()) << v.dump();
      EXPECT_TRUE(v["energy_joules"].is_number()) << v.dump();
    }
    json tn = json::parse(get(t.port, "/api/vms", bearer(kT1)).body);
    EXPECT_FALSE(tn.contains("power")) << "the host's power is not a tenant's: " << tn.dump();
    ASSERT_EQ(tn["vms"].size(), 1u);
    EXPECT_TRUE(tn["vms"][0]["power_watts"].is_number()) << tn.dump();
    EXPECT_TRUE(tn["vms"][0]["energy_joules"].is_number()) << tn.dump();
    stream_reader s(t.port, bearer(kT1));
    ASSERT_EQ(s.head().rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
    json e = json::parse(s.next_sample()["data"]);
    EXPECT_FALSE(e.contains("power")) << e.dump();
    EXPECT_TRUE(e["vms"][0].contains("power_watts")) << e.dump();
  }
  daemon_under_test t({"--powercap-root", empty});
  ASSERT_TRUE(t.up());
  json none = json::parse(get(t.port, "/api/vms").body);
  ASSERT_TRUE(none.contains("power"));
  EXPECT_TRUE(none["power"].is_null()) << none.dump();
  for (const auto& v : none["vms"]) {
    EXPECT_TRUE(v["power_watts"].is_null()) << v.dump();
    EXPECT_TRUE(v["energy_joules"].is_null()) << v.dump();
  }
  unlink(tokens.c_str());
  unlink(model.c_str());
  std::filesystem::remove_all(empty);
}

TEST(Dashboard, ASlowStreamReaderLosesSamplesCountedNotDaemonMemory) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  daemon_under_test t({"--http-stream-interval", "100ms"});
  ASSERT_TRUE(t.up());
  // Warm up: a stream served and closed, so what the first one allocates
  // is in the baseline.
  {
    stream_reader w(t.port);
    ASSERT_FALSE(w.head().empty());
    ASSERT_FALSE(w.next_sample().empty());
  }
  const long before = t.rss_kb();
  ASSERT_GT(before, 0);

  // 8 readers that read the head and one sample, then nothing for 4 s:
  // 40 samples go by, more than their socket buffers hold.
  constexpr int kSlow = 8;
  std::vector<std::unique_ptr<stream_reader>> slow;
  std::vector<uint64_t> last(kSlow);
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<stream_reader>(t.port, "", true));
    ASSERT_EQ(slow.back()->head().rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
    auto e = slow.back()->next_sample();
    ASSERT_FALSE(e.empty());
    last[i] = std::stoull(e["id"]);
  }
  // The stream cap (32) holds with slow streams open: a ninth..32nd stream
  // is served, the 33rd refused with 503 (and /metrics still served).
  {
    std::vector<std::unique_ptr<stream_reader>> more;
    for (int i = 0; i < 32 - kSlow; ++i) {
      more.push_back(std::make_unique<stream_reader>(t.port));
      ASSERT_EQ(more.back()->head().rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << i;
    }
    stream_reader over(t.port);
    EXPECT_EQ(over.head().rfind("HTTP/1.1 503 ", 0), 0u) << "beyond max_streams";
    EXPECT_EQ(get(t.port, "/metrics").status, 200);
  }
  std::this_thread::sleep_for(std::chrono::seconds(4));  // the readers being slow: the point of the test
  const long during = t.rss_kb();
  // Still serving everyone else meanwhile.
  EXPECT_EQ(get(t.port, "/api/vms").status, 200);

  // Now they read: fresh samples after a gap, and the gap announced exactly.
  uint64_t total_dropped = 0;
  for (int i = 0; i < kSlow; ++i) {
    uint64_t id = last[i], announced = 0, gaps = 0;
    bool after_gap = false;
    for (int n = 0; n < 200 && !after_gap; ++n) {
      auto e = slow[i]->next();
      ASSERT_FALSE(e.empty()) << "reader " << i << " ended";
      if (e["event"] == "dropped") {
        announced = std::stoull(e["data"]);
        continue;
      }
      uint64_t next = std::stoull(e["id"]);
      ASSERT_GT(next, id);
      gaps += next - id - 1;
      after_gap = announced > 0;
      EXPECT_EQ(gaps, announced) << "reader " << i << ": dropped as announced, at id " << next;
      id = next;
    }
    EXPECT_TRUE(after_gap) << "reader " << i << " lost nothing in 4 s of not reading";
    total_dropped += announced;
  }
  EXPECT_GT(total_dropped, 0u);
  // Bounded: a few samples per stream (a kilobyte or two each) besides the
  // kernel's socket buffers, so no measurable growth.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitizer's allocator keeps what is freed for a while (ASan's
  // quarantine): resident memory then follows how much was allocated, not
  // how much is held.  The drop accounting above is the bound's test there.
  (void)during;
#else
  EXPECT_LT(during - before, 2048) << "the daemon grew from " << before << " kB to " << during
                                   << " kB with slow readers";
#endif
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
}

// A page of another name whose DNS now answers 127.0.0.1 (DNS rebinding):
// the browser sends that name as Host.  On the token-less loopback daemon,
// it gets 421 and not a byte of any VM, on every path; the loopback names
// get everything.
TEST(DashboardAttack, APageReboundOntoLoopbackGetsNoVmData) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  daemon_under_test t({"--http-stream-interval", "100ms"});
  ASSERT_TRUE(t.up());
  const std::string port = std::to_string(t.port);
  for (const std::string& host :
       std::vector<std::string>{"rebind.example:" + port, "rebind.example", "localhost.rebind.example:" + port}) {
    for (const char* url : {"/", "/api/vms", "/api/vm/g1/views", "/api/vm/" "11111111-2222-3333-4444-555555555502/views",
                            "/metrics", "/assets/dashboard.js", "/nothing"}) {
      reply r = get(t.port, url, "", host);
      EXPECT_EQ(r.status, 421) << host << url << ": " << r.head;
      for (const std::string& secret : {std::string("g1"), std::string("g2"), kG1Uuid, kG2Uuid, std::string("magnet_vm")})
        EXPECT_EQ(r.body.find(secret), std::string::npos) << host << url << ": " << r.body;
      EXPECT_NE(r.body.find("is not a name of this server; this server answers to localhost, 127.0.0.1, [::1]"),
                std::string::npos) << r.body;
      EXPECT_EQ(header(r.head, "Connection"), "close");
    }
    stream_reader s(t.port, "", false, host);
    std::string h = s.head();
    EXPECT_EQ(h.rfind("HTTP/1.1 421 ", 0), 0u) << host << ": " << h;
    EXPECT_EQ(s.buf.find("g1"), std::string::npos) << s.buf;
  }
  // Without a Host at all (HTTP/1.1): 400, nothing either.
  reply r = parse_reply(http_exchange(t.port, "GET /api/vms HTTP/1.1\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_EQ(r.body.find("g1"), std::string::npos) << r.body;
  // The names of this server: everything.
  for (const std::string& host :
       std::vector<std::string>{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port}) {
    r = get(t.port, "/api/vms", "", host);
    ASSERT_EQ(r.status, 200) << host << ": " << r.head;
    EXPECT_EQ(names(json::parse(r.body)), (std::set<std::string>{"g1", "g2"})) << host;
  }
  EXPECT_NE(t.d->stderr_text().find("[http] answering requests whose Host is localhost, 127.0.0.1, [::1] "),
            std::string::npos) << t.d->stderr_text();
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
}

TEST(DashboardAttack, HttpHostAddsNamesAsWritten) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  daemon_under_test t({"--http-host", "Dash.Example", "--http-host", "proxy.example:8443"});
  ASSERT_TRUE(t.up());
  const std::string port = std::to_string(t.port);
  EXPECT_EQ(get(t.port, "/api/vms", "", "dash.example:" + port).status, 200);
  EXPECT_EQ(get(t.port, "/api/vms", "", "dash.example").status, 200);
  EXPECT_EQ(get(t.port, "/api/vms", "", "proxy.example:8443").status, 200) << "a reverse proxy's name and port";
  EXPECT_EQ(get(t.port, "/api/vms", "", "proxy.example:" + port).status, 421) << "that port only";
  EXPECT_EQ(get(t.port, "/api/vms", "", "proxy.example").status, 421);
  reply r = get(t.port, "/api/vms", "", "rebind.example");
  EXPECT_EQ(r.status, 421);
  EXPECT_NE(r.body.find("answers to localhost, 127.0.0.1, [::1], dash.example, proxy.example:8443 "), std::string::npos)
      << r.body;
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
  // Bad names are refused at start, with the name.
  auto bad = run({MAGNET_BIN, "host", "--http", "127.0.0.1:0", "--http-host", "a b", "--duration", "1"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--http-host: 'a b': expected NAME or NAME:PORT"), std::string::npos) << bad.err;
  bad = run({MAGNET_BIN, "host", "--http-host", "a.example", "--duration", "1"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--http-host: only with --http"), std::string::npos) << bad.err;
}

// Seconds one /metrics scrape takes, and its status.
std::pair<int, double> scrape(int port, const std::string& extra = "") {
  const auto t0 = std::chrono::steady_clock::now();
  reply r = get(port, "/metrics", extra);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.status == 200 && r.body.find("\nmagnet_vms 2\n") == std::string::npos) return {-1, s};
  return {r.status, s};
}

// Anyone on the host, no token needed: more event streams than the server
// takes, idle and never reading, plus connections that say nothing or half
// a request, plus a barrage of bad requests.  The operator's scrape is
// answered every time in its usual time, and a dashboard stream opened
// before keeps its samples, consecutive.
TEST(DashboardAttack, StreamsAndIdleConnectionsNeverTakeTheOperatorsScrape) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  daemon_under_test t({"--http-stream-interval", "100ms"});
  ASSERT_TRUE(t.up());
  stream_reader mine(t.port);
  ASSERT_EQ(mine.head().rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  auto first = mine.next_sample();
  ASSERT_FALSE(first.empty());
  uint64_t id = std::stoull(first["id"]);

  std::vector<double> usual;
  for (int i = 0; i < 10; ++i) {
    auto [status, s] = scrape(t.port);
    ASSERT_EQ(status, 200);
    usual.push_back(s);
  }
  std::sort(usual.begin(), usual.end());

  // 48 streams (the server takes 32 in all, this one included), small
  // buffers, never read; 80 connections that send nothing; 16 that send
  // half a request.  More than the 64 connections the server holds.
  std::vector<std::unique_ptr<stream_reader>> streams;
  for (int i = 0; i < 48; ++i) streams.push_back(std::make_unique<stream_reader>(t.port, "", true));
  std::vector<int> idle;
  for (int i = 0; i < 96; ++i) {
    int fd = connect_to(t.port);
    if (fd < 0) continue;
    if (i % 6 == 5) ::send(fd, "GET /metr", 9, MSG_NOSIGNAL);
    idle.push_back(fd);
  }
  std::vector<double> under;
  for (int round = 0; round < 20; ++round) {
    auto [status, s] = scrape(t.port);
    EXPECT_EQ(status, 200) << "round " << round;
    under.push_back(s);
    // Between scrapes, more of the same, and requests that are refused.
    for (int i = 0; i < 4; ++i) {
      int fd = connect_to(t.port);
      if (fd >= 0) idle.push_back(fd);
    }
    for (const std::string& bad : {std::string("GET /api/vms HTTP/1.1\r\nHost: rebind.example\r\n\r\n"),
                                   std::string("HEAD /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                                   std::string("GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                                   std::string("DELETE /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                                   std::string("\x16\x03\x01\x02\x00\x01\x00\x01", 8)})
      EXPECT_NE(parse_reply(http_exchange(t.port, bad)).status, 200) << bad;
  }
  std::sort(under.begin(), under.end());
  std::printf("[http] /metrics alone: median %.1f ms, max %.1f ms; under attack: median %.1f ms, max %.1f ms\n",
              usual[usual.size() / 2] * 1e3, usual.back() * 1e3, under[under.size() / 2] * 1e3, under.back() * 1e3);
  // Its usual time: the same order as alone (a few ms here), never the
  // 2 s of a read deadline freeing a slot, nor a refused connection.
  EXPECT_LT(under[under.size() / 2], std::max(0.1, 5 * usual[usual.size() / 2]));
  EXPECT_LT(under.back(), std::max(1.0, 5 * usual.back()));

  // The stream opened before: every sample since, in order, none dropped.
  for (int i = 0; i < 5; ++i) {
    auto e = mine.next();
    ASSERT_FALSE(e.empty()) << "the dashboard's stream ended";
    ASSERT_NE(e["event"], "dropped") << "it lost samples";
    EXPECT_EQ(std::stoull(e["id"]), ++id);
  }
  // Of the 48, 31 streams were served (32 with mine), the rest refused.
  int served = 0, refused = 0;
  for (auto& s : streams) {
    const std::string h = s->head();
    if (h.rfind("HTTP/1.1 200 OK\r\n", 0) == 0) ++served;
    if (h.rfind("HTTP/1.1 503 ", 0) == 0) {
      ++refused;
      EXPECT_TRUE(s->ended_by_server()) << "a refused stream's connection ends";
    }
  }
  EXPECT_EQ(served, 31);
  EXPECT_EQ(refused, 48 - 31);
  for (int fd : idle) close(fd);
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
}

// With tokens: a tenant's streams are capped (4), a flood without a token
// is refused at once; the operator streams and scrapes, and the other
// tenant's stream opened before keeps every sample.
TEST(DashboardAttack, ATenantsStreamsAreCappedAndOthersStillStreamAndScrape) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string tokens = tmp("tokens");
  {
    std::ofstream f(tokens, std::ios::trunc);
    f << kOp << " all\n" << kT1 << " g1\n" << kT2 << " " << kG2Uuid << "\n";
  }
  ASSERT_EQ(chmod(tokens.c_str(), 0600), 0);
  daemon_under_test t({"--http-tokens", tokens, "--http-stream-interval", "100ms"});
  ASSERT_TRUE(t.up());
  // Another tenant's dashboard, open before the flood.
  stream_reader other(t.port, bearer(kT2));
  ASSERT_EQ(other.head().rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  auto first = other.next_sample();
  ASSERT_FALSE(first.empty());
  uint64_t id = std::stoull(first["id"]);
  std::vector<std::unique_ptr<stream_reader>> tenant;
  int served = 0, capped = 0;
  for (int i = 0; i < 10; ++i) {
    tenant.push_back(std::make_unique<stream_reader>(t.port, bearer(kT1), true));
    const std::string h = tenant.back()->head();
    if (h.rfind("HTTP/1.1 200 OK\r\n", 0) == 0) ++served;
    if (h.rfind("HTTP/1.1 429 Too Many Requests\r\n", 0) == 0) {
      ++capped;
      EXPECT_NE(header(h, "Retry-After"), "") << h;
      EXPECT_TRUE(tenant.back()->ended_by_server());
    }
  }
  EXPECT_EQ(served, 4) << "per token";
  EXPECT_EQ(capped, 6);
  for (int i = 0; i < 40; ++i) {
    stream_reader s(t.port);
    EXPECT_EQ(s.head().rfind("HTTP/1.1 401 ", 0), 0u);
    EXPECT_TRUE(s.ended_by_server()) << "a 401 ends its connection";
  }
  stream_reader op(t.port, bearer(kOp));
  ASSERT_EQ(op.head().rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  auto e = op.next_sample();
  ASSERT_FALSE(e.empty());
  EXPECT_EQ(names(json::parse(e["data"])), (std::set<std::string>{"g1", "g2"}));
  // The other tenant's stream kept flowing: every sample since, in order,
  // none dropped, its VM alone.
  for (int i = 0; i < 5; ++i) {
    auto f = other.next();
    ASSERT_FALSE(f.empty()) << "the other tenant's stream ended";
    ASSERT_NE(f["event"], "dropped") << "it lost samples";
    EXPECT_EQ(std::stoull(f["id"]), ++id);
    EXPECT_EQ(names(json::parse(f["data"])), (std::set<std::string>{"g2"}));
  }
  for (int i = 0; i < 10; ++i) {
    auto [status, s] = scrape(t.port, bearer(kOp));
    EXPECT_EQ(status, 200);
    EXPECT_LT(s, 1.0);
  }
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
  unlink(tokens.c_str());
}

// A refusal ends its connection: the request pipelined after it on the
// same connection is never answered, whatever it carries.
TEST(DashboardAttack, EveryRefusalEndsItsConnection) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string tokens = tmp("tokens");
  {
    std::ofstream f(tokens, std::ios::trunc);
    f << kOp << " all\n" << kT1 << " g1\n";
  }
  ASSERT_EQ(chmod(tokens.c_str(), 0600), 0);
  daemon_under_test t({"--http-tokens", tokens});
  ASSERT_TRUE(t.up());
  const std::string next = "GET /api/vms HTTP/1.1\r\nHost: 127.0.0.1\r\n" + bearer(kOp) + "\r\n";
  struct refusal {
    int status;
    std::string request;
  };
  for (const auto& f : std::vector<refusal>{
           {401, "GET /api/vms HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"},
           {401, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + bearer("wrong-token-0123456789abcdef") + "\r\n"},
           {403, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + bearer(kT1) + "\r\n"},
           {403, "GET /api/vm/g2/views HTTP/1.1\r\nHost: 127.0.0.1\r\n" + bearer(kT1) + "\r\n"},
           {404, "GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n" + bearer(kOp) + "\r\n"},
           {404, "GET /api/vm/nosuch/views HTTP/1.1\r\nHost: 127.0.0.1\r\n" + bearer(kOp) + "\r\n"},
           {405, "POST /api/vms HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n" + bearer(kOp) + "\r\n"},
           {421, "GET /api/vms HTTP/1.1\r\nHost: rebind.example\r\n" + bearer(kOp) + "\r\n"},
           {401, "GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"},
       }) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string out = http_exchange(t.port, f.request + next);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    reply r = parse_reply(out);
    EXPECT_EQ(r.status, f.status) << f.request << out.substr(0, 300);
    EXPECT_EQ(responses_in(out), 1) << "answered after a " << f.status << ": " << out.substr(0, 600);
    EXPECT_EQ(header(r.head, "Connection"), "close") << r.head;
    EXPECT_LT(s, 2.0) << "ended by the server (the client waits 10 s)";
  }
  // The control: after a 200 the connection serves the next request.
  const std::string out = http_exchange(t.port, next + "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                                                     bearer(kOp) + "\r\n");
  EXPECT_EQ(responses_in(out), 2) << out.substr(0, 300);
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
  unlink(tokens.c_str());
}

// ?token= is never answered with data: a 303 to the same address without
// it, the cookie set; the address it sends to then serves with the cookie.
TEST(DashboardAttack, ATokenInTheAddressIsRedirectedAndNeverServed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string tokens = tmp("tokens");
  {
    std::ofstream f(tokens, std::ios::trunc);
    f << kOp << " all\n" << kT1 << " g1\n";
  }
  ASSERT_EQ(chmod(tokens.c_str(), 0600), 0);
  daemon_under_test t({"--http-tokens", tokens});
  ASSERT_TRUE(t.up());
  struct want {
    std::string target, token, location;
  };
  for (const auto& w : std::vector<want>{{"/?token=" + kT1, kT1, "/"},
                                         {"/api/vms?token=" + kOp + "&pretty=1", kOp, "/api/vms?pretty=1"},
                                         {"/api/vm/g1/views?token=" + kT1, kT1, "/api/vm/g1/views"},
                                         {"/metrics?token=" + kOp, kOp, "/metrics"},
                                         {"/assets/dashboard.js?token=" + kT1, kT1, "/assets/dashboard.js"},
                                         {"//evil.example/?token=" + kT1, kT1, "/evil.example/"}}) {
    // Even with a good token in the header too: the address is what the
    // browser keeps in its history.
    for (const std::string& extra : {std::string(""), bearer(kOp)}) {
      reply r = get(t.port, w.target, extra);
      if (w.location == "/evil.example/") {
        // Not a route: 404 before any token is looked at, and no cookie.
        EXPECT_EQ(r.status, 404) << r.head;
        continue;
      }
      EXPECT_EQ(r.status, 303) << w.target << ": " << r.head;
      EXPECT_EQ(header(r.head, "Location"), w.location) << r.head;
      EXPECT_EQ(header(r.head, "Set-Cookie"), "magnet_token=" + w.token + "; Path=/; HttpOnly; SameSite=Lax");
      EXPECT_EQ(header(r.head, "Cache-Control"), "no-store");
      for (const std::string& data : {std::string("\"vms\""), std::string("\"name\""), kG1Uuid, kG2Uuid,
                                      std::string("magnet_vm"), std::string("<script"), std::string("function")})
        EXPECT_EQ(r.body.find(data), std::string::npos) << w.target << ": " << r.body;
    }
  }
  // The stream too (EventSource follows the redirect with the cookie).
  {
    stream_reader s(t.port, "", false, "127.0.0.1", "/api/stream?token=" + kT1);
    const std::string h = s.head();
    EXPECT_EQ(h.rfind("HTTP/1.1 303 See Other\r\n", 0), 0u) << h;
    EXPECT_EQ(header(h, "Location"), "/api/stream");
  }
  // An unknown token in the address: 401 and no cookie.
  reply r = get(t.port, "/?token=wrong-token-0123456789abcdef");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(header(r.head, "Set-Cookie"), "");
  // Where the redirect sends the browser: served, with the cookie alone.
  r = get(t.port, "/api/vms?pretty=1", "Cookie: magnet_token=" + kT1 + "\r\n");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(names(json::parse(r.body)), (std::set<std::string>{"g1"}));
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
  unlink(tokens.c_str());
}

// Every kind of reply the daemon's server sends: X-Content-Type-Options: nosniff.
TEST(DashboardAttack, EveryReplySaysNosniff) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string tokens = tmp("tokens");
  {
    std::ofstream f(tokens, std::ios::trunc);
    f << kOp << " all\n" << kT1 << " g1\n";
  }
  ASSERT_EQ(chmod(tokens.c_str(), 0600), 0);
  daemon_under_test t({"--http-tokens", tokens});
  ASSERT_TRUE(t.up());
  const std::string op = bearer(kOp), h = "Host: 127.0.0.1\r\nConnection: close\r\n";
  struct kind {
    std::string name, request;
    int status;
  };
  for (const auto& k : std::vector<kind>{
           {"the page", "GET / HTTP/1.1\r\n" + h + op + "\r\n", 200},
           {"a script", "GET /assets/dashboard.js HTTP/1.1\r\n" + h + op + "\r\n", 200},
           {"a stylesheet", "GET /assets/uPlot.min.css HTTP/1.1\r\n" + h + op + "\r\n", 200},
           {"JSON", "GET /api/vms HTTP/1.1\r\n" + h + op + "\r\n", 200},
           {"views JSON", "GET /api/vm/g1/views HTTP/1.1\r\n" + h + op + "\r\n", 200},
           {"metrics text", "GET /metrics HTTP/1.1\r\n" + h + op + "\r\n", 200},
           {"OpenMetrics",
            "GET /metrics HTTP/1.1\r\n" + h + op + "Accept: application/openmetrics-text;version=1.0.0\r\n\r\n", 200},
           {"HEAD", "HEAD /metrics HTTP/1.1\r\n" + h + op + "\r\n", 200},
           {"a redirect", "GET /?token=" + kT1 + " HTTP/1.1\r\n" + h + "\r\n", 303},
           {"401", "GET /api/vms HTTP/1.1\r\n" + h + "\r\n", 401},
           {"403", "GET /metrics HTTP/1.1\r\n" + h + bearer(kT1) + "\r\n", 403},
           {"404", "GET /nothing HTTP/1.1\r\n" + h + op + "\r\n", 404},
           {"405", "PUT /metrics HTTP/1.1\r\n" + h + "Content-Length: 0\r\n" + op + "\r\n", 405},
           {"400", "GET /metrics HTTP/9.x\r\n\r\n", 400},
           {"421", "GET /metrics HTTP/1.1\r\nHost: rebind.example\r\n" + op + "\r\n", 421},
           {"431", "GET /metrics HTTP/1.1\r\n" + h + "Cookie: " + std::string(20000, 'c') + "\r\n\r\n", 431},
           {"a refused stream", "GET /api/stream HTTP/1.1\r\n" + h + "\r\n", 401},
       }) {
    reply r = parse_reply(http_exchange(t.port, k.request));
    EXPECT_EQ(r.status, k.status) << k.name << ": " << r.head;
    EXPECT_EQ(header(r.head, "X-Content-Type-Options"), "nosniff") << k.name << ": " << r.head;
  }
  stream_reader s(t.port, op);
  const std::string head = s.head();
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_EQ(header(head, "X-Content-Type-Options"), "nosniff") << "the event stream: " << head;
  std::vector<std::unique_ptr<stream_reader>> more;
  for (int i = 0; i < 4; ++i) more.push_back(std::make_unique<stream_reader>(t.port, bearer(kT1)));
  const std::string capped = more.back()->head();
  EXPECT_EQ(capped.rfind("HTTP/1.1 200 ", 0), 0u) << "4 per token";
  more.push_back(std::make_unique<stream_reader>(t.port, bearer(kT1)));
  const std::string over = more.back()->head();
  EXPECT_EQ(over.rfind("HTTP/1.1 429 ", 0), 0u) << over;
  EXPECT_EQ(header(over, "X-Content-Type-Options"), "nosniff") << over;
  EXPECT_EQ(t.d->stop(SIGTERM), 0) << t.d->stderr_text();
  unlink(tokens.c_str());
}

}  // namespace
}  // namespace magnet
