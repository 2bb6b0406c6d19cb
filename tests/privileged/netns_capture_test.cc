// Tier 3: real probes on this kernel, real traffic between two network
// namespaces joined by a veth pair, through the real `magnet` binary.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "magnet/events.h"
#include "magnet/flow.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"
#include "proc.h"

namespace magnet {
namespace {

using test::child;
using test::ns_task;
using test::veth_pair;

constexpr uint16_t kUdpSrc = 5000, kUdpDst = 6000, kTcpSrc = 5001, kTcpDst = 6001;

sockaddr_in addr(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

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

  // Starts `magnet record` and waits until its probes are attached.
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
    std::string a = v.addr_a, b = v.addr_b;
    ns_task rx(v.ns_b, [&](const std::function<void()>& ready) {
      int s = socket(AF_INET, SOCK_DGRAM, 0);
      int big = 8 << 20;
      setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
      auto sa = addr(b, kUdpDst);
      if (bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa)) return 2;
      // Connected, as iperf3's UDP server is: the socket then knows its peer
      // (an unconnected socket's receive records carry only the local end).
      auto peer = addr(a, kUdpSrc);
      if (connect(s, reinterpret_cast<sockaddr*>(&peer), sizeof peer)) return 4;
      timeval tv{5, 0};
      setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ready();
      std::vector<char> buf(65536);
      for (int i = 0; i < n; ++i)
        if (recv(s, buf.data(), buf.size(), 0) != size) return 3;
      return 0;
    });
    EXPECT_TRUE(rx.wait_ready());
    ns_task tx(v.ns_a, [&](const std::function<void()>&) {
      int s = socket(AF_INET, SOCK_DGRAM, 0);
      auto src = addr(a, kUdpSrc), dst = addr(b, kUdpDst);
      if (bind(s, reinterpret_cast<sockaddr*>(&src), sizeof src)) return 2;
      if (connect(s, reinterpret_cast<sockaddr*>(&dst), sizeof dst)) return 3;
      std::vector<char> buf(static_cast<size_t>(size), 'm');
      for (int i = 0; i < n; ++i) {
        if (send(s, buf.data(), buf.size(), 0) != size) return 4;
        if (pace && i % 50 == 49) usleep(1000);  // stay below the receiver's buffer
      }
      return 0;
    });
    pid_t txp = tx.pid(), rxp = rx.pid();
    EXPECT_EQ(tx.join(), 0) << "sender";
    EXPECT_EQ(rx.join(), 0) << "receiver got every datagram";
    return {txp, rxp};
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
  usleep(200000);
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
  std::string a = v.addr_a, b = v.addr_b;
  ns_task server(v.ns_b, [&](const std::function<void()>& ready) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    auto sa = addr(b, kTcpDst);
    if (bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || listen(s, 1)) return 2;
    ready();
    int c = accept(s, nullptr, nullptr);
    std::vector<char> buf(1 << 16);
    size_t got = 0;
    for (ssize_t k; (k = recv(c, buf.data(), buf.size(), 0)) > 0;) got += static_cast<size_t>(k);
    return got == total ? 0 : 3;
  });
  ASSERT_TRUE(server.wait_ready());
  ns_task client(v.ns_a, [&](const std::function<void()>&) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    auto src = addr(a, kTcpSrc), dst = addr(b, kTcpDst);
    if (bind(s, reinterpret_cast<sockaddr*>(&src), sizeof src)) return 2;
    if (connect(s, reinterpret_cast<sockaddr*>(&dst), sizeof dst)) return 3;
    std::vector<char> buf(total, 't');
    size_t off = 0;
    while (off < total) {
      ssize_t k = send(s, buf.data() + off, std::min<size_t>(total - off, 100000), 0);
      if (k <= 0) return 4;
      off += static_cast<size_t>(k);
    }
    close(s);
    return 0;
  });
  ASSERT_EQ(client.join(), 0);
  ASSERT_EQ(server.join(), 0) << "server received every byte";
  usleep(200000);
  ASSERT_EQ(rec_proc->stop(SIGINT), 0) << rec_proc->stderr_text();

  std::map<uint16_t, int64_t> bytes;
  int states = 0, lost = 0, retrans_segments = 0;
  for (const auto& r : read_trace(t.path)) {
    if (r.h().type == MAGNET_EV_LOST) ++lost;
    if (r.h().type == MAGNET_EV_NET_TCP_STATE) {
      const auto& s = r.p<magnet_tcp_state>();
      // tcp_probe fires on the receiving side of each direction's segments.
      if ((s.sport == kTcpSrc && s.dport == kTcpDst) || (s.sport == kTcpDst && s.dport == kTcpSrc))
        ++states;
      if (s.sport == kTcpSrc) retrans_segments += static_cast<int>(s.retrans_out);
    }
    if (!has_ports(r, kTcpSrc, kTcpDst)) continue;
    if (r.h().size > 0) bytes[r.h().type] += r.h().size;
  }
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(bytes[MAGNET_EV_NET_SOCK_SEND], static_cast<int64_t>(total));
  EXPECT_EQ(bytes[MAGNET_EV_NET_SOCK_RECV], static_cast<int64_t>(total));
  if (retrans_segments == 0) {
    EXPECT_EQ(bytes[MAGNET_EV_NET_L4_SEND], static_cast<int64_t>(total))
        << "segment payloads add up to the transfer";
    EXPECT_EQ(bytes[MAGNET_EV_NET_L4_RECV], static_cast<int64_t>(total));
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
  usleep(300000);
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
  // Filter on our own tgid: the traffic below comes from child processes,
  // so nothing of it may appear.
  auto rec_proc = start_record(
      t.path, {"--probes", "net.sock", "--filter", "tgid == " + std::to_string(getpid())});
  udp_exchange(v, 50, 100, false);
  usleep(200000);
  ASSERT_EQ(rec_proc->stop(SIGTERM), 0) << "SIGTERM stops as cleanly as SIGINT";
  int ours = 0;
  for (const auto& r : read_trace(t.path))
    if (has_ports(r, kUdpSrc, kUdpDst)) ++ours;
  EXPECT_EQ(ours, 0);
}

TEST_F(NetnsCapture, SamplingOneInTenAtTheSocketLayer) {
  veth_pair v;
  temp_trace t;
  auto rec_proc = start_record(t.path, {"--probes", "net.sock.send", "--sample", "10"});
  udp_exchange(v, 200, 100, false);
  usleep(200000);
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

}  // namespace
}  // namespace magnet
