// bench/place's output: the table, --json and the gnuplot plot.
#pragma once

#include <string>
#include <vector>

#include "magnet/result.h"
#include "simulate.h"

namespace magnet::bench::place {

struct run_info {
  std::string trace;  // the trace's description
  int hosts = 0, vms = 0, steps = 0;
  double step_s = 0;
  std::string host_models;
  magnet::place::plan_options options;
  double migration_link_share = 0;
};

void print_table(const run_info& info, const std::vector<sim_result>& rs);
void print_json(const run_info& info, const std::vector<sim_result>& rs);
// The fleet's power and the hosts on, per step, for every algorithm: the
// data next to @png (PNG.dat) and the plot drawn by gnuplot.
status plot(const std::vector<sim_result>& rs, double step_s, const std::string& png);
// Per step and algorithm (--diag): the hour, the hosts on, their mean CPU
// utilisation, the hosts on below half their CPUs, the fleet's kW and the
// moves its plan made at the step's end: where one planner keeps more
// hosts on than another, and at what utilisation.
status write_diag(const std::vector<sim_result>& rs, double step_s, const std::string& file);

}  // namespace magnet::bench::place
