#include "magnet/guest_schema.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "magnet/events.h"
#include "magnet/view.h"

namespace magnet::view {

// ------------------------------------------------------------- SipHash ---

namespace {

constexpr uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

uint64_t load_le64(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

struct sip_state {
  uint64_t v0, v1, v2, v3;

  void rounds(int n) {
    while (n--) {
      v0 += v1;
      v1 = rotl(v1, 13) ^ v0;
      v0 = rotl(v0, 32);
      v2 += v3;
      v3 = rotl(v3, 16) ^ v2;
      v0 += v3;
      v3 = rotl(v3, 21) ^ v0;
      v2 += v1;
      v1 = rotl(v1, 17) ^ v2;
      v2 = rotl(v2, 32);
    }
  }
  void absorb(uint64_t m) {
    v3 ^= m;
    rounds(2);
    v0 ^= m;
  }
};

}  // namespace

uint64_t siphash24(const siphash_key& k, const void* data, size_t n) {
  // The constants spell "somepseudorandomlygeneratedbytes".
  sip_state s{k.k0 ^ 0x736f6d6570736575ull, k.k1 ^ 0x646f72616e646f6dull,
              k.k0 ^ 0x6c7967656e657261ull, k.k1 ^ 0x7465646279746573ull};
  const auto* p = static_cast<const uint8_t*>(data);
  const size_t whole = n - n % 8;
  for (size_t i = 0; i < whole; i += 8) s.absorb(load_le64(p + i, 8));
  // The last word: the remaining bytes, and the length's low byte on top.
  s.absorb(load_le64(p + whole, n % 8) | (static_cast<uint64_t>(n & 0xff) << 56));
  s.v2 ^= 0xff;
  s.rounds(4);
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

result<siphash_key> random_siphash_key() {
  uint8_t b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return error::from_errno("getrandom");
    got += static_cast<size_t>(n);
  }
  return siphash_key{load_le64(b, 8), load_le64(b + 8, 8)};
}

// ------------------------------------------------------------ the table ---

namespace {

#define F(s, f) \
  guest_span { static_cast<uint16_t>(offsetof(s, f)), static_cast<uint16_t>(sizeof(s::f)) }

constexpr guest_span kHeader[] = {F(magnet_hdr, ts_ns), F(magnet_hdr, size), F(magnet_hdr, type),
                                  F(magnet_hdr, flags)};

constexpr guest_span kLost[] = {F(magnet_lost, count), F(magnet_lost, first_ts_ns),
                                F(magnet_lost, last_ts_ns), F(magnet_lost, probe_type),
                                F(magnet_lost, reason)};

// The VM's tap: the guest's own packets.  ifindex is the host's.
constexpr guest_span kPkt[] = {
    F(magnet_pkt, skb_len),  F(magnet_pkt, tcp_seq),  F(magnet_pkt, l3proto),
    F(magnet_pkt, ip_id),    F(magnet_pkt, frag_off), F(magnet_pkt, tot_len),
    F(magnet_pkt, sport),    F(magnet_pkt, dport),    F(magnet_pkt, ip_version),
    F(magnet_pkt, protocol), F(magnet_pkt, tos),      F(magnet_pkt, ttl),
    F(magnet_pkt, tcp_flags), F(magnet_pkt, saddr),   F(magnet_pkt, daddr)};

// location is a kernel text address (it would undo KASLR).
constexpr guest_span kDrop[] = {F(magnet_net_drop, reason), F(magnet_net_drop, protocol)};

// A vCPU's side keeps QEMU's name of its thread ("CPU 0/KVM") and its
// priority; the other side (any host task) nothing.  The tids are host tids.
constexpr guest_span kSwitchPrev[] = {F(magnet_sched_switch, prev_state),
                                      F(magnet_sched_switch, prev_prio),
                                      F(magnet_sched_switch, prev_comm)};
constexpr guest_span kSwitchNext[] = {F(magnet_sched_switch, next_prio),
                                      F(magnet_sched_switch, next_comm)};
constexpr guest_side kSwitchSides[] = {
    {static_cast<uint16_t>(offsetof(magnet_sched_switch, prev_tid)), kSwitchPrev},
    {static_cast<uint16_t>(offsetof(magnet_sched_switch, next_tid)), kSwitchNext}};
// target_cpu is a host CPU.
constexpr guest_span kWakeup[] = {F(magnet_sched_wakeup, prio), F(magnet_sched_wakeup, comm)};
constexpr guest_side kWakeupSides[] = {
    {static_cast<uint16_t>(offsetof(magnet_sched_wakeup, tid)), kWakeup}};

// dev and sector locate the host's disks.
constexpr guest_span kBlk[] = {F(magnet_blk, nr_bytes), F(magnet_blk, latency_ns),
                               F(magnet_blk, rwbs), F(magnet_blk, error)};

// The VM's own vCPUs: all but the reserved fields.
constexpr guest_span kKvmExit[] = {F(magnet_kvm_exit, vcpu_id),   F(magnet_kvm_exit, exit_reason),
                                   F(magnet_kvm_exit, isa),       F(magnet_kvm_exit, guest_rip),
                                   F(magnet_kvm_exit, info1),     F(magnet_kvm_exit, info2)};
constexpr guest_span kKvmEntry[] = {F(magnet_kvm_entry, vcpu_id),     F(magnet_kvm_entry, guest_rip),
                                    F(magnet_kvm_entry, exit_ns),     F(magnet_kvm_entry, exit_reason),
                                    F(magnet_kvm_entry, isa),         F(magnet_kvm_entry, flags)};
constexpr guest_span kKvmUser[] = {F(magnet_kvm_userspace_exit, vcpu_id),
                                   F(magnet_kvm_userspace_exit, reason),
                                   F(magnet_kvm_userspace_exit, error)};
constexpr guest_span kKvmWakeup[] = {F(magnet_kvm_wakeup, halt_ns), F(magnet_kvm_wakeup, vcpu_id),
                                     F(magnet_kvm_wakeup, waited), F(magnet_kvm_wakeup, valid)};
constexpr guest_span kKvmPoll[] = {F(magnet_kvm_halt_poll, vcpu_id), F(magnet_kvm_halt_poll, new_ns),
                                   F(magnet_kvm_halt_poll, old_ns), F(magnet_kvm_halt_poll, grow)};

// The ifindexes are the host's devices.
constexpr guest_span kQueue[] = {F(magnet_vmnet_queue, delay_ns), F(magnet_vmnet_queue, ip_id)};
constexpr guest_span kVhost[] = {F(magnet_vmnet_vhost, duration_ns)};

#undef F

// Sides per row that to_guest() can follow.
constexpr size_t kMaxSides = 2;

constexpr const char* kHostStack =
    "a record of the host's network stack (the VMM's own sockets), not of the VM";

template <class P>
constexpr guest_row row(uint16_t type, uint16_t kind, guest_id id, std::span<const guest_span> keep,
                        std::span<const guest_side> sides = {}) {
  return {type, kind, nullptr, static_cast<uint16_t>(sizeof(P)), id, keep, sides};
}

template <class P>
constexpr guest_row refused(uint16_t type, uint16_t kind, const char* why) {
  return {type, kind, why, static_cast<uint16_t>(sizeof(P)), guest_id::zero, {}, {}};
}

using gi = guest_id;

// One row per event type of MAGNET_EVENTS (checked below).
constexpr guest_row kRows[] = {
    refused<magnet_sysinfo>(MAGNET_EV_SYSINFO, MAGNET_PL_SYSINFO,
                            "the host's description (hostname, kernel, boot id)"),
    row<magnet_lost>(MAGNET_EV_LOST, MAGNET_PL_LOST, gi::zero, kLost),
    refused<magnet_event_desc>(MAGNET_EV_EVENT_DESC, MAGNET_PL_EVENT_DESC,
                               "a trace's self-description, not a record of the VM"),
    refused<magnet_sock>(MAGNET_EV_NET_SOCK_SEND, MAGNET_PL_SOCK, kHostStack),
    refused<magnet_sock>(MAGNET_EV_NET_SOCK_RECV, MAGNET_PL_SOCK, kHostStack),
    refused<magnet_pkt>(MAGNET_EV_NET_L4_SEND, MAGNET_PL_PKT, kHostStack),
    refused<magnet_pkt>(MAGNET_EV_NET_L4_RECV, MAGNET_PL_PKT, kHostStack),
    refused<magnet_pkt>(MAGNET_EV_NET_IP_SEND, MAGNET_PL_PKT, kHostStack),
    refused<magnet_pkt>(MAGNET_EV_NET_IP_RECV, MAGNET_PL_PKT, kHostStack),
    row<magnet_pkt>(MAGNET_EV_NET_DEV_XMIT, MAGNET_PL_PKT, gi::flow, kPkt),
    row<magnet_pkt>(MAGNET_EV_NET_DEV_RECV, MAGNET_PL_PKT, gi::flow, kPkt),
    refused<magnet_tcp_state>(MAGNET_EV_NET_TCP_STATE, MAGNET_PL_TCP_STATE, kHostStack),
    row<magnet_net_drop>(MAGNET_EV_NET_DROP, MAGNET_PL_NET_DROP, gi::rekey, kDrop),
    row<magnet_sched_switch>(MAGNET_EV_SCHED_SWITCH, MAGNET_PL_SCHED_SWITCH, gi::zero, {},
                             kSwitchSides),
    row<magnet_sched_wakeup>(MAGNET_EV_SCHED_WAKEUP, MAGNET_PL_SCHED_WAKEUP, gi::zero, {},
                             kWakeupSides),
    refused<magnet_proc_fork>(MAGNET_EV_PROC_FORK, MAGNET_PL_PROC_FORK,
                              "host processes (names and tids of the VMM's tasks)"),
    refused<magnet_proc_exit>(MAGNET_EV_PROC_EXIT, MAGNET_PL_PROC_EXIT,
                              "host processes (names and exit codes of the VMM's tasks)"),
    row<magnet_blk>(MAGNET_EV_BLK_ISSUE, MAGNET_PL_BLK, gi::rekey, kBlk),
    row<magnet_blk>(MAGNET_EV_BLK_COMPLETE, MAGNET_PL_BLK, gi::rekey, kBlk),
    // abstract_id: the host QEMU's tgid << 32 | vCPU.
    row<magnet_kvm_exit>(MAGNET_EV_KVM_EXIT, MAGNET_PL_KVM_EXIT, gi::rekey, kKvmExit),
    row<magnet_kvm_entry>(MAGNET_EV_KVM_ENTRY, MAGNET_PL_KVM_ENTRY, gi::rekey, kKvmEntry),
    row<magnet_kvm_userspace_exit>(MAGNET_EV_KVM_USERSPACE_EXIT, MAGNET_PL_KVM_USERSPACE_EXIT,
                                   gi::rekey, kKvmUser),
    row<magnet_kvm_wakeup>(MAGNET_EV_KVM_WAKEUP, MAGNET_PL_KVM_WAKEUP, gi::rekey, kKvmWakeup),
    row<magnet_kvm_halt_poll>(MAGNET_EV_KVM_HALT_POLL, MAGNET_PL_KVM_HALT_POLL, gi::rekey, kKvmPoll),
    row<magnet_vmnet_queue>(MAGNET_EV_VMNET_QUEUE_TX, MAGNET_PL_VMNET_QUEUE, gi::flow, kQueue),
    row<magnet_vmnet_queue>(MAGNET_EV_VMNET_QUEUE_RX, MAGNET_PL_VMNET_QUEUE, gi::flow, kQueue),
    // abstract_id: the host tid of the VM's vhost worker.
    row<magnet_vmnet_vhost>(MAGNET_EV_VMNET_VHOST_TX, MAGNET_PL_VMNET_VHOST, gi::rekey, kVhost),
    row<magnet_vmnet_vhost>(MAGNET_EV_VMNET_VHOST_RX, MAGNET_PL_VMNET_VHOST, gi::rekey, kVhost),
    // A host application's marks are that application's, not any guest's.
    refused<magnet_app_add>(MAGNET_EV_APP_ADD, MAGNET_PL_APP_ADD,
                            "host applications' own marks (app.add of a host binary)"),
    // The schema keeps spans of a fixed payload; these carry raw frames
    // of any device (a packet capture for magnet record), not a VM's view.
    refused<magnet_pkt_snap>(MAGNET_EV_NET_PKT_XMIT, MAGNET_PL_PKT_SNAP,
                             "raw packet bytes (magnet record --snap), not a per-VM record"),
    refused<magnet_pkt_snap>(MAGNET_EV_NET_PKT_RECV, MAGNET_PL_PKT_SNAP,
                             "raw packet bytes (magnet record --snap), not a per-VM record"),
};

// The one row of @table whose @key is @k; nullptr when there is none, or
// two (as bad as none: which would hold?).
template <typename Row, size_t N, typename Key>
constexpr const Row* unique_row(const Row (&table)[N], Key Row::*key, Key k) {
  const Row* found = nullptr;
  for (const auto& r : table)
    if (r.*key == k) {
      if (found) return nullptr;
      found = &r;
    }
  return found;
}

constexpr const guest_row* find_row(uint16_t type) { return unique_row(kRows, &guest_row::type, type); }

constexpr bool in_catalogue(uint16_t type) {
#define MAGNET_X_IS(sym, id, name, pl) type == (id) ||
  return MAGNET_EVENTS(MAGNET_X_IS) false;
#undef MAGNET_X_IS
}

constexpr bool spans_fit(std::span<const guest_span> keep, size_t size) {
  for (const auto& s : keep)
    if (s.size == 0 || s.off + s.size > size) return false;
  return true;
}

// Spans inside the payload, tids inside it and never kept, refused types
// keep nothing, the known payload keeps records aligned.
constexpr bool row_sane(const guest_row& r) {
  if (!in_catalogue(r.type) || r.payload % MAGNET_RECORD_ALIGN) return false;
  if (r.refused) return r.keep.empty() && r.sides.empty();
  if (!spans_fit(r.keep, r.payload) || r.sides.size() > kMaxSides) return false;
  for (const auto& side : r.sides) {
    if (side.tid_off + 4u > r.payload || !spans_fit(side.keep, r.payload)) return false;
    for (const auto& other : r.sides)
      for (const auto& s : other.keep)
        if (s.off < side.tid_off + 4u && side.tid_off < s.off + s.size) return false;
    for (const auto& s : r.keep)
      if (s.off < side.tid_off + 4u && side.tid_off < s.off + s.size) return false;
  }
  return true;
}

constexpr bool rows_sane() {
  for (const auto& r : kRows)
    if (!row_sane(r)) return false;
  return true;
}
static_assert(rows_sane(), "a guest schema row is out of its payload, keeps a host tid, or names "
                           "no type of MAGNET_EVENTS");
static_assert(spans_fit(kHeader, sizeof(magnet_hdr)));

// A type added to MAGNET_EVENTS without a row here does not build: decide
// what a guest may see of it first (docs/guest.md, "What a guest may see").
#define MAGNET_X_ROW(sym, id, name, pl)                                                     \
  static_assert(find_row(id) != nullptr,                                                    \
                "event type " name " has no (or two) rows in the guest schema");            \
  static_assert(!find_row(id) || find_row(id)->payload_kind == (pl),                        \
                "the guest schema row of " name " is for another payload kind");
MAGNET_EVENTS(MAGNET_X_ROW)
#undef MAGNET_X_ROW

// ------------------------------------------------------------ its stats ---

// Why each host stat is the VM's own.  What several say of the other VMs is
// an aggregate (how busy the host's CPUs, link or queues are), never one
// VM's: what a guest would find out anyway by running, sending and timing.
constexpr const char* kOwnPackets = "its own packets at its own taps";
constexpr const char* kOwnDrops =
    "its own packets, counted by where they were dropped (no device, no kernel address)";
constexpr const char* kOwnQueueing =
    "its own packets' time on the host path: others' traffic shows only as the delay its own "
    "packets met, which its round trips already show";
constexpr const char* kLink =
    "the shared link's capacity and its own use and share of it: the other VMs' traffic as one "
    "aggregate, never one VM's, what its own TCP flows find out by probing (docs/guest.md)";
constexpr const char* kOwnVcpus =
    "its own vCPU threads' time; wait is the host's side of the steal time its kernel reports";
constexpr const char* kOwnExits = "its own vCPUs' exits, which its own kernel caused";
constexpr const char* kOwnBlk = "its own block requests, without the host's device or sector";
// The host's total power is not a stat a guest may have: with its own power
// known, it would be the other VMs' load.  Its own share says less, but not
// nothing (docs/placement.md, "Into each guest"): with RAPL, a share is the
// host's power per CPU second times its own CPU time, so its power over its
// vcpu.run_sum is the host's power per CPU, an aggregate of every tenant's
// load as vcpu.wait is; with a curved model, that ratio follows the host's
// utilisation; with a straight one, it is a constant.
constexpr const char* kOwnPower =
    "its own share of the host's power, by its own CPU time: it tells the host's power per CPU "
    "(RAPL) or utilisation (a curved model), an aggregate of all the host's load as vcpu.wait "
    "is, never one VM's; the host's total is not sent";

constexpr guest_stat_row safe(uint16_t id, const char* why) { return {id, why, nullptr}; }

// One row per host stat of MAGNET_VIEW_STATS (checked below).
constexpr guest_stat_row kStatRows[] = {
    safe(MAGNET_STAT_TAP_TX_BPS, kOwnPackets),
    safe(MAGNET_STAT_TAP_RX_BPS, kOwnPackets),
    safe(MAGNET_STAT_TAP_TX_PPS, kOwnPackets),
    safe(MAGNET_STAT_TAP_RX_PPS, kOwnPackets),
    safe(MAGNET_STAT_DROPS_TAP, kOwnDrops),
    safe(MAGNET_STAT_DROPS_QDISC, kOwnDrops),
    safe(MAGNET_STAT_DROPS_HOST, kOwnDrops),
    safe(MAGNET_STAT_QUEUE_TX_MEAN, kOwnQueueing),
    safe(MAGNET_STAT_QUEUE_TX_P50, kOwnQueueing),
    safe(MAGNET_STAT_QUEUE_TX_P99, kOwnQueueing),
    safe(MAGNET_STAT_QUEUE_TX_PPS, kOwnQueueing),
    safe(MAGNET_STAT_QUEUE_RX_MEAN, kOwnQueueing),
    safe(MAGNET_STAT_QUEUE_RX_P50, kOwnQueueing),
    safe(MAGNET_STAT_QUEUE_RX_P99, kOwnQueueing),
    safe(MAGNET_STAT_QUEUE_RX_PPS, kOwnQueueing),
    safe(MAGNET_STAT_LINK_CAPACITY, kLink),
    safe(MAGNET_STAT_LINK_USE, kLink),
    safe(MAGNET_STAT_LINK_AVAILABLE, kLink),
    safe(MAGNET_STAT_LINK_AVAILABLE_ERR, kLink),
    safe(MAGNET_STAT_LINK_QUEUE_P50, kLink),
    safe(MAGNET_STAT_LINK_QUEUE_P99, kLink),
    safe(MAGNET_STAT_LINK_DROPS, kLink),
    safe(MAGNET_STAT_ALLOWANCE_TX, "its own shaping limit"),
    safe(MAGNET_STAT_ALLOWANCE_RX, "its own shaping limit"),
    safe(MAGNET_STAT_VCPU_COUNT, "its own vCPUs, as its kernel counts them"),
    safe(MAGNET_STAT_VCPU_RUN, kOwnVcpus),
    safe(MAGNET_STAT_VCPU_WAIT, kOwnVcpus),
    safe(MAGNET_STAT_VCPU_HALT, kOwnVcpus),
    safe(MAGNET_STAT_VCPU_RUN_SUM, kOwnVcpus),
    safe(MAGNET_STAT_VCPU_WAIT_SUM, kOwnVcpus),
    safe(MAGNET_STAT_VCPU_HALT_SUM, kOwnVcpus),
    safe(MAGNET_STAT_KVM_EXITS, kOwnExits),
    safe(MAGNET_STAT_KVM_EXIT_TIME, kOwnExits),
    safe(MAGNET_STAT_KVM_REASON_EXITS, kOwnExits),
    safe(MAGNET_STAT_KVM_REASON_TIME, kOwnExits),
    safe(MAGNET_STAT_KVM_REASON_MEAN, kOwnExits),
    safe(MAGNET_STAT_BLK_BPS, kOwnBlk),
    safe(MAGNET_STAT_BLK_IOPS, kOwnBlk),
    safe(MAGNET_STAT_BLK_LAT_MEAN, kOwnBlk),
    safe(MAGNET_STAT_BLK_LAT_P99, kOwnBlk),
    safe(MAGNET_STAT_LOST_EVENTS, "its own records lost in the host kernel"),
    safe(MAGNET_STAT_LOST_DELIVERY, "its own connection's records dropped"),
    safe(MAGNET_STAT_HOST_MARKER, "a value an operator set for it"),
    safe(MAGNET_STAT_POWER_WATTS, kOwnPower),
    safe(MAGNET_STAT_ENERGY_JOULES, kOwnPower),
    safe(MAGNET_STAT_POWER_SOURCE,
         "whether the host's power is measured (RAPL) or modelled: a fact of the host's hardware, "
         "the same for every VM on it"),
    safe(MAGNET_STAT_POWER_MODEL_ERR,
         "power.watts times the model's stated error, a constant of the host's configuration: no "
         "more than power.watts"),
};

constexpr bool host_stat(uint16_t id) { return id < 0x0800; }

constexpr const guest_stat_row* find_stat_row(uint16_t id) {
  return unique_row(kStatRows, &guest_stat_row::id, id);
}

constexpr bool stat_in_catalogue(uint16_t id) {
#define MAGNET_X_IS(sym, id_, name, unit, desc) id == (id_) ||
  return MAGNET_VIEW_STATS(MAGNET_X_IS) false;
#undef MAGNET_X_IS
}

// Rows of host stats of the catalogue only, each with one reason.
constexpr bool stat_rows_sane() {
  for (const auto& r : kStatRows)
    if (!stat_in_catalogue(r.id) || !host_stat(r.id) || !r.safe == !r.refused) return false;
  return true;
}
static_assert(stat_rows_sane(), "a guest stat row names no host stat of MAGNET_VIEW_STATS, or "
                                "gives no reason or two");

// A host stat added to MAGNET_VIEW_STATS without a row here does not build:
// decide whether a guest may see it first (docs/guest.md).
#define MAGNET_X_STAT_ROW(sym, id, name, unit, desc)                          \
  static_assert(!host_stat(id) || find_stat_row(id) != nullptr,               \
                "stat " name " has no (or two) rows in the guest schema");
MAGNET_VIEW_STATS(MAGNET_X_STAT_ROW)
#undef MAGNET_X_STAT_ROW

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void copy_spans(uint8_t* to, const uint8_t* from, std::span<const guest_span> keep) {
  for (const auto& s : keep) std::memcpy(to + s.off, from + s.off, s.size);
}

}  // namespace

std::span<const guest_span> guest_header_keep() { return kHeader; }

std::span<const guest_row> guest_schema() { return kRows; }

const guest_row* guest_row_of(uint16_t type) { return find_row(type); }

bool guest_safe_type(uint16_t type) {
  const guest_row* r = find_row(type);
  return r && !r->refused;
}

std::span<const guest_stat_row> guest_stat_schema() { return kStatRows; }

bool guest_safe_stat(uint16_t id) {
  const guest_stat_row* r = find_stat_row(id);
  return r && r->safe;
}

std::string not_guest_safe(std::span<const uint16_t> types) {
  // The error text is bounded (MAGNET_VIEW_MAX_ERROR_TEXT): name what fits,
  // count the rest.
  constexpr size_t kRoom = 190;
  std::vector<uint16_t> bad;
  for (uint16_t t : types)
    if (!guest_safe_type(t) && std::find(bad.begin(), bad.end(), t) == bad.end()) bad.push_back(t);
  if (bad.empty()) return {};
  std::string names;
  size_t named = 0;
  for (uint16_t t : bad) {
    std::string n = event_name(t) + (find_event(t) ? "" : " (unknown)");
    if (named && names.size() + n.size() > kRoom) break;
    names += (named++ ? ", " : "") + n;
  }
  if (named < bad.size()) names += " and " + std::to_string(bad.size() - named) + " more";
  return bad.size() == 1 ? "event type " + names + " is not guest-safe"
                         : names + " are not guest-safe";
}

// ------------------------------------------------------- the guest path ---

bool to_guest(const uint8_t* rec, size_t len, const guest_context& ctx, std::vector<uint8_t>& out) {
  constexpr size_t kHdr = sizeof(magnet_hdr);
  if (len < kHdr) return false;
  magnet_hdr h;
  std::memcpy(&h, rec, kHdr);
  const guest_row* r = find_row(h.type);
  if (!r || r->refused) return false;
  // The record's own length bounds it when the caller passed more.
  if (std::min<size_t>(len, h.len) < kHdr + r->payload) return false;
  const uint8_t* pl = rec + kHdr;
  bool own[kMaxSides] = {};
  if (!r->sides.empty()) {
    bool any = false;
    for (size_t i = 0; i < r->sides.size(); ++i) {
      const uint32_t tid = load_u32(pl + r->sides[i].tid_off);
      own[i] = tid && ctx.vcpu_tids && ctx.vcpu_tids->count(tid);
      any |= own[i];
    }
    if (!any) return false;
  }
  const size_t payload =
      (r->payload + MAGNET_RECORD_ALIGN - 1) / MAGNET_RECORD_ALIGN * MAGNET_RECORD_ALIGN;
  const size_t at = out.size();
  out.resize(at + kHdr + payload);  // zeroes: what is not copied below stays zero
  uint8_t* o = out.data() + at;
  copy_spans(o, rec, kHeader);
  const uint16_t olen = static_cast<uint16_t>(kHdr + payload);
  std::memcpy(o + offsetof(magnet_hdr, len), &olen, sizeof olen);
  uint64_t id = 0;
  if (r->id == guest_id::flow) {
    id = h.abstract_id;
  } else if (r->id == guest_id::rekey && h.abstract_id) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(h.abstract_id >> (8 * i));
    id = siphash24(ctx.key, b, sizeof b);
    id = id ? id : 1;  // 0 is "no identity"
  }
  std::memcpy(o + offsetof(magnet_hdr, abstract_id), &id, sizeof id);
  copy_spans(o + kHdr, pl, r->keep);
  for (size_t i = 0; i < r->sides.size(); ++i)
    if (own[i]) copy_spans(o + kHdr, pl, r->sides[i].keep);
  return true;
}

}  // namespace magnet::view
