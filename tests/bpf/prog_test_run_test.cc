// Tier 2: the probes' shared logic (filters, sampling, aggregation, VM
// tagging, loss accounting) driven through BPF_PROG_TEST_RUN with crafted
// packets: seeded control state in, expected return value and records out.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "magnet/capture/capture.h"
#include "magnet/capture/consumer.h"
#include "magnet/events.h"
#include "magnet/flow.h"
#include "magnet/record.h"

namespace magnet::host {
namespace {

struct packet_spec {
  int family = 4;
  int proto = IPPROTO_UDP;
  uint16_t sport = 5000, dport = 6000;
  uint32_t payload = 100;
  uint16_t ethertype = ETH_P_IP;
};

// Ethernet + IP + UDP/TCP + payload, as BPF_PROG_TEST_RUN wants it.
std::vector<uint8_t> make_packet(const packet_spec& s) {
  std::vector<uint8_t> p(14, 0);
  uint16_t et = htons(s.ethertype);
  std::memcpy(&p[12], &et, 2);
  size_t l4len = (s.proto == IPPROTO_TCP ? 20 : 8) + s.payload;
  if (s.ethertype == ETH_P_ARP) {
    p.resize(14 + 28, 0);
    return p;
  }
  if (s.family == 4) {
    iphdr ip{};
    ip.version = 4;
    ip.ihl = 5;
    ip.ttl = 64;
    ip.protocol = static_cast<uint8_t>(s.proto);
    ip.tot_len = htons(static_cast<uint16_t>(20 + l4len));
    ip.id = htons(0x4242);
    ip.saddr = htonl(0x0a000001);
    ip.daddr = htonl(0x0a000002);
    p.insert(p.end(), reinterpret_cast<uint8_t*>(&ip), reinterpret_cast<uint8_t*>(&ip) + 20);
  } else {
    ipv6hdr ip{};
    ip.version = 6;
    ip.nexthdr = static_cast<uint8_t>(s.proto);
    ip.hop_limit = 64;
    ip.payload_len = htons(static_cast<uint16_t>(l4len));
    inet_pton(AF_INET6, "fd00::1", &ip.saddr);
    inet_pton(AF_INET6, "fd00::2", &ip.daddr);
    p.insert(p.end(), reinterpret_cast<uint8_t*>(&ip), reinterpret_cast<uint8_t*>(&ip) + 40);
  }
  if (s.proto == IPPROTO_TCP) {
    tcphdr t{};
    t.source = htons(s.sport);
    t.dest = htons(s.dport);
    t.seq = htonl(123456789);
    t.doff = 5;
    t.ack = 1;
    t.psh = 1;
    p.insert(p.end(), reinterpret_cast<uint8_t*>(&t), reinterpret_cast<uint8_t*>(&t) + 20);
  } else {
    udphdr u{};
    u.source = htons(s.sport);
    u.dest = htons(s.dport);
    u.len = htons(static_cast<uint16_t>(l4len));
    p.insert(p.end(), reinterpret_cast<uint8_t*>(&u), reinterpret_cast<uint8_t*>(&u) + 8);
  }
  p.resize(p.size() + s.payload, 0xab);
  return p;
}

class ProgTestRun : public ::testing::Test {
 protected:
  void SetUp() override { open(64 * 1024); }

  void open(size_t ring, std::set<uint16_t> probes = {}) {
    cons_.reset();
    cap_.reset();
    capture_options o;
    o.ring_bytes = ring;
    o.probes = std::move(probes);
    auto c = capture::open(o);
    if (!c && c.err().code == EPERM) GTEST_SKIP() << c.err().message;
    ASSERT_TRUE(c) << c.err().message;
    cap_ = std::move(*c);
    auto k = ring_consumer::create(cap_->ringbuf_fd(), *cap_, [this](std::span<const uint8_t> b) {
      ++batches_;
      for (size_t off = 0; off < b.size(); off += hdr_of(b.data() + off).len)
        recs_.emplace_back(b.data() + off, b.data() + off + hdr_of(b.data() + off).len);
    });
    ASSERT_TRUE(k) << k.err().message;
    cons_ = std::move(*k);
    prog_ = cap_->program_fd("l4_recv_cgskb");
    ASSERT_TRUE(!o.probes.empty() || prog_ >= 0);
  }

  // Runs the cgroup_skb l4.recv program @n times on @pkt; returns its verdict.
  int run(const std::vector<uint8_t>& pkt, int n = 1) {
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt.data(),
                .data_size_in = static_cast<__u32>(pkt.size()), .repeat = static_cast<int>(n));
    int err = bpf_prog_test_run_opts(prog_, &o);
    EXPECT_EQ(err, 0) << std::strerror(-err);
    return static_cast<int>(o.retval);
  }

  std::vector<std::vector<uint8_t>> drain() {
    recs_.clear();
    auto r = cons_->drain();
    EXPECT_TRUE(r) << r.err().message;
    return recs_;
  }

  std::vector<std::vector<uint8_t>> events(uint16_t type) {
    std::vector<std::vector<uint8_t>> out;
    for (auto& r : drain())
      if (hdr_of(r.data()).type == type) out.push_back(r);
    return out;
  }

  const magnet_pkt& pkt_of(const std::vector<uint8_t>& r) {
    return *reinterpret_cast<const magnet_pkt*>(r.data() + sizeof(magnet_hdr));
  }

  std::unique_ptr<capture> cap_;
  std::unique_ptr<ring_consumer> cons_;
  std::vector<std::vector<uint8_t>> recs_;
  int batches_ = 0;
  int prog_ = -1;
  static constexpr uint16_t kT = MAGNET_EV_NET_L4_RECV;
};

// Keeps the calling thread on CPU 0 while it lives (BPF_PROG_TEST_RUN runs on
// the caller's CPU), then lets it run anywhere again.
struct on_cpu0 {
  cpu_set_t saved;
  bool ok = false;
  on_cpu0() {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    ok = sched_getaffinity(0, sizeof saved, &saved) == 0 &&
         sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~on_cpu0() {
    if (ok) sched_setaffinity(0, sizeof saved, &saved);
  }
  on_cpu0(const on_cpu0&) = delete;
  on_cpu0& operator=(const on_cpu0&) = delete;
};

TEST_F(ProgTestRun, UdpDatagramBecomesOneRecordWithItsHeaders) {
  cap_->arm(kT, MAGNET_MODE_STREAM);
  EXPECT_EQ(run(make_packet({})), 1) << "the probe never drops traffic";
  auto recs = events(kT);
  ASSERT_EQ(recs.size(), 1u);
  const auto& h = hdr_of(recs[0].data());
  const auto& p = pkt_of(recs[0]);
  EXPECT_EQ(h.size, 100) << "l4 size is the transport payload";
  EXPECT_TRUE(h.flags & MAGNET_RF_UDP);
  EXPECT_FALSE(h.flags & MAGNET_RF_SAMPLED);
  EXPECT_EQ(h.len, sizeof(magnet_hdr) + sizeof(magnet_pkt));
  EXPECT_EQ(p.ip_version, 4);
  EXPECT_EQ(p.protocol, IPPROTO_UDP);
  EXPECT_EQ(p.sport, 5000);
  EXPECT_EQ(p.dport, 6000);
  EXPECT_EQ(p.ip_id, 0x4242);
  EXPECT_EQ(p.tot_len, 128);
  uint8_t sa[16] = {10, 0, 0, 1}, da[16] = {10, 0, 0, 2};
  EXPECT_EQ(0, std::memcmp(p.saddr, sa, 16));
  EXPECT_EQ(0, std::memcmp(p.daddr, da, 16));
  EXPECT_EQ(h.abstract_id, magnet_flow_id(sa, da, 5000, 6000, IPPROTO_UDP))
      << "user space can compute the same flow id";
}

TEST_F(ProgTestRun, TcpSegmentCarriesSequenceAndFlags) {
  cap_->arm(kT, MAGNET_MODE_STREAM);
  run(make_packet({.proto = IPPROTO_TCP, .payload = 300}));
  auto recs = events(kT);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_TRUE(hdr_of(recs[0].data()).flags & MAGNET_RF_TCP);
  EXPECT_EQ(hdr_of(recs[0].data()).size, 300);
  EXPECT_EQ(pkt_of(recs[0]).tcp_seq, 123456789u);
  EXPECT_EQ(pkt_of(recs[0]).tcp_flags, 0x18) << "PSH|ACK";
}

TEST_F(ProgTestRun, Ipv6Datagram) {
  cap_->arm(kT, MAGNET_MODE_STREAM);
  run(make_packet({.family = 6, .ethertype = ETH_P_IPV6}));
  auto recs = events(kT);
  ASSERT_EQ(recs.size(), 1u);
  const auto& h = hdr_of(recs[0].data());
  EXPECT_TRUE(h.flags & MAGNET_RF_IPV6);
  EXPECT_EQ(h.size, 100);
  EXPECT_EQ(pkt_of(recs[0]).ip_version, 6);
  EXPECT_EQ(pkt_of(recs[0]).daddr[15], 2);
}

TEST_F(ProgTestRun, NonIpTrafficIsIgnored) {
  cap_->arm(kT, MAGNET_MODE_STREAM);
  EXPECT_EQ(run(make_packet({.ethertype = ETH_P_ARP})), 1);
  EXPECT_TRUE(events(kT).empty());
}

TEST_F(ProgTestRun, DisabledProbeEmitsAndCountsNothing) {
  cap_->arm(kT, 0);
  run(make_packet({}), 10);
  EXPECT_TRUE(events(kT).empty());
  uint64_t seen = 0;
  for (auto& s : cap_->probe_state(MAGNET_P_NET_L4_RECV)) seen += s.seen;
  EXPECT_EQ(seen, 0u);
}

TEST_F(ProgTestRun, AggregationOnlyCountsInKernelAndCopiesNothing) {
  cap_->arm(kT, MAGNET_MODE_AGGREGATE);
  run(make_packet({.payload = 250}), 40);
  EXPECT_TRUE(events(kT).empty());
  auto agg = cap_->aggregate(MAGNET_P_NET_L4_RECV);
  ASSERT_EQ(agg.count(0), 1u);
  EXPECT_EQ(agg[0].events, 40u);
  EXPECT_EQ(agg[0].bytes, 40u * 250);
}

TEST_F(ProgTestRun, OneInNSamplingKeepsExactlyEveryNth) {
  cap_->arm(kT, MAGNET_MODE_STREAM | MAGNET_MODE_AGGREGATE);
  cap_->set_sampling(kT, 4, 0);
  run(make_packet({}), 12);  // repeat runs on one CPU
  auto recs = events(kT);
  EXPECT_EQ(recs.size(), 3u);
  for (auto& r : recs) EXPECT_TRUE(hdr_of(r.data()).flags & MAGNET_RF_SAMPLED);
  EXPECT_EQ(cap_->aggregate(MAGNET_P_NET_L4_RECV)[0].events, 12u)
      << "aggregation counts every event, sampled or not";
}

TEST_F(ProgTestRun, TimeSamplingKeepsAtMostOnePerInterval) {
  cap_->arm(kT, MAGNET_MODE_STREAM);
  cap_->set_sampling(kT, 0, 3'600'000'000'000ull);  // one per hour
  run(make_packet({}), 50);
  EXPECT_EQ(events(kT).size(), 1u);
}

TEST_F(ProgTestRun, AbstractIdFilter) {
  cap_->arm(kT, MAGNET_MODE_STREAM);
  uint8_t sa[16] = {10, 0, 0, 1}, da[16] = {10, 0, 0, 2};
  uint64_t flow = magnet_flow_id(sa, da, 5000, 6000, IPPROTO_UDP);
  ASSERT_TRUE(cap_->set_filter_sets(MAGNET_FK_ABSTRACT, {}, {}, {}, {}, {flow}));
  run(make_packet({}));                      // the flow: kept
  run(make_packet({.sport = 5001}));         // another flow: dropped in kernel
  auto recs = events(kT);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(pkt_of(recs[0]).sport, 5000);
}

TEST_F(ProgTestRun, VmTaggingByIfindexAndVmFilter) {
  cap_->arm(kT, MAGNET_MODE_STREAM);
  ASSERT_TRUE(cap_->set_filter_sets(MAGNET_FK_VM, {}, {}, {}, {5}, {}));
  run(make_packet({}));
  EXPECT_TRUE(events(kT).empty()) << "host traffic is vm 0, filtered out";
  ASSERT_TRUE(cap_->tag_vm_ifindex(1 /* lo: BPF_PROG_TEST_RUN's device */, 5));
  run(make_packet({}));
  auto recs = events(kT);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(hdr_of(recs[0].data()).vm_id, 5u);
  ASSERT_TRUE(cap_->untag_vm(5));
  run(make_packet({}));
  EXPECT_TRUE(events(kT).empty()) << "untagged again";
}

// A device is (network namespace, ifindex): BPF_PROG_TEST_RUN's device is
// the caller's namespace's lo, ifindex 1 in every namespace, and its socket
// is in that namespace too.  Tagging our lo must not tag another
// namespace's, and a tag naming the other namespace applies there only.
TEST_F(ProgTestRun, VmTaggingByIfindexIsPerNetworkNamespace) {
  cap_->arm(kT, MAGNET_MODE_STREAM);
  ASSERT_NE(cap_->netns_ino(), 0u);
  auto refused = cap_->tag_vm_ifindex(0, 1, 7);
  ASSERT_FALSE(refused) << "netns 0 names no namespace";
  EXPECT_EQ(refused.err().code, EINVAL);
  ASSERT_TRUE(cap_->tag_vm_ifindex(1 /* our lo */, 5));

  // In a thread of its own, in a new network namespace: its lo is
  // ifindex 1 as well.  Only this thread changes namespace.
  struct {
    int unshare_errno = 0;
    uint32_t ino = 0;
    std::vector<uint32_t> before, after;  // vm ids of the records
  } other;
  auto vms = [this] {
    std::vector<uint32_t> v;
    for (auto& r : events(kT)) v.push_back(hdr_of(r.data()).vm_id);
    return v;
  };
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      other.unshare_errno = errno;
      return;
    }
    struct stat st;
    if (stat("/proc/thread-self/ns/net", &st) == 0) other.ino = static_cast<uint32_t>(st.st_ino);
    run(make_packet({}));
    other.before = vms();
    if (cap_->tag_vm_ifindex(other.ino, 1, 6)) {
      run(make_packet({}));
      other.after = vms();
    }
  });
  t.join();
  if (other.unshare_errno)
    GTEST_SKIP() << "unshare(CLONE_NEWNET): " << std::strerror(other.unshare_errno);
  ASSERT_NE(other.ino, 0u);
  ASSERT_NE(other.ino, cap_->netns_ino());
  EXPECT_EQ(other.before, std::vector<uint32_t>{0})
      << "another namespace's ifindex 1 is not our lo";
  EXPECT_EQ(other.after, std::vector<uint32_t>{6}) << "tagged in its own namespace";

  run(make_packet({}));
  EXPECT_EQ(vms(), std::vector<uint32_t>{5}) << "our lo keeps its own tag";
  ASSERT_TRUE(cap_->untag_vm(5));
  run(make_packet({}));
  EXPECT_EQ(vms(), std::vector<uint32_t>{0}) << "untagged";
  ASSERT_TRUE(cap_->untag_vm(6));
}

TEST_F(ProgTestRun, CpuFilter) {
  on_cpu0 pin;
  ASSERT_TRUE(pin.ok);
  cap_->arm(kT, MAGNET_MODE_STREAM);
  ASSERT_TRUE(cap_->set_filter_sets(MAGNET_FK_CPU, {1}, {}, {}, {}, {}));
  run(make_packet({}));
  EXPECT_TRUE(events(kT).empty());
  ASSERT_TRUE(cap_->set_filter_sets(MAGNET_FK_CPU, {0}, {}, {}, {}, {}));
  run(make_packet({}));
  auto recs = events(kT);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(hdr_of(recs[0].data()).cpu, 0);
}

TEST_F(ProgTestRun, FullRingDropsAreCountedAndReportedExactly) {
  open(4096);  // the smallest ring: 4 KiB holds ~36 records of 112 bytes
  cap_->arm(kT, MAGNET_MODE_STREAM);
  const int n = 1000;
  run(make_packet({}), n);
  auto recs = drain();
  uint64_t got = 0, lost = 0;
  for (auto& r : recs) {
    const auto& h = hdr_of(r.data());
    if (h.type == kT) ++got;
    if (h.type == MAGNET_EV_LOST) {
      const auto& l = *reinterpret_cast<const magnet_lost*>(r.data() + sizeof(magnet_hdr));
      EXPECT_EQ(l.probe_type, kT);
      EXPECT_EQ(l.reason, static_cast<uint32_t>(MAGNET_LOST_RINGBUF_FULL));
      EXPECT_LE(l.first_ts_ns, l.last_ts_ns);
      lost += l.count;
    }
  }
  EXPECT_GT(lost, 0u);
  EXPECT_LT(got, static_cast<uint64_t>(n));
  EXPECT_EQ(got + lost, static_cast<uint64_t>(n)) << "every event is either recorded or counted";
  EXPECT_EQ(cons_->lost(), lost);
}

// The per-VM stream quota: a VM gets its burst and then nothing more until
// its bucket fills again; what it loses is counted as its own loss (a lost
// record of that VM), still counted by the aggregates; another VM has its
// own bucket, and host events have none.
TEST_F(ProgTestRun, VmQuotaAdmitsItsBurstAndCountsTheRestAsThatVmsLoss) {
  on_cpu0 pin;  // one CPU: one bucket per VM
  ASSERT_TRUE(pin.ok);
  cap_->arm(kT, MAGNET_MODE_STREAM | MAGNET_MODE_AGGREGATE);
  cap_->set_vm_quota(1.0, 10.0);  // one event a second, bursts of ten
  ASSERT_TRUE(cap_->tag_vm_ifindex(1 /* lo */, 5));
  run(make_packet({}), 50);
  uint64_t got = 0, lost = 0;
  for (auto& r : drain()) {
    const auto& h = hdr_of(r.data());
    if (h.type == kT) {
      EXPECT_EQ(h.vm_id, 5u);
      ++got;
    }
    if (h.type == MAGNET_EV_LOST) {
      const auto& l = *reinterpret_cast<const magnet_lost*>(r.data() + sizeof(magnet_hdr));
      EXPECT_EQ(l.reason, static_cast<uint32_t>(MAGNET_LOST_VM_QUOTA));
      EXPECT_EQ(h.vm_id, 5u);
      lost += l.count;
    }
  }
  EXPECT_EQ(got, 10u) << "the burst";
  EXPECT_EQ(lost, 40u) << "the rest, counted";
  EXPECT_EQ(cap_->aggregate(MAGNET_P_NET_L4_RECV)[5].events, 50u) << "aggregates count every event";
  auto losses = cap_->vm_losses({5});
  EXPECT_EQ(losses[5].first, 40u);
  EXPECT_EQ(losses[5].second, 0u);

  ASSERT_TRUE(cap_->untag_vm(5));
  ASSERT_TRUE(cap_->tag_vm_ifindex(1, 6));
  run(make_packet({}), 20);
  EXPECT_EQ(events(kT).size(), 10u) << "VM 6 has its own bucket";
  ASSERT_TRUE(cap_->untag_vm(6));
  run(make_packet({}), 20);
  EXPECT_EQ(events(kT).size(), 20u) << "host events have no quota";
  cap_->set_vm_quota(0, 0);
  ASSERT_TRUE(cap_->tag_vm_ifindex(1, 5));
  run(make_packet({}), 20);
  EXPECT_EQ(events(kT).size(), 20u) << "quota off";
}

// The consumer's own ring reader: a pass larger than one batch (8 MiB) is
// handed over in several, and records that wrap around the end of the ring
// come out whole and in order.
TEST_F(ProgTestRun, ConsumerDrainsLargePassesInOrderAcrossTheRingsEnd) {
  open(16u << 20);  // 112 bytes per record in the ring: ~150 k fit
  // A long repeated test run may be rescheduled between repetitions, and on
  // another CPU its records would differ in hdr.cpu: keep it on one.
  on_cpu0 pin;
  ASSERT_TRUE(pin.ok);
  cap_->arm(kT, MAGNET_MODE_STREAM);
  const int n = 120000;  // 12.5 MB of records, 13.4 MB of ring
  auto pkt = make_packet({});
  for (int pass = 0; pass < 2; ++pass) {  // the second pass wraps around
    batches_ = 0;
    run(pkt, n);
    auto recs = drain();
    ASSERT_EQ(recs.size(), static_cast<size_t>(n)) << "pass " << pass;
    EXPECT_GE(batches_, 2) << "a pass over 8 MiB comes in more than one batch";
    uint64_t prev = 0;
    for (auto& r : recs) {
      const auto& h = hdr_of(r.data());
      ASSERT_EQ(h.type, kT);
      ASSERT_EQ(h.len, r.size());
      ASSERT_EQ(h.size, 100);
      ASSERT_GE(h.ts_ns, prev) << "one CPU produced them in this order";
      prev = h.ts_ns;
      // Same packet, same CPU, same task: identical but for the timestamp.
      ASSERT_EQ(std::memcmp(r.data() + 8, recs[0].data() + 8, r.size() - 8), 0);
    }
  }
  EXPECT_EQ(cons_->lost(), 0u);
}

// Block requests, through the raw_tp programs (BPF_PROG_TEST_RUN runs
// raw_tp, not tp_btf ones) with a made-up request pointer: the programs
// key their state by it and read nothing readable from it.  Each step runs
// in a child process of its own, tagged as a VM of its own: the submitter
// of a record is told by its VM.
class BlockProgTestRun : public ProgTestRun {
 protected:
  void SetUp() override {
    setenv("MAGNET_DENY_METHODS", "tp_btf", 1);
    open(64 * 1024, {MAGNET_EV_BLK_ISSUE, MAGNET_EV_BLK_COMPLETE});
    unsetenv("MAGNET_DENY_METHODS");
    if (IsSkipped() || HasFatalFailure()) return;
    issue_ = cap_->program_fd("blk_issue_raw");
    requeue_ = cap_->program_fd("blk_requeue_raw");
    complete_ = cap_->program_fd("blk_complete_raw");
    ASSERT_GE(issue_, 0);
    ASSERT_GE(requeue_, 0);
    ASSERT_GE(complete_, 0);
    cap_->arm(MAGNET_EV_BLK_ISSUE, MAGNET_MODE_STREAM);
    cap_->arm(MAGNET_EV_BLK_COMPLETE, MAGNET_MODE_STREAM);
  }

  struct step {
    int prog;
    uint64_t args[3];
  };

  // Runs @steps in a new process tagged as VM @vm; returns its tgid.
  pid_t run_as_vm(uint32_t vm, const std::vector<step>& steps) {
    int go[2];
    EXPECT_EQ(pipe(go), 0);
    pid_t pid = fork();
    if (pid == 0) {  // only system calls from here on
      char c;
      close(go[1]);
      if (read(go[0], &c, 1) != 1) _exit(2);
      for (const auto& s : steps) {
        LIBBPF_OPTS(bpf_test_run_opts, o, .ctx_in = s.args, .ctx_size_in = sizeof s.args);
        if (bpf_prog_test_run_opts(s.prog, &o) != 0) _exit(3);
      }
      _exit(0);
    }
    close(go[0]);
    EXPECT_TRUE(cap_->tag_vm_tgid(static_cast<uint32_t>(pid), vm));
    EXPECT_EQ(write(go[1], "g", 1), 1);
    close(go[1]);
    int st = 0;
    EXPECT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
    return pid;
  }

  // The block records of the processes in @tgids, in order.
  std::vector<std::vector<uint8_t>> block_records(const std::set<pid_t>& tgids) {
    std::vector<std::vector<uint8_t>> out;
    for (auto& r : drain()) {
      const auto& h = hdr_of(r.data());
      if ((h.type == MAGNET_EV_BLK_ISSUE || h.type == MAGNET_EV_BLK_COMPLETE) &&
          tgids.count(static_cast<pid_t>(h.tgid)))
        out.push_back(r);
    }
    return out;
  }

  int issue_ = -1, requeue_ = -1, complete_ = -1;
};

// A request the driver gives back (its queue full) is issued again from
// whichever context runs the queue next: it stays its submitter's, up to
// its completion.  A request issued again without a requeue is a new
// request at the same address: the issuing context's.
TEST_F(BlockProgTestRun, ARequeuedRequestKeepsItsSubmitter) {
  const uint64_t rq = 0x1000;  // a user address: never readable as a kernel one
  pid_t a = run_as_vm(5, {{issue_, {rq}}});
  pid_t b = run_as_vm(6, {{requeue_, {rq}}, {issue_, {rq}}, {complete_, {rq, 0, 4096}}});
  auto recs = block_records({a, b});
  ASSERT_EQ(recs.size(), 3u);
  for (const auto& r : recs) {
    EXPECT_EQ(hdr_of(r.data()).vm_id, 5u) << "type " << hdr_of(r.data()).type;
    EXPECT_EQ(hdr_of(r.data()).tgid, static_cast<uint32_t>(a));
  }
  EXPECT_EQ(hdr_of(recs[2].data()).type, MAGNET_EV_BLK_COMPLETE);
  const auto& done = *reinterpret_cast<const magnet_blk*>(recs[2].data() + sizeof(magnet_hdr));
  EXPECT_EQ(done.nr_bytes, 4096u);
  EXPECT_GT(done.latency_ns, 0u) << "from its first issue";

  const uint64_t rq2 = 0x2000;
  pid_t c = run_as_vm(7, {{issue_, {rq2}}, {complete_, {rq2, 0, 512}}});
  pid_t d = run_as_vm(8, {{issue_, {rq2}}, {complete_, {rq2, 0, 512}}});
  recs = block_records({c, d});
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(hdr_of(recs[0].data()).vm_id, 7u);
  EXPECT_EQ(hdr_of(recs[1].data()).vm_id, 7u);
  EXPECT_EQ(hdr_of(recs[2].data()).vm_id, 8u) << "issued again after its completion: a new request";
  EXPECT_EQ(hdr_of(recs[3].data()).vm_id, 8u);

  // Requeued a second time: still the first submitter's.
  const uint64_t rq3 = 0x3000;
  pid_t e = run_as_vm(9, {{issue_, {rq3}}});
  pid_t f = run_as_vm(10, {{requeue_, {rq3}}, {issue_, {rq3}}, {requeue_, {rq3}}, {issue_, {rq3}},
                           {complete_, {rq3, 0, 512}}});
  recs = block_records({e, f});
  ASSERT_EQ(recs.size(), 4u);
  for (const auto& r : recs) EXPECT_EQ(hdr_of(r.data()).vm_id, 9u);
}

// A bio merged into a request already made never makes one, so what an
// earlier bio at its address left in blk_submitter is dropped as it merges:
// left there, it would name that bio's submitter for this bio's request
// when this bio comes first in its list (a front merge).
TEST_F(BlockProgTestRun, AMergedBioDropsWhatAnEarlierBioAtItsAddressLeft) {
  const int getrq = cap_->program_fd("blk_getrq_raw");
  const int back = cap_->program_fd("blk_backmerge_raw");
  const int front = cap_->program_fd("blk_frontmerge_raw");
  ASSERT_GE(getrq, 0);
  ASSERT_GE(back, 0);
  ASSERT_GE(front, 0);
  // The map, among those the getrq program uses.
  int submitters = -1;
  {
    uint32_t ids[16] = {};
    bpf_prog_info info = {};
    info.nr_map_ids = 16;
    info.map_ids = reinterpret_cast<uint64_t>(ids);
    uint32_t len = sizeof info;
    ASSERT_EQ(bpf_obj_get_info_by_fd(getrq, &info, &len), 0);
    for (uint32_t i = 0; i < std::min<uint32_t>(info.nr_map_ids, 16) && submitters < 0; ++i) {
      int fd = bpf_map_get_fd_by_id(ids[i]);
      if (fd < 0) continue;
      bpf_map_info mi = {};
      uint32_t mlen = sizeof mi;
      if (bpf_obj_get_info_by_fd(fd, &mi, &mlen) == 0 && std::string(mi.name) == "blk_submitter")
        submitters = fd;
      else
        close(fd);
    }
  }
  ASSERT_GE(submitters, 0) << "no map blk_submitter used by blk_getrq_raw";
  auto has = [&](uint64_t bio) {
    std::vector<uint8_t> v(256);
    return bpf_map_lookup_elem(submitters, &bio, v.data()) == 0;
  };
  const uint64_t bio1 = 0x4000, bio2 = 0x5000;  // user addresses: nothing read from them
  run_as_vm(11, {{getrq, {bio1}}, {getrq, {bio2}}});
  EXPECT_TRUE(has(bio1)) << "block_getrq keeps the submitter by its bio";
  EXPECT_TRUE(has(bio2));
  run_as_vm(12, {{back, {bio1}}});
  EXPECT_FALSE(has(bio1)) << "a back merge of a bio at that address";
  EXPECT_TRUE(has(bio2));
  run_as_vm(12, {{front, {bio2}}});
  EXPECT_FALSE(has(bio2)) << "a front merge of a bio at that address";
  close(submitters);
}

}  // namespace
}  // namespace magnet::host
