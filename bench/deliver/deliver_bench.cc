// The delivery hub's cost and latency over the test transport: AF_UNIX
// socket pairs adopted by magnet::host::delivery_hub stand in for vsock, so
// that a hundred guests are reachable on one host without VMs or root.
//
// Cost: the hub runs on its own io_context thread, as in the daemon, with
// the daemon's 100 ms tick publishing every declared VM's stats (the shape
// vm_metrics produces: 59 values for a VM with 2 vCPUs, 6 exit reasons and
// one shared link; the rates move every tick).  The set of VMs is fixed
// (--vms, default 100) whatever the number of clients N, so N=0 (publishing,
// no one connected) is the baseline: the stand-in for the views' own cost.
// Each client is its own VM (one connection per VM id: the hub's per-VM cap
// of 4 connections concerns vsock accepts only, adopt() is not capped) and
// subscribes like the guest agent (guest/agent/src/agent.cc): periodic, 100 ms,
// every stat, with its vmnet.queue.tx event records (none are published
// here: their cost follows the traffic).  A session's periodic timer
// re-arms from the moment it ran, so timers that once fire in the same
// wakeup stay together: the clients' phases only ever merge.  Hence two
// arrangements (--phases): spread (subscribed one after the other over one
// period: a wakeup per frame, as guests started at different times) and
// aligned (all at once: frames in bursts, where spread phases drift to).
// Clients are read by another thread whose cost is not counted; the io
// thread's CPU time is CLOCK_THREAD_CPUTIME_ID read on that thread, its
// wakeups the voluntary context switches of getrusage(RUSAGE_THREAD).
// Configurations run interleaved, the order rotated every round; medians
// with min-max over the rounds; the increment above N=0 is taken within
// each round (the same round's N=0) before the median.
//
// Latency: from set_marker() (CLOCK_MONOTONIC just before the call, on the
// io thread) to the client's recv() returning the frame that carries the
// new host.marker (CLOCK_MONOTONIC right after recv, on the client's own
// thread).  The frame header's ts_ns (the hub's clock when it made the
// frame) splits it into the part in the hub and the part after.  One change
// at a time: the next follows a random pause after the previous was seen.
// Two subscriptions: on-change to host.marker only with the smallest
// period (20 ms; pauses >= 20 ms so the period never holds a frame back:
// set_marker pushes at once), and the agent's periodic 100 ms subscription
// to every stat (the marker waits for the next periodic frame; the pauses
// spread the change's phase over the period).  Each with 1 client (the
// probe) and with 100 (the probe and 99 periodic clients as above), the
// daemon tick running; the scenarios interleaved in rounds, the latencies
// of all rounds pooled.
//
//   deliver_bench [--quick] [--json] [--rounds N] [--seconds S] [--warmup S]
//                 [--clients N,N,...] [--vms N] [--changes N]
//                 [--phases spread|aligned|both] [--only cost|latency]
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../summary.h"
#include "magnet/deliver/deliver.h"
#include "magnet/log.h"
#include "magnet/event.h"
#include "magnet/view_codec.h"

using namespace magnet;
using namespace magnet::host;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kTickMs = 100;     // the daemon's tick (host/daemon/src)
constexpr uint32_t kAgentPeriod = 100;  // the guest agent's default --period
constexpr double kTargetPct = 2.0;    // 100 clients x 10 Hz, % of one core above N=0
constexpr unsigned kTargetClients = 100;

uint64_t clock_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}
uint64_t mono_ns() { return clock_ns(CLOCK_MONOTONIC); }

void sleep_for_ns(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000ull), static_cast<long>(ns % 1'000'000'000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

using magnet::bench::summarize;
using magnet::bench::summary;
// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t r = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, r ? r - 1 : 0)];
}

// ------------------------------------------------------------ the stats ---

// One VM's stats in vm_metrics' shape (host/metrics/src/vm_metrics.cc): 59 values.
std::vector<view::stat_value> vm_stats(uint32_t vm) {
  std::vector<view::stat_value> s;
  auto add = [&](uint16_t id, double v, uint32_t window_us = 1000000, uint32_t index = 0) {
    s.push_back({id, MAGNET_VSTAT_VALID, index, window_us, 0, v});
  };
  const double k = vm;
  add(MAGNET_STAT_TAP_TX_BPS, 1e6 * k);
  add(MAGNET_STAT_TAP_RX_BPS, 2e6 * k);
  add(MAGNET_STAT_TAP_TX_PPS, 100 * k);
  add(MAGNET_STAT_TAP_RX_PPS, 200 * k);
  add(MAGNET_STAT_DROPS_TAP, 0);
  add(MAGNET_STAT_DROPS_QDISC, 0);
  add(MAGNET_STAT_DROPS_HOST, 0);
  for (uint16_t id : {MAGNET_STAT_QUEUE_TX_MEAN, MAGNET_STAT_QUEUE_TX_P50, MAGNET_STAT_QUEUE_TX_P99,
                      MAGNET_STAT_QUEUE_TX_PPS, MAGNET_STAT_QUEUE_RX_MEAN, MAGNET_STAT_QUEUE_RX_P50,
                      MAGNET_STAT_QUEUE_RX_P99, MAGNET_STAT_QUEUE_RX_PPS})
    add(id, 10 + k);
  for (uint16_t id : {MAGNET_STAT_LINK_CAPACITY, MAGNET_STAT_LINK_USE, MAGNET_STAT_LINK_AVAILABLE,
                      MAGNET_STAT_LINK_AVAILABLE_ERR})
    add(id, 1e9 - k, 500000);
  add(MAGNET_STAT_LINK_QUEUE_P50, 50);
  add(MAGNET_STAT_LINK_QUEUE_P99, 500);
  add(MAGNET_STAT_LINK_DROPS, 0);
  add(MAGNET_STAT_ALLOWANCE_TX, 0, 0);
  add(MAGNET_STAT_ALLOWANCE_RX, 0, 0);
  add(MAGNET_STAT_VCPU_COUNT, 2, 0);
  for (uint32_t v = 0; v < 2; ++v)
    for (uint16_t id : {MAGNET_STAT_VCPU_RUN, MAGNET_STAT_VCPU_WAIT, MAGNET_STAT_VCPU_HALT})
      add(id, 0.25, 1000000, v);
  add(MAGNET_STAT_VCPU_RUN_SUM, 0.5);
  add(MAGNET_STAT_VCPU_WAIT_SUM, 0.5);
  add(MAGNET_STAT_VCPU_HALT_SUM, 0.5);
  add(MAGNET_STAT_KVM_EXITS, 5000);
  // VMX: external interrupt, hlt (halts polled/slept), I/O, EPT violation/misconfig, MSR write.
  for (uint32_t idx : {MAGNET_VIEW_REASON_INDEX(1, 1), MAGNET_VIEW_REASON_HALT_POLLED,
                       MAGNET_VIEW_REASON_HALT_SLEPT, MAGNET_VIEW_REASON_INDEX(1, 30),
                       MAGNET_VIEW_REASON_INDEX(1, 49), MAGNET_VIEW_REASON_INDEX(1, 32)})
    for (uint16_t id : {MAGNET_STAT_KVM_REASON_EXITS, MAGNET_STAT_KVM_REASON_TIME,
                        MAGNET_STAT_KVM_REASON_MEAN})
      add(id, 1, 1000000, idx);
  add(MAGNET_STAT_KVM_EXIT_TIME, 0.01);
  add(MAGNET_STAT_BLK_BPS, 1e5);
  add(MAGNET_STAT_BLK_IOPS, 10);
  add(MAGNET_STAT_BLK_LAT_MEAN, 200);
  add(MAGNET_STAT_BLK_LAT_P99, 900);
  add(MAGNET_STAT_LOST_EVENTS, 0, 0);
  return s;
}
constexpr size_t kStatsPerVm = 59;

// A tick's new values: rates and the like move, levels stay.
void advance(std::vector<view::stat_value>& s, uint64_t tick) {
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i].window_us) s[i].value = s[i].value * 0.9 + static_cast<double>((tick * 7 + i) % 13);
}

// ------------------------------------------------------------- clients ---

// One guest's end of a socket pair, spoken to with the protocol's codec.
struct client {
  int fd = -1;
  uint32_t vm = 0;
  view::subscribe sub;
  view::reader rd;
  uint32_t seq = 0;
  bool subscribe_on_welcome = true;  // else someone else sends sub (spread phases)
  bool subscribed = false;
  uint64_t stats_frames = 0, bytes = 0;

  ~client() {
    if (fd >= 0) ::close(fd);
  }
  // Small frames on a fresh socket: never blocks for long.
  bool send(const view::message& m) {
    std::vector<uint8_t> b;
    if (!view::encode(b, m, ++seq, mono_ns())) return false;
    size_t off = 0;
    while (off < b.size()) {
      ssize_t n = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 100);
        continue;
      }
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
};

// The agent's subscription (guest/agent/src/agent.cc, journey on by default).
view::subscribe agent_subscription() {
  return view::subscribe{kAgentPeriod, MAGNET_VMODE_PERIODIC, MAGNET_VSUB_EVENTS, {},
                         {MAGNET_EV_VMNET_QUEUE_TX}};
}

// Subscribes @cs one after the other, evenly over one period, so that
// their periodic frames are due at spread phases as with guests that
// started at different times (aligned: all at once, frames in bursts).
// The server handles the hello sent at connect first, whenever the
// subscribe follows.
void subscribe_all(const std::vector<client*>& cs, bool spread) {
  const uint64_t t0 = mono_ns();
  for (size_t i = 0; i < cs.size(); ++i) {
    if (spread) {
      const uint64_t at = t0 + uint64_t{kAgentPeriod} * 1'000'000ull * i / cs.size();
      const uint64_t now = mono_ns();
      if (at > now) {
        timespec ts{static_cast<time_t>((at - now) / 1'000'000'000ull),
                    static_cast<long>((at - now) % 1'000'000'000ull)};
        nanosleep(&ts, nullptr);
      }
    }
    if (!cs[i]->send(cs[i]->sub)) {
      std::fprintf(stderr, "deliver_bench: cannot send subscribe\n");
      std::exit(1);
    }
  }
}

std::atomic<uint64_t> g_client_errors{0};  // ERROR frames, EOFs, bad frames seen by clients

void client_problem(const client& c, const std::string& what) {
  if (g_client_errors.fetch_add(1) < 5)
    std::fprintf(stderr, "deliver_bench: client of vm %u: %s\n", c.vm, what.c_str());
}

// Reads what is there (non-blocking) and hands every frame to @on_frame
// with the time recv() returned.  False at EOF or on a bad frame.
template <class F>
bool drain(client& c, F&& on_frame) {
  for (;;) {
    auto room = c.rd.prepare();
    ssize_t n = ::recv(c.fd, room.data(), room.size(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN;
    if (n == 0) {
      client_problem(c, "the hub closed the connection");
      return false;
    }
    const uint64_t t = mono_ns();
    c.bytes += static_cast<uint64_t>(n);
    c.rd.commit(static_cast<size_t>(n));
    view::frame f;
    error e;
    for (;;) {
      auto st = c.rd.next(f, e);
      if (st == view::reader::state::more) break;
      if (st == view::reader::state::bad) {
        client_problem(c, "bad frame: " + e.message);
        return false;
      }
      if (std::holds_alternative<view::welcome>(f.m)) {
        if (c.subscribe_on_welcome && !c.subscribed) {
          if (!c.send(c.sub)) client_problem(c, "cannot send subscribe");
          c.subscribed = true;
        }
      } else if (std::holds_alternative<view::stats>(f.m)) {
        ++c.stats_frames;
      } else if (auto* er = std::get_if<view::errmsg>(&f.m)) {
        client_problem(c, "error " + std::to_string(er->code) + ": " + er->text);
      }
      on_frame(f, t);
    }
  }
}

// The clients whose cost is not counted: one thread, epoll.
class reader_thread {
 public:
  explicit reader_thread(std::vector<client*> cs) : cs_(std::move(cs)) {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    for (auto* c : cs_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = c;
      epoll_ctl(ep_, EPOLL_CTL_ADD, c->fd, &ev);
    }
    th_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "clients");
      run();
    });
  }
  ~reader_thread() {
    stop_ = true;
    th_.join();
    ::close(ep_);
  }
  uint64_t frames() const { return frames_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // Every client has had at least @n stats frames.
  bool all_have(uint64_t n) const { return min_frames_.load() >= n; }

 private:
  void run() {
    epoll_event evs[64];
    while (!stop_) {
      int n = epoll_wait(ep_, evs, 64, 50);
      for (int i = 0; i < n; ++i) {
        auto* c = static_cast<client*>(evs[i].data.ptr);
        const uint64_t f0 = c->stats_frames, b0 = c->bytes;
        if (!drain(*c, [](const view::frame&, uint64_t) {})) epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd, nullptr);
        frames_.fetch_add(c->stats_frames - f0, std::memory_order_relaxed);
        bytes_.fetch_add(c->bytes - b0, std::memory_order_relaxed);
      }
      uint64_t m = UINT64_MAX;
      for (auto* c : cs_) m = std::min(m, c->stats_frames);
      min_frames_ = cs_.empty() ? UINT64_MAX : m;
    }
  }
  std::vector<client*> cs_;
  int ep_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> frames_{0}, bytes_{0}, min_frames_{0};
  std::thread th_;
};

// -------------------------------------------------------------- daemon ---

// The hub on its io thread, with the daemon's tick publishing every VM.
class daemon_sim {
 public:
  explicit daemon_sim(unsigned n_vms) : tick_(io_) {
    deliver_options o;
    o.vsock = deliver_options::vsock_mode::off;
    o.serial = false;
    hub_ = std::make_unique<delivery_hub>(io_, o);
    if (!hub_->start()) {
      std::fprintf(stderr, "deliver_bench: the hub did not start\n");
      std::exit(1);
    }
    std::vector<vm_ident> ids;
    for (uint32_t v = 1; v <= n_vms; ++v) {
      ids.push_back({v, "bench" + std::to_string(v), 0, getpid(), "", 0x1000 + v});
      stats_.push_back(vm_stats(v));
    }
    hub_->set_vms(ids);
  }
  ~daemon_sim() {
    if (th_.joinable()) stop();
  }

  // Before start(): @c's other end becomes a connection of VM c.vm.
  std::unique_ptr<client> connect(uint32_t vm, const view::subscribe& sub,
                                  bool subscribe_on_welcome = true) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      std::perror("deliver_bench: socketpair");
      std::exit(1);
    }
    auto c = std::make_unique<client>();
    c->fd = sv[0];
    c->vm = vm;
    c->sub = sub;
    c->subscribe_on_welcome = subscribe_on_welcome;
    hub_->adopt(vm, sv[1], transport::test);
    if (!c->send(view::hello{MAGNET_VIEW_VERSION_MIN, MAGNET_VIEW_VERSION, MAGNET_VROLE_AGENT, 0,
                             "deliver_bench"})) {
      std::fprintf(stderr, "deliver_bench: cannot send hello\n");
      std::exit(1);
    }
    return c;
  }

  void start() {
    next_ = asio::steady_timer::clock_type::now();
    tick();
    th_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "hub-io");
      auto guard = asio::make_work_guard(io_);
      io_.run();
    });
  }

  void stop() {
    call([this] {
      hub_->stop();
      tick_.cancel();
    });
    io_.stop();
    th_.join();
    hub_.reset();
  }

  // Runs @f on the io thread and waits for it.
  template <class F>
  auto call(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto fut = task.get_future();
    asio::post(io_, [&task] { task(); });
    return fut.get();
  }
  void post(std::function<void()> f) { asio::post(io_, std::move(f)); }

  delivery_hub& hub() { return *hub_; }

 private:
  void tick() {
    next_ += std::chrono::milliseconds(kTickMs);
    tick_.expires_at(next_);
    tick_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const uint64_t now = mono_ns();
      ++ticks_;
      for (size_t i = 0; i < stats_.size(); ++i) {
        advance(stats_[i], ticks_);
        hub_->publish(static_cast<uint32_t>(i + 1), now, stats_[i]);
      }
      if (asio::steady_timer::clock_type::now() > next_ + std::chrono::milliseconds(kTickMs))
        next_ = asio::steady_timer::clock_type::now();
      tick();
    });
  }

  asio::io_context io_;
  std::unique_ptr<delivery_hub> hub_;
  asio::steady_timer tick_;
  asio::steady_timer::time_point next_;
  std::vector<std::vector<view::stat_value>> stats_;
  uint64_t ticks_ = 0;
  std::thread th_;
};

// ----------------------------------------------------------------- cost ---

struct io_sample {
  uint64_t wall_ns = 0, cpu_ns = 0, vcsw = 0, ivcsw = 0;
};
io_sample sample_io(daemon_sim& d) {
  return d.call([] {
    io_sample s;
    s.wall_ns = mono_ns();
    s.cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    s.vcsw = static_cast<uint64_t>(ru.ru_nvcsw);
    s.ivcsw = static_cast<uint64_t>(ru.ru_nivcsw);
    return s;
  });
}

struct cost_run {
  double seconds = 0, frames_per_s = 0, bytes_per_s = 0, cpu_pct = 0, wakeups_per_s = 0;
  uint64_t replaced = 0;  // stats frames replaced before being written (slow reading)
};

cost_run measure_cost(unsigned n, unsigned n_vms, double seconds, double warmup, bool spread) {
  daemon_sim d(n_vms);
  std::vector<std::unique_ptr<client>> cs;
  std::vector<client*> raw;
  for (unsigned i = 0; i < n; ++i) {
    cs.push_back(d.connect(i + 1, agent_subscription(), false));
    raw.push_back(cs.back().get());
  }
  d.start();
  cost_run r;
  {
    reader_thread rt(raw);
    subscribe_all(raw, spread);
    // Every client subscribed and served, then the warm-up.
    const uint64_t limit = mono_ns() + 10'000'000'000ull;
    while (!rt.all_have(2)) {
      if (mono_ns() > limit) {
        std::fprintf(stderr, "deliver_bench: %u clients: not all served within 10 s\n", n);
        std::exit(1);
      }
      sleep_for_ns(10'000'000);
    }
    sleep_for_ns(static_cast<uint64_t>(warmup * 1e9));
    const uint64_t f0 = rt.frames(), b0 = rt.bytes();
    const io_sample s0 = sample_io(d);
    sleep_for_ns(static_cast<uint64_t>(seconds * 1e9));
    const io_sample s1 = sample_io(d);
    const uint64_t f1 = rt.frames(), b1 = rt.bytes();
    const double wall = static_cast<double>(s1.wall_ns - s0.wall_ns) / 1e9;
    r.seconds = wall;
    r.frames_per_s = static_cast<double>(f1 - f0) / wall;
    r.bytes_per_s = static_cast<double>(b1 - b0) / wall;
    r.cpu_pct = 100.0 * static_cast<double>(s1.cpu_ns - s0.cpu_ns) / static_cast<double>(s1.wall_ns - s0.wall_ns);
    r.wakeups_per_s = static_cast<double>(s1.vcsw - s0.vcsw) / wall;
    for (const auto& s : d.call([&] { return d.hub().sessions(); })) r.replaced += s.stats_replaced;
  }
  d.stop();
  return r;
}

// -------------------------------------------------------------- latency ---

struct lat_scenario {
  std::string name;       // for the table
  bool on_change = true;  // else the agent's periodic subscription
  unsigned clients = 1;   // the probe included
  bool spread = true;     // the other clients' phases
  std::vector<double> us; // latencies, pooled over rounds
  // The two parts: set_marker -> the frame made (its header's ts_ns, the
  // hub's CLOCK_MONOTONIC in push_now), and frame made -> the client's recv.
  std::vector<double> hub_us, after_us;
  uint64_t changes = 0, missed = 0;
  std::vector<double> round_p50;
};

void measure_latency(lat_scenario& sc, unsigned n_vms, unsigned changes, uint64_t seed) {
  daemon_sim d(std::max(n_vms, sc.clients));
  const view::subscribe probe_sub =
      sc.on_change ? view::subscribe{MAGNET_VIEW_MIN_PERIOD_MS, MAGNET_VMODE_ON_CHANGE, 0,
                                     {MAGNET_STAT_HOST_MARKER}, {}}
                   : agent_subscription();
  auto probe = d.connect(1, probe_sub);
  std::vector<std::unique_ptr<client>> load;
  std::vector<client*> raw;
  for (unsigned i = 1; i < sc.clients; ++i) {
    load.push_back(d.connect(i + 1, agent_subscription(), false));
    raw.push_back(load.back().get());
  }
  d.start();
  std::vector<std::atomic<uint64_t>> set_at(changes + 1);
  std::vector<double> got, hub, after;
  uint64_t missed = 0;
  {
    reader_thread rt(raw);
    subscribe_all(raw, sc.spread);
    // The probe's own thread: it sets each change (through the io thread)
    // and waits for it.
    std::thread pt([&] {
      pthread_setname_np(pthread_self(), "probe");
      std::mt19937_64 rng(seed);
      // On-change: at least the period apart, so it never holds a frame
      // back.  Periodic: the change's phase spread evenly over the period.
      const double lo = sc.on_change ? MAGNET_VIEW_MIN_PERIOD_MS : 0.05 * kAgentPeriod;
      const double hi = sc.on_change ? 2.0 * MAGNET_VIEW_MIN_PERIOD_MS : 1.05 * kAgentPeriod;
      std::uniform_real_distribution<double> pause_ms(lo, hi);
      client& c = *probe;
      // Welcome and the first frame.
      const uint64_t ready_by = mono_ns() + 5'000'000'000ull;
      while (c.stats_frames == 0 && mono_ns() < ready_by) {
        pollfd p{c.fd, POLLIN, 0};
        ::poll(&p, 1, 20);
        if (!drain(c, [](const view::frame&, uint64_t) {})) return;
      }
      if (!c.stats_frames) {
        client_problem(c, "no first frame within 5 s");
        return;
      }
      for (uint32_t k = 1; k <= changes; ++k) {
        sleep_for_ns(static_cast<uint64_t>(pause_ms(rng) * 1e6));
        d.post([&d, &set_at, k] {
          const uint64_t t = mono_ns();
          set_at[k].store(t, std::memory_order_release);
          d.hub().set_marker(1, k, t);
        });
        bool seen = false;
        const uint64_t deadline = mono_ns() + 2'000'000'000ull;
        while (!seen && mono_ns() < deadline) {
          pollfd p{c.fd, POLLIN, 0};
          ::poll(&p, 1, 50);
          bool ok = drain(c, [&](const view::frame& f, uint64_t t) {
            auto* st = std::get_if<view::stats>(&f.m);
            if (!st || seen) return;
            for (const auto& v : st->values)
              if (v.id == MAGNET_STAT_HOST_MARKER && v.value == k) {
                const uint64_t t0 = set_at[k].load(std::memory_order_acquire);
                got.push_back(static_cast<double>(t - t0) / 1e3);
                hub.push_back((static_cast<double>(f.h.ts_ns) - static_cast<double>(t0)) / 1e3);
                after.push_back((static_cast<double>(t) - static_cast<double>(f.h.ts_ns)) / 1e3);
                seen = true;
              }
          });
          if (!ok) return;
        }
        if (!seen) ++missed;
      }
    });
    pt.join();
  }
  d.stop();
  sc.changes += changes;
  sc.missed += missed + (changes - std::min<uint64_t>(changes, got.size() + missed));
  std::sort(got.begin(), got.end());
  sc.round_p50.push_back(percentile(got, 50));
  sc.us.insert(sc.us.end(), got.begin(), got.end());
  sc.hub_us.insert(sc.hub_us.end(), hub.begin(), hub.end());
  sc.after_us.insert(sc.after_us.end(), after.begin(), after.end());
}

// ------------------------------------------------------------------ main ---

enum class phases { spread, aligned, both };

struct options {
  unsigned rounds = 5;
  double seconds = 5, warmup = 0.5;
  std::vector<unsigned> clients = {0, 1, 10, 100};
  unsigned vms = 0;  // 0: the largest client count, at least 100
  unsigned changes = 1000;
  phases ph = phases::both;
  bool json = false, cost = true, latency = true;
};

[[noreturn]] void usage(const char* why) {
  if (why) std::fprintf(stderr, "deliver_bench: %s\n", why);
  std::fprintf(why ? stderr : stdout,
               "usage: deliver_bench [--quick] [--json] [--rounds N] [--seconds S] [--warmup S]\n"
               "                     [--clients N,N,...] [--vms N] [--changes N]\n"
               "                     [--phases spread|aligned|both] [--only cost|latency]\n"
               "  --quick        a short run: 2 rounds of 2 s, 100 marker changes per scenario\n"
               "  --rounds N     rounds, the configurations interleaved (default 5)\n"
               "  --seconds S    cost: measured seconds per configuration and round (default 5)\n"
               "  --warmup S     cost: seconds between the first frames and the measure (default 0.5)\n"
               "  --clients L    cost: client counts, 0 (the baseline) first (default 0,1,10,100)\n"
               "  --vms N        VMs declared and published (default: the largest client count,\n"
               "                 at least 100)\n"
               "  --changes N    latency: marker changes per scenario (default 1000)\n"
               "  --phases P     the periodic clients' phases: spread (subscribed one after the\n"
               "                 other over one period: a frame per wakeup), aligned (all at\n"
               "                 once: frames in bursts) or both (default)\n"
               "  --only W       cost or latency only\n"
               "  --json         one JSON object with every figure\n");
  std::exit(why ? 2 : 0);
}

bool parse_uint(const std::string& s, unsigned long lo, unsigned long hi, unsigned& out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 9) return false;
  unsigned long v = std::strtoul(s.c_str(), nullptr, 10);
  if (v < lo || v > hi) return false;
  out = static_cast<unsigned>(v);
  return true;
}
bool parse_seconds(const std::string& s, double lo, double hi, double& out) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || errno || !std::isfinite(v) || v < lo || v > hi) return false;
  out = v;
  return true;
}

options parse(int argc, char** argv) {
  options o;
  bool quick = false, rounds = false, seconds = false, changes = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage(nullptr);
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--rounds") {
      if (!parse_uint(value(), 1, 1000, o.rounds)) usage("--rounds: a whole number from 1 to 1000");
      rounds = true;
    } else if (a == "--seconds") {
      if (!parse_seconds(value(), 0.2, 3600, o.seconds)) usage("--seconds: from 0.2 to 3600");
      seconds = true;
    } else if (a == "--warmup") {
      if (!parse_seconds(value(), 0, 600, o.warmup)) usage("--warmup: from 0 to 600");
    } else if (a == "--changes") {
      if (!parse_uint(value(), 10, 1000000, o.changes))
        usage("--changes: a whole number from 10 to 1000000");
      changes = true;
    } else if (a == "--vms") {
      if (!parse_uint(value(), 1, 4000, o.vms)) usage("--vms: a whole number from 1 to 4000");
    } else if (a == "--clients") {
      const std::string l = value();
      o.clients.clear();
      size_t at = 0;
      for (;;) {
        const size_t comma = l.find(',', at);
        unsigned n = 0;
        if (!parse_uint(l.substr(at, comma == std::string::npos ? comma : comma - at), 0, 4000, n))
          usage("--clients: a list of whole numbers from 0 to 4000, e.g. 0,1,10,100");
        if (std::find(o.clients.begin(), o.clients.end(), n) != o.clients.end())
          usage("--clients: a count appears twice");
        o.clients.push_back(n);
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
      if (o.clients.front() != 0) usage("--clients: the list starts with 0 (the baseline)");
    } else if (a == "--phases") {
      const std::string w = value();
      if (w == "spread") o.ph = phases::spread;
      else if (w == "aligned") o.ph = phases::aligned;
      else if (w == "both") o.ph = phases::both;
      else usage("--phases: spread, aligned or both");
    } else if (a == "--only") {
      const std::string w = value();
      if (w == "cost") o.latency = false;
      else if (w == "latency") o.cost = false;
      else usage("--only: cost or latency");
    } else {
      usage(("unknown argument '" + a + "'").c_str());
    }
  }
  if (quick) {
    if (!rounds) o.rounds = 2;
    if (!seconds) o.seconds = 2;
    if (!changes) o.changes = 100;
  }
  const unsigned most = *std::max_element(o.clients.begin(), o.clients.end());
  if (!o.vms) o.vms = std::max(most, kTargetClients);
  if (o.vms < most) usage("--vms: at least the largest client count (one VM per client)");
  return o;
}

std::string si(double v) {
  char b[32];
  if (v >= 1e6) std::snprintf(b, sizeof b, "%.2f M", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.1f k", v / 1e3);
  else std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string json_summary(const summary& s, int prec) {
  char b[160];
  std::snprintf(b, sizeof b, "{\"median\":%.*f,\"min\":%.*f,\"max\":%.*f}", prec, s.med, prec, s.min,
                prec, s.max);
  return b;
}
std::string json_list(const std::vector<double>& v, int prec) {
  std::string o = "[";
  char b[64];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(b, sizeof b, "%s%.*f", i ? "," : "", prec, v[i]);
    o += b;
  }
  return o + "]";
}

// A cost configuration: N clients; with 2 or more, their phases.
struct cost_cfg {
  unsigned clients = 0;
  bool spread = true;
  bool phased = false;  // the phases mean something (N >= 2)
  std::string label() const {
    return std::to_string(clients) + (phased ? (spread ? " spread" : " aligned") : "");
  }
  const char* phases_json() const { return phased ? (spread ? "\"spread\"" : "\"aligned\"") : "null"; }
};

struct cost_row {
  cost_cfg cfg;
  summary fps, bps, cpu, wake, above, per_client;
  std::vector<double> cpu_samples, above_samples;
  uint64_t replaced = 0;
  bool pass() const { return above.med <= kTargetPct; }
};

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  // Two fds per client.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  set_log_verbosity(1);  // warnings (refusals, slow readers) show; session chatter does not
  if (vm_stats(1).size() != kStatsPerVm) {
    std::fprintf(stderr, "deliver_bench: stats shape changed\n");
    return 1;
  }
  std::vector<bool> which;  // the phases to run, spread first
  if (o.ph != phases::aligned) which.push_back(true);
  if (o.ph != phases::spread) which.push_back(false);

  // Cost: configurations interleaved, the order rotated every round.
  std::vector<cost_cfg> cfgs;
  for (unsigned n : o.clients)
    if (n < 2)
      cfgs.push_back({n, true, false});
    else
      for (bool sp : which) cfgs.push_back({n, sp, true});
  const size_t nc = cfgs.size();
  std::vector<std::vector<cost_run>> runs(nc);
  if (o.cost)
    for (unsigned r = 0; r < o.rounds; ++r)
      for (size_t k = 0; k < nc; ++k) {
        const size_t c = (k + r) % nc;
        runs[c].push_back(measure_cost(cfgs[c].clients, o.vms, o.seconds, o.warmup, cfgs[c].spread));
        const auto& x = runs[c].back();
        if (!o.json)
          std::fprintf(stderr,
                       "  round %u/%u, %s: %.3f %% of a core, %.1f frames/s, %.0f io wakeups/s\n",
                       r + 1, o.rounds, cfgs[c].label().c_str(), x.cpu_pct, x.frames_per_s,
                       x.wakeups_per_s);
      }

  // Latency: scenarios interleaved in rounds, latencies pooled.
  std::vector<lat_scenario> lats;
  if (o.latency) {
    for (bool on_change : {true, false}) {
      const char* name = on_change ? "on-change host.marker, 20 ms" : "periodic 100 ms, every stat";
      lats.push_back({name, on_change, 1, true, {}, {}, {}, 0, 0, {}});
      for (bool sp : which)
        lats.push_back({name, on_change, kTargetClients, sp, {}, {}, {}, 0, 0, {}});
    }
    const unsigned lr = std::max(1u, std::min(o.rounds, o.changes / 100));
    for (unsigned r = 0; r < lr; ++r)
      for (size_t k = 0; k < lats.size(); ++k) {
        auto& sc = lats[(k + r) % lats.size()];
        const unsigned n = o.changes / lr + (r < o.changes % lr ? 1 : 0);
        measure_latency(sc, o.vms, n, 0x5eed + r * 16 + k);
        if (!o.json)
          std::fprintf(stderr, "  latency round %u/%u, %s, %u clients%s: p50 %.0f us\n", r + 1, lr,
                       sc.name.c_str(), sc.clients,
                       sc.clients > 1 ? (sc.spread ? " spread" : " aligned") : "",
                       sc.round_p50.back());
      }
    for (auto& sc : lats)
      for (auto* v : {&sc.us, &sc.hub_us, &sc.after_us}) std::sort(v->begin(), v->end());
  }

  // Per configuration: medians over rounds; increments within each round.
  std::vector<cost_row> rows;
  for (size_t c = 0; o.cost && c < nc; ++c) {
    cost_row row{};
    row.cfg = cfgs[c];
    std::vector<double> f, b, cpu, w, above, per;
    for (size_t r = 0; r < runs[c].size(); ++r) {
      const auto& x = runs[c][r];
      f.push_back(x.frames_per_s);
      b.push_back(x.bytes_per_s);
      cpu.push_back(x.cpu_pct);
      w.push_back(x.wakeups_per_s);
      row.replaced += x.replaced;
      const double d = x.cpu_pct - runs[0][r].cpu_pct;  // cfgs[0]: no client
      above.push_back(d);
      if (row.cfg.clients) per.push_back(d / row.cfg.clients);
    }
    row.fps = summarize(f);
    row.bps = summarize(b);
    row.cpu = summarize(cpu);
    row.wake = summarize(w);
    row.above = summarize(above);
    row.per_client = summarize(per);
    row.cpu_samples = cpu;
    row.above_samples = above;
    rows.push_back(row);
  }
  std::vector<const cost_row*> target;
  for (const auto& r : rows)
    if (r.cfg.clients == kTargetClients) target.push_back(&r);
  bool all_pass = !target.empty();
  for (const auto* t : target) all_pass = all_pass && t->pass();
  const char* verdict = target.empty() ? "n/a" : all_pass ? "PASS" : "MISS";
  const unsigned long long client_errors = g_client_errors.load();

  if (o.json) {
    std::printf("{\"bench\":\"deliver\",\"transport\":\"test (AF_UNIX socketpair)\",\"vms\":%u,"
                "\"stats_per_vm\":%zu,\"tick_ms\":%u,\"subscription\":{\"mode\":\"periodic\","
                "\"period_ms\":%u,\"ids\":\"all\",\"events\":\"vmnet.queue.tx\"},",
                o.vms, kStatsPerVm, kTickMs, kAgentPeriod);
    std::printf("\"cost\":{\"rounds\":%u,\"seconds\":%.3f,\"warmup\":%.3f,\"order\":\"rotated\","
                "\"io_cpu\":\"CLOCK_THREAD_CPUTIME_ID of the io thread\",\"configurations\":[",
                o.cost ? o.rounds : 0, o.seconds, o.warmup);
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::printf("%s{\"clients\":%u,\"phases\":%s,\"frames_per_s\":%s,\"bytes_per_s\":%s,"
                  "\"io_cpu_pct\":%s,\"io_wakeups_per_s\":%s,\"above_baseline_pct\":%s,"
                  "\"per_client_pct\":%s,\"stats_replaced\":%llu,\"io_cpu_pct_samples\":%s,"
                  "\"above_baseline_pct_samples\":%s}",
                  i ? "," : "", r.cfg.clients, r.cfg.phases_json(), json_summary(r.fps, 1).c_str(),
                  json_summary(r.bps, 0).c_str(), json_summary(r.cpu, 4).c_str(),
                  json_summary(r.wake, 1).c_str(),
                  r.cfg.clients ? json_summary(r.above, 4).c_str() : "null",
                  r.cfg.clients ? json_summary(r.per_client, 5).c_str() : "null",
                  static_cast<unsigned long long>(r.replaced), json_list(r.cpu_samples, 4).c_str(),
                  json_list(r.above_samples, 4).c_str());
    }
    std::printf("],\"target\":{\"clients\":%u,\"rate_hz\":10,\"max_above_baseline_pct\":%.1f,"
                "\"verdict\":\"%s\",\"rows\":[",
                kTargetClients, kTargetPct, verdict);
    for (size_t i = 0; i < target.size(); ++i)
      std::printf("%s{\"phases\":%s,\"above_baseline_pct\":%.4f,\"margin_pct\":%.4f,"
                  "\"verdict\":\"%s\"}",
                  i ? "," : "", target[i]->cfg.phases_json(), target[i]->above.med,
                  kTargetPct - target[i]->above.med, target[i]->pass() ? "PASS" : "MISS");
    std::printf("]}},\"latency\":{\"from\":\"set_marker (CLOCK_MONOTONIC, io thread)\","
                "\"to\":\"client recv of the frame carrying it (CLOCK_MONOTONIC)\",\"scenarios\":[");
    for (size_t i = 0; i < lats.size(); ++i) {
      const auto& s = lats[i];
      std::printf("%s{\"subscription\":\"%s\",\"clients\":%u,\"phases\":%s,\"changes\":%llu,"
                  "\"seen\":%zu,\"missed\":%llu,\"p50_us\":%.1f,\"p99_us\":%.1f,\"min_us\":%.1f,"
                  "\"max_us\":%.1f,\"in_hub_p50_us\":%.1f,\"in_hub_p99_us\":%.1f,"
                  "\"after_hub_p50_us\":%.1f,\"after_hub_p99_us\":%.1f,\"round_p50_us\":%s}",
                  i ? "," : "", s.name.c_str(), s.clients,
                  s.clients > 1 ? (s.spread ? "\"spread\"" : "\"aligned\"") : "null",
                  static_cast<unsigned long long>(s.changes), s.us.size(),
                  static_cast<unsigned long long>(s.missed), percentile(s.us, 50),
                  percentile(s.us, 99), s.us.empty() ? 0 : s.us.front(),
                  s.us.empty() ? 0 : s.us.back(), percentile(s.hub_us, 50), percentile(s.hub_us, 99),
                  percentile(s.after_us, 50), percentile(s.after_us, 99),
                  json_list(s.round_p50, 1).c_str());
    }
    std::printf("]},\"client_errors\":%llu}\n", client_errors);
    return client_errors ? 1 : 0;
  }

  std::printf("delivery hub, test transport (AF_UNIX socket pairs); %u VMs declared, the daemon's "
              "%u ms tick publishing %zu stats each\n",
              o.vms, kTickMs, kStatsPerVm);
  if (o.cost) {
    std::printf("\ncost: N clients, one per VM, each subscribed like the agent (periodic %u ms, "
                "every stat, events);\nphases: spread = subscribed one after the other over one "
                "period, aligned = all at once;\n%u rounds x %.1f s, configurations interleaved "
                "(order rotated); io thread CPU (CLOCK_THREAD_CPUTIME_ID);\nmedian (min-max); "
                "'above N=0' and 'per client' are taken within each round\n\n",
                kAgentPeriod, o.rounds, o.seconds);
    std::printf("%-11s %19s %24s %22s %24s %25s %14s\n", "clients", "frames/s", "bytes/s",
                "io CPU, % of a core", "above N=0, % of a core", "per client, % of a core",
                "io wakeups/s");
    for (const auto& r : rows) {
      char f[64], b[64], c[64], a[64], p[64];
      std::snprintf(f, sizeof f, "%.1f (%.1f-%.1f)", r.fps.med, r.fps.min, r.fps.max);
      std::snprintf(b, sizeof b, "%s (%s-%s)", si(r.bps.med).c_str(), si(r.bps.min).c_str(),
                    si(r.bps.max).c_str());
      std::snprintf(c, sizeof c, "%.3f (%.3f-%.3f)", r.cpu.med, r.cpu.min, r.cpu.max);
      if (r.cfg.clients) {
        std::snprintf(a, sizeof a, "%+.3f (%+.3f-%+.3f)", r.above.med, r.above.min, r.above.max);
        std::snprintf(p, sizeof p, "%.4f (%.4f-%.4f)", r.per_client.med, r.per_client.min,
                      r.per_client.max);
      } else {
        std::snprintf(a, sizeof a, "baseline");
        std::snprintf(p, sizeof p, "-");
      }
      std::printf("%-11s %19s %24s %22s %24s %25s %14.0f\n", r.cfg.label().c_str(), f, b, c, a, p,
                  r.wake.med);
    }
    uint64_t replaced = 0;
    for (const auto& r : rows) replaced += r.replaced;
    if (replaced)
      std::printf("note: %llu stats frames were replaced before being written (the readers lagged)\n",
                  static_cast<unsigned long long>(replaced));
    std::printf("\ntarget: %u clients x 10 Hz cost <= %.1f %% of a core above N=0 (median of the "
                "rounds)\n",
                kTargetClients, kTargetPct);
    for (const auto* t : target)
      std::printf("  %-11s %+.3f %% (min-max %+.3f-%+.3f) -> %s, margin %+.3f points\n",
                  t->cfg.label().c_str(), t->above.med, t->above.min, t->above.max,
                  t->pass() ? "PASS" : "MISS", kTargetPct - t->above.med);
    std::printf("  overall: %s%s\n", verdict,
                target.empty() ? " (needs 100 in --clients)"
                : target.size() > 1 ? " (PASS needs every phase arrangement within the target)"
                                    : "");
  }
  if (o.latency) {
    std::printf("\nlatency: set_marker() on the io thread -> the client's recv() of the frame "
                "carrying the new host.marker (CLOCK_MONOTONIC both);\none change at a time; with "
                "100 clients, the probe and 99 agent-like periodic clients (spread or aligned phases);\n"
                "in hub: set_marker() -> the frame made (its ts_ns); after: frame made -> recv() "
                "(write, wakeup, the client thread's scheduling)\n\n");
    std::printf("%-30s %-11s %7s %6s %9s %9s %9s %9s %17s %17s\n", "subscription", "clients",
                "changes", "missed", "p50 us", "p99 us", "min us", "max us", "in hub p50/p99",
                "after p50/p99");
    for (const auto& s : lats) {
      const std::string who =
          std::to_string(s.clients) + (s.clients > 1 ? (s.spread ? " spread" : " aligned") : "");
      char hub[48], after[48];
      std::snprintf(hub, sizeof hub, "%.1f / %.1f", percentile(s.hub_us, 50), percentile(s.hub_us, 99));
      std::snprintf(after, sizeof after, "%.1f / %.1f", percentile(s.after_us, 50),
                    percentile(s.after_us, 99));
      std::printf("%-30s %-11s %7llu %6llu %9.1f %9.1f %9.1f %9.1f %17s %17s\n", s.name.c_str(),
                  who.c_str(), static_cast<unsigned long long>(s.changes),
                  static_cast<unsigned long long>(s.missed), percentile(s.us, 50),
                  percentile(s.us, 99), s.us.empty() ? 0 : s.us.front(),
                  s.us.empty() ? 0 : s.us.back(), hub, after);
    }
  }
  if (client_errors) std::printf("\nclient errors: %llu (see stderr)\n", client_errors);
  return client_errors ? 1 : 0;
}
