// libmagnet-client: the view protocol's client side over the agent's unix
// socket, with plain non-blocking sockets and poll(2) (no event loop of its
// own, so it fits into the application's).
#include "magnet/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "magnet/view_codec.h"

namespace {

using namespace magnet;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

constexpr uint64_t kMinBackoffNs = 100'000'000, kMaxBackoffNs = 1'000'000'000;

}  // namespace

struct magnet_client {
  std::string path;
  int fd = -1;
  view::reader rd;
  std::vector<uint8_t> out;  // frames not yet written (hello, subscribe)
  uint32_t seq = 0;
  bool welcomed = false;
  uint64_t session = 0;
  // The subscription, sent again on every connection.
  bool subscribed = false;
  view::subscribe sub;
  magnet_value_cb cb = nullptr;
  void* user = nullptr;
  // Newest value per (id, index).
  std::map<std::pair<uint16_t, uint32_t>, magnet_value> latest;
  bool gap_pending = false;  // the connection was lost: flag the next values
  bool was_connected = false;
  uint64_t retry_at = 0, backoff = kMinBackoffNs;
  std::string err;

  void disconnect(const std::string& why) {
    if (fd >= 0) ::close(fd);
    fd = -1;
    welcomed = false;
    out.clear();
    rd = view::reader{};
    err = why;
    if (was_connected) gap_pending = true;
    retry_at = now_ns() + backoff;
    backoff = std::min(backoff * 2, kMaxBackoffNs);
  }

  void queue(const view::message& m) { (void)view::encode(out, m, ++seq, now_ns()); }

  bool connect() {
    int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
      err = std::string("socket: ") + std::strerror(errno);
      return false;
    }
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path) {
      ::close(s);
      err = "socket path too long: " + path;
      return false;
    }
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    if (::connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      err = "cannot reach the agent at " + path + ": " + std::strerror(errno) +
            " (is magnet-agent running?)";
      ::close(s);
      retry_at = now_ns() + backoff;
      backoff = std::min(backoff * 2, kMaxBackoffNs);
      return false;
    }
    fd = s;
    backoff = kMinBackoffNs;
    queue(view::hello{MAGNET_VIEW_VERSION_MIN, MAGNET_VIEW_VERSION, MAGNET_VROLE_APP, 0,
                      "libmagnet-client"});
    if (subscribed) queue(sub);
    return true;
  }

  bool flush() {
    while (!out.empty()) {
      ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) {
        disconnect(std::string("write to the agent: ") + std::strerror(errno));
        return false;
      }
      out.erase(out.begin(), out.begin() + n);
    }
    return true;
  }

  int deliver(const view::stats& st, uint64_t frame_ts) {
    (void)frame_ts;  // the agent's clock is ours: ages are what matter
    const uint64_t now = now_ns();
    const bool gap = gap_pending || (st.flags & MAGNET_VSTATS_GAP);
    gap_pending = false;
    int n = 0;
    for (const auto& v : st.values) {
      magnet_value x{};
      const auto* info = view::find_stat(v.id);
      x.name = info ? info->name.data() : nullptr;
      x.unit = info ? info->unit.data() : "";
      x.id = v.id;
      x.index = v.index;
      x.valid = v.valid();
      x.value = x.valid ? v.value : 0;
      x.gap = gap;
      x.age_ns = uint64_t{v.age_us} * 1000;
      x.ts_ns = now > x.age_ns ? now - x.age_ns : 0;
      x.window_ns = uint64_t{v.window_us} * 1000;
      latest[{v.id, v.index}] = x;
      if (cb) cb(&x, user);
      ++n;
    }
    return n;
  }

  int read_frames() {
    int values = 0;
    for (;;) {
      auto room = rd.prepare();
      ssize_t n = ::recv(fd, room.data(), room.size(), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        disconnect(n == 0 ? "the agent closed the connection"
                          : std::string("read from the agent: ") + std::strerror(errno));
        return values;
      }
      rd.commit(static_cast<size_t>(n));
      view::frame f;
      magnet::error e;
      for (;;) {
        auto st = rd.next(f, e);
        if (st == view::reader::state::more) break;
        if (st == view::reader::state::bad) {
          disconnect("bad frame from the agent: " + e.message);
          return values;
        }
        if (auto* w = std::get_if<view::welcome>(&f.m)) {
          welcomed = true;
          was_connected = true;
          session = w->session_id;
        } else if (auto* s = std::get_if<view::stats>(&f.m)) {
          values += deliver(*s, f.h.ts_ns);
        } else if (auto* er = std::get_if<view::errmsg>(&f.m)) {
          err = "agent: " + er->text;
        }
      }
    }
    return values;
  }
};

// Only the C API is exported (the library is built with hidden visibility).
#pragma GCC visibility push(default)
extern "C" {

magnet_client* magnet_client_new(const char* socket_path) {
  auto* c = new (std::nothrow) magnet_client;
  if (c) c->path = socket_path ? socket_path : MAGNET_VIEW_AGENT_SOCKET;
  return c;
}

void magnet_client_free(magnet_client* c) {
  if (!c) return;
  if (c->fd >= 0) ::close(c->fd);
  delete c;
}

int magnet_client_subscribe(magnet_client* c, const char* const* names, size_t n,
                            unsigned period_ms, int mode) {
  view::subscribe s;
  if (period_ms < MAGNET_VIEW_MIN_PERIOD_MS || period_ms > MAGNET_VIEW_MAX_PERIOD_MS) {
    c->err = "period " + std::to_string(period_ms) + " ms is outside " +
             std::to_string(MAGNET_VIEW_MIN_PERIOD_MS) + ".." +
             std::to_string(MAGNET_VIEW_MAX_PERIOD_MS) + " ms";
    return -1;
  }
  if (mode != MAGNET_CLIENT_PERIODIC && mode != MAGNET_CLIENT_ON_CHANGE) {
    c->err = "mode " + std::to_string(mode) + " is neither periodic nor on-change";
    return -1;
  }
  if (n > MAGNET_VIEW_MAX_SUB_IDS) {
    c->err = "at most " + std::to_string(MAGNET_VIEW_MAX_SUB_IDS) + " stats per subscription";
    return -1;
  }
  for (size_t i = 0; i < n; ++i) {
    const auto* info = names[i] ? view::find_stat(std::string_view(names[i])) : nullptr;
    if (!info) {
      c->err = std::string("no stat named '") + (names[i] ? names[i] : "(null)") + "'";
      return -1;
    }
    s.ids.push_back(info->id);
  }
  s.period_ms = period_ms;
  s.mode = static_cast<uint8_t>(mode);
  c->sub = std::move(s);
  c->subscribed = true;
  c->err.clear();
  if (c->fd >= 0) {
    c->queue(c->sub);
    c->flush();
  }
  return 0;
}

void magnet_client_on_value(magnet_client* c, magnet_value_cb cb, void* user) {
  c->cb = cb;
  c->user = user;
}

int magnet_client_poll(magnet_client* c, int timeout_ms) {
  const uint64_t start = now_ns();
  const uint64_t deadline = start + static_cast<uint64_t>(std::max(timeout_ms, 0)) * 1'000'000;
  int values = 0;
  for (;;) {
    if (c->fd < 0) {
      uint64_t now = now_ns();
      if (now >= c->retry_at && c->connect()) continue;
      // Not connected: wait for the retry or the deadline, whichever first.
      uint64_t until = std::min(deadline, std::max(c->retry_at, now));
      if (until > now) {
        timespec ts{static_cast<time_t>((until - now) / 1'000'000'000),
                    static_cast<long>((until - now) % 1'000'000'000)};
        nanosleep(&ts, nullptr);
      }
      if (now_ns() >= deadline) return values ? values : -1;
      continue;
    }
    if (!c->flush()) continue;
    uint64_t now = now_ns();
    int wait_ms = values || now >= deadline ? 0 : static_cast<int>((deadline - now + 999'999) / 1'000'000);
    pollfd p{c->fd, static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0};
    int r = ::poll(&p, 1, wait_ms);
    if (r < 0 && errno != EINTR) {
      c->err = std::string("poll: ") + std::strerror(errno);
      return -1;
    }
    if (r > 0) {
      if (p.revents & (POLLIN | POLLHUP | POLLERR)) values += c->read_frames();
      if (c->fd >= 0 && (p.revents & POLLOUT)) c->flush();
    }
    if (values || now_ns() >= deadline) return c->fd >= 0 || values ? values : -1;
  }
}

int magnet_client_get(magnet_client* c, const char* name, uint32_t index, magnet_value* out) {
  const auto* info = name ? view::find_stat(std::string_view(name)) : nullptr;
  if (!info) {
    c->err = std::string("no stat named '") + (name ? name : "(null)") + "'";
    return -1;
  }
  auto it = c->latest.find({info->id, index});
  if (it == c->latest.end()) {
    c->err = std::string("no value of ") + name + " yet";
    return -1;
  }
  *out = it->second;
  uint64_t now = now_ns();
  out->age_ns = now > out->ts_ns ? now - out->ts_ns : 0;
  return 0;
}

int magnet_client_connected(const magnet_client* c) { return c->fd >= 0 && c->welcomed; }
uint64_t magnet_client_session(const magnet_client* c) { return c->welcomed ? c->session : 0; }
int magnet_client_fd(const magnet_client* c) { return c->fd; }
const char* magnet_client_error(const magnet_client* c) { return c->err.c_str(); }

}  // extern "C"
#pragma GCC visibility pop
