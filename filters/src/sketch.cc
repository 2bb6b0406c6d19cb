#include "magnet/filters/sketch.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace magnet::filters {

quantile_sketch::quantile_sketch(double a) {
  // Out-of-range accuracies are clamped rather than rejected: configs are
  // validated before they get here (config.cc), this is the last guard.
  alpha_ = std::clamp(a, 0.001, 0.1);
  gamma_ = (1 + alpha_) / (1 - alpha_);
  inv_log_gamma_ = 1 / std::log(gamma_);
  kmax_ = key(18446744073709551615.0);
}

size_t quantile_sketch::max_memory_bytes(double a) {
  quantile_sketch s(a);
  // keys of [1, 2^64): 0 .. key(2^64)
  return sizeof s + (static_cast<size_t>(s.key(18446744073709551615.0)) + 1) * sizeof(uint64_t);
}

// Bucket k holds (gamma^(k-1), gamma^k]; its midpoint in the relative sense
// 2 gamma^k / (gamma + 1) is within alpha of every value in it.
int quantile_sketch::key(double x) const {
  return static_cast<int>(std::ceil(std::log(x) * inv_log_gamma_));
}

double quantile_sketch::value_of(int k) const {
  return 2 * std::pow(gamma_, k) / (gamma_ + 1);
}

void quantile_sketch::grow(int k) {
  // Keys of [1, 2^64) are 0..kmax; the store never extends beyond them, so
  // memory_bytes() <= max_memory_bytes() whatever the input.
  const int kmax = kmax_;
  k = std::clamp(k, 0, kmax);
  if (bins_.empty()) {
    // Room for a typical spread (a factor ~e^(64*2*alpha)) at once, so a
    // stream settles quickly into allocation-free updates.
    int n = std::min(64, kmax + 1);
    offset_ = std::clamp(k - n / 2, 0, kmax + 1 - n);
    bins_.assign(static_cast<size_t>(n), 0);
    return;
  }
  int lo = std::min(offset_, k), hi = std::max(offset_ + static_cast<int>(bins_.size()) - 1, k);
  // Grow by at least half again to amortise, within [0, kmax].
  int want = std::min(std::max(hi - lo + 1, static_cast<int>(bins_.size() * 3 / 2)), kmax + 1);
  if (k < offset_) lo = std::max(0, hi - want + 1);
  else hi = std::min(kmax, lo + want - 1);
  std::vector<uint64_t> nb(static_cast<size_t>(hi - lo + 1), 0);
  std::copy(bins_.begin(), bins_.end(), nb.begin() + (offset_ - lo));
  bins_ = std::move(nb);
  offset_ = lo;
}

void quantile_sketch::add(double x, uint64_t n) {
  if (n == 0 || !(x >= 0)) return;  // negatives and NaN are outside the domain
  if (count_ == 0) {
    min_ = max_ = x;
  } else {
    min_ = std::min(min_, x);
    max_ = std::max(max_, x);
  }
  count_ += n;
  sum_ += x * static_cast<double>(n);
  if (x < 1) {
    zero_ += n;
    return;
  }
  int k = std::min(key(x), kmax_);
  if (bins_.empty() || k < offset_ || k >= offset_ + static_cast<int>(bins_.size())) grow(k);
  bins_[static_cast<size_t>(k - offset_)] += n;
}

status quantile_sketch::merge(const quantile_sketch& o) {
  if (o.alpha_ != alpha_)
    return error{"sketch: cannot merge relative accuracy " + std::to_string(o.alpha_) +
                 " into " + std::to_string(alpha_)};
  if (o.count_ == 0) return {};
  for (size_t i = 0; i < o.bins_.size(); ++i) {
    if (!o.bins_[i]) continue;
    int k = o.offset_ + static_cast<int>(i);
    if (bins_.empty() || k < offset_ || k >= offset_ + static_cast<int>(bins_.size())) grow(k);
    bins_[static_cast<size_t>(k - offset_)] += o.bins_[i];
  }
  if (count_ == 0) {
    min_ = o.min_;
    max_ = o.max_;
  } else {
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
  }
  zero_ += o.zero_;
  count_ += o.count_;
  sum_ += o.sum_;
  return {};
}

void quantile_sketch::clear() {
  std::fill(bins_.begin(), bins_.end(), 0);
  zero_ = count_ = 0;
  sum_ = min_ = max_ = 0;
}

double quantile_sketch::quantile(double q) const {
  double v;
  quantiles({&q, 1}, {&v, 1});
  return v;
}

void quantile_sketch::quantiles(std::span<const double> qs, std::span<double> out) const {
  // One walk over the buckets: `seen` counts the values up to bucket b - 1.
  uint64_t seen = zero_;
  size_t b = 0;
  uint64_t prev_rank = 0;
  for (size_t j = 0; j < qs.size() && j < out.size(); ++j) {
    double q = std::clamp(qs[j], 0.0, 1.0);
    if (count_ == 0) {
      out[j] = 0;
      continue;
    }
    if (q == 0 || q == 1) {
      out[j] = q == 0 ? min_ : max_;
      continue;
    }
    auto rank = static_cast<uint64_t>(q * static_cast<double>(count_ - 1));
    if (rank < prev_rank) {  // not ascending: walk again from the start
      seen = zero_;
      b = 0;
    }
    prev_rank = rank;
    if (zero_ > rank) {
      out[j] = 0;
      continue;
    }
    while (b < bins_.size() && seen <= rank) seen += bins_[b++];
    out[j] = seen > rank ? std::clamp(value_of(offset_ + static_cast<int>(b) - 1), min_, max_) : max_;
  }
}

}  // namespace magnet::filters
