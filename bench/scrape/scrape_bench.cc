// The cost of one /metrics scrape of `magnet host --http`: render_metrics()
// (host/export/src/openmetrics.cc) on synthetic counters in the shape the daemon
// holds after its tick, for N VMs (default 100), in both formats.  What the
// daemon adds around it (the HTTP exchange, reading /proc/self/statm) is
// not counted; no libvirt call is made by a scrape.
//
// Each VM: 2 vCPUs, 8 KVM exit reasons with populated log2 histograms plus
// the two halt kinds, both host queueing directions, block latency, drops:
// the series a busy VM has.  Runs alternate the two formats; the wall time
// of each render (CLOCK_MONOTONIC) and its CPU time (CLOCK_THREAD_CPUTIME_ID);
// median and min-max over the runs.  Both histogram details (--metrics-detail
// full and coarse), interleaved the same way.
//
//   scrape_bench [--vms N] [--runs N] [--json]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../summary.h"
#include "../synthetic_vm.h"
#include "magnet/view.h"
#include "magnet/export/openmetrics.h"

using namespace magnet;
using namespace magnet::host;

namespace {

constexpr double kTargetMs = 10.0;

uint64_t clock_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

using magnet::bench::summarize;
using magnet::bench::summary;
using magnet::bench::fill_synthetic_vm;


struct world {
  std::vector<vm_counters> counters;
  std::vector<vm_record_totals> records;
  exposition_input in;
  explicit world(unsigned n) : counters(n), records(n) {
    for (unsigned i = 0; i < n; ++i) {
      vm_counters& c = counters[i];
      const uint64_t k = i + 1;
      c.tap_tx_bytes = 123456789012ull * k;
      c.tap_tx_pkts = 98765432ull * k;
      c.tap_rx_bytes = 23456789012ull * k;
      c.tap_rx_pkts = 8765432ull * k;
      c.blk_bytes = 4096ull * 1000003 * k;
      c.blk_reqs = 1000003 * k;
      c.exits = 55555555 * k;
      c.lost = k;
      for (int v = 0; v < 2; ++v) c.vcpu_ns[v] = {1234567890123ull * k, 2345678901ull * k, 3456789012345ull * k};
      fill_synthetic_vm(c, records[i], k);
      char uuid[40];
      std::snprintf(uuid, sizeof uuid, "%08x-1c2d-4e5f-8a9b-%012x", i, i * 7919);
      in.vms.push_back({"guest-" + std::to_string(i), uuid, i + 1, &c, &records[i]});
    }
    in.records = 123456789;
    in.lost = 42;
    in.resident_bytes = 64 << 20;
    in.libvirt_connected = true;
  }
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "scrape_bench: %s\nusage: scrape_bench [--vms N] [--runs N] [--json]\n", why);
  std::exit(2);
}

unsigned count_arg(int& i, int argc, char** argv) {
  if (i + 1 >= argc) usage((std::string(argv[i]) + " needs a value").c_str());
  char* end = nullptr;
  unsigned long v = std::strtoul(argv[++i], &end, 10);
  if (!*argv[i] || *end || v == 0 || v > 100000)
    usage((std::string(argv[i - 1]) + ": '" + argv[i] + "' is not a count from 1 to 100000").c_str());
  return static_cast<unsigned>(v);
}

}  // namespace

int main(int argc, char** argv) {
  unsigned vms = 100, runs = 200;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--vms")) vms = count_arg(i, argc, argv);
    else if (!std::strcmp(argv[i], "--runs")) runs = count_arg(i, argc, argv);
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("usage: scrape_bench [--vms N] [--runs N] [--json]\n");
      return 0;
    } else usage((std::string("unknown argument '") + argv[i] + "'").c_str());
  }
  world w(vms);
  struct result {
    const char* name;
    exposition f;
    histogram_detail d;
    std::vector<double> wall_ms, cpu_ms;
    size_t bytes = 0, samples = 0;
  } res[] = {{"prometheus 0.0.4", exposition::prometheus, histogram_detail::full, {}, {}},
             {"openmetrics 1.0.0", exposition::openmetrics, histogram_detail::full, {}, {}},
             {"prometheus 0.0.4", exposition::prometheus, histogram_detail::coarse, {}, {}},
             {"openmetrics 1.0.0", exposition::openmetrics, histogram_detail::coarse, {}, {}}};
  auto render = [&](const result& r) {
    w.in.detail = r.d;
    return render_metrics(w.in, r.f);
  };
  auto detail_name = [](histogram_detail d) { return d == histogram_detail::coarse ? "coarse" : "full"; };
  for (auto& r : res) {  // warm-up, and the page's size
    std::string page = render(r);
    r.bytes = page.size();
    for (size_t at = 0; at < page.size();) {
      size_t nl = page.find('\n', at);
      if (page[at] != '#') r.samples++;
      at = nl == std::string::npos ? page.size() : nl + 1;
    }
  }
  for (unsigned run = 0; run < runs; ++run)
    for (auto& r : res) {
      uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = clock_ns(CLOCK_MONOTONIC);
      std::string page = render(r);
      uint64_t t1 = clock_ns(CLOCK_MONOTONIC), c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
      if (page.size() + 32 < r.bytes) {  // only the duration's digits may differ
        std::fprintf(stderr, "scrape_bench: the page shrank from %zu to %zu bytes\n", r.bytes, page.size());
        return 1;
      }
      r.wall_ms.push_back(static_cast<double>(t1 - t0) / 1e6);
      r.cpu_ms.push_back(static_cast<double>(c1 - c0) / 1e6);
    }
  bool met = true;
  if (json) std::printf("{\"vms\":%u,\"runs\":%u,\"target_ms\":%.1f,\"formats\":[", vms, runs, kTargetMs);
  else
    std::printf("/metrics render, %u VMs (2 vCPUs, 8 exit reasons + 2 halt kinds, queueing both ways, "
                "block latency each), %u runs per format and detail\n\n%-18s %-7s %10s %10s %26s %26s\n",
                vms, runs, "format", "detail", "bytes", "samples", "wall ms: median (min-max)", "cpu ms: median (min-max)");
  for (size_t i = 0; i < std::size(res); ++i) {
    const auto& r = res[i];
    summary wall = summarize(r.wall_ms), cpu = summarize(r.cpu_ms);
    if (r.d == histogram_detail::full) met &= wall.med <= kTargetMs;
    if (json) {
      std::printf("%s{\"format\":\"%s\",\"detail\":\"%s\",\"bytes\":%zu,\"samples\":%zu,\"wall_ms\":{\"median\":%.4f,\"min\":%.4f,"
                  "\"max\":%.4f},\"cpu_ms\":{\"median\":%.4f,\"min\":%.4f,\"max\":%.4f}}",
                  i ? "," : "", r.name, detail_name(r.d), r.bytes, r.samples, wall.med, wall.min, wall.max, cpu.med, cpu.min, cpu.max);
    } else {
      char a[64], b[64];
      std::snprintf(a, sizeof a, "%.3f (%.3f-%.3f)", wall.med, wall.min, wall.max);
      std::snprintf(b, sizeof b, "%.3f (%.3f-%.3f)", cpu.med, cpu.min, cpu.max);
      std::printf("%-18s %-7s %10zu %10zu %26s %26s\n", r.name, detail_name(r.d), r.bytes, r.samples, a, b);
    }
  }
  if (json) std::printf("],\"target_met\":%s}\n", met ? "true" : "false");
  else std::printf("\ntarget (full detail): median <= %.1f ms per scrape -> %s\n", kTargetMs, met ? "MET" : "MISSED");
  return 0;
}
