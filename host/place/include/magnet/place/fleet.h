// A fleet as the placement advisor sees it, and the plan it proposes
// (docs/placement.md, "Placement").  Plain data: `magnet place` fills a
// fleet from Prometheus and libvirt (host/cli), bench/place from demand
// traces; the planners (planner.h) read it and return a plan.
#pragma once

#include <string>
#include <vector>

#include "magnet/power/model.h"

namespace magnet::place {

// One host: its capacity, its power curve, and what it draws now.
struct host_spec {
  std::string name;         // the fleet's name for it (its Prometheus instance label or libvirt host)
  double cpus = 0;          // logical CPUs the VMs may use
  double mem_bytes = 0;     // memory the VMs may use; 0: unknown, not checked
  double link_bps = 0;      // capacity of the link its VMs share (bits/s); 0: unknown, not checked
  power::power_model model; // watts as a function of CPU utilisation (predicts a change of load)
  double watts_now = -1;    // measured (magnet_host_power_watts); < 0: unknown, the model is used
  double idle_cpu_cores = 0;  // CPU the host itself uses besides its VMs (cores)
  bool accepts_vms = true;  // false: may be emptied, never a target (maintenance, another pool)
};

// One VM's demand over the window the advisor looked at.
struct vm_demand {
  std::string name;         // libvirt domain name
  std::string uuid;
  std::string host;         // the host it runs on now (a host_spec's name)
  double cpu_cores = 0;     // mean vCPU run time per second (the rate of magnet_vm_vcpu_seconds_total{state="run"})
  double cpu_peak_cores = 0;  // a high quantile of the same over the window (>= cpu_cores; the
                              // quantile is plan_options::peak_quantile; below the mean: the mean)
  double vcpus = 0;         // its vCPU count: it can never use more (0: unknown)
  double mem_bytes = 0;     // its memory (libvirt's current allocation)
  double net_bps = 0;       // its traffic at its tap, both directions (bits/s)
  double watts_now = -1;    // its measured share (magnet_vm_power_watts); < 0: unknown
  bool migratable = true;   // false: stays where it is (libvirt says it cannot move, or pinned)
};

struct fleet {
  std::vector<host_spec> hosts;
  std::vector<vm_demand> vms;
};

struct move {
  std::string vm;    // domain name
  std::string uuid;
  std::string from;  // host names
  std::string to;
  double watts_saved = 0;  // the plan's predicted fleet watts before this move minus after it
};

// A host after the plan.
struct host_outcome {
  std::string name;
  double cpu_used = 0;        // cores: its VMs' demand plus its own
  double cpu_peak_used = 0;   // cores: the host's peak demand (plan_options::peak_upper): its own
                              // and the VMs' means plus the more of the root of the sum of each
                              // VM's (peak - mean)^2 and the largest vcpus - mean of one VM
  double mem_used = 0;        // bytes
  double net_used_bps = 0;
  double watts_before = 0;    // predicted (or measured) now
  double watts_after = 0;     // predicted after the plan; 0 when it is emptied and may be switched off
  bool emptied = false;       // had VMs, has none after the plan
  double sla_risk = 0;        // the chance it runs short of CPU at an instant (planner.h); 0 when empty
};

struct plan {
  std::vector<move> moves;        // in the order they are to be performed
  std::vector<host_outcome> hosts;  // one per fleet host, same order as fleet.hosts
  double watts_before = 0;        // the fleet's
  double watts_after = 0;
  // The chance, as the planner estimates it, that a host of the plan runs
  // short of CPU in a window like the one observed (0..1): the mean of the
  // hosts' sla_risk over the hosts with VMs after the plan (planner.h).
  double sla_risk = 0;
  std::vector<std::string> notes;  // why a VM was not moved, a constraint that bound, ...
};

}  // namespace magnet::place
