// Tier 3: VM tagging by network device is per network namespace.  An
// ifindex names a device only within its namespace, so a VM's tap is
// (namespace, ifindex): a device of another namespace that has the same
// ifindex (a container's, another lab's) must never count as the VM's.
//
// Real probes, real traffic.  A veth end in our namespace with ifindex N is
// tagged for VM A.  Two other namespaces are joined by a veth pair whose
// ends both have ifindex N too: its traffic passes every packet probe and
// belongs to no VM, and so do the drops on it.  Then the tagged device
// carries traffic both ways and drops, which must still count for A (the
// positive control).  Each run goes through the
// count-only and the recording paths of the probes, with the preferred
// attach methods and with the raw tracepoint / bpf_probe_read_kernel ones.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "magnet/capture/capture.h"
#include "magnet/events.h"
#include "proc.h"

namespace magnet::host {
namespace {

constexpr uint32_t kOtherNsVm = 203;

struct deny_env {
  explicit deny_env(const char* v) { setenv("MAGNET_DENY_METHODS", v, 1); }
  ~deny_env() { unsetenv("MAGNET_DENY_METHODS"); }
  deny_env(const deny_env&) = delete;
  deny_env& operator=(const deny_env&) = delete;
};

// Runs a clean-up command when the test ends, however it ends (test::sh
// throws on a failed setup step; what was set up before is still undone).
struct undo {
  std::string cmd;
  explicit undo(std::string c) : cmd(std::move(c)) {}
  ~undo() { (void)std::system((cmd + " >/dev/null 2>&1").c_str()); }
  undo(const undo&) = delete;
  undo& operator=(const undo&) = delete;
};

// A named network namespace without IPv6 (no neighbour discovery traffic).
struct netns {
  std::string name;
  undo del;
  explicit netns(const std::string& n) : name(n), del("ip netns del " + n) {
    test::sh("ip netns add " + n);
    test::sh("ip netns exec " + n +
             " sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1");
    test::sh("ip -n " + n + " link set lo up");
  }
};

std::string ip_in(const std::string& ns) { return ns.empty() ? "ip " : "ip -n " + ns + " "; }

// A static neighbour entry @dev (in @ns) -> @peer_ip at @peer_dev's address
// (in @peer_ns): no ARP exchange while the test counts.
void static_neighbour(const std::string& ns, const std::string& dev, const std::string& peer_ip,
                      const std::string& peer_ns, const std::string& peer_dev) {
  test::sh(ip_in(ns) + "neigh replace " + peer_ip + " dev " + dev + " lladdr $(" +
           ip_in(peer_ns) + "-o link show " + peer_dev +
           " | sed -n 's/.*link\\/ether \\([0-9a-f:]*\\).*/\\1/p') nud permanent");
}

// @n datagrams from @src (in @ns) to a port nobody listens on at @dst: each
// is dropped where it arrives (no socket), with the receiving device.
int udp_to_closed_port(const std::string& ns, const std::string& src, const std::string& dst,
                       int n) {
  test::ns_task tx(ns, [&](const std::function<void()>&) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in from{}, to{};
    from.sin_family = to.sin_family = AF_INET;
    to.sin_port = htons(6399);
    if (inet_pton(AF_INET, src.c_str(), &from.sin_addr) != 1 ||
        inet_pton(AF_INET, dst.c_str(), &to.sin_addr) != 1)
      return 2;
    if (bind(s, reinterpret_cast<const sockaddr*>(&from), sizeof from)) return 3;
    char buf[100] = {};
    for (int i = 0; i < n; ++i) {  // unconnected: ICMP errors do not fail the next send
      if (sendto(s, buf, sizeof buf, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) !=
          static_cast<ssize_t>(sizeof buf))
        return 4;
      if (i % 50 == 49) usleep(1000);
    }
    return 0;
  });
  return tx.join();
}

// An ifindex no device of ours has; fresh namespaces have none this high
// (and test::veth_pair uses 1000000..2999999).
int free_ifindex() {
  int n = 3000000 + static_cast<int>(getpid() % 1000000);
  char name[IF_NAMESIZE];
  while (if_indextoname(static_cast<unsigned>(n), name)) ++n;
  return n;
}

void expect_only_our_device_is_the_vms(const char* deny, uint32_t mode) {
  deny_env env(deny);
  const std::string id = std::to_string(getpid());
  // Created before the capture: netfilter programs attach per namespace.
  netns p("magnet-np-" + id), c("magnet-nc-" + id), d("magnet-nd-" + id);
  const int ifindex = free_ifindex();
  const std::string n = std::to_string(ifindex);
  const std::string ours = "mgnr" + id, ours_peer = "mgnp" + id;
  const std::string dev_c = "mgnc" + id, dev_d = "mgnd" + id;
  // Our end and p on net.0/30, c and d on net.4/30 (apart, in their namespaces).
  const std::string net = "10.198." + std::to_string(getpid() % 250) + ".";

  // Ours: ifindex N in this namespace, left down until the positive control
  // so that nothing but that traffic can ever pass it.
  undo del_ours("ip link del " + ours);
  test::sh("ip link add " + ours + " index " + n + " type veth peer name " + ours_peer +
           " netns " + p.name);
  (void)test::run({"sysctl", "-qw", "net.ipv6.conf." + ours + ".disable_ipv6=1"});
  test::sh("ip addr add " + net + "1/30 dev " + ours);
  test::sh(ip_in(p.name) + "addr add " + net + "2/30 dev " + ours_peer);
  test::sh(ip_in(p.name) + "link set " + ours_peer + " up");
  // The colliding pair: both ends ifindex N, in c and d.
  test::sh("ip link add " + dev_c + " index " + n + " netns " + c.name + " type veth peer name " +
           dev_d + " index " + n + " netns " + d.name);
  for (const auto& [ns, dev, addr] :
       {std::tuple{c.name, dev_c, net + "5"}, std::tuple{d.name, dev_d, net + "6"}}) {
    test::sh(ip_in(ns) + "addr add " + addr + "/30 dev " + dev);
    test::sh(ip_in(ns) + "link set " + dev + " up");
    auto show = test::run({"ip", "-n", ns, "-o", "link", "show", dev});
    ASSERT_EQ(show.out.rfind(n + ": ", 0), 0u) << "not ifindex " << n << ": " << show.out;
  }
  static_neighbour(c.name, dev_c, net + "6", d.name, dev_d);
  static_neighbour(d.name, dev_d, net + "5", c.name, dev_c);

  auto opened = capture::open({});
  ASSERT_TRUE(opened) << opened.err().message;
  auto& cap = **opened;
  ASSERT_TRUE(cap.tag_vm_ifindex(static_cast<uint32_t>(ifindex), kOtherNsVm)) << "our device N is A's";
  const std::vector<uint16_t> probes = {MAGNET_EV_NET_DEV_XMIT, MAGNET_EV_NET_IP_SEND,
                                        MAGNET_EV_NET_DEV_RECV, MAGNET_EV_NET_IP_RECV,
                                        MAGNET_EV_NET_L4_RECV,  MAGNET_EV_NET_DROP};
  for (auto t : probes) ASSERT_TRUE(cap.set_mode(t, mode)) << event_name(t);

  // Another namespace's device N, both ways (xmit and IP output on c's N,
  // receive, IP input and delivery on d's N), and drops on d's N: seen,
  // and nobody's.
  const int count = 200, size = 600;
  auto x = test::udp_flow(c.name, net + "5", d.name, net + "6", count, size, 5300, 6300, true);
  ASSERT_EQ(x.tx_rc, 0) << "sender in " << c.name;
  ASSERT_EQ(x.rx_rc, 0) << "receiver in " << d.name << " got every datagram";
  ASSERT_EQ(udp_to_closed_port(c.name, net + "5", net + "6", count), 0);
  usleep(100000);
  for (auto t : probes) {
    auto agg = cap.aggregate(probe_slot(t));
    EXPECT_EQ(agg[kOtherNsVm].events, 0u) << event_name(t) << ": another namespace's ifindex "
                                    << n << " counted as the VM's";
    EXPECT_GE(agg[0].events, static_cast<uint64_t>(count))
        << event_name(t) << ": the probe saw that traffic, as no VM's";
  }

  // Positive control: our device N, out and in.
  test::sh("ip link set " + ours + " up");
  static_neighbour("", ours, net + "2", p.name, ours_peer);
  static_neighbour(p.name, ours_peer, net + "1", "", ours);
  auto out = test::udp_flow("", net + "1", p.name, net + "2", count, size, 5301, 6301, true);
  ASSERT_EQ(out.tx_rc, 0);
  ASSERT_EQ(out.rx_rc, 0);
  auto in = test::udp_flow(p.name, net + "2", "", net + "1", count, size, 5302, 6302, true);
  ASSERT_EQ(in.tx_rc, 0);
  ASSERT_EQ(in.rx_rc, 0);
  ASSERT_EQ(udp_to_closed_port(p.name, net + "2", net + "1", count), 0);
  usleep(100000);
  for (auto t : probes)
    EXPECT_GE(cap.aggregate(probe_slot(t))[kOtherNsVm].events, static_cast<uint64_t>(count))
        << event_name(t) << ": the tagged device's traffic is A's";
}

constexpr uint32_t kAgg = MAGNET_MODE_AGGREGATE;
// Records too: every event takes the probes' full path (records are left
// in the ring; only the counts are read).
constexpr uint32_t kAggAndRecords = MAGNET_MODE_AGGREGATE | MAGNET_MODE_STREAM;

TEST(NetdevTagging, AnotherNamespacesIfindexIsNotTheVms) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads BPF, creates namespaces)";
  expect_only_our_device_is_the_vms("", kAgg);
}

TEST(NetdevTagging, AnotherNamespacesIfindexIsNotTheVmsWhenRecording) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads BPF, creates namespaces)";
  expect_only_our_device_is_the_vms("", kAggAndRecords);
}

// As on kernels without tp_btf or bpf_rdonly_cast(p, 0): the namespace read
// through bpf_probe_read_kernel.
TEST(NetdevTagging, AnotherNamespacesIfindexIsNotTheVmsWithProbeReads) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads BPF, creates namespaces)";
  expect_only_our_device_is_the_vms("tp_btf,rdonly_mem", kAgg);
  if (HasFatalFailure()) return;
  expect_only_our_device_is_the_vms("tp_btf,rdonly_mem", kAggAndRecords);
}

}  // namespace
}  // namespace magnet::host
