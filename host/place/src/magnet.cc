// magnet's planner: power-aware consolidation (docs/placement.md,
// "Placement: the planners").
//
// 1. Relieve: a host above any limit (mean or peak CPU, memory, link) gives
//    up the VMs whose migrations degrade least (relief_set) until it is
//    within them; each to the host it adds the fewest watts to, waking a
//    host that is off only when no host on has room.
// 2. Consolidate: hosts are emptied one at a time, a host leaving the pool
//    first, then the cheapest first: the least memory to migrate per watt
//    the host draws.  All its VMs, largest peak first, each to the host on
//    it adds the fewest watts to, up to the limits less
//    consolidation_margin; never to a host that is off (emptying one host
//    to wake another is churn: two hosts' worth of migrations for a
//    difference in the curves).  An emptying is kept only when the fleet's
//    predicted watts fall by it and the whole of it fits in the moves
//    left.  A host that received VMs is not emptied, one being emptied
//    receives none: no VM moves twice.
// 3. Three candidates: step 2 is run three times on copies of the
//    relieved fleet (plan_magnet), and the plan predicted to draw the
//    fewest watts is kept.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "algorithms.h"

namespace magnet::place::detail {

namespace {

// How a candidate plan empties hosts (plan_magnet tries three and keeps
// the one predicted to draw least): in which order it tries the hosts, and
// whether a VM's target is priced with the burst headroom it takes.
struct style {
  bool least_used_first = false;  // else the cheapest emptying (bytes per watt) first
  bool price_burst = false;       // see burst_priced_watts
};

class magnet_planner {
 public:
  explicit magnet_planner(state& s, style st = {})
      : st_(st), s_(s), lim_(all_limits(s.o)), over_(lim_), fill_(lim_), left_(moves_left(s)), emptied_(s.hosts(), 0),
        received_(s.hosts(), 0), gave_(s.hosts(), 0) {
    over_.burst = false;
    fill_.cpu_upper -= s.o.consolidation_margin;
    fill_.peak_upper -= s.o.consolidation_margin;
  }

  // @o's planner, relieved, on @s (a copy of o's state) with style @st.
  magnet_planner(const magnet_planner& o, state& s, style st)
      : st_(st), s_(s), lim_(o.lim_), over_(o.over_), fill_(o.fill_), left_(o.left_), emptied_(o.emptied_),
        received_(o.received_), gave_(o.gave_), order_(o.order_), notes_(o.notes_), budget_noted_(o.budget_noted_) {}

  plan consolidated() {
    consolidate();
    return s_.finish(order_, std::move(notes_));
  }

 private:
  style st_;
  state& s_;
  const limits lim_;  // a VM moved off a host above over_ may fill a host up to them
  limits over_;       // a host above them is relieved: lim_ but a VM's burst, a rule for where VMs go
  limits fill_;       // a host may be filled up to them by an emptying: lim_ less the margin
  int left_;
  std::vector<char> emptied_, received_, gave_;  // per host
  std::vector<int> order_;
  std::vector<std::string> notes_;
  bool budget_noted_ = false;

  const std::string& host(int h) const { return s_.f.hosts[h].name; }
  const std::string& vm(int v) const { return s_.f.vms[v].name; }

  void out_of_moves() {
    if (!budget_noted_)
      notes_.push_back("max_moves (" + std::to_string(s_.o.max_moves) + ") reached: the plan stops there");
    budget_noted_ = true;
  }

  // The host that takes @v for the fewest added watts within @lim; -1 if
  // none may.  Ties go to the host with more CPU demand (the tighter fit),
  // then the first listed: the plan depends on nothing but the fleet.
  // The watts @h gains by @v, counting the burst headroom v takes from h
  // as load: with the one-VM burst rule (state.h) a host's room for mean
  // demand is its CPUs less its largest vcpus - mean, so a VM that raises
  // that largest gap costs the host that much room, priced at the host's
  // curve like demand.  Putting VMs that may burst far where one already
  // may keeps the other hosts' room for demand.
  double burst_priced_watts(int v, int h, load with_v) const {
    with_v.cpu += std::max(0.0, s_.gap(v) - s_.load_of(h).gap);
    return s_.watts(h, with_v) - s_.watts(h);
  }

  int best_target(int v, int from, bool may_wake, const limits& lim, bool price_burst = false) const {
    int best = -1;
    double best_w = std::numeric_limits<double>::infinity(), best_cpu = 0;
    for (int h = 0; h < s_.hosts(); ++h) {
      if (h == from || emptied_[h] || (!may_wake && s_.load_of(h).vms == 0) || !s_.f.hosts[h].accepts_vms ||
          s_.host_of(v) == h)
        continue;
      const load l = s_.with(h, v);  // as state::fits, with the load made once
      if (!s_.within(h, l, lim)) continue;
      const double w = price_burst ? burst_priced_watts(v, h, l) : s_.watts(h, l) - s_.watts(h);
      const double cpu = s_.cpu_cores(h);
      if (w < best_w - 1e-9 || (w <= best_w + 1e-9 && cpu > best_cpu)) {
        best = h;
        best_w = w;
        best_cpu = cpu;
      }
    }
    return best;
  }

  // The VMs @h should give up to come within its limits, degrading the
  // least: a migration slows its VM for its duration (its memory over the
  // bandwidth), by about a tenth of the VM's CPU (Beloglazov & Buyya's PDM),
  // so each VM costs its memory times its mean CPU (at least 0.01 core).
  // Either the one VM whose leaving alone is enough and costs least, or the
  // smallest in memory one after another until they are enough (PABFD's
  // minimum migration time: per core of relief, the least degraded),
  // whichever costs less.  As many as may move when all are not enough.
  std::vector<int> relief_set(int h) const {
    std::vector<int> movable;
    for (int v : s_.vms_on(h))
      if (s_.f.vms[v].migratable && !s_.moved(v)) movable.push_back(v);
    auto mem = [&](int v) { return s_.f.vms[v].mem_bytes; };
    auto cost = [&](int v) { return mem(v) * std::max(s_.mean(v), 0.01); };
    std::stable_sort(movable.begin(), movable.end(), [&](int a, int b) { return mem(a) < mem(b); });
    std::vector<int> smallest;
    std::vector<char> gone(s_.vms(), 0);
    double smallest_cost = 0;
    for (int v : movable) {
      gone[v] = 1;
      smallest.push_back(v);
      smallest_cost += cost(v);
      if (s_.within(h, s_.without(h, v, &gone), over_)) break;
    }
    int alone = -1;
    for (int v : movable)
      if (s_.within(h, s_.without(h, v), over_) && (alone < 0 || cost(v) < cost(alone))) alone = v;
    if (alone >= 0 && cost(alone) <= smallest_cost) return {alone};
    return smallest;
  }

  void relieve(int h) {
    const std::vector<int> give = relief_set(h);
    if (give.empty()) {
      notes_.push_back("host '" + host(h) + "' is above its limits and has no VM that may move");
      return;
    }
    for (int v : give) {
      if (left_ == 0) return out_of_moves();
      const int t = best_target(v, h, true, lim_);
      if (t < 0) {
        notes_.push_back("host '" + host(h) + "' is above its limits: no host can take VM '" + vm(v) + "'");
        return;
      }
      s_.move_to(v, t);
      order_.push_back(v);
      received_[t] = 1;
      gave_[h] = 1;
      --left_;
    }
  }

  // Step 1 (public: plan_magnet relieves once for all its candidates).
 public:
  void relieve_all() {
    std::vector<std::pair<double, int>> over;  // the busiest first: by mean CPU demand over the CPUs
    for (int h = 0; h < s_.hosts(); ++h)
      if (s_.load_of(h).vms > 0 && !s_.within(h, over_)) over.emplace_back(-s_.cpu_cores(h) / s_.f.hosts[h].cpus, h);
    std::sort(over.begin(), over.end());
    for (auto [_, h] : over) relieve(h);
  }

 private:
  bool try_empty(int h);
  void consolidate();
};

bool magnet_planner::try_empty(int h) {
  std::vector<int> vms = s_.vms_on(h);
  for (int v : vms)
    if (!s_.f.vms[v].migratable) {
      if (!s_.f.hosts[h].accepts_vms)
        notes_.push_back("host '" + host(h) + "' cannot be emptied: VM '" + vm(v) + "' may not migrate");
      return false;
    }
  if (int(vms.size()) > left_) {
    out_of_moves();
    return false;
  }
  std::sort(vms.begin(), vms.end(), [&](int a, int b) {
    if (s_.peak(a) != s_.peak(b)) return s_.peak(a) > s_.peak(b);
    return a < b;
  });
  emptied_[h] = 1;  // no VM of it comes back to it
  double saved = 0;
  std::vector<int> targets;
  for (int v : vms) {
    const int t = best_target(v, h, false, fill_, st_.price_burst);
    if (t < 0) break;
    const double before = s_.watts(h) + s_.watts(t);
    s_.move_to(v, t);
    saved += before - s_.watts(h) - s_.watts(t);
    targets.push_back(t);
  }
  if (targets.size() == vms.size() && saved > 1e-6) {
    for (int t : targets) received_[t] = 1;
    order_.insert(order_.end(), vms.begin(), vms.end());
    left_ -= int(vms.size());
    return true;
  }
  for (size_t i = 0; i < targets.size(); ++i) s_.move_to(vms[i], h);  // undo, in any order
  emptied_[h] = 0;
  if (!s_.f.hosts[h].accepts_vms)
    notes_.push_back("host '" + host(h) + "' accepts no VMs but its VMs fit nowhere else");
  return false;
}

void magnet_planner::consolidate() {
  // Hosts leaving the pool first, then the cheapest emptyings: the least
  // memory to migrate per watt the host draws.
  std::vector<std::tuple<bool, double, int>> cand;  // stays in the pool, bytes per watt, index
  for (int h = 0; h < s_.hosts(); ++h)
    if (s_.load_of(h).vms > 0 && !received_[h] && !gave_[h])
      cand.emplace_back(s_.f.hosts[h].accepts_vms,
                        st_.least_used_first ? s_.util(h) : s_.load_of(h).mem / std::max(1e-3, s_.watts(h)), h);
  std::sort(cand.begin(), cand.end());
  for (auto [accepts, cost, h] : cand) {
    if (received_[h]) continue;
    if (left_ == 0) return out_of_moves();
    try_empty(h);
  }
}

}  // namespace

// Three candidate plans on copies of @s, each under the same limits:
// cheapest emptyings first (the plan of magnet before the candidates),
// the same with targets priced with their burst headroom, and the least
// used hosts first (PABFD's order).  The one with the fewest predicted
// watts after it is kept, on a tie the one with fewer moves, then the
// first: all three see only the fleet, so the choice does too.
plan plan_magnet(state& s) {
  magnet_planner relieved(s);  // relieving is the same in all three: done once
  relieved.relieve_all();
  plan best;
  bool have = false;
  for (style st : {style{false, false}, style{false, true}, style{true, false}}) {
    state c = s;
    plan p = magnet_planner(relieved, c, st).consolidated();
    if (!have || p.watts_after < best.watts_after - 1e-6 ||
        (p.watts_after <= best.watts_after + 1e-6 && p.moves.size() < best.moves.size())) {
      best = std::move(p);
      have = true;
    }
  }
  return best;
}

}  // namespace magnet::place::detail
