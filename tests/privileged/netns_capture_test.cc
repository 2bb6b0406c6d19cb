// Tier 3: real probes on this kernel, real traffic between two network
// namespaces joined by a veth pair, through the real `magnet` binary.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/events.h"
#include "magnet/flow.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"
#include "proc.h"

namespace magnet {
namespace {

using test::child;
using test::veth_pair;

constexpr uint16_t kUdpSrc = 5000, kUdpDst = 6000, kTcpSrc = 5001, kTcpDst = 6001;

struct temp_trace {
  std::string path = "/tmp/magnet-priv-" + std::to_string(getpid()) + "-" +
                     std::to_string(counter++) + ".mtr";
  ~temp_trace() { unlink(path.c_str()); }
  static inline int counter = 0;
};

// Records with their payload view.
struct rec {
  std::vector<uint8_t> b;
  const magnet_hdr& h() const { return hdr_of(b.data()); }
  template <class P>
  const P& p() const { return *reinterpret_cast<const P*>(b.data() + sizeof(magnet_hdr)); }
};

std::vector<rec> read_trace(const std::string& path) {
  std::vector<rec> out;
  auto r = trace_reader::open(path);
  EXPECT_TRUE(r) << (r ? "" : r.err().message);
  if (!r) return out;
  for (;;) {
    auto n = r->next();
    EXPECT_TRUE(n) << (n ? "" : n.err().message);
    if (!n || !*n) break;
    out.push_back({std::vector<uint8_t>(*n, *n + hdr_of(*n).len)});
  }
  return out;
}

bool has_ports(const rec& r, uint16_t sport, uint16_t dport) {
  auto* e = find_event(r.h().type);
  if (!e) return false;
  if (e->payload_kind == MAGNET_PL_SOCK)
    return r.p<magnet_sock>().sport == sport && r.p<magnet_sock>().dport == dport;
  if (e->payload_kind == MAGNET_PL_PKT)
    return r.p<magnet_pkt>().sport == sport && r.p<magnet_pkt>().dport == dport;
  return false;
}

class NetnsCapture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (loads BPF, creates namespaces)";
  }

  // Starts `magnet record` and waits until its probes are attached.  No
  // wait is needed before stopping it: the probes write their records
  // synchronously on the traffic's own path (done when the exchange's
  // processes are), and `magnet record` detaches and drains everything
  // buffered, lost counts included, on SIGINT/SIGTERM.
  std::unique_ptr<child> start_record(const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> argv = {MAGNET_BIN, "record", "-o", out};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<child>(argv);
    EXPECT_TRUE(c->wait_for_stderr("magnet: recording")) << c->stderr_text();
    return c;
  }

  // 500 datagrams through every network layer: exact counts, sizes, flow ids.
  void udp_journey();

  // N UDP datagrams of S bytes, ns_a:5000 -> ns_b:6000; returns {sender, receiver} pids.
  std::pair<pid_t, pid_t> udp_exchange(veth_pair& v, int n, int size, bool pace) {
    auto r = test::udp_exchange(v, n, size, kUdpSrc, kUdpDst, pace);
    EXPECT_EQ(r.tx_rc, 0) << "sender";
    EXPECT_EQ(r.rx_rc, 0) << "receiver got every datagram";
    return {r.tx, r.rx};
  }
};

TEST_F(NetnsCapture, UdpJourneyOfEveryDatagramAtEveryLayerWithoutLoss) { udp_journey(); }

// The same records when the packet probes copy headers with
// bpf_probe_read_kernel (kernels without bpf_rdonly_cast to memory).
TEST_F(NetnsCapture, UdpJourneyIsTheSameWithProbeReadHeaderCopies) {
  struct deny_env {
    deny_env() { setenv("MAGNET_DENY_METHODS", "rdonly_mem", 1); }
    ~deny_env() { unsetenv("MAGNET_DENY_METHODS"); }
  } env;
  udp_journey();
}

void NetnsCapture::udp_journey() {
  veth_pair v;
  temp_trace t;
  auto rec_proc = start_record(t.path, {"--probes", "net"});
  const int n = 500, size = 1000;
  auto [tx, rx] = udp_exchange(v, n, size, true);
  ASSERT_EQ(rec_proc->stop(SIGINT), 0) << rec_proc->stderr_text();

  auto recs = read_trace(t.path);
  ASSERT_FALSE(recs.empty());
  EXPECT_EQ(recs.front().h().type, MAGNET_EV_SYSINFO) << "a sysinfo record starts the trace";
  std::map<uint16_t, int> count;
  uint8_t sa[16] = {10, 199, 0, 1}, da[16] = {10, 199, 0, 2};
  const uint64_t flow = magnet_flow_id(sa, da, kUdpSrc, kUdpDst, IPPROTO_UDP);
  int lost = 0;
  for (const auto& r : recs) {
    if (r.h().type == MAGNET_EV_LOST) lost += static_cast<int>(r.p<magnet_lost>().count);
    if (!has_ports(r, kUdpSrc, kUdpDst)) continue;
    ++count[r.h().type];
    EXPECT_EQ(r.h().abstract_id, flow) << event_name(r.h().type) << ": one flow id at all layers";
    switch (r.h().type) {
      case MAGNET_EV_NET_SOCK_SEND:
        EXPECT_EQ(r.h().size, size);
        EXPECT_EQ(static_cast<pid_t>(r.h().tgid), tx) << "sender's tgid";
        break;
      case MAGNET_EV_NET_SOCK_RECV:
        EXPECT_EQ(r.h().size, size);
        EXPECT_EQ(static_cast<pid_t>(r.h().tgid), rx) << "receiver's tgid";
        break;
      case MAGNET_EV_NET_L4_SEND:
      case MAGNET_EV_NET_L4_RECV:
        EXPECT_EQ(r.h().size, size) << "transport payload";
        EXPECT_TRUE(r.h().flags & MAGNET_RF_UDP);
        break;
      case MAGNET_EV_NET_IP_SEND:
      case MAGNET_EV_NET_IP_RECV:
        EXPECT_EQ(r.h().size, size + 28) << "IP total length";
        break;
      default:
        break;
    }
  }
  EXPECT_EQ(lost, 0) << "no loss at this rate with default buffers";
  for (uint16_t t : {MAGNET_EV_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_RECV, MAGNET_EV_NET_L4_SEND,
                     MAGNET_EV_NET_L4_RECV, MAGNET_EV_NET_IP_SEND, MAGNET_EV_NET_IP_RECV,
                     MAGNET_EV_NET_DEV_XMIT, MAGNET_EV_NET_DEV_RECV})
    EXPECT_EQ(count[t], n) << event_name(t);
}

TEST_F(NetnsCapture, TcpByteTotalsAreExactAtSocketAndTransportLayers) {
  veth_pair v;
  temp_trace t;
  auto rec_proc = start_record(t.path, {"--probes", "net"});
  const size_t total = (4u << 20) + 123;
  auto x = test::tcp_transfer(v, total, kTcpSrc, kTcpDst);
  ASSERT_EQ(x.client_rc, 0);
  ASSERT_EQ(x.server_rc, 0) << "server received every byte";
  ASSERT_EQ(rec_proc->stop(SIGINT), 0) << rec_proc->stderr_text();

  std::map<uint16_t, int64_t> bytes;
  // Transport layer: each segment's [seq, seq + payload), relative to the
  // first data segment.  A retransmission (an RTO, or a tail-loss probe,
  // which retrans_out does not show) sends bytes twice, so the layer's
  // byte sum may exceed the transfer; the sequence space it covers may not.
  std::map<uint16_t, std::vector<std::pair<uint32_t, uint32_t>>> segs;
  std::map<uint16_t, uint32_t> base;
  int states = 0, lost = 0;
  for (const auto& r : read_trace(t.path)) {
    if (r.h().type == MAGNET_EV_LOST) ++lost;
    if (r.h().type == MAGNET_EV_NET_TCP_STATE) {
      const auto& s = r.p<magnet_tcp_state>();
      // tcp_probe fires on the receiving side of each direction's segments.
      if ((s.sport == kTcpSrc && s.dport == kTcpDst) || (s.sport == kTcpDst && s.dport == kTcpSrc))
        ++states;
    }
    if (!has_ports(r, kTcpSrc, kTcpDst) || r.h().size <= 0) continue;
    bytes[r.h().type] += r.h().size;
    if (r.h().type == MAGNET_EV_NET_L4_SEND || r.h().type == MAGNET_EV_NET_L4_RECV) {
      uint32_t seq = r.p<magnet_pkt>().tcp_seq;
      auto b = base.try_emplace(r.h().type, seq).first->second;
      segs[r.h().type].push_back({seq - b, static_cast<uint32_t>(r.h().size)});
    }
  }
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(bytes[MAGNET_EV_NET_SOCK_SEND], static_cast<int64_t>(total));
  EXPECT_EQ(bytes[MAGNET_EV_NET_SOCK_RECV], static_cast<int64_t>(total));
  for (uint16_t l4 : {MAGNET_EV_NET_L4_SEND, MAGNET_EV_NET_L4_RECV}) {
    auto& v = segs[l4];
    std::sort(v.begin(), v.end());
    uint64_t end = 0, covered = 0;  // union of the ranges, which must be [0, total)
    bool gap = false;
    for (auto [off, len] : v) {
      if (off > end) gap = true;
      if (off + uint64_t{len} > end) {
        covered += off + uint64_t{len} - std::max<uint64_t>(off, end);
        end = off + uint64_t{len};
      }
    }
    EXPECT_FALSE(gap) << event_name(l4) << ": a hole in the sequence space";
    EXPECT_EQ(covered, total) << event_name(l4) << ": segment payloads cover the transfer exactly";
    EXPECT_GE(bytes[l4], static_cast<int64_t>(total)) << event_name(l4);
  }
  EXPECT_GT(states, 0) << "TCP state snapshots of the connection";
}

TEST_F(NetnsCapture, TinyBufferLosesRecordsAndLostRecordsAccountForEveryOne) {
  veth_pair v;
  temp_trace t;
  const std::string flow = v.addr_a + ":" + std::to_string(kUdpSrc) + ">" + v.addr_b + ":" +
                           std::to_string(kUdpDst) + "/udp";
  auto rec_proc = start_record(
      t.path, {"--probes", "net", "--buffer", "4K", "--poll-timeout", "200ms", "--filter",
               "flow == " + flow});
  const int n = 3000;
  udp_exchange(v, n, 200, true);
  ASSERT_EQ(rec_proc->stop(SIGINT), 0) << rec_proc->stderr_text();

  std::map<uint16_t, int64_t> got, lost;
  for (const auto& r : read_trace(t.path)) {
    if (r.h().type == MAGNET_EV_LOST) lost[r.p<magnet_lost>().probe_type] += r.p<magnet_lost>().count;
    else if (has_ports(r, kUdpSrc, kUdpDst)) ++got[r.h().type];
  }
  int64_t total_lost = 0;
  for (uint16_t t : {MAGNET_EV_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_RECV, MAGNET_EV_NET_L4_SEND,
                     MAGNET_EV_NET_L4_RECV, MAGNET_EV_NET_IP_SEND, MAGNET_EV_NET_IP_RECV,
                     MAGNET_EV_NET_DEV_XMIT, MAGNET_EV_NET_DEV_RECV}) {
    EXPECT_EQ(got[t] + lost[t], n) << event_name(t) << ": recorded " << got[t] << " + lost "
                                   << lost[t];
    total_lost += lost[t];
  }
  EXPECT_GT(total_lost, 0) << "a 4 KiB ring cannot hold this burst";
}

TEST_F(NetnsCapture, KernelFilterOnTgidKeepsOnlyThatProcess) {
  veth_pair v;
  temp_trace t;
  // Two senders, one flow each: the recording filters on the tgid of the
  // second (kept), which waits until the first (filtered out) is done.
  constexpr uint16_t kKeptSrc = 5002, kKeptDst = 6002;
  const int n_out = 50, n_kept = 40;
  pid_t kept = -1;
  std::unique_ptr<child> rec_proc;
  auto r = test::udp_exchange(v, n_kept, 100, kKeptSrc, kKeptDst, false, [&](pid_t tx) {
    kept = tx;
    rec_proc = start_record(t.path, {"--probes", "net.sock", "--filter",
                                     "tgid == " + std::to_string(tx)});
    udp_exchange(v, n_out, 100, false);
  });
  EXPECT_EQ(r.tx_rc, 0) << "kept sender";
  EXPECT_EQ(r.rx_rc, 0) << "kept flow's receiver got every datagram";
  ASSERT_TRUE(rec_proc);
  ASSERT_EQ(rec_proc->stop(SIGTERM), 0) << "SIGTERM stops as cleanly as SIGINT";
  int filtered_out = 0, kept_send = 0, kept_recv = 0, other_tgid = 0;
  for (const auto& rec : read_trace(t.path)) {
    const uint16_t type = rec.h().type;
    if (type < 0x0100) continue;  // stream records
    if (static_cast<pid_t>(rec.h().tgid) != kept) ++other_tgid;
    if (has_ports(rec, kUdpSrc, kUdpDst)) ++filtered_out;
    if (has_ports(rec, kKeptSrc, kKeptDst) && type == MAGNET_EV_NET_SOCK_SEND) ++kept_send;
    // The receiver is another process: none of its records either.
    if (has_ports(rec, kKeptDst, kKeptSrc) || (has_ports(rec, kKeptSrc, kKeptDst) &&
                                               type == MAGNET_EV_NET_SOCK_RECV))
      ++kept_recv;
  }
  EXPECT_EQ(filtered_out, 0) << "records of the filtered-out process";
  EXPECT_EQ(kept_send, n_kept) << "every send of the kept process is recorded";
  EXPECT_EQ(kept_recv, 0) << "records of the kept flow's receiver (another process)";
  EXPECT_EQ(other_tgid, 0) << "records of any process but the kept one";
}

TEST_F(NetnsCapture, SamplingOneInTenAtTheSocketLayer) {
  veth_pair v;
  temp_trace t;
  auto rec_proc = start_record(t.path, {"--probes", "net.sock.send", "--sample", "10"});
  udp_exchange(v, 200, 100, false);
  ASSERT_EQ(rec_proc->stop(SIGINT), 0);
  int ours = 0;
  for (const auto& r : read_trace(t.path))
    if (has_ports(r, kUdpSrc, kUdpDst)) {
      ++ours;
      EXPECT_TRUE(r.h().flags & MAGNET_RF_SAMPLED);
    }
  // 1-in-10 per CPU: the sender may migrate between the 2 CPUs.
  EXPECT_GE(ours, 200 / 10 - 2);
  EXPECT_LE(ours, 200 / 10 + 2);
}

// ---------------------------------------------------------------- packet capture

// "aa:bb:..." of device @dev in namespace @ns, as bytes.
std::vector<uint8_t> mac_of(const std::string& ns, const std::string& dev) {
  auto r = test::run({"ip", "-n", ns, "-o", "link", "show", dev});
  std::vector<uint8_t> mac;
  auto at = r.out.find("link/ether ");
  if (at == std::string::npos) return mac;
  for (size_t i = at + 11; mac.size() < 6 && i + 2 <= r.out.size(); i += 3)
    mac.push_back(static_cast<uint8_t>(std::stoul(r.out.substr(i, 2), nullptr, 16)));
  return mac;
}

std::vector<uint8_t> unhex(const std::string& s) {
  std::vector<uint8_t> b;
  for (size_t i = 0; i + 2 <= s.size(); i += 2)
    b.push_back(static_cast<uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
  return b;
}

// The frame every datagram ns_a:5000 -> ns_b:6000 of @size bytes of 'm'
// (test::udp_exchange) is on the wire, cut at @snap bytes; the IP id and
// checksum (bytes 18-19, 24-25) and the UDP checksum (40-41) vary and are
// checked apart.
std::vector<uint8_t> expected_frame(const std::vector<uint8_t>& src_mac,
                                    const std::vector<uint8_t>& dst_mac, int size, size_t snap) {
  std::vector<uint8_t> f(dst_mac);
  f.insert(f.end(), src_mac.begin(), src_mac.end());
  const uint16_t ip_len = static_cast<uint16_t>(28 + size), udp_len = static_cast<uint16_t>(8 + size);
  const uint8_t hdrs[] = {0x08, 0x00,                                         // IPv4
                          0x45, 0x00, uint8_t(ip_len >> 8), uint8_t(ip_len),  // ver/ihl, tos, len
                          0, 0, 0x40, 0x00, 64, 17, 0, 0,                     // id, DF, ttl, udp, csum
                          10, 199, 0, 1, 10, 199, 0, 2,                       // addresses
                          uint8_t(kUdpSrc >> 8), uint8_t(kUdpSrc & 0xff),
                          uint8_t(kUdpDst >> 8), uint8_t(kUdpDst & 0xff),
                          uint8_t(udp_len >> 8), uint8_t(udp_len), 0, 0};
  f.insert(f.end(), std::begin(hdrs), std::end(hdrs));
  f.resize(std::max(f.size(), snap), 'm');
  f.resize(snap);
  return f;
}

// The IPv4 header checksum of @ip (20 bytes) folds to 0xffff when intact.
bool ip_checksum_ok(const uint8_t* ip) {
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (uint32_t{ip[i]} << 8) | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return sum == 0xffff;
}

// `magnet record --snap N` and `magnet dump --json`: each datagram is one
// net.pkt.xmit record on the sender's veth and one net.pkt.recv on the
// receiver's, with the lengths of the frame and its first N bytes exactly as
// they were on the wire (MAC addresses, IPv4 and UDP headers, payload).
// @only_rx: `-i` the receiver's veth, recording inside its namespace (as
// tcpdump -i): its packets and no other device's.
void snap_capture(int n, int size, size_t snap, bool only_rx = false) {
  veth_pair v;
  temp_trace t;
  const std::string pid = std::to_string(getpid());
  std::vector<std::string> argv = {MAGNET_BIN, "record", "-o", t.path, "--snap", std::to_string(snap)};
  if (only_rx) {
    argv.insert(argv.begin(), {"ip", "netns", "exec", v.ns_b});
    argv.insert(argv.end(), {"-i", ("mgtb" + pid).substr(0, 15)});
  }
  test::child rec_proc(argv);
  ASSERT_TRUE(rec_proc.wait_for_stderr("magnet: recording")) << rec_proc.stderr_text();
  auto x = test::udp_exchange(v, n, size, kUdpSrc, kUdpDst, true);
  ASSERT_EQ(x.tx_rc, 0);
  ASSERT_EQ(x.rx_rc, 0);
  ASSERT_EQ(rec_proc.stop(SIGINT), 0) << rec_proc.stderr_text();

  auto mac_a = mac_of(v.ns_a, ("mgta" + pid).substr(0, 15));
  auto mac_b = mac_of(v.ns_b, ("mgtb" + pid).substr(0, 15));
  ASSERT_EQ(mac_a.size(), 6u);
  ASSERT_EQ(mac_b.size(), 6u);
  const auto want = expected_frame(mac_a, mac_b, size, snap);
  auto dump = test::run({MAGNET_BIN, "dump", t.path, "--json"});
  ASSERT_EQ(dump.status, 0) << dump.err;
  std::istringstream in(dump.out);
  std::map<std::string, int> count;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    const std::string ev = j["event"];
    if (ev == "stream.lost") ADD_FAILURE() << "lost records: " << line;
    if (ev != "net.pkt.xmit" && ev != "net.pkt.recv") continue;
    const bool xmit = ev == "net.pkt.xmit";
    if (only_rx && j["ifindex"] != v.ifindex_b) ADD_FAILURE() << "-i: another device's packet: " << line;
    if (j["ifindex"] != (xmit ? v.ifindex_a : v.ifindex_b)) continue;  // another device's
    SCOPED_TRACE(line);
    ++count[ev];
    EXPECT_EQ(j["wire_len"], 14 + 28 + size);
    EXPECT_EQ(j["size"], (xmit ? 14 : 0) + 28 + size) << "skb->len: the MAC header is pulled on receive";
    EXPECT_EQ(j["cap_len"], snap);
    EXPECT_EQ(j["mac_len"], 14);
    EXPECT_EQ(j["l3proto"], 0x0800);
    auto got = unhex(j["data"]);
    ASSERT_EQ(got.size(), snap);
    EXPECT_TRUE(ip_checksum_ok(got.data() + 14)) << "IPv4 header copied intact";
    for (size_t i : {18, 19, 24, 25, 40, 41})
      if (i < snap) got[i] = 0;  // id and checksums: see expected_frame
    EXPECT_EQ(got, want);
  }
  EXPECT_EQ(count["net.pkt.xmit"], only_rx ? 0 : n) << "one record per datagram on the sender's veth";
  EXPECT_EQ(count["net.pkt.recv"], n) << "one record per datagram on the receiver's veth";
}

TEST_F(NetnsCapture, SnapRecordsEveryPacketWithItsFirstBytesAsOnTheWire) { snap_capture(200, 1000, 64); }

// A snap length that is not a multiple of 8 (the record is padded) and
// longer than the headers (the payload's bytes follow them).
TEST_F(NetnsCapture, SnapOfAnOddLengthKeepsExactlyThatMany) { snap_capture(50, 300, 93); }

// -i DEV: only that device of the namespace magnet record runs in, the
// way overhead.sh's packet mode compares with tcpdump -i.
TEST_F(NetnsCapture, SnapOnOneInterfaceRecordsThatDeviceOnly) { snap_capture(50, 500, 96, true); }

}  // namespace
}  // namespace magnet
