#include "magnet/http/server.h"

#include <ifaddrs.h>
#include <netinet/in.h>

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

namespace {

bool host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

// What the peer sent, fit to quote in a reply or a log line.
std::string quoted(std::string_view s, size_t max = 100) {
  std::string out;
  for (char c : s.substr(0, max))
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace

std::string http_host_name::text() const { return port ? name + ":" + std::to_string(*port) : name; }

bool http_host_name::matches(const http_host_name& host) const {
  return name == host.name && (!port || port == host.port);
}

result<http_host_name> parse_http_host_name(std::string_view s) {
  const std::string want = "'" + quoted(s) + "': expected NAME or NAME:PORT (a DNS name, an IPv4 address or [IPv6])";
  std::string_view name = s, port;
  bool has_port = false;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) return error{want};
    name = s.substr(0, close + 1);
    const std::string_view rest = s.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return error{want};
    if (!rest.empty()) {
      has_port = true;
      port = rest.substr(1);
    }
    boost::system::error_code ec;
    asio::ip::make_address_v6(std::string(name.substr(1, name.size() - 2)), ec);
    if (ec) return error{want + ": " + quoted(name) + " is not an IPv6 address"};
  } else {
    const size_t colon = s.find(':');
    if (colon != std::string_view::npos) {
      if (s.find(':', colon + 1) != std::string_view::npos) return error{want + " (IPv6 goes in brackets)"};
      name = s.substr(0, colon);
      port = s.substr(colon + 1);
      has_port = true;
    }
    if (name.empty() || name.size() > 253 || !std::all_of(name.begin(), name.end(), host_char)) return error{want};
  }
  http_host_name h;
  for (char c : name) h.name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // "NAME:" is NAME (an empty port is the scheme's default, RFC 3986).
  if (has_port && !port.empty()) {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return error{want};
    const unsigned long p = std::stoul(std::string(port));
    if (p == 0 || p > 65535) return error{"'" + quoted(s) + "': port " + std::string(port) + " is not 1 to 65535"};
    h.port = static_cast<uint16_t>(p);
  }
  return h;
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

namespace {

using steady = std::chrono::steady_clock;

// A connection whose slot a new connection may take (see make_room).
struct evictable {
  virtual ~evictable() = default;
  virtual void evict() = 0;
};
struct parked {
  steady::time_point since;
  std::weak_ptr<evictable> conn;
};

}  // namespace

struct http_server::state : std::enable_shared_from_this<state> {
  state(asio::io_context& io, http_options o) : io(io), acceptor(io), retry(io), opt(std::move(o)) {}
  void accept();
  bool make_room();
  void name_hosts(const asio::ip::address& bound);
  std::optional<http_response> check_host(const http::request<http::string_body>& req) const;
  std::optional<http_response> stream_refusal(const std::string& share) const;

  asio::io_context& io;
  tcp::acceptor acceptor;
  asio::steady_timer retry;
  http_options opt;
  std::vector<http_host_name> names;  // what the Host header may name
  std::string names_text;             // the same, for a refusal's body
  std::map<std::string, handler, std::less<>> routes;
  std::map<std::string, handler, std::less<>> prefixes;
  std::map<std::string, stream_handler, std::less<>> streams;
  unsigned live = 0;          // open connections, every class
  unsigned open_streams = 0;  // of which event streams
  std::map<std::string, unsigned, std::less<>> shares;  // open streams per share
  // The connections whose slot a new one may take, oldest first: those
  // waiting for a request (or ending), and those writing a reply.
  uint64_t seq = 0;
  std::map<uint64_t, parked> waiting, writing;
  uint64_t refused = 0, evicted = 0;
  bool refusing_logged = false, evicting_logged = false;
};

namespace {

// One connection: requests in order (keep-alive), each read under a
// deadline; or, once a stream route took it, an event stream until either
// side ends it (the peer closes, a write misses its deadline).
class session : public std::enable_shared_from_this<session>, public http_stream, public evictable {
 public:
  session(std::shared_ptr<http_server::state> s, tcp::socket sock)
      : s_(std::move(s)), stream_(std::move(sock)) {
    s_->live++;
  }
  ~session() {
    unpark();
    uncount();
  }

  void read() {
    park(s_->waiting);
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(s_->opt.max_header_bytes));
    parser_->body_limit(s_->opt.max_body_bytes);
    stream_.expires_after(std::chrono::milliseconds(s_->opt.read_timeout_ms));
    http::async_read(stream_, buf_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void evict() override { close(); }

 private:
  void on_read(beast::error_code ec) {
    unpark();
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
    // Before anything else: a page of another name that resolves here
    // (DNS rebinding) learns nothing, not even which paths exist.
    if (auto no = s_->check_host(req)) return send(*no, req.version(), false);
    http_request r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    r.path = r.target.substr(0, r.target.find('?'));
    for (const auto& f : req) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    const bool keep = req.keep_alive();
    const unsigned version = req.version();
    if (r.path.empty() || r.path.front() != '/')
      return fail(400, "request target '" + quoted(r.target) + "' is not a path");
    if (auto st = s_->streams.find(r.path); st != s_->streams.end()) {
      if (req.method() != http::verb::get) {
        http_response res{405, "text/plain; charset=utf-8", "method " + r.method + " not allowed: GET\n"};
        return send(res, version, keep, false, true);
      }
      stream_reply rep;
      try {
        rep = st->second(r);
      } catch (const std::exception& e) {
        log_error(std::string("magnet-host: [http.error] ") + r.path + ": " + e.what());
        rep.refuse = http_response{500, "text/plain; charset=utf-8", "internal error\n"};
      }
      if (rep.refuse) return send(*rep.refuse, version, keep, false);
      if (auto no = s_->stream_refusal(rep.share)) return send(*no, version, keep, false);
      return start_stream(rep);
    }
    // The exact route, else the longest prefix route that matches.
    const http_server::handler* h = nullptr;
    if (auto it = s_->routes.find(r.path); it != s_->routes.end()) {
      h = &it->second;
    } else {
      size_t longest = 0;
      for (const auto& [prefix, ph] : s_->prefixes)
        if (r.path.starts_with(prefix) && (!h || prefix.size() > longest)) {
          h = &ph;
          longest = prefix.size();
        }
    }
    if (!h) {
      http_response res{404, "text/plain; charset=utf-8", "no such path: " + r.path + "\n"};
      return send(res, version, keep, req.method() == http::verb::head);
    }
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      http_response res{405, "text/plain; charset=utf-8", "method " + r.method + " not allowed: GET or HEAD\n"};
      return send(res, version, keep, false, true);
    }
    http_response res;
    try {
      res = (*h)(r);
    } catch (const std::exception& e) {  // a handler's bug is the request's failure, not the daemon's
      log_error(std::string("magnet-host: [http.error] ") + r.path + ": " + e.what());
      res = {500, "text/plain; charset=utf-8", "internal error\n"};
    }
    send(res, version, keep, req.method() == http::verb::head);
  }

  // A request that cannot be served: its status, and the connection ends.
  void fail(unsigned status, const std::string& why) {
    http_response res{status, "text/plain; charset=utf-8", std::to_string(status) + " " + why + "\n"};
    send(res, 11, false);
  }

  // Every refusal (4xx, 5xx) ends its connection: the client has its
  // answer, and holds no slot to try again on.
  void send(const http_response& r, unsigned version, bool keep, bool head = false, bool allow = false) {
    if (r.status >= 400) keep = false;
    park(s_->writing);
    auto msg = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), version);
    msg->set(http::field::server, "magnet");
    msg->set(http::field::content_type, r.content_type);
    // Every reply is what its Content-Type says (text stays text).
    msg->set("X-Content-Type-Options", "nosniff");
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
  // and could lose the reply before the peer reads it.  Its slot may go
  // to a new connection meanwhile.
  void linger() {
    park(s_->waiting);
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(1));
    linger_more();
  }
  void linger_more() {
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code e, size_t) {
                              if (e) return self->close();
                              self->linger_more();
                            });
  }

  // In @where (waiting or writing) from now: a new connection at the limit
  // may take this one's slot.
  void park(std::map<uint64_t, parked>& where) {
    unpark();
    key_ = ++s_->seq;
    where[key_] = {steady::now(), weak_from_this()};
    parked_in_ = &where;
  }
  void unpark() {
    if (parked_in_) parked_in_->erase(key_);
    parked_in_ = nullptr;
  }

  // The limits count open connections: a closed one whose session the
  // daemon still holds (an event stream until its next push) is not one.
  void uncount() {
    if (!counted_) return;
    counted_ = false;
    s_->live--;
    if (!streaming_) return;
    s_->open_streams--;
    if (auto it = s_->shares.find(share_); it != s_->shares.end() && --it->second == 0) s_->shares.erase(it);
  }

  void close() {
    open_ = false;
    unpark();
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
  void end() override {
    if (open_) close();
  }
  uint64_t dropped() const override { return queue_ ? queue_->dropped() : 0; }
  uint64_t written() const override { return written_; }

 private:
  // The response's headers, then events as they are pushed.  The body ends
  // with the connection (no length, no chunks: what EventSource reads).
  // A stream's slot is its own until it ends: never taken for another.
  void start_stream(const stream_reply& rep) {
    unpark();
    streaming_ = true;
    share_ = rep.share;
    s_->open_streams++;
    if (!share_.empty()) s_->shares[share_]++;
    queue_.emplace(s_->opt.stream_queue);
    beast::error_code ec;
    if (s_->opt.stream_sndbuf > 0)
      stream_.socket().set_option(asio::socket_base::send_buffer_size(s_->opt.stream_sndbuf), ec);
    out_ = "HTTP/1.1 200 OK\r\nServer: magnet\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
           "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\nConnection: close\r\n";
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
  bool counted_ = true;  // in s_->live (and s_->open_streams once streaming_)
  bool streaming_ = false;
  bool writing_ = false;
  std::string share_;
  std::map<uint64_t, parked>* parked_in_ = nullptr;  // s_->waiting or s_->writing, under key_
  uint64_t key_ = 0;
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

// At the limit, the slot of the connection that does least for anyone: the
// oldest one waiting for a request (idle, half-sent, or ending), else the
// oldest reply still being written after slow_write_ms (a peer that does
// not read).  Streams are never taken (they are bounded by their own
// caps), nor a reply that has only just started.
bool http_server::state::make_room() {
  const auto now = steady::now();
  auto take = [&](std::map<uint64_t, parked>& from, steady::duration older) {
    while (!from.empty()) {
      auto it = from.begin();
      if (now - it->second.since < older) return false;
      auto c = it->second.conn.lock();
      from.erase(it);
      if (c) {
        c->evict();
        return true;
      }
    }
    return false;
  };
  return take(waiting, steady::duration::zero()) || take(writing, std::chrono::milliseconds(opt.slow_write_ms));
}

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
    bool evicted = false;
    if (self->live >= self->opt.max_connections && self->make_room()) {
      evicted = true;
      self->evicted++;
      if (!self->evicting_logged)
        log_warning("magnet-host: [http.evicted] " + std::to_string(self->opt.max_connections) +
                        " connections open, the most allowed; a new one takes the slot of one idle "
                        "or not reading");
      self->evicting_logged = true;
    }
    if (self->live >= self->opt.max_connections) {
      self->refused++;
      if (!self->refusing_logged)
        log_warning("magnet-host: [http.refused] " + std::to_string(self->live) + " connections open (" +
                        std::to_string(self->open_streams) +
                        " event streams), none idle; closing new ones");
      self->refusing_logged = true;
      boost::system::error_code ignored;
      sock.close(ignored);
    } else {
      self->refusing_logged = false;
      if (!evicted) self->evicting_logged = false;
      std::make_shared<session>(self, std::move(sock))->read();
    }
    self->accept();
  });
}

std::optional<http_response> http_server::state::check_host(const http::request<http::string_body>& req) const {
  const size_t n = req.count(http::field::host);
  if (n == 0 && req.version() < 11) return std::nullopt;  // HTTP/1.0 may leave it out
  auto refuse = [&](unsigned status, const std::string& why) {
    return http_response{status, "text/plain; charset=utf-8",
                         std::to_string(status) + " " + why + "; this server answers to " + names_text +
                             " (a name without a port: with any port; `magnet host --http-host NAME` adds "
                             "names, docs/dashboard.md)\n"};
  };
  // RFC 9112 3.2: none in HTTP/1.1, more than one, or not a host: 400.
  if (n == 0) return refuse(400, "an HTTP/1.1 request without a Host header");
  if (n > 1) return refuse(400, "more than one Host header");
  const auto hv = req[http::field::host];
  const std::string_view v(hv.data(), hv.size());
  auto h = parse_http_host_name(v);
  if (!h) return refuse(400, "Host '" + quoted(v) + "' is not a host name");
  for (const auto& a : names)
    if (a.matches(*h)) return std::nullopt;
  return refuse(421, "Host '" + quoted(v) + "' is not a name of this server");
}

std::optional<http_response> http_server::state::stream_refusal(const std::string& share) const {
  if (open_streams >= opt.max_streams) {
    http_response r{503, "text/plain; charset=utf-8",
                    "503 " + std::to_string(open_streams) +
                        " event streams are open, the most this server allows; try again later\n"};
    r.headers.emplace_back("Retry-After", "10");
    return r;
  }
  if (auto it = shares.find(share); !share.empty() && it != shares.end() && it->second >= opt.max_streams_per_share) {
    http_response r{429, "text/plain; charset=utf-8",
                    "429 this token has " + std::to_string(it->second) +
                        " event streams open, the most one token may; close one (a browser tab) first\n"};
    r.headers.emplace_back("Retry-After", "10");
    return r;
  }
  return std::nullopt;
}

// The loopback names, the bound address (or, bound to every address, each
// address of the host's interfaces now), and the names the options add.
void http_server::state::name_hosts(const asio::ip::address& bound) {
  auto add = [&](const http_host_name& h) {
    for (const auto& n : names)
      if (n.name == h.name && n.port == h.port) return;
    names.push_back(h);
  };
  auto add_address = [&](const asio::ip::address& a) {
    if (a.is_v6() && a.to_v6().is_link_local()) return;  // a scope id no Host carries
    add({a.is_v6() ? "[" + a.to_string() + "]" : a.to_string(), std::nullopt});
  };
  for (const char* n : {"localhost", "127.0.0.1", "[::1]"}) add({n, std::nullopt});
  if (!bound.is_unspecified()) {
    add_address(bound);
  } else if (ifaddrs* all = nullptr; ::getifaddrs(&all) == 0) {
    for (ifaddrs* i = all; i; i = i->ifa_next) {
      if (!i->ifa_addr) continue;
      if (i->ifa_addr->sa_family == AF_INET) {
        const auto* sa = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
        add_address(asio::ip::address_v4(ntohl(sa->sin_addr.s_addr)));
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        const auto* sa = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
        asio::ip::address_v6::bytes_type b;
        std::copy(std::begin(sa->sin6_addr.s6_addr), std::end(sa->sin6_addr.s6_addr), b.begin());
        add_address(asio::ip::address_v6(b));
      }
    }
    ::freeifaddrs(all);
  }
  for (const auto& h : opt.hosts) add(h);
  names_text.clear();
  for (const auto& n : names) names_text += (names_text.empty() ? "" : ", ") + n.text();
}

result<std::unique_ptr<http_server>> http_server::open(asio::io_context& io, const http_endpoint& at,
                                                       http_options o) {
  if (o.max_connections == 0 || o.max_streams >= o.max_connections)
    return error{"http: " + std::to_string(o.max_streams) + " event streams of " +
                 std::to_string(o.max_connections) +
                 " connections: streams must leave slots for plain requests (/metrics)"};
  auto s = std::make_shared<state>(io, std::move(o));
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(at.addr, ec);
  if (ec) return error{"--http: " + at.addr + " is not an address"};
  tcp::endpoint ep(addr, at.port);
  s->acceptor.open(ep.protocol(), ec);
  if (!ec) s->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s->acceptor.bind(ep, ec);
  if (!ec) s->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return error{"--http: cannot listen on " + at.text() + ": " + ec.message(), ec.value()};
  s->name_hosts(addr);
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
uint64_t http_server::evicted() const { return s_->evicted; }
unsigned http_server::streams() const { return s_->open_streams; }
const std::vector<http_host_name>& http_server::host_names() const { return s_->names; }

}  // namespace magnet::host
