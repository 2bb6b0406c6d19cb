// The from-scratch baselines: every VM that may move is taken off its host
// and the fleet is packed again, the plan being the difference from where
// the VMs were (docs/placement.md, "Placement: the planners").  They check
// the mean CPU (cpu_upper) and memory.  VMs that may not move stay and are
// packed around; a VM no host takes, or one past max_moves, stays where it
// was whatever that does to its host.
//
// - first-fit: the VMs by CPU demand decreasing (first-fit decreasing),
//   each on the first host in the fleet's order it fits.
// - round-robin: the VMs in the fleet's order, each on the next host after
//   the one the VM before it went to that fits, wrapping around.
#include <algorithm>
#include <numeric>

#include "algorithms.h"

namespace magnet::place::detail {

namespace {

// Detaches every VM that may move; returns them.
std::vector<int> take_off(state& s) {
  std::vector<int> vms;
  for (int v = 0; v < s.vms(); ++v)
    if (s.f.vms[v].migratable) {
      s.detach(v);
      vms.push_back(v);
    }
  return vms;
}

// Puts @v on @h, or back where it was when that is a move and none are
// left; the plan's order and the moves left follow.
void put(state& s, int v, int h, int& left, std::vector<int>& order) {
  if (h < 0 || (h != s.origin_of(v) && left <= 0)) h = s.origin_of(v);
  s.move_to(v, h);
  if (s.moved(v)) {
    order.push_back(v);
    --left;
  }
}

std::vector<std::string> notes_of(const state& s, int unplaced, int left) {
  std::vector<std::string> notes;
  if (unplaced > 0)
    notes.push_back(std::to_string(unplaced) + " VM(s) fit on no host and stay where they are");
  if (s.o.max_moves > 0 && left <= 0) notes.push_back("max_moves reached: the other VMs stay where they are");
  return notes;
}

}  // namespace

plan plan_first_fit(state& s) {
  const limits lim = cpu_and_memory(s.o);
  int left = moves_left(s), unplaced = 0;
  std::vector<int> vms = take_off(s), order;
  std::stable_sort(vms.begin(), vms.end(), [&](int a, int b) {
    if (s.mean(a) != s.mean(b)) return s.mean(a) > s.mean(b);
    return s.f.vms[a].mem_bytes > s.f.vms[b].mem_bytes;
  });
  for (int v : vms) {
    int to = -1;
    for (int h = 0; h < s.hosts() && to < 0; ++h)
      if (s.fits(v, h, lim)) to = h;
    unplaced += to < 0;
    put(s, v, to, left, order);
  }
  return s.finish(order, notes_of(s, unplaced, left));
}

plan plan_round_robin(state& s) {
  const limits lim = cpu_and_memory(s.o);
  int left = moves_left(s), unplaced = 0, next = 0;
  std::vector<int> vms = take_off(s), order;
  const int n = s.hosts();
  for (int v : vms) {
    int to = -1;
    for (int i = 0; i < n && to < 0; ++i)
      if (s.fits(v, (next + i) % n, lim)) to = (next + i) % n;
    unplaced += to < 0;
    if (to >= 0) next = (to + 1) % n;
    put(s, v, to, left, order);
  }
  return s.finish(order, notes_of(s, unplaced, left));
}

}  // namespace magnet::place::detail
