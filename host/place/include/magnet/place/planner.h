// The placement planners: magnet's own and the baselines bench/place
// compares it with (first-fit, round-robin, PABFD, Watcher's workload
// consolidation).  Pure functions of a fleet: no I/O, deterministic.
// docs/placement.md, "Placement: the planners", says how each works.
#pragma once

#include <string>
#include <string_view>

#include "magnet/place/fleet.h"
#include "magnet/result.h"

namespace magnet::place {

struct plan_options {
  // A target host's CPU utilisation may not exceed this with the VMs' mean
  // demand (PABFD's upper threshold, Beloglazov & Buyya use 0.8-1.0).
  double cpu_upper = 0.8;
  // Nor its CPU capacity with their peaks (1.0: the peaks must fit).  The
  // host's peak (host_outcome::cpu_peak_used) is its mean demand plus the
  // more of: the VMs' peaks together, the root of the sum of their squared
  // (peak - mean) (peaks seldom coincide; not the sum of the peaks), and
  // one VM using all its vCPUs (the largest vcpus - cpu_cores: a burst no
  // window showed yet; VMs with vcpus 0 are left out of it).
  double peak_upper = 1.0;
  // Memory and link use may not exceed these fractions of the capacity.
  double mem_upper = 0.95;
  double link_upper = 0.9;
  // magnet only: an emptying fills its target hosts up to cpu_upper and
  // peak_upper less this, so that the next small rise of demand does not
  // make them give VMs back (hysteresis between consolidating and
  // relieving; bench/place measures what it buys).
  double consolidation_margin = 0.01;
  // At most this many moves (0: no limit).
  int max_moves = 0;
  // The quantile each vm_demand::cpu_peak_cores is of its CPU demand over
  // the window (0.5 < q < 1): 0.95 for a p95, n/(n+1) for the largest of n
  // samples.  Only the SLA risk depends on it.
  double peak_quantile = 0.95;
};

enum class algorithm { magnet, first_fit, round_robin, pabfd, watcher };

// "magnet", "first-fit", "round-robin", "pabfd", "watcher".
std::string_view name_of(algorithm a);
result<algorithm> parse_algorithm(std::string_view s);

// A plan for @f by @a.  Every VM ends on a host that accepts VMs (or stays
// where it is); a VM that is not migratable stays.  A target host stays
// within the limits the algorithm checks: magnet all of the options'
// (mean CPU, peak CPU, memory, link); the baselines, as published, the
// mean CPU and memory only.  Hosts above any of the options' limits after
// the plan are named in its notes, whichever algorithm made it.
//
// The SLA risk (plan::sla_risk, host_outcome::sla_risk), whichever
// algorithm made the plan: per host, the chance that its CPU demand at an
// instant of a window like the observed one exceeds its CPUs, taking the
// demand as normal with the host's mean demand and a spread whose
// peak_quantile is each VM's peak (VMs independent: a standard deviation
// of sqrt(sum (peak - mean)^2) / z(peak_quantile)); a host whose VMs have
// no spread is short (1) or not (0).  The fleet's figure is the mean over
// the hosts with VMs: the expected fraction of active hosts short of CPU
// at an instant, what bench/place measures as SLATAH.
//
// An error only for a fleet that is not one (naming the VM or host): a VM
// on a host the fleet does not list, two hosts or two VMs of one name, a
// negative or non-finite demand or capacity, a host without CPUs or power
// model; or options out of range.
result<plan> make_plan(const fleet& f, algorithm a, const plan_options& o);

}  // namespace magnet::place
