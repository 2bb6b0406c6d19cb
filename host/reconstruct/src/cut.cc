// Phases 3 and 4: cutting a sanitised stream into messages, and the best of
// several runs.
#include <algorithm>
#include <map>
#include <set>

#include "magnet/reconstruct/reconstruct.h"

namespace magnet::reconstruct {

std::array<uint32_t, 2> mss_estimate(const stream& s) {
  std::array<uint32_t, 2> m{0, 0};
  for (const auto& g : s.segments)
    if (!g.filled) m[index(g.dir)] = std::max(m[index(g.dir)], g.payload);
  return m;
}

namespace {

// Whether the size rule applies to each direction.
std::array<bool, 2> size_rule_on(const stream& s, size_rule r) {
  std::array<bool, 2> on{r != size_rule::never, r != size_rule::never};
  if (r != size_rule::auto_) return on;
  for (const auto& g : s.segments)
    if (g.flags & kPsh) on[index(g.dir)] = false;
  return on;
}

}  // namespace

std::vector<message> cut(const stream& s, const cut_options& o) {
  auto mss = mss_estimate(s);
  if (o.mss) mss = {o.mss, o.mss};
  const auto by_size = size_rule_on(s, o.size);
  std::vector<message> out;
  bool open = false;
  for (const auto& g : s.segments) {
    if (g.payload == 0) continue;
    if (open && (g.dir != out.back().dir || (o.gap_ns && g.time_ns - out.back().last_ns > o.gap_ns)))
      open = false;
    if (!open) {
      out.push_back({g.dir, 0, g.time_ns, g.time_ns, 0, false});
      open = true;
    }
    message& m = out.back();
    m.size += g.payload;
    m.last_ns = g.time_ns;
    ++m.segments;
    m.gap = m.gap || g.filled;
    if (g.filled) continue;
    if ((g.flags & (kPsh | kFin)) || (by_size[index(g.dir)] && g.payload < mss[index(g.dir)])) open = false;
  }
  return out;
}

namespace {

// A run as the byte offsets, per direction, where its messages end.
std::array<std::set<uint64_t>, 2> cuts_of(const std::vector<message>& run) {
  std::array<std::set<uint64_t>, 2> c;
  std::array<uint64_t, 2> at{0, 0};
  for (const auto& m : run) c[index(m.dir)].insert(at[index(m.dir)] += m.size);
  return c;
}

// The message of @run (one direction's, in order) holding byte @off.
const message* holding(const std::vector<message>& run, direction d, uint64_t off) {
  uint64_t at = 0;
  const message* last = nullptr;
  for (const auto& m : run) {
    if (m.dir != d) continue;
    last = &m;
    if (off < (at += m.size)) return &m;
  }
  return last;  // past the first run's end: its last message
}

}  // namespace

std::vector<message> reconcile(const std::vector<std::vector<message>>& runs) {
  if (runs.empty()) return {};
  std::array<std::map<uint64_t, size_t>, 2> votes;
  for (const auto& r : runs) {
    const auto cuts = cuts_of(r);
    for (int d = 0; d < 2; ++d)
      for (uint64_t c : cuts[d]) ++votes[d][c];
  }
  // Order by the first run's timeline: the time of its message holding the
  // reconciled message's first byte, then direction, then offset.
  struct keyed {
    uint64_t t;
    int d;
    uint64_t start;
    message m;
  };
  std::vector<keyed> all;
  for (int d = 0; d < 2; ++d) {
    uint64_t start = 0;
    for (const auto& [off, n] : votes[d]) {
      if (2 * n <= runs.size()) continue;
      const auto dir = static_cast<direction>(d);
      const message* first = holding(runs[0], dir, start);
      const message* last = holding(runs[0], dir, off - 1);
      message m{dir, off - start, first ? first->first_ns : 0, last ? last->last_ns : 0, 0, false};
      for (const message* x = first; x && x <= last; ++x)
        if (x->dir == dir) m.segments += x->segments, m.gap = m.gap || x->gap;
      all.push_back({m.first_ns, d, start, m});
      start = off;
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const keyed& x, const keyed& y) {
    return x.t != y.t ? x.t < y.t : x.d != y.d ? x.d < y.d : x.start < y.start;
  });
  std::vector<message> out;
  for (auto& k : all) out.push_back(k.m);
  return out;
}

}  // namespace magnet::reconstruct
