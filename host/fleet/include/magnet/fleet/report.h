// A plan as `magnet place` prints it: a table for people, JSON for
// programs (its schema: docs/cli.md, "magnet place").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/fleet/apply.h"
#include "magnet/place/fleet.h"
#include "magnet/place/planner.h"

namespace magnet::fleet {

struct plan_context {
  const place::fleet* fleet = nullptr;
  place::algorithm algorithm = place::algorithm::magnet;
  place::plan_options options;
  double window_s = 0;
  std::vector<std::string> notes;  // the fleet's (assemble_fleet's); the plan's own follow
};

// The table: a line of totals, the moves, the hosts after the plan (free
// CPU, peak CPU, memory and link; watts before and after; emptied), the
// notes.
std::string plan_table(const plan_context& c, const place::plan& p);
nlohmann::json plan_json(const plan_context& c, const place::plan& p);
// What --apply did, for plan_json's "applied".
nlohmann::json apply_json(const apply_report& r);

}  // namespace magnet::fleet
