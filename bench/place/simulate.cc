#include "simulate.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "magnet/power/model.h"

namespace magnet::bench::place {

namespace mp = magnet::place;

namespace {

double thread_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// What the simulation sums over the steps.
struct totals {
  std::vector<double> t_on, t_full;  // per host, seconds
  std::vector<double> req, degr;     // per VM, core-seconds
  double energy_j = 0, demand = 0, unserved = 0, on_s = 0, link_over_s = 0, risk = 0;
  long steps_on = 0, plans = 0;
};

// One step with the VMs where @at puts them: energy (a host with no VM is
// off), time at 100 % CPU, CPU not served, traffic above the link.  Returns
// each host's mean watts over the step (-1: off).
std::vector<double> account(const step_demand& d, const std::vector<int>& at, const sim_config& c, double step_s,
                            totals& t, sim_result& r) {
  const size_t n = at.size(), nh = c.hosts.size();
  std::vector<int> count(nh, 0);
  std::vector<double> net(nh, 0), watts(nh, 0), dem(nh), util(nh, 0);
  for (size_t v = 0; v < n; ++v) {
    ++count[at[v]];
    net[at[v]] += d.net[v];
  }
  const double dt = step_s / d.samples;
  for (int k = 0; k < d.samples; ++k) {
    std::fill(dem.begin(), dem.end(), 0);
    const float* cpu = &d.cpu[size_t(k) * n];
    for (size_t v = 0; v < n; ++v) dem[at[v]] += cpu[v];
    for (size_t h = 0; h < nh; ++h) {
      if (count[h] == 0) continue;
      const double cpus = c.hosts[h].cpus, w = power::model_watts(c.hosts[h].model, dem[h] / cpus);
      t.energy_j += w * dt;
      watts[h] += w / d.samples;
      util[h] += dem[h] / cpus / d.samples;
      t.t_on[h] += dt;
      t.demand += dem[h] * dt;
      if (dem[h] >= cpus) {
        t.t_full[h] += dt;
        t.unserved += (dem[h] - cpus) * dt;
      }
    }
  }
  int on = 0, light = 0;
  double kw = 0, util_sum = 0;
  for (size_t h = 0; h < nh; ++h) {
    if (count[h] == 0) {
      watts[h] = -1;
      continue;
    }
    ++on;
    light += util[h] < 0.5;
    util_sum += util[h];
    kw += watts[h] / 1000;
    t.on_s += step_s;
    if (c.hosts[h].link_bps > 0 && net[h] > c.hosts[h].link_bps) t.link_over_s += step_s;
  }
  r.fleet_kw.push_back(kw);
  r.hosts_on.push_back(on);
  r.util_on.push_back(on ? util_sum / on : 0);
  r.hosts_light.push_back(light);
  return watts;
}

// The fleet the planner sees: every VM's mean and peak over the step just
// played, its traffic, its host; each host's measured watts.
void observe(mp::fleet& f, const step_demand& d, const std::vector<int>& at, const std::vector<double>& watts) {
  const size_t n = at.size();
  for (size_t h = 0; h < f.hosts.size(); ++h) f.hosts[h].watts_now = watts[h];
  for (size_t v = 0; v < n; ++v) {
    double sum = 0, peak = 0;
    for (int k = 0; k < d.samples; ++k) {
      const double x = d.cpu[size_t(k) * n + v];
      sum += x;
      peak = std::max(peak, x);
    }
    mp::vm_demand& vd = f.vms[v];
    vd.cpu_cores = sum / d.samples;
    vd.cpu_peak_cores = peak;
    vd.net_bps = d.net[v];
    vd.host = f.hosts[at[v]].name;
  }
}

// PDM's part of the VMs that moved at the last step's end: 10 % of their
// CPU demand over their migration (memory over the migration bandwidth),
// as Beloglazov & Buyya (2012) estimate it.
void degrade(const std::vector<int>& moved, const mp::fleet& f, const std::vector<int>& at, const sim_config& c,
             double step_s, totals& t) {
  for (int v : moved) {
    const double bw = c.hosts[at[v]].link_bps * c.migration_link_share;
    const double secs = bw > 0 ? f.vms[v].mem_bytes * 8 / bw : step_s;
    t.degr[v] += 0.1 * f.vms[v].cpu_cores * std::min(secs, step_s);
  }
}

void summarize(const totals& t, const sim_config& c, sim_result& r) {
  r.energy_kwh = t.energy_j / 3.6e6;
  double sum = 0;
  int hosts = 0;
  for (size_t h = 0; h < c.hosts.size(); ++h)
    if (t.t_on[h] > 0) {
      sum += t.t_full[h] / t.t_on[h];
      ++hosts;
    }
  r.slatah = hosts ? sum / hosts : 0;
  double pdm = 0;
  int vms = 0;
  for (size_t v = 0; v < t.req.size(); ++v)
    if (t.req[v] > 0) {
      pdm += t.degr[v] / t.req[v];
      ++vms;
    }
  r.pdm = vms ? pdm / vms : 0;
  r.slav = r.slatah * r.pdm;
  r.cpu_short = t.demand > 0 ? t.unserved / t.demand : 0;
  r.link_over = t.on_s > 0 ? t.link_over_s / t.on_s : 0;
  r.risk_mean = t.plans ? t.risk / t.plans : 0;
  if (!r.hosts_on.empty()) {
    double s = 0;
    for (double x : r.hosts_on) s += x;
    r.hosts_on_mean = s / r.hosts_on.size();
    r.hosts_on_min = int(*std::min_element(r.hosts_on.begin(), r.hosts_on.end()));
    r.hosts_on_max = int(*std::max_element(r.hosts_on.begin(), r.hosts_on.end()));
  }
}

}  // namespace

std::vector<int> initial_placement(const trace& t, const sim_config& c) {
  const auto& vms = t.vms();
  const size_t nh = c.hosts.size();
  std::vector<double> mem(nh, 0);
  std::vector<int> at(vms.size(), 0);
  size_t next = 0;
  for (size_t v = 0; v < vms.size(); ++v) {
    size_t h = next;
    for (size_t i = 0; i < nh; ++i, h = (h + 1) % nh)
      if (c.hosts[h].mem_bytes <= 0 || mem[h] + vms[v].mem_bytes <= c.options.mem_upper * c.hosts[h].mem_bytes) break;
    mem[h] += vms[v].mem_bytes;  // when none has room, the last tried takes it over its memory
    at[v] = int(h);
    next = (h + 1) % nh;
  }
  return at;
}

sim_result simulate(trace& tr, const sim_config& c, mp::algorithm a) {
  sim_result r;
  r.algorithm = std::string(mp::name_of(a));
  tr.rewind();
  const size_t n = tr.vms().size();
  std::vector<int> at = initial_placement(tr, c), moved;
  totals t;
  t.t_on.assign(c.hosts.size(), 0);
  t.t_full.assign(c.hosts.size(), 0);
  t.req.assign(n, 0);
  t.degr.assign(n, 0);
  mp::fleet f;
  f.hosts = c.hosts;
  std::unordered_map<std::string, int> vm_index, host_index;
  for (size_t h = 0; h < c.hosts.size(); ++h) host_index[c.hosts[h].name] = int(h);
  for (size_t v = 0; v < n; ++v) {
    mp::vm_demand vd;
    vd.name = tr.vms()[v].name;
    vd.vcpus = tr.vms()[v].vcpus;
    vd.mem_bytes = tr.vms()[v].mem_bytes;
    f.vms.push_back(vd);
    vm_index[vd.name] = int(v);
  }
  step_demand d;
  for (int s = 0; s < tr.steps(); ++s) {
    tr.next(d);
    const std::vector<double> watts = account(d, at, c, tr.step_seconds(), t, r);
    observe(f, d, at, watts);
    for (size_t v = 0; v < n; ++v) t.req[v] += f.vms[v].cpu_cores * tr.step_seconds();
    degrade(moved, f, at, c, tr.step_seconds(), t);
    moved.clear();
    if (s + 1 == tr.steps()) break;  // no step left to apply a plan to
    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_ms();
    auto p = mp::make_plan(f, a, c.options);
    r.plan_cpu_ms.push_back(thread_cpu_ms() - c0);
    r.plan_wall_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count());
    if (!p) {
      r.errors.push_back("step " + std::to_string(s) + ": " + p.err().message);
      continue;
    }
    t.risk += p->sla_risk;
    ++t.plans;
    for (const mp::move& m : p->moves) {
      const int v = vm_index.at(m.vm);
      at[v] = host_index.at(m.to);
      moved.push_back(v);
      r.migrated_gib += f.vms[v].mem_bytes / (1024.0 * 1024 * 1024);
    }
    r.migrations += long(p->moves.size());
    r.step_moves.push_back(double(p->moves.size()));
  }
  summarize(t, c, r);
  return r;
}

}  // namespace magnet::bench::place
