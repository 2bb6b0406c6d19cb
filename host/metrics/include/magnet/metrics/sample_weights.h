// What one streamed record stands for behind the kernel's sampling
// (`magnet host --sample`, docs/operations.md "Cost and sizing"): a probe
// kept 1 in N streams one record of N events, flagged MAGNET_RF_SAMPLED.
// A figure that counts records or adds up their bytes counts such a record
// N times, and stays right in expectation; a distribution (a quantile
// sketch) takes it once, as its shape is what is sampled.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "magnet/event.h"

namespace magnet::host {

class sample_weights {
 public:
  sample_weights() = default;
  // Event type -> N (1 in N); N of 1 or less is no sampling.
  explicit sample_weights(const std::map<uint16_t, uint32_t>& every) {
    for (const auto& [type, n] : every)
      if (n > 1) every_.emplace_back(type, n);
  }
  // The events @h stands for: N for a sampled record of a type kept 1 in
  // N, else 1.  A handful of types at most: a scan beats a map here.
  uint64_t operator()(const magnet_hdr& h) const {
    if (!(h.flags & MAGNET_RF_SAMPLED)) return 1;
    for (const auto& [type, n] : every_)
      if (type == h.type) return n;
    return 1;
  }

 private:
  std::vector<std::pair<uint16_t, uint32_t>> every_;
};

}  // namespace magnet::host
