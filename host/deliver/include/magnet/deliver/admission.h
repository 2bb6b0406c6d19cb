// Whether a vsock connection may become a session of its VM, decided apart
// from sockets (the hub's on_accept asks; tests ask without AF_VSOCK).
//
// In the order the hub asks:
//   1. screen(), at accept, from what the hub knows: the peer CID is a
//      guest's (not 0-2 or "any") and exactly one running VM's; its source
//      port is below 1024, which only the guest's root can bind (unless
//      any_port); and that VM is within its accept rate.  The port comes
//      before the rate so that an unprivileged guest user's attempts do not
//      use up the tokens of its VM's root (the agent).
//   2. confirm(), with the registry's fresh answer on the CID (a CID may
//      have moved to another VM since the hub's last update).
//   3. place(), among the VM's open connections: under the cap it is
//      admitted; at the cap it replaces the oldest that has not subscribed,
//      and is refused when all have.
// A refusal names its reason with a stable name (the log id
// deliver.refused.<name>, a counter per VM) and a text for the peer's
// ERROR frame that names no other VM.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "magnet/result.h"
#include "magnet/view_server.h"

namespace magnet::host {

struct vsock_peer {
  uint32_t cid = 0;
  uint32_t port = 0;  // the peer's source port
};

enum class refusal : uint8_t {
  none,
  not_guest,    // CID 0, 1, 2 or VMADDR_CID_ANY
  unknown_cid,  // no running VM has it
  shared_cid,   // several VMs claim it
  port,         // source port 1024 or above, and no --vsock-any-port
  rate,         // the VM's accepts per second
  busy,         // too many CID checks in flight
  changed,      // its VM stopped or restarted while the CID was checked
  unconfirmed,  // the registry could not confirm who has the CID
  moved,        // the registry says the CID is another VM's, or no one's, now
  qemu_gone,    // the VM's QEMU process is gone
  full,         // at the cap, and every connection of the VM subscribed
};
inline constexpr size_t kRefusals = 12;
std::string_view refusal_name(refusal r);

// The first port only root may bind (Linux: LAST_RESERVED_PORT + 1 in
// net/vmw_vsock/af_vsock.c, as for IP).
inline constexpr uint32_t kFirstUnprivilegedPort = 1024;

struct admission_limits {
  bool any_port = false;  // --vsock-any-port
  // Per VM.  The agent connects once and, when the host goes away,
  // retries with a backoff from 100 ms to 1 s: 10/s is ten times its
  // fastest steady retry, and a burst of 20 lets it (and a few tools of
  // its root) in after a daemon restart at once.  Beyond that a VM costs
  // the daemon an accept and one non-blocking write per attempt.
  double accepts_per_s = 10, accept_burst = 20;
  unsigned max_conns_per_vm = 4;
};

struct verdict {
  refusal why = refusal::none;
  uint32_t vm = 0;   // the VM the CID maps to (0: none)
  std::string text;  // why, for the log and the peer's ERROR frame
  bool admitted() const { return why == refusal::none; }
};

struct known_vm {
  uint32_t vm_id = 0;
  uint32_t cid = 0;  // 0: no vsock
};

// One open connection of a VM, as place() sees it.
struct open_conn {
  bool subscribed = false;
  view::steady::time_point opened{};
};

struct placement {
  refusal why = refusal::none;
  std::optional<size_t> evict;  // index in the list given to place()
  std::string text;
};

// Per VM (0: a CID of no VM), since the daemon started.
struct accept_counts {
  uint64_t accepted = 0, replaced = 0;
  std::array<uint64_t, kRefusals> refused{};
  uint64_t refused_total() const;
};

class vsock_admission {
 public:
  explicit vsock_admission(admission_limits l) : lim_(l) {}

  verdict screen(vsock_peer p, std::span<const known_vm> vms, view::steady::time_point now);
  // @owner: the VM that has @p's CID now (0: none), or why that is unknown.
  static verdict confirm(vsock_peer p, uint32_t vm, const result<uint32_t>& owner);
  placement place(std::span<const open_conn> open) const;

  // Counters (the hub counts each outcome once).
  void count(uint32_t vm, refusal r);
  void count_accepted(uint32_t vm, bool replaced);
  const std::map<uint32_t, accept_counts>& counts() const { return counts_; }
  // Rate state only for the VMs that still run.
  void keep_only(const std::set<uint32_t>& vms);
  const admission_limits& limits() const { return lim_; }

 private:
  admission_limits lim_;
  std::map<uint32_t, view::token_bucket> buckets_;
  std::map<uint32_t, accept_counts> counts_;
};

}  // namespace magnet::host
