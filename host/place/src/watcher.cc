// OpenStack Watcher's vm_workload_consolidation strategy, written from its
// documented behaviour in this project's terms (docs/placement.md,
// "Placement: the planners").  It consumes CPU use and memory, no power
// metric.  Its capacity coefficients are cpu_upper and mem_upper.
//
// 1. Offload: hosts sorted by CPU use, the busiest first; an overloaded
//    one (CPU use or memory above its coefficient) sends its VMs, the least
//    CPU-using first, each to the first host that fits it in the same
//    order (first-fit), until it is no longer overloaded.
// 2. Consolidation: hosts sorted again, the least busy first; each sends
//    its VMs, the most CPU-using first, to the first host that fits them
//    counting down from the busiest, never to a host before or at its own
//    place in the order (asc < dsc).  A VM may move in both phases: one
//    move, from where it was to where it ends.
// A saturated host (no room left in CPU, or less than 128 MiB of memory) is
// passed over for the rest of the phase, as Watcher does.
#include <algorithm>
#include <numeric>

#include "algorithms.h"

namespace magnet::place::detail {

namespace {

class watcher {
 public:
  explicit watcher(state& s) : s_(s), lim_(cpu_and_memory(s.o)), left_(moves_left(s)) {}

  plan run() {
    offload();
    consolidate();
    if (left_ <= 0) notes_.push_back("max_moves reached: the plan stops there");
    return s_.finish(order_, std::move(notes_));
  }

 private:
  state& s_;
  const limits lim_;
  int left_;
  std::vector<int> order_;
  std::vector<std::string> notes_;

  bool overloaded(int h) const { return s_.load_of(h).vms > 0 && !s_.within(h, lim_); }

  bool saturated(int h) const {
    const host_spec& hs = s_.f.hosts[h];
    const double mib128 = 128.0 * 1024 * 1024;
    if (s_.cpu_cores(h) >= lim_.cpu_upper * hs.cpus) return true;
    return hs.mem_bytes > 0 && s_.load_of(h).mem >= lim_.mem_upper * hs.mem_bytes - mib128;
  }

  // Hosts by CPU use, the least busy first (ties: as listed).
  std::vector<int> sorted_hosts() const {
    std::vector<int> order(s_.hosts());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s_.cpu_cores(a) < s_.cpu_cores(b); });
    return order;
  }

  // VMs of @h that may move, by CPU use (@most_first: decreasing).
  std::vector<int> movable(int h, bool most_first) const {
    std::vector<int> vms;
    for (int v : s_.vms_on(h))
      if (s_.f.vms[v].migratable) vms.push_back(v);
    std::stable_sort(vms.begin(), vms.end(), [&](int a, int b) {
      return most_first ? s_.mean(a) > s_.mean(b) : s_.mean(a) < s_.mean(b);
    });
    return vms;
  }

  // Moves @v to @t; false when the plan is out of moves (a VM moving again
  // costs no new move: it is one move in the plan).
  bool migrate(int v, int t) {
    const bool first = !s_.moved(v);
    if (first && left_ <= 0) return false;
    s_.move_to(v, t);
    if (first) {
      order_.push_back(v);
      --left_;
    } else if (!s_.moved(v)) {
      ++left_;  // back where it was: no move after all
    }
    return true;
  }

  void offload();
  void consolidate();
};

void watcher::offload() {
  const std::vector<int> order = sorted_hosts();
  std::vector<char> sat(s_.hosts(), 0);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int h = *it;
    if (!overloaded(h)) continue;
    for (int v : movable(h, false)) {
      for (auto d = order.rbegin(); d != order.rend(); ++d) {
        if (*d == h || sat[*d]) continue;
        if (s_.fits(v, *d, lim_)) {
          migrate(v, *d);
          break;
        }
        if (saturated(*d)) sat[*d] = 1;
      }
      if (!overloaded(h)) break;
    }
  }
}

void watcher::consolidate() {
  const std::vector<int> order = sorted_hosts();
  const int n = int(order.size());
  std::vector<char> sat(s_.hosts(), 0);
  for (int asc = 0; asc < n; ++asc) {
    const int h = order[asc];
    for (int v : movable(h, true)) {
      int dsc = n - 1;
      for (auto d = order.rbegin(); d != order.rend(); ++d, --dsc) {
        if (sat[*d]) continue;
        if (asc >= dsc) break;
        if (s_.fits(v, *d, lim_)) {
          migrate(v, *d);
          break;
        }
        if (saturated(*d)) sat[*d] = 1;
      }
    }
  }
}

}  // namespace

plan plan_watcher(state& s) { return watcher(s).run(); }

}  // namespace magnet::place::detail
