// What scale_bench feeds the daemon's parts instead of a host with N VMs:
// libvirt's test driver's node file of N running domains, per-VM counters
// in the shape of the daemon's tick (as bench/scrape), streamed records, and
// processes that stand in for the other processes of a busy host.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "magnet/export/openmetrics.h"
#include "magnet/metrics/vm_metrics.h"

namespace magnet::bench {

// Writes a test-driver node file with @n running domains (each with a tap,
// a vsock CID, a view channel and a <bandwidth>) into @dir; its path, for
// the URI test://PATH.  An error names the file.
std::string write_node_file(const std::string& dir, unsigned n);

// Every VM's cumulative counters, moved on by one 100 ms tick by advance():
// 2 vCPUs, 8 exit reasons and both halt kinds, queueing both ways (the
// series a busy VM has, as bench/scrape renders them).
struct counter_world {
  std::map<uint32_t, host::vm_counters> counters;  // VM id 1..n
  std::map<uint32_t, host::vm_record_totals> records;
  explicit counter_world(unsigned n);
  void advance();
  // The /metrics page's input for these counters.
  host::exposition_input exposition() const;
};

// Streamed records of one tick: @per_vm vmnet.queue records of each VM,
// alternately TX (out through @link_ifindex) and RX.
std::vector<uint8_t> tick_records(unsigned n, unsigned per_vm, uint32_t link_ifindex, uint64_t now_ns);

// @n processes of ours that sleep (posix_spawn of sleep), so that /proc has
// that many more entries; killed and reaped by the destructor.
class extra_processes {
 public:
  explicit extra_processes(unsigned n);
  ~extra_processes();
  extra_processes(const extra_processes&) = delete;
  size_t size() const { return pids_.size(); }

 private:
  void end_all();  // SIGKILL and reap every one
  std::vector<pid_t> pids_;
};

// Numeric entries of /proc: the processes a walk of /proc reads.
unsigned proc_entries();

}  // namespace magnet::bench
