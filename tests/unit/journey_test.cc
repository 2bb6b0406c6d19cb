// The guest agent's journey (guest/agent/src/journey.cc): its own socket sends
// and device transmits joined with the host's vmnet.queue.tx records of the
// same packets (flow id and IPv4 id), the host's times brought to the
// guest's clock.
#include "magnet/agent/journey.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>

#include "magnet/flow.h"
#include "records.h"

namespace magnet::guest {
namespace {

using filters::testing::hdr;
using filters::testing::pkt_rec;
using filters::testing::put_addr;
using filters::testing::sock_rec;

constexpr int64_t kOffset = 5'000'000'000;  // host clock = guest clock + 5 s
const std::string kGuest = "10.77.0.11", kWire = "10.77.0.250";

uint64_t flow_of(uint16_t sport, uint16_t dport) {
  uint8_t s[16], d[16];
  put_addr(s, kGuest);
  put_addr(d, kWire);
  return magnet_flow_id(s, d, sport, dport, IPPROTO_UDP);
}

std::vector<uint8_t> queue_rec(uint64_t host_ts, uint64_t flow, uint16_t ip_id, uint64_t delay_ns) {
  magnet_vmnet_queue q{};
  q.delay_ns = delay_ns;
  q.in_ifindex = 7;
  q.out_ifindex = 9;
  q.ip_id = ip_id;
  return make_record(hdr({.ts = host_ts, .type = MAGNET_EV_VMNET_QUEUE_TX, .id = flow}), q);
}

std::vector<uint8_t> cat(std::initializer_list<std::vector<uint8_t>> recs) {
  std::vector<uint8_t> out;
  for (const auto& r : recs) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// What tick() appends, by stat id and index (the percentile).
struct ticked {
  std::map<std::pair<uint16_t, uint32_t>, view::stat_value> m;
  bool valid(uint16_t id, uint32_t index = 0) const {
    auto it = m.find({id, index});
    return it != m.end() && (it->second.flags & MAGNET_VSTAT_VALID);
  }
  double value(uint16_t id, uint32_t index = 0) const {
    auto it = m.find({id, index});
    return it == m.end() ? -1 : it->second.value;
  }
};
ticked tick(journey& j) {
  std::vector<view::stat_value> out;
  j.tick(1'000'000'000, out);
  ticked t;
  for (const auto& v : out) t.m[{v.id, v.index}] = v;
  return t;
}

// A send call of one datagram on the flow (5000 -> 6000) that returned at
// end after call_ns.
std::vector<uint8_t> send_rec(uint64_t end, uint64_t call_ns) {
  auto r = sock_rec({.ts = end, .type = MAGNET_EV_NET_SOCK_SEND, .size = 1400}, kGuest, 5000, kWire, 6000);
  auto* s = reinterpret_cast<magnet_sock*>(r.data() + sizeof(magnet_hdr));
  s->call_ns = call_ns;
  return r;
}

std::vector<uint8_t> xmit_rec(uint64_t t, uint64_t flow, uint16_t ip_id) {
  return pkt_rec({.ts = t, .type = MAGNET_EV_NET_DEV_XMIT, .id = flow, .size = 1442}, 2, ip_id, 0,
                 IPPROTO_UDP, 5000, 6000, kGuest, kWire);
}

// One datagram: its send call starts at t, the guest's device transmits it
// 30 us later, the call returns 10 us after that (its record, written then,
// follows the transmit's); at the host's tap 50 us after the transmit, on
// the wire 20 us after that.
std::vector<uint8_t> guest_side(uint64_t t, uint64_t flow, uint16_t ip_id, bool timed = true) {
  return cat({xmit_rec(t + 30'000, flow, ip_id), send_rec(t + 40'000, timed ? 40'000 : 0)});
}

TEST(Journey, APacketSeenOnBothSidesGivesEverySegment) {
  journey j;
  j.set_offset(kOffset);
  const uint64_t flow = flow_of(5000, 6000), t = 1'000'000'000;
  j.guest_records(guest_side(t, flow, 77));
  j.host_records(queue_rec(t + 30'000 + 50'000 + 20'000 + kOffset, flow, 77, 20'000));
  EXPECT_EQ(j.matched(), 1u);
  auto m = tick(j);
  ASSERT_TRUE(m.valid(MAGNET_STAT_JOURNEY_SOCK_DEV, 50));
  EXPECT_NEAR(m.value(MAGNET_STAT_JOURNEY_SOCK_DEV, 50), 30, 1);
  ASSERT_TRUE(m.valid(MAGNET_STAT_JOURNEY_DEV_TAP, 50));
  EXPECT_NEAR(m.value(MAGNET_STAT_JOURNEY_DEV_TAP, 50), 50, 1);
  ASSERT_TRUE(m.valid(MAGNET_STAT_JOURNEY_TAP_WIRE, 99));
  EXPECT_NEAR(m.value(MAGNET_STAT_JOURNEY_TAP_WIRE, 99), 20, 1);
  EXPECT_DOUBLE_EQ(m.value(MAGNET_STAT_JOURNEY_MATCHED), 1.0);
}

TEST(Journey, OnlyTheSamePacketMatchesAndOnlyOnce) {
  journey j;
  j.set_offset(kOffset);
  const uint64_t flow = flow_of(5000, 6000), t = 1'000'000'000;
  j.guest_records(guest_side(t, flow, 77));
  const uint64_t at = t + 100'000 + kOffset;
  j.host_records(cat({queue_rec(at, flow, 78, 20'000),               // another IPv4 id
                      queue_rec(at, flow_of(5001, 6000), 77, 20'000),  // another flow
                      queue_rec(at, flow, 77, 20'000),                 // the packet
                      queue_rec(at, flow, 77, 20'000)}));              // seen again: no packet left
  EXPECT_EQ(j.matched(), 1u);
}

TEST(Journey, NoSocketSegmentWhereTheCallIsNotTimedOrTheTransmitFallsOutsideIt) {
  journey j;
  j.set_offset(kOffset);
  const uint64_t flow = flow_of(5000, 6000), t = 1'000'000'000;
  // A 6.3+ kernel's tracepoint: the call's start is unknown.
  j.guest_records(guest_side(t, flow, 1, false));
  // A transmit 1 ms before the call that follows it (not its datagram).
  j.guest_records(cat({xmit_rec(t + 1'000'000, flow, 2), send_rec(t + 2'040'000, 40'000)}));
  j.host_records(cat({queue_rec(t + 100'000 + kOffset, flow, 1, 20'000),
                      queue_rec(t + 1'100'000 + kOffset, flow, 2, 20'000)}));
  EXPECT_EQ(j.matched(), 2u);
  auto m = tick(j);
  EXPECT_FALSE(m.valid(MAGNET_STAT_JOURNEY_SOCK_DEV, 50)) << m.value(MAGNET_STAT_JOURNEY_SOCK_DEV, 50);
  EXPECT_TRUE(m.valid(MAGNET_STAT_JOURNEY_DEV_TAP, 50));
  EXPECT_TRUE(m.valid(MAGNET_STAT_JOURNEY_TAP_WIRE, 50));
}

TEST(Journey, NothingMatchesBeforeTheClockOffsetIsKnownOrFromAnOldHost) {
  const uint64_t flow = flow_of(5000, 6000), t = 1'000'000'000;
  journey j;
  j.guest_records(guest_side(t, flow, 77));
  j.host_records(queue_rec(t + 100'000 + kOffset, flow, 77, 20'000));
  EXPECT_EQ(j.matched(), 0u) << "no offset yet";
  auto m = tick(j);
  EXPECT_FALSE(m.valid(MAGNET_STAT_JOURNEY_DEV_TAP, 50));
  EXPECT_DOUBLE_EQ(m.value(MAGNET_STAT_JOURNEY_MATCHED), 0.0);

  // A host of format minor 1: vmnet.queue without the IPv4 id.
  j.set_offset(kOffset);
  magnet_hdr h = hdr({.ts = t + 100'000 + kOffset, .type = MAGNET_EV_VMNET_QUEUE_TX, .id = flow});
  magnet_vmnet_queue q{};
  q.delay_ns = 20'000;
  q.ip_id = 77;
  auto old = make_record(h, &q, offsetof(magnet_vmnet_queue, ip_id));
  j.host_records(old);
  EXPECT_EQ(j.matched(), 0u) << "a minor-1 record has no IPv4 id to match by";
}

}  // namespace
}  // namespace magnet::guest
