#include "deliver_stage.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <string>

#include "alloc_count.h"
#include "magnet/event.h"
#include "magnet/view.h"

namespace magnet::bench {
namespace {

uint64_t clock_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// The guest agent's subscription (guest/agent/src/agent.cc), as bench/deliver's.
view::subscribe agent_subscription() {
  return view::subscribe{100, MAGNET_VMODE_PERIODIC, MAGNET_VSUB_EVENTS, {}, {MAGNET_EV_VMNET_QUEUE_TX}};
}

}  // namespace

// One guest's end of a socket pair, spoken to with the protocol's codec.
struct guest_end {
  int fd = -1;
  uint32_t vm = 0;
  uint32_t seq = 0;
  view::reader rd;
  std::atomic<uint64_t> frames{0};
  ~guest_end() {
    if (fd >= 0) ::close(fd);
  }
  // Small frames on a fresh socket: never blocks for long.
  void send(const view::message& m) {
    std::vector<uint8_t> b;
    if (!view::encode(b, m, ++seq, clock_ns(CLOCK_MONOTONIC)))
      throw std::runtime_error("cannot encode a frame of VM " + std::to_string(vm) + "'s guest");
    for (size_t off = 0; off < b.size();) {
      ssize_t k = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 100);
        continue;
      }
      if (k <= 0) throw std::runtime_error("VM " + std::to_string(vm) + "'s guest cannot write to the hub");
      off += static_cast<size_t>(k);
    }
  }
  // What has arrived; false when the hub closed or sent a bad frame.
  bool drain() {
    for (;;) {
      auto room = rd.prepare();
      ssize_t k = ::recv(fd, room.data(), room.size(), MSG_DONTWAIT);
      if (k < 0) return errno == EAGAIN || errno == EINTR;
      if (k == 0) return false;
      rd.commit(static_cast<size_t>(k));
      view::frame f;
      error e;
      for (;;) {
        auto st = rd.next(f, e);
        if (st == view::reader::state::more) break;
        if (st == view::reader::state::bad) return false;
        if (std::holds_alternative<view::welcome>(f.m)) send(agent_subscription());
        if (std::holds_alternative<view::stats>(f.m)) frames.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
};

deliver_stage::deliver_stage(unsigned n, stats_of stats) : n_(n), stats_(std::move(stats)) {
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_ < 0) throw std::runtime_error("epoll_create1 failed for the guests' reader");
  std::vector<int> hub_ends;
  for (uint32_t v = 1; v <= n; ++v) {  // the guests' side first: not in the hub's heap
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      throw std::runtime_error("socketpair for VM " + std::to_string(v) + "'s guest failed (fd limit?)");
    auto g = std::make_unique<guest_end>();
    g->fd = sv[0];
    g->vm = v;
    hub_ends.push_back(sv[1]);
    guests_.push_back(std::move(g));
  }
  const int64_t heap0 = live_heap_bytes();
  host::deliver_options o;
  o.vsock = host::deliver_options::vsock_mode::off;  // never AF_VSOCK on this machine
  o.serial = false;
  hub_ = std::make_unique<host::delivery_hub>(io_, o);
  if (!hub_->start()) throw std::runtime_error("the delivery hub did not start");
  std::vector<host::vm_ident> ids;
  for (uint32_t v = 1; v <= n; ++v) ids.push_back({v, "scale-" + std::to_string(v), 0, getpid(), "", 0x1000 + v, {}});
  hub_->set_vms(ids);
  for (auto& g : guests_) {
    hub_->adopt(g->vm, hub_ends[g->vm - 1], host::transport::test);
    g->send(view::hello{MAGNET_VIEW_VERSION_MIN, MAGNET_VIEW_VERSION, MAGNET_VROLE_AGENT, 0, "scale_bench"});
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = g.get();
    epoll_ctl(epoll_, EPOLL_CTL_ADD, g->fd, &ev);
  }
  reader_ = std::thread([this] { reader(); });
  run(5);  // hello, welcome, subscribe: every guest served before measuring
  for (const auto& g : guests_)
    if (g->frames.load() == 0)
      throw std::runtime_error("VM " + std::to_string(g->vm) + "'s guest got no stats frame in 0.5 s");
  heap_per_vm = (live_heap_bytes() - heap0) / n;
}

deliver_stage::~deliver_stage() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
  hub_->stop();
  io_.poll();
  hub_.reset();
  if (epoll_ >= 0) ::close(epoll_);
}

void deliver_stage::reader() {
  epoll_event evs[64];
  while (!stop_) {
    int k = epoll_wait(epoll_, evs, 64, 50);
    for (int i = 0; i < k; ++i) {
      auto* g = static_cast<guest_end*>(evs[i].data.ptr);
      if (!g->drain()) epoll_ctl(epoll_, EPOLL_CTL_DEL, g->fd, nullptr);  // counted as missing frames
    }
  }
}

void deliver_stage::tick(uint64_t now_ns) {
  for (uint32_t v = 1; v <= n_; ++v) hub_->publish(v, now_ns, stats_(v));
}

uint64_t deliver_stage::stats_frames() const {
  uint64_t n = 0;
  for (const auto& g : guests_) n += g->frames.load(std::memory_order_relaxed);
  return n;
}

deliver_stage::window deliver_stage::run(unsigned ticks) {
  auto guard = boost::asio::make_work_guard(io_);
  const uint64_t frames0 = stats_frames();
  const uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = clock_ns(CLOCK_MONOTONIC);
  auto next = std::chrono::steady_clock::now();
  for (unsigned i = 0; i < ticks; ++i) {
    tick(clock_ns(CLOCK_MONOTONIC));
    next += std::chrono::milliseconds(100);
    io_.run_until(next);
  }
  const uint64_t c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t1 = clock_ns(CLOCK_MONOTONIC);
  window w;
  w.cpu_ms_per_tick = static_cast<double>(c1 - c0) / 1e6 / ticks;
  w.core_pct = 100.0 * static_cast<double>(c1 - c0) / static_cast<double>(t1 - t0);
  w.frames_per_s = static_cast<double>(stats_frames() - frames0) * 1e9 / static_cast<double>(t1 - t0);
  return w;
}

}  // namespace magnet::bench
