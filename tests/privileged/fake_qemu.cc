// magnet_fake_qemu: a stand-in for a VM's QEMU and its guest agent, for
// privileged tests with libvirt's test driver (no VM, no vsock).
//
//   magnet_fake_qemu CHANNEL SECONDS DUTY_MS [IO_DUTY_MS VHOST_DUTY_MS]
//
// The test names this process in libvirt's pid file, so the daemon's
// registry takes it for the VM's QEMU.  It has a thread named as QEMU names
// a vCPU thread ("CPU 0/KVM") that runs DUTY_MS in every 10 (the sched probe
// counts that as the VM's vCPU run time: the VM gets a share of the host's
// power); with IO_DUTY_MS and VHOST_DUTY_MS above 0, a thread named as QEMU
// names an I/O thread ("IO iothread1") and one named as a vhost worker of
// kernels since 6.4 ("vhost-PID", a thread of its owner) that run so long in
// every 10 ms (their CPU time is the VM's work too).  It listens on CHANNEL, the VM's view channel (a unix socket, as
// QEMU's virtio-serial chardev is), where the daemon connects.  There it
// speaks for the guest agent: hello, a subscription to every stat every
// 100 ms, then each stats frame as one JSON line on stderr:
//   {"ts_ns":N,"gap":false,"stats":[{"name":"power.watts","index":0,
//    "value":1.5,"valid":true,"window_us":1000000,"age_us":120},...]}
// ("ready" once the thread is named and the socket listens; "welcome" when
// the daemon answered hello).  It exits after SECONDS, or when the daemon
// closes the channel.
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/view_codec.h"

namespace {

using namespace magnet;

uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

std::atomic<bool> stop{false};

// Runs @duty_ms in every 10 as thread @name: some CPU time, not a whole CPU
// of a shared machine.
void burn(std::string name, int duty_ms) {
  pthread_setname_np(pthread_self(), name.c_str());
  while (!stop) {
    const uint64_t until = now_ns() + static_cast<uint64_t>(duty_ms) * 1'000'000;
    while (now_ns() < until) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10 - duty_ms));
  }
}

bool send_msg(int fd, const view::message& m, uint32_t& seq) {
  std::vector<uint8_t> b;
  if (!view::encode(b, m, ++seq, now_ns())) return false;
  return ::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
}

void print_stats(const view::frame& f, const view::stats& st) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& v : st.values) {
    const auto* info = view::find_stat(v.id);
    a.push_back({{"name", info ? std::string(info->name) : std::to_string(v.id)},
                 {"index", v.index},
                 {"value", v.value},
                 {"valid", v.valid()},
                 {"window_us", v.window_us},
                 {"age_us", v.age_us}});
  }
  nlohmann::json j{{"ts_ns", f.h.ts_ns}, {"gap", (st.flags & MAGNET_VSTATS_GAP) != 0}, {"stats", a}};
  std::fprintf(stderr, "%s\n", j.dump().c_str());
}

// The agent's side of one connection until @deadline or its end.
int serve(int c, std::chrono::steady_clock::time_point deadline) {
  uint32_t seq = 0;
  if (!send_msg(c, view::hello{1, MAGNET_VIEW_VERSION, MAGNET_VROLE_AGENT, 0, "fake-qemu"}, seq)) return 1;
  view::reader rd;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{c, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    auto room = rd.prepare();
    const ssize_t n = ::recv(c, room.data(), room.size(), 0);
    if (n <= 0) {
      std::fprintf(stderr, "closed\n");
      return 0;
    }
    rd.commit(static_cast<size_t>(n));
    view::frame f;
    error e;
    for (auto s = rd.next(f, e); s != view::reader::state::more; s = rd.next(f, e)) {
      if (s == view::reader::state::bad) {
        std::fprintf(stderr, "bad frame: %s\n", e.message.c_str());
        return 1;
      }
      if (std::holds_alternative<view::welcome>(f.m)) {
        std::fprintf(stderr, "welcome\n");
        if (!send_msg(c, view::subscribe{100, MAGNET_VMODE_PERIODIC, 0, {}, {}}, seq)) return 1;
      } else if (auto* st = std::get_if<view::stats>(&f.m)) {
        print_stats(f, *st);
      } else if (auto* er = std::get_if<view::errmsg>(&f.m)) {
        std::fprintf(stderr, "error %u: %s\n", er->code, er->text.c_str());
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int duty = argc == 4 || argc == 6 ? std::atoi(argv[3]) : -1;
  const int io = argc == 6 ? std::atoi(argv[4]) : 0, vhost = argc == 6 ? std::atoi(argv[5]) : 0;
  if (duty < 0 || duty > 10 || io < 0 || io > 10 || vhost < 0 || vhost > 10) {
    std::fprintf(stderr, "usage: magnet_fake_qemu CHANNEL SECONDS DUTY_MS [IO_DUTY_MS VHOST_DUTY_MS] (each 0 to 10)\n");
    return 2;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoi(argv[2]));
  std::vector<std::thread> threads;
  threads.emplace_back(burn, "CPU 0/KVM", duty);
  if (io) threads.emplace_back(burn, "IO iothread1", io);
  if (vhost) threads.emplace_back(burn, "vhost-" + std::to_string(getpid()), vhost);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", argv[1]);
  ::unlink(argv[1]);
  const int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || ::listen(l, 4)) {
    std::fprintf(stderr, "cannot listen on %s: %s\n", argv[1], std::strerror(errno));
    stop = true;
    for (auto& t : threads) t.join();
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the threads have their names
  std::fprintf(stderr, "ready\n");
  int rc = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{l, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int c = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    std::fprintf(stderr, "accepted\n");
    rc = serve(c, deadline);
    ::close(c);
    break;
  }
  stop = true;
  for (auto& t : threads) t.join();
  ::close(l);
  ::unlink(argv[1]);
  return rc;
}
