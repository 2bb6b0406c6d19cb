// lab_latency: delivery latency into a real VM, on one clock (the host's).
//
// For each of --count changes: the time from the daemon's change of the
// VM's host.marker (`mark VM VALUE` on its socket, whose answer holds the
// change's CLOCK_MONOTONIC time: run on the daemon's host) to the arrival
// of the UDP datagram that magnet-marker-echo sends from the guest
// application's callback.  That round trip holds one network leg (guest ->
// host), measured alone by UDP pings to the same program: the delivery
// latency is reported raw and less half the ping's median round trip.
//
// With --bare-vsock CID:PORT (run inside the nested lab host only: it opens
// an AF_VSOCK socket) each mark is paired with a write of the same value
// straight to the guest program's vsock port, in random order: the bare
// transport's latency on the same path at the same moments, so that what the
// daemon, the agent and the library add is their difference, side by side.
//
//   lab_latency --socket PATH --vm NAME --listen ADDR:PORT --guest ADDR:PORT
//               [--count N] [--label TEXT] [--bare-vsock CID:PORT] [--json]
#include <arpa/inet.h>
#include <linux/vm_sockets.h>
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

#include "magnet/admin/client.h"

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "lab_latency: %s\n"
               "usage: lab_latency --socket PATH --vm NAME --listen ADDR:PORT --guest ADDR:PORT\n"
               "                   [--count N] [--label TEXT] [--bare-vsock CID:PORT] [--json]\n",
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
  std::string sock, vm, listen, guest, label = "vm", bare;
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
    else if (a == "--bare-vsock") bare = val();
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
  int vfd = -1;
  if (!bare.empty()) {
    auto colon = bare.find(':');
    if (colon == std::string::npos) usage("--bare-vsock needs CID:PORT, not '" + bare + "'");
    sockaddr_vm va{};
    va.svm_family = AF_VSOCK;
    va.svm_cid = static_cast<unsigned>(std::strtoul(bare.c_str(), nullptr, 10));
    va.svm_port = static_cast<unsigned>(std::strtoul(bare.c_str() + colon + 1, nullptr, 10));
    vfd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (vfd < 0 || connect(vfd, reinterpret_cast<sockaddr*>(&va), sizeof va) != 0) {
      std::perror("lab_latency: --bare-vsock connect");
      return 1;
    }
  }
  // Marker changes at random moments (not in step with the daemon's ticks).
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> gap_ms(20, 80);
  const long base = static_cast<long>(now_us() / 1e6) % 100000 * 100000;
  std::vector<double> lat, bare_lat;
  int lost = 0, bare_lost = 0;
  std::bernoulli_distribution bare_first(0.5);
  for (int i = 1; i <= count; ++i) {
    const std::string v = std::to_string(base + i);
    const bool bare_now = vfd >= 0 && bare_first(rng);
    auto bare_turn = [&] {
      const std::string line = v + "\n";
      double t0 = now_us();
      if (send(vfd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
        std::perror("lab_latency: --bare-vsock send");
        std::exit(1);
      }
      if (wait_for(fd, "bare " + v, 2000))
        bare_lat.push_back(now_us() - t0);
      else
        ++bare_lost;
      usleep(static_cast<useconds_t>(gap_ms(rng) * 1000));
    };
    if (bare_now) bare_turn();
    auto r = magnet::host::query_daemon(sock, "mark " + vm + " " + v);
    if (!r.ok) {
      std::fprintf(stderr, "lab_latency: mark: %s\n", r.body.c_str());
      return 1;
    }
    const auto at = r.body.find("\"changed_ns\":");
    if (at == std::string::npos) {
      std::fprintf(stderr, "lab_latency: mark: no changed_ns in the daemon's answer '%s'\n", r.body.c_str());
      return 1;
    }
    const double t0 = std::strtod(r.body.c_str() + at + 13, nullptr) / 1e3;
    if (wait_for(fd, "marker " + v, 2000))
      lat.push_back(now_us() - t0);
    else
      ++lost;
    usleep(static_cast<useconds_t>(gap_ms(rng) * 1000));
    if (vfd >= 0 && !bare_now) bare_turn();
  }
  auto less_half_rtt = [&](std::vector<double> v) {
    for (auto& x : v) x = std::max(0.0, x - half_rtt);
    return v;
  };
  const std::vector<double> net = less_half_rtt(lat), bare_net = less_half_rtt(bare_lat);
  struct row {
    std::string label;
    int lost;
    const std::vector<double>& raw;
    const std::vector<double>& net;
  };
  std::vector<row> rows{{label, lost, lat, net}};
  if (vfd >= 0) rows.push_back({"bare " + label, bare_lost, bare_lat, bare_net});
  if (json) {
    for (const auto& r : rows)
      std::printf("{\"label\":\"%s\",\"count\":%d,\"lost\":%d,\"raw_p50_us\":%.1f,\"raw_p99_us\":%.1f,"
                  "\"raw_max_us\":%.1f,\"ping_rtt_p50_us\":%.1f,\"delivery_p50_us\":%.1f,"
                  "\"delivery_p99_us\":%.1f}\n",
                  r.label.c_str(), count, r.lost, pct(r.raw, 0.5), pct(r.raw, 0.99), pct(r.raw, 1.0), pct(rtt, 0.5),
                  pct(r.net, 0.5), pct(r.net, 0.99));
    if (vfd >= 0)
      std::printf("{\"label\":\"%s over bare\",\"added_p50_us\":%.1f,\"added_p99_us\":%.1f}\n", label.c_str(),
                  pct(lat, 0.5) - pct(bare_lat, 0.5), pct(lat, 0.99) - pct(bare_lat, 0.99));
  } else {
    std::printf("%-18s %6s %5s %10s %10s %10s %10s %12s %12s\n", "transport", "marks", "lost",
                "raw p50", "raw p99", "raw max", "ping/2", "deliv. p50", "deliv. p99");
    for (const auto& r : rows)
      std::printf("%-18s %6d %5d %8.2fms %8.2fms %8.2fms %8.2fms %10.2fms %10.2fms\n", r.label.c_str(), count,
                  r.lost, pct(r.raw, 0.5) / 1e3, pct(r.raw, 0.99) / 1e3, pct(r.raw, 1.0) / 1e3, half_rtt / 1e3,
                  pct(r.net, 0.5) / 1e3, pct(r.net, 0.99) / 1e3);
    if (vfd >= 0)
      std::printf("magnet over bare %s: p50 %+.2fms, p99 %+.2fms (same moments, random order)\n", label.c_str(),
                  (pct(lat, 0.5) - pct(bare_lat, 0.5)) / 1e3, (pct(lat, 0.99) - pct(bare_lat, 0.99)) / 1e3);
  }
  return lost > count / 10 || bare_lost > count / 10 ? 1 : 0;
}
