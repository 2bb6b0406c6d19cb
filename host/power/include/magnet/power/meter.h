// The host's power, tick by tick: its source (RAPL or a model), the split
// of each interval's energy (attribution.h) summed into cumulative joules
// per VM and per host part, and watts over the last second.  No threads:
// the daemon calls sample() at its tick.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "magnet/power/attribution.h"
#include "magnet/power/model.h"
#include "magnet/power/powercap.h"
#include "magnet/result.h"

namespace magnet::power {

// Cumulative joules since the meter's first sample.  host_j = idle_j +
// own_j + gone_j + the sum of vms, up to floating point.
struct energy_totals {
  double host_j = 0;
  double idle_j = 0;  // the host's idle power
  double own_j = 0;   // the host's busy time that was no VM's work
  double gone_j = 0;  // VMs that have gone since (their series with them)
  std::map<uint32_t, double> vms;
};

class power_meter {
 public:
  static constexpr uint64_t kWindowNs = 1'000'000'000;  // watts over the last second

  explicit power_meter(powercap_reader rapl) : rapl_(std::move(rapl)) {}
  explicit power_meter(power_model model) : model_(std::move(model)) {}

  // "rapl" or "model": the source label of /metrics.
  const char* source() const { return rapl_ ? "rapl" : "model"; }

  // One tick at @now_ns (monotonic) with the host's CPU times and each
  // VM's work, both cumulative from any origin (only their growth is
  // used).  The first sample sets the baselines and counts nothing; so
  // does a VM's first.  VMs absent from @vms are forgotten, their joules
  // moved to gone_j.  A counter that went back (a VM's threads seen anew)
  // counts nothing for that interval.  An error (RAPL unreadable) changes
  // nothing: the next good sample counts the energy since the last one.
  status sample(uint64_t now_ns, const cpu_times& cpu, const std::map<uint32_t, vm_work>& vms);

  const energy_totals& totals() const { return totals_; }
  // Watts over the last second of samples (0 before two samples).
  double host_watts() const;
  double vm_watts(uint32_t vm) const;
  // The length of that window (0 before two samples).
  uint64_t window_ns() const { return window_ns_; }
  // The model, when it is the source; null with RAPL.
  const power_model* model() const { return rapl_ ? nullptr : &*model_; }

 private:
  struct interval {
    uint64_t ns = 0;
    double host_j = 0;
    std::vector<std::pair<uint32_t, double>> vms;
  };
  std::optional<powercap_reader> rapl_;
  std::optional<power_model> model_;
  bool have_base_ = false;
  uint64_t last_ns_ = 0;
  cpu_times last_cpu_;
  std::vector<uint64_t> last_uj_;
  std::map<uint32_t, vm_work> last_vms_;
  energy_totals totals_;
  std::deque<interval> window_;
  uint64_t window_ns_ = 0;
};

}  // namespace magnet::power
