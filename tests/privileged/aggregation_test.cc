// Tier 3: in-kernel aggregation (the mode of `magnet stat` and the host
// daemon) counts every packet exactly, on the probes' own path for
// aggregation-only events.  Real probes, real traffic over a veth pair whose
// two ends are tagged as VMs, so the counts of this traffic are apart from
// whatever else the host sends meanwhile.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "capture.h"
#include "magnet/events.h"
#include "proc.h"

namespace magnet::host {
namespace {

using test::ns_task;
using test::veth_pair;

constexpr uint32_t kVmA = 201, kVmB = 202;

sockaddr_in addr(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// @n datagrams of @size bytes from ns_a to ns_b, all received.
void udp_burst(const veth_pair& v, int n, int size) {
  ns_task rx(v.ns_b, [&](const std::function<void()>& ready) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    int big = 8 << 20;
    setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    auto sa = addr(v.addr_b, 6100);
    if (bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa)) return 2;
    timeval tv{5, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ready();
    std::vector<char> buf(65536);
    for (int i = 0; i < n; ++i)
      if (recv(s, buf.data(), buf.size(), 0) != size) return 3;
    return 0;
  });
  ASSERT_TRUE(rx.wait_ready());
  ns_task tx(v.ns_a, [&](const std::function<void()>&) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    auto dst = addr(v.addr_b, 6100);
    std::vector<char> buf(static_cast<size_t>(size), 'a');
    for (int i = 0; i < n; ++i) {
      if (sendto(s, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof dst) !=
          size)
        return 4;
      if (i % 50 == 49) usleep(1000);
    }
    return 0;
  });
  EXPECT_EQ(tx.join(), 0) << "sender";
  EXPECT_EQ(rx.join(), 0) << "receiver got every datagram";
}

TEST(Aggregation, CountsEveryPacketOfATaggedDeviceExactly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads BPF, creates namespaces)";
  veth_pair v;
  auto c = capture::open({});
  ASSERT_TRUE(c) << c.err().message;
  auto& cap = **c;
  ASSERT_TRUE(cap.tag_vm_ifindex(static_cast<uint32_t>(v.ifindex_a), kVmA));
  ASSERT_TRUE(cap.tag_vm_ifindex(static_cast<uint32_t>(v.ifindex_b), kVmB));
  // Packet probes whose VM is the device's: the sending end's for the
  // device and IP output, the receiving end's for the input side.
  const std::vector<std::pair<uint16_t, uint32_t>> probes = {
      {MAGNET_EV_NET_DEV_XMIT, kVmA}, {MAGNET_EV_NET_IP_SEND, kVmA},
      {MAGNET_EV_NET_DEV_RECV, kVmB}, {MAGNET_EV_NET_IP_RECV, kVmB},
      {MAGNET_EV_NET_L4_RECV, kVmB}};
  for (auto [t, vm] : probes) ASSERT_TRUE(cap.set_mode(t, MAGNET_MODE_AGGREGATE)) << event_name(t);

  const int n = 300, size = 1000;
  udp_burst(v, n, size);
  usleep(100000);

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
  ASSERT_TRUE(cap.tag_vm_ifindex(static_cast<uint32_t>(v.ifindex_b), kVmB));
  ASSERT_TRUE(cap.set_mode(MAGNET_EV_NET_L4_RECV, MAGNET_MODE_AGGREGATE));

  const size_t total = (2u << 20) + 77;
  ns_task server(v.ns_b, [&](const std::function<void()>& ready) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    auto sa = addr(v.addr_b, 6101);
    if (bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || listen(s, 1)) return 2;
    ready();
    int conn = accept(s, nullptr, nullptr);
    std::vector<char> buf(1 << 16);
    size_t got = 0;
    for (ssize_t k; (k = recv(conn, buf.data(), buf.size(), 0)) > 0;)
      got += static_cast<size_t>(k);
    return got == total ? 0 : 3;
  });
  ASSERT_TRUE(server.wait_ready());
  ns_task client(v.ns_a, [&](const std::function<void()>&) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    auto dst = addr(v.addr_b, 6101);
    if (connect(s, reinterpret_cast<sockaddr*>(&dst), sizeof dst)) return 3;
    std::vector<char> buf(total, 't');
    for (size_t off = 0; off < total;) {
      ssize_t k = send(s, buf.data() + off, std::min<size_t>(total - off, 100000), 0);
      if (k <= 0) return 4;
      off += static_cast<size_t>(k);
    }
    close(s);
    return 0;
  });
  ASSERT_EQ(client.join(), 0);
  ASSERT_EQ(server.join(), 0) << "server received every byte";
  usleep(100000);
  auto agg = cap.aggregate(probe_slot(MAGNET_EV_NET_L4_RECV));
  EXPECT_EQ(agg[kVmB].bytes, total);
  EXPECT_GT(agg[kVmB].events, 2u) << "handshake, data and FIN segments";
}

}  // namespace
}  // namespace magnet::host
