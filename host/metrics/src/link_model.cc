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


link_share::link_share(double capacity_bps, std::span<const link_usage> use) : capacity_(capacity_bps) {
  for (const auto& u : use) {
    inelastic_ += u.inelastic_bps;
    if (u.elastic_bps <= 0) continue;
    if (u.limited) ++limited_;
    else finite_.push_back(u.elastic_bps);
  }
  std::sort(finite_.begin(), finite_.end());
  prefix_.resize(finite_.size() + 1);
  for (size_t k = 0; k < finite_.size(); ++k) prefix_[k + 1] = prefix_[k] + finite_[k];
}

double link_share::demand(size_t k, size_t skip) const { return finite_[k >= skip ? k + 1 : k]; }

long double link_share::taken(size_t k, size_t skip, double own) const {
  return k <= skip ? prefix_[k] : prefix_[k + 1] - own;
}

double link_share::available(const link_usage* own) const {
  constexpr size_t none = static_cast<size_t>(-1);
  const long double rest = capacity_ - (inelastic_ - (own ? own->inelastic_bps : 0));
  if (rest <= 0) return 0;
  size_t skip = none, limited = limited_;
  double own_demand = 0;
  if (own && own->elastic_bps > 0) {
    if (own->limited) --limited;
    else {
      own_demand = own->elastic_bps;
      auto at = std::lower_bound(finite_.begin(), finite_.end(), own_demand);
      skip = static_cast<size_t>(at - finite_.begin());
    }
  }
  const size_t finite = finite_.size() - (skip == none ? 0 : 1);
  const size_t others = finite + limited;
  // The level once the k smallest demands kept theirs.
  auto level = [&](size_t k) {
    return (rest - taken(k, skip, own_demand)) / static_cast<long double>(others + 1 - k);
  };
  // available_bps stops at the first demand not below the level.  Below
  // that point every demand is under its level and from it on every one is
  // at or over it (a level only rises while the demands taken are under
  // it), so the point is found by bisection.  Limited demands, infinite,
  // come after every finite one and always stop it.
  size_t lo = 0, hi = finite;
  while (lo < hi) {
    const size_t k = lo + (hi - lo) / 2;
    if (demand(k, skip) >= level(k)) hi = k;
    else lo = k + 1;
  }
  return static_cast<double>(level(lo));
}

}  // namespace magnet::host
