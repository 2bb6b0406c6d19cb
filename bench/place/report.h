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

}  // namespace magnet::bench::place
