// The available-bandwidth model of a shared host link (docs/guest.md, "The
// available-bandwidth model"): what one VM can send across the link that
// its traffic shares with other VMs, from what the host measures there.
//
// Max-min fairness with the demands measured at the link:
//   * inelastic traffic (anything but TCP) of the other VMs keeps its rate
//     whatever the link does, so its current rate is taken off the capacity;
//   * elastic traffic (TCP) of another VM that is limited by this link (its
//     packets are dropped there, or wait in its queue) would take any share
//     it is given: it is entitled to an equal share of what is left;
//   * elastic traffic limited elsewhere counts at its current rate.
// The VM asking is not one of the others: what it uses now is available to
// it.  The result is capped by the VM's own allowance (its shaping limit).
#pragma once

#include <cstdint>
#include <map>

namespace magnet::host {

struct link_usage {
  double elastic_bps = 0;    // TCP
  double inelastic_bps = 0;  // everything else
  bool limited = false;      // its packets are dropped or queued at the link
};

// Bandwidth available to @vm on a link of @capacity_bps shared with
// @use (which may or may not hold @vm itself), before any allowance.
double available_bps(double capacity_bps, const std::map<uint32_t, link_usage>& use, uint32_t vm);

}  // namespace magnet::host
