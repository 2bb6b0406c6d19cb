// Per-VM metrics and the available-bandwidth model, from synthetic kernel
// counters and records with known answers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "magnet/metrics/link_model.h"
#include "magnet/metrics/sample_weights.h"
#include "magnet/event.h"
#include "magnet/metrics/vm_metrics.h"

namespace magnet::host {
namespace {

constexpr double C = 20e6;

TEST(LinkModel, InelasticOthersAreTakenOffTheCapacity) {
  EXPECT_DOUBLE_EQ(available_bps(C, {}, 1), C) << "alone";
  EXPECT_DOUBLE_EQ(available_bps(C, {{1, {0, 19e6, false}}}, 1), C) << "its own use is available to it";
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {0, 7e6, false}}}, 1), 13e6);
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {0, 7e6, true}}, {3, {0, 5e6, false}}}, 1), 8e6);
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {0, 25e6, true}}}, 1), 0) << "an overloaded link";
}

TEST(LinkModel, ElasticOthersLimitedByTheLinkGetAnEqualShare) {
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {19e6, 0, true}}}, 1), C / 2);
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {1e6, 0, true}}}, 1), C / 2)
      << "squeezed TCP still wants its share";
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {5e6, 0, true}}, {3, {5e6, 0, true}}}, 1), C / 3);
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {10e6, 6e6, true}}}, 1), (C - 6e6) / 2) << "mixed";
}

TEST(LinkModel, ElasticOthersLimitedElsewhereCountAtTheirRate) {
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {3e6, 0, false}}}, 1), 17e6);
  // Max-min: one that uses more than an equal share is cut to it.
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {15e6, 0, false}}}, 1), 10e6);
  EXPECT_DOUBLE_EQ(available_bps(C, {{2, {2e6, 0, false}}, {3, {15e6, 0, true}}}, 1), 9e6);
}

// link_share, what the tick uses, against the reference available_bps for
// every VM of random fleets: limited demands (infinite), inelastic totals
// above the capacity, VMs absent from the set, one VM alone, equal demands.
TEST(LinkModel, SharesEqualTheReferenceForEveryVm) {
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int fleet = 0; fleet < 400; ++fleet) {
    const double cap = fleet % 7 == 0 ? 0 : 1e6 + unit(rng) * 1e10;
    const size_t n = fleet % 50 == 0 ? 1 : 1 + rng() % 200;
    const double load = 0.1 + unit(rng) * 3;  // the fleet's offer over the capacity
    const bool equal = fleet % 5 == 0;
    std::map<uint32_t, link_usage> use;
    for (uint32_t v = 1; v <= n; ++v) {
      if (rng() % 10 == 0) continue;  // absent: asks with nothing of its own
      const double each = (cap > 0 ? cap : 1e9) * load / static_cast<double>(n);
      link_usage u;
      u.elastic_bps = rng() % 4 == 0 ? 0 : (equal ? each : each * 2 * unit(rng));
      u.inelastic_bps = rng() % 3 == 0 ? 0 : (equal ? each / 2 : each * unit(rng));
      u.limited = rng() % 4 == 0;
      use[v] = u;
    }
    std::vector<link_usage> in;
    for (const auto& [v, u] : use) in.push_back(u);
    const link_share share(cap, in);
    for (uint32_t v = 1; v <= n + 1; ++v) {
      auto it = use.find(v);
      const double want = available_bps(cap, use, v);
      const double got = share.available(it != use.end() ? &it->second : nullptr);
      // Relative 1e-9; below 1e-9 of the capacity is the sums' rounding.
      EXPECT_NEAR(got, want, 1e-9 * std::max(std::abs(want), cap))
          << "fleet " << fleet << " of " << n << " VMs, VM " << v;
    }
  }
}

std::vector<uint8_t> queue_record(uint32_t vm, uint16_t type, uint64_t delay_ns, int32_t size,
                                  uint32_t out_ifindex, bool tcp) {
  std::vector<uint8_t> r(sizeof(magnet_hdr) + sizeof(magnet_vmnet_queue));
  magnet_hdr h{};
  h.vm_id = vm;
  h.type = type;
  h.size = size;
  h.flags = tcp ? MAGNET_RF_TCP : MAGNET_RF_UDP;
  h.len = static_cast<uint16_t>(r.size());
  magnet_vmnet_queue q{};
  q.delay_ns = delay_ns;
  q.out_ifindex = out_ifindex;
  std::memcpy(r.data(), &h, sizeof h);
  std::memcpy(r.data() + sizeof h, &q, sizeof q);
  return r;
}

std::vector<uint8_t> drop_record(uint32_t vm, uint32_t ifindex, int32_t size = 0) {
  std::vector<uint8_t> r(sizeof(magnet_hdr) + sizeof(magnet_net_drop));
  magnet_hdr h{};
  h.vm_id = vm;
  h.size = size;
  h.flags = MAGNET_RF_UDP;
  h.type = MAGNET_EV_NET_DROP;
  h.len = static_cast<uint16_t>(r.size());
  magnet_net_drop d{};
  d.ifindex = ifindex;
  std::memcpy(r.data(), &h, sizeof h);
  std::memcpy(r.data() + sizeof h, &d, sizeof d);
  return r;
}

struct clock {
  uint64_t t = 1'000'000'000;
  uint64_t tick() { return t += 100'000'000; }
};

TEST(VmMetrics, RatesAndFractionsOverTheLastSecond) {
  vm_metrics m;
  clock c;
  vm_counters v;
  for (int i = 0; i <= 15; ++i) {
    m.sample(c.tick(), {{1, v}});
    v.tap_tx_bytes += 125000;  // 10 Mbit/s
    v.tap_tx_pkts += 100;
    v.tap_rx_bytes += 12500;
    v.blk_bytes += 4096 * 5;
    v.blk_reqs += 5;
    v.exits += 300;
    v.vcpu_ns[0][0] += 50'000'000;  // runs half the time
    v.vcpu_ns[0][1] += 10'000'000;
    v.vcpu_ns[0][2] += 40'000'000;
    v.vcpu_ns[1][2] += 100'000'000;  // halted
    auto& r = v.reasons[MAGNET_VIEW_REASON_INDEX(2, 0x7b)];  // SVM ioio
    r.count += 100;
    r.total_ns += 100 * 2000;
    v.reasons[MAGNET_VIEW_REASON_HALT_SLEPT].count += 10;
    v.reasons[MAGNET_VIEW_REASON_HALT_SLEPT].total_ns += 30'000'000;
  }
  EXPECT_NEAR(m.value(1, MAGNET_STAT_TAP_TX_BPS), 10e6, 1);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_TAP_TX_PPS), 1000, 1e-6);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_TAP_RX_BPS), 1e6, 1);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_BLK_BPS), 204800, 1e-6);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_BLK_IOPS), 50, 1e-6);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_KVM_EXITS), 3000, 1e-6);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_VCPU_COUNT), 2, 0);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_VCPU_RUN, 0), 0.5, 1e-9);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_VCPU_WAIT, 0), 0.1, 1e-9);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_VCPU_HALT, 1), 1.0, 1e-9);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_VCPU_HALT_SUM), 1.4, 1e-9);
  const uint32_t io = MAGNET_VIEW_REASON_INDEX(2, 0x7b);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_KVM_REASON_EXITS, io), 1000, 1e-6);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_KVM_REASON_MEAN, io), 2.0, 1e-9);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_KVM_REASON_TIME, io), 0.002, 1e-9);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_KVM_EXIT_TIME), 0.002, 1e-9) << "halts are not exit handling";
  EXPECT_NEAR(m.value(1, MAGNET_STAT_KVM_REASON_TIME, MAGNET_VIEW_REASON_HALT_SLEPT), 0.3, 1e-9);
  int tx = 0;
  for (const auto& s : m.stats(1))
    if (s.id == MAGNET_STAT_TAP_TX_BPS) {
      ++tx;
      EXPECT_EQ(s.window_us, 1000000u);
    }
  EXPECT_EQ(tx, 1) << "one tap tx rate";
}

TEST(VmMetrics, FirstSampleIsNotValidAndGoneVmsAreForgotten) {
  vm_metrics m;
  m.sample(1'000'000'000, {{1, {}}});
  bool any = false;
  for (const auto& s : m.stats(1))
    if (s.id == MAGNET_STAT_TAP_TX_BPS) {
      any = true;
      EXPECT_FALSE(s.valid()) << "a rate needs two samples";
    }
  EXPECT_TRUE(any);
  m.sample(1'100'000'000, {{2, {}}});
  EXPECT_TRUE(m.stats(1).empty());
  EXPECT_FALSE(m.stats(2).empty());
}

// lost.events: what the VM lost in the kernel since the daemon first saw
// it, its own only.
TEST(VmMetrics, LostEventsCountFromTheFirstSampleAndAreTheVmsOwn) {
  vm_metrics m;
  clock c;
  vm_counters a, b;
  a.lost = 100;  // before this daemon's session with the VM
  m.sample(c.tick(), {{1, a}, {2, b}});
  a.lost = 130;
  m.sample(c.tick(), {{1, a}, {2, b}});
  EXPECT_EQ(m.value(1, MAGNET_STAT_LOST_EVENTS), 30);
  EXPECT_EQ(m.value(2, MAGNET_STAT_LOST_EVENTS), 0);
}

TEST(VmMetrics, QueueingDelayQuantilesFromRecords) {
  vm_metrics m;
  clock c;
  std::map<uint32_t, vm_counters> v{{1, {}}};
  m.sample(c.tick(), v);
  for (int t = 0; t < 10; ++t) {
    std::vector<uint8_t> recs;
    for (int i = 1; i <= 100; ++i) {
      auto r = queue_record(1, MAGNET_EV_VMNET_QUEUE_TX, i * 10'000, 1000, 99, false);
      recs.insert(recs.end(), r.begin(), r.end());
      v[1].queue[0].count++;
      v[1].queue[0].total_ns += i * 10'000;
    }
    m.feed(recs);
    m.sample(c.tick(), v);
  }
  EXPECT_NEAR(m.value(1, MAGNET_STAT_QUEUE_TX_P50), 500, 500 * 0.03);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_QUEUE_TX_P99), 990, 990 * 0.03);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_QUEUE_TX_MEAN), 505, 1e-6);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_QUEUE_TX_PPS), 1000, 1e-6);
}

// Two VMs share link 7 (20 Mbit/s): VM 2 sends UDP at 7 Mbit/s, then TCP
// that the link limits (drops there); VM 1's availability follows.
TEST(VmMetrics, AvailableBandwidthOnASharedLink) {
  vm_metrics m;
  m.set_links({{"uplink", 0, 7, C, 0.02}});
  clock c;
  std::map<uint32_t, vm_counters> v{{1, {}}, {2, {}}};
  m.sample(c.tick(), v);
  auto run = [&](int ticks, bool tcp, bool drops) {
    for (int t = 0; t < ticks; ++t) {
      std::vector<uint8_t> recs;
      // 7 Mbit/s = 87500 bytes per 100 ms: 70 packets of 1250 bytes at
      // layer 2 (1236 from the IP header on, as vmnet.queue counts them).
      for (int i = 0; i < 70; ++i) {
        auto r = queue_record(2, MAGNET_EV_VMNET_QUEUE_TX, 100'000, 1236, 7, tcp);
        recs.insert(recs.end(), r.begin(), r.end());
      }
      if (drops) {
        auto d = drop_record(2, 7);
        recs.insert(recs.end(), d.begin(), d.end());
      }
      // VM 1 sends 1 Mbit/s through another device: not on this link.
      for (int i = 0; i < 10; ++i) {
        auto r = queue_record(1, MAGNET_EV_VMNET_QUEUE_TX, 100'000, 1236, 8, false);
        recs.insert(recs.end(), r.begin(), r.end());
      }
      m.feed(recs);
      m.sample(c.tick(), v);
    }
  };
  run(10, false, false);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_LINK_AVAILABLE), 13e6, 1);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_LINK_CAPACITY), C, 0);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_LINK_USE), 0, 0);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_LINK_AVAILABLE_ERR), 0, 1);
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_AVAILABLE), C, 1) << "its own use is available to it";
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_USE), 7e6, 1);
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_QUEUE_P50), 100, 3);
  run(10, true, true);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_LINK_AVAILABLE), C / 2, 1) << "limited TCP: an equal share";
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_DROPS), 10, 1e-6);
  run(10, true, false);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_LINK_AVAILABLE), 13e6, 1)
      << "TCP that the link does not limit counts at its rate";
  m.set_allowance(1, 5e6, 0);
  run(1, false, false);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_LINK_AVAILABLE), 5e6, 1) << "capped by its allowance";
  EXPECT_NEAR(m.value(1, MAGNET_STAT_ALLOWANCE_TX), 5e6, 0);
}

// What a VM offers to a link it overloads counts, not only what gets
// through: UDP at 7 Mbit/s of which 2 are dropped by the link's qdisc.
TEST(VmMetrics, UseOfALinkCountsWhatItsQdiscDropped) {
  vm_metrics m;
  m.set_links({{"uplink", 0, 7, C, 0.02}});
  clock c;
  std::map<uint32_t, vm_counters> v{{1, {}}, {2, {}}};
  m.sample(c.tick(), v);
  for (int t = 0; t < 10; ++t) {
    std::vector<uint8_t> recs;
    for (int i = 0; i < 50; ++i) {  // 5 Mbit/s through
      auto r = queue_record(2, MAGNET_EV_VMNET_QUEUE_TX, 100'000, 1236, 7, false);
      recs.insert(recs.end(), r.begin(), r.end());
    }
    for (int i = 0; i < 20; ++i) {  // 2 Mbit/s dropped (skb->len with Ethernet)
      auto d = drop_record(2, 7, 1250);
      recs.insert(recs.end(), d.begin(), d.end());
    }
    m.feed(recs);
    m.sample(c.tick(), v);
  }
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_USE), 7e6, 1);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_LINK_AVAILABLE), 13e6, 1);
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_DROPS), 200, 1e-6);
}

// Behind `magnet host --sample` the kernel streams 1 in N of a probe's
// records, flagged sampled: the same link as above, its packets and drops
// kept 1 in 5, gives the same use and drops (each record stands for 5), and
// the same queueing delay (a quantile: each record once).  A record of such a
// type without the flag (streamed before the setting) stands for itself.
TEST(VmMetrics, SampledRecordsCountForTheEventsTheyStandFor) {
  vm_metrics m;
  m.set_links({{"uplink", 0, 7, C, 0.02}});
  m.set_sample_weights(sample_weights({{MAGNET_EV_VMNET_QUEUE_TX, 5}, {MAGNET_EV_NET_DROP, 5}}));
  clock c;
  std::map<uint32_t, vm_counters> v{{1, {}}, {2, {}}};
  m.sample(c.tick(), v);
  auto sampled = [](std::vector<uint8_t> r) {
    reinterpret_cast<magnet_hdr*>(r.data())->flags |= MAGNET_RF_SAMPLED;
    return r;
  };
  for (int t = 0; t < 10; ++t) {
    std::vector<uint8_t> recs;
    auto add = [&](const std::vector<uint8_t>& r) { recs.insert(recs.end(), r.begin(), r.end()); };
    for (int i = 0; i < 10; ++i) add(sampled(queue_record(2, MAGNET_EV_VMNET_QUEUE_TX, 100'000 * (1 + i % 2), 1236, 7, false)));
    for (int i = 0; i < 4; ++i) add(sampled(drop_record(2, 7, 1250)));
    add(sampled(drop_record(2, 3)));  // on its tap: 5 a tick
    for (int i = 0; i < 10; ++i) add(queue_record(1, MAGNET_EV_VMNET_QUEUE_TX, 100'000, 1236, 7, false));
    m.feed(recs);
    m.sample(c.tick(), v);
  }
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_USE), 7e6, 1);
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_DROPS), 200, 1e-6);
  EXPECT_NEAR(m.value(2, MAGNET_STAT_DROPS_QDISC), 200, 1e-6);
  EXPECT_NEAR(m.value(2, MAGNET_STAT_DROPS_TAP), 50, 1e-6);
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_QUEUE_P50), 100, 3) << "half at 100 us, half at 200";
  EXPECT_NEAR(m.value(2, MAGNET_STAT_LINK_QUEUE_P99), 200, 5);
  EXPECT_NEAR(m.value(1, MAGNET_STAT_LINK_USE), 1e6, 1) << "unflagged: once each";
}

}  // namespace
}  // namespace magnet::host
