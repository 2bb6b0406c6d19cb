// Tier 3: in-kernel aggregation (the mode of `magnet stat` and the host
// daemon) counts every packet exactly, on the probes' own path for
// aggregation-only events.  Real probes, real traffic over a veth pair whose
// two ends are tagged as VMs, so the counts of this traffic are apart from
// whatever else the host sends meanwhile.
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "magnet/capture/capture.h"
#include "magnet/events.h"
#include "proc.h"

namespace magnet::host {
namespace {

using test::veth_pair;

constexpr uint32_t kVmA = 201, kVmB = 202;


// The probes update the in-kernel counters on the traffic's own path: when
// the exchange's processes are done, so are the counts (no wait needed).
TEST(Aggregation, CountsEveryPacketOfATaggedDeviceExactly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads BPF, creates namespaces)";
  veth_pair v;
  auto c = capture::open({});
  ASSERT_TRUE(c) << c.err().message;
  auto& cap = **c;
  // The ends live in namespaces of their own: name them with the ifindex.
  ASSERT_TRUE(cap.tag_vm_ifindex(v.netns_ino_a, static_cast<uint32_t>(v.ifindex_a), kVmA));
  ASSERT_TRUE(cap.tag_vm_ifindex(v.netns_ino_b, static_cast<uint32_t>(v.ifindex_b), kVmB));
  // Packet probes whose VM is the device's: the sending end's for the
  // device and IP output, the receiving end's for the input side.
  const std::vector<std::pair<uint16_t, uint32_t>> probes = {
      {MAGNET_EV_NET_DEV_XMIT, kVmA}, {MAGNET_EV_NET_IP_SEND, kVmA},
      {MAGNET_EV_NET_DEV_RECV, kVmB}, {MAGNET_EV_NET_IP_RECV, kVmB},
      {MAGNET_EV_NET_L4_RECV, kVmB}};
  for (auto [t, vm] : probes) ASSERT_TRUE(cap.set_mode(t, MAGNET_MODE_AGGREGATE)) << event_name(t);

  const int n = 300, size = 1000;
  auto r = test::udp_exchange(v, n, size, 5100, 6100, true);
  ASSERT_EQ(r.tx_rc, 0) << "sender";
  ASSERT_EQ(r.rx_rc, 0) << "receiver got every datagram";

  // Bytes: skb->len at the device (with the Ethernet header on transmit,
  // pulled on receive), the IP total length, the UDP payload.
  const std::map<uint16_t, uint64_t> bytes = {
      {MAGNET_EV_NET_DEV_XMIT, size + 8 + 20 + 14}, {MAGNET_EV_NET_IP_SEND, size + 28},
      {MAGNET_EV_NET_DEV_RECV, size + 28}, {MAGNET_EV_NET_IP_RECV, size + 28},
      {MAGNET_EV_NET_L4_RECV, size}};
  for (auto [t, vm] : probes) {
    auto agg = cap.aggregate(probe_slot(t));
    EXPECT_EQ(agg[vm].events, static_cast<uint64_t>(n)) << event_name(t);
    EXPECT_EQ(agg[vm].bytes, n * bytes.at(t)) << event_name(t);
    uint64_t seen = 0;
    for (const auto& s : cap.probe_state(probe_slot(t))) seen += s.seen;
    EXPECT_GE(seen, static_cast<uint64_t>(n)) << event_name(t) << ": seen counts admitted events";
  }
}

// TCP: the transport payload of every segment (header length from the TCP
// data offset) adds up to the transfer; on the receiving end, where the
// segments arrive as sent (GRO aside, which keeps the sum).
TEST(Aggregation, TcpPayloadBytesAddUpToTheTransfer) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads BPF, creates namespaces)";
  veth_pair v;
  auto c = capture::open({});
  ASSERT_TRUE(c) << c.err().message;
  auto& cap = **c;
  ASSERT_TRUE(cap.tag_vm_ifindex(v.netns_ino_b, static_cast<uint32_t>(v.ifindex_b), kVmB));
  ASSERT_TRUE(cap.set_mode(MAGNET_EV_NET_L4_RECV, MAGNET_MODE_AGGREGATE));

  const size_t total = (2u << 20) + 77;
  auto x = test::tcp_transfer(v, total, 5101, 6101);
  ASSERT_EQ(x.client_rc, 0);
  ASSERT_EQ(x.server_rc, 0) << "server received every byte";
  auto agg = cap.aggregate(probe_slot(MAGNET_EV_NET_L4_RECV));
  EXPECT_EQ(agg[kVmB].bytes, total);
  EXPECT_GT(agg[kVmB].events, 2u) << "handshake, data and FIN segments";
}

}  // namespace
}  // namespace magnet::host
