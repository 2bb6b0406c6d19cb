#include "magnet/http/server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <array>
#include <map>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "magnet/log.h"

namespace magnet::host {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string http_endpoint::text() const {
  return (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" + std::to_string(port);
}

result<http_endpoint> parse_http_endpoint(const std::string& s) {
  const std::string want = "'" + s + "': expected ADDR:PORT (e.g. 127.0.0.1:" +
                           std::to_string(kDefaultHttpPort) + ", [::1]:" +
                           std::to_string(kDefaultHttpPort) + ")";
  std::string host, port;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') return error{want};
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos || s.find(':') != colon) return error{want};
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  if (host.empty() || port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return error{want};
  unsigned long p = std::stoul(port);
  if (p > 65535) return error{"'" + s + "': port " + port + " is above 65535"};
  boost::system::error_code ec;
  auto a = asio::ip::make_address(host, ec);
  if (ec) return error{"'" + s + "': " + host + " is not a numeric IPv4 or IPv6 address"};
  http_endpoint e;
  e.addr = a.to_string();
  e.port = static_cast<uint16_t>(p);
  e.loopback = a.is_loopback();
  return e;
}

std::string http_request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() &&
        std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        }))
      return v;
  return {};
}

std::string sse_frame(const sse_event& e) {
  std::string out;
  if (e.id) out += "id: " + std::to_string(e.id) + "\n";
  if (!e.event.empty()) {
    out += "event: ";
    for (char c : e.event)
      if (c != '\r' && c != '\n') out += c;
    out += "\n";
  }
  // Each line of the data its own "data:" line (CRLF, CR and LF all end
  // lines for the reader); the reader joins them with LF again.
  size_t at = 0;
  const std::string& d = e.data;
  while (true) {
    size_t end = d.find_first_of("\r\n", at);
    out += "data: ";
    out.append(d, at, end == std::string::npos ? std::string::npos : end - at);
    out += "\n";
    if (end == std::string::npos) break;
    at = end + (d[end] == '\r' && end + 1 < d.size() && d[end + 1] == '\n' ? 2 : 1);
  }
  out += "\n";
  return out;
}

void latest_queue::push(sse_event e) {
  while (q_.size() >= cap_) {
    q_.pop_front();
    dropped_++;
  }
  q_.push_back(std::move(e));
}

std::optional<sse_event> latest_queue::pop() {
  if (q_.empty()) return std::nullopt;
  sse_event e = std::move(q_.front());
  q_.pop_front();
  return e;
}

struct http_server::state : std::enable_shared_from_this<state> {
  state(asio::io_context& io, http_options o) : io(io), acceptor(io), retry(io), opt(o) {}
  void accept();

  asio::io_context& io;
  tcp::acceptor acceptor;
  asio::steady_timer retry;
  http_options opt;
  std::map<std::string, handler, std::less<>> routes;
  std::map<std::string, handler, std::less<>> prefixes;
  std::map<std::string, stream_handler, std::less<>> streams;
  unsigned live = 0;
  uint64_t refused = 0;
  bool refusing_logged = false;
};

namespace {

// One connection: requests in order (keep-alive), each read under a
// deadline; or, once a stream route took it, an event stream until either
// side ends it (the peer closes, a write misses its deadline).
class session : public std::enable_shared_from_this<session>, public http_stream {
 public:
  session(std::shared_ptr<http_server::state> s, tcp::socket sock)
      : s_(std::move(s)), stream_(std::move(sock)) {
    s_->live++;
  }
  ~session() { uncount(); }

  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(s_->opt.max_header_bytes));
    parser_->body_limit(s_->opt.max_body_bytes);
    stream_.expires_after(std::chrono::milliseconds(s_->opt.read_timeout_ms));
    http::async_read(stream_, buf_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec == http::error::header_limit)
      return fail(431, "request header fields too large (at most " +
                           std::to_string(s_->opt.max_header_bytes) + " bytes)");
    if (ec == http::error::body_limit)
      return fail(413, "request body too large (at most " + std::to_string(s_->opt.max_body_bytes) +
                           " bytes)");
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        ec == asio::error::eof)
      return close();
    if (ec && ec.category() == http::make_error_code(http::error::bad_method).category()) {
      // A request that does not parse; partial_message: the peer closed mid-request.
      if (ec == http::error::partial_message) return close();
      return fail(400, "malformed request (" + ec.message() + ")");
    }
    if (ec) return close();
    handle(parser_->release());
  }

  void handle(http::request<http::string_body>&& req) {
    http_request r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    r.path = r.target.substr(0, r.target.find('?'));
    for (const auto& f : req) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    const bool keep = req.keep_alive();
    const unsigned version = req.version();
    if (r.path.empty() || r.path.front() != '/')
      return fail(400, "request target '" + r.target + "' is not a path");
    if (auto st = s_->streams.find(r.path); st != s_->streams.end()) {
      if (req.method() != http::verb::get) {
        http_response res{405, "text/plain; charset=utf-8", "method " + r.method + " not allowed: GET\n"};
        return send(res, version, keep, false, true);
      }
      stream_reply rep;
      try {
        rep = st->second(r);
      } catch (const std::exception& e) {
        log_line(0, std::string("magnet-host: [http.error] ") + r.path + ": " + e.what());
        rep.refuse = http_response{500, "text/plain; charset=utf-8", "internal error\n"};
      }
      if (rep.refuse) return send(*rep.refuse, version, keep, false);
      return start_stream(rep);
    }
    auto it = s_->routes.find(r.path);
    if (it == s_->routes.end()) {
      // The longest prefix route that matches, if any.
      for (auto p = s_->prefixes.begin(); p != s_->prefixes.end(); ++p)
        if (r.path.starts_with(p->first) && (it == s_->routes.end() || p->first.size() > it->first.size()))
          it = p;
    }
    if (it == s_->routes.end()) {
      http_response res{404, "text/plain; charset=utf-8", "no such path: " + r.path + "\n"};
      return send(res, version, keep, req.method() == http::verb::head);
    }
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      http_response res{405, "text/plain; charset=utf-8", "method " + r.method + " not allowed: GET or HEAD\n"};
      return send(res, version, keep, false, true);
    }
    http_response res;
    try {
      res = it->second(r);
    } catch (const std::exception& e) {  // a handler's bug is the request's failure, not the daemon's
      log_line(0, std::string("magnet-host: [http.error] ") + r.path + ": " + e.what());
      res = {500, "text/plain; charset=utf-8", "internal error\n"};
    }
    send(res, version, keep, req.method() == http::verb::head);
  }

  // A request that cannot be served: its status, and the connection ends.
  void fail(unsigned status, const std::string& why) {
    http_response res{status, "text/plain; charset=utf-8", std::to_string(status) + " " + why + "\n"};
    send(res, 11, false);
  }

  void send(const http_response& r, unsigned version, bool keep, bool head = false, bool allow = false) {
    auto msg = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), version);
    msg->set(http::field::server, "magnet");
    msg->set(http::field::content_type, r.content_type);
    if (allow) msg->set(http::field::allow, "GET, HEAD");
    for (const auto& [k, v] : r.headers) msg->insert(k, v);
    msg->keep_alive(keep);
    msg->content_length(r.body.size());
    if (!head) msg->body() = r.body;
    stream_.expires_after(std::chrono::milliseconds(s_->opt.write_timeout_ms));
    // A HEAD reply has the length of the body it does not carry.
    auto sr = std::make_shared<http::response_serializer<http::string_body>>(*msg);
    if (head) sr->split(true);
    auto done = [self = shared_from_this(), msg, sr, keep](beast::error_code ec, size_t) {
      if (ec) return self->close();
      if (keep) return self->read();
      self->linger();
    };
    if (head)
      http::async_write_header(stream_, *sr, done);
    else
      http::async_write(stream_, *sr, done);
  }

  // Ends our side, then reads what the peer still sends until it closes (at
  // most a second): closing with unread data would reset the connection
  // and could lose the reply before the peer reads it.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(1));
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code e, size_t) {
                              if (e) return self->close();
                              self->linger_more();
                            });
  }
  void linger_more() {
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code e, size_t) {
                              if (e) return self->close();
                              self->linger_more();
                            });
  }

  // The limit counts open connections: a closed one whose session the
  // daemon still holds (an event stream until its next push) is not one.
  void uncount() {
    if (counted_) s_->live--;
    counted_ = false;
  }

  void close() {
    open_ = false;
    uncount();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

 public:
  // http_stream
  bool push(sse_event e) override {
    if (!open_ || !queue_) return false;
    queue_->push(std::move(e));
    if (!writing_) write_next();
    return true;
  }
  bool open() const override { return open_ && streaming_; }
  uint64_t dropped() const override { return queue_ ? queue_->dropped() : 0; }
  uint64_t written() const override { return written_; }

 private:
  // The response's headers, then events as they are pushed.  The body ends
  // with the connection (no length, no chunks: what EventSource reads).
  void start_stream(const stream_reply& rep) {
    streaming_ = true;
    queue_.emplace(s_->opt.stream_queue);
    beast::error_code ec;
    if (s_->opt.stream_sndbuf > 0)
      stream_.socket().set_option(asio::socket_base::send_buffer_size(s_->opt.stream_sndbuf), ec);
    out_ = "HTTP/1.1 200 OK\r\nServer: magnet\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
           "Cache-Control: no-store\r\nConnection: close\r\n";
    for (const auto& [k, v] : rep.headers) out_ += k + ": " + v + "\r\n";
    out_ += "\r\nretry: 2000\n\n";  // the browser reconnects after 2 s
    writing_ = true;
    stream_.expires_after(std::chrono::milliseconds(s_->opt.write_timeout_ms));
    asio::async_write(stream_, asio::buffer(out_), [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) return self->close();
      self->write_next();
    });
    watch_peer();
    if (rep.on_open) rep.on_open(shared_from_this());
  }

  // The oldest event not yet written, after a count of the events dropped
  // since the last write (all older than it: the queue drops its oldest).
  void write_next() {
    if (!open_) return;
    auto e = queue_->pop();
    if (!e) {
      writing_ = false;
      return;
    }
    out_.clear();
    if (queue_->dropped() != reported_drops_) {
      reported_drops_ = queue_->dropped();
      out_ += sse_frame({0, "dropped", std::to_string(reported_drops_)});
    }
    out_ += sse_frame(*e);
    writing_ = true;
    written_++;
    stream_.expires_after(std::chrono::milliseconds(s_->opt.write_timeout_ms));
    asio::async_write(stream_, asio::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->write_next();
    });
  }

  // A stream's peer sends nothing more; reading tells when it has gone.
  void watch_peer() {
    stream_.socket().async_read_some(asio::buffer(scratch_), [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) return self->close();
      self->watch_peer();
    });
  }

  bool open_ = true;
  bool counted_ = true;  // in s_->live
  bool streaming_ = false;
  bool writing_ = false;
  std::optional<latest_queue> queue_;
  std::string out_;  // what is being written
  uint64_t written_ = 0, reported_drops_ = 0;

  std::shared_ptr<http_server::state> s_;
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::array<char, 4096> scratch_;
};

}  // namespace

void http_server::state::accept() {
  acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec, tcp::socket sock) {
    if (!self->acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors and the like: try again shortly rather than spin.
      if (ec == asio::error::operation_aborted) return;
      self->retry.expires_after(std::chrono::milliseconds(100));
      self->retry.async_wait([self](boost::system::error_code e) {
        if (!e) self->accept();
      });
      return;
    }
    if (self->live >= self->opt.max_connections) {
      self->refused++;
      if (!self->refusing_logged)
        log_line(1, "magnet-host: [http.refused] " + std::to_string(self->live) +
                        " connections open, the most allowed; closing new ones");
      self->refusing_logged = true;
      boost::system::error_code ignored;
      sock.close(ignored);
    } else {
      self->refusing_logged = false;
      std::make_shared<session>(self, std::move(sock))->read();
    }
    self->accept();
  });
}

result<std::unique_ptr<http_server>> http_server::open(asio::io_context& io, const http_endpoint& at,
                                                       http_options o) {
  auto s = std::make_shared<state>(io, o);
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(at.addr, ec);
  if (ec) return error{"--http: " + at.addr + " is not an address"};
  tcp::endpoint ep(addr, at.port);
  s->acceptor.open(ep.protocol(), ec);
  if (!ec) s->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s->acceptor.bind(ep, ec);
  if (!ec) s->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return error{"--http: cannot listen on " + at.text() + ": " + ec.message(), ec.value()};
  s->accept();
  return std::unique_ptr<http_server>(new http_server(std::move(s)));
}

http_server::~http_server() {
  boost::system::error_code ec;
  s_->acceptor.close(ec);
  s_->retry.cancel();
  // Sessions still open hold the state; they find no route any more.
  s_->routes.clear();
  s_->prefixes.clear();
  s_->streams.clear();
}

void http_server::route(const std::string& path, handler h) { s_->routes[path] = std::move(h); }
void http_server::route_prefix(const std::string& prefix, handler h) { s_->prefixes[prefix] = std::move(h); }
void http_server::route_stream(const std::string& path, stream_handler h) { s_->streams[path] = std::move(h); }

http_endpoint http_server::local_endpoint() const {
  boost::system::error_code ec;
  auto ep = s_->acceptor.local_endpoint(ec);
  http_endpoint e;
  if (ec) return e;
  e.addr = ep.address().to_string();
  e.port = ep.port();
  e.loopback = ep.address().is_loopback();
  return e;
}

uint64_t http_server::refused() const { return s_->refused; }

}  // namespace magnet::host
