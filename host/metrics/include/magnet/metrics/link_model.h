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
#include <span>
#include <vector>

namespace magnet::host {

struct link_usage {
  double elastic_bps = 0;    // TCP
  double inelastic_bps = 0;  // everything else
  bool limited = false;      // its packets are dropped or queued at the link
};

// Bandwidth available to @vm on a link of @capacity_bps shared with
// @use (which may or may not hold @vm itself), before any allowance.
double available_bps(double capacity_bps, const std::map<uint32_t, link_usage>& use, uint32_t vm);

// available_bps for every VM of one set of usages, each VM's answer in
// O(log N) after an O(N log N) set-up: a link shared by N VMs asks it N
// times a tick, and the reference above would make that N² log N.  The
// same model: the others' inelastic total and their elastic demands sorted
// once, with prefix sums; a VM's own entry is taken out of both when it
// asks.  Equal to available_bps up to the rounding of the sums.
class link_share {
 public:
  link_share() = default;
  link_share(double capacity_bps, std::span<const link_usage> use);
  // available_bps(capacity, use, vm) where @own is vm's entry in use, or
  // nullptr when vm has none.
  double available(const link_usage* own) const;

 private:
  // The others' elastic demand below the level after k of them kept theirs:
  // the k-th smallest finite demand, and the sum of the first k, once @own's
  // demand (at @skip in finite_, or none) is left out.
  double demand(size_t k, size_t skip) const;
  long double taken(size_t k, size_t skip, double own) const;

  double capacity_ = 0;
  long double inelastic_ = 0;          // the sum over every entry
  std::vector<double> finite_;         // elastic demands not limited by the link, ascending
  std::vector<long double> prefix_;    // prefix_[k]: the sum of finite_[0..k)
  size_t limited_ = 0;                 // elastic demands limited by the link (infinite)
};

}  // namespace magnet::host
