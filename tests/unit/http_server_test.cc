// The daemon's HTTP server on loopback: routes, methods, malformed and
// oversized requests, keep-alive, the read deadline and the connection
// limit; nothing a client sends stops it from serving the next one.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
    o.read_timeout_ms = 300;
    auto s = http_server::open(io_, *parse_http_endpoint("127.0.0.1:0"), o);
    ASSERT_TRUE(s) << s.err().message;
    srv_ = std::move(*s);
    srv_->route("/hello", [](const http_request& r) {
      return http_response{200, "text/plain", "hello, accept=" + r.header("accept") + "\n"};
    });
    srv_->route("/throws", [](const http_request&) -> http_response { throw std::runtime_error("bug"); });
    port_ = srv_->local_endpoint().port;
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    boost::asio::post(io_, [this] { srv_.reset(); });
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  int connect_() const {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
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
  uint64_t refused() {
    std::promise<uint64_t> p;
    boost::asio::post(io_, [&] { p.set_value(srv_->refused()); });
    return p.get_future().get();
  }

  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{
      io_.get_executor()};
  std::unique_ptr<http_server> srv_;
  std::thread thread_;
  uint16_t port_ = 0;
};

TEST_F(HttpServer, ServesRoutesAndAnswersEveryBadRequestWithItsStatus) {
  std::string r = exchange("GET /hello HTTP/1.1\r\nHost: x\r\nAccept: a/b\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("Content-Length: 18\r\n"), std::string::npos) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\nhello, accept=a/b\n")) << r;

  r = exchange("HEAD /hello?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Length: 15\r\n"), std::string::npos) << "the length of the GET body: " << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\n")) << "HEAD: no body: " << r;

  r = exchange("GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("no such path: /nope"), std::string::npos) << r;

  r = exchange("POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc");
  EXPECT_EQ(r.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Allow: GET, HEAD\r\n"), std::string::npos) << r;

  r = exchange("this is not http\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("malformed request"), std::string::npos) << r;

  r = exchange("GET http://example.com/hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << r;

  r = exchange("GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 431 Request Header Fields Too Large\r\n", 0), 0u) << r;

  r = exchange("POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + std::string(2000, 'b'));
  EXPECT_EQ(r.rfind("HTTP/1.1 413 Payload Too Large\r\n", 0), 0u) << r;

  r = exchange("GET /throws HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 500 Internal Server Error\r\n", 0), 0u) << r;

  r = exchange("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << "still serving: " << r;
}

TEST_F(HttpServer, KeepAliveServesRequestsInOrder) {
  std::string r = exchange(
      "GET /hello HTTP/1.1\r\nHost: x\r\nAccept: one\r\n\r\n"
      "GET /hello HTTP/1.1\r\nHost: x\r\nAccept: two\r\nConnection: close\r\n\r\n");
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

TEST_F(HttpServer, ConnectionsBeyondTheLimitAreClosed) {
  int a = connect_(), b = connect_();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both accepted
  int c = connect_();
  char ch;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(::recv(c, &ch, 1, 0), 0) << "the third is closed at once";
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.25);
  close(c);
  EXPECT_EQ(refused(), 1u);
  close(a);
  close(b);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::string r = exchange("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << "served again once they closed: " << r;
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
