// magnet-marker-echo: the guest half of the delivery-latency bench
// (bench/deliver/lab.sh).  Subscribes through libmagnet-client to
// host.marker (on change) and, in the callback, sends each new value to
// ADDR:PORT as one UDP datagram, so the host times the whole path on one
// clock: `magnet mark` -> daemon -> vsock or virtio-serial -> agent ->
// library callback -> UDP back to the host.  It also answers UDP pings on
// --port (the network's own share of the path, measured separately).
// With --vsock-port it also listens on AF_VSOCK and echoes each line "V"
// the host writes there as "bare V": the bare transport, with no daemon,
// agent or library on the way, timed by the host in turns with the marks.
//
//   magnet-marker-echo --to ADDR:PORT [--port N] [--vsock-port N] [--duration T] [--socket PATH]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <linux/vm_sockets.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/cli.h"
#include "magnet/client.hpp"

namespace {

const char* kUsage =
    "usage: magnet-marker-echo --to ADDR:PORT [--port N] [--vsock-port N] [--duration T] [--socket PATH]\n"
    "\n"
    "Sends each new host.marker of this VM's view to ADDR:PORT as one UDP datagram\n"
    "(the guest half of bench/deliver).\n"
    "  --to ADDR:PORT   where the markers go (IPv4)\n"
    "  --port N         answer UDP pings on port N (default: none)\n"
    "  --vsock-port N   echo the lines the host writes on vsock port N (default: none)\n"
    "  --duration T     stop after T (default: never): a number and a unit (ns, us,\n"
    "                   ms, s, min), e.g. 500ms, 2.5s, 1min; a bare number is seconds\n"
    "  --socket PATH    the agent's socket (default /run/magnet/agent.sock)\n"
    "  -h, --help       this text\n";

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "magnet-marker-echo: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

double mono_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

struct options {
  sockaddr_in to{};
  int port = 0;     // UDP pings answered there (0: none)
  long vport = 0;   // AF_VSOCK lines echoed from there (0: none)
  double duration = 0;
  std::string socket;  // the agent's (empty: its default)
};

options parse(int argc, char** argv) {
  options o;
  std::string to;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value of " + a);
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (a == "--to") to = val();
    else if (a == "--port") o.port = std::atoi(val().c_str());
    else if (a == "--vsock-port") o.vport = std::atol(val().c_str());
    else if (a == "--duration") {
      auto ns = magnet::cli::parse_duration_ns(val());
      if (!ns) usage("--duration: " + ns.err().message);
      o.duration = static_cast<double>(*ns) / 1e9;
    }
    else if (a == "--socket") o.socket = val();
    else usage("unknown argument " + a);
  }
  auto colon = to.rfind(':');
  o.to.sin_family = AF_INET;
  if (colon == std::string::npos || inet_pton(AF_INET, to.substr(0, colon).c_str(), &o.to.sin_addr) != 1)
    usage("--to needs ADDR:PORT (IPv4)");
  o.to.sin_port = htons(static_cast<uint16_t>(std::atoi(to.c_str() + colon + 1)));
  if (o.port < 0 || o.port > 65535) usage("--port must be 0..65535");
  if (o.vport < 0 || o.vport > 0xffffffffL) usage("--vsock-port must be 0..4294967295");
  return o;
}

// The sockets: UDP to the host, the ping socket, the vsock listener.
struct sockets {
  int out = -1, ping = -1, vlisten = -1;
};

bool open_sockets(const options& o, sockets& s) {
  s.out = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s.out < 0 || connect(s.out, reinterpret_cast<const sockaddr*>(&o.to), sizeof o.to) != 0) {
    std::perror("magnet-marker-echo: socket");
    return false;
  }
  if (o.port) {
    s.ping = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(o.port));
    if (bind(s.ping, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      std::perror("magnet-marker-echo: bind");
      return false;
    }
  }
  if (o.vport) {
    s.vlisten = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_vm va{};
    va.svm_family = AF_VSOCK;
    va.svm_cid = VMADDR_CID_ANY;
    va.svm_port = static_cast<unsigned>(o.vport);
    if (s.vlisten < 0 || bind(s.vlisten, reinterpret_cast<sockaddr*>(&va), sizeof va) != 0 ||
        listen(s.vlisten, 1) != 0) {
      std::perror("magnet-marker-echo: vsock listen");
      return false;
    }
  }
  return true;
}

// The bare transport: each line "V" the host writes on the vsock
// connection goes back as "bare V".
void echo_vsock(int& vconn, std::string& vbuf, int out) {
  char b[256];
  ssize_t n = recv(vconn, b, sizeof b, 0);
  if (n <= 0) {
    ::close(vconn);
    vconn = -1;
    vbuf.clear();
    return;
  }
  vbuf.append(b, static_cast<size_t>(n));
  for (size_t nl; (nl = vbuf.find('\n')) != std::string::npos; vbuf.erase(0, nl + 1)) {
    const std::string m = "bare " + vbuf.substr(0, nl);
    send(out, m.data(), m.size(), 0);
  }
  if (vbuf.size() > 64) vbuf.clear();  // not a line the bench writes
}

void answer_ping(int ping) {
  char b[256];
  sockaddr_in from{};
  socklen_t fl = sizeof from;
  ssize_t n = recvfrom(ping, b, sizeof b, 0, reinterpret_cast<sockaddr*>(&from), &fl);
  if (n > 0) sendto(ping, b, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), fl);
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  sockets s;
  if (!open_sockets(o, s)) return 1;
  magnet::client c(o.socket);
  // 20 ms: the protocol's shortest period (a new marker goes out at once).
  if (!c.subscribe({"host.marker"}, 20, magnet::client::mode::on_change)) {
    std::fprintf(stderr, "magnet-marker-echo: %s\n", c.error().c_str());
    return 1;
  }
  double last = -1;
  unsigned long echoed = 0;
  c.on_value([&](const magnet::client::value& v) {
    if (!v.valid || v.value == last) return;
    last = v.value;
    char b[64];
    int n = std::snprintf(b, sizeof b, "marker %.0f", v.value);
    if (send(s.out, b, static_cast<size_t>(n), 0) == n) ++echoed;
  });
  int vconn = -1;
  std::string vbuf;
  const double end = o.duration > 0 ? mono_s() + o.duration : 0;
  while (!end || mono_s() < end) {
    if (c.fd() < 0) {  // (re)connecting to the agent
      c.poll(100);
      continue;
    }
    std::vector<pollfd> p{{c.fd(), POLLIN, 0}, {s.ping, POLLIN, 0}, {vconn >= 0 ? vconn : s.vlisten, POLLIN, 0}};
    if (::poll(p.data(), p.size(), 100) < 0) continue;
    if (p[0].revents) c.poll(0);
    if (p[2].revents && vconn < 0)
      vconn = accept4(s.vlisten, nullptr, nullptr, SOCK_CLOEXEC);
    else if (p[2].revents)
      echo_vsock(vconn, vbuf, s.out);
    if (s.ping >= 0 && (p[1].revents & POLLIN)) answer_ping(s.ping);
  }
  std::printf("%s\n", nlohmann::json{{"echoed", echoed}}.dump().c_str());
  return 0;
}
