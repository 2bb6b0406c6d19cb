// The dashboard's parts that need no daemon: token files and their
// refusals, who a request is (header, query, cookie), what a tenant's JSON
// keeps, the text/event-stream framing, and the per-stream bounded queue,
// alone and on a real loopback connection whose reader does not read.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "magnet/http/dashboard.h"
#include "magnet/http/server.h"

namespace magnet::host {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kOp = "operator-token-0123456789";
const std::string kG1 = "tenant-g1-token-abcdefgh";

TEST(DashboardTokens, ParsesOperatorAndTenantLinesSkippingCommentsAndBlanks) {
  auto t = parse_tokens("# tokens\n\n" + kOp + " all\n  " + kG1 + "\tg1   # tenant\n" +
                            "tenant-uuid-token-0000 6695EB01-F6A4-8304-79AA-97F2502E193F\n",
                        "f");
  ASSERT_TRUE(t) << t.err().message;
  ASSERT_EQ(t->tokens.size(), 3u);
  EXPECT_TRUE(t->tokens[0].all);
  EXPECT_EQ(t->tokens[0].line, 3);
  EXPECT_FALSE(t->tokens[1].all);
  EXPECT_EQ(t->tokens[1].vm, "g1");
  EXPECT_EQ(t->tokens[1].line, 4);
  EXPECT_EQ(t->tokens[2].vm, "6695EB01-F6A4-8304-79AA-97F2502E193F");
}

TEST(DashboardTokens, RefusesBadLinesNamingTheLine) {
  struct bad {
    std::string text, says;
  };
  for (const auto& b : std::vector<bad>{
           {kOp + "\n", "f:1: a token without a scope"},
           {"# c\n" + kOp + " all extra\n", "f:2: expected 'TOKEN all' or 'TOKEN DOMAIN-NAME-or-UUID', found 3 words"},
           {"short all\n", "f:1: the token is shorter than 16 characters"},
           {"\n\nbad\"token-0123456789 all\n", "f:3: the token has a character outside"},
           {kOp + " all\n" + kOp + " g1\n", "f:2: this token is given on an earlier line too"},
       }) {
    auto t = parse_tokens(b.text, "f");
    ASSERT_FALSE(t) << b.text;
    EXPECT_EQ(t.err().message.rfind(b.says, 0), 0u) << t.err().message;
  }
}

TEST(DashboardTokens, LoadRefusesFilesOthersMayRead) {
  const std::string path = "/tmp/magnet-tokens-" + std::to_string(getpid());
  std::ofstream(path) << kOp << " all\n";
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto t = load_tokens(path);
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find("mode 0644 lets others read or change it"), std::string::npos) << t.err().message;
  ASSERT_EQ(chmod(path.c_str(), 0620), 0);
  EXPECT_FALSE(load_tokens(path)) << "group-writable";
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  t = load_tokens(path);
  ASSERT_TRUE(t) << t.err().message;
  EXPECT_EQ(t->tokens.size(), 1u);
  std::ofstream(path, std::ios::trunc) << "# nothing\n";
  t = load_tokens(path);
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find("no tokens"), std::string::npos) << t.err().message;
  unlink(path.c_str());
  t = load_tokens(path);
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find("cannot open"), std::string::npos) << t.err().message;
}

TEST(DashboardTokens, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal(kOp, kOp));
  EXPECT_FALSE(constant_time_equal(kOp, kOp + "x"));
  EXPECT_FALSE(constant_time_equal(kOp, kOp.substr(0, kOp.size() - 1)));
  std::string last = kOp;
  last.back() ^= 1;
  EXPECT_FALSE(constant_time_equal(kOp, last));
  EXPECT_FALSE(constant_time_equal(kOp, ""));
}

http_request get(const std::string& target, std::vector<std::pair<std::string, std::string>> headers = {}) {
  http_request r;
  r.method = "GET";
  r.target = target;
  r.path = target.substr(0, target.find('?'));
  r.headers = std::move(headers);
  return r;
}

TEST(DashboardAccess, TokensFromHeaderQueryOrCookieAndClearRefusals) {
  auto t = parse_tokens(kOp + " all\n" + kG1 + " g1\n", "f");
  ASSERT_TRUE(t);

  auto none = authorize(token_table{}, get("/"));
  ASSERT_TRUE(none.who) << "no tokens configured: everything (loopback only)";
  EXPECT_TRUE(none.who->all);

  auto a = authorize(*t, get("/api/vms"));
  ASSERT_FALSE(a.who);
  EXPECT_EQ(a.refusal.status, 401u);
  EXPECT_NE(a.refusal.body.find("this server needs a token"), std::string::npos) << a.refusal.body;
  ASSERT_FALSE(a.refusal.headers.empty());
  EXPECT_EQ(a.refusal.headers[0].first, "WWW-Authenticate");

  a = authorize(*t, get("/api/vms", {{"authorization", "Bearer not-a-known-token-000"}}));
  ASSERT_FALSE(a.who);
  EXPECT_EQ(a.refusal.status, 401u);
  EXPECT_NE(a.refusal.body.find("unknown token"), std::string::npos) << a.refusal.body;

  a = authorize(*t, get("/api/vms", {{"Authorization", "Bearer " + kOp}}));
  ASSERT_TRUE(a.who);
  EXPECT_TRUE(a.who->all);
  EXPECT_EQ(a.who->token_line, 1);

  EXPECT_EQ(url_decode("a%2Bb+c%2f%zz%4"), "a+b+c/%zz%4") << "%XX only";
  auto plus = parse_tokens("abc+def/ghi=jklmnop all\n", "f");
  ASSERT_TRUE(plus);
  a = authorize(*plus, get("/?token=abc%2Bdef%2Fghi%3Djklmnop"));
  EXPECT_EQ(a.refusal.status, 303u) << "an encoded token: known";
  a = authorize(*plus, get("/?token=abc+def/ghi=jklmnop"));
  EXPECT_EQ(a.refusal.status, 303u) << "a base64 token pasted as is: known";

  a = authorize(*t, get("/api/stream", {{"Cookie", "other=1; magnet_token=" + kG1}}));
  ASSERT_TRUE(a.who);
  EXPECT_EQ(a.who->vm, "g1");
  EXPECT_EQ(a.who->token_line, 2);
}

// A token in the address is never served: a 303 to the same address
// without it, setting the cookie, and no access in that response.
TEST(DashboardAccess, ATokenInTheQueryIsRedirectedToACookieAndNeverServed) {
  auto t = parse_tokens(kOp + " all\n" + kG1 + " g1\n", "f");
  ASSERT_TRUE(t);
  auto a = authorize(*t, get("/?x=1&token=" + kG1));
  EXPECT_FALSE(a.who) << "no data for an address with a token";
  EXPECT_EQ(a.refusal.status, 303u);
  std::map<std::string, std::string> h(a.refusal.headers.begin(), a.refusal.headers.end());
  EXPECT_EQ(h["Location"], "/?x=1");
  EXPECT_EQ(h["Set-Cookie"], "magnet_token=" + kG1 + "; Path=/; HttpOnly; SameSite=Lax");
  EXPECT_EQ(h["Cache-Control"], "no-store");
  EXPECT_EQ(a.refusal.body, "303 the token is a cookie now; continue at /?x=1\n");
  EXPECT_EQ(a.refusal.body.find(kG1), std::string::npos);

  // The query wins over a header or a cookie: still redirected.
  a = authorize(*t, get("/api/vms?token=" + kG1, {{"Authorization", "Bearer " + kOp}, {"Cookie", "magnet_token=" + kOp}}));
  EXPECT_FALSE(a.who);
  EXPECT_EQ(a.refusal.status, 303u);
  // An unknown token in the query: 401, no cookie.
  a = authorize(*t, get("/?token=not-a-known-token-000"));
  EXPECT_FALSE(a.who);
  EXPECT_EQ(a.refusal.status, 401u);
  for (const auto& [k, v] : a.refusal.headers) EXPECT_NE(k, "Set-Cookie");
  // No tokens configured: nothing to turn into a cookie, served as before.
  EXPECT_TRUE(authorize(token_table{}, get("/?token=" + kG1)).who);

  EXPECT_EQ(without_token("/"), "/");
  EXPECT_EQ(without_token("/?token=abc"), "/");
  EXPECT_EQ(without_token("/api/vms?a=1&token=abc&b=2"), "/api/vms?a=1&b=2");
  EXPECT_EQ(without_token("/api/vms?token=abc&token=def"), "/api/vms") << "every token parameter";
  EXPECT_EQ(without_token("/x?token&tokens=1&y"), "/x?tokens=1&y");
  EXPECT_EQ(without_token("/x?&&a=1&"), "/x?a=1");
  EXPECT_EQ(without_token("//evil.example/?token=abc"), "/evil.example/") << "never to another host";
  EXPECT_EQ(without_token("/\\evil.example/?token=abc"), "/evil.example/");
  EXPECT_EQ(without_token("/%2F%2Fx?token=a"), "/%2F%2Fx") << "as sent, not decoded";
}

TEST(DashboardAccess, TenantSeesItsVmByRegistryNameOrUuid) {
  access by_name{false, "g1"}, by_uuid{false, "AAAA-bbbb"}, op{true, {}};
  EXPECT_TRUE(by_name.may_see("g1", "aaaa-bbbb"));
  EXPECT_FALSE(by_name.may_see("g2", "cccc"));
  EXPECT_FALSE(by_name.may_see("g10", "")) << "whole names only";
  EXPECT_TRUE(by_uuid.may_see("whatever", "aaaa-BBBB")) << "UUIDs in any case";
  EXPECT_TRUE(op.may_see("g2", "cccc"));
  EXPECT_FALSE((access{false, ""}).may_see("", "")) << "an empty scope sees nothing";
}

TEST(DashboardAccess, TenantJsonKeepsOnlyItsVmAndNoHostWideFields) {
  ojson dash = ojson::parse(R"({"at_ms":5,"wall_ms":6,"lost":7,"libvirt":true,"vms":[
    {"vm":1,"name":"g1","uuid":"u-1","tx_mbps":20},
    {"vm":2,"name":"g2","uuid":"u-2","tx_mbps":5}]})");
  ojson op = for_access(dash, access{true, {}});
  EXPECT_EQ(op, dash);
  ojson g1 = for_access(dash, access{false, "g1"});
  EXPECT_EQ(g1.dump(), R"({"at_ms":5,"wall_ms":6,"vms":[{"vm":1,"name":"g1","uuid":"u-1","tx_mbps":20}]})");
  ojson u2 = for_access(dash, access{false, "U-2"});
  ASSERT_EQ(u2["vms"].size(), 1u);
  EXPECT_EQ(u2["vms"][0]["name"], "g2");
  EXPECT_EQ(u2.dump().find("g1"), std::string::npos);
  EXPECT_EQ(for_access(dash, access{false, "g3"})["vms"].size(), 0u);
}

// The power chart's data: a tenant keeps its VM's share (power_watts,
// energy_joules) and never the host's power, whose total would tell it the
// other VMs' load (docs/placement.md, "What a guest may learn").
TEST(DashboardAccess, TenantKeepsItsVmsPowerShareButNotTheHosts) {
  ojson dash = ojson::parse(R"({"at_ms":5,"wall_ms":6,"lost":7,"libvirt":true,
    "power":{"source":"rapl","watts":50.5,"energy_joules":900},"vms":[
    {"vm":1,"name":"g1","uuid":"u-1","power_watts":3.25,"energy_joules":70.5},
    {"vm":2,"name":"g2","uuid":"u-2","power_watts":1.75,"energy_joules":30.5}]})");
  EXPECT_EQ(for_access(dash, access{true, {}})["power"]["watts"], 50.5) << "an operator's";
  ojson g1 = for_access(dash, access{false, "g1"});
  EXPECT_EQ(g1.dump(),
            R"({"at_ms":5,"wall_ms":6,"vms":[{"vm":1,"name":"g1","uuid":"u-1","power_watts":3.25,"energy_joules":70.5}]})");
  for (const char* other : {"50.5", "900", "1.75", "30.5"})
    EXPECT_EQ(g1.dump().find(other), std::string::npos) << other;
}

TEST(DashboardSse, FramesIdEventAndOneDataLinePerLine) {
  EXPECT_EQ(sse_frame({7, "sample", "{\"a\":1}"}), "id: 7\nevent: sample\ndata: {\"a\":1}\n\n");
  EXPECT_EQ(sse_frame({0, "", "x"}), "data: x\n\n") << "no id, the default type";
  EXPECT_EQ(sse_frame({1, "a\nb", "one\ntwo\r\nthree\rfour"}),
            "id: 1\nevent: ab\ndata: one\ndata: two\ndata: three\ndata: four\n\n");
  EXPECT_EQ(sse_frame({2, "e", ""}), "id: 2\nevent: e\ndata: \n\n");
  EXPECT_EQ(sse_frame({2, "e", "end\n"}), "id: 2\nevent: e\ndata: end\ndata: \n\n") << "a trailing LF kept";
}

TEST(DashboardSse, LatestQueueKeepsTheNewestAndCountsWhatItDrops) {
  latest_queue q(2);
  EXPECT_FALSE(q.pop());
  for (uint64_t i = 1; i <= 5; ++i) q.push({i, "sample", std::string(1000, 'x')});
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.dropped(), 3u);
  EXPECT_EQ(q.pop()->id, 4u);
  q.push({6, "sample", "y"});
  EXPECT_EQ(q.dropped(), 3u) << "room for it: nothing dropped";
  EXPECT_EQ(q.pop()->id, 5u);
  EXPECT_EQ(q.pop()->id, 6u);
  EXPECT_FALSE(q.pop());
  latest_queue zero(0);
  EXPECT_EQ(zero.capacity(), 1u) << "at least the newest";
}

// A stream route on a real server, driven from the test: pushes happen on
// the io thread as the daemon's ticks do.
class HttpStream : public ::testing::Test {
 protected:
  void open(http_options o) {
    auto s = http_server::open(io_, *parse_http_endpoint("127.0.0.1:0"), o);
    ASSERT_TRUE(s) << s.err().message;
    srv_ = std::move(*s);
    srv_->route_stream("/s", [this](const http_request& r) {
      stream_reply rep;
      if (r.target == "/s?no") {
        rep.refuse = http_response{403, "text/plain", "no\n"};
        return rep;
      }
      rep.headers.emplace_back("X-Test", "1");
      rep.on_open = [this](std::shared_ptr<http_stream> s) { opened_.set_value(std::move(s)); };
      return rep;
    });
    port_ = srv_->local_endpoint().port;
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    boost::asio::post(io_, [this] {
      stream_.reset();
      srv_.reset();
    });
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }
  // A client whose receive buffer is as small as the kernel allows.
  int connect_small() const {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int small = 1024;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    timeval tv{3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }
  template <class F>
  auto on_io(F&& f) {
    std::promise<decltype(f())> p;
    boost::asio::post(io_, [&] { p.set_value(f()); });
    return p.get_future().get();
  }
  // A small-buffered client that asked for the stream; the stream's server
  // side in @server once it opened.
  int request_stream(std::shared_ptr<http_stream>& server) {
    opened_ = {};
    int fd = connect_small();
    const std::string req = "GET /s HTTP/1.1\r\nHost: localhost\r\n\r\n";
    EXPECT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
    server = opened_.get_future().get();
    return fd;
  }
  // Reads until @want is in @got (or the 3 s receive timeout).
  static bool read_until(int fd, std::string& got, const std::string& want) {
    char b[65536];
    while (got.find(want) == std::string::npos) {
      ssize_t n = ::recv(fd, b, sizeof b, 0);
      if (n <= 0) return false;
      got.append(b, static_cast<size_t>(n));
    }
    return true;
  }

  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{
      io_.get_executor()};
  std::unique_ptr<http_server> srv_;
  std::promise<std::shared_ptr<http_stream>> opened_;
  std::shared_ptr<http_stream> stream_;
  std::thread thread_;
  uint16_t port_ = 0;
};

TEST_F(HttpStream, ASlowReaderGetsTheNewestEventsAndACountOfTheDroppedOnes) {
  http_options o;
  o.stream_queue = 2;
  o.stream_sndbuf = 4096;
  open(o);
  int fd = request_stream(stream_);
  std::string got;
  ASSERT_TRUE(read_until(fd, got, "retry: 2000\n\n")) << got;
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("Content-Type: text/event-stream; charset=utf-8\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("X-Test: 1\r\n"), std::string::npos) << got;

  // 100 events of 64 KiB at once, far more than the socket buffers hold
  // while the reader reads nothing: the first is being written, the two
  // newest wait, the rest are dropped.
  const size_t n = 100;
  const std::string big(64 * 1024, 'x');
  auto [dropped, pushed] = on_io([&] {
    size_t ok = 0;
    for (uint64_t i = 1; i <= n; ++i) ok += stream_->push({i, "sample", std::to_string(i) + big});
    return std::pair{stream_->dropped(), ok};
  });
  EXPECT_EQ(pushed, n);
  EXPECT_EQ(dropped, n - 3) << "one in flight, two queued";

  got.clear();
  ASSERT_TRUE(read_until(fd, got, "id: " + std::to_string(n) + "\n")) << got.size();
  ASSERT_TRUE(read_until(fd, got, big + "\n\n"));
  // The ids read, and the count announced before the first one after the gap.
  std::vector<uint64_t> ids;
  std::regex id_re("(^|\n)id: (\\d+)\n");
  for (auto it = std::sregex_iterator(got.begin(), got.end(), id_re); it != std::sregex_iterator(); ++it)
    ids.push_back(std::stoull((*it)[2]));
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, n - 1, n}));
  const std::string announce = "event: dropped\ndata: " + std::to_string(n - 3) + "\n\nid: " + std::to_string(n - 1);
  EXPECT_NE(got.find(announce), std::string::npos) << "the dropped count just before the first event after the gap";
  EXPECT_EQ(on_io([&] { return stream_->written(); }), 3u);
  close(fd);
}

TEST_F(HttpStream, AWriteThatMissesItsDeadlineEndsTheStreamAndSoDoesAPeerThatLeaves) {
  http_options o;
  o.write_timeout_ms = 300;
  o.stream_sndbuf = 4096;
  open(o);
  int fd = request_stream(stream_);
  EXPECT_TRUE(on_io([&] { return stream_->open(); }));
  EXPECT_TRUE(on_io([&] { return stream_->push({1, "sample", std::string(1 << 20, 'x')}); }));
  // Nobody reads: the write stalls, its deadline ends the connection.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (on_io([&] { return stream_->open(); }) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(on_io([&] { return stream_->open(); })) << "still open 5 s after a 300 ms write deadline";
  EXPECT_FALSE(on_io([&] { return stream_->push({2, "sample", "x"}); })) << "a push after the end says so";
  close(fd);

  // A reader that goes away is noticed without a push.
  std::shared_ptr<http_stream> s2;
  fd = request_stream(s2);
  std::string got;
  ASSERT_TRUE(read_until(fd, got, "retry: 2000\n\n"));
  close(fd);
  until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (on_io([&] { return s2->open(); }) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(on_io([&] { return s2->open(); }));
  on_io([&] {
    s2.reset();
    return 0;
  });
}

TEST_F(HttpStream, RefusalsAreWholeResponsesAndOnlyGetStreams) {
  open({});
  auto exchange = [&](const std::string& req) {
    int fd = connect_small();
    ::send(fd, req.data(), req.size(), 0);
    std::string got;
    char b[4096];
    for (ssize_t n; (n = ::recv(fd, b, sizeof b, 0)) > 0;) got.append(b, static_cast<size_t>(n));
    close(fd);
    return got;
  };
  std::string r = exchange("GET /s?no HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\nno\n")) << r;
  r = exchange("HEAD /s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << r;
}

TEST(HttpPrefix, LongestPrefixRouteServesAndExactRoutesWin) {
  boost::asio::io_context io;
  auto s = http_server::open(io, *parse_http_endpoint("127.0.0.1:0"));
  ASSERT_TRUE(s);
  (*s)->route_prefix("/a/", [](const http_request& r) { return http_response{200, "text/plain", "a " + r.path}; });
  (*s)->route_prefix("/a/b/", [](const http_request& r) { return http_response{200, "text/plain", "ab " + r.path}; });
  (*s)->route("/a/x", [](const http_request&) { return http_response{200, "text/plain", "exact"}; });
  const uint16_t port = (*s)->local_endpoint().port;
  std::thread t([&] { io.run(); });
  auto fetch = [&](const std::string& path) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    ::send(fd, req.data(), req.size(), 0);
    std::string got;
    char b[4096];
    for (ssize_t n; (n = ::recv(fd, b, sizeof b, 0)) > 0;) got.append(b, static_cast<size_t>(n));
    close(fd);
    size_t at = got.find("\r\n\r\n");
    return at == std::string::npos ? got : got.substr(at + 4);
  };
  EXPECT_EQ(fetch("/a/1"), "a /a/1");
  EXPECT_EQ(fetch("/a/b/2?q"), "ab /a/b/2");
  EXPECT_EQ(fetch("/a/x"), "exact");
  EXPECT_NE(fetch("/b").find("no such path"), std::string::npos);
  boost::asio::post(io, [&] { (*s).reset(); });
  io.stop();
  t.join();
}

}  // namespace
}  // namespace magnet::host
