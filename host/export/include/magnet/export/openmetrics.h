// The daemon's figures as Prometheus metrics (docs/metrics.md): one table of
// metric families, written either in the Prometheus text format 0.0.4 or in
// OpenMetrics 1.0.0, chosen by the scraper's Accept header.
//
// Everything is cumulative, in base units (seconds, bytes): the counters the
// daemon already holds from its last 100 ms tick (vm_counters), plus the few
// figures only streamed records carry (tap drops, block latency), summed
// here.  Rendering makes no libvirt call and touches no kernel map.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/capture/latency.h"
#include "magnet/metrics/vm_metrics.h"

namespace magnet::host {

enum class exposition { prometheus, openmetrics };

// The format an Accept header asks for: OpenMetrics 1.0.0 when
// application/openmetrics-text (no version, or version=1.0.0) has a q
// greater than zero and at least that of text/plain (or */*); otherwise the
// Prometheus text format, also for an empty or unparsable header.
exposition negotiate_exposition(std::string_view accept);
std::string_view content_type(exposition f);

// Per-VM totals taken from streamed records: what the kernel does not count.
struct vm_record_totals {
  uint64_t drops_tap = 0;   // dropped on the VM's tap (or elsewhere on its host path)
  uint64_t drops_link = 0;  // dropped at a shared --link (its qdisc)
  lat_stat blk_latency;     // block requests, issue -> completion, log2 buckets as the kernel's
};

class record_totals {
 public:
  // Records back to back, as the consumer delivers them; @links are the
  // shared links (a drop on one of their devices is a link drop).
  void feed(std::span<const uint8_t> records, const std::vector<link_info>& links);
  // The kernel's sampling of the stream (magnet host --sample): what a
  // sampled record counts for in the drops and the block latency histogram.
  void set_sample_weights(sample_weights w) { weights_ = std::move(w); }
  // Forgets every VM not in @vms (sorted ascending).
  void retain(std::span<const uint32_t> vms);
  const vm_record_totals* find(uint32_t vm) const;

 private:
  std::map<uint32_t, vm_record_totals> vms_;
  sample_weights weights_;
};

// A VM's share of the host's power (host/power, docs/placement.md).
struct vm_power_figures {
  double watts = 0;   // over the last second
  double joules = 0;  // since the daemon started (or the VM appeared)
};

// One VM as /metrics shows it.
struct vm_exposition {
  std::string domain, uuid;  // libvirt's, as the registry last saw them
  uint32_t vm_id = 0;        // magnet's id
  const vm_counters* counters = nullptr;      // the last tick's; null: none yet
  const vm_record_totals* records = nullptr;  // null: none yet
  std::optional<vm_power_figures> power;      // none: no power source, or not yet sampled
};

// The host's power and where its energy went, cumulative since the daemon
// started: host_j = the VMs' joules + idle_j + own_j + gone_j.
struct host_power_figures {
  std::string source;  // "rapl" or "model"
  double watts = 0;    // over the last second
  double host_j = 0, idle_j = 0, own_j = 0, gone_j = 0;
};

// How finely histograms are cut (--metrics-detail): every log2 bound of the
// kernel's buckets (24 finite bounds), or one in four (6: a factor of 16
// between bounds), for a page about a third the size with many VMs.
enum class histogram_detail { full, coarse };

struct exposition_input {
  std::vector<vm_exposition> vms;
  uint64_t records = 0;  // records the daemon consumed
  uint64_t lost = 0;     // records lost in the kernel (ring buffer full)
  uint64_t resident_bytes = 0;
  bool libvirt_connected = false;
  histogram_detail detail = histogram_detail::full;
  // None: the host has no power source, and the power families are left
  // out of the page entirely (their HELP and TYPE too).
  std::optional<host_power_figures> power;
};

enum class metric_type { counter, gauge, histogram, info };

struct metric_family {
  const char* name;  // the OpenMetrics family name (no _total, _bucket, _info)
  metric_type type;
  const char* unit;  // base unit, a suffix of the name ("" for none)
  const char* help;
};

// Every family /metrics serves, in the order it serves them.
std::span<const metric_family> metric_families();
// The series names a PromQL query can use (Prometheus naming: counters with
// _total, histograms' _bucket/_sum/_count, magnet_vm_info), in table order.
std::vector<std::string> metric_series_names();

// The page.  @clock (nanoseconds, monotonic) times the rendering for
// magnet_scrape_duration_seconds; tests pass a fixed one.
std::string render_metrics(const exposition_input& in, exposition f,
                           const std::function<uint64_t()>& clock = {});

// This process's resident set size in bytes (/proc/self/statm), 0 if unknown.
uint64_t resident_memory_bytes();

// The finite histogram bounds, seconds: the kernel's log2 buckets
// [2^i, 2^(i+1)) ns hold integer nanoseconds up to 2^(i+1) - 1, so
// le = (2^(i+1) - 1) ns is exact; those below 255 ns are merged into the
// first bound and the kernel's last bucket (2^31 ns and more) is +Inf.
std::vector<double> histogram_bounds_s(histogram_detail d = histogram_detail::full);

}  // namespace magnet::host
