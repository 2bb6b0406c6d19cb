// A packet's journey out of the VM, from both sides: the guest's own
// records (socket send, device transmit, from the agent's probes) and the
// host's (vmnet.queue.tx: the packet at the VM's tap and at the wire, sent
// to the VM as event records).  Packets are matched by flow id (the same
// function of the 5-tuple on both sides) and IPv4 id; the host's times are
// brought to the guest's clock with the offset the agent measures.
//
// Segments: guest socket -> guest device (UDP: from the start of the send
// call whose datagram it is, the call that was running when the device
// transmitted it; only where the call is timed, magnet_sock.call_ns), guest
// device -> host tap (crosses the clocks: its error is the offset's), host
// tap -> host wire (the host's own queueing).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "magnet/filters/sketch.h"
#include "magnet/view_codec.h"

namespace magnet::guest {

class journey {
 public:
  // host clock = guest clock + offset
  void set_offset(int64_t offset_ns) { offset_ = offset_ns; have_offset_ = true; }
  void guest_records(std::span<const uint8_t> recs);
  void host_records(std::span<const uint8_t> recs);
  // Closes a slot (every tick) and appends the journey stats over the last
  // second.
  void tick(uint64_t slot_ns, std::vector<view::stat_value>& out);
  uint64_t matched() const { return matched_total_; }

 private:
  struct key {
    uint64_t flow;
    uint16_t ip_id;
    bool operator==(const key&) const = default;
  };
  struct key_hash {
    size_t operator()(const key& k) const { return k.flow * 31 + k.ip_id; }
  };
  struct sent {
    uint64_t dev_ns;
    uint64_t sock_ns;  // 0: not matched to a send
  };
  struct slot {
    uint64_t ns = 0, matched = 0;
    filters::quantile_sketch sock_dev{0.01}, dev_tap{0.01}, tap_wire{0.01};
  };
  static constexpr size_t kMaxPending = 16384;
  static constexpr uint64_t kMaxAgeNs = 2'000'000'000;

  void expire(uint64_t now);

  std::unordered_map<key, sent, key_hash> pending_;  // guest device transmits
  std::deque<std::pair<uint64_t, key>> order_;       // (dev_ns, key), oldest first
  // UDP flow -> its transmits (dev_ns, key) not yet placed in a send call
  std::unordered_map<uint64_t, std::deque<std::pair<uint64_t, key>>> unsent_;
  std::deque<slot> slots_;
  slot open_;
  int64_t offset_ = 0;
  bool have_offset_ = false;
  uint64_t last_guest_ns_ = 0, matched_total_ = 0;
};

}  // namespace magnet::guest
