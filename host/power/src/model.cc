#include "magnet/power/model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

#include "magnet/config_file.h"

namespace magnet::power {

double model_watts(const power_model& m, double util) {
  const auto& p = m.points;
  util = std::clamp(std::isnan(util) ? 0.0 : util, 0.0, 1.0);
  // The first point at or above @util; points[0].util is 0, so it exists
  // past the first.
  auto hi = std::lower_bound(p.begin(), p.end(), util,
                             [](const model_point& a, double u) { return a.util < u; });
  if (hi == p.begin()) return hi->watts;
  if (hi == p.end()) return p.back().watts;
  auto lo = hi - 1;
  const double f = (util - lo->util) / (hi->util - lo->util);
  return lo->watts + f * (hi->watts - lo->watts);
}

namespace {

// A finite, non-negative number: all of @s.
std::optional<double> number(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

// "50% 102" or "50 102": utilisation in percent, watts.
result<model_point> parse_point(std::string_view v) {
  const size_t sp = v.find_first_of(" \t");
  if (sp == std::string_view::npos) return error{"'" + std::string(v) + "' is not 'UTIL% WATTS'"};
  std::string_view u = v.substr(0, sp), w = v.substr(v.find_first_not_of(" \t", sp));
  if (!u.empty() && u.back() == '%') u.remove_suffix(1);
  auto uv = number(u);
  auto wv = number(w);
  if (!uv || *uv <= 0 || *uv >= 100)
    return error{"'" + std::string(v.substr(0, sp)) + "' is not a utilisation strictly between 0% and 100%"};
  if (!wv) return error{"'" + std::string(w) + "' is not a number of watts"};
  return model_point{*uv / 100, *wv};
}

// "15%": a fraction (0.15); the percent sign is required (a bare number
// could be read as watts).
result<double> parse_error(std::string_view v) {
  const bool pct = !v.empty() && v.back() == '%';
  auto n = pct ? number(v.substr(0, v.size() - 1)) : std::nullopt;
  if (!n) return error{"'" + std::string(v) + "' is not a percentage (error = N%)"};
  return *n / 100;
}

}  // namespace

// The model of a settings file's lines (@name: the file, for errors).
static result<power_model> model_of(const std::vector<config_entry>& entries, const std::string& name) {
  std::optional<double> idle, full;
  int idle_line = 0, full_line = 0;
  power_model m;
  std::vector<int> lines;  // of each point
  for (const auto& e : entries) {
    const std::string at = name + ":" + std::to_string(e.line) + ": ";
    if (e.key == "idle" || e.key == "full") {
      auto& slot = e.key == "idle" ? idle : full;
      if (slot) return error{at + e.key + " set again"};
      slot = number(e.value);
      if (!slot) return error{at + e.key + ": '" + e.value + "' is not a number of watts"};
      (e.key == "idle" ? idle_line : full_line) = e.line;
    } else if (e.key == "point") {
      auto p = parse_point(e.value);
      if (!p) return error{at + "point: " + p.err().message};
      if (!m.points.empty() && p->util <= m.points.back().util)
        return error{at + "point: utilisation " + e.value.substr(0, e.value.find_first_of(" \t")) +
                     " is not above the point before (line " + std::to_string(lines.back()) + ")"};
      m.points.push_back(*p);
      lines.push_back(e.line);
    } else if (e.key == "error") {
      if (m.error) return error{at + "error set again"};
      auto v = parse_error(e.value);
      if (!v) return error{at + "error: " + v.err().message};
      m.error = *v;
    } else {
      return error{at + "unknown key '" + e.key + "' (idle, full, point, error)"};
    }
  }
  if (!idle) return error{name + ": no 'idle = WATTS' line"};
  if (!full) return error{name + ": no 'full = WATTS' line"};
  if (*full < *idle)
    return error{name + ":" + std::to_string(full_line) + ": full (" + std::to_string(*full) +
                 " W) is below idle (line " + std::to_string(idle_line) + ")"};
  double before = *idle;
  for (size_t i = 0; i < m.points.size(); ++i) {
    const double w = m.points[i].watts;
    if (w < before || w > *full)
      return error{name + ":" + std::to_string(lines[i]) + ": point: its watts fall outside the curve (" +
                   (w < before ? "below the point or idle before it" : "above full") +
                   "): the power must not fall as utilisation rises"};
    before = w;
  }
  m.points.insert(m.points.begin(), model_point{0, *idle});
  m.points.push_back(model_point{1, *full});
  return m;
}

result<power_model> parse_power_model(std::string_view text, const std::string& name) {
  auto entries = parse_config(text, name);
  if (!entries) return entries.err();
  return model_of(*entries, name);
}

result<power_model> load_power_model(const std::string& path) {
  auto entries = load_config(path);
  if (!entries) return entries.err();
  return model_of(*entries, path);
}

std::string describe(const power_model& m) {
  auto w = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g W", v);
    return std::string(b);
  };
  std::string err;
  if (m.error) {
    char b[48];
    std::snprintf(b, sizeof b, ", error %g%% above idle", *m.error * 100);
    err = b;
  }
  return w(m.idle_watts()) + " idle, " + w(m.full_watts()) + " full, " + std::to_string(m.points.size() - 2) +
         (m.points.size() == 3 ? " point between" : " points between") + err;
}

}  // namespace magnet::power
