// PABFD as Beloglazov & Buyya (2012) describe it, with the static
// threshold (THR) for overload and minimum migration time (MMT) for the
// choice of VMs; written from the paper and CloudSim's behaviour, in this
// project's terms (docs/placement.md, "Placement: the planners"):
//
// 1. Overloaded hosts: mean CPU utilisation above cpu_upper.  Each gives up
//    its VM with the least memory (the shortest migration), again, until
//    it is not overloaded.
// 2. Those VMs, by CPU demand decreasing, go to the host whose power rises
//    least (its model after less before: a host that is off counts at its
//    idle power, so waking it costs only the rise above idle), among the
//    hosts with room in CPUs and memory that stay within cpu_upper (an
//    empty host: within its CPUs); not back to an overloaded host.  A VM
//    no host takes stays.
// 3. Underloaded hosts: the host with the least utilisation that is not
//    overloaded, off, nor a target of step 2 or of an earlier emptying, is
//    emptied if all its VMs find places as in step 2 (not on hosts that
//    were off, overloaded or emptied); else it keeps them.  Again until no
//    host is left to try.
// It checks the mean CPU and memory only: peaks and links are not part of
// the published algorithm.
#include <algorithm>
#include <limits>

#include "algorithms.h"
#include "magnet/power/model.h"

namespace magnet::place::detail {

namespace {

class pabfd {
 public:
  explicit pabfd(state& s) : s_(s), lim_(cpu_and_memory(s.o)), left_(moves_left(s)) {}

  plan run() {
    const int n = s_.hosts();
    std::vector<char> over(n, 0), off(n, 0);
    for (int h = 0; h < n; ++h) {
      over[h] = overloaded(h);
      off[h] = s_.load_of(h).vms == 0;
    }
    std::vector<char> no_target = over;
    for (int h = 0; h < n; ++h) no_target[h] |= !s_.f.hosts[h].accepts_vms;
    std::vector<char> targets(n, 0);
    place(select_from_overloaded(over), no_target, targets);
    underloaded(over, off, targets);
    if (left_ == 0) notes_.push_back("max_moves reached: the plan stops there");
    return s_.finish(order_, std::move(notes_));
  }

 private:
  state& s_;
  const limits lim_;
  int left_;
  std::vector<int> order_;
  std::vector<std::string> notes_;

  double util_with(int h, double add_cpu) const { return (s_.cpu_cores(h) + add_cpu) / s_.f.hosts[h].cpus; }
  bool overloaded(int h) const { return s_.load_of(h).vms > 0 && util_with(h, 0) > s_.o.cpu_upper; }

  // MMT: each overloaded host's VMs with the least memory, detached until
  // the host is no longer overloaded.
  std::vector<int> select_from_overloaded(const std::vector<char>& over) {
    std::vector<int> out;
    for (int h = 0; h < s_.hosts(); ++h) {
      while (over[h] && overloaded(h)) {
        int pick = -1;
        for (int v : s_.vms_on(h))
          if (s_.f.vms[v].migratable && (pick < 0 || s_.f.vms[v].mem_bytes < s_.f.vms[pick].mem_bytes)) pick = v;
        if (pick < 0) break;
        s_.detach(pick);
        out.push_back(pick);
      }
    }
    return out;
  }

  // The host whose power rises least with @v; -1 if none may take it.
  int find_host(int v, const std::vector<char>& excluded) const {
    int best = -1;
    double best_w = std::numeric_limits<double>::infinity();
    const double cpu = s_.mean(v);
    for (int h = 0; h < s_.hosts(); ++h) {
      if (excluded[h] || !s_.f.hosts[h].accepts_vms) continue;
      const host_spec& hs = s_.f.hosts[h];
      const double after = util_with(h, cpu);
      if (after > 1 + 1e-9) continue;
      if (hs.mem_bytes > 0 && s_.load_of(h).mem + s_.f.vms[v].mem_bytes > lim_.mem_upper * hs.mem_bytes) continue;
      if (s_.load_of(h).vms > 0 && after > lim_.cpu_upper + 1e-9) continue;
      const double w = power::model_watts(hs.model, after) - power::model_watts(hs.model, util_with(h, 0));
      if (w < best_w) {
        best = h;
        best_w = w;
      }
    }
    return best;
  }

  // Step 2: @vms (detached) by CPU demand decreasing, each where its power
  // rises least; back to its own host when none takes it.
  void place(std::vector<int> vms, const std::vector<char>& excluded, std::vector<char>& targets) {
    std::stable_sort(vms.begin(), vms.end(), [&](int a, int b) { return s_.mean(a) > s_.mean(b); });
    for (int v : vms) {
      const int t = left_ > 0 ? find_host(v, excluded) : -1;
      if (t < 0) {
        s_.move_to(v, s_.origin_of(v));
        continue;
      }
      s_.move_to(v, t);
      order_.push_back(v);
      targets[t] = 1;
      --left_;
    }
  }

  bool empty_host(int h, const std::vector<char>& excluded, std::vector<char>& targets);
  void underloaded(const std::vector<char>& over, const std::vector<char>& off, std::vector<char> targets);
};

// One underloaded host: all its VMs placed, or none.
bool pabfd::empty_host(int h, const std::vector<char>& excluded, std::vector<char>& targets) {
  std::vector<int> vms = s_.vms_on(h);
  for (int v : vms)
    if (!s_.f.vms[v].migratable) return false;
  if (int(vms.size()) > left_) return false;
  std::stable_sort(vms.begin(), vms.end(), [&](int a, int b) { return s_.mean(a) > s_.mean(b); });
  for (int v : vms) s_.detach(v);
  std::vector<int> to;
  for (int v : vms) {
    const int t = find_host(v, excluded);
    if (t < 0) break;
    s_.move_to(v, t);
    to.push_back(t);
  }
  if (to.size() < vms.size()) {
    for (int v : vms) s_.move_to(v, h);
    return false;
  }
  for (int t : to) targets[t] = 1;
  order_.insert(order_.end(), vms.begin(), vms.end());
  left_ -= int(vms.size());
  return true;
}

void pabfd::underloaded(const std::vector<char>& over, const std::vector<char>& off, std::vector<char> targets) {
  const int n = s_.hosts();
  std::vector<char> tried(n, 0), excluded(n, 0);  // tried: over, off, targets, tried; excluded: for placing
  for (int h = 0; h < n; ++h) {
    excluded[h] = over[h] || off[h];
    tried[h] = excluded[h];
  }
  while (left_ > 0) {
    int u = -1;
    for (int h = 0; h < n; ++h)
      if (!tried[h] && !targets[h] && s_.load_of(h).vms > 0 && (u < 0 || util_with(h, 0) < util_with(u, 0))) u = h;
    if (u < 0) break;
    tried[u] = excluded[u] = 1;
    empty_host(u, excluded, targets);
  }
}

}  // namespace

plan plan_pabfd(state& s) { return pabfd(s).run(); }

}  // namespace magnet::place::detail
