// Benchmarks' one summary of repeated measurements: median, min and max
// (the project's way to compare on a noisy machine: medians and ranges).
#pragma once

#include <algorithm>
#include <vector>

namespace magnet::bench {

struct summary {
  double med = 0, min = 0, max = 0;
};

inline summary summarize(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

}  // namespace magnet::bench
