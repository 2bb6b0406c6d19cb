// Sliding windows over a view's records: the last N events, or the events of
// the last T ns of stream time (record ts_ns, never the wall clock).
//
// Definitions (docs/engine.md, "Windows"); size < 0 is -errno and counts as
// an error, not as bytes:
//   count window, n events e_1..e_n (n <= N), n >= 2, ts_n > ts_1:
//     bytes     = sum of max(size_i, 0), i = 1..n
//     bandwidth = (bytes - max(size_1, 0)) * 1e9 / (ts_n - ts_1)   [B/s]
//     rate      = (n - 1) * 1e9 / (ts_n - ts_1)                    [events/s]
//   (the interval (ts_1, ts_n] holds events 2..n; e_1 only opens it), else 0.
//   time window T, now = the latest ts seen (or given):
//     the events with now - T < ts <= now
//     bandwidth = bytes * 1e9 / T, rate = n * 1e9 / T
//   If a time window needed more than its capacity, the oldest events were
//   dropped early: truncated = true and the count-window formulas are used
//   over the retained events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace magnet::filters {

struct window_stats {
  enum class kind : uint8_t { count, time };
  kind k = kind::count;
  uint64_t length = 0;  // N events, or T in ns
  uint64_t events = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;  // events with size < 0
  uint64_t first_ts = 0, last_ts = 0;
  double rate_eps = 0;       // events per second
  double bandwidth_bps = 0;  // bytes per second
  bool truncated = false;
};

// Ring of the last N (ts, size) pairs with running sums: O(1) per event, no
// allocation after construction.
class count_window {
 public:
  explicit count_window(uint32_t n);
  void add(uint64_t ts, int32_t size) {
    if (n_ == ring_.size()) {
      pop();
    }
    size_t i = head_ + n_;
    if (i >= ring_.size()) i -= ring_.size();
    ring_[i] = {ts, size};
    ++n_;
    if (size >= 0) bytes_ += static_cast<uint64_t>(size);
    else ++errors_;
    // The next add pops (reads, then overwrites) the oldest entry, written
    // N events ago and long out of cache when many windows share the core:
    // fetch it now, while other work happens in between.
    if (n_ == ring_.size()) __builtin_prefetch(&ring_[head_], 1);
  }
  window_stats stats() const;
  size_t memory_bytes() const { return sizeof *this + ring_.capacity() * sizeof(entry); }
  static size_t max_memory_bytes(uint32_t n) { return sizeof(count_window) + n * sizeof(entry); }

 private:
  struct entry {
    uint64_t ts;
    int64_t size;
  };
  void pop() {
    const entry& e = ring_[head_];
    if (e.size >= 0) bytes_ -= static_cast<uint64_t>(e.size);
    else --errors_;
    head_ = head_ + 1 == ring_.size() ? 0 : head_ + 1;
    --n_;
  }
  std::vector<entry> ring_;
  size_t head_ = 0, n_ = 0;
  uint64_t bytes_ = 0, errors_ = 0;
};

// Events of the last T ns.  The ring grows (doubling) up to max_events, so a
// steady stream stops allocating once the ring fits one window's worth.
class time_window {
 public:
  time_window(uint64_t t_ns, uint32_t max_events);
  void add(uint64_t ts, int32_t size);
  // now = 0: the latest ts added.  Does not modify the window.
  window_stats stats(uint64_t now = 0) const;
  uint64_t late() const { return late_; }  // records older than the window on arrival
  size_t memory_bytes() const { return sizeof *this + ring_.capacity() * sizeof(entry); }
  static size_t max_memory_bytes(uint32_t max_events) {
    return sizeof(time_window) + max_events * sizeof(entry);
  }

 private:
  struct entry {
    uint64_t ts;
    int64_t size;
  };
  void expire(uint64_t now);
  void pop();
  const entry& at(size_t i) const { return ring_[(head_ + i) & (ring_.size() - 1)]; }
  uint64_t t_ns_;
  uint32_t max_;
  std::vector<entry> ring_;  // power-of-two capacity
  size_t head_ = 0, n_ = 0;
  uint64_t bytes_ = 0, errors_ = 0, now_ = 0;
  uint64_t forced_ts_ = 0;  // ts of the newest event dropped for capacity
  bool forced_ = false;
  uint64_t late_ = 0;
};

}  // namespace magnet::filters
