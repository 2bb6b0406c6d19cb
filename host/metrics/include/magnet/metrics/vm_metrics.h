// Per-VM figures over sliding windows: what `magnet top` shows and what is
// delivered into each VM (the stats of proto/magnet/view.h).
//
// Two inputs: every daemon tick (100 ms) the cumulative counters the
// kernel keeps per VM (in-kernel aggregation, KVM exit and host queueing
// statistics, per-vCPU scheduling totals, lost records), and between ticks
// the VM's streamed records that carry what counters cannot: each packet's
// host queueing delay and the device it left through (vmnet.queue), drops
// and where they happened (net.drop), block request latencies.  Windows are
// whole ticks: rates over the last second, link use over the last half
// second (the available-bandwidth model must follow changes quickly).
//
// Pure computation: the daemon reads the kernel; tests feed both inputs.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "magnet/capture/latency.h"
#include "magnet/metrics/link_model.h"
#include "magnet/metrics/sample_weights.h"
#include "magnet/filters/sketch.h"
#include "magnet/view_codec.h"

namespace magnet::host {

// A shared host link: the bottleneck that VMs' traffic to the wire crosses.
struct link_info {
  std::string name;
  uint32_t netns_ino = 0;     // 0: the ifindex in any namespace
  uint32_t ifindex = 0;
  double capacity_bps = 0;    // at layer 2 (what tc counts); 0: unknown
  double queue_limit_s = 0;   // its queue at capacity, in seconds; 0: unknown
};

// One VM's cumulative counters at a tick.
struct vm_counters {
  uint64_t tap_tx_bytes = 0, tap_tx_pkts = 0;  // guest -> host (tap receive)
  uint64_t tap_rx_bytes = 0, tap_rx_pkts = 0;  // host -> guest (tap transmit)
  uint64_t blk_bytes = 0, blk_reqs = 0;
  uint64_t exits = 0;
  uint64_t lost = 0;                        // its records lost in the kernel
  std::map<uint32_t, lat_stat> reasons;     // MAGNET_VIEW_REASON_INDEX -> exit handling
  std::array<lat_stat, 2> queue{};          // host queueing: [0] tap -> wire, [1] wire -> tap
  std::map<int, std::array<uint64_t, 3>> vcpu_ns;  // vCPU -> run, wait, halt
};

class vm_metrics {
 public:
  static constexpr size_t kRateSlots = 10;  // 1 s at the daemon's 100 ms tick
  static constexpr size_t kLinkSlots = 5;   // 0.5 s
  static constexpr size_t kHistory = 20;

  void set_links(std::vector<link_info> links) { links_ = std::move(links); }
  const std::vector<link_info>& links() const { return links_; }
  void set_allowance(uint32_t vm, double tx_bps, double rx_bps);
  // The kernel's sampling of the stream (magnet host --sample): what a
  // sampled record counts for in drops and link use.
  void set_sample_weights(sample_weights w) { weights_ = std::move(w); }

  // Streamed records (back to back); only records of a VM are used.
  void feed(std::span<const uint8_t> records);
  // A tick: the counters of every VM the daemon knows; closes the slot.
  // VMs absent from @counters are forgotten.
  void sample(uint64_t now_ns, const std::map<uint32_t, vm_counters>& counters);

  // The VM's stats as of the last sample (empty for an unknown VM).
  const std::vector<view::stat_value>& stats(uint32_t vm) const;
  uint64_t sampled_at() const { return now_; }
  // One value of a VM's stats (0 when absent or invalid).
  double value(uint32_t vm, uint16_t id, uint32_t index = 0) const;

 private:
  struct link_slot {
    uint64_t elastic_bytes = 0, inelastic_bytes = 0, drops = 0;
    filters::quantile_sketch delay{0.01};
  };
  struct slot {
    uint64_t ns = 0;  // the slot's length
    std::array<filters::quantile_sketch, 2> queue{filters::quantile_sketch{0.01},
                                                  filters::quantile_sketch{0.01}};
    filters::quantile_sketch blk_lat{0.01};
    std::array<uint64_t, 3> drops{};  // tap, qdisc, elsewhere on the host path
    std::map<size_t, link_slot> links;  // index into links_
  };
  struct vm_state {
    // (tick, counters), the last kRateSlots + 1, oldest first
    std::deque<std::pair<uint64_t, vm_counters>> cum;
    std::deque<slot> slots;                             // closed slots, oldest first
    slot open;
    uint64_t lost_base = 0;
    bool have_base = false;
    double allow_tx = 0, allow_rx = 0;
    std::vector<view::stat_value> stats;
  };

  // One link's use this tick, for the model: every VM whose last
  // kLinkSlots slots hold the link (ascending id), and the shares built
  // from them once per tick, so that each VM's availability costs O(log N)
  // rather than a model over every other VM.
  struct link_user {
    uint32_t vm = 0;
    std::vector<link_usage> slots;  // its last min(kLinkSlots, its slots) slots, newest last
    link_usage window;              // their mean
  };
  struct link_state {
    std::vector<link_user> users;
    link_share window;
    // by_slots[n][k]: slot k of the users with n such slots (slots of VMs
    // with different histories do not line up, so only equals are compared).
    std::array<std::vector<link_share>, kLinkSlots + 1> by_slots;
  };
  using link_use = std::vector<link_state>;  // by index into links_

  int link_of_device(uint32_t netns, uint32_t ifindex) const;
  link_use link_uses() const;
  // The VM's stats of this tick into s.stats.
  void compute(uint32_t id, vm_state& s, const link_use& use);
  void emit_link(uint32_t id, const vm_state& s, const link_use& use, size_t nslots, bool have,
                 double secs, std::vector<view::stat_value>& out) const;

  std::vector<link_info> links_;
  std::map<uint32_t, vm_state> vms_;
  std::map<uint32_t, std::pair<double, double>> allowance_;
  sample_weights weights_;
  uint64_t now_ = 0;
};

}  // namespace magnet::host
