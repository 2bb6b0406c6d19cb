// `magnet host --sample PROBE=N[,PROBE=N...]`: the kernel streams 1 in N of
// a probe's records (per CPU), after counting every event in its in-kernel
// aggregation.  What that changes and what it keeps (docs/operations.md,
// "Cost and sizing"):
//   - the in-kernel counts (tap bytes and packets, block bytes and requests,
//     the host queueing count and mean, exits) stay exact;
//   - figures that count streamed records count a sampled record N times
//     (sample_weights: drops, link use, the block latency histogram);
//   - the views see 1 in N and say so (their snapshot's sample_every);
//   - quantiles (queueing p50/p99, block latency p99) come from 1 in N of
//     the records: their shape holds, with fewer observations;
//   - guests receive 1 in N of those event records, flagged sampled.
// What cannot be sampled is refused with the reason: sched (the vCPU
// accounting follows every switch and wakeup), kvm.* (counted in the
// kernel, never streamed), and sampling by time (a record would stand for
// an unknown number of events).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "magnet/result.h"

namespace magnet::host {

struct sample_spec {
  std::string probe;  // as --probes names it: an event or a group (vmnet.queue)
  uint32_t every = 1;
};

// "PROBE=N[,PROBE=N...]": each PROBE known to the event catalogue, each N a
// whole number from 1 to 2^32-1, no event type named twice.  Every error
// names the part it is about.
result<std::vector<sample_spec>> parse_sample_list(const std::string& text);

// Whether `magnet host` streams @type's records (kvm.* it only counts).
bool streamed_by_daemon(uint16_t type);

// The event types @samples keep 1 in N (N > 1) among the daemon's @probes,
// or why one of them cannot be sampled there.
result<std::map<uint16_t, uint32_t>> sampled_types(const std::vector<sample_spec>& samples,
                                                   const std::string& probes);

// "PROBE=N,..." as given, for the log.
std::string sample_list_text(const std::vector<sample_spec>& samples);

}  // namespace magnet::host
