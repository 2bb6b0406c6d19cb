// Throughput of the engine's hot path and the cost of per-VM views.
//   BM_FilterWindowSplit: predicate + count and time windows + per-VM routing;
//     items_per_second is events/s on one core (target >= 10 M/s).
//   BM_HundredVms: 100 VMs, one per-VM view each (windows, sketch, group-by),
//     every VM's views snapshotted and serialised at 10 Hz, as the daemon
//     serves them.  One iteration is one second of simulated stream;
//     core_pct = CPU time per simulated second as % of one core (printed
//     with an 's' suffix by the library: read it as a plain number).
//     Second argument: 1 = snapshot + JSON (the daemon), 0 = snapshots only.
//   BM_HundredVmsReusedBuffers: the same with buffers kept across ticks.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>

#include "magnet/filters/engine.h"
#include "records.h"

namespace magnet::filters {
namespace {

using namespace testing;

// Back-to-back records: net.sock recv/send (sock payload), l4 (pkt) and
// sched.switch records over `vms` VMs plus host records, ts strictly rising.
std::vector<uint8_t> make_stream(size_t n, uint32_t vms, uint64_t dt_ns, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> buf;
  buf.reserve(n * 112);
  for (size_t i = 0; i < n; ++i) {
    uint32_t vm = static_cast<uint32_t>(rng() % (vms + 1));  // 0 = host
    hdr_args a{.ts = 1'000'000 + i * dt_ns, .vm = vm, .cpu = uint16_t(rng() % 16),
               .tgid = 1000 + vm, .tid = 1000 + vm * 8 + uint32_t(rng() % 4),
               .id = (uint64_t(vm) << 32) | (rng() % 64), .size = int32_t(rng() % 9000)};
    std::vector<uint8_t> r;
    switch (rng() % 4) {
      case 0: a.type = MAGNET_EV_NET_SOCK_SEND; r = sock_rec(a); break;
      case 1: a.type = MAGNET_EV_NET_L4_RECV; r = pkt_rec(a); break;
      case 2: a.type = MAGNET_EV_SCHED_SWITCH; r = sched_rec(a); break;
      default: a.type = MAGNET_EV_NET_SOCK_RECV; r = sock_rec(a); break;
    }
    buf.insert(buf.end(), r.begin(), r.end());
  }
  return buf;
}

size_t count_records(const std::vector<uint8_t>& b) {
  size_t n = 0;
  for (size_t off = 0; off < b.size(); off += reinterpret_cast<const magnet_hdr*>(b.data() + off)->len) ++n;
  return n;
}

// Replaying a stream must not go back in time (time windows would see every
// record as late and skip it): move the whole stream forward between runs.
void shift_ts(std::vector<uint8_t>& b, uint64_t d) {
  for (size_t off = 0; off < b.size(); off += reinterpret_cast<const magnet_hdr*>(b.data() + off)->len)
    reinterpret_cast<magnet_hdr*>(b.data() + off)->ts_ns += d;
}

// With --benchmark_repetitions: min and max next to mean/median/stddev.
void with_range(benchmark::internal::Benchmark* b) {
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); })
      ->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}

void BM_PredicateMatch(benchmark::State& st) {
  auto p = predicate::parse("event == net.sock and sport == 5000 and size > 100").value();
  auto r = sock_rec({.type = MAGNET_EV_NET_SOCK_RECV, .size = 200});
  for (auto _ : st) benchmark::DoNotOptimize(p.match(r.data()));
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_PredicateMatch);

void BM_FilterWindowSplit(benchmark::State& st) {
  const uint32_t vms = static_cast<uint32_t>(st.range(0));
  auto stream = make_stream(1 << 18, vms, 100);
  size_t n = count_records(stream);
  engine e;
  view_spec v;
  v.name = "sock";
  v.filter = "event == net.sock";
  v.per_vm = true;
  v.value = value_kind::none;
  v.windows = {{window_stats::kind::count, 1000, 0}, {window_stats::kind::time, 0, 100'000'000}};
  e.add_view(v).value();
  const uint64_t span = (1 << 18) * 100;
  e.feed(stream);  // warm: instances and rings allocated
  for (auto _ : st) {
    st.PauseTiming();
    shift_ts(stream, span);
    st.ResumeTiming();
    e.feed(stream);
  }
  st.SetItemsProcessed(static_cast<int64_t>(st.iterations() * n));
  st.counters["vms"] = vms;
}
BENCHMARK(BM_FilterWindowSplit)->Arg(8)->Arg(100)->Apply(with_range);

void BM_FilterWindowSplitSketchGroups(benchmark::State& st) {
  auto stream = make_stream(1 << 18, 100, 100);
  size_t n = count_records(stream);
  engine e;
  view_spec v;
  v.name = "sock";
  v.filter = "event == net.sock";
  v.per_vm = true;
  v.windows = {{window_stats::kind::count, 1000, 0}, {window_stats::kind::time, 0, 100'000'000}};
  v.group_by = {group_key::connection};
  e.add_view(v).value();
  const uint64_t span = (1 << 18) * 100;
  e.feed(stream);
  for (auto _ : st) {
    st.PauseTiming();
    shift_ts(stream, span);
    st.ResumeTiming();
    e.feed(stream);
  }
  st.SetItemsProcessed(static_cast<int64_t>(st.iterations() * n));
}
BENCHMARK(BM_FilterWindowSplitSketchGroups)->Apply(with_range);

// The 100-VM scenario: 100 VMs with one per-VM view each (count window of
// 1000 events, 1 s time window, size sketch, group-by connection and vcpu),
// fed one simulated second at `rate` events/s, cut at the 100 ms ticks.
struct hundred_vms {
  static constexpr uint32_t kVms = 100;
  engine e;
  std::vector<uint8_t> stream;
  std::vector<std::span<const uint8_t>> tenths;  // alias stream

  explicit hundred_vms(size_t rate) : stream(make_stream(rate, kVms, 1'000'000'000 / rate)) {
    size_t off = 0, start = 0;
    uint64_t next = 1'000'000 + 100'000'000;
    while (off < stream.size()) {
      auto* h = reinterpret_cast<const magnet_hdr*>(stream.data() + off);
      if (h->ts_ns >= next) {
        tenths.emplace_back(stream.data() + start, off - start);
        start = off;
        next += 100'000'000;
      }
      off += h->len;
    }
    tenths.emplace_back(stream.data() + start, off - start);
    e.add_view(hundred_vms_view()).value();
    for (uint32_t vm = 1; vm <= kVms; ++vm) e.add_vm(vm);
  }

  // One iteration = one simulated second: the stream, and at every 100 ms
  // tick `serve(vm)` for every VM.  core_pct = CPU time per simulated
  // second as % of one core.
  template <class Serve>
  void run(benchmark::State& st, size_t rate, Serve&& serve) {
    size_t bytes = 0;
    bool first = true;
    for (auto _ : st) {
      if (!first) {
        st.PauseTiming();
        shift_ts(stream, 1'000'000'000);  // replay one second later
        st.ResumeTiming();
      }
      first = false;
      for (auto part : tenths) {
        e.feed(part);
        for (uint32_t vm = 1; vm <= kVms; ++vm) bytes += serve(vm);
      }
    }
    benchmark::DoNotOptimize(bytes);
    st.SetItemsProcessed(static_cast<int64_t>(st.iterations() * rate));
    st.counters["core_pct"] = benchmark::Counter(static_cast<double>(st.iterations()) / 100.0,
                                                 benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    st.counters["view_bytes"] = static_cast<double>(e.snapshot("net", 1).value().memory_bytes);
  }
};

// Second argument 1: what the daemon does for `views VM` (host/daemon/src),
// snapshot and serialise, at every tick for every VM; 0: snapshots only.
void BM_HundredVms(benchmark::State& st) {
  const auto rate = static_cast<size_t>(st.range(0));
  const bool json = st.range(1) != 0;
  hundred_vms h(rate);
  h.run(st, rate, [&](uint32_t vm) -> size_t {
    if (!json) return h.e.snapshot_vm(vm).size();
    std::string reply = "ok " + to_json(h.e.snapshot_vm(vm));
    return reply.size();
  });
}
BENCHMARK(BM_HundredVms)
    ->Args({100'000, 1})
    ->Args({100'000, 0})
    ->Args({1'000'000, 1})
    ->Args({1'000'000, 0})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->Apply(with_range);

// The same with the buffer-reusing overloads (snapshot_vm into a kept
// vector, to_json appending to a kept string): what a server gets by
// keeping its buffers across ticks.
void BM_HundredVmsReusedBuffers(benchmark::State& st) {
  const auto rate = static_cast<size_t>(st.range(0));
  hundred_vms h(rate);
  std::vector<view_snapshot> snaps;
  std::string reply;
  h.run(st, rate, [&](uint32_t vm) -> size_t {
    h.e.snapshot_vm(vm, snaps);
    reply.assign("ok ");
    to_json(snaps, reply);
    return reply.size();
  });
}
BENCHMARK(BM_HundredVmsReusedBuffers)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->Apply(with_range);

}  // namespace
}  // namespace magnet::filters

BENCHMARK_MAIN();
