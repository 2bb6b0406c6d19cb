// In-kernel latency statistics as user space reads them (capture/include/magnet/capture/latency.h),
// and records of a payload grown by a format minor.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "magnet/capture/latency.h"
#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet::host {
namespace {

// The BPF side's bucket: floor(log2(v)), 0 for v <= 1, capped at the last.
uint32_t bucket(uint64_t v) {
  uint32_t b = v ? 63 - static_cast<uint32_t>(__builtin_clzll(v)) : 0;
  return std::min<uint32_t>(b, MAGNET_LAT_BUCKETS - 1);
}

lat_stat of(const std::vector<uint64_t>& vals) {
  magnet_lat_stat k{};
  for (uint64_t v : vals) {
    k.count++;
    k.total_ns += v;
    k.max_ns = std::max<uint64_t>(k.max_ns, v);
    k.hist[bucket(v)]++;
  }
  lat_stat s;
  s.add(k);
  return s;
}

TEST(Latency, QuantilesStayInsideTheirLog2BucketAndUnderTheMax) {
  // 90 values of 1000 ns (bucket [512, 1024)), 10 of 100000 ns.
  std::vector<uint64_t> v(90, 1000);
  v.insert(v.end(), 10, 100000);
  lat_stat s = of(v);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.mean_ns(), (90 * 1000.0 + 10 * 100000.0) / 100);
  double p50 = s.quantile_ns(0.5), p99 = s.quantile_ns(0.99);
  EXPECT_GE(p50, 512);
  EXPECT_LE(p50, 1024);  // within a factor of 2 of the true 1000
  EXPECT_GE(p99, 65536);
  EXPECT_LE(p99, 100000);  // capped at the max
  EXPECT_DOUBLE_EQ(s.quantile_ns(1.0), 100000);
  EXPECT_DOUBLE_EQ(lat_stat{}.quantile_ns(0.5), 0);
}

TEST(Latency, PerCpuValuesSumAndIntervalsDifference) {
  lat_stat a = of({100, 200});
  lat_stat b = of({5000});
  lat_stat sum = a;
  sum.merge(b);
  EXPECT_EQ(sum.count, 3u);
  EXPECT_EQ(sum.total_ns, 5300u);
  EXPECT_EQ(sum.max_ns, 5000u);
  lat_stat d = sum.since(a);
  EXPECT_EQ(d.count, 1u);
  EXPECT_EQ(d.total_ns, 5000u);
  EXPECT_EQ(d.hist[bucket(5000)], 1u);
  EXPECT_EQ(d.hist[bucket(100)], 0u);
  // A reset counter (VM restarted: a new key) never goes negative.
  lat_stat z = a.since(sum);
  EXPECT_EQ(z.count, 0u);
  EXPECT_EQ(z.total_ns, 0u);
}

TEST(Latency, ExitReasonNamesComeFromTheKernelTables) {
  EXPECT_EQ(kvm_exit_reason_name(2, 0x78), "hlt");   // SVM_EXIT_HLT
  EXPECT_EQ(kvm_exit_reason_name(2, 0x7b), "io");  // SVM_EXIT_IOIO
  EXPECT_EQ(kvm_exit_reason_name(2, 0x400), "npf");
  EXPECT_EQ(kvm_exit_reason_name(1, 12), "hlt");  // EXIT_REASON_HLT
  EXPECT_EQ(kvm_exit_reason_name(1, 30), "io_instruction");
  EXPECT_EQ(kvm_exit_reason_name(1, 0xfff), "0xfff");
  EXPECT_EQ(kvm_exit_reason_name(0, MAGNET_KVM_REASON_HALT_POLLED), "halt(polled)");
  EXPECT_EQ(kvm_userspace_reason_name(2), "io");
  EXPECT_EQ(kvm_userspace_reason_name(6), "mmio");
  EXPECT_EQ(kvm_userspace_reason_name(999), "999");
}

// A format-minor-0 kvm.entry (16-byte payload, before the exit fields were
// appended) is still read; a record shorter than that is still corrupt.
TEST(Latency, KvmEntryOfAnOlderMinorIsReadWithoutTheNewFields) {
  magnet_hdr h{};
  h.type = MAGNET_EV_KVM_ENTRY;
  h.vm_id = 3;
  struct {
    uint32_t vcpu_id, reserved;
    uint64_t guest_rip;
  } old_payload{2, 0, 0x1234};
  auto rec = make_record(h, &old_payload, sizeof old_payload);
  ASSERT_EQ(rec.size(), sizeof(magnet_hdr) + 16);
  ASSERT_TRUE(check_record(rec, "test")) << check_record(rec, "test").err().message;
  std::string text = format_record(rec.data(), out_format::text);
  EXPECT_NE(text.find("vcpu_id=2"), std::string::npos) << text;
  EXPECT_NE(text.find("guest_rip=0x1234"), std::string::npos) << text;
  EXPECT_EQ(text.find("exit_ns"), std::string::npos) << text;
  std::string json = format_record(rec.data(), out_format::json);
  EXPECT_EQ(json.find("exit_ns"), std::string::npos) << json;

  magnet_kvm_entry now{};
  now.vcpu_id = 1;
  now.exit_ns = 777;
  now.exit_reason = 0x78;
  now.isa = 2;
  now.flags = MAGNET_KVM_F_USERSPACE;
  auto full = make_record(h, now);
  text = format_record(full.data(), out_format::text);
  EXPECT_NE(text.find("exit_ns=777 exit_reason=120 exit_isa=2 kvm_flags=1"), std::string::npos) << text;

  auto shorter = make_record(h, &old_payload, 8);
  EXPECT_FALSE(check_record(shorter, "test"));
}

}  // namespace
}  // namespace magnet::host
