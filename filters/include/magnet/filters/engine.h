// The synthesis engine: consumes the event stream (pushed, or pulled from an
// event_source) and maintains views — a predicate, optional sampling, sliding
// windows, a value sketch, group-by tables and cross-layer correlations.
// Independent of BPF and libvirt.  docs/engine.md describes the semantics.
//
// Per-VM views: a view spec with per_vm = true is a template; the engine
// keeps one instance per VM id and routes each record only to the instance
// of its hdr.vm_id (host records, vm_id 0, go to none).  snapshot_vm(k) —
// what is delivered to VM k — holds only VM k's instances.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/filters/predicate.h"
#include "magnet/filters/window.h"
#include "magnet/result.h"

namespace magnet::filters {

// ---------------------------------------------------------------- specs ---

struct window_spec {
  window_stats::kind k = window_stats::kind::count;
  uint32_t events = 1000;        // count windows: N
  uint64_t ns = 0;               // time windows: T
  uint32_t max_events = 16384;   // time windows: capacity (memory bound)
};

enum class group_key : uint8_t {
  connection,  // abstract_id (the flow / socket identity)
  vcpu,        // kvm.* records: (vm, vcpu_id); others: (tgid, tid) of the thread
  vm,          // vm_id
  cpu,         // host CPU
  event,       // event type
  process,     // tgid
};

enum class value_kind : uint8_t {
  none,
  size,          // hdr.size of records with size >= 0
  interarrival,  // ts of a record minus ts of the view's previous record (ns)
};

enum class corr_key : uint8_t {
  automatic,  // tcp_seq for TCP packets, ip_id otherwise
  ip_id,
  tcp_seq,
  abstract_id,  // the abstract id alone (one record in flight per id)
};

// Cross-layer correlation: a record of the view matching `from` opens a
// pending entry keyed by (abstract_id, key); the first later record matching
// `to` with the same key closes it and its latency (to.ts - from.ts) goes
// into a sketch.  Pending entries expire after timeout_ns (stream time); the
// table holds at most max_pending (the oldest is evicted).
struct correlate_spec {
  std::string name;
  std::string from, to;  // predicates
  corr_key key = corr_key::automatic;
  uint64_t timeout_ns = 1'000'000'000;
  uint32_t max_pending = 4096;
};

struct view_spec {
  std::string name;
  std::string filter;               // predicate text; "" = all records
  bool per_vm = false;              // template instantiated per vm_id
  std::vector<uint32_t> vms;        // per_vm: instantiate only these (empty = any VM seen)
  uint32_t sample_every = 1;        // 1-in-N of the records that pass the filter
  std::vector<window_spec> windows;
  value_kind value = value_kind::size;
  double accuracy = 0.01;           // sketch relative accuracy
  std::vector<group_key> group_by;
  uint32_t max_groups = 1024;       // per table; beyond it records count in "other"
  std::vector<correlate_spec> correlate;
};

// Per-instance memory budget: add_view() rejects specs whose worst case
// (max_memory_bytes) exceeds it.
inline constexpr size_t kViewMemoryBudget = 1 << 20;
size_t max_memory_bytes(const view_spec& s);

// ------------------------------------------------------------ snapshots ---

struct dist_stats {
  uint64_t count = 0;
  double sum = 0, mean = 0, min = 0, max = 0;
  double p50 = 0, p90 = 0, p99 = 0;
  double relative_accuracy = 0;
};

struct group_row {
  uint64_t key = 0;   // abstract_id, vm, cpu, event type, tgid
  uint64_t key2 = 0;  // vcpu: tid or vcpu_id; else 0
  std::string label;  // "0x1f3a...", "vm 3", "vcpu 3/1", "tid 100/101", "net.sock.recv"
  uint64_t events = 0, bytes = 0, errors = 0;
  uint64_t first_ts = 0, last_ts = 0;
  double bandwidth_bps = 0;  // bytes after the first event / (last_ts - first_ts)
};

struct group_table {
  group_key by = group_key::connection;
  std::vector<group_row> rows;  // sorted by bytes, then events, descending
  uint64_t other_events = 0, other_bytes = 0;  // records beyond max_groups
};

struct correlation_stats {
  std::string name;
  uint64_t matched = 0;    // pairs measured
  uint64_t unmatched = 0;  // `to` records with no pending `from`
  uint64_t expired = 0;    // pending entries older than the timeout
  uint64_t evicted = 0;    // pending entries dropped because the table was full
  uint64_t reordered = 0;  // `to` earlier than its `from`: not measured
  uint64_t pending = 0;
  dist_stats latency_ns;
};

struct view_snapshot {
  std::string view;
  uint32_t vm = 0;          // the VM of a per-VM instance; 0 for a global view
  bool per_vm = false;
  uint64_t ts_ns = 0;       // stream time of the snapshot
  uint64_t matched = 0;     // records that passed the filter
  uint64_t sampled = 0;     // of those, kept by sampling (= processed)
  uint32_t sample_every = 1;
  std::vector<window_stats> windows;
  dist_stats value;
  value_kind value_of = value_kind::size;
  std::vector<group_table> groups;
  std::vector<correlation_stats> correlations;
  size_t memory_bytes = 0;
};

// The delivered format (docs/engine.md, "Snapshot JSON"): one object per
// snapshot, an array for a span.  NaN and infinities are written as null;
// bytes of names and labels that are not UTF-8 become U+FFFD.
std::string to_json(const view_snapshot& s);
std::string to_json(std::span<const view_snapshot> s);
// The same text appended to `out` (not cleared: a caller may put a prefix
// first), so a buffer can be reused across snapshots without allocating.
void to_json(const view_snapshot& s, std::string& out);
void to_json(std::span<const view_snapshot> s, std::string& out);
std::string_view name_of(group_key k);
std::string_view name_of(value_kind k);
std::string_view name_of(corr_key k);

// -------------------------------------------------------------- sources ---

// Pull interface: batches of back-to-back records (magnet_hdr + payload,
// native order, each hdr.len long), valid until the next call.
class event_source {
 public:
  virtual ~event_source() = default;
  // An empty span is the end of the stream.
  virtual result<std::span<const uint8_t>> next_batch() = 0;
};

// Records held in memory (tests, replay of a captured buffer).
class memory_source : public event_source {
 public:
  explicit memory_source(std::vector<uint8_t> records, size_t batch_bytes = 64 * 1024);
  static memory_source of(const std::vector<std::vector<uint8_t>>& records);
  result<std::span<const uint8_t>> next_batch() override;

 private:
  std::vector<uint8_t> buf_;
  size_t pos_ = 0, batch_;
};

// A trace file written by trace_writer (any endianness); stream records
// (sysinfo, event_desc) are passed through like any other record.
class trace_source : public event_source {
 public:
  static result<std::unique_ptr<trace_source>> open(const std::string& path);
  ~trace_source() override;
  result<std::span<const uint8_t>> next_batch() override;

 private:
  struct impl;
  explicit trace_source(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

// -------------------------------------------------------------- pushdown ---

// What the host may write into the kernel for the current set of views:
// each engaged set is a necessary condition of *every* view (a record any
// view could use passes it), so installing it never loses data a view needs.
struct kernel_pushdown {
  pushdown filter;
  // Per event type: the kernel may sample 1-in-N (gcd of the sample_every of
  // all views that can use that type); absent = no kernel sampling.
  std::map<uint16_t, uint32_t> sample_every;
  bool operator==(const kernel_pushdown&) const = default;
};

// --------------------------------------------------------------- engine ---

struct engine_stats {
  uint64_t records = 0;       // records fed
  uint64_t malformed = 0;     // batches cut short at a corrupt record
  uint64_t vm_overflow = 0;   // records of a VM beyond max_vms_per_view
  uint64_t last_ts = 0;       // highest ts seen (stream time)
};

class engine {
 public:
  struct options {
    uint32_t max_vms_per_view = 1024;  // instances of one per-VM template
  };
  engine();
  explicit engine(options o);
  ~engine();
  engine(engine&&) noexcept;
  engine& operator=(engine&&) noexcept;

  // Validates and compiles; errors name the view and the problem.  Names are
  // unique.  A per-VM template may not filter on `vm` (the engine scopes it).
  status add_view(view_spec spec);
  status remove_view(std::string_view name);
  std::vector<std::string> view_names() const;
  const view_spec* find_view(std::string_view name) const;

  // Per-VM templates: create the instances of VM k now (the daemon knows its
  // VMs) instead of on the first matching record.
  void add_vm(uint32_t vm);
  // Drops VM k's instances (VM shut down).
  void remove_vm(uint32_t vm);

  // Push API (live consumer): back-to-back records; a corrupt length stops
  // the batch (counted in stats().malformed).  Allocation-free in steady
  // state (new VMs, groups and ring growth allocate).
  void feed(std::span<const uint8_t> records);
  void feed_one(const uint8_t* record);
  // Pull: feeds every batch of the source; returns the records consumed.
  result<uint64_t> run(event_source& src);

  // now_ns = 0: the stream time (stats().last_ts).
  std::vector<view_snapshot> snapshot(uint64_t now_ns = 0) const;
  // Everything VM k may receive: only the instances of per-VM views for k.
  std::vector<view_snapshot> snapshot_vm(uint32_t vm, uint64_t now_ns = 0) const;
  // The same into `out` (replaced), reusing its vectors and strings: a
  // caller that keeps `out` (and a to_json buffer) across ticks allocates
  // nothing in steady state.
  void snapshot_vm(uint32_t vm, std::vector<view_snapshot>& out, uint64_t now_ns = 0) const;
  result<view_snapshot> snapshot(std::string_view view, uint32_t vm = 0, uint64_t now_ns = 0) const;

  // Union of the views' pushdown (see kernel_pushdown).
  kernel_pushdown pushdown() const;
  // The host reports what it installed, so views sample only the remainder
  // (a view with sample_every 4 behind a kernel 1-in-2 keeps 1 in 2).
  void set_kernel_sampling(std::map<uint16_t, uint32_t> applied);

  const engine_stats& stats() const;
  size_t memory_bytes() const;
  // Records a per-VM instance received with a foreign vm_id: must be 0.
  // Exposed so the isolation property can be tested (and alarmed on).
  uint64_t isolation_violations() const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace magnet::filters
