// The shaping tc applies to a device, read from the kernel over rtnetlink:
// what magnet takes as a shared link's capacity when `--link` names no rate.
//
// Understood: a root tbf (its rate; its queue from `limit`), and a root htb
// (the largest ceil of its top-level classes; its queue is unknown).  Any
// other root qdisc, or none, is "not shaped" and the capacity must be given.
#pragma once

#include <cstdint>
#include <string>

#include "magnet/result.h"

namespace magnet::host {

struct tc_shaping {
  std::string kind;          // "tbf" or "htb"
  double rate_bps = 0;       // bits per second at layer 2 (what tc counts)
  double queue_limit_s = 0;  // the queue's length at that rate, 0 = unknown
};

// @ifindex in the network namespace of the calling thread.  An error names
// the device and what failed; a device that exists but is not shaped by a
// qdisc listed above is an error "not shaped by tbf or htb".
result<tc_shaping> read_tc_shaping(int ifindex);

}  // namespace magnet::host
