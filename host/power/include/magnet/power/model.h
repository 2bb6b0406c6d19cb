// A host power model, SPECpower-style: the host's power as a function of
// its CPU utilisation alone, from its idle and full power and optionally a
// curve of measured points between them, linearly interpolated (as CloudSim
// and Beloglazov & Buyya's PABFD use the SPECpower_ssj2008 tables).  Used
// when the host has no RAPL (docs/placement.md).
//
// The file (--power-model FILE), "key = value" lines and '#' comments:
//   idle  = 86            watts at 0 % utilisation
//   full  = 117           watts at 100 %
//   point = 50% 102       a measured point (repeat): utilisation, watts
//   error = 15%           optional: how far the model's power above idle may
//                         be from the real one, relative to it (what a
//                         calibration against a meter found)
// Points lie strictly between 0 % and 100 %, in increasing utilisation, and
// their watts never fall as utilisation rises (a curve that falls is taken
// for a typo), so every point is between idle and full.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/result.h"

namespace magnet::power {

struct model_point {
  double util = 0;  // 0..1
  double watts = 0;
};

struct power_model {
  // From 0 (idle) to 1 (full), increasing utilisation, at least those two.
  std::vector<model_point> points;
  // The stated error of the power above idle, as a fraction of it (error =
  // N%); none: not stated.  Relative to the active power, not the total, so
  // that a VM's share carries it as it is (docs/placement.md).
  std::optional<double> error;
  double idle_watts() const { return points.front().watts; }
  double full_watts() const { return points.back().watts; }
};

// The model's power at @util (clamped to 0..1): linear between the two
// points around it.  Pure.
double model_watts(const power_model& m, double util);

// A model from its file's text; errors are "NAME:LINE: why" (or "NAME: why"
// for what no single line holds, such as a missing idle).
result<power_model> parse_power_model(std::string_view text, const std::string& name);
// The file at @path; "PATH: why" when it cannot be read.
result<power_model> load_power_model(const std::string& path);

// "86 W idle, 117 W full, 9 points between" for the daemon's log, and
// ", error 15% above idle" when the file states one.
std::string describe(const power_model& m);

}  // namespace magnet::power
