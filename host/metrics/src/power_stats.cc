#include "magnet/metrics/power_stats.h"

namespace magnet::host {

void append_power_stats(const power::power_meter& m, uint32_t vm, std::vector<view::stat_value>& out) {
  const auto& vms = m.totals().vms;
  const auto it = vms.find(vm);
  if (it == vms.end()) return;
  const uint64_t window_ns = m.window_ns();
  const auto window_us = static_cast<uint32_t>(window_ns / 1000);
  const uint16_t have = window_ns ? MAGNET_VSTAT_VALID : 0;
  const double watts = have ? m.vm_watts(vm) : 0;
  out.push_back({MAGNET_STAT_POWER_WATTS, have, 0, window_us, 0, watts});
  out.push_back({MAGNET_STAT_ENERGY_JOULES, MAGNET_VSTAT_VALID, 0, 0, 0, it->second});
  const power::power_model* model = m.model();
  out.push_back({MAGNET_STAT_POWER_SOURCE, MAGNET_VSTAT_VALID, 0, 0, 0,
                 static_cast<double>(model ? MAGNET_VIEW_POWER_MODEL : MAGNET_VIEW_POWER_RAPL)});
  if (!model) return;
  // The stated error is of the power above idle, which is all a VM's share
  // is of: its share carries it as it is.
  const bool err = have && model->error;
  out.push_back({MAGNET_STAT_POWER_MODEL_ERR, static_cast<uint16_t>(err ? MAGNET_VSTAT_VALID : 0), 0,
                 window_us, 0, err ? *model->error * watts : 0});
}

}  // namespace magnet::host
