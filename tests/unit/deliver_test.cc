// The delivery hub over socket pairs standing in for vsock and virtio-serial:
// the protocol's sessions, each VM's isolation, bounded buffers for slow
// readers, deadlines, rate limits and identity changes.  The hub runs on an
// io_context driven by the test thread; clients are plain non-blocking
// sockets decoded with the protocol's own reader.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "magnet/deliver/deliver.h"
#include "magnet/log.h"
#include "magnet/event.h"
#include "magnet/events.h"
#include "magnet/guest_schema.h"
#include "magnet/trace_file.h"

namespace magnet::host {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

struct client {
  int fd = -1;
  view::reader rd;
  std::vector<view::frame> got;
  bool eof = false;
  uint32_t seq = 0;

  ~client() {
    if (fd >= 0) ::close(fd);
  }
  void send(const view::message& m, uint8_t version = MAGNET_VIEW_VERSION) {
    std::vector<uint8_t> b;
    ASSERT_TRUE(view::encode(b, m, ++seq, monotonic_ns(), version));
    send_raw(b);
  }
  void send_raw(const std::vector<uint8_t>& b) {
    ASSERT_EQ(::send(fd, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
  }
  // Reads what is there (non-blocking) into got.
  void drain() {
    for (;;) {
      auto room = rd.prepare();
      ssize_t n = ::recv(fd, room.data(), room.size(), MSG_DONTWAIT);
      if (n == 0) eof = true;
      if (n <= 0) break;
      rd.commit(static_cast<size_t>(n));
      view::frame f;
      error e;
      for (auto st = rd.next(f, e); st == view::reader::state::frame; st = rd.next(f, e))
        got.push_back(std::move(f));
    }
  }
  template <class T>
  std::vector<T> all() const {
    std::vector<T> v;
    for (const auto& f : got)
      if (auto* m = std::get_if<T>(&f.m)) v.push_back(*m);
    return v;
  }
  std::vector<uint16_t> errors() const {
    std::vector<uint16_t> v;
    for (const auto& e : all<view::errmsg>()) v.push_back(e.code);
    return v;
  }
  // The code of the last error frame; 0 (no such code) when there was none.
  uint16_t last_error() const {
    auto v = errors();
    return v.empty() ? 0 : v.back();
  }
};

class DeliverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opt.vsock = deliver_options::vsock_mode::off;
    opt.serial = false;
  }
  void start() {
    if (getenv("MAGNET_TEST_VERBOSE")) set_log_verbosity(3);
    hub = std::make_unique<delivery_hub>(io, opt);
    ASSERT_TRUE(hub->start());
    hub->set_vms(vms);
  }
  std::unique_ptr<client> connect(uint32_t vm, transport kind = transport::test) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    auto c = std::make_unique<client>();
    c->fd = sv[0];
    hub->adopt(vm, sv[1], kind);
    return c;
  }
  // Runs the hub (and @each every 100 ms, like the daemon's tick) until
  // @done or @limit; clients are drained as it goes.
  bool run(std::chrono::milliseconds limit, std::vector<client*> cs,
           const std::function<bool()>& done = [] { return false; },
           const std::function<void()>& each = [] {}) {
    auto end = std::chrono::steady_clock::now() + limit;
    auto next = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < end) {
      if (std::chrono::steady_clock::now() >= next) {
        each();
        next += 100ms;
      }
      io.run_for(5ms);
      for (auto* c : cs) c->drain();
      if (done()) return true;
    }
    return done();
  }
  std::unique_ptr<client> hello(uint32_t vm, transport kind = transport::test) {
    auto c = connect(vm, kind);
    c->send(view::hello{1, 1, MAGNET_VROLE_AGENT, 0, "test"});
    EXPECT_TRUE(run(2s, {c.get()}, [&] { return !c->all<view::welcome>().empty(); }));
    return c;
  }
  // A connection as if accepted on the vsock port from @cid:@port.
  std::unique_ptr<client> vsock(uint32_t cid, uint32_t port) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    auto c = std::make_unique<client>();
    c->fd = sv[0];
    hub->accept_vsock(sv[1], {cid, port});
    return c;
  }
  std::unique_ptr<client> vsock_hello(uint32_t cid, uint32_t port) {
    auto c = vsock(cid, port);
    c->send(view::hello{1, 1, MAGNET_VROLE_AGENT, 0, "test"});
    EXPECT_TRUE(run(2s, {c.get()}, [&] { return !c->all<view::welcome>().empty() || c->eof; }));
    return c;
  }
  size_t refused(uint32_t vm, refusal r) const {
    auto c = hub->vsock_counts();
    return c.count(vm) ? c.at(vm).refused[static_cast<size_t>(r)] : 0;
  }
  static std::vector<view::stat_value> stats_of(double v) {
    return {{MAGNET_STAT_TAP_TX_BPS, MAGNET_VSTAT_VALID, 0, 1000000, 0, v},
            {MAGNET_STAT_VCPU_RUN, MAGNET_VSTAT_VALID, 0, 1000000, 0, v / 1e9}};
  }

  asio::io_context io;
  deliver_options opt;
  std::vector<vm_ident> vms = {{1, "g1", 3, getpid(), "", 0x1111}, {2, "g2", 4, getpid(), "", 0x2222}};
  std::unique_ptr<delivery_hub> hub;
};

TEST_F(DeliverTest, HelloNegotiatesAndPeriodicFramesCarryTheVmsOwnValues) {
  start();
  auto c = hello(1);
  auto w = c->all<view::welcome>();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].version, MAGNET_VIEW_VERSION);
  EXPECT_EQ(w[0].session_id, 0x1111u) << "the VM's session id";
  EXPECT_EQ(w[0].min_period_ms, static_cast<uint32_t>(MAGNET_VIEW_MIN_PERIOD_MS));
  c->send(view::subscribe{50, MAGNET_VMODE_PERIODIC, 0, {}, {}});
  double v = 1e6;
  run(1000ms, {c.get()}, [] { return false; }, [&] {
    hub->publish(1, monotonic_ns(), stats_of(v));
    hub->publish(2, monotonic_ns(), stats_of(7e9));
    v += 1e6;
  });
  auto st = c->all<view::stats>();
  // 50 ms over a second: about 20 frames (the first at once).
  EXPECT_GE(st.size(), 15u);
  EXPECT_LE(st.size(), 22u);
  double last = 0;
  for (const auto& s : st)
    for (const auto& x : s.values) {
      if (x.id == MAGNET_STAT_TAP_TX_BPS) {
        EXPECT_TRUE(x.valid());
        EXPECT_NE(x.value, 7e9) << "another VM's value";
        EXPECT_GE(x.value, last);
        last = x.value;
        EXPECT_LT(x.age_us, 200000u) << "values are at most a tick old plus a period";
      }
    }
  EXPECT_GT(last, 5e6);
  EXPECT_TRUE(c->errors().empty());
}

TEST_F(DeliverTest, EachVmReceivesOnlyItsOwnStatsAndEvents) {
  start();
  auto a = hello(1), b = hello(2);
  for (auto* c : {a.get(), b.get()})
    c->send(view::subscribe{100, MAGNET_VMODE_PERIODIC, MAGNET_VSUB_EVENTS, {}, {}});
  // Records of both VMs and of the host, interleaved.
  std::vector<uint8_t> recs;
  for (uint32_t i = 0; i < 30; ++i) {
    std::vector<uint8_t> r(sizeof(magnet_hdr) + sizeof(magnet_vmnet_queue));
    magnet_hdr h{};
    h.ts_ns = i;
    h.vm_id = i % 3;  // 0 host, 1, 2
    h.abstract_id = 1000 + h.vm_id;
    h.tgid = h.tid = 4242;
    h.cpu = 1;
    h.type = MAGNET_EV_VMNET_QUEUE_TX;
    h.len = static_cast<uint16_t>(r.size());
    std::memcpy(r.data(), &h, sizeof h);
    recs.insert(recs.end(), r.begin(), r.end());
  }
  run(800ms, {a.get(), b.get()}, [] { return false; }, [&] {
    hub->publish(1, monotonic_ns(), stats_of(1e6));
    hub->publish(2, monotonic_ns(), stats_of(2e6));
    hub->publish_events(recs);
  });
  for (auto [c, vm] : {std::pair{a.get(), 1u}, std::pair{b.get(), 2u}}) {
    SCOPED_TRACE(vm);
    auto st = c->all<view::stats>();
    ASSERT_FALSE(st.empty());
    int tx_values = 0;
    for (const auto& s : st)
      for (const auto& x : s.values)
        if (x.id == MAGNET_STAT_TAP_TX_BPS) {
          ++tx_values;
          EXPECT_EQ(x.value, vm * 1e6);
        }
    EXPECT_GT(tx_values, 0) << "the VM's own tap rate in its stats frames";
    auto ev = c->all<view::events>();
    ASSERT_FALSE(ev.empty());
    uint64_t n = 0;
    for (const auto& e : ev) {
      EXPECT_EQ(e.lost, 0u);
      for (size_t off = 0; off < e.records.size();) {
        magnet_hdr h;
        std::memcpy(&h, e.records.data() + off, sizeof h);
        EXPECT_EQ(h.abstract_id, 1000 + vm) << "a record of another VM or of the host";
        EXPECT_EQ(h.vm_id, 0u) << "nothing in a frame names a VM";
        EXPECT_EQ(h.tgid, 0u) << "host process ids are not sent";
        EXPECT_EQ(h.tid, 0u);
        EXPECT_EQ(h.cpu, 0u);
        off += h.len;
        ++n;
      }
    }
    EXPECT_EQ(n % 10, 0u) << "whole publications: 10 records of this VM each";
    EXPECT_GE(n, 50u);
  }
}

// A reader that never reads: its connection holds at most the frame being
// written and the newest one, never a queue; it is closed after the write
// deadline; and meanwhile another VM's frames keep their period.
TEST_F(DeliverTest, SlowReaderGetsTheNewestFrameNotAQueueAndDelaysNoOne) {
  opt.write_deadline = 1500ms;
  start();
  auto slow = hello(1), fast = hello(2);
  // Small socket buffers so that the slow side fills up quickly.
  int small = 4096;
  ASSERT_EQ(setsockopt(slow->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  slow->send(view::subscribe{20, MAGNET_VMODE_PERIODIC, 0, {}, {}});
  fast->send(view::subscribe{100, MAGNET_VMODE_PERIODIC, 0, {}, {}});
  run(50ms, {fast.get()});
  // Many values: large frames.
  std::vector<view::stat_value> big;
  for (uint32_t i = 0; i < 600; ++i)
    big.push_back({MAGNET_STAT_VCPU_RUN, MAGNET_VSTAT_VALID, i, 1000000, 0, 0.5});
  std::vector<std::chrono::steady_clock::time_point> arrivals;
  run(3000ms, {fast.get()}, [&] {
    while (arrivals.size() < fast->all<view::stats>().size())
      arrivals.push_back(std::chrono::steady_clock::now());
    return false;
  }, [&] {
    hub->publish(1, monotonic_ns(), big);
    hub->publish(2, monotonic_ns(), stats_of(2e6));
  });
  // Closed for reading nothing, with what it missed counted as replaced.
  EXPECT_TRUE(hub->sessions().size() == 1u) << "the slow reader's connection is closed";
  for (const auto& s : hub->sessions()) EXPECT_EQ(s.subject, 2u);
  ASSERT_GE(arrivals.size(), 20u);
  for (size_t i = 1; i < arrivals.size(); ++i)
    EXPECT_LT(arrivals[i] - arrivals[i - 1], 250ms) << "gap before frame " << i;
}

TEST_F(DeliverTest, SlowReaderStateIsBounded) {
  opt.write_deadline = 60s;
  start();
  auto slow = hello(1);
  int small = 4096;
  ASSERT_EQ(setsockopt(slow->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  slow->send(view::subscribe{20, MAGNET_VMODE_PERIODIC, MAGNET_VSUB_EVENTS, {}, {}});
  std::vector<view::stat_value> big;
  for (uint32_t i = 0; i < 600; ++i)
    big.push_back({MAGNET_STAT_VCPU_RUN, MAGNET_VSTAT_VALID, i, 1000000, 0, 0.5});
  std::vector<uint8_t> rec(sizeof(magnet_hdr) + sizeof(magnet_vmnet_queue));
  magnet_hdr h{};
  h.vm_id = 1;
  h.type = MAGNET_EV_VMNET_QUEUE_TX;
  h.len = static_cast<uint16_t>(rec.size());
  std::memcpy(rec.data(), &h, sizeof h);
  std::vector<uint8_t> burst;
  for (int i = 0; i < 500; ++i) burst.insert(burst.end(), rec.begin(), rec.end());
  size_t most = 0;
  run(2000ms, {}, [&] {
    for (const auto& x : hub->sessions()) most = std::max(most, x.queued);
    return false;
  }, [&] {
    hub->publish(1, monotonic_ns(), big);
    hub->publish_events(burst);
  });
  auto s = hub->sessions();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_GT(s[0].stats_replaced, 20u) << "newer frames replaced unsent ones";
  EXPECT_GT(s[0].events_lost, 0u) << "events beyond the bound are counted as lost";
  // At most: the frame being written, one stats frame and the event bound.
  EXPECT_LE(most, 2 * view::kMaxFrame + (256u << 10));
  EXPECT_GT(most, 0u);
}

TEST_F(DeliverTest, MalformedFrameIsAnsweredAndClosed) {
  start();
  auto c = hello(1);
  c->send_raw({'n', 'o', 't', ' ', 'a', ' ', 'f', 'r', 'a', 'm', 'e', '!', 1, 2, 3, 4, 5, 6, 7, 8,
               9, 10, 11, 12, 13});
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return c->eof; }));
  ASSERT_FALSE(c->errors().empty());
  EXPECT_EQ(c->last_error(), MAGNET_VERR_BAD_FRAME);
  EXPECT_TRUE(hub->sessions().empty());
}

TEST_F(DeliverTest, OversizeAndTruncatedFramesAreRefused) {
  start();
  auto c = hello(1);
  std::vector<uint8_t> b;
  ASSERT_TRUE(view::encode(b, view::ping{1, 2}, 2, 0));
  uint32_t big = MAGNET_VIEW_MAX_BODY + 1;
  std::memcpy(&b[8], &big, 4);
  c->send_raw(b);
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return c->eof; }));
  EXPECT_EQ(c->last_error(), MAGNET_VERR_BAD_FRAME);
  // Truncated: half a frame, then nothing: the frame deadline closes it.
  opt.frame_deadline = 300ms;
  auto h = std::make_unique<delivery_hub>(io, opt);
  hub.swap(h);
  ASSERT_TRUE(hub->start());
  hub->set_vms(vms);
  auto t = hello(1);
  b.clear();
  ASSERT_TRUE(view::encode(b, view::ping{1, 2}, 2, 0));
  b.resize(30);
  t->send_raw(b);
  EXPECT_TRUE(run(2s, {t.get()}, [&] { return t->eof; }));
  EXPECT_EQ(t->last_error(), MAGNET_VERR_TIMEOUT);
}

TEST_F(DeliverTest, ByteAtATimeSenderIsCutOffByTheFrameDeadline) {
  opt.frame_deadline = 500ms;
  start();
  auto c = hello(1);
  std::vector<uint8_t> b;
  ASSERT_TRUE(view::encode(b, view::subscribe{100, MAGNET_VMODE_PERIODIC, 0, {1, 2, 3}, {}}, 2, 0));
  size_t i = 0;
  run(3s, {c.get()}, [&] { return c->eof; }, [&] {
    if (i < b.size() && !c->eof) {
      ::send(c->fd, &b[i++], 1, MSG_NOSIGNAL);
    }
  });
  EXPECT_TRUE(c->eof);
  EXPECT_LT(i, b.size()) << "cut off before the frame completed";
  EXPECT_EQ(c->last_error(), MAGNET_VERR_TIMEOUT);
}

TEST_F(DeliverTest, NoHelloInTimeIsClosed) {
  opt.hello_deadline = 300ms;
  start();
  auto c = connect(1);
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return c->eof; }));
  EXPECT_EQ(c->last_error(), MAGNET_VERR_TIMEOUT);
}

TEST_F(DeliverTest, VersionNegotiation) {
  start();
  auto c = connect(1);
  c->send(view::hello{2, 9, MAGNET_VROLE_AGENT, 0, "future"});
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return c->eof; }));
  EXPECT_EQ(c->last_error(), MAGNET_VERR_VERSION);
  auto d = connect(1);
  d->send(view::hello{1, 9, MAGNET_VROLE_AGENT, 0, "newer"}, 9);
  EXPECT_TRUE(run(2s, {d.get()}, [&] { return !d->all<view::welcome>().empty(); }));
  EXPECT_EQ(d->all<view::welcome>()[0].version, MAGNET_VIEW_VERSION);
  // After the agreement, frames of another version are refused.
  d->send(view::subscribe{100, MAGNET_VMODE_PERIODIC, 0, {}, {}}, 9);
  EXPECT_TRUE(run(2s, {d.get()}, [&] { return !d->errors().empty(); }));
  EXPECT_EQ(d->last_error(), MAGNET_VERR_BAD_FRAME);
}

TEST_F(DeliverTest, OutOfOrderAndServerMessagesFromAClientAreRefused) {
  start();
  auto c = connect(1);
  c->send(view::subscribe{100, MAGNET_VMODE_PERIODIC, 0, {}, {}});
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return !c->errors().empty(); }));
  EXPECT_EQ(c->last_error(), MAGNET_VERR_NOT_NOW);
  c->send(view::hello{});
  c->send(view::stats{0, {{MAGNET_STAT_TAP_TX_BPS, 1, 0, 0, 0, 1.0}}});
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return c->errors().size() >= 2; }));
  EXPECT_EQ(c->last_error(), MAGNET_VERR_BAD_FRAME);
  std::vector<uint8_t> u;
  ASSERT_TRUE(view::encode(u, view::ping{}, 9, 0));
  u[5] = 0x1e;  // a client message type of a later version
  c->send_raw(u);
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return c->errors().size() >= 3; }));
  EXPECT_EQ(c->last_error(), MAGNET_VERR_UNKNOWN_TYPE);
  EXPECT_FALSE(c->eof) << "errors of this kind do not end the session";
}

TEST_F(DeliverTest, SubscriptionsPerSecondAreCappedPerVm) {
  opt.max_subscribes_per_s = 3;
  start();
  auto a = hello(1), b = hello(1);
  for (int i = 0; i < 3; ++i) a->send(view::subscribe{100, MAGNET_VMODE_PULL, 0, {}, {}});
  for (int i = 0; i < 3; ++i) b->send(view::subscribe{100, MAGNET_VMODE_PULL, 0, {}, {}});
  run(300ms, {a.get(), b.get()});
  size_t rate = 0;
  for (auto* c : {a.get(), b.get()})
    for (auto e : c->errors()) rate += e == MAGNET_VERR_RATE;
  EXPECT_EQ(rate, 3u) << "3 of the 6 subscriptions of this VM within a second are refused";
}

TEST_F(DeliverTest, MessageFloodIsRefused) {
  opt.max_msgs_per_s = 20;
  start();
  auto c = hello(1);
  for (int i = 0; i < 200; ++i) c->send(view::ping{static_cast<uint64_t>(i), 0});
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return c->eof; }));
  EXPECT_EQ(c->last_error(), MAGNET_VERR_RATE);
  EXPECT_LT(c->all<view::pong>().size(), 60u);
}

TEST_F(DeliverTest, OnChangeAndPullModes) {
  start();
  auto c = hello(1);
  c->send(view::subscribe{20, MAGNET_VMODE_ON_CHANGE, 0, {MAGNET_STAT_TAP_TX_BPS, MAGNET_STAT_HOST_MARKER}, {}});
  run(600ms, {c.get()}, [] { return false; }, [&] { hub->publish(1, monotonic_ns(), stats_of(5)); });
  EXPECT_EQ(c->all<view::stats>().size(), 1u) << "unchanged values are not sent again";
  hub->set_marker(1, 42, monotonic_ns());
  EXPECT_TRUE(run(1s, {c.get()}, [&] { return c->all<view::stats>().size() == 2; }));
  bool marker = false;
  const auto frames = c->all<view::stats>();
  for (const auto& x : frames.back().values) {
    EXPECT_TRUE(x.id == MAGNET_STAT_TAP_TX_BPS || x.id == MAGNET_STAT_HOST_MARKER) << x.id;
    marker |= x.id == MAGNET_STAT_HOST_MARKER && x.value == 42;
  }
  EXPECT_TRUE(marker);
  auto p = hello(1);
  p->send(view::subscribe{200, MAGNET_VMODE_PULL, 0, {}, {}});
  run(500ms, {p.get()}, [] { return false; }, [&] { hub->publish(1, monotonic_ns(), stats_of(6)); });
  EXPECT_TRUE(p->all<view::stats>().empty()) << "pull mode: nothing unasked";
  p->send(view::pull{});
  EXPECT_TRUE(run(1s, {p.get()}, [&] { return p->all<view::stats>().size() == 1; }));
  p->send(view::pull{});  // within the period
  EXPECT_TRUE(run(1s, {p.get()}, [&] { return !p->errors().empty(); }));
  EXPECT_EQ(p->last_error(), MAGNET_VERR_RATE);
}

TEST_F(DeliverTest, ConnectionsCloseWhenTheirVmStopsOrChangesIdentity) {
  start();
  auto a = hello(1), b = hello(2);
  run(100ms, {a.get(), b.get()});
  auto next = vms;
  next[1].session_id = 0x3333;  // g2 restarted: a new process
  next.erase(next.begin());     // g1 stopped
  hub->set_vms(next);
  EXPECT_TRUE(run(1s, {a.get(), b.get()}, [&] { return a->eof && b->eof; }));
  auto c = hello(2);
  EXPECT_EQ(c->all<view::welcome>()[0].session_id, 0x3333u) << "a new session id for a new identity";
}

// virtio-serial outlives its users: a restarted agent finds stale bytes,
// resynchronises, and the channel is never closed for bad bytes.
TEST_F(DeliverTest, SerialChannelResynchronisesInsteadOfClosing) {
  start();
  auto c = hello(1, transport::serial);
  c->send(view::subscribe{50, MAGNET_VMODE_PERIODIC, 0, {}, {}});
  run(200ms, {c.get()}, [] { return false; }, [&] { hub->publish(1, monotonic_ns(), stats_of(1)); });
  // The old agent died mid-frame; the new one sends garbage-then-resync.
  std::vector<uint8_t> half;
  ASSERT_TRUE(view::encode(half, view::subscribe{100, 1, 0, {1, 2, 3, 4}, {}}, 9, 0));
  half.resize(20);
  c->send_raw(half);
  c->send_raw({0xde, 0xad, 0xbe, 0xef});
  c->got.clear();
  // As the agent does: resync until answered (the first ones may complete
  // the dead agent's frame), then hello.
  auto answered = [&] {
    for (const auto& r : c->all<view::resync>())
      if (r.reply && r.token == 77) return true;
    return false;
  };
  EXPECT_TRUE(run(3s, {c.get()}, answered, [&] { c->send(view::resync{77, false}); }));
  c->send(view::hello{});
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return !c->all<view::welcome>().empty(); }))
      << "a new session after the resync";
  EXPECT_FALSE(c->eof);
}

// ------------------------------------------------- what a guest may see ---

// Records of every catalogue type for one VM: header and payload all
// @fill, ts_ns = vm << 32 | seq (the test's mark of whose record it is).
std::vector<uint8_t> every_type(uint32_t vm, uint8_t fill, uint32_t& seq) {
  std::vector<uint8_t> recs;
  for (const auto& e : all_events()) {
    std::vector<uint8_t> r(sizeof(magnet_hdr) + payload_size(e.payload_kind) + 16, fill);
    magnet_hdr h;
    std::memcpy(&h, r.data(), sizeof h);
    h.ts_ns = uint64_t{vm} << 32 | ++seq;
    h.vm_id = vm;
    h.type = e.type;
    h.len = static_cast<uint16_t>(r.size());
    std::memcpy(r.data(), &h, sizeof h);
    recs.insert(recs.end(), r.begin(), r.end());
  }
  return recs;
}

template <class T>
void set_field(std::vector<uint8_t>& recs, uint16_t type, size_t off, T v) {
  for (size_t at = 0; at < recs.size();) {
    magnet_hdr h;
    std::memcpy(&h, recs.data() + at, sizeof h);
    if (h.type == type) std::memcpy(recs.data() + at + sizeof h + off, &v, sizeof v);
    at += h.len;
  }
}

// The records of @recs whose type is in @types.
std::vector<uint8_t> only(const std::vector<uint8_t>& recs, const std::set<uint16_t>& types) {
  std::vector<uint8_t> out;
  for (size_t at = 0; at < recs.size();) {
    magnet_hdr h;
    std::memcpy(&h, recs.data() + at, sizeof h);
    if (types.count(h.type))
      out.insert(out.end(), recs.begin() + static_cast<long>(at), recs.begin() + static_cast<long>(at + h.len));
    at += h.len;
  }
  return out;
}

// Calls @fn(header, record bytes) for each record of the events frames @c got.
template <class F>
void each_received(const client& c, F&& fn) {
  for (const auto& ev : c.all<view::events>())
    for (size_t off = 0; off + sizeof(magnet_hdr) <= ev.records.size();) {
      magnet_hdr h;
      std::memcpy(&h, ev.records.data() + off, sizeof h);
      ASSERT_GE(h.len, sizeof h);
      fn(h, std::vector<uint8_t>(ev.records.begin() + static_cast<long>(off),
                                 ev.records.begin() + static_cast<long>(off + h.len)));
      off += h.len;
    }
}

// A guest subscribed to every type gets only the types a guest may see,
// cleaned per the schema, and nothing of another VM or of the host:
// records of every type for both VMs and the host go through the hub.
TEST_F(DeliverTest, GuestGetsOnlyGuestSafeRecordsOfItsOwnVmCleaned) {
  constexpr uint32_t kVcpu = 5001, kOtherVmVcpu = 6001, kHostTask = 977;
  vms[0].vcpu_tids = {kVcpu, 5002};
  vms[1].vcpu_tids = {kOtherVmVcpu};
  start();
  auto c = hello(1);
  c->send(view::subscribe{100, MAGNET_VMODE_PULL, MAGNET_VSUB_EVENTS, {}, {}});
  uint32_t seq = 0;
  std::vector<uint8_t> mine, all;
  auto with_tids = [](std::vector<uint8_t> r, uint32_t prev, uint32_t next, uint32_t woken) {
    set_field(r, MAGNET_EV_SCHED_SWITCH, offsetof(magnet_sched_switch, prev_tid), prev);
    set_field(r, MAGNET_EV_SCHED_SWITCH, offsetof(magnet_sched_switch, next_tid), next);
    set_field(r, MAGNET_EV_SCHED_WAKEUP, offsetof(magnet_sched_wakeup, tid), woken);
    return r;
  };
  // Its own vCPU switched out for a host task, and woken.
  mine = with_tids(every_type(1, 0xA5, seq), kVcpu, kHostTask, kVcpu);
  // Tagged with its VM, but of no vCPU of it: another VM's vCPU and a host task.
  const uint32_t impostors_from = seq + 1;
  auto impostor = only(with_tids(every_type(1, 0xA5, seq), kOtherVmVcpu, kHostTask, kOtherVmVcpu),
                       {MAGNET_EV_SCHED_SWITCH, MAGNET_EV_SCHED_WAKEUP});
  const uint32_t impostors_to = seq;
  all = mine;
  all.insert(all.end(), impostor.begin(), impostor.end());
  for (auto [vm, fill] : {std::pair{2u, uint8_t{0x5A}}, std::pair{0u, uint8_t{0x3C}}}) {
    auto r = with_tids(every_type(vm, fill, seq), kOtherVmVcpu, kHostTask, kOtherVmVcpu);
    all.insert(all.end(), r.begin(), r.end());
  }
  std::set<uint16_t> types;
  run(600ms, {c.get()}, [] { return false; }, [&] { hub->publish_events(all); });
  // What the guest should get of its own records, by the schema (its key
  // is the session's, so abstract ids are checked apart).
  std::map<uint16_t, std::vector<uint8_t>> expect;
  const view::guest_context ctx{&vms[0].vcpu_tids, {}};
  for (size_t at = 0; at < mine.size();) {
    magnet_hdr h;
    std::memcpy(&h, mine.data() + at, sizeof h);
    std::vector<uint8_t> out;
    if (view::to_guest(mine.data() + at, h.len, ctx, out)) expect[h.type] = out;
    at += h.len;
  }
  size_t n = 0;
  each_received(*c, [&](const magnet_hdr& h, const std::vector<uint8_t>& r) {
    ++n;
    SCOPED_TRACE(event_name(h.type));
    EXPECT_TRUE(view::guest_safe_type(h.type)) << "a type a guest may not see";
    EXPECT_EQ(h.ts_ns >> 32, 1u) << "a record of another VM or of the host";
    const uint32_t s = static_cast<uint32_t>(h.ts_ns);
    EXPECT_FALSE(s >= impostors_from && s <= impostors_to) << "sched.* of no vCPU of this VM";
    EXPECT_EQ(h.vm_id, 0u);
    EXPECT_EQ(h.tgid, 0u);
    EXPECT_EQ(h.tid, 0u);
    EXPECT_EQ(h.cpu, 0u);
    types.insert(h.type);
    auto it = expect.find(h.type);
    ASSERT_NE(it, expect.end());
    ASSERT_EQ(r.size(), it->second.size());
    const size_t id_at = offsetof(magnet_hdr, abstract_id);
    for (size_t i = 0; i < r.size(); ++i) {
      if (i < id_at || i >= id_at + 8) {
        EXPECT_EQ(r[i], it->second[i]) << "byte " << i;
      }
    }
    switch (view::guest_row_of(h.type)->id) {
      case view::guest_id::zero: EXPECT_EQ(h.abstract_id, 0u); break;
      case view::guest_id::flow: EXPECT_EQ(h.abstract_id, 0xA5A5A5A5A5A5A5A5u); break;
      case view::guest_id::rekey:
        EXPECT_NE(h.abstract_id, 0xA5A5A5A5A5A5A5A5u);
        EXPECT_NE(h.abstract_id, 0u);
        break;
    }
  });
  EXPECT_GE(n, 3 * expect.size()) << "a few publications";
  std::set<uint16_t> safe;
  for (const auto& e : all_events())
    if (view::guest_safe_type(e.type)) safe.insert(e.type);
  EXPECT_EQ(types, safe) << "every type a guest may see, and only those";
}

// The stats a guest receives are those the guest schema lets it see: one
// the host published without a row there (an id of no stat, an id of the
// agent's own) is not sent, whatever the subscription names.
TEST_F(DeliverTest, GuestGetsOnlyTheStatsTheSchemaDeclaresSafe) {
  start();
  auto every = hello(1), named = hello(1);
  every->send(view::subscribe{50, MAGNET_VMODE_PERIODIC, 0, {}, {}});
  named->send(view::subscribe{50, MAGNET_VMODE_PERIODIC, 0,
                              {MAGNET_STAT_POWER_WATTS, MAGNET_STAT_GUEST_SOCK_TX_BPS, 0x04ff}, {}});
  const std::vector<view::stat_value> published = {
      {MAGNET_STAT_TAP_TX_BPS, MAGNET_VSTAT_VALID, 0, 1000000, 0, 1e6},
      {MAGNET_STAT_POWER_WATTS, MAGNET_VSTAT_VALID, 0, 1000000, 0, 12.5},
      {MAGNET_STAT_ENERGY_JOULES, MAGNET_VSTAT_VALID, 0, 0, 0, 250},
      {MAGNET_STAT_GUEST_SOCK_TX_BPS, MAGNET_VSTAT_VALID, 0, 1000000, 0, 3e6},
      {0x04ff, MAGNET_VSTAT_VALID, 0, 0, 0, 42}};
  run(400ms, {every.get(), named.get()}, [] { return false; },
      [&] { hub->publish(1, monotonic_ns(), published); });
  auto ids = [](const client& c) {
    std::set<uint16_t> s;
    for (const auto& st : c.all<view::stats>())
      for (const auto& v : st.values) s.insert(v.id);
    return s;
  };
  ASSERT_FALSE(every->all<view::stats>().empty());
  EXPECT_EQ(ids(*every), (std::set<uint16_t>{MAGNET_STAT_TAP_TX_BPS, MAGNET_STAT_POWER_WATTS,
                                             MAGNET_STAT_ENERGY_JOULES, MAGNET_STAT_LOST_DELIVERY}));
  EXPECT_EQ(ids(*named), std::set<uint16_t>{MAGNET_STAT_POWER_WATTS});
  EXPECT_TRUE(every->errors().empty());
  EXPECT_TRUE(named->errors().empty());
}

// Re-keyed ids are stable within a session and differ between sessions.
TEST_F(DeliverTest, GuestSessionsReKeyIdsEachWithTheirOwnKey) {
  start();
  auto a = hello(1), b = hello(1);
  for (auto* c : {a.get(), b.get()})
    c->send(view::subscribe{100, MAGNET_VMODE_PULL, MAGNET_VSUB_EVENTS, {}, {MAGNET_EV_BLK_ISSUE}});
  uint32_t seq = 0;
  auto recs = every_type(1, 0xA5, seq);
  run(400ms, {a.get(), b.get()}, [] { return false; }, [&] { hub->publish_events(recs); });
  std::set<uint64_t> ids[2];
  for (int i = 0; i < 2; ++i)
    each_received(i ? *b : *a, [&](const magnet_hdr& h, const std::vector<uint8_t>&) {
      EXPECT_EQ(h.type, MAGNET_EV_BLK_ISSUE);
      ids[i].insert(h.abstract_id);
    });
  ASSERT_EQ(ids[0].size(), 1u) << "one id, the same in every record of a session";
  ASSERT_EQ(ids[1].size(), 1u);
  EXPECT_NE(*ids[0].begin(), *ids[1].begin()) << "each session its own key";
  EXPECT_NE(*ids[0].begin(), 0xA5A5A5A5A5A5A5A5u);
}

// A subscription naming a type a guest may not see is refused, naming it;
// the session and the subscription in force go on; a safe one works.
TEST_F(DeliverTest, GuestSubscribeNamingAnUnsafeTypeIsRefusedAndTheSessionGoesOn) {
  opt.max_subscribes_per_s = 20;
  start();
  auto c = hello(1);
  uint32_t seq = 0;
  auto recs = every_type(1, 0xA5, seq);
  auto received = [&] {
    std::set<uint16_t> t;
    each_received(*c, [&](const magnet_hdr& h, const std::vector<uint8_t>&) { t.insert(h.type); });
    return t;
  };
  auto publish = [&] { hub->publish_events(recs); };
  c->send(view::subscribe{100, MAGNET_VMODE_PULL, MAGNET_VSUB_EVENTS, {}, {MAGNET_EV_NET_DEV_XMIT}});
  run(300ms, {c.get()}, [] { return false; }, publish);
  EXPECT_EQ(received(), std::set<uint16_t>{MAGNET_EV_NET_DEV_XMIT});
  EXPECT_TRUE(c->errors().empty());

  c->send(view::subscribe{100, MAGNET_VMODE_PULL, MAGNET_VSUB_EVENTS, {},
                          {MAGNET_EV_NET_DEV_XMIT, MAGNET_EV_PROC_FORK}});
  EXPECT_TRUE(run(1s, {c.get()}, [&] { return !c->errors().empty(); }));
  ASSERT_EQ(c->all<view::errmsg>().size(), 1u);
  EXPECT_EQ(c->all<view::errmsg>()[0].code, MAGNET_VERR_BAD_SUBSCRIBE);
  EXPECT_EQ(c->all<view::errmsg>()[0].text, "event type proc.fork is not guest-safe");
  c->got.clear();
  run(300ms, {c.get()}, [] { return false; }, publish);
  EXPECT_EQ(received(), std::set<uint16_t>{MAGNET_EV_NET_DEV_XMIT})
      << "the subscription in force stays";

  c->send(view::subscribe{100, MAGNET_VMODE_PULL, MAGNET_VSUB_EVENTS, {},
                          {MAGNET_EV_PROC_FORK, MAGNET_EV_KVM_EXIT, MAGNET_EV_NET_L4_SEND}});
  EXPECT_TRUE(run(1s, {c.get()}, [&] { return !c->errors().empty(); }));
  EXPECT_EQ(c->all<view::errmsg>().at(0).text, "proc.fork, net.l4.send are not guest-safe");
  c->got.clear();

  c->send(view::subscribe{100, MAGNET_VMODE_PULL, MAGNET_VSUB_EVENTS, {},
                          {MAGNET_EV_KVM_EXIT, MAGNET_EV_VMNET_QUEUE_TX}});
  run(100ms, {c.get()});
  c->got.clear();
  run(300ms, {c.get()}, [] { return false; }, publish);
  EXPECT_EQ(received(), (std::set<uint16_t>{MAGNET_EV_KVM_EXIT, MAGNET_EV_VMNET_QUEUE_TX}));
  EXPECT_TRUE(c->errors().empty());
  EXPECT_FALSE(c->eof);

  // The subscription's other values are checked as before: a period below
  // the minimum is a malformed frame.
  c->send(view::subscribe{5, MAGNET_VMODE_PULL, MAGNET_VSUB_EVENTS, {}, {}});
  EXPECT_TRUE(run(1s, {c.get()}, [&] { return !c->errors().empty(); }));
  EXPECT_EQ(c->last_error(), MAGNET_VERR_BAD_FRAME);
}

// ------------------------------------------------------- vsock admission ---

// Only the guest's root can bind a port below 1024: a connection from any
// other port is refused (with an error saying why), unless --vsock-any-port.
TEST_F(DeliverTest, VsockPeerFromAnUnprivilegedPortIsRefused) {
  start();
  testing::internal::CaptureStderr();
  std::vector<std::unique_ptr<client>> us;
  for (uint32_t i = 0; i < 20; ++i) us.push_back(vsock(3, 40000 + i));
  auto& u = us[0];
  EXPECT_TRUE(run(2s, {u.get()}, [&] { return u->eof; }));
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_EQ(u->errors(), std::vector<uint16_t>{MAGNET_VERR_REFUSED});
  EXPECT_NE(u->all<view::errmsg>()[0].text.find("source port 40000 is not below 1024"), std::string::npos)
      << u->all<view::errmsg>()[0].text;
  EXPECT_TRUE(hub->sessions().empty());
  EXPECT_EQ(refused(1, refusal::port), 20u);
  // Logged with a stable id and the VM, at most five lines per ten seconds.
  size_t lines = 0;
  for (size_t at = 0; (at = log.find("[deliver.refused.port] vm g1 (id 1): vsock connection from cid 3 "
                                     "refused: source port 4000", at)) != std::string::npos;
       ++at)
    ++lines;
  EXPECT_EQ(lines, 5u) << log;
  auto r = vsock_hello(3, 1023);
  EXPECT_FALSE(r->eof);
  auto s = hub->sessions();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].subject, 1u);
  EXPECT_EQ(s[0].kind_name, "vsock");
  EXPECT_EQ(s[0].peer, 3u);
  EXPECT_EQ(s[0].peer_port, 1023u);
  EXPECT_EQ(hub->vsock_counts().at(1).accepted, 1u);
}

TEST_F(DeliverTest, VsockAnyPortAcceptsUnprivilegedPorts) {
  opt.vsock_any_port = true;
  start();
  auto u = vsock_hello(3, 40000);
  EXPECT_FALSE(u->eof);
  EXPECT_TRUE(u->errors().empty());
  ASSERT_EQ(hub->sessions().size(), 1u);
  EXPECT_EQ(hub->sessions()[0].peer_port, 40000u);
}

// A vsock session holds one of its VM's few slots: without a subscription
// within the deadline it is closed.  A virtio-serial channel is the VM's
// only one and outlives its users: no deadline there.
TEST_F(DeliverTest, VsockSessionThatDoesNotSubscribeInTimeIsClosed) {
  opt.subscribe_deadline = 400ms;
  start();
  auto idle = vsock_hello(3, 1023);
  auto sub = vsock_hello(3, 1022);
  sub->send(view::subscribe{100, MAGNET_VMODE_PERIODIC, 0, {}, {}});
  auto serial = hello(1, transport::serial);
  EXPECT_TRUE(run(2s, {idle.get(), sub.get(), serial.get()}, [&] { return idle->eof; }));
  EXPECT_EQ(idle->last_error(), MAGNET_VERR_TIMEOUT);
  EXPECT_NE(idle->all<view::errmsg>().at(0).text.find("no subscribe within 400 ms"), std::string::npos);
  run(600ms, {idle.get(), sub.get(), serial.get()});
  EXPECT_FALSE(sub->eof) << "it subscribed in time";
  EXPECT_FALSE(serial->eof) << "virtio-serial has no subscribe deadline";
  EXPECT_EQ(hub->sessions().size(), 2u);
}

// Four connections that never subscribe (a guest process squatting the
// VM's slots) do not keep the agent out: it replaces the oldest of them.
// When all four have subscribed, a fifth is refused.
TEST_F(DeliverTest, VsockCapReplacesAnUnsubscribedConnectionSoTheAgentGetsIn) {
  start();
  std::vector<std::unique_ptr<client>> squat;
  for (uint32_t i = 0; i < 4; ++i) {
    squat.push_back(vsock_hello(3, 1000 + i));
    run(10ms, {});  // distinct opening times
  }
  auto agent = vsock(3, 1023);
  agent->send(view::hello{1, 1, MAGNET_VROLE_AGENT, 0, "agent"});
  agent->send(view::subscribe{100, MAGNET_VMODE_PERIODIC, 0, {}, {}});
  std::vector<client*> all = {agent.get()};
  for (auto& c : squat) all.push_back(c.get());
  EXPECT_TRUE(run(2s, all, [&] { return !agent->all<view::stats>().empty() && squat[0]->eof; }, [&] {
    hub->publish(1, monotonic_ns(), stats_of(1e6));
  }));
  EXPECT_FALSE(agent->eof);
  EXPECT_TRUE(agent->errors().empty());
  ASSERT_TRUE(squat[0]->eof) << "the oldest unsubscribed connection made room";
  EXPECT_EQ(squat[0]->last_error(), MAGNET_VERR_REFUSED);
  EXPECT_NE(squat[0]->all<view::errmsg>().at(0).text.find("replaced by a newer connection"), std::string::npos);
  for (size_t i = 1; i < squat.size(); ++i) {
    EXPECT_FALSE(squat[i]->eof) << i;
    squat[i]->send(view::subscribe{100, MAGNET_VMODE_PULL, 0, {}, {}});
  }
  run(300ms, all);
  auto late = vsock(3, 1019);
  EXPECT_TRUE(run(2s, {late.get()}, [&] { return late->eof; }));
  EXPECT_EQ(late->last_error(), MAGNET_VERR_REFUSED);
  EXPECT_NE(late->all<view::errmsg>().at(0).text.find("all of them subscribed"), std::string::npos);
  run(100ms, all);
  for (auto* c : all) EXPECT_FALSE(c == squat[0].get() ? false : c->eof);
  EXPECT_EQ(hub->sessions().size(), 4u);
  const auto counts = hub->vsock_counts().at(1);
  EXPECT_EQ(counts.accepted, 5u);
  EXPECT_EQ(counts.replaced, 1u);
  EXPECT_EQ(refused(1, refusal::full), 1u);
}

// Accepts per second per VM: a burst, then refusals with a RATE error;
// another VM is not affected.
TEST_F(DeliverTest, VsockAcceptsPerSecondAreLimitedPerVm) {
  opt.vsock_accepts_per_s = 10;
  opt.vsock_accept_burst = 20;
  start();
  std::vector<std::unique_ptr<client>> cs;
  for (int i = 0; i < 25; ++i) cs.push_back(vsock(3, 1023));
  std::vector<client*> all;
  for (auto& c : cs) all.push_back(c.get());
  run(300ms, all);
  size_t rate = 0, replaced = 0, open = 0;
  for (auto& c : cs) {
    rate += c->last_error() == MAGNET_VERR_RATE;
    replaced += c->last_error() == MAGNET_VERR_REFUSED;
    open += !c->eof;
  }
  EXPECT_EQ(rate, 5u) << "20 of 25 within the burst";
  EXPECT_EQ(replaced, 16u) << "at the cap of 4, each new one replaced an unsubscribed one";
  EXPECT_EQ(open, 4u);
  EXPECT_EQ(refused(1, refusal::rate), 5u);
  auto other = vsock_hello(4, 1023);
  EXPECT_FALSE(other->eof) << "g2's accepts are its own";
  EXPECT_TRUE(other->errors().empty());
}

// The CID is confirmed with the registry at accept (deliver_options::
// cid_owner, off the io thread): a CID the registry now gives to another
// VM, or to none, or cannot confirm, is refused; one whose VM is confirmed
// is admitted, and closed when set_vms moves the CID to another VM.
TEST_F(DeliverTest, VsockCidIsConfirmedWithTheRegistryAtAccept) {
  std::mutex mu;
  std::map<uint32_t, uint32_t> owner_of = {{3, 1}, {4, 2}};
  bool down = false;
  std::set<std::thread::id> threads;
  opt.cid_owner = [&](uint32_t cid) -> result<uint32_t> {
    std::lock_guard lk(mu);
    threads.insert(std::this_thread::get_id());
    if (down) return error{"not connected to libvirt"};
    auto it = owner_of.find(cid);
    return it == owner_of.end() ? 0u : it->second;
  };
  start();
  auto attempt = [&](const char* what) {
    SCOPED_TRACE(what);
    auto c = vsock(3, 1023);
    c->send(view::hello{1, 1, MAGNET_VROLE_AGENT, 0, "x"});
    EXPECT_TRUE(run(2s, {c.get()}, [&] { return c->eof || !c->all<view::welcome>().empty(); }));
    return c;
  };
  {
    std::lock_guard lk(mu);
    owner_of[3] = 2;  // given to g2 since the hub's last update
  }
  auto moved = attempt("moved to g2");
  EXPECT_TRUE(moved->eof);
  ASSERT_EQ(moved->errors(), std::vector<uint16_t>{MAGNET_VERR_REFUSED});
  EXPECT_EQ(moved->all<view::errmsg>()[0].text, "CID 3 belongs to another VM now");
  EXPECT_TRUE(moved->all<view::welcome>().empty());
  {
    std::lock_guard lk(mu);
    owner_of.erase(3);  // unplugged
  }
  auto gone = attempt("no owner");
  EXPECT_TRUE(gone->eof);
  EXPECT_EQ(gone->all<view::errmsg>().at(0).text, "CID 3 belongs to no running VM now");
  {
    std::lock_guard lk(mu);
    owner_of[3] = 1;
    down = true;
  }
  auto unsure = attempt("registry down");
  EXPECT_TRUE(unsure->eof);
  EXPECT_NE(unsure->all<view::errmsg>().at(0).text.find("could not be confirmed"), std::string::npos);
  EXPECT_EQ(refused(1, refusal::moved), 2u);
  EXPECT_EQ(refused(1, refusal::unconfirmed), 1u);
  {
    std::lock_guard lk(mu);
    down = false;
  }
  auto ok = attempt("confirmed");
  EXPECT_FALSE(ok->eof);
  ASSERT_EQ(ok->all<view::welcome>().size(), 1u);
  EXPECT_EQ(ok->all<view::welcome>()[0].session_id, 0x1111u);
  {
    std::lock_guard lk(mu);
    EXPECT_EQ(threads.size(), 1u);
    EXPECT_FALSE(threads.count(std::this_thread::get_id())) << "asked on the io thread";
  }
  // The registry moves CID 3 to g2 (g1's device unplugged, given to g2).
  auto next = vms;
  next[0].cid = 0;
  next[1].cid = 3;
  hub->set_vms(next);
  EXPECT_TRUE(run(2s, {ok.get()}, [&] { return ok->eof; }));
  EXPECT_TRUE(hub->sessions().empty());
}

// A registry that takes its time does not stall the io thread: another
// VM's frames keep their period while a CID is being confirmed.
TEST_F(DeliverTest, VsockCidCheckDoesNotBlockTheIoThread) {
  opt.cid_owner = [](uint32_t) -> result<uint32_t> {
    std::this_thread::sleep_for(600ms);
    return 1u;
  };
  start();
  auto w = hello(2);
  w->send(view::subscribe{50, MAGNET_VMODE_PERIODIC, 0, {}, {}});
  run(200ms, {w.get()});
  auto c = vsock(3, 1023);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::chrono::steady_clock::time_point> at;
  std::chrono::steady_clock::time_point admitted{};
  run(1200ms, {w.get(), c.get()}, [&] {
    while (at.size() < w->all<view::stats>().size()) at.push_back(std::chrono::steady_clock::now());
    if (admitted == std::chrono::steady_clock::time_point{} && hub->sessions().size() == 2)
      admitted = std::chrono::steady_clock::now();
    return false;
  });
  ASSERT_NE(admitted, std::chrono::steady_clock::time_point{}) << "admitted once confirmed";
  EXPECT_GE(admitted - t0, 550ms);
  ASSERT_GE(at.size(), 15u);
  for (size_t i = 1; i < at.size(); ++i) EXPECT_LT(at[i] - at[i - 1], 150ms) << "gap before frame " << i;
}

// ---------------------------------------------- virtio-serial flood guard ---

// A channel that earns enough errors within a second is not read for a
// while (its bytes wait in the kernel), then resynchronised: a new user's
// resync is answered after the pause, and the session works.  Of its
// errors, one frame per second is sent; the rest are counted.
TEST_F(DeliverTest, SerialChannelThatMisbehavesIsPausedThenResynchronised) {
  opt.serial_flood.backoff_min = 300ms;
  start();
  auto c = hello(1, transport::serial);
  std::vector<uint8_t> b;
  for (uint32_t i = 0; i < 8; ++i) {
    b.insert(b.end(), {'x', 'y', 'z'});
    ASSERT_TRUE(view::encode(b, view::ping{i, 0}, i + 2, 0));
  }
  c->send_raw(b);
  run(100ms, {c.get()});
  c->send(view::resync{77, false});
  const auto sent = std::chrono::steady_clock::now();
  auto answered = [&] {
    for (const auto& r : c->all<view::resync>())
      if (r.reply && r.token == 77) return true;
    return false;
  };
  EXPECT_TRUE(run(2s, {c.get()}, answered));
  EXPECT_GE(std::chrono::steady_clock::now() - sent, 150ms) << "answered after the pause";
  EXPECT_EQ(c->errors(), std::vector<uint16_t>{MAGNET_VERR_BAD_FRAME}) << "one error frame in a second";
  auto s = hub->sessions();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].pauses, 1u);
  EXPECT_GE(s[0].errors_unsent, 7u) << "the other bad frames and the pause notice, counted";
  c->send(view::hello{});
  EXPECT_TRUE(run(2s, {c.get()}, [&] { return c->all<view::welcome>().size() == 2; }));
  EXPECT_FALSE(c->eof);
}

// p99 (nearest rank) of @v.
double p99(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, (v.size() * 99 + 99) / 100 - 1)];
}

// A guest flooding its end of a channel from a thread of its own: @junk
// (bytes that are no frame) and, with @pings, 64 valid pings after each
// 4 KiB of it, as fast as the socket takes them, while @flooding; it reads
// what comes back and counts the error frames.
class flooder {
 public:
  flooder(int fd, bool pings) : fd_(fd), pings_(pings), t_([this] { loop(); }) {}
  ~flooder() {
    stop_ = true;
    t_.join();
  }
  std::atomic<bool> flooding{true};
  std::atomic<uint64_t> sent{0}, errors{0};

 private:
  void loop() {
    std::vector<uint8_t> junk(4096, 'A'), pings;
    if (pings_)
      for (uint32_t i = 0; i < 64; ++i) (void)view::encode(pings, view::ping{i, 0}, i + 1, 0);
    view::reader rd;
    while (!stop_) {
      bool moved = false;
      for (const auto* b : {&junk, &pings}) {
        ssize_t n = flooding && !b->empty() ? ::send(fd_, b->data(), b->size(), MSG_DONTWAIT | MSG_NOSIGNAL) : 0;
        if (n > 0) sent += static_cast<uint64_t>(n), moved = true;
      }
      for (;;) {
        auto room = rd.prepare();
        ssize_t n = ::recv(fd_, room.data(), room.size(), MSG_DONTWAIT);
        if (n <= 0) break;
        moved = true;
        rd.commit(static_cast<size_t>(n));
        view::frame f;
        error e;
        while (rd.next(f, e) == view::reader::state::frame) errors += std::holds_alternative<view::errmsg>(f.m);
      }
      if (!moved) {
        pollfd p{fd_, POLLIN | POLLOUT, 0};
        ::poll(&p, 1, 5);
      }
    }
  }
  int fd_;
  bool pings_;
  std::atomic<bool> stop_{false};
  std::thread t_;
};

// How many reading spells a flooded channel gets within @t: one, then one
// after each backoff (flood_limits) that ends within @t.
unsigned spells_within(std::chrono::nanoseconds t, const view::flood_limits& fl) {
  unsigned n = 1;
  std::chrono::nanoseconds at{0};
  for (auto b = std::chrono::nanoseconds(fl.backoff_min); at + b < t;
       b = std::min<std::chrono::nanoseconds>(2 * b, fl.backoff_max)) {
    at += b;
    ++n;
  }
  return n;
}

// A guest floods its virtio-serial channel (bad bytes as fast as the
// socket takes them, and valid pings above the message rate) while
// another VM's subscriber counts the gaps between its frames: they keep
// the period they had without the flood (p99 within 20%), the flooder
// gets at most one error frame a second, and the hub reads from it only
// bounded bytes (paused with a doubling backoff; the rest stay in the
// kernel, where the flooder's writes block).
//
// This machine's other work can stall the test's one thread (hub and
// clients alike) for tens of milliseconds at any time: the gaps are
// measured in up to three rounds (without, then with the flood), and one
// round within 20% passes; a flood that delays the other VM fails all.
TEST_F(DeliverTest, SerialFloodCostsTheHubABoundedShareAndDelaysNoOtherVm) {
  start();
  auto good = hello(2, transport::serial);
  good->send(view::subscribe{100, MAGNET_VMODE_PERIODIC, 0, {MAGNET_STAT_TAP_TX_BPS}, {}});
  run(300ms, {good.get()});
  using clk = std::chrono::steady_clock;
  // The gaps between the subscriber's frames over @span, with the
  // daemon's 100 ms tick publishing both VMs' values (after 300 ms of it,
  // so that frames follow the ticks, as in a running daemon).
  auto gaps_over = [&](std::chrono::milliseconds span) {
    std::vector<double> gaps;
    size_t seen = good->all<view::stats>().size();
    clk::time_point last{};
    const auto from = clk::now() + 300ms, end = from + span;
    auto tick = clk::now();
    while (clk::now() < end) {
      if (clk::now() >= tick) {
        hub->publish(1, monotonic_ns(), stats_of(1e6));
        hub->publish(2, monotonic_ns(), stats_of(2e6));
        tick += 100ms;
      }
      io.run_for(1ms);
      good->drain();
      const size_t n = good->all<view::stats>().size();
      if (n == seen) continue;
      const auto t = clk::now();
      if (last >= from) gaps.push_back(std::chrono::duration<double, std::milli>(t - last).count());
      last = t;
      seen = n;
    }
    return gaps;
  };

  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  hub->adopt(1, sv[1], transport::serial);
  int sndbuf = 0, rcvbuf = 0;
  socklen_t len = sizeof sndbuf;
  ASSERT_EQ(getsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, &len), 0);
  len = sizeof rcvbuf;
  ASSERT_EQ(getsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len), 0);
  auto flood = std::make_unique<flooder>(sv[0], true);
  auto& flooding = flood->flooding;
  flooding = false;
  constexpr auto kFlood = 6s;
  double idle_p99 = 0, flood_p99 = 0;
  size_t rounds = 0, idle_n = 0, flood_n = 0;
  // The time from each round's flood to the next one's: the backoff may
  // start again from its minimum in the next round's flood (after the calm
  // of the idle part between them), so the pauses are bounded round by
  // round.
  std::vector<clk::duration> flood_times;
  clk::time_point first_flood{}, flood_start{};
  for (; rounds < 3 && (rounds == 0 || flood_p99 > 1.2 * idle_p99); ++rounds) {
    flooding = false;
    const auto idle = gaps_over(3s);
    const auto now = clk::now();
    if (rounds > 0) flood_times.push_back(now - flood_start);
    flooding = true;
    flood_start = now;
    if (rounds == 0) first_flood = flood_start;
    const auto flooded = gaps_over(kFlood);
    idle_p99 = p99(idle);
    flood_p99 = p99(flooded);
    idle_n = idle.size();
    flood_n = flooded.size();
    std::printf("round %zu: subscriber p99 gap %.1f ms with the flood, %.1f ms without (%zu and %zu gaps)\n",
                rounds + 1, flood_p99, idle_p99, flood_n, idle_n);
  }
  const uint64_t sent = flood->sent, errors = flood->errors;
  flood.reset();
  flood_times.push_back(clk::now() - flood_start);
  const auto flood_time = clk::now() - first_flood;
  ::close(sv[0]);
  view::session_info f{};
  for (const auto& s : hub->sessions())
    if (s.subject == 1) f = s;
  const auto& fl = opt.serial_flood;
  const double secs = std::chrono::duration<double>(flood_time).count();
  std::printf("flood: %.1f s; the flooder sent %llu bytes, the hub read %llu in %llu reads, "
              "%.1f ms of handling, %llu pauses; %llu error frames sent to it, %llu not\n",
              secs, static_cast<unsigned long long>(sent),
              static_cast<unsigned long long>(f.bytes_in), static_cast<unsigned long long>(f.reads),
              f.read_ns / 1e6, static_cast<unsigned long long>(f.pauses),
              static_cast<unsigned long long>(errors), static_cast<unsigned long long>(f.errors_unsent));
  // The other VM's frames kept their period.
  ASSERT_GE(idle_n, 20u);
  ASSERT_GE(flood_n, 45u);
  EXPECT_LE(flood_p99, 1.2 * idle_p99) << "in each of " << rounds << " rounds";
  // Error frames: at most one a second (and the first).
  EXPECT_LE(errors, 1 + static_cast<uint64_t>(secs / std::chrono::duration<double>(fl.error_interval).count()));
  EXPECT_GT(f.errors_unsent, 0u) << "the others are counted";
  // Pauses with a doubling backoff from 100 ms: each reading spell ends at
  // the byte budget or the strikes (plus the one read that crossed it).
  unsigned spells = 0;
  for (const auto& t : flood_times) spells += spells_within(t, fl);
  EXPECT_GE(f.pauses, 5u);
  EXPECT_LE(f.pauses, spells);
  const uint64_t spell = fl.max_bytes + view::kMaxFrame;
  EXPECT_LE(f.bytes_in, spells * spell);
  // What the flooder got into the socket beyond that stayed in the kernel.
  EXPECT_LE(sent, spells * spell + static_cast<uint64_t>(sndbuf) + static_cast<uint64_t>(rcvbuf));
  EXPECT_LT(static_cast<double>(f.read_ns), 0.05 * secs * 1e9) << "the hub's time in the flooder's reads";
}

// Bytes that are no frame at all strike once (the rest is skipped looking
// for a magic, which is cheap): the byte budget is what pauses them.
TEST_F(DeliverTest, SerialJunkIsBoundedByTheByteBudget) {
  start();
  auto c = hello(1, transport::serial);
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t sent = 0, errors = 0;
  {
    flooder junk(c->fd, false);
    run(3s, {});
    sent = junk.sent;
    errors = junk.errors;
  }
  const auto& fl = opt.serial_flood;
  const unsigned spells = spells_within(std::chrono::steady_clock::now() - t0, fl);
  auto s = hub->sessions();
  ASSERT_EQ(s.size(), 1u);
  std::printf("junk: the flooder sent %llu bytes, the hub read %llu in %llu reads (%.1f ms), %llu pauses, "
              "%llu error frames\n",
              static_cast<unsigned long long>(sent), static_cast<unsigned long long>(s[0].bytes_in),
              static_cast<unsigned long long>(s[0].reads), s[0].read_ns / 1e6,
              static_cast<unsigned long long>(s[0].pauses), static_cast<unsigned long long>(errors));
  EXPECT_GE(s[0].pauses, 3u);
  EXPECT_LE(s[0].pauses, spells);
  EXPECT_GT(s[0].bytes_in, fl.max_bytes) << "read up to the budget";
  EXPECT_LE(s[0].bytes_in, spells * (fl.max_bytes + view::kMaxFrame));
  EXPECT_LE(errors, 4u);
  EXPECT_FALSE(c->eof);
}

// The backoff doubles with each pause, and starts over after a calm
// period of reading without one.
TEST_F(DeliverTest, SerialBackoffDoublesAndStartsOverAfterACalmPeriod) {
  opt.serial_flood.calm = 700ms;
  start();
  auto c = hello(1, transport::serial);
  // Ten bad frames (each run of junk before a ping; after a resume the
  // first run is skipped looking for a magic, so nine strike).
  auto burst = [&] {
    std::vector<uint8_t> b;
    for (uint32_t i = 0; i < 10; ++i) {
      b.insert(b.end(), {'x', 'y', 'z'});
      (void)view::encode(b, view::ping{i, 0}, i + 2, 0);
    }
    c->send_raw(b);
  };
  auto session = [&] { return hub->sessions().at(0); };
  std::vector<uint32_t> backoffs;
  for (int i = 0; i < 4; ++i) {
    if (i == 3) run(800ms, {c.get()});  // calm
    const uint64_t before = session().pauses;
    burst();
    EXPECT_TRUE(run(1s, {c.get()}, [&] { return session().pauses > before; })) << i;
    backoffs.push_back(session().backoff_ms);
    EXPECT_TRUE(run(2s, {c.get()}, [&] { return !session().paused; })) << i;
  }
  EXPECT_EQ(backoffs, (std::vector<uint32_t>{100, 200, 400, 100}));
  EXPECT_FALSE(c->eof);
}

}  // namespace
}  // namespace magnet::host
