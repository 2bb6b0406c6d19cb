// One VM's synthetic latency figures, the same for a key every time: what
// bench/scrape and bench/scale fill each VM with, so that their renders and
// frames carry as many series and buckets as a busy VM's do.
#pragma once

#include <cstddef>
#include <cstdint>

#include "magnet/capture/latency.h"
#include "magnet/export/openmetrics.h"
#include "magnet/metrics/vm_metrics.h"
#include "magnet/view.h"

namespace magnet::bench {

// A log2 histogram over buckets lo..hi.
inline lat_stat synthetic_histogram(uint64_t seed, size_t lo, size_t hi) {
  lat_stat s;
  for (size_t i = lo; i <= hi; ++i) {
    s.hist[i] = (seed * 2654435761u + i * 40503u) % 100000;
    s.count += s.hist[i];
    s.total_ns += s.hist[i] * (uint64_t{3} << i) / 2;
  }
  s.max_ns = uint64_t{1} << (hi + 1);
  return s;
}

// VM @k's exit reasons (those a Linux guest exits for most), halts, tap
// queues, drops and block latency.
inline void fill_synthetic_vm(host::vm_counters& c, host::vm_record_totals& r, uint64_t k) {
  for (uint32_t reason : {1, 10, 12, 28, 30, 31, 32, 48})
    c.reasons[MAGNET_VIEW_REASON_INDEX(1, reason)] = synthetic_histogram(k + reason, 8, 20);
  c.reasons[MAGNET_VIEW_REASON_HALT_POLLED] = synthetic_histogram(k, 10, 18);
  c.reasons[MAGNET_VIEW_REASON_HALT_SLEPT] = synthetic_histogram(k, 12, 30);
  c.queue[0] = synthetic_histogram(k, 9, 24);
  c.queue[1] = synthetic_histogram(k + 1, 9, 24);
  r.drops_tap = 17 * k;
  r.drops_link = 3 * k;
  r.blk_latency = synthetic_histogram(k, 14, 27);
}

}  // namespace magnet::bench
