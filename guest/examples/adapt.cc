// magnet-adapt: a sender that adapts its rate to the bandwidth its VM really
// has, and its receiver (the MAGNeT papers' visualization stream: frames of
// a given size, sent as fast as the network allows).
//
//   magnet-adapt send --to ADDR:PORT (--adaptive | --fixed RATE | --tcp) [options]
//   magnet-adapt receive --port PORT [--tcp] [--bind ADDR] [--duration T] [--interval T]
//
// send: UDP datagrams of 1400 bytes carrying a sequence number, grouped in
// frames (--frame BYTES, default 64 KiB).  --adaptive takes the rate from
// its own view only (link.available_bps through libmagnet-client, every
// 100 ms): no probing by loss, nothing of the other VMs.  The rate is the
// available bandwidth times --headroom (default 0.95), at the application
// layer (the view counts layer 2: Ethernet, IP and UDP headers are taken
// off), within --min and --max.  --fixed RATE sends at RATE whatever
// happens.  Every second it prints one JSON line: offered rate, delivered
// rate and loss (from the receiver's reports, which come back to it), frames
// per second, and the view value it acted on with its age.
//
// --tcp: a TCP bulk transfer instead (the comparison that adapts by itself,
// through loss and queueing), as fast as the socket takes it.
//
// receive: counts what arrives and what is missing (sequence gaps) per
// --interval (default 100 ms), prints one JSON line per interval, and
// reports each second back to the sender; with --tcp, the bytes of the
// connections it accepts.  Every line carries "wall", the receiver's
// CLOCK_REALTIME in seconds, so that runs can be lined up with other events
// of the host.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/cli.h"
#include "magnet/client.hpp"

namespace {

constexpr uint32_t kMagic = 0x4441474d;  // "MGAD"
constexpr size_t kPayload = 1400;
// What one datagram is at layer 2 (what the view's link figures count).
constexpr double kWire = kPayload + 8 + 20 + 14;

struct datagram {
  uint32_t magic;
  uint32_t frame;
  uint64_t seq;
  uint64_t sent_ns;
};

struct report {  // receiver -> sender, once a second
  uint32_t magic;
  uint32_t reserved;
  uint64_t received, lost, bytes, ns;
};

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

double wall_s() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// One JSON line on standard output, flushed (a rate JSON cannot hold, as
// NaN, is written as null).
void emit_line(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// ADDR:PORT (IPv4), or exits with a usage error naming it.
sockaddr_in parse_addr(const std::string& to) {
  auto colon = to.rfind(':');
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  int port = colon == std::string::npos ? 0 : std::atoi(to.c_str() + colon + 1);
  if (colon == std::string::npos || port <= 0 || port > 65535 ||
      inet_pton(AF_INET, to.substr(0, colon).c_str(), &dst.sin_addr) != 1) {
    std::fprintf(stderr, "magnet-adapt: '%s' is not ADDR:PORT (IPv4)\n", to.c_str());
    std::exit(2);
  }
  dst.sin_port = htons(static_cast<uint16_t>(port));
  return dst;
}

// send --tcp: one connection, written as fast as it takes data.
int send_tcp(const sockaddr_in& dst, double duration) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) != 0) {
    std::perror("magnet-adapt: tcp connect");
    return 1;
  }
  std::vector<uint8_t> buf(64 * 1024, 0x5a);
  const uint64_t start = now_ns(), end = duration > 0 ? start + static_cast<uint64_t>(duration * 1e9) : 0;
  uint64_t next_report = start + 1'000'000'000, sent = 0, last = 0;
  for (;;) {
    const uint64_t t = now_ns();
    if (end && t >= end) break;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 100) > 0) {
      ssize_t n = send(fd, buf.data(), buf.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        std::perror("magnet-adapt: tcp send");
        break;
      }
      if (n > 0) sent += static_cast<uint64_t>(n);
    }
    if (now_ns() >= next_report) {
      emit_line({{"t", static_cast<double>(now_ns() - start) / 1e9}, {"wall", wall_s()}, {"mode", "tcp"},
                 {"offered_bps", static_cast<double>(sent - last) * 8}});
      last = sent;
      next_report += 1'000'000'000;
    }
  }
  close(fd);
  return 0;
}

double parse_rate(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string u = end ? end : "";
  if (u == "k" || u == "K" || u == "kbit") v *= 1e3;
  else if (u == "m" || u == "M" || u == "mbit") v *= 1e6;
  else if (u == "g" || u == "G" || u == "gbit") v *= 1e9;
  else if (!u.empty()) v = -1;
  if (!(v > 0)) {
    std::fprintf(stderr, "magnet-adapt: '%s' is not a rate (20M, 500k, 1000000)\n", s.c_str());
    std::exit(2);
  }
  return v;
}

// A duration in seconds, in the syntax of every magnet program (magnet/cli.h):
// a bare number is seconds for --duration; --interval, which took
// milliseconds, needs its unit.
double parse_secs(const std::string& option, const std::string& s,
                  magnet::cli::bare_number bare = magnet::cli::bare_number::seconds) {
  auto ns = magnet::cli::parse_duration_ns(s, bare);
  if (!ns) {
    std::fprintf(stderr, "magnet-adapt: %s: %s\n", option.c_str(), ns.err().message.c_str());
    std::exit(2);
  }
  return static_cast<double>(*ns) / 1e9;
}

const char* kUsage =
    "usage: magnet-adapt send --to ADDR:PORT (--adaptive | --fixed RATE | --tcp)\n"
    "                         [--frame BYTES] [--min RATE] [--max RATE] [--headroom F]\n"
    "                         [--duration T] [--socket PATH]\n"
    "       magnet-adapt receive --port PORT [--tcp] [--bind ADDR] [--duration T]\n"
    "                            [--interval T]\n"
    "\n"
    "send: frames of UDP datagrams to ADDR:PORT at the rate this VM's view says is available\n"
    "(link.available_bps, --adaptive), at a fixed RATE, or one TCP connection;\n"
    "one JSON line a second on standard output.\n"
    "  --frame BYTES   frame size (default 65536)\n"
    "  --min RATE      lowest rate (default 200k), --max RATE highest (default 1G);\n"
    "                  RATE: 20M, 500k, 1000000 (bit/s)\n"
    "  --headroom F    fraction of the available rate used, in (0, 1] (default 0.95)\n"
    "  --duration T    stop after T (default: never)\n"
    "  --socket PATH   the agent's socket (default /run/magnet/agent.sock)\n"
    "receive: counts what arrives on PORT (UDP, or TCP with --tcp) and prints\n"
    "one JSON line per interval.\n"
    "  --bind ADDR     local address (default 0.0.0.0)\n"
    "  --duration T    stop after T (default: never)\n"
    "  --interval T    reporting interval (default 100ms; T needs its unit here)\n"
    "-h, --help: this text.\n"
    "\n" MAGNET_HELP_DURATIONS;

// The usage text: asked for (--help), on standard output with status 0;
// else after a usage error, on standard error with status 2.
[[noreturn]] void usage(bool asked = false) {
  std::fputs(kUsage, asked ? stdout : stderr);
  std::exit(asked ? 0 : 2);
}

struct send_opts {
  std::string to, socket;
  bool adaptive = false, tcp = false;
  double fixed = 0, min_bps = 200e3, max_bps = 1e9, headroom = 0.95, duration = 0;
  size_t frame_bytes = 64 * 1024;
};

// send's options, or the exit status of a usage error (2).
std::optional<send_opts> parse_send(const std::vector<std::string>& a) {
  send_opts o;
  for (size_t i = 0; i < a.size(); ++i) {
    auto val = [&] {
      if (i + 1 >= a.size()) usage();
      return a[++i];
    };
    if (a[i] == "--help" || a[i] == "-h") usage(true);
    else if (a[i] == "--to") o.to = val();
    else if (a[i] == "--adaptive") o.adaptive = true;
    else if (a[i] == "--tcp") o.tcp = true;
    else if (a[i] == "--fixed") o.fixed = parse_rate(val());
    else if (a[i] == "--min") o.min_bps = parse_rate(val());
    else if (a[i] == "--max") o.max_bps = parse_rate(val());
    else if (a[i] == "--headroom") o.headroom = std::strtod(val().c_str(), nullptr);
    else if (a[i] == "--frame") o.frame_bytes = static_cast<size_t>(std::max(1.0, parse_rate(val())));
    else if (a[i] == "--duration") o.duration = parse_secs("--duration", val());
    else if (a[i] == "--socket") o.socket = val();
    else usage();
  }
  const char* why = o.to.empty() ? "send needs --to ADDR:PORT"
                    : int(o.adaptive) + int(o.fixed > 0) + int(o.tcp) != 1
                        ? "send needs one of --adaptive, --fixed RATE, --tcp"
                    : !(o.headroom > 0 && o.headroom <= 1) ? "--headroom must be in (0, 1]"
                                                           : nullptr;
  if (why) {
    std::fprintf(stderr, "magnet-adapt: %s\n", why);
    return std::nullopt;
  }
  return o;
}

// The rate the sender acts on: the fixed one, or the view's newest valid
// link.available_bps (with headroom, in payload bytes), held 1 s when the
// view goes quiet (agent or host restarting), then the minimum rate.
class acted_rate {
 public:
  explicit acted_rate(const send_opts& o) : o_(o) {}
  void on_view(magnet::client& view) {
    view.on_value([this](const magnet::client::value& v) {
      if (v.id != 0x0032 || !v.valid) return;  // link.available_bps
      acted_ = v.value;
      at_ = now_ns();
      age_ = v.age_ns;
    });
  }
  double now() const {
    if (!o_.adaptive) return o_.fixed;
    if (!at_ || now_ns() - at_ > 1'000'000'000) return o_.min_bps;
    return std::clamp(acted_ * o_.headroom * kPayload / kWire, o_.min_bps, o_.max_bps);
  }
  double view_bps() const { return o_.adaptive ? acted_ : 0.0; }
  // How old the acted value is, from its measurement (-1: none yet).
  double age_ms() const { return at_ ? static_cast<double>(now_ns() - at_ + age_) / 1e6 : -1.0; }

 private:
  const send_opts& o_;
  double acted_ = 0;
  uint64_t at_ = 0, age_ = 0;
};

// One line a second: offered and (from the receiver's reports) delivered
// rates and loss, and what the view said.
struct send_report {
  uint64_t last_sent = 0;
  report last_rx{}, prev_rx{};
  void take(const report& r) {
    if (r.magic == kMagic) prev_rx = last_rx, last_rx = r;
  }
  void print(const send_opts& o, double t, uint64_t sent, const acted_rate& ar, double rate,
             bool connected) {
    const double offered = static_cast<double>(sent - last_sent) * 8;  // over 1 s
    last_sent = sent;
    double delivered = -1, loss = -1;
    if (prev_rx.ns && last_rx.ns > prev_rx.ns) {
      const double rs = static_cast<double>(last_rx.ns - prev_rx.ns) / 1e9;
      delivered = static_cast<double>(last_rx.bytes - prev_rx.bytes) * 8 / rs;
      const double got = static_cast<double>(last_rx.received - prev_rx.received);
      const double lost = static_cast<double>(last_rx.lost - prev_rx.lost);
      loss = got + lost > 0 ? lost / (got + lost) : 0;
    }
    emit_line({{"t", t}, {"wall", wall_s()}, {"mode", o.adaptive ? "adaptive" : "fixed"},
               {"offered_bps", offered}, {"delivered_bps", delivered}, {"loss", loss},
               {"fps", offered / 8 / static_cast<double>(o.frame_bytes)},
               {"view_available_bps", ar.view_bps()}, {"view_age_ms", ar.age_ms()},
               {"rate_bps", rate}, {"connected", connected}});
  }
};

// send over UDP: datagrams at the acted rate (a token bucket of at most 4
// datagrams of burst), serving the view while waiting for the next turn.
int send_udp(const send_opts& o, const sockaddr_in& dst) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) != 0) {
    std::perror("magnet-adapt: socket");
    return 1;
  }
  magnet::client view(o.socket);
  if (o.adaptive && !view.subscribe({"link.available_bps"}, 100)) {
    std::fprintf(stderr, "magnet-adapt: %s\n", view.error().c_str());
    return 1;
  }
  acted_rate ar(o);
  if (o.adaptive) ar.on_view(view);
  std::vector<uint8_t> buf(kPayload, 0);
  uint64_t seq = 0, sent = 0;
  const uint64_t start = now_ns(), end = o.duration > 0 ? start + static_cast<uint64_t>(o.duration * 1e9) : 0;
  uint64_t next_report = start + 1'000'000'000, last_tick = start;
  double tokens = 0;  // bytes we may send now
  send_report rep;
  for (uint64_t t = start; !end || t < end; t = now_ns()) {
    const double rate = ar.now();
    tokens = std::min(tokens + rate / 8 * static_cast<double>(t - last_tick) / 1e9, 4.0 * kPayload);
    last_tick = t;
    for (; tokens >= kPayload; tokens -= kPayload) {
      datagram d{kMagic, static_cast<uint32_t>(sent / o.frame_bytes), seq++, t};
      std::memcpy(buf.data(), &d, sizeof d);
      if (send(fd, buf.data(), buf.size(), 0) == static_cast<ssize_t>(buf.size())) sent += kPayload;
    }
    // Reports from the receiver come back on the same socket.
    for (report r; recv(fd, &r, sizeof r, MSG_DONTWAIT) == static_cast<ssize_t>(sizeof r);) rep.take(r);
    if (t >= next_report) {
      rep.print(o, static_cast<double>(t - start) / 1e9, sent, ar, rate, view.connected());
      next_report += 1'000'000'000;
    }
    const double wait_ns = tokens >= kPayload || rate <= 0 ? 0 : (kPayload - tokens) * 8 / rate * 1e9;
    const int ms = static_cast<int>(std::clamp(wait_ns / 1e6, 0.0, 2.0));
    if (o.adaptive)
      view.poll(ms);
    else if (ms)
      usleep(static_cast<useconds_t>(ms * 1000));
  }
  close(fd);
  return 0;
}

int send_cmd(const std::vector<std::string>& a) {
  auto o = parse_send(a);
  if (!o) return 2;
  const sockaddr_in dst = parse_addr(o->to);
  return o->tcp ? send_tcp(dst, o->duration) : send_udp(*o, dst);
}

// receive --tcp: accepts connections one after the other (a sender that
// comes back is counted again) and prints the bytes of each interval.
int receive_tcp(int port, const std::string& bind_addr, double duration, double interval_ms) {
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, bind_addr.c_str(), &sa.sin_addr) != 1 ||
      bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(ls, 4) != 0) {
    std::perror("magnet-adapt: tcp bind");
    return 1;
  }
  const uint64_t start = now_ns(), end = duration > 0 ? start + static_cast<uint64_t>(duration * 1e9) : 0;
  const uint64_t step = static_cast<uint64_t>(interval_ms * 1e6);
  uint64_t next = start + step, i_bytes = 0;
  int conn = -1;
  std::vector<uint8_t> buf(256 * 1024);
  for (;;) {
    uint64_t t = now_ns();
    if (end && t >= end) break;
    pollfd p{conn >= 0 ? conn : ls, POLLIN, 0};
    int ms = static_cast<int>(next > t ? (next - t) / 1'000'000 + 1 : 0);
    if (poll(&p, 1, ms) > 0) {
      if (conn < 0) {
        conn = accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
      } else {
        ssize_t n = recv(conn, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n > 0) i_bytes += static_cast<uint64_t>(n);
        else if (n == 0 || (errno != EAGAIN && errno != EINTR)) close(conn), conn = -1;
      }
    }
    t = now_ns();
    if (t >= next) {
      emit_line({{"t", static_cast<double>(t - start) / 1e9}, {"wall", wall_s()},
                 {"goodput_bps", static_cast<double>(i_bytes) * 8 / (interval_ms / 1e3)},
                 {"received", 0}, {"lost", 0}});
      i_bytes = 0;
      next += step;
    }
  }
  if (conn >= 0) close(conn);
  close(ls);
  return 0;
}

int receive_cmd(const std::vector<std::string>& a) {
  int port = 0;
  std::string bind_addr = "0.0.0.0";
  double duration = 0, interval_ms = 100;
  bool tcp = false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto val = [&] {
      if (i + 1 >= a.size()) usage();
      return a[++i];
    };
    if (a[i] == "--help" || a[i] == "-h") usage(true);
    else if (a[i] == "--tcp") tcp = true;
    else if (a[i] == "--port") port = std::atoi(val().c_str());
    else if (a[i] == "--bind") bind_addr = val();
    else if (a[i] == "--duration") duration = parse_secs("--duration", val());
    else if (a[i] == "--interval")
      interval_ms = 1e3 * parse_secs("--interval", val(), magnet::cli::bare_number::refused);
    else usage();
  }
  if (port <= 0 || port > 65535) {
    std::fprintf(stderr, "magnet-adapt: receive needs --port 1..65535\n");
    return 2;
  }
  if (tcp) return receive_tcp(port, bind_addr, duration, interval_ms);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  int big = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  if (inet_pton(AF_INET, bind_addr.c_str(), &sa.sin_addr) != 1 ||
      bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    std::perror("magnet-adapt: bind");
    return 1;
  }
  const uint64_t start = now_ns(), end = duration > 0 ? start + static_cast<uint64_t>(duration * 1e9) : 0;
  const uint64_t step = static_cast<uint64_t>(interval_ms * 1e6);
  uint64_t next = start + step, next_report = start + 1'000'000'000;
  uint64_t expect = 0, got = 0, lost = 0, bytes = 0, i_got = 0, i_lost = 0, i_bytes = 0;
  bool any = false;
  sockaddr_in peer{};
  socklen_t plen = 0;
  std::vector<uint8_t> buf(65536);
  for (;;) {
    uint64_t t = now_ns();
    if (end && t >= end) break;
    pollfd p{fd, POLLIN, 0};
    int ms = static_cast<int>(std::min(next, next_report) > t ? (std::min(next, next_report) - t) / 1'000'000 + 1 : 0);
    if (poll(&p, 1, ms) > 0) {
      for (;;) {
        sockaddr_in from{};
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(fd, buf.data(), buf.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &fl);
        if (n < static_cast<ssize_t>(sizeof(datagram))) break;
        datagram d;
        std::memcpy(&d, buf.data(), sizeof d);
        if (d.magic != kMagic) continue;
        peer = from;
        plen = fl;
        if (!any || d.seq < expect) {  // a new sender (or a restart)
          any = true;
          expect = d.seq;
        }
        const uint64_t missing = d.seq - expect;
        lost += missing;
        i_lost += missing;
        expect = d.seq + 1;
        ++got;
        ++i_got;
        bytes += static_cast<uint64_t>(n);
        i_bytes += static_cast<uint64_t>(n);
      }
    }
    t = now_ns();
    if (t >= next) {
      emit_line({{"t", static_cast<double>(t - start) / 1e9}, {"wall", wall_s()},
                 {"goodput_bps", static_cast<double>(i_bytes) * 8 / (interval_ms / 1e3)},
                 {"received", i_got}, {"lost", i_lost}});
      i_got = i_lost = i_bytes = 0;
      next += step;
    }
    if (t >= next_report && plen) {
      report r{kMagic, 0, got, lost, bytes, t};
      sendto(fd, &r, sizeof r, 0, reinterpret_cast<sockaddr*>(&peer), plen);
      next_report += 1'000'000'000;
    }
  }
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  std::vector<std::string> a(argv + 2, argv + argc);
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h") usage(true);
  if (cmd == "send") return send_cmd(a);
  if (cmd == "receive") return receive_cmd(a);
  usage();
}
