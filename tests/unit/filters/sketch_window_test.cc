#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>

#include "magnet/filters/sketch.h"
#include "magnet/filters/window.h"

namespace magnet::filters {
namespace {

// ------------------------------------------------------------- sketch ---

void expect_within(const std::vector<double>& sorted, const quantile_sketch& s, double alpha,
                   const char* what) {
  for (double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0}) {
    double truth = sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
    double est = s.quantile(q);
    EXPECT_LE(std::abs(est - truth), alpha * truth + 1e-9) << what << " q=" << q << " truth=" << truth
                                                           << " est=" << est;
  }
}

TEST(Sketch, RelativeErrorOnKnownDistributions) {
  std::mt19937_64 rng(7);
  struct dist {
    const char* name;
    std::function<double()> gen;
  };
  std::uniform_real_distribution<double> uni(1, 1e6);
  std::exponential_distribution<double> ex(1.0 / 5000);
  std::lognormal_distribution<double> ln(8, 2);
  std::uniform_int_distribution<int> bytes(1, 65535);
  std::vector<dist> ds = {
      {"uniform", [&] { return uni(rng); }},
      {"exponential", [&] { return 1 + ex(rng); }},
      {"lognormal", [&] { return 1 + ln(rng); }},
      {"pareto", [&] { return 1 / std::pow(1 - std::uniform_real_distribution<double>(0, 1)(rng), 1 / 1.2); }},
      {"integer bytes", [&] { return double(bytes(rng)); }},
  };
  for (double alpha : {0.01, 0.02, 0.005}) {
    for (auto& d : ds) {
      quantile_sketch s(alpha);
      std::vector<double> v(50000);
      for (auto& x : v) {
        x = d.gen();
        s.add(x);
      }
      std::sort(v.begin(), v.end());
      expect_within(v, s, alpha, d.name);
      EXPECT_EQ(s.count(), v.size());
      EXPECT_DOUBLE_EQ(s.min(), v.front());
      EXPECT_DOUBLE_EQ(s.max(), v.back());
      double sum = 0;
      for (double x : v) sum += x;
      EXPECT_NEAR(s.sum(), sum, 1e-9 * sum);
    }
  }
}

TEST(Sketch, ZerosAndSmallCounts) {
  quantile_sketch s;
  EXPECT_EQ(s.quantile(0.5), 0);
  s.add(0, 10);
  s.add(100, 10);
  EXPECT_EQ(s.count(), 20u);
  EXPECT_EQ(s.quantile(0.4), 0);  // rank 7 of 0..19 is a zero
  EXPECT_NEAR(s.quantile(0.9), 100, 1);
  EXPECT_EQ(s.mean(), 50);
  s.add(-5);  // outside the domain: ignored
  EXPECT_EQ(s.count(), 20u);
  quantile_sketch one;
  one.add(1234);
  EXPECT_EQ(one.quantile(0.5), 1234);  // clamped to [min, max]
}

TEST(Sketch, QuantilesInOnePassEqualQuantile) {
  std::mt19937_64 rng(5);
  std::lognormal_distribution<double> ln(6, 2);
  const std::vector<double> qs = {0, 0.001, 0.1, 0.25, 0.5, 0.5, 0.9, 0.99, 0.999, 1};
  for (int round = 0; round < 20; ++round) {
    quantile_sketch s(round % 2 ? 0.01 : 0.002);
    size_t n = round == 0 ? 0 : static_cast<size_t>(rng() % 5000);
    for (size_t i = 0; i < n; ++i) s.add(rng() % 4 == 0 ? 0 : ln(rng));  // zeros too
    std::vector<double> one(qs.size());
    s.quantiles(qs, one);
    for (size_t i = 0; i < qs.size(); ++i) EXPECT_EQ(one[i], s.quantile(qs[i])) << "q=" << qs[i] << " n=" << n;
    // Any order, clamping, and a short output span.
    const std::vector<double> odd = {0.99, 0.5, -1, 2, 0.9, 0.1};
    std::vector<double> out(odd.size());
    s.quantiles(odd, out);
    for (size_t i = 0; i < odd.size(); ++i) EXPECT_EQ(out[i], s.quantile(odd[i])) << "q=" << odd[i];
    double first = -1;
    s.quantiles(qs, {&first, 1});
    EXPECT_EQ(first, s.quantile(0));
  }
}

TEST(Sketch, MergeEqualsSingleSketch) {
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> ln(6, 1.5);
  quantile_sketch all, a, b, c;
  std::vector<double> v;
  for (int i = 0; i < 30000; ++i) {
    double x = 1 + ln(rng);
    v.push_back(x);
    all.add(x);
    (i % 3 == 0 ? a : i % 3 == 1 ? b : c).add(x);
  }
  ASSERT_TRUE(a.merge(b).ok());
  ASSERT_TRUE(a.merge(c).ok());
  EXPECT_EQ(a.count(), all.count());
  for (double q : {0.1, 0.5, 0.9, 0.99}) EXPECT_EQ(a.quantile(q), all.quantile(q)) << q;
  std::sort(v.begin(), v.end());
  expect_within(v, a, 0.01, "merged");
  quantile_sketch other(0.02);
  EXPECT_FALSE(a.merge(other).ok());
  // merging into an empty sketch, and a sketch with a far-away range
  quantile_sketch e, far;
  far.add(1e15);
  ASSERT_TRUE(e.merge(a).ok());
  ASSERT_TRUE(e.merge(far).ok());
  EXPECT_EQ(e.max(), 1e15);
  EXPECT_NEAR(e.quantile(0.5), all.quantile(0.5), 0);
}

TEST(Sketch, MemoryBound) {
  quantile_sketch s;
  for (double x = 1; x < 1.8e19; x *= 1.5) s.add(x);
  EXPECT_LE(s.memory_bytes(), quantile_sketch::max_memory_bytes(0.01));
  EXPECT_LT(quantile_sketch::max_memory_bytes(0.01), 40u * 1024);
}

// ------------------------------------------------------------ windows ---

TEST(CountWindow, ExactBandwidthDefinition) {
  count_window w(4);
  EXPECT_EQ(w.stats().events, 0u);
  w.add(1000, 100);
  auto s = w.stats();
  EXPECT_EQ(s.events, 1u);
  EXPECT_EQ(s.bytes, 100u);
  EXPECT_EQ(s.bandwidth_bps, 0);  // one event: no interval
  w.add(2000, 200);
  w.add(3000, 300);
  s = w.stats();
  // (200 + 300) bytes over 2000 ns = 250e6 B/s; 2 intervals / 2000 ns
  EXPECT_EQ(s.bytes, 600u);
  EXPECT_DOUBLE_EQ(s.bandwidth_bps, 500.0 * 1e9 / 2000);
  EXPECT_DOUBLE_EQ(s.rate_eps, 2.0 * 1e9 / 2000);
  w.add(4000, -11);  // an error: counts as an event, not as bytes
  w.add(5000, 400);  // evicts (1000, 100)
  s = w.stats();
  EXPECT_EQ(s.events, 4u);
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.bytes, 900u);
  EXPECT_EQ(s.first_ts, 2000u);
  EXPECT_EQ(s.last_ts, 5000u);
  EXPECT_DOUBLE_EQ(s.bandwidth_bps, 700.0 * 1e9 / 3000);
  EXPECT_DOUBLE_EQ(s.rate_eps, 3.0 * 1e9 / 3000);
  count_window same(2);
  same.add(7, 10);
  same.add(7, 10);
  EXPECT_EQ(same.stats().bandwidth_bps, 0);  // zero span
}

TEST(TimeWindow, ExactDefinition) {
  time_window w(1000, 1024);  // T = 1000 ns
  w.add(100, 10);
  w.add(600, 20);
  w.add(1099, 30);
  auto s = w.stats();
  // (99, 1099] holds all three
  EXPECT_EQ(s.events, 3u);
  EXPECT_EQ(s.bytes, 60u);
  EXPECT_DOUBLE_EQ(s.bandwidth_bps, 60.0 * 1e9 / 1000);
  EXPECT_DOUBLE_EQ(s.rate_eps, 3.0 * 1e9 / 1000);
  w.add(1100, -5);  // (100, 1100]: ts 100 leaves
  s = w.stats();
  EXPECT_EQ(s.events, 3u);
  EXPECT_EQ(s.bytes, 50u);
  EXPECT_EQ(s.errors, 1u);
  // Asking later expires without new events.
  s = w.stats(1600);  // (600, 1600]
  EXPECT_EQ(s.events, 2u);
  EXPECT_EQ(s.bytes, 30u);
  EXPECT_EQ(w.stats(5000).events, 0u);
  // A record already outside the window on arrival is late.
  w.add(50, 1);
  EXPECT_EQ(w.late(), 1u);
  EXPECT_EQ(w.stats().events, 3u);
}

TEST(TimeWindow, CapacityTruncates) {
  time_window w(1'000'000, 4);
  for (uint64_t t = 1; t <= 6; ++t) w.add(t * 100, 10);
  auto s = w.stats();
  EXPECT_TRUE(s.truncated);
  EXPECT_EQ(s.events, 4u);
  EXPECT_EQ(s.first_ts, 300u);
  // count-window formula over the retained events
  EXPECT_DOUBLE_EQ(s.bandwidth_bps, 30.0 * 1e9 / 300);
  // once the dropped events would have expired anyway, not truncated
  EXPECT_FALSE(w.stats(200 + 1'000'000).truncated);
}

// Naive references: recompute from the full history.
struct ref_event {
  uint64_t ts;
  int32_t size;
};

window_stats naive_count(const std::vector<ref_event>& h, size_t n) {
  window_stats s;
  size_t b = h.size() > n ? h.size() - n : 0;
  s.events = h.size() - b;
  for (size_t i = b; i < h.size(); ++i) {
    if (h[i].size >= 0) s.bytes += h[i].size;
    else ++s.errors;
  }
  if (s.events >= 2 && h.back().ts > h[b].ts) {
    double span = double(h.back().ts - h[b].ts);
    s.bandwidth_bps = double(s.bytes - (h[b].size > 0 ? h[b].size : 0)) * 1e9 / span;
    s.rate_eps = double(s.events - 1) * 1e9 / span;
  }
  return s;
}

window_stats naive_time(const std::vector<ref_event>& h, uint64_t t, uint64_t now) {
  window_stats s;
  for (const auto& e : h)
    if (e.ts <= now && now - e.ts < t) {
      ++s.events;
      if (e.size >= 0) s.bytes += e.size;
      else ++s.errors;
    }
  s.bandwidth_bps = double(s.bytes) * 1e9 / double(t);
  s.rate_eps = double(s.events) * 1e9 / double(t);
  return s;
}

TEST(WindowProperty, RandomStreamsMatchNaiveReference) {
  for (uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8}) {
    std::mt19937_64 rng(seed);
    size_t n = 1 + rng() % 50;
    uint64_t t = 1 + rng() % 5000;
    count_window cw(static_cast<uint32_t>(n));
    time_window tw(t, 1 << 16);
    std::vector<ref_event> h;
    uint64_t ts = rng() % 1000;
    for (int i = 0; i < 3000; ++i) {
      // bursts (equal timestamps), gaps longer than T, and errors
      uint64_t r = rng() % 10;
      ts += r == 0 ? 0 : r == 1 ? t + rng() % 3000 : rng() % 200;
      int32_t size = rng() % 8 == 0 ? -int32_t(rng() % 100 + 1) : int32_t(rng() % 70000);
      h.push_back({ts, size});
      cw.add(ts, size);
      tw.add(ts, size);
      auto a = cw.stats(), b = naive_count(h, n);
      ASSERT_EQ(a.events, b.events) << seed << " " << i;
      ASSERT_EQ(a.bytes, b.bytes) << seed << " " << i;
      ASSERT_EQ(a.errors, b.errors) << seed << " " << i;
      ASSERT_DOUBLE_EQ(a.bandwidth_bps, b.bandwidth_bps) << seed << " " << i;
      ASSERT_DOUBLE_EQ(a.rate_eps, b.rate_eps) << seed << " " << i;
      uint64_t later = ts + rng() % (2 * t);
      for (uint64_t now : {ts, later}) {
        auto c = tw.stats(now), d = naive_time(h, t, now);
        ASSERT_EQ(c.events, d.events) << seed << " " << i << " now=" << now;
        ASSERT_EQ(c.bytes, d.bytes) << seed << " " << i;
        ASSERT_EQ(c.errors, d.errors) << seed << " " << i;
        ASSERT_DOUBLE_EQ(c.bandwidth_bps, d.bandwidth_bps);
        ASSERT_FALSE(c.truncated);
      }
    }
  }
}

}  // namespace
}  // namespace magnet::filters
