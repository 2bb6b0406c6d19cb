// A small HTTP/1.1 server (Boost.Beast) on the daemon's io_context: a table
// of routes by exact path, each a handler that returns the whole response.
// Bounded: a request's header and body sizes, a deadline to read a request
// (and to write the reply), a connection limit.  A bad request gets its
// 4xx and the connection is closed; nothing a client sends is fatal.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio/io_context.hpp>

#include "magnet/result.h"

namespace magnet::host {

// The default port of `magnet host --http` (in the range Prometheus
// exporters use).
constexpr uint16_t kDefaultHttpPort = 9477;

struct http_endpoint {
  std::string addr;  // numeric IPv4 or IPv6 address
  uint16_t port = 0;
  bool loopback = false;
  std::string text() const;  // "ADDR:PORT", "[ADDR]:PORT" for IPv6
};
// "ADDR:PORT" or "[IPV6]:PORT" (PORT 0: any free port), numeric addresses only.
result<http_endpoint> parse_http_endpoint(const std::string& s);

struct http_request {
  std::string method;  // as sent: GET, HEAD, ...
  std::string target;  // path and query
  std::string path;    // without the query
  std::vector<std::pair<std::string, std::string>> headers;
  // The value of a header (case-insensitive name); "" when absent.
  std::string header(std::string_view name) const;
};

struct http_response {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct http_options {
  size_t max_header_bytes = 8192;  // request line and headers: 431 beyond
  size_t max_body_bytes = 4096;    // 413 beyond
  unsigned max_connections = 16;   // more are closed at once
  unsigned read_timeout_ms = 5000;  // one request, from its first byte or the previous reply
  unsigned write_timeout_ms = 10000;
};

class http_server {
 public:
  using handler = std::function<http_response(const http_request&)>;

  static result<std::unique_ptr<http_server>> open(boost::asio::io_context& io, const http_endpoint& at,
                                                   http_options o = {});
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Serves GET (and HEAD) of @path; other methods get 405.
  void route(const std::string& path, handler h);
  http_endpoint local_endpoint() const;  // the port bound (for port 0)
  uint64_t refused() const;              // connections closed at the limit

  struct state;

 private:
  explicit http_server(std::shared_ptr<state> s) : s_(std::move(s)) {}
  std::shared_ptr<state> s_;
};

}  // namespace magnet::host
