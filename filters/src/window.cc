#include "magnet/filters/window.h"

#include <algorithm>
#include <bit>

namespace magnet::filters {

namespace {
constexpr double kNs = 1e9;
}

count_window::count_window(uint32_t n) : ring_(std::max<uint32_t>(n, 1)) {}

window_stats count_window::stats() const {
  window_stats s;
  s.k = window_stats::kind::count;
  s.length = ring_.size();
  s.events = n_;
  s.bytes = bytes_;
  s.errors = errors_;
  if (n_ == 0) return s;
  const entry& first = ring_[head_];
  const entry& last = ring_[(head_ + n_ - 1) % ring_.size()];
  s.first_ts = first.ts;
  s.last_ts = last.ts;
  if (n_ >= 2 && last.ts > first.ts) {
    double span = static_cast<double>(last.ts - first.ts);
    uint64_t after_first = bytes_ - (first.size >= 0 ? static_cast<uint64_t>(first.size) : 0);
    s.bandwidth_bps = static_cast<double>(after_first) * kNs / span;
    s.rate_eps = static_cast<double>(n_ - 1) * kNs / span;
  }
  return s;
}

time_window::time_window(uint64_t t_ns, uint32_t max_events)
    : t_ns_(std::max<uint64_t>(t_ns, 1)), max_(std::bit_ceil(std::max<uint32_t>(max_events, 2))) {}

void time_window::pop() {
  const entry& e = ring_[head_];
  if (e.size >= 0) bytes_ -= static_cast<uint64_t>(e.size);
  else --errors_;
  head_ = (head_ + 1) & (ring_.size() - 1);
  --n_;
}

void time_window::expire(uint64_t now) {
  // Window is (now - T, now]; keep ts > now - T.
  while (n_ && now - ring_[head_].ts >= t_ns_ && ring_[head_].ts <= now) pop();
}

void time_window::add(uint64_t ts, int32_t size) {
  if (ts > now_) {
    now_ = ts;
    expire(now_);
  } else if (now_ - ts >= t_ns_) {
    ++late_;  // already outside the window
    return;
  }
  if (n_ == ring_.size()) {
    if (ring_.size() < max_) {
      std::vector<entry> nr(std::min<size_t>(std::max<size_t>(ring_.size() * 2, 16), max_));
      for (size_t i = 0; i < n_; ++i) nr[i] = at(i);
      ring_ = std::move(nr);
      head_ = 0;
    } else {
      forced_ts_ = std::max(forced_ts_, ring_[head_].ts);
      forced_ = true;
      pop();
    }
  }
  ring_[(head_ + n_) & (ring_.size() - 1)] = {ts, size};
  ++n_;
  if (size >= 0) bytes_ += static_cast<uint64_t>(size);
  else ++errors_;
  // The next add reads the oldest entries (expiry: typically the oldest
  // goes and the one after it stays) and writes after the newest; those
  // lines are cold when many windows share the core.
  const size_t m = ring_.size() - 1;
  __builtin_prefetch(&ring_[head_]);
  __builtin_prefetch(&ring_[(head_ + 1) & m]);
  __builtin_prefetch(&ring_[(head_ + n_) & m], 1);
}

window_stats time_window::stats(uint64_t now) const {
  if (now < now_) now = now_;
  window_stats s;
  s.k = window_stats::kind::time;
  s.length = t_ns_;
  // Skip what has expired by `now` without touching the ring (const).
  size_t skip = 0;
  uint64_t bytes = bytes_, errors = errors_;
  while (skip < n_ && now - at(skip).ts >= t_ns_ && at(skip).ts <= now) {
    if (at(skip).size >= 0) bytes -= static_cast<uint64_t>(at(skip).size);
    else --errors;
    ++skip;
  }
  size_t n = n_ - skip;
  s.events = n;
  s.bytes = bytes;
  s.errors = errors;
  if (n) {
    s.first_ts = at(skip).ts;
    s.last_ts = at(n_ - 1).ts;
  }
  s.truncated = forced_ && now - forced_ts_ < t_ns_;
  if (!s.truncated) {
    s.bandwidth_bps = static_cast<double>(bytes) * kNs / static_cast<double>(t_ns_);
    s.rate_eps = static_cast<double>(n) * kNs / static_cast<double>(t_ns_);
  } else if (n >= 2 && s.last_ts > s.first_ts) {
    double span = static_cast<double>(s.last_ts - s.first_ts);
    int64_t fs = at(skip).size;
    s.bandwidth_bps = static_cast<double>(bytes - (fs >= 0 ? fs : 0)) * kNs / span;
    s.rate_eps = static_cast<double>(n - 1) * kNs / span;
  }
  return s;
}

}  // namespace magnet::filters
