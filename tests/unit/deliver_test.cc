// The delivery hub over socket pairs standing in for vsock and virtio-serial:
// the protocol's sessions, each VM's isolation, bounded buffers for slow
// readers, deadlines, rate limits and identity changes.  The hub runs on an
// io_context driven by the test thread; clients are plain non-blocking
// sockets decoded with the protocol's own reader.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <set>

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
    for (size_t i = 0; i < r.size(); ++i)
      if (i < id_at || i >= id_at + 8) EXPECT_EQ(r[i], it->second[i]) << "byte " << i;
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

}  // namespace
}  // namespace magnet::host
