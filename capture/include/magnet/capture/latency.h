// In-kernel latency statistics (magnet_lat_stat, proto/magnet/control.h):
// summing per-CPU values, interval deltas, quantiles from the log2 buckets,
// and the names of KVM exit reasons.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "magnet/control.h"

namespace magnet {

struct lat_stat {
  uint64_t count = 0, total_ns = 0, max_ns = 0, aux = 0;
  std::array<uint64_t, MAGNET_LAT_BUCKETS> hist{};

  void add(const magnet_lat_stat& s);  // one CPU's value
  void merge(const lat_stat& o);
  // This minus an earlier reading of the same counters; max_ns stays the
  // maximum since the counters started (a maximum cannot be differenced).
  lat_stat since(const lat_stat& earlier) const;
  double mean_ns() const { return count ? static_cast<double>(total_ns) / count : 0; }
  // Quantile q in [0,1], interpolated inside its log2 bucket [2^i, 2^(i+1))
  // and capped at max_ns: within a factor of 2 of the true value.
  double quantile_ns(double q) const;
};

// "hlt", "npf", "io_instruction", ... ; "0x1f" style for unknown codes.
std::string kvm_exit_reason_name(uint32_t isa, uint32_t reason);
// KVM_EXIT_* of linux/kvm.h: "io", "mmio", ...
std::string kvm_userspace_reason_name(uint32_t reason);

}  // namespace magnet
