// What a guest may see of the host's event records: the one table, per event
// type of proto/'s MAGNET_EVENTS catalogue, of whether a guest may subscribe
// to it and which bytes of a record reach it (docs/guest.md, "What a guest
// may see"); and of its stats, per stat id, which a guest may receive.
//
// The table lists what is KEPT.  A guest's copy of a record is built in a
// zeroed buffer into which only the kept spans are copied, so a field that
// nobody declared (a new field, a newer minor's tail, a reserved field) is
// zero by construction, never by a rule someone had to remember.
//
// Used by the view server for sessions whose peer is a guest (the host
// daemon's vsock and virtio-serial sessions); the guest agent's sessions for
// local applications relay records that were already cleaned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "magnet/event.h"
#include "magnet/result.h"

namespace magnet::view {

// ------------------------------------------------------------- SipHash ---

// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed hash whose outputs
// tell nothing of its inputs to whoever does not hold the key.
struct siphash_key {
  uint64_t k0 = 0, k1 = 0;  // the key's bytes 0-7 and 8-15, little-endian
  bool operator==(const siphash_key&) const = default;
};
uint64_t siphash24(const siphash_key& k, const void* data, size_t n);
// A fresh key from getrandom(2).
result<siphash_key> random_siphash_key();

// ------------------------------------------------------------ the table ---

// What a guest gets in hdr.abstract_id.
enum class guest_id : uint8_t {
  zero,   // nothing: the type has no identity a guest may hold
  flow,   // kept: magnet_flow_id of the packet's own 5-tuple (proto/magnet/
          // flow.h), an unkeyed hash of addresses the guest already has
  rekey,  // siphash24 of the 8 id bytes under the session's key (0 stays 0:
          // "no identity"): equal ids stay equal within a session, and two
          // ids reveal nothing of the kernel pointer or host tid behind them
};

// Bytes of a payload (offsets from the payload's first byte).
struct guest_span {
  uint16_t off = 0, size = 0;
};

// A side of a record that names a host task: its spans are kept only when
// the u32 host tid at tid_off is one of the VM's own vCPU threads.
struct guest_side {
  uint16_t tid_off = 0;
  std::span<const guest_span> keep;
};

struct guest_row {
  uint16_t type = 0;
  uint16_t payload_kind = 0;
  // Why a guest may not subscribe to it; nullptr: guest-safe.
  const char* refused = nullptr;
  // The payload this table knows (sizeof its struct): shorter records are
  // not delivered, longer ones are cut to it.
  uint16_t payload = 0;
  guest_id id = guest_id::zero;
  std::span<const guest_span> keep;  // always kept
  // Not empty: the record is delivered only if one side's tid is a vCPU
  // thread of the VM, and each such side's spans are kept.
  std::span<const guest_side> sides;
};

// Header fields every guest record keeps (hdr.len is rewritten to the
// delivered length; abstract_id follows the row's rule; tgid, tid, cpu and
// vm_id are zero: nothing in a frame names a VM or a host task or CPU).
std::span<const guest_span> guest_header_keep();

std::span<const guest_row> guest_schema();
const guest_row* guest_row_of(uint16_t type);  // nullptr: not in the catalogue
bool guest_safe_type(uint16_t type);
// Refusal text for a subscription naming @types, empty if every one is
// guest-safe: "event type proc.fork is not guest-safe" / "proc.fork,
// net.l4.send are not guest-safe" (unknown ids as 0x1234).
std::string not_guest_safe(std::span<const uint16_t> types);

// ------------------------------------------------------------ its stats ---

// What a guest may see of the host's stats (proto/magnet/view.h's ids below
// 0x0800; the agent computes the others in the guest): one row per stat id,
// with why the value is the VM's own, or why a guest may not have it.  The
// view server sends a guest peer only the stats whose row says it may, so a
// stat without a row never reaches a guest; and a host stat added to
// MAGNET_VIEW_STATS without a row does not build (docs/guest.md, "What a
// guest may see").
struct guest_stat_row {
  uint16_t id = 0;
  const char* safe = nullptr;     // why a guest may see it; nullptr: refused
  const char* refused = nullptr;  // why it may not
};

std::span<const guest_stat_row> guest_stat_schema();
bool guest_safe_stat(uint16_t id);

// ------------------------------------------------------- the guest path ---

struct guest_context {
  // The host tids of the VM's vCPU threads (null or empty: none known, so
  // no sched.* record is delivered).
  const std::set<uint32_t>* vcpu_tids = nullptr;
  siphash_key key;  // the session's
};

// Appends the guest's copy of record @rec (@len bytes, magnet_hdr + payload)
// to @out.  False, with @out unchanged: not delivered (a refused or unknown
// type, a record shorter than its known payload, a sched.* record of no
// vCPU of the VM).
bool to_guest(const uint8_t* rec, size_t len, const guest_context& ctx, std::vector<uint8_t>& out);

}  // namespace magnet::view
