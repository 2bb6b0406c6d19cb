// Loss accounting: lost records carry exact counts per probe and CPU and
// land at the chronological place of the loss.
#include <gtest/gtest.h>

#include "magnet/capture/consumer.h"
#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet::host {
namespace {

class fake_drops : public drop_source {
 public:
  explicit fake_drops(int ncpus) : st_(MAGNET_NPROBES, std::vector<magnet_probe_pcpu>(ncpus)),
                                    ack_(MAGNET_NPROBES, std::vector<uint64_t>(ncpus)) {}
  void drop(int slot, int cpu, uint64_t n, uint64_t first, uint64_t last) {
    auto& s = st_[slot][cpu];
    if (s.dropped == ack_[slot][cpu]) s.first_drop_ns = first;
    s.dropped += n;
    s.last_drop_ns = last;
    total_ += n;
  }
  uint64_t total_dropped() const override { return total_; }
  int ncpus() const override { return static_cast<int>(st_[0].size()); }
  std::vector<magnet_probe_pcpu> probe_state(int slot) const override { return st_[slot]; }
  uint64_t drop_ack(int slot, int cpu) const override { return ack_[slot][cpu]; }
  void set_drop_ack(int slot, int cpu, uint64_t v) override { ack_[slot][cpu] = v; }
  void quota_drop(uint32_t vm, uint64_t n) {
    quota_[vm] += n;
    total_ += n;
  }
  std::map<uint32_t, uint64_t> vm_quota_lost() const override { return quota_; }

 private:
  std::map<uint32_t, uint64_t> quota_;
  std::vector<std::vector<magnet_probe_pcpu>> st_;
  std::vector<std::vector<uint64_t>> ack_;
  uint64_t total_ = 0;
};

const magnet_lost& lost_of(const std::vector<uint8_t>& rec) {
  return *reinterpret_cast<const magnet_lost*>(rec.data() + sizeof(magnet_hdr));
}

TEST(LossTracker, NothingDroppedNothingReported) {
  fake_drops d(2);
  loss_tracker t(d);
  std::vector<std::vector<uint8_t>> out;
  EXPECT_EQ(t.collect(out), 0u);
  EXPECT_TRUE(out.empty());
}

TEST(LossTracker, CountsPerProbeAndCpuAddUpExactly) {
  fake_drops d(2);
  loss_tracker t(d);
  d.drop(MAGNET_P_NET_SOCK_SEND, 0, 5, 100, 150);
  d.drop(MAGNET_P_NET_DEV_RECV, 1, 7, 120, 130);
  std::vector<std::vector<uint8_t>> out;
  EXPECT_EQ(t.collect(out), 12u);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(lost_of(out[0]).count, 5u);
  EXPECT_EQ(lost_of(out[0]).probe_type, MAGNET_EV_NET_SOCK_SEND);
  EXPECT_EQ(lost_of(out[0]).cpu, 0);
  EXPECT_EQ(lost_of(out[0]).first_ts_ns, 100u);
  EXPECT_EQ(hdr_of(out[0].data()).ts_ns, 100u) << "placed at the first drop";
  EXPECT_EQ(lost_of(out[1]).count, 7u);
  EXPECT_EQ(lost_of(out[1]).probe_type, MAGNET_EV_NET_DEV_RECV);
  EXPECT_EQ(lost_of(out[1]).cpu, 1);

  // Later drops are reported once, as a new interval.
  out.clear();
  EXPECT_EQ(t.collect(out), 0u);
  d.drop(MAGNET_P_NET_SOCK_SEND, 0, 3, 400, 410);
  EXPECT_EQ(t.collect(out), 3u);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(lost_of(out[0]).count, 3u);
  EXPECT_EQ(lost_of(out[0]).first_ts_ns, 400u);
  EXPECT_EQ(t.lost_total(), 15u);
}

// Over-quota losses are per VM: one lost record of that VM (its vm_id,
// reason VM_QUOTA) per look, with the new losses only; ring losses are
// reported as before, next to them.
TEST(LossTracker, QuotaLossesAreReportedPerVmExactlyOnce) {
  fake_drops d(2);
  loss_tracker t(d);
  d.quota_drop(3, 40);
  d.quota_drop(7, 2);
  d.drop(MAGNET_P_NET_DEV_RECV, 1, 5, 120, 130);
  std::vector<std::vector<uint8_t>> out;
  EXPECT_EQ(t.collect(out), 47u);
  std::map<uint32_t, uint64_t> by_vm;
  uint64_t ring = 0;
  for (const auto& r : out) {
    const auto& l = lost_of(r);
    EXPECT_EQ(hdr_of(r.data()).type, MAGNET_EV_LOST);
    if (l.reason == MAGNET_LOST_VM_QUOTA) {
      EXPECT_EQ(l.cpu, 0xffff);
      EXPECT_EQ(l.probe_type, 0);
      EXPECT_LE(l.first_ts_ns, l.last_ts_ns);
      by_vm[hdr_of(r.data()).vm_id] += l.count;
    } else {
      EXPECT_EQ(l.reason, static_cast<uint32_t>(MAGNET_LOST_RINGBUF_FULL));
      EXPECT_EQ(hdr_of(r.data()).vm_id, 0u);
      ring += l.count;
    }
  }
  EXPECT_EQ(by_vm, (std::map<uint32_t, uint64_t>{{3, 40}, {7, 2}}));
  EXPECT_EQ(ring, 5u);

  out.clear();
  d.quota_drop(7, 9);
  EXPECT_EQ(t.collect(out), 9u);
  ASSERT_EQ(out.size(), 1u) << "VM 3 lost nothing new";
  EXPECT_EQ(hdr_of(out[0].data()).vm_id, 7u);
  EXPECT_EQ(lost_of(out[0]).count, 9u);
  EXPECT_EQ(t.lost_total(), 56u);
}

TEST(MergeLost, LostRecordsGoBeforeTheFirstNewerRecord) {
  std::vector<uint8_t> batch;
  std::vector<uint32_t> offs;
  for (uint64_t ts : {100, 200, 300, 400}) {
    magnet_hdr h{};
    h.ts_ns = ts;
    h.type = MAGNET_EV_SCHED_WAKEUP;
    auto r = make_record(h, magnet_sched_wakeup{});
    offs.push_back(static_cast<uint32_t>(batch.size()));
    batch.insert(batch.end(), r.begin(), r.end());
  }
  std::vector<std::vector<uint8_t>> lost;
  for (uint64_t ts : {350, 50, 250, 999}) {
    magnet_hdr h{};
    h.ts_ns = ts;
    h.type = MAGNET_EV_LOST;
    lost.push_back(make_record(h, magnet_lost{}));
  }
  auto merged = merge_lost(batch, offs, lost);
  std::vector<uint64_t> order;
  for (size_t off = 0; off < merged.size(); off += hdr_of(merged.data() + off).len)
    order.push_back(hdr_of(merged.data() + off).ts_ns);
  EXPECT_EQ(order, (std::vector<uint64_t>{50, 100, 200, 250, 300, 350, 400, 999}));
}

}  // namespace
}  // namespace magnet::host
