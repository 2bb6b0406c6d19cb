// One algorithm over one trace: at every step the planner sees the step's
// demand and returns moves, applied for the next step; the step itself is
// accounted sample by sample (README.md, "What is measured").
#pragma once

#include <string>
#include <vector>

#include "magnet/place/planner.h"
#include "trace.h"

namespace magnet::bench::place {

struct sim_config {
  std::vector<magnet::place::host_spec> hosts;
  magnet::place::plan_options options;
  // Live migration's bandwidth as a fraction of the hosts' link (CloudSim:
  // half of it); a VM's migration takes its memory over it.
  double migration_link_share = 0.5;
};

struct sim_result {
  std::string algorithm;
  double energy_kwh = 0;
  double slatah = 0;       // mean over hosts ever on of (time at 100 % CPU / time on)
  double pdm = 0;          // mean over VMs of (degradation by migrations / CPU requested)
  double slav = 0;         // slatah * pdm
  long migrations = 0;
  double migrated_gib = 0;  // the moved VMs' memory
  double hosts_on_mean = 0;
  int hosts_on_min = 0, hosts_on_max = 0;
  double cpu_short = 0;    // CPU demand not served (hosts at 100 %) / demand
  double link_over = 0;    // time hosts' VMs' traffic exceeded the link / time on
  double risk_mean = 0;    // the plans' sla_risk, mean over steps
  std::vector<double> plan_wall_ms, plan_cpu_ms;  // per planner call
  std::vector<double> fleet_kw, hosts_on;         // per step, for the plot
  // Per step, for --diag: the mean CPU utilisation of the hosts on, how
  // many of them were below half their CPUs, and the plan's moves.
  std::vector<double> util_on, hosts_light, step_moves;
  std::vector<std::string> errors;                // planner errors (none expected)
};

// Every VM placed round-robin on the hosts that have the memory for it:
// the same start for every algorithm.  Returns the host index of each VM.
std::vector<int> initial_placement(const trace& t, const sim_config& c);

sim_result simulate(trace& t, const sim_config& c, magnet::place::algorithm a);

}  // namespace magnet::bench::place
