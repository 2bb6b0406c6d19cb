// Per-VM demand over time for bench/place: a synthetic generator and the
// CSV trace format (bench/place/README.md describes both).  A trace is
// played step by step (the planner's period, 5 minutes by default); each
// step holds every VM's CPU samples within it (the resolution the
// simulator checks hosts at) and its network rate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "magnet/result.h"

namespace magnet::bench::place {

struct vm_info {
  std::string name;
  double vcpus = 1;
  double mem_bytes = 0;
};

struct step_demand {
  int samples = 0;         // CPU samples per VM within the step
  std::vector<float> cpu;  // cores, [sample * vms + vm]
  std::vector<float> net;  // bits/s over the step, [vm]
};

class trace {
 public:
  virtual ~trace() = default;
  virtual const std::vector<vm_info>& vms() const = 0;
  virtual int steps() const = 0;
  virtual double step_seconds() const = 0;
  virtual int samples_per_step() const = 0;
  virtual std::string describe() const = 0;
  // Back to the first step: every algorithm plays the same demand.
  virtual void rewind() = 0;
  // The next step's demand into @out (sized by the trace).
  virtual void next(step_demand& out) = 0;
};

struct synthetic_options {
  int vms = 10000;
  int steps = 288;        // 24 h of 5-minute steps
  double step_s = 300;
  int samples = 10;       // 30-second samples
  uint64_t seed = 1;
};
std::unique_ptr<trace> synthetic_trace(const synthetic_options& o);

// The CSV file at @path (README.md, "The CSV trace"), played in steps of
// @step_s; "PATH:LINE: why" for a bad line.
result<std::unique_ptr<trace>> csv_trace(const std::string& path, double step_s);

}  // namespace magnet::bench::place
