// A small HTTP/1.1 server (Boost.Beast) on the daemon's io_context: a table
// of routes by exact path (or by prefix), each a handler that returns the
// whole response, or a stream route whose connection stays open for
// server-sent events.  Bounded: a request's header and body sizes, a
// deadline to read a request (and to write the reply or an event), a
// connection limit, and per stream at most a few events not yet written
// (older ones are dropped and counted).  A bad request gets its 4xx and the
// connection is closed; nothing a client sends is fatal.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
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
  std::vector<std::pair<std::string, std::string>> headers;  // more: Set-Cookie, Cache-Control, ...
};

// One server-sent event (text/event-stream): its id, type and data.
struct sse_event {
  uint64_t id = 0;
  std::string event;  // empty: the default type, "message"
  std::string data;
};
// The event as it goes on the wire: "id:", "event:", one "data:" line per
// line of data, a blank line.  CR and LF in @event end nowhere but in the
// frame they belong to (they are dropped).
std::string sse_frame(const sse_event& e);

// The events of one stream not yet written: at most @capacity, the newest.
// A push beyond that drops the oldest and counts it, so a reader that
// falls behind gets fresh samples with a gap, and never costs more memory.
class latest_queue {
 public:
  explicit latest_queue(size_t capacity) : cap_(capacity ? capacity : 1) {}
  void push(sse_event e);
  std::optional<sse_event> pop();
  size_t size() const { return q_.size(); }
  size_t capacity() const { return cap_; }
  uint64_t dropped() const { return dropped_; }

 private:
  size_t cap_;
  std::deque<sse_event> q_;
  uint64_t dropped_ = 0;
};

// The daemon's side of an open event stream (one connection).  Pushes only
// on the server's io_context thread.
class http_stream {
 public:
  virtual ~http_stream() = default;
  // Queues @e (bounded as latest_queue); false once the connection ended.
  virtual bool push(sse_event e) = 0;
  virtual bool open() const = 0;
  virtual uint64_t dropped() const = 0;  // events dropped on this connection
  virtual uint64_t written() const = 0;  // events written to it
};

// What a stream route answers: a refusal (401, 403, ...) as a whole
// response, or a stream handed to @on_open once its headers are written.
struct stream_reply {
  std::optional<http_response> refuse;
  std::vector<std::pair<std::string, std::string>> headers;  // with the 200
  std::function<void(std::shared_ptr<http_stream>)> on_open;
};

struct http_options {
  size_t max_header_bytes = 8192;  // request line and headers: 431 beyond
  size_t max_body_bytes = 4096;    // 413 beyond
  unsigned max_connections = 16;   // more are closed at once
  unsigned read_timeout_ms = 5000;  // one request, from its first byte or the previous reply
  unsigned write_timeout_ms = 10000;  // a reply, or one event of a stream: the connection ends beyond
  size_t stream_queue = 2;            // per stream: events not yet written, the newest
  int stream_sndbuf = 8192;           // per stream: SO_SNDBUF (the kernel's share; 0: its default)
};

class http_server {
 public:
  using handler = std::function<http_response(const http_request&)>;
  using stream_handler = std::function<stream_reply(const http_request&)>;

  static result<std::unique_ptr<http_server>> open(boost::asio::io_context& io, const http_endpoint& at,
                                                   http_options o = {});
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Serves GET (and HEAD) of @path; other methods get 405.
  void route(const std::string& path, handler h);
  // Serves GET and HEAD of every path that starts with @prefix (no exact
  // route taken); the longest prefix wins.
  void route_prefix(const std::string& prefix, handler h);
  // GET of @path answered with a text/event-stream kept open (GET only).
  void route_stream(const std::string& path, stream_handler h);
  http_endpoint local_endpoint() const;  // the port bound (for port 0)
  uint64_t refused() const;              // connections closed at the limit

  struct state;

 private:
  explicit http_server(std::shared_ptr<state> s) : s_(std::move(s)) {}
  std::shared_ptr<state> s_;
};

}  // namespace magnet::host
