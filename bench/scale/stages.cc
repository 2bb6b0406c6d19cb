#include "stages.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <stdexcept>

#include "alloc_count.h"
#include "magnet/control.h"

namespace magnet::bench {

uint64_t cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

uint64_t wall_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// ------------------------------------------------------------ registry ---

struct registry_stage::tagger : host::vm_tagger {
  size_t changed = 0, without_id = 0, gone = 0;
  void vm_changed(const host::vm_info& vm) override {
    ++changed;
    without_id += vm.vm_id == 0;
  }
  void vm_gone(uint32_t) override { ++gone; }
};

registry_stage::registry_stage(const std::string& node_file, unsigned n) : tagger_(std::make_unique<tagger>()) {
  const int64_t heap0 = live_heap_bytes(), rss0 = rss_bytes();
  // A period of an hour: only run() makes passes.
  reg_ = std::make_unique<host::registry>("test://" + node_file, *tagger_, std::chrono::hours(1));
  first = run();
  told = first.told;
  without_id = tagger_->without_id;
  std::set<uint32_t> ids;
  for (const auto& vm : reg_->vms())
    if (vm.vm_id) ids.insert(vm.vm_id);
  distinct_ids = ids.size();
  // Every running domain is listed; the tagger hears of those with an id
  // only (MAGNET_MAX_VM_ID of them: the rest stay untagged, registry.cc).
  const size_t listed = reg_->vms().size(), taggable = std::min<size_t>(n, MAGNET_MAX_VM_ID);
  if (listed != n || told != taggable)
    throw std::runtime_error("the registry listed " + std::to_string(listed) + " and told the tagger of " +
                             std::to_string(told) + " of the test driver's " + std::to_string(n) +
                             " running domains (expected " + std::to_string(n) + " and " +
                             std::to_string(taggable) + "; " + node_file + ")");
  heap_per_vm = (live_heap_bytes() - heap0) / n;
  rss_per_vm = (rss_bytes() - rss0) / n;
}

registry_stage::~registry_stage() = default;

std::pair<size_t, size_t> registry_stage::id_census() const {
  std::set<uint32_t> ids;
  size_t zero = 0;
  for (const auto& vm : reg_->vms()) {
    if (vm.vm_id) ids.insert(vm.vm_id);
    zero += vm.vm_id == 0;
  }
  return {ids.size(), zero};
}

registry_stage::pass registry_stage::run() {
  const size_t told0 = tagger_->changed;
  const uint64_t c0 = cpu_ns(), t0 = wall_ns();
  auto s = reg_->reconcile();
  const uint64_t c1 = cpu_ns(), t1 = wall_ns();
  if (!s) throw std::runtime_error("registry pass at " + reg_->uri() + " failed: " + s.err().message);
  return {static_cast<double>(c1 - c0) / 1e6, static_cast<double>(t1 - t0) / 1e6, tagger_->changed - told0};
}

// ---------------------------------------------------------------- /proc ---

double proc_pass_ms(unsigned n, bool walk_per_vm) {
  const pid_t self = getpid();
  size_t threads = 0;
  const uint64_t c0 = cpu_ns();
  if (walk_per_vm) {
    for (unsigned i = 0; i < n; ++i) threads += host::qemu_threads(self).size();
  } else {
    const auto workers = host::scan_vhost_workers();
    for (unsigned i = 0; i < n; ++i) threads += host::qemu_threads(self, workers).size();
  }
  const uint64_t c1 = cpu_ns();
  if (threads < n) throw std::runtime_error("qemu_threads found no thread of this process");
  return static_cast<double>(c1 - c0) / 1e6;
}

// ---------------------------------------------------------------- tick ---

tick_stage::tick_stage(unsigned n) : n_(n), world_(n) {
  const int64_t heap0 = live_heap_bytes();
  // One shared link, 10 Gbit/s, as `magnet host --link` gives the daemon.
  metrics_.set_links({host::link_info{"uplink", 0, 7, 10e9, 0.005}});
  for (uint32_t v = 1; v <= n; ++v) metrics_.set_allowance(v, 1e9, 1e9);
  uint64_t c = 0, f = 0;
  for (size_t i = 0; i < host::vm_metrics::kHistory + 5; ++i) one(metrics_, now_, c, f);  // every window full
  heap_per_vm = (live_heap_bytes() - heap0) / n;
  for (uint32_t v = 1; v <= n; ++v) unlinked_.set_allowance(v, 1e9, 1e9);
  for (size_t i = 0; i < host::vm_metrics::kHistory + 5; ++i) one(unlinked_, unlinked_now_, c, f);
}

// One tick of @m: the streamed records of the last 100 ms fed, then the
// tick's sample and every VM's stats copied, as the daemon's tick publishes
// them (host/daemon/src/tick.cc: hub_.publish(id, now, vm_stats(id))).
void tick_stage::one(host::vm_metrics& m, uint64_t& now, uint64_t& cpu, uint64_t& feed_cpu) {
  const auto recs = tick_records(n_, kRecordsPerVm, 7, now);
  uint64_t c0 = cpu_ns();
  m.feed(recs);
  uint64_t c1 = cpu_ns();
  feed_cpu += c1 - c0;
  now += 100'000'000;
  world_.advance();
  c0 = cpu_ns();
  m.sample(now, world_.counters);
  size_t values = 0;
  for (uint32_t v = 1; v <= n_; ++v) {
    std::vector<view::stat_value> copy = m.stats(v);
    values += copy.size();
  }
  c1 = cpu_ns();
  cpu += c1 - c0;
  if (values < n_) throw std::runtime_error("vm_metrics gave no stats for some of the " + std::to_string(n_) + " VMs");
}

tick_stage::tick tick_stage::run(unsigned ticks) {
  uint64_t c = 0, f = 0;
  for (unsigned i = 0; i < ticks; ++i) one(metrics_, now_, c, f);
  return {static_cast<double>(c) / 1e6 / ticks, static_cast<double>(f) / 1e6 / ticks};
}

tick_stage::tick tick_stage::run_without_link(unsigned ticks) {
  uint64_t c = 0, f = 0;
  for (unsigned i = 0; i < ticks; ++i) one(unlinked_, unlinked_now_, c, f);
  return {static_cast<double>(c) / 1e6 / ticks, static_cast<double>(f) / 1e6 / ticks};
}

// -------------------------------------------------------------- scrape ---

render_cost render_once(host::exposition_input& in, host::histogram_detail d) {
  in.detail = d;
  const uint64_t c0 = cpu_ns(), t0 = wall_ns();
  std::string page = host::render_metrics(in, host::exposition::openmetrics);
  const uint64_t t1 = wall_ns(), c1 = cpu_ns();
  return {static_cast<double>(t1 - t0) / 1e6, static_cast<double>(c1 - c0) / 1e6, page.size()};
}

}  // namespace magnet::bench
