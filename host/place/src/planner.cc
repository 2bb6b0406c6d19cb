// make_plan: the fleet checked (every refusal names the host or VM), then
// the algorithm asked for on a state made from it.
#include "magnet/place/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "algorithms.h"

namespace magnet::place {

namespace {

constexpr std::pair<algorithm, std::string_view> kNames[] = {
    {algorithm::magnet, "magnet"},
    {algorithm::first_fit, "first-fit"},
    {algorithm::round_robin, "round-robin"},
    {algorithm::pabfd, "pabfd"},
    {algorithm::watcher, "watcher"},
};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// "" when @v is a finite number >= 0, else why not, naming @what.
std::string bad_amount(const std::string& what, double v) {
  if (!std::isfinite(v)) return what + " is not a finite number";
  if (v < 0) return what + " is negative (" + num(v) + ")";
  return "";
}

status check_hosts(const fleet& f) {
  std::vector<std::string_view> names;
  for (const host_spec& h : f.hosts) {
    const std::string at = "host '" + h.name + "': ";
    if (h.name.empty()) return error{"a host has no name"};
    if (!std::isfinite(h.cpus) || h.cpus <= 0) return error{at + "no CPUs (cpus " + num(h.cpus) + ")"};
    for (auto [what, v] : {std::pair{"mem_bytes", h.mem_bytes}, {"link_bps", h.link_bps},
                           {"idle_cpu_cores", h.idle_cpu_cores}})
      if (auto why = bad_amount(what, v); !why.empty()) return error{at + why};
    if (h.model.points.size() < 2) return error{at + "no power model"};
    if (!std::isfinite(h.watts_now)) return error{at + "watts_now is not a finite number"};
    names.push_back(h.name);
  }
  std::sort(names.begin(), names.end());
  if (auto d = std::adjacent_find(names.begin(), names.end()); d != names.end())
    return error{"two hosts are named '" + std::string(*d) + "'"};
  return {};
}

status check_vms(const fleet& f) {
  std::vector<std::string_view> hosts, names;
  for (const host_spec& h : f.hosts) hosts.push_back(h.name);
  std::sort(hosts.begin(), hosts.end());
  for (const vm_demand& v : f.vms) {
    const std::string at = "VM '" + v.name + "': ";
    if (v.name.empty()) return error{"a VM on host '" + v.host + "' has no name"};
    if (!std::binary_search(hosts.begin(), hosts.end(), std::string_view(v.host)))
      return error{at + "runs on host '" + v.host + "', which the fleet does not list"};
    for (auto [what, val] : {std::pair{"cpu_cores", v.cpu_cores}, {"cpu_peak_cores", v.cpu_peak_cores},
                             {"vcpus", v.vcpus}, {"mem_bytes", v.mem_bytes}, {"net_bps", v.net_bps}})
      if (auto why = bad_amount(what, val); !why.empty()) return error{at + why};
    if (!std::isfinite(v.watts_now)) return error{at + "watts_now is not a finite number"};
    names.push_back(v.name);
  }
  std::sort(names.begin(), names.end());
  if (auto d = std::adjacent_find(names.begin(), names.end()); d != names.end())
    return error{"two VMs are named '" + std::string(*d) + "'"};
  return {};
}

status check_options(const plan_options& o) {
  for (auto [what, v] : {std::pair{"cpu_upper", o.cpu_upper}, {"peak_upper", o.peak_upper},
                         {"mem_upper", o.mem_upper}, {"link_upper", o.link_upper}})
    if (!std::isfinite(v) || v <= 0) return error{std::string(what) + " must be above 0 (is " + num(v) + ")"};
  if (!std::isfinite(o.consolidation_margin) || o.consolidation_margin < 0 ||
      o.consolidation_margin >= std::min(o.cpu_upper, o.peak_upper))
    return error{"consolidation_margin must be 0 or more and below cpu_upper and peak_upper (is " +
                 num(o.consolidation_margin) + ")"};
  if (o.max_moves < 0) return error{"max_moves must be 0 (no limit) or more (is " + num(o.max_moves) + ")"};
  if (!(o.peak_quantile > 0.5 && o.peak_quantile < 1))
    return error{"peak_quantile must be between 0.5 and 1 (is " + num(o.peak_quantile) + ")"};
  return {};
}

}  // namespace

std::string_view name_of(algorithm a) {
  for (auto [alg, name] : kNames)
    if (alg == a) return name;
  return "?";
}

result<algorithm> parse_algorithm(std::string_view s) {
  for (auto [alg, name] : kNames)
    if (name == s) return alg;
  return error{"unknown placement algorithm '" + std::string(s) +
               "' (magnet, first-fit, round-robin, pabfd, watcher)"};
}

result<plan> make_plan(const fleet& f, algorithm a, const plan_options& o) {
  for (status st : {check_options(o), check_hosts(f), check_vms(f)})
    if (!st) return st.err();
  detail::state s(f, o);
  switch (a) {
    case algorithm::magnet: return detail::plan_magnet(s);
    case algorithm::first_fit: return detail::plan_first_fit(s);
    case algorithm::round_robin: return detail::plan_round_robin(s);
    case algorithm::pabfd: return detail::plan_pabfd(s);
    case algorithm::watcher: return detail::plan_watcher(s);
  }
  return error{"unknown placement algorithm"};
}

namespace detail {

int moves_left(const state& s) {
  if (s.o.max_moves == 0) return 1 << 30;
  return std::max(0, s.o.max_moves - s.moved_count());
}

}  // namespace detail

}  // namespace magnet::place
