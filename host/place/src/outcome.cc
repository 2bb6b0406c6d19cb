// A plan from where a planner left the VMs: the moves replayed from the
// fleet as it was (so each move's saving is the fleet's after the ones
// before it), every host's outcome, the SLA risk and what stays over limits.
#include <cstdio>

#include "magnet/result.h"

#include "state.h"

namespace magnet::place::detail {

namespace {

std::string fmt(const char* f, double a, double b, double c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

// Notes for a host above any of the options' limits after the plan.
void note_limits(const state& s, int h, std::vector<std::string>& notes) {
  const host_spec& hs = s.f.hosts[h];
  const plan_options& o = s.o;
  const load& l = s.load_of(h);
  const std::string at = "host '" + hs.name + "': after the plan ";
  if (s.cpu_cores(h) > o.cpu_upper * hs.cpus * (1 + 1e-9))
    notes.push_back(at + fmt("its mean CPU demand %.2f cores is above cpu_upper %.2f of %g CPUs", s.cpu_cores(h),
                             o.cpu_upper, hs.cpus));
  // One VM's burst to all its vCPUs decides where VMs go, not whether they
  // move: a host above peak_upper only by it is not noted.
  if (s.spread_cores(h, l) > o.peak_upper * hs.cpus * (1 + 1e-9))
    notes.push_back(at + fmt("its VMs' peaks together, %.2f cores, are above peak_upper %.2f of %g CPUs",
                             s.spread_cores(h, l), o.peak_upper, hs.cpus));
  if (hs.mem_bytes > 0 && l.mem > o.mem_upper * hs.mem_bytes * (1 + 1e-9))
    notes.push_back(at + fmt("its VMs' memory %.3g bytes is above mem_upper %.2f of %.3g", l.mem, o.mem_upper,
                             hs.mem_bytes));
  if (hs.link_bps > 0 && l.net > o.link_upper * hs.link_bps * (1 + 1e-9))
    notes.push_back(at + fmt("its VMs' traffic %.3g bit/s is above link_upper %.2f of %.3g", l.net, o.link_upper,
                             hs.link_bps));
}

}  // namespace

plan state::finish(const std::vector<int>& order, std::vector<std::string> notes) const {
  plan p;
  state replay(f, o);
  for (int h = 0; h < hosts(); ++h) {
    host_outcome out;
    out.name = f.hosts[h].name;
    out.watts_before = replay.watts(h);
    out.emptied = replay.load_of(h).vms > 0 && load_[h].vms == 0;
    p.watts_before += out.watts_before;
    p.hosts.push_back(out);
  }
  std::vector<int> seq = order;
  for (int v = 0; v < vms(); ++v) seq.push_back(v);  // any moved VM @order left out, last
  std::vector<char> done(f.vms.size(), 0);
  for (int v : seq) {
    if (done[v] || !moved(v)) continue;
    done[v] = 1;
    if (at_[v] < 0) throw fatal("placement: a planner left VM '" + f.vms[v].name + "' on no host");
    const int from = replay.host_of(v), to = at_[v];
    const double before = replay.watts(from) + replay.watts(to);
    replay.move_to(v, to);
    const double after = replay.watts(from) + replay.watts(to);
    p.moves.push_back(move{f.vms[v].name, f.vms[v].uuid, f.hosts[from].name, f.hosts[to].name, before - after});
  }
  const double z = normal_quantile(o.peak_quantile);
  int active = 0;
  for (int h = 0; h < hosts(); ++h) {
    host_outcome& out = p.hosts[h];
    out.cpu_used = cpu_cores(h);
    out.cpu_peak_used = peak_cores(h);
    out.mem_used = load_[h].mem;
    out.net_used_bps = load_[h].net;
    out.watts_after = watts(h);
    p.watts_after += out.watts_after;
    if (load_[h].vms == 0) continue;
    out.sla_risk = overload_probability(cpu_cores(h), load_[h].dev2, f.hosts[h].cpus, z);
    p.sla_risk += out.sla_risk;
    ++active;
    note_limits(*this, h, notes);
  }
  if (active > 0) p.sla_risk /= active;
  p.notes = std::move(notes);
  return p;
}

}  // namespace magnet::place::detail
