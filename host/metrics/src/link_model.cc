#include "magnet/metrics/link_model.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace magnet::host {

double available_bps(double capacity_bps, const std::map<uint32_t, link_usage>& use, uint32_t vm) {
  double rest = capacity_bps;
  std::vector<double> demands;  // elastic others
  for (const auto& [id, u] : use) {
    if (id == vm) continue;
    rest -= u.inelastic_bps;
    if (u.elastic_bps > 0)
      demands.push_back(u.limited ? std::numeric_limits<double>::infinity() : u.elastic_bps);
  }
  if (rest <= 0) return 0;
  // Water filling: the others whose demand is below the level keep it,
  // the rest (and this VM) share what remains equally.
  std::sort(demands.begin(), demands.end());
  double sharers = static_cast<double>(demands.size()) + 1;
  for (double d : demands) {
    if (d >= rest / sharers) break;
    rest -= d;
    sharers -= 1;
  }
  return rest / sharers;
}

}  // namespace magnet::host
