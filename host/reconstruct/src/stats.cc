// The summary table and the scoring against a truth.
#include <algorithm>
#include <cstdlib>

#include "magnet/reconstruct/reconstruct.h"

namespace magnet::reconstruct {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double mean(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) t += x;
  return v.empty() ? 0 : t / static_cast<double>(v.size());
}

// (size, start time) pairs of one direction -> figures.
figures figures_of(const std::vector<std::pair<double, uint64_t>>& items) {
  figures f;
  f.count = items.size();
  std::vector<double> sizes, gaps;
  for (size_t i = 0; i < items.size(); ++i) {
    sizes.push_back(items[i].first);
    if (i) gaps.push_back(static_cast<double>(items[i].second - items[i - 1].second));
  }
  f.mean_size = mean(sizes);
  f.median_size = median(sizes);
  f.mean_interval_ns = mean(gaps);
  f.median_interval_ns = median(gaps);
  return f;
}

}  // namespace

std::vector<summary_row> summarise(const stream& sanitised, const std::vector<message>& msgs) {
  std::vector<summary_row> rows;
  for (direction d : {direction::a_to_b, direction::b_to_a}) {
    std::vector<std::pair<double, uint64_t>> m, g;
    for (const auto& x : msgs)
      if (x.dir == d) m.emplace_back(static_cast<double>(x.size), x.first_ns);
    for (const auto& x : sanitised.segments)
      if (x.dir == d && x.payload && !x.filled) g.emplace_back(static_cast<double>(x.payload), x.time_ns);
    if (m.empty() && g.empty()) continue;
    rows.push_back({d, figures_of(m), figures_of(g)});
  }
  return rows;
}

namespace {

struct span {
  uint64_t begin, end;
};

// One direction's messages as byte ranges, in order.
std::vector<span> spans_of(const std::vector<message>& v, direction d) {
  std::vector<span> out;
  uint64_t at = 0;
  for (const auto& m : v)
    if (m.dir == d) out.push_back({at, at += m.size});
  return out;
}

enum class match { exact, within100, approximate, none };

// How reconstructed range @r matches the truth @t (ranges in order).
match classify(const span& r, const std::vector<span>& t, size_t r_index, const std::vector<span>& rec) {
  auto it = std::lower_bound(t.begin(), t.end(), r.begin, [](const span& s, uint64_t b) { return s.end <= b; });
  if (it == t.end()) return match::none;
  if (it->begin == r.begin && it->end == r.end) return match::exact;
  // The true message it overlaps most.
  const span* best = nullptr;
  uint64_t most = 0;
  for (auto j = it; j != t.end() && j->begin < r.end; ++j) {
    const uint64_t o = std::min(j->end, r.end) - std::max(j->begin, r.begin);
    if (o > most) most = o, best = &*j;
  }
  auto size = [](const span& s) { return static_cast<int64_t>(s.end - s.begin); };
  if (best && std::llabs(size(*best) - size(r)) <= 100) return match::within100;
  // Two true neighbours merged into this one.
  if (it->begin == r.begin && it + 1 != t.end() && (it + 1)->end == r.end) return match::approximate;
  // A true message split into this one and a neighbour.
  if (r_index + 1 < rec.size() && it->begin == r.begin && it->end == rec[r_index + 1].end) return match::approximate;
  if (r_index > 0 && it->begin == rec[r_index - 1].begin && it->end == r.end) return match::approximate;
  return match::none;
}

}  // namespace

score compare(const std::vector<message>& reconstructed, const std::vector<message>& truth) {
  uint64_t n[4] = {0, 0, 0, 0};
  for (direction d : {direction::a_to_b, direction::b_to_a}) {
    const auto r = spans_of(reconstructed, d), t = spans_of(truth, d);
    for (size_t i = 0; i < r.size(); ++i) ++n[static_cast<int>(classify(r[i], t, i, r))];
  }
  score s;
  s.messages = n[0] + n[1] + n[2] + n[3];
  if (!s.messages) return s;
  auto pct = [&](uint64_t k) { return 100.0 * static_cast<double>(k) / static_cast<double>(s.messages); };
  s.exact_pct = pct(n[0]);
  s.within100_pct = pct(n[0] + n[1]);
  s.approximate_pct = pct(n[0] + n[1] + n[2]);
  s.no_match_pct = pct(n[3]);
  return s;
}

}  // namespace magnet::reconstruct
