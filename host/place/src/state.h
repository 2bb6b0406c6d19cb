// The working state the planners share (private to host/place): the fleet
// as indices, each host's load as VMs leave and arrive, the limits a
// planner checks, the power each host is predicted to draw, and the plan
// made from where the VMs ended up.
#pragma once

#include <string>
#include <vector>

#include "magnet/place/fleet.h"
#include "magnet/place/planner.h"

namespace magnet::place::detail {

// What the VMs on a host add up to.
struct load {
  double cpu = 0;   // cores: the VMs' mean demand (the host's own is added by state)
  double dev2 = 0;  // sum over the VMs of (peak - mean)^2, in cores^2: see peak_cores()
  double gap = 0;   // the most one VM could add at once: the largest vcpus - mean (vCPUs known)
  double mem = 0;   // bytes
  double net = 0;   // bits/s
  int vms = 0;
};

// The limits a planner checks.  magnet checks all four; the baselines the
// ones their published form knows: the CPU's mean and memory.
struct limits {
  bool peak = true;   // the VMs' peaks together (peak_upper)
  bool burst = true;  // one VM using all its vCPUs (peak_upper): where VMs go, not a reason to move them
  bool link = true;  // the VMs' network demand against the link (link_upper)
  double cpu_upper = 0.8;
  double peak_upper = 1.0;
  double mem_upper = 0.95;
  double link_upper = 0.9;
};
limits all_limits(const plan_options& o);
limits cpu_and_memory(const plan_options& o);

class state {
 public:
  // @f must have passed validation (planner.cc): every VM's host exists.
  state(const fleet& f, const plan_options& o);

  const fleet& f;
  const plan_options& o;

  int hosts() const { return int(f.hosts.size()); }
  int vms() const { return int(f.vms.size()); }
  int host_of(int v) const { return at_[v]; }  // -1 while detached
  int origin_of(int v) const { return origin_[v]; }
  bool moved(int v) const { return at_[v] != origin_[v]; }
  const load& load_of(int h) const { return load_[h]; }
  const std::vector<int>& vms_on(int h) const { return on_[h]; }
  // A VM's mean and peak demand (a peak below the mean, or none, is the mean).
  double mean(int v) const { return f.vms[v].cpu_cores; }
  double peak(int v) const { return peak_[v]; }

  // The host's CPU demand in cores, its own work included: with the VMs'
  // means, and at its peak: the means plus the more of (a) the VMs' peaks
  // together and (b) one VM using all its vCPUs.  (a): the peaks seldom
  // coincide; with independent deviations the sum's quantile lies the root
  // of the summed squared deviations above its mean (exact for normal
  // deviations), not at the sum of the peaks.  (b): what no window shows,
  // a VM that starts a burst after it; the host survives any one.
  double cpu_cores(int h) const { return cpu_cores(h, load_[h]); }
  double cpu_cores(int h, const load& l) const;
  double peak_cores(int h) const { return peak_cores(h, load_[h]); }
  double peak_cores(int h, const load& l) const;
  double spread_cores(int h, const load& l) const;  // with the VMs' peaks together only
  double burst_cores(int h, const load& l) const;   // with one VM at all its vCPUs only
  double util(int h) const;  // cpu_cores over the host's CPUs

  // Predicted watts with @l on the host: its model at that utilisation
  // plus its calibration (watts_now less the model's figure now, when
  // measured); 0 with no VMs: an empty host may be switched off.
  double watts(int h) const { return watts_[h]; }
  double watts(int h, const load& l) const;
  // The host's watts with @v added, less its watts now.
  double added_watts(int v, int h) const;

  load with(int h, int v) const { return plus(load_[h], v); }
  // @h's load without @v (and without those @also marks, indexed by VM).
  load without(int h, int v, const std::vector<char>* also = nullptr) const;
  load plus(load l, int v) const;
  double gap(int v) const;  // vcpus - mean; 0 when its vCPUs are unknown
  bool within(int h, const load& l, const limits& lim) const;
  bool within(int h, const limits& lim) const { return within(h, load_[h], lim); }
  // Whether @h may take @v: it accepts VMs, v is not already there, and
  // with v it stays within @lim.
  bool fits(int v, int h, const limits& lim) const;

  void move_to(int v, int h);  // from wherever v is (or detached) to h
  void detach(int v);          // off its host, for a planner that repacks
  int moved_count() const;

  // The plan from the fleet as it was to where the VMs are now: one move
  // per VM whose host changed, in @order (VMs in the order they first
  // moved), each with the watts the fleet saves by it after the ones
  // before it; every host's outcome, and the SLA risk (planner.h).
  plan finish(const std::vector<int>& order, std::vector<std::string> notes) const;

 private:
  std::vector<int> at_, origin_;
  std::vector<double> peak_;
  std::vector<load> load_;
  std::vector<std::vector<int>> on_;
  std::vector<double> offset_;  // watts: calibration of each host's model
  std::vector<double> watts_;   // watts(h, load_[h]), kept as VMs come and go
  void add(int v, int h);
  void remove(int v);
  load minus(load l, int v) const;  // gap left as it was: without() sets it
};

// The chance that a host with @mean_cores and spread @dev2 (as load::dev2,
// the VMs' peaks at the normal quantile @z) needs more than @cpus at an
// instant of the window (planner.h, "sla_risk").
double overload_probability(double mean_cores, double dev2, double cpus, double z);

// The standard normal quantile (the z of a one-sided quantile @q).
double normal_quantile(double q);

}  // namespace magnet::place::detail
