// A small HTTP/1.1 server (Boost.Beast) on the daemon's io_context: a table
// of routes by exact path (or by prefix), each a handler that returns the
// whole response, or a stream route whose connection stays open for
// server-sent events.  Bounded: a request's header and body sizes, a
// deadline to read a request (and to write the reply or an event), a
// connection limit with slots per class (event streams never take the
// slots of plain requests such as /metrics), and per stream at most a few
// events not yet written (older ones are dropped and counted).  Before any
// route runs, the Host header must name this server (DNS rebinding).  Every
// refusal (4xx, 5xx) ends its connection; nothing a client sends is fatal,
// and no refusal touches another connection.
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

// A name the server answers to, as a request's Host header gives it: a DNS
// name, a numeric IPv4 address or a bracketed IPv6 one, with or without a
// port.  Compared without regard to case; a name without a port matches
// the Host with any port or none (the port is not what DNS rebinding
// forges: the name is), one with a port only that port.
struct http_host_name {
  std::string name;  // lower case; IPv6 in brackets
  std::optional<uint16_t> port;
  std::string text() const;  // "name" or "name:port"
  bool matches(const http_host_name& host) const;
};
// "NAME" or "NAME:PORT" (NAME: letters, digits, '-', '.', '_'; or IPv4; or
// [IPv6]), as --http-host takes it and a Host header carries it.
result<http_host_name> parse_http_host_name(std::string_view s);

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
  // Closes the connection (e.g. its token was revoked); push() fails after.
  virtual void end() = 0;
  virtual uint64_t dropped() const = 0;  // events dropped on this connection
  virtual uint64_t written() const = 0;  // events written to it
};

// What a stream route answers: a refusal (401, 403, ...) as a whole
// response, or a stream handed to @on_open once its headers are written.
// @share names whose streams it counts among (a token): at most
// max_streams_per_share streams of one share are open; "" is no share (only
// the total, max_streams, bounds it).
struct stream_reply {
  std::optional<http_response> refuse;
  std::string share;
  std::vector<std::pair<std::string, std::string>> headers;  // with the 200
  std::function<void(std::shared_ptr<http_stream>)> on_open;
};

// The bounds (docs/dashboard.md, "Connection slots", says why these
// numbers).  Connections are of three classes: waiting for a request (or
// ending), writing a reply, and event streams.  Streams take at most max_streams of the max_connections
// slots (and max_streams_per_share of one token), so the rest are always
// there for plain requests; a connection beyond the limit takes the slot of
// the oldest one still waiting for its request, else of the oldest reply
// being written for longer than slow_write_ms, else it is closed.
struct http_options {
  size_t max_header_bytes = 8192;  // request line and headers: 431 beyond
  size_t max_body_bytes = 4096;    // 413 beyond
  unsigned max_connections = 64;   // open at once, every class
  unsigned max_streams = 32;       // event streams of all shares (below max_connections)
  unsigned max_streams_per_share = 4;  // event streams of one share (a token)
  unsigned read_timeout_ms = 2000;     // a whole request, from the connection or the previous reply
  unsigned write_timeout_ms = 10000;   // a reply, or one event of a stream: the connection ends beyond
  unsigned slow_write_ms = 1000;       // a reply written longer: its slot may go to a new connection
  size_t stream_queue = 2;             // per stream: events not yet written, the newest
  int stream_sndbuf = 8192;            // per stream: SO_SNDBUF (the kernel's share; 0: its default)
  // Names the server answers to besides the loopback names (localhost,
  // 127.0.0.1, [::1]) and the bound address (each address of the host's
  // interfaces when bound to 0.0.0.0 or [::]).
  std::vector<http_host_name> hosts;
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
  uint64_t evicted() const;              // connections closed to make room for a new one
  unsigned streams() const;              // event streams open
  // Every name the Host header may carry (the loopback names, the bound
  // address, http_options::hosts).
  const std::vector<http_host_name>& host_names() const;

  struct state;

 private:
  explicit http_server(std::shared_ptr<state> s) : s_(std::move(s)) {}
  std::shared_ptr<state> s_;
};

}  // namespace magnet::host
