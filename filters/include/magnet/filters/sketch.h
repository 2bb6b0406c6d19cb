// A mergeable quantile sketch with a relative-error guarantee (DDSketch:
// logarithmic buckets, dense store).  Used for value distributions (sizes,
// latencies) in views; two sketches with the same accuracy merge exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "magnet/result.h"

namespace magnet::filters {

class quantile_sketch {
 public:
  // Guarantee: for 1 <= x, quantile(q) is within relative_accuracy of the
  // element of rank floor(q * (count - 1)) of the sorted input.
  // Domain: {0} U [1, 2^64); values below 1 (integer 0) are kept exactly in
  // a zero bucket.  Accepted accuracies: [0.001, 0.1].
  static constexpr double kDefaultAccuracy = 0.01;
  explicit quantile_sketch(double relative_accuracy = kDefaultAccuracy);

  void add(double x, uint64_t n = 1);
  // Error if the accuracies differ (their buckets do not line up).
  status merge(const quantile_sketch& o);
  void clear();

  double quantile(double q) const;  // 0 if empty
  // quantile(qs[i]) into out[i] (same size), in one pass over the buckets
  // when qs is ascending (any order is accepted).
  void quantiles(std::span<const double> qs, std::span<double> out) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  double min() const { return count_ ? min_ : 0; }
  double max() const { return count_ ? max_ : 0; }
  double mean() const { return count_ ? sum_ / static_cast<double>(count_) : 0; }
  double relative_accuracy() const { return alpha_; }

  // Heap + object bytes (for the per-view memory budget).
  size_t memory_bytes() const { return sizeof *this + bins_.capacity() * sizeof(uint64_t); }
  // Upper bound of memory_bytes() for any input (keys of [1, 2^64) only).
  static size_t max_memory_bytes(double relative_accuracy);

 private:
  int key(double x) const;
  double value_of(int k) const;
  void grow(int k);

  double alpha_, gamma_, inv_log_gamma_;
  std::vector<uint64_t> bins_;  // bins_[i] counts key offset_ + i
  int offset_ = 0;
  int kmax_ = 0;  // key of 2^64: the store's upper end
  uint64_t zero_ = 0, count_ = 0;
  double sum_ = 0, min_ = 0, max_ = 0;
};

}  // namespace magnet::filters
