#include "state.h"

#include <algorithm>
#include <cmath>

#include "magnet/power/model.h"

namespace magnet::place::detail {

limits all_limits(const plan_options& o) {
  return limits{true, true, true, o.cpu_upper, o.peak_upper, o.mem_upper, o.link_upper};
}

limits cpu_and_memory(const plan_options& o) {
  return limits{false, false, false, o.cpu_upper, o.peak_upper, o.mem_upper, o.link_upper};
}

state::state(const fleet& fl, const plan_options& opts)
    : f(fl), o(opts), at_(fl.vms.size(), -1), origin_(fl.vms.size(), -1), peak_(fl.vms.size()),
      load_(fl.hosts.size()), on_(fl.hosts.size()), offset_(fl.hosts.size(), 0), watts_(fl.hosts.size(), 0) {
  std::vector<std::pair<std::string_view, int>> index;
  index.reserve(f.hosts.size());
  for (int h = 0; h < hosts(); ++h) index.emplace_back(f.hosts[h].name, h);
  std::sort(index.begin(), index.end());
  for (int v = 0; v < vms(); ++v) {
    const vm_demand& d = f.vms[v];
    peak_[v] = std::max(d.cpu_peak_cores, d.cpu_cores);
    auto it = std::lower_bound(index.begin(), index.end(), std::pair<std::string_view, int>(d.host, -1));
    origin_[v] = it->second;  // validation saw to it that the host exists
    add(v, origin_[v]);
  }
  // Calibrate each host that draws for its VMs now: what the meter says
  // less what the model says at the same load, kept as the load changes.
  for (int h = 0; h < hosts(); ++h)
    if (f.hosts[h].watts_now >= 0 && load_[h].vms > 0)
      offset_[h] = f.hosts[h].watts_now - power::model_watts(f.hosts[h].model, util(h));
  for (int h = 0; h < hosts(); ++h) watts_[h] = watts(h, load_[h]);
}

double state::cpu_cores(int h, const load& l) const { return f.hosts[h].idle_cpu_cores + l.cpu; }

double state::peak_cores(int h, const load& l) const { return std::max(spread_cores(h, l), burst_cores(h, l)); }

double state::spread_cores(int h, const load& l) const { return cpu_cores(h, l) + std::sqrt(l.dev2); }

double state::burst_cores(int h, const load& l) const { return cpu_cores(h, l) + l.gap; }

double state::gap(int v) const { return f.vms[v].vcpus > 0 ? std::max(0.0, f.vms[v].vcpus - f.vms[v].cpu_cores) : 0; }

double state::util(int h) const { return cpu_cores(h) / f.hosts[h].cpus; }

double state::watts(int h, const load& l) const {
  if (l.vms == 0) return 0;
  const host_spec& hs = f.hosts[h];
  return std::max(0.0, power::model_watts(hs.model, cpu_cores(h, l) / hs.cpus) + offset_[h]);
}

double state::added_watts(int v, int h) const { return watts(h, with(h, v)) - watts(h); }

load state::plus(load l, int v) const {
  const vm_demand& d = f.vms[v];
  const double dev = peak_[v] - d.cpu_cores;
  l.cpu += d.cpu_cores;
  l.dev2 += dev * dev;
  l.mem += d.mem_bytes;
  l.net += d.net_bps;
  l.vms += 1;
  l.gap = std::max(l.gap, gap(v));
  return l;
}

load state::minus(load l, int v) const {
  const vm_demand& d = f.vms[v];
  const double dev = peak_[v] - d.cpu_cores;
  l.cpu = std::max(0.0, l.cpu - d.cpu_cores);
  l.dev2 = std::max(0.0, l.dev2 - dev * dev);
  l.mem = std::max(0.0, l.mem - d.mem_bytes);
  l.net = std::max(0.0, l.net - d.net_bps);
  l.vms -= 1;
  if (l.vms == 0) l = load{};  // no rounding residue on an empty host
  return l;
}

load state::without(int h, int v, const std::vector<char>* also) const {
  load l = minus(load_[h], v);
  if (also)
    for (int u : on_[h])
      if ((*also)[u] && u != v) l = minus(l, u);
  l.gap = 0;
  for (int u : on_[h])
    if (u != v && !(also && (*also)[u])) l.gap = std::max(l.gap, gap(u));
  return l;
}

bool state::within(int h, const load& l, const limits& lim) const {
  const host_spec& hs = f.hosts[h];
  // A small tolerance: a VM that exactly fills a limit fits, whatever the
  // rounding of the sums.
  constexpr double eps = 1e-9;
  if (cpu_cores(h, l) > lim.cpu_upper * hs.cpus * (1 + eps)) return false;
  if (lim.peak && spread_cores(h, l) > lim.peak_upper * hs.cpus * (1 + eps)) return false;
  if (lim.burst && burst_cores(h, l) > lim.peak_upper * hs.cpus * (1 + eps)) return false;
  if (hs.mem_bytes > 0 && l.mem > lim.mem_upper * hs.mem_bytes * (1 + eps)) return false;
  if (lim.link && hs.link_bps > 0 && l.net > lim.link_upper * hs.link_bps * (1 + eps)) return false;
  return true;
}

bool state::fits(int v, int h, const limits& lim) const {
  if (!f.hosts[h].accepts_vms || at_[v] == h) return false;
  return within(h, with(h, v), lim);
}

void state::add(int v, int h) {
  load_[h] = with(h, v);
  watts_[h] = watts(h, load_[h]);
  on_[h].push_back(v);
  at_[v] = h;
}

void state::remove(int v) {
  const int h = at_[v];
  if (h < 0) return;
  load_[h] = without(h, v);
  watts_[h] = watts(h, load_[h]);
  auto& on = on_[h];
  on.erase(std::find(on.begin(), on.end(), v));
  at_[v] = -1;
}

void state::move_to(int v, int h) {
  remove(v);
  add(v, h);
}

void state::detach(int v) { remove(v); }

int state::moved_count() const {
  int n = 0;
  for (int v = 0; v < vms(); ++v) n += moved(v);
  return n;
}

double normal_quantile(double q) {
  // Bisection on the normal tail: 80 halvings of [-40, 40] are below a
  // double's precision, and this runs once a plan.
  double lo = -40, hi = 40;
  for (int i = 0; i < 80; ++i) {
    const double mid = (lo + hi) / 2;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < q ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

double overload_probability(double mean_cores, double dev2, double cpus, double z) {
  const double sigma = z > 0 ? std::sqrt(dev2) / z : 0;
  if (sigma <= 0) return mean_cores > cpus ? 1 : 0;
  return 0.5 * std::erfc((cpus - mean_cores) / sigma / std::sqrt(2.0));
}

}  // namespace magnet::place::detail
