// The fleet as `magnet place` sees it (place/fleet.h), from two sources:
// Prometheus (which hosts have a daemon, each VM's demand over a window,
// the measured watts) and libvirt (which VM runs where, its memory and
// vCPUs, whether it can move; each host's CPUs and memory).  Pure: the
// queries' results and libvirt's facts come in as data, so that a fleet
// can be assembled from canned inputs (docs/placement.md, "The fleet").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "magnet/fleet/prometheus.h"
#include "magnet/place/fleet.h"
#include "magnet/power/model.h"
#include "magnet/result.h"

namespace magnet::fleet {

// What libvirt says of one active domain.
struct domain_facts {
  std::string name, uuid;
  double vcpus = 0;
  double mem_bytes = 0;     // its current allocation
  bool persistent = false;  // defined: its configuration outlives it
  bool running = false;     // running, not paused or shutting down
};

// What libvirt says of one host (virNodeGetInfo, its active domains).
struct host_facts {
  double cpus = 0;
  double mem_bytes = 0;
  std::vector<domain_facts> domains;
};

// One host as the command line names it, with libvirt's facts.
struct host_input {
  std::string name;      // --host NAME=URI
  std::string uri;
  std::string instance;  // its Prometheus instance label: NAME, or --host-label NAME=INSTANCE
  double link_bps = 0;   // its VMs' link (--link-bps); 0: unknown, not checked
  power::power_model model;
  host_facts facts;
};

// The quantile a VM's peak CPU is of its CPU rate over the window
// (place::plan_options::peak_quantile).
inline constexpr double kPeakQuantile = 0.95;

// The PromQL of each input.  Means are over @window_ms; a VM's peak CPU is
// the kPeakQuantile quantile, over the window, of its rate over a tenth of it.
struct fleet_queries {
  std::string daemons;     // magnet_libvirt_up: the instances that have a daemon
  std::string vm_info;     // magnet_vm_info: the VMs each daemon follows
  std::string host_watts;  // the hosts' mean magnet_host_power_watts
  std::string vm_watts;    // each VM's mean magnet_vm_power_watts, by uuid
  std::string cpu_mean;    // each VM's vCPU run time per second (cores), by uuid
  std::string cpu_peak;
  std::string net_bps;     // each VM's tap traffic, both directions, bit/s, by uuid
};
fleet_queries make_queries(uint64_t window_ms);

// Their result vectors.
struct prom_inputs {
  std::vector<sample> daemons, vm_info, host_watts, vm_watts, cpu_mean, cpu_peak, net_bps;
};
// Runs every query of @qs through @q; the first error stops it.
result<prom_inputs> gather(const query_fn& q, const fleet_queries& qs);

struct assembled {
  place::fleet fleet;
  // What an input lacked and what was taken instead (a host without a power
  // source, a VM without vCPU series), and why a VM may not move.
  std::vector<std::string> notes;
};

// The fleet of @hosts, in their order, their VMs in name order.  Errors: a
// host whose instance has no daemon in Prometheus (named, with the
// instances there are), two hosts of one name or one instance, a VM running
// in libvirt that Prometheus has no magnet_vm_info of on that host (named,
// with its host).  A VM whose demand series are missing is not an error: its
// demand is taken as 0 and a note says so.
result<assembled> assemble_fleet(const std::vector<host_input>& hosts, const prom_inputs& in);

}  // namespace magnet::fleet
