// scale_bench's measurements of the daemon's parts at N VMs, one class per
// part, each built once per N and measured once per round.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "magnet/export/openmetrics.h"
#include "magnet/metrics/vm_metrics.h"
#include "magnet/registry/registry.h"
#include "synthetic.h"

namespace magnet::bench {

uint64_t cpu_ns();   // this thread's CPU time
uint64_t wall_ns();  // CLOCK_MONOTONIC
int64_t rss_bytes();

// The registry (host/registry) over libvirt's test driver with N running
// domains: its periodic pass, reconcile(), as the daemon runs it each second.
class registry_stage {
 public:
  registry_stage(const std::string& node_file, unsigned n);
  ~registry_stage();
  struct pass {
    double cpu_ms = 0, wall_ms = 0;
    size_t told = 0;  // vm_changed calls
  };
  pass run();  // one pass; an error names the URI
  pass first;  // the first pass: connect, every VM new
  size_t told = 0;         // VMs the tagger was told of in the first pass (those with an id)
  size_t without_id = 0;   // of them, those with vm_id 0 (magnet's ids are 1..255)
  size_t distinct_ids = 0; // vm_ids other than 0 among the registry's VMs after the first pass
  // Now: the distinct vm_ids other than 0 among the registry's VMs, and
  // the VMs with vm_id 0 (untagged).
  std::pair<size_t, size_t> id_census() const;
  int64_t heap_per_vm = 0; // C++ heap after the first pass, per VM
  int64_t rss_per_vm = 0;  // RSS after the first pass, per VM (with libvirt's test driver)

 private:
  struct tagger;
  std::unique_ptr<tagger> tagger_;
  std::unique_ptr<host::registry> reg_;
};

// The registry's reading of /proc for N VMs' threads: every VM's own
// /proc/PID/task walk, and the vhost workers either found by one walk of
// /proc per VM (before) or by one walk per pass (scan_vhost_workers).  This
// process stands in for every VM's QEMU (the test driver has no process).
double proc_pass_ms(unsigned n, bool walk_per_vm);

// vm_metrics (host/metrics) at the daemon's tick for N VMs.
class tick_stage {
 public:
  explicit tick_stage(unsigned n);
  struct tick {
    double cpu_ms = 0;       // sample() and every VM's stats copied for publishing
    double feed_cpu_ms = 0;  // feed() of the tick's streamed records
  };
  tick run(unsigned ticks);  // means over @ticks ticks
  tick run_without_link(unsigned ticks);  // the same VMs, no --link
  const std::vector<view::stat_value>& stats(uint32_t vm) const { return metrics_.stats(vm); }
  const counter_world& world() const { return world_; }
  int64_t heap_per_vm = 0;  // vm_metrics' C++ heap after its windows filled, per VM
  static constexpr unsigned kRecordsPerVm = 16;

 private:
  void one(host::vm_metrics& m, uint64_t& now, uint64_t& cpu, uint64_t& feed_cpu);
  unsigned n_;
  counter_world world_;
  host::vm_metrics metrics_, unlinked_;
  uint64_t now_ = 1'000'000'000, unlinked_now_ = 1'000'000'000;
};

// One /metrics render (host/export) of @in, wall and CPU ms.
struct render_cost {
  double wall_ms = 0, cpu_ms = 0;
  size_t bytes = 0;
};
render_cost render_once(host::exposition_input& in, host::histogram_detail d);

}  // namespace magnet::bench
