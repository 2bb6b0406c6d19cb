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
//   magnet-marker-echo --to ADDR:PORT [--port N] [--vsock-port N] [--duration S] [--socket PATH]
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

#include "magnet/client.hpp"

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "magnet-marker-echo: %s\n"
               "usage: magnet-marker-echo --to ADDR:PORT [--port N] [--vsock-port N] [--duration S] [--socket PATH]\n",
               why);
  std::exit(2);
}

double mono_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string to, sock;
  int port = 0;
  long vport = 0;
  double duration = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value of " + a).c_str());
      return argv[++i];
    };
    if (a == "--to") to = val();
    else if (a == "--port") port = std::atoi(val().c_str());
    else if (a == "--vsock-port") vport = std::atol(val().c_str());
    else if (a == "--duration") duration = std::strtod(val().c_str(), nullptr);
    else if (a == "--socket") sock = val();
    else usage(("unknown argument " + a).c_str());
  }
  auto colon = to.rfind(':');
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  if (colon == std::string::npos || inet_pton(AF_INET, to.substr(0, colon).c_str(), &dst.sin_addr) != 1)
    usage("--to needs ADDR:PORT (IPv4)");
  dst.sin_port = htons(static_cast<uint16_t>(std::atoi(to.c_str() + colon + 1)));
  if (port < 0 || port > 65535) usage("--port must be 0..65535");
  int out = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (out < 0 || connect(out, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
    std::perror("magnet-marker-echo: socket");
    return 1;
  }
  int ping = -1;
  if (port) {
    ping = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(ping, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      std::perror("magnet-marker-echo: bind");
      return 1;
    }
  }
  if (vport < 0 || vport > 0xffffffffL) usage("--vsock-port must be 0..4294967295");
  int vlisten = -1, vconn = -1;
  std::string vbuf;
  if (vport) {
    vlisten = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_vm va{};
    va.svm_family = AF_VSOCK;
    va.svm_cid = VMADDR_CID_ANY;
    va.svm_port = static_cast<unsigned>(vport);
    if (vlisten < 0 || bind(vlisten, reinterpret_cast<sockaddr*>(&va), sizeof va) != 0 || listen(vlisten, 1) != 0) {
      std::perror("magnet-marker-echo: vsock listen");
      return 1;
    }
  }
  magnet::client c(sock);
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
    if (send(out, b, static_cast<size_t>(n), 0) == n) ++echoed;
  });
  const double end = duration > 0 ? mono_s() + duration : 0;
  while (!end || mono_s() < end) {
    if (c.fd() < 0) {  // (re)connecting to the agent
      c.poll(100);
      continue;
    }
    std::vector<pollfd> p{{c.fd(), POLLIN, 0}, {ping, POLLIN, 0}, {vconn >= 0 ? vconn : vlisten, POLLIN, 0}};
    if (::poll(p.data(), p.size(), 100) < 0) continue;
    if (p[0].revents) c.poll(0);
    if (p[2].revents && vconn < 0) {
      vconn = accept4(vlisten, nullptr, nullptr, SOCK_CLOEXEC);
    } else if (p[2].revents) {
      char b[256];
      ssize_t n = recv(vconn, b, sizeof b, 0);
      if (n <= 0) {
        ::close(vconn);
        vconn = -1;
        vbuf.clear();
      } else {
        vbuf.append(b, static_cast<size_t>(n));
        for (size_t nl; (nl = vbuf.find('\n')) != std::string::npos; vbuf.erase(0, nl + 1)) {
          const std::string m = "bare " + vbuf.substr(0, nl);
          send(out, m.data(), m.size(), 0);
        }
        if (vbuf.size() > 64) vbuf.clear();  // not a line the bench writes
      }
    }
    if (ping >= 0 && (p[1].revents & POLLIN)) {
      char b[256];
      sockaddr_in from{};
      socklen_t fl = sizeof from;
      ssize_t n = recvfrom(ping, b, sizeof b, 0, reinterpret_cast<sockaddr*>(&from), &fl);
      if (n > 0) sendto(ping, b, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), fl);
    }
  }
  std::printf("{\"echoed\":%lu}\n", echoed);
  return 0;
}
