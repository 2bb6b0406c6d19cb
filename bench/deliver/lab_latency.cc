// lab_latency: delivery latency into a real VM, on one clock (the host's).
//
// For each of --count changes: the time from asking the daemon to change
// the VM's host.marker (`mark VM VALUE` on its socket) to the arrival of
// the UDP datagram that magnet-marker-echo sends from the guest
// application's callback.  That round trip holds one network leg (guest ->
// host), measured alone by UDP pings to the same program: the delivery
// latency is reported raw and less half the ping's median round trip.
//
//   lab_latency --socket PATH --vm NAME --listen ADDR:PORT --guest ADDR:PORT
//               [--count N] [--label TEXT] [--json]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "daemon.h"

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "lab_latency: %s\n"
               "usage: lab_latency --socket PATH --vm NAME --listen ADDR:PORT --guest ADDR:PORT\n"
               "                   [--count N] [--label TEXT] [--json]\n",
               why.c_str());
  std::exit(2);
}

double now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

sockaddr_in addr(const std::string& s, const char* what) {
  auto colon = s.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (colon == std::string::npos || inet_pton(AF_INET, s.substr(0, colon).c_str(), &a.sin_addr) != 1)
    usage(std::string(what) + " needs ADDR:PORT (IPv4), not '" + s + "'");
  a.sin_port = htons(static_cast<uint16_t>(std::atoi(s.c_str() + colon + 1)));
  return a;
}

double pct(std::vector<double> v, double q) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// Waits up to @ms for a datagram on @fd whose text is @want.
bool wait_for(int fd, const std::string& want, int ms) {
  const double end = now_us() + ms * 1000.0;
  char b[256];
  while (now_us() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>((end - now_us()) / 1000) + 1) <= 0) continue;
    ssize_t n = recv(fd, b, sizeof b - 1, 0);
    if (n <= 0) continue;
    b[n] = 0;
    if (want == b) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string sock, vm, listen, guest, label = "vm";
  int count = 200;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value of " + a);
      return argv[++i];
    };
    if (a == "--socket") sock = val();
    else if (a == "--vm") vm = val();
    else if (a == "--listen") listen = val();
    else if (a == "--guest") guest = val();
    else if (a == "--count") count = std::atoi(val().c_str());
    else if (a == "--label") label = val();
    else if (a == "--json") json = true;
    else usage("unknown argument " + a);
  }
  if (sock.empty() || vm.empty() || listen.empty() || guest.empty()) usage("missing a required option");
  if (count < 10 || count > 100000) usage("--count must be 10..100000");
  sockaddr_in la = addr(listen, "--listen"), ga = addr(guest, "--guest");
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&la), sizeof la) != 0) {
    std::perror("lab_latency: bind");
    return 1;
  }
  // The network's share: UDP round trips to the guest program.
  std::vector<double> rtt;
  for (int i = 0; i < 100; ++i) {
    std::string msg = "ping " + std::to_string(i);
    double t0 = now_us();
    sendto(fd, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&ga), sizeof ga);
    if (wait_for(fd, msg, 1000)) rtt.push_back(now_us() - t0);
    usleep(10000);
  }
  if (rtt.size() < 50) {
    std::fprintf(stderr, "lab_latency: the guest answered %zu of 100 pings (is magnet-marker-echo --port running?)\n",
                 rtt.size());
    return 1;
  }
  const double half_rtt = pct(rtt, 0.5) / 2;
  // Marker changes at random moments (not in step with the daemon's ticks).
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> gap_ms(20, 80);
  const long base = static_cast<long>(now_us() / 1e6) % 100000 * 100000;
  std::vector<double> lat;
  int lost = 0;
  for (int i = 1; i <= count; ++i) {
    const std::string v = std::to_string(base + i);
    double t0 = now_us();
    auto r = magnet::host::query_daemon(sock, "mark " + vm + " " + v);
    if (!r.ok) {
      std::fprintf(stderr, "lab_latency: mark: %s\n", r.body.c_str());
      return 1;
    }
    if (wait_for(fd, "marker " + v, 2000))
      lat.push_back(now_us() - t0);
    else
      ++lost;
    usleep(static_cast<useconds_t>(gap_ms(rng) * 1000));
  }
  std::vector<double> net(lat);
  for (auto& x : net) x = std::max(0.0, x - half_rtt);
  if (json) {
    std::printf("{\"label\":\"%s\",\"count\":%d,\"lost\":%d,\"raw_p50_us\":%.1f,\"raw_p99_us\":%.1f,"
                "\"raw_max_us\":%.1f,\"ping_rtt_p50_us\":%.1f,\"delivery_p50_us\":%.1f,"
                "\"delivery_p99_us\":%.1f}\n",
                label.c_str(), count, lost, pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1.0), pct(rtt, 0.5),
                pct(net, 0.5), pct(net, 0.99));
  } else {
    std::printf("%-14s %6s %5s %10s %10s %10s %10s %12s %12s\n", "transport", "marks", "lost",
                "raw p50", "raw p99", "raw max", "ping/2", "deliv. p50", "deliv. p99");
    std::printf("%-14s %6d %5d %8.2fms %8.2fms %8.2fms %8.2fms %10.2fms %10.2fms\n", label.c_str(), count,
                lost, pct(lat, 0.5) / 1e3, pct(lat, 0.99) / 1e3, pct(lat, 1.0) / 1e3, half_rtt / 1e3,
                pct(net, 0.5) / 1e3, pct(net, 0.99) / 1e3);
  }
  return lost > count / 10 ? 1 : 0;
}
