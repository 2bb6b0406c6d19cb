// A VM's share of the host's power as stats of its view (proto/magnet/
// view.h, ids 0x05xx): what its guest receives and `magnet stats` shows,
// from the same meter as /metrics' magnet_vm_power_watts and
// magnet_vm_energy_joules_total (docs/placement.md, "Into each guest").
// The host's total is not among them: a guest that knew it and its own
// share would know the other VMs' load (lib/src/guest_schema.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "magnet/power/meter.h"
#include "magnet/view_codec.h"

namespace magnet::host {

// Appends @vm's power stats as of @m's last sample:
//   power.watts            over the meter's window (about 1 s); invalid
//                          before the meter has one
//   energy.joules          since the meter first saw the VM (a total)
//   power.source           MAGNET_VIEW_POWER_RAPL or _MODEL (a level)
//   power.model_err_watts  the model as source only: power.watts times the
//                          model's stated error, invalid when it states none
// Nothing for a VM the meter does not know (not sampled yet, or gone): the
// stats are absent, never 0.  Pure.
void append_power_stats(const power::power_meter& m, uint32_t vm, std::vector<view::stat_value>& out);

}  // namespace magnet::host
