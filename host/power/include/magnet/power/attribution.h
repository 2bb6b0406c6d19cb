// Who drew the host's energy over one interval: each VM, the host's idle
// power, and the host's own work (docs/placement.md, "Attribution").
//
// The policy, in three steps:
//  1. The idle part.  With a model: its idle power for the interval's
//     length.  With RAPL (no idle figure of its own): the host's energy
//     times its CPUs' idle fraction (idle / (busy + idle) from /proc/stat),
//     as Kepler >= 0.10 splits node power into idle and active.
//  2. The rest (active) is shared in proportion to busy CPU time: each VM's
//     work (vm_work) against the host's busy time.  What no VM did is the
//     host's own work.  When the VMs' work adds up to more than the host's
//     busy time (the two are read by different clocks at slightly different
//     instants), the VMs' sum is the whole instead and the host's own is 0.
//  3. The idle part is no VM's: it stays the host's idle energy.  It is the
//     price of the host being on, which only emptying the host saves (what a
//     placement decides); a VM's power is what its work adds.
// Every joule lands somewhere: VMs + idle + own = the host's energy, up to
// floating point.  Pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string_view>

#include "magnet/power/model.h"
#include "magnet/result.h"

namespace magnet::power {

// The host's CPU time, all CPUs together, in nanoseconds.
struct cpu_times {
  uint64_t busy_ns = 0;  // user, nice (with guest time), system, irq, softirq
  uint64_t idle_ns = 0;  // idle, iowait
};

// /proc/stat's first line ("cpu  user nice system idle iowait irq softirq
// steal guest guest_nice", in ticks of @hz); steal is neither busy nor idle
// (another host's work, when this host is itself a VM); guest time is
// already in user and nice.
result<cpu_times> parse_proc_stat(std::string_view text, long hz);
// The file (default /proc/stat) at sysconf(_SC_CLK_TCK).
result<cpu_times> read_proc_stat(const std::string& path = "/proc/stat");

// The busy fraction of @d: busy / (busy + idle), 0 when both are 0.
double utilisation(const cpu_times& d);

// One VM's work over an interval, nanoseconds of CPU time.
struct vm_work {
  // Its vCPU threads on a host CPU (magnet's sched records): guest mode
  // and the exits handled on those threads, in KVM or in QEMU; not halted
  // (asleep) or waiting for a CPU.
  uint64_t vcpu_run_ns = 0;
  // Its vhost workers and QEMU's I/O threads and main loop: 0 when the
  // caller does not know them (the daemon does not yet: docs/placement.md).
  uint64_t vhost_ns = 0;
  uint64_t io_threads_ns = 0;
  uint64_t total() const { return vcpu_run_ns + vhost_ns + io_threads_ns; }
};

struct energy_split {
  double idle_j = 0, own_j = 0;
  std::map<uint32_t, double> vms;  // VM -> joules (every VM given, 0 included)
};

// @host_j split (step 2 and 3 above): @idle_j, clamped to 0..host_j, is
// the idle part; the rest is shared by busy time.
energy_split attribute(double host_j, double idle_j, uint64_t host_busy_ns,
                       const std::map<uint32_t, vm_work>& vms);

// Step 1, RAPL: the idle part of @host_j over an interval with CPU times @d
// (all of it when the CPUs counted no time at all).
double rapl_idle_joules(double host_j, const cpu_times& d);

// Step 1 and the energy, model: over @seconds at the utilisation of @d.
struct model_energy {
  double host_j = 0, idle_j = 0;
};
model_energy model_interval(const power_model& m, const cpu_times& d, double seconds);

}  // namespace magnet::power
