// The daemon's HTTP server on loopback: routes, methods, malformed and
// oversized requests, keep-alive, the read deadline and the connection
// limit; nothing a client sends stops it from serving the next one.  And as
// an attacker meets it: a Host of another name (DNS rebinding) refused
// before any route runs, every 4xx ending its connection, nosniff on every
// reply, and connection slots per class: streams at their caps, idle and
// not-reading connections never keep a plain request out.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <future>
#include <thread>

#include "magnet/http/server.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace magnet::host {
namespace {

class HttpServer : public ::testing::Test {
 protected:
  void SetUp() override {
    http_options o;
    o.max_header_bytes = 1024;
    o.max_body_bytes = 64;
    o.max_connections = 2;
    o.max_streams = 1;
    o.read_timeout_ms = 300;
    start(o);
  }
  // @at: where to listen (connect_ goes to 127.0.0.1 unless @at is another
  // loopback address).
  void start(const http_options& o, const std::string& at = "127.0.0.1:0") {
    auto e = parse_http_endpoint(at);
    ASSERT_TRUE(e) << e.err().message;
    if (e->loopback && e->addr.find(':') == std::string::npos) inet_pton(AF_INET, e->addr.c_str(), &addr_);
    auto s = http_server::open(io_, *e, o);
    ASSERT_TRUE(s) << s.err().message;
    srv_ = std::move(*s);
    srv_->route("/hello", [this](const http_request& r) {
      ++served_;
      return http_response{200, "text/plain", "hello, accept=" + r.header("accept") + "\n"};
    });
    srv_->route("/throws", [](const http_request&) -> http_response { throw std::runtime_error("bug"); });
    srv_->route("/status", [](const http_request& r) {
      return http_response{static_cast<unsigned>(std::stoul(r.target.substr(r.target.find('?') + 1))),
                           "text/plain", "as asked\n"};
    });
    srv_->route("/big", [](const http_request&) { return http_response{200, "text/plain", std::string(12 << 20, 'b')}; });
    // A stream per request, its share the query ("/s?a": share a).
    srv_->route_stream("/s", [this](const http_request& r) {
      stream_reply rep;
      if (r.target == "/s?no") rep.refuse = http_response{403, "text/plain", "no\n"};
      if (size_t q = r.target.find('?'); q != std::string::npos) rep.share = r.target.substr(q + 1);
      rep.on_open = [this](std::shared_ptr<http_stream> s) { streams_.push_back(std::move(s)); };
      return rep;
    });
    port_ = srv_->local_endpoint().port;
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    boost::asio::post(io_, [this] {
      streams_.clear();
      srv_.reset();
    });
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  int connect_() const {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr = addr_;
    timeval tv{3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }
  static void send_all(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may close early (an oversized request)
      off += static_cast<size_t>(n);
    }
  }
  // Everything until the server closes (or 3 s without data).
  static std::string read_all(int fd) {
    std::string out;
    char b[4096];
    for (ssize_t n; (n = ::recv(fd, b, sizeof b, 0)) > 0;) out.append(b, static_cast<size_t>(n));
    return out;
  }
  std::string exchange(const std::string& req) const {
    int fd = connect_();
    send_all(fd, req);
    std::string r = read_all(fd);
    close(fd);
    return r;
  }
  template <class F>
  auto on_io(F&& f) {
    std::promise<decltype(f())> p;
    boost::asio::post(io_, [&] { p.set_value(f()); });
    return p.get_future().get();
  }
  uint64_t refused() {
    return on_io([&] { return srv_->refused(); });
  }
  // A connection that asked for a stream; its response head read.
  int open_stream(const std::string& target, std::string& head) {
    int fd = connect_();
    send_all(fd, "GET " + target + " HTTP/1.1\r\nHost: localhost\r\n\r\n");
    head.clear();
    char b[4096];
    while (head.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(fd, b, sizeof b, 0);
      if (n <= 0) break;
      head.append(b, static_cast<size_t>(n));
    }
    return fd;
  }
  // True when the peer has closed @fd (EOF within @ms, after any data).
  static bool closed_by_peer(int fd, int ms = 2000) {
    timeval tv{ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b[4096];
    ssize_t n;
    while ((n = ::recv(fd, b, sizeof b, 0)) > 0) {
    }
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }
  std::string hello() const { return exchange("GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"); }

  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{
      io_.get_executor()};
  std::unique_ptr<http_server> srv_;
  std::vector<std::shared_ptr<http_stream>> streams_;  // io thread only
  std::atomic<int> served_{0};
  std::thread thread_;
  uint16_t port_ = 0;
  in_addr addr_{htonl(INADDR_LOOPBACK)};
};

TEST_F(HttpServer, ServesRoutesAndAnswersEveryBadRequestWithItsStatus) {
  std::string r = exchange("GET /hello HTTP/1.1\r\nHost: localhost\r\nAccept: a/b\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("Content-Length: 18\r\n"), std::string::npos) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\nhello, accept=a/b\n")) << r;

  r = exchange("HEAD /hello?x=1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Length: 15\r\n"), std::string::npos) << "the length of the GET body: " << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\n")) << "HEAD: no body: " << r;

  r = exchange("GET /nope HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("no such path: /nope"), std::string::npos) << r;

  r = exchange("POST /hello HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc");
  EXPECT_EQ(r.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Allow: GET, HEAD\r\n"), std::string::npos) << r;

  r = exchange("this is not http\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("malformed request"), std::string::npos) << r;

  r = exchange("GET http://example.com/hello HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << r;

  r = exchange("GET /hello HTTP/1.1\r\nHost: localhost\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 431 Request Header Fields Too Large\r\n", 0), 0u) << r;

  r = exchange("POST /hello HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n" + std::string(2000, 'b'));
  EXPECT_EQ(r.rfind("HTTP/1.1 413 Payload Too Large\r\n", 0), 0u) << r;

  r = exchange("GET /throws HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 500 Internal Server Error\r\n", 0), 0u) << r;

  r = exchange("GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << "still serving: " << r;
}

TEST_F(HttpServer, KeepAliveServesRequestsInOrder) {
  std::string r = exchange(
      "GET /hello HTTP/1.1\r\nHost: localhost\r\nAccept: one\r\n\r\n"
      "GET /hello HTTP/1.1\r\nHost: localhost\r\nAccept: two\r\nConnection: close\r\n\r\n");
  size_t one = r.find("accept=one"), two = r.find("accept=two");
  EXPECT_NE(one, std::string::npos) << r;
  EXPECT_NE(two, std::string::npos) << r;
  EXPECT_LT(one, two);
}

TEST_F(HttpServer, ASilentClientIsClosedAtTheReadDeadline) {
  int fd = connect_();
  send_all(fd, "GET /hel");  // and nothing more
  auto t0 = std::chrono::steady_clock::now();
  std::string r = read_all(fd);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  EXPECT_EQ(r, "") << "closed without a reply";
  EXPECT_LT(s, 2.0) << "the 300 ms deadline, not the client's 3 s";
  EXPECT_GT(s, 0.2);
}

// The head of the first response in @r ("" when none).
std::string head_of(const std::string& r) { return r.substr(0, r.find("\r\n\r\n")); }
int responses_in(const std::string& r) {
  int n = 0;
  for (size_t at = r.find("HTTP/1.1 "); at != std::string::npos; at = r.find("HTTP/1.1 ", at + 1)) ++n;
  return n;
}

TEST_F(HttpServer, AHostOfAnotherNameIsRefusedBeforeAnyRouteRuns) {
  const std::string port = std::to_string(port_);
  for (const std::string& host : std::vector<std::string>{"rebind.example", "rebind.example:" + port,
                                                          "localhost.rebind.example:" + port,
                                 "127.0.0.1.nip.io", "localhost.", "127.0.0.2:" + port}) {
    std::string r = exchange("GET /hello HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 421 Misdirected Request\r\n", 0), 0u) << host << ": " << r;
    EXPECT_NE(r.find("Host '" + host + "' is not a name of this server"), std::string::npos) << r;
    EXPECT_NE(r.find("this server answers to localhost, 127.0.0.1, [::1] "), std::string::npos) << r;
    EXPECT_NE(head_of(r).find("\r\nConnection: close"), std::string::npos) << r;
    EXPECT_EQ(r.find("hello"), std::string::npos) << "no route ran: " << r;
    // A stream route is no way around it.
    r = exchange("GET /s HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 421 ", 0), 0u) << host << ": " << r;
  }
  EXPECT_EQ(served_, 0);
  EXPECT_EQ(on_io([&] { return streams_.size(); }), 0u) << "no stream opened for another name";

  // No Host in HTTP/1.1, two, one that is no host name: 400 (RFC 9112 3.2).
  for (const std::string& head : {std::string(""), std::string("Host: localhost\r\nHost: localhost\r\n"),
                                  std::string("Host: local host\r\n"), std::string("Host: a:b:c\r\n"),
                                  std::string("Host: [::1\r\n"), std::string("Host: localhost:99999\r\n")}) {
    std::string r = exchange("GET /hello HTTP/1.1\r\n" + head + "\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << head << ": " << r;
    EXPECT_NE(r.find("this server answers to localhost"), std::string::npos) << r;
  }
  EXPECT_EQ(served_, 0);

  // The loopback names in any case, with any port or none; HTTP/1.0 may leave it out.
  for (const std::string& host : std::vector<std::string>{"localhost", "LOCALHOST:" + port, "LocalHost:1", "127.0.0.1",
                                                          "127.0.0.1:" + port,
                                 "[::1]", "[::1]:" + port, "localhost:"}) {
    std::string r = exchange("GET /hello HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << host << ": " << r;
  }
  std::string r = exchange("GET /hello HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << r;
  EXPECT_EQ(served_, 9);
}

TEST(HttpHostName, ParsesNamesAddressesAndPortsAndMatchesByNameThenPort) {
  auto h = parse_http_host_name("Dash.Example:8443");
  ASSERT_TRUE(h) << h.err().message;
  EXPECT_EQ(h->name, "dash.example");
  EXPECT_EQ(h->port, 8443);
  EXPECT_EQ(h->text(), "dash.example:8443");
  h = parse_http_host_name("[::1]");
  ASSERT_TRUE(h) << h.err().message;
  EXPECT_EQ(h->name, "[::1]");
  EXPECT_FALSE(h->port);
  EXPECT_EQ(parse_http_host_name("10.0.0.5:80")->text(), "10.0.0.5:80");
  EXPECT_EQ(parse_http_host_name("[2001:DB8::1]:9477")->text(), "[2001:db8::1]:9477");
  for (const char* bad : {"", ":80", "a b", "a:b:c", "::1", "[::1", "[::1]x", "[nope]:1", "a:12x", "a/b", "a\x01",
                          "a:123456"}) {
    auto r = parse_http_host_name(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_NE(r.err().message.find("expected NAME or NAME:PORT"), std::string::npos) << r.err().message;
    }
  }
  EXPECT_NE(parse_http_host_name("a:0").err().message.find("'a:0': port 0 is not 1 to 65535"), std::string::npos);
  EXPECT_NE(parse_http_host_name("a:65536").err().message.find("port 65536 is not 1 to 65535"), std::string::npos);
  const http_host_name any{"dash.example", std::nullopt}, exact{"dash.example", 8443};
  EXPECT_TRUE(any.matches(*parse_http_host_name("DASH.example")));
  EXPECT_TRUE(any.matches(*parse_http_host_name("dash.example:1")));
  EXPECT_TRUE(exact.matches(*parse_http_host_name("dash.example:8443")));
  EXPECT_FALSE(exact.matches(*parse_http_host_name("dash.example"))) << "a port given: that port only";
  EXPECT_FALSE(exact.matches(*parse_http_host_name("dash.example:443")));
  EXPECT_FALSE(any.matches(*parse_http_host_name("dash.example.evil")));
  EXPECT_FALSE(any.matches(*parse_http_host_name("evil-dash.example")));
}

TEST_F(HttpServer, Every4xxEndsItsConnectionAndA2xxKeepsIt) {
  // Pipelined: the request after a refusal is never answered on that connection.
  for (const std::string& first :
       {std::string("GET /status?401 HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        std::string("GET /status?403 HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        std::string("GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        std::string("HEAD /nope HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        std::string("POST /hello HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"),
        std::string("GET /status?418 HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        std::string("GET /hello HTTP/1.1\r\nHost: rebind.example\r\n\r\n"),
        std::string("GET /s?no HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        std::string("HEAD /s HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        std::string("GET /status?500 HTTP/1.1\r\nHost: localhost\r\n\r\n")}) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string r = exchange(first + "GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(responses_in(r), 1) << first << r;
    EXPECT_NE(head_of(r).find("\r\nConnection: close"), std::string::npos) << r;
    EXPECT_LT(s, 1.0) << "closed by the server, not by the client's 3 s timeout: " << first;
  }
  EXPECT_EQ(served_, 0);
  // The control: a 200 (and a 303) keep the connection for the next request.
  std::string r = exchange(
      "GET /status?303 HTTP/1.1\r\nHost: localhost\r\n\r\n"
      "GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(responses_in(r), 2) << r;
  EXPECT_EQ(served_, 1);
}

TEST_F(HttpServer, EveryReplySaysNosniff) {
  struct kind {
    std::string name, request;
    unsigned status;
  };
  const std::string h = "Host: localhost\r\nConnection: close\r\n";
  for (const auto& k : std::vector<kind>{
           {"a route's 200", "GET /hello HTTP/1.1\r\n" + h + "\r\n", 200},
           {"HEAD", "HEAD /hello HTTP/1.1\r\n" + h + "\r\n", 200},
           {"a redirect", "GET /status?303 HTTP/1.1\r\n" + h + "\r\n", 303},
           {"404", "GET /nope HTTP/1.1\r\n" + h + "\r\n", 404},
           {"405", "PUT /hello HTTP/1.1\r\n" + h + "Content-Length: 0\r\n\r\n", 405},
           {"400", "nonsense\r\n\r\n", 400},
           {"421", "GET /hello HTTP/1.1\r\nHost: rebind.example\r\n\r\n", 421},
           {"431", "GET /hello HTTP/1.1\r\n" + h + "X: " + std::string(2000, 'x') + "\r\n\r\n", 431},
           {"413", "POST /hello HTTP/1.1\r\n" + h + "Content-Length: 1000\r\n\r\n" + std::string(1000, 'x'), 413},
           {"500", "GET /throws HTTP/1.1\r\n" + h + "\r\n", 500},
           {"a refused stream", "GET /s?no HTTP/1.1\r\n" + h + "\r\n", 403},
       }) {
    std::string r = exchange(k.request);
    EXPECT_EQ(r.rfind("HTTP/1.1 " + std::to_string(k.status) + " ", 0), 0u) << k.name << ": " << r.substr(0, 200);
    EXPECT_NE(head_of(r).find("\r\nX-Content-Type-Options: nosniff\r\n"), std::string::npos)
        << k.name << ": " << head_of(r);
  }
  std::string head;
  int fd = open_stream("/s", head);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("\r\nX-Content-Type-Options: nosniff\r\n"), std::string::npos) << "a stream: " << head;
  close(fd);
}

TEST_F(HttpServer, ARefusedRequestOrStreamLeavesAnOpenStreamAlone) {
  std::string head;
  int fd = open_stream("/s", head);
  ASSERT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  for (const std::string& bad : {std::string("GET /hello HTTP/1.1\r\nHost: rebind.example\r\n\r\n"),
                                 std::string("GET /s HTTP/1.1\r\nHost: localhost\r\n\r\n"),  // over max_streams: 503
                                 std::string("GET /s?no HTTP/1.1\r\nHost: localhost\r\n\r\n"),
                                 std::string("GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n"),
                                 std::string("\x16\x03\x01\x02\x00\x01\x00\x01", 8),
                                 "GET /hello HTTP/1.1\r\nHost: localhost\r\nX: " + std::string(4000, 'x') + "\r\n\r\n"}) {
    std::string r = exchange(bad);
    EXPECT_EQ(r.rfind("HTTP/1.1 4", 0) == 0 || r.rfind("HTTP/1.1 5", 0) == 0, true) << r.substr(0, 200);
  }
  EXPECT_EQ(on_io([&] { return srv_->streams(); }), 1u);
  ASSERT_EQ(on_io([&] { return streams_.size(); }), 1u);
  EXPECT_TRUE(on_io([&] { return streams_[0]->push({7, "sample", "still here"}); }));
  std::string got;
  char b[4096];
  while (got.find("data: still here\n\n") == std::string::npos) {
    ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n <= 0) break;
    got.append(b, static_cast<size_t>(n));
  }
  EXPECT_NE(got.find("id: 7\nevent: sample\ndata: still here\n\n"), std::string::npos) << got;
  close(fd);
}

// Slots: each test sets its own bounds.
class HttpSlots : public HttpServer {
 protected:
  void SetUp() override {}
  uint64_t evicted() {
    return on_io([&] { return srv_->evicted(); });
  }
};

TEST_F(HttpSlots, IdleAndHalfSentConnectionsGiveTheirSlotsToNewOnes) {
  http_options o;
  o.max_connections = 4;
  o.max_streams = 2;
  o.read_timeout_ms = 5000;
  start(o);
  // Every slot taken by someone who says nothing, or not all of it.
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(connect_());
    if (i % 2) send_all(idle.back(), "GET /hel");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // accepted in this order
  }
  std::string r = hello();
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_EQ(evicted(), 1u);
  EXPECT_TRUE(closed_by_peer(idle[0], 500)) << "the oldest idle connection gave its slot";
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    r = hello();
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << i << ": " << r;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.5);
  }
  EXPECT_EQ(refused(), 0u) << "never a connection closed unanswered";
  for (int fd : idle) close(fd);
}

TEST_F(HttpSlots, StreamsAtTheirCapsNeverKeepAPlainRequestOut) {
  http_options o;
  o.max_connections = 4;
  o.max_streams = 2;
  o.max_streams_per_share = 1;
  o.read_timeout_ms = 5000;
  start(o);
  std::string head;
  int a = open_stream("/s?a", head);
  ASSERT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  // The same share again: 429, and its connection ends.
  int a2 = open_stream("/s?a", head);
  EXPECT_EQ(head.rfind("HTTP/1.1 429 Too Many Requests\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("\r\nRetry-After: "), std::string::npos) << head;
  EXPECT_TRUE(closed_by_peer(a2));
  close(a2);
  int b = open_stream("/s?b", head);
  ASSERT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  // Two streams: the total.  Another share, or none: 503.
  for (const char* t : {"/s?c", "/s"}) {
    int c = open_stream(t, head);
    EXPECT_EQ(head.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u) << t << ": " << head;
    EXPECT_TRUE(closed_by_peer(c)) << t;
    close(c);
  }
  EXPECT_EQ(on_io([&] { return srv_->streams(); }), 2u);
  // Streams at their cap and the other slots held idle: plain requests
  // are still served, every time.
  std::vector<int> idle = {connect_(), connect_()};
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(hello().rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << i;
  EXPECT_EQ(refused(), 0u);
  // A stream that ends gives its share's slot back.
  close(a);
  for (int i = 0; i < 100 && on_io([&] { return srv_->streams(); }) != 1u; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  int a3 = open_stream("/s?a", head);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  for (int fd : idle) close(fd);
  close(a3);
  close(b);
}

TEST_F(HttpSlots, AReplyNobodyReadsGivesItsSlotUpAfterSlowWriteAndNothingElseIsTaken) {
  http_options o;
  o.max_connections = 2;
  o.max_streams = 1;
  // The first new connection must come before the oldest reply has been
  // stalled this long: 400 ms was missed twice on a loaded machine (the
  // new one then took the stalled reply's slot at once and was answered).
  o.slow_write_ms = 2000;
  o.read_timeout_ms = 5000;
  start(o);
  // Two clients ask for 12 MiB and read nothing: more than the sockets hold.
  std::vector<int> stuck;
  for (int i = 0; i < 2; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int small = 1024;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    send_all(fd, "GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stuck.push_back(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the first is the oldest
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Both replies only just started: nothing to take, the new one is closed.
  EXPECT_EQ(hello(), "") << "closed unanswered";
  EXPECT_EQ(refused(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_EQ(hello().rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << "the oldest stalled reply gave its slot";
  EXPECT_EQ(evicted(), 1u);
  EXPECT_TRUE(closed_by_peer(stuck[0])) << "the oldest one";
  for (int fd : stuck) close(fd);
}

TEST(HttpOptions, StreamsMustLeaveSlotsForPlainRequests) {
  boost::asio::io_context io;
  http_options o;
  o.max_connections = 8;
  o.max_streams = 8;
  auto s = http_server::open(io, *parse_http_endpoint("127.0.0.1:0"), o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("8 event streams of 8 connections: streams must leave slots"), std::string::npos)
      << s.err().message;
  o.max_streams = 7;
  EXPECT_TRUE(http_server::open(io, *parse_http_endpoint("127.0.0.1:0"), o));
}

TEST_F(HttpSlots, NamesGivenInTheOptionsAreAcceptedAsWritten) {
  http_options o;
  o.hosts = {*parse_http_host_name("proxy.example"), *parse_http_host_name("exact.example:8443")};
  start(o);
  auto status = [&](const std::string& host) {
    std::string r = exchange("GET /hello HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
    return r.size() > 12 ? std::stoi(r.substr(9, 3)) : 0;
  };
  EXPECT_EQ(status("proxy.example"), 200);
  EXPECT_EQ(status("Proxy.Example:" + std::to_string(port_)), 200);
  EXPECT_EQ(status("proxy.example:443"), 200);
  EXPECT_EQ(status("exact.example:8443"), 200);
  EXPECT_EQ(status("exact.example"), 421);
  EXPECT_EQ(status("exact.example:" + std::to_string(port_)), 421);
  EXPECT_EQ(status("other.example"), 421);
  std::string names = on_io([&] {
    std::string t;
    for (const auto& n : srv_->host_names()) t += n.text() + " ";
    return t;
  });
  EXPECT_EQ(names, "localhost 127.0.0.1 [::1] proxy.example exact.example:8443 ");
}

// The address the server is bound to is one of its names; another
// loopback address is not.
TEST_F(HttpSlots, TheBoundAddressIsANameOfTheServer) {
  start(http_options{}, "127.0.0.2:0");
  const std::string port = std::to_string(port_);
  EXPECT_EQ(head_of(exchange("GET /hello HTTP/1.1\r\nHost: 127.0.0.2:" + port + "\r\nConnection: close\r\n\r\n"))
                .rfind("HTTP/1.1 200 ", 0),
            0u);
  EXPECT_EQ(head_of(exchange("GET /hello HTTP/1.1\r\nHost: 127.0.0.3:" + port + "\r\n\r\n")).rfind("HTTP/1.1 421 ", 0),
            0u);
  EXPECT_EQ(served_, 1);
}

// Bound to every address: each address of the host's interfaces is a name
// (what a browser on another machine sends when it opens http://ADDR:PORT/).
TEST_F(HttpSlots, BoundToEveryAddressEachInterfaceAddressIsAName) {
  start(http_options{}, "0.0.0.0:0");
  std::vector<std::string> want;
  ifaddrs* all = nullptr;
  ASSERT_EQ(getifaddrs(&all), 0);
  for (ifaddrs* i = all; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    char b[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, b, sizeof b);
    want.emplace_back(b);
  }
  freeifaddrs(all);
  const std::vector<http_host_name> names = on_io([&] { return srv_->host_names(); });
  for (const std::string& a : want) {
    EXPECT_TRUE(std::any_of(names.begin(), names.end(), [&](const http_host_name& n) { return n.name == a; })) << a;
    // Over loopback, with that address as Host: served.
    std::string r = exchange("GET /hello HTTP/1.1\r\nHost: " + a + ":" + std::to_string(port_) +
                             "\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 ", 0), 0u) << a << ": " << r;
  }
  EXPECT_EQ(head_of(exchange("GET /hello HTTP/1.1\r\nHost: rebind.example\r\n\r\n")).rfind("HTTP/1.1 421 ", 0), 0u);
}

TEST(HttpEndpoint, ParsesAddressAndPortAndNamesWhatIsWrong) {
  auto e = parse_http_endpoint("127.0.0.1:9477");
  ASSERT_TRUE(e) << e.err().message;
  EXPECT_EQ(e->addr, "127.0.0.1");
  EXPECT_EQ(e->port, 9477);
  EXPECT_TRUE(e->loopback);
  e = parse_http_endpoint("[::1]:80");
  ASSERT_TRUE(e) << e.err().message;
  EXPECT_EQ(e->text(), "[::1]:80");
  EXPECT_TRUE(e->loopback);
  e = parse_http_endpoint("0.0.0.0:1");
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->loopback);
  for (const char* bad : {"127.0.0.1", ":9477", "127.0.0.1:", "localhost:9477", "::1:80", "[::1]80",
                          "127.0.0.1:x", "1.2.3.4:123456"}) {
    auto r = parse_http_endpoint(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_NE(r.err().message.find(bad), std::string::npos) << r.err().message;
    }
  }
  EXPECT_NE(parse_http_endpoint("1.2.3.4:70000").err().message.find("above 65535"), std::string::npos);
  EXPECT_NE(parse_http_endpoint("localhost:1").err().message.find("not a numeric"), std::string::npos);
}

}  // namespace
}  // namespace magnet::host
