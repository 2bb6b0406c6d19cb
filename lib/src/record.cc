#include "magnet/record.h"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/events.h"

namespace magnet {
namespace {

#define F(st, name, t) field{#name, offsetof(st, name), sizeof(((st*)0)->name), ftype::t}
#define FN(st, label, member, t) \
  field{label, offsetof(st, member), sizeof(((st*)0)->member), ftype::t}

const field kSysinfo[] = {
    FN(magnet_sysinfo, "endian_marker", endian_marker, hex64),
    F(magnet_sysinfo, format_major, u16), F(magnet_sysinfo, format_minor, u16),
    F(magnet_sysinfo, ncpus, u32), F(magnet_sysinfo, realtime_offset_ns, s64),
    F(magnet_sysinfo, start_ts_ns, u64), F(magnet_sysinfo, hostname, str),
    F(magnet_sysinfo, kernel_release, str), F(magnet_sysinfo, tool_version, str),
};
const field kLost[] = {
    F(magnet_lost, count, u64), F(magnet_lost, first_ts_ns, u64),
    F(magnet_lost, last_ts_ns, u64), F(magnet_lost, probe_type, u16),
    FN(magnet_lost, "lost_cpu", cpu, u16), F(magnet_lost, reason, u32),
};
const field kDesc[] = {
    FN(magnet_event_desc, "desc_type", type, u16), F(magnet_event_desc, payload_kind, u16),
    FN(magnet_event_desc, "desc_name", name, str),
};
const field kSock[] = {
    F(magnet_sock, family, u16), F(magnet_sock, protocol, u16), F(magnet_sock, sport, u16),
    F(magnet_sock, dport, u16), F(magnet_sock, saddr, addr), F(magnet_sock, daddr, addr),
    F(magnet_sock, call_ns, u64),
};
const field kPkt[] = {
    F(magnet_pkt, ifindex, u32), F(magnet_pkt, skb_len, u32), F(magnet_pkt, tcp_seq, u32),
    F(magnet_pkt, l3proto, u16), F(magnet_pkt, ip_id, u16), F(magnet_pkt, frag_off, u16),
    F(magnet_pkt, tot_len, u16), F(magnet_pkt, sport, u16), F(magnet_pkt, dport, u16),
    F(magnet_pkt, ip_version, u8), F(magnet_pkt, protocol, u8), F(magnet_pkt, tos, u8),
    F(magnet_pkt, ttl, u8), F(magnet_pkt, tcp_flags, u8), F(magnet_pkt, saddr, addr),
    F(magnet_pkt, daddr, addr),
};
const field kTcp[] = {
    F(magnet_tcp_state, family, u16), F(magnet_tcp_state, sport, u16),
    F(magnet_tcp_state, dport, u16), FN(magnet_tcp_state, "tcp_state", state, u8),
    F(magnet_tcp_state, ca_state, u8), F(magnet_tcp_state, snd_wnd, u32),
    F(magnet_tcp_state, rcv_wnd, u32), F(magnet_tcp_state, srtt_us, u32),
    FN(magnet_tcp_state, "rto_jiffies", rto_us, u32), F(magnet_tcp_state, packets_out, u32),
    F(magnet_tcp_state, retrans_out, u32), F(magnet_tcp_state, snd_ssthresh, u32),
    F(magnet_tcp_state, snd_cwnd, u32), F(magnet_tcp_state, write_seq, u32),
    F(magnet_tcp_state, copied_seq, u32), F(magnet_tcp_state, snd_nxt, u32),
    F(magnet_tcp_state, snd_una, u32), FN(magnet_tcp_state, "tcp_flags32", flags, u32),
    F(magnet_tcp_state, saddr, addr), F(magnet_tcp_state, daddr, addr),
};
const field kSwitch[] = {
    F(magnet_sched_switch, prev_tid, u32), F(magnet_sched_switch, next_tid, u32),
    F(magnet_sched_switch, prev_state, s64), F(magnet_sched_switch, prev_prio, u32),
    F(magnet_sched_switch, next_prio, u32), F(magnet_sched_switch, prev_comm, str),
    F(magnet_sched_switch, next_comm, str),
};
const field kWakeup[] = {
    FN(magnet_sched_wakeup, "wake_tid", tid, u32), F(magnet_sched_wakeup, target_cpu, s32),
    F(magnet_sched_wakeup, prio, u32), F(magnet_sched_wakeup, comm, str),
};
const field kFork[] = {
    F(magnet_proc_fork, parent_tid, u32), F(magnet_proc_fork, child_tid, u32),
    F(magnet_proc_fork, parent_comm, str), F(magnet_proc_fork, child_comm, str),
};
const field kExit[] = {
    F(magnet_proc_exit, exit_code, s32), F(magnet_proc_exit, comm, str),
};
const field kBlk[] = {
    F(magnet_blk, dev, u32), F(magnet_blk, nr_bytes, u32), F(magnet_blk, sector, u64),
    F(magnet_blk, latency_ns, u64), F(magnet_blk, rwbs, str),
    FN(magnet_blk, "blk_error", error, s32),
};
const field kKvmExit[] = {
    F(magnet_kvm_exit, vcpu_id, u32), F(magnet_kvm_exit, exit_reason, u32),
    F(magnet_kvm_exit, isa, u32), F(magnet_kvm_exit, guest_rip, hex64),
    F(magnet_kvm_exit, info1, hex64), F(magnet_kvm_exit, info2, hex64),
};
const field kKvmEntry[] = {
    F(magnet_kvm_entry, vcpu_id, u32), F(magnet_kvm_entry, guest_rip, hex64),
    F(magnet_kvm_entry, exit_ns, u64), F(magnet_kvm_entry, exit_reason, u32),
    FN(magnet_kvm_entry, "exit_isa", isa, u16), FN(magnet_kvm_entry, "kvm_flags", flags, u16),
};
const field kKvmUserspaceExit[] = {
    F(magnet_kvm_userspace_exit, vcpu_id, u32),
    FN(magnet_kvm_userspace_exit, "userspace_reason", reason, u32),
    FN(magnet_kvm_userspace_exit, "kvm_error", error, s32),
};
const field kKvmWakeup[] = {
    F(magnet_kvm_wakeup, vcpu_id, u32), F(magnet_kvm_wakeup, halt_ns, u64),
    F(magnet_kvm_wakeup, waited, u8), F(magnet_kvm_wakeup, valid, u8),
};
const field kKvmHaltPoll[] = {
    F(magnet_kvm_halt_poll, vcpu_id, u32), F(magnet_kvm_halt_poll, new_ns, u32),
    F(magnet_kvm_halt_poll, old_ns, u32), F(magnet_kvm_halt_poll, grow, u8),
};
const field kNetDrop[] = {
    F(magnet_net_drop, location, hex64), FN(magnet_net_drop, "drop_reason", reason, u32),
    F(magnet_net_drop, ifindex, u32), FN(magnet_net_drop, "l3proto", protocol, u16),
};
const field kVmnetQueue[] = {
    F(magnet_vmnet_queue, delay_ns, u64), F(magnet_vmnet_queue, in_ifindex, u32),
    F(magnet_vmnet_queue, out_ifindex, u32), F(magnet_vmnet_queue, ip_id, u16),
};
const field kVmnetVhost[] = {
    F(magnet_vmnet_vhost, duration_ns, u64),
};
const field kAppAdd[] = {
    F(magnet_app_add, event_id, u32), FN(magnet_app_add, "app_abstract_id", abstract_id, u32),
    F(magnet_app_add, value, u64),
};
// The captured bytes after the fixed part are not a field: "data" below.
const field kPktSnap[] = {
    F(magnet_pkt_snap, ifindex, u32), F(magnet_pkt_snap, wire_len, u32),
    F(magnet_pkt_snap, cap_len, u16), F(magnet_pkt_snap, l3proto, u16),
    F(magnet_pkt_snap, mac_len, u16),
};
#undef F
#undef FN

template <class T>
T bswap_any(T v) {
  if constexpr (sizeof(T) == 2) return static_cast<T>(__builtin_bswap16(static_cast<uint16_t>(v)));
  if constexpr (sizeof(T) == 4) return static_cast<T>(__builtin_bswap32(static_cast<uint32_t>(v)));
  if constexpr (sizeof(T) == 8) return static_cast<T>(__builtin_bswap64(static_cast<uint64_t>(v)));
  return v;
}

template <class T>
void swap_at(uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  v = bswap_any(v);
  std::memcpy(p, &v, sizeof v);
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string addr_str(const uint8_t* a, bool v6) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(v6 ? AF_INET6 : AF_INET, a, buf, sizeof buf);
  return buf;
}

// Addresses are IPv6 when the record says so (family AF_INET6 or IP version 6).
bool record_is_v6(const uint8_t* payload, std::span<const field> fields) {
  for (const auto& f : fields) {
    if (f.name == "ip_version") return payload[f.off] == 6;
    if (f.name == "family") return load<uint16_t>(payload + f.off) == AF_INET6;
  }
  return false;
}

std::string hex_str(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A field as text (dump's text and CSV): a ',' in a name becomes ';' (CSV columns).
std::string value_str(const uint8_t* base, const field& f, bool v6) {
  const uint8_t* p = base + f.off;
  switch (f.type) {
    case ftype::u8: return std::to_string(load<uint8_t>(p));
    case ftype::u16: return std::to_string(load<uint16_t>(p));
    case ftype::u32: return std::to_string(load<uint32_t>(p));
    case ftype::u64: return std::to_string(load<uint64_t>(p));
    case ftype::s32: return std::to_string(load<int32_t>(p));
    case ftype::s64: return std::to_string(load<int64_t>(p));
    case ftype::hex64: return hex_str(load<uint64_t>(p));
    case ftype::addr: return addr_str(p, v6);
    case ftype::str: {
      std::string s;
      for (size_t i = 0; i < f.size && p[i]; ++i) {
        char c = static_cast<char>(p[i]);
        if (c == ',') c = ';';  // keep CSV columns intact
        s += (c >= 0x20 && c < 0x7f) ? c : '?';
      }
      return s;
    }
  }
  return "";
}

// A field as a JSON value: numbers as numbers, ids in hex, addresses and
// names as strings (a name's bytes up to its NUL, the unprintable ones as '?').
nlohmann::ordered_json json_value(const uint8_t* base, const field& f, bool v6) {
  const uint8_t* p = base + f.off;
  switch (f.type) {
    case ftype::u8: return load<uint8_t>(p);
    case ftype::u16: return load<uint16_t>(p);
    case ftype::u32: return load<uint32_t>(p);
    case ftype::u64: return load<uint64_t>(p);
    case ftype::s32: return load<int32_t>(p);
    case ftype::s64: return load<int64_t>(p);
    case ftype::hex64: return hex_str(load<uint64_t>(p));
    case ftype::addr: return addr_str(p, v6);
    case ftype::str: {
      std::string s;
      for (size_t i = 0; i < f.size && p[i]; ++i) {
        const char c = static_cast<char>(p[i]);
        s += (c >= 0x20 && c < 0x7f) ? c : '?';
      }
      return s;
    }
  }
  return nullptr;
}

// A packet record's captured bytes, as lower-case hex without separators
// (the bytes of the frame in wire order, as tcpdump -x shows them); empty
// for every other record.
constexpr std::string_view kSnapData = "data";

std::string snap_hex(const uint8_t* rec) {
  const auto& h = hdr_of(rec);
  const auto* e = find_event(h.type);
  if (!e || e->payload_kind != MAGNET_PL_PKT_SNAP || h.len < sizeof(magnet_hdr) + sizeof(magnet_pkt_snap))
    return {};
  magnet_pkt_snap ps;
  std::memcpy(&ps, rec + sizeof(magnet_hdr), sizeof ps);
  const size_t room = h.len - sizeof(magnet_hdr) - sizeof ps;
  const uint8_t* d = rec + sizeof(magnet_hdr) + sizeof ps;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(ps.cap_len, room); ++i) {
    s += kDigits[d[i] >> 4];
    s += kDigits[d[i] & 0xf];
  }
  return s;
}

// CSV columns after the header ones: every payload field name, once.
const std::vector<std::string_view>& csv_payload_columns() {
  static const std::vector<std::string_view> cols = [] {
    std::vector<std::string_view> v;
    for (uint16_t k = MAGNET_PL_LOST; k < MAGNET_PL_COUNT; ++k) {
      if (k == MAGNET_PL_EVENT_DESC) continue;
      for (const auto& f : payload_fields(k))
        if (std::find(v.begin(), v.end(), f.name) == v.end()) v.push_back(f.name);
    }
    v.push_back(kSnapData);
    return v;
  }();
  return cols;
}

}  // namespace

std::span<const field> payload_fields(uint16_t kind) {
  switch (kind) {
    case MAGNET_PL_SYSINFO: return kSysinfo;
    case MAGNET_PL_LOST: return kLost;
    case MAGNET_PL_EVENT_DESC: return kDesc;
    case MAGNET_PL_SOCK: return kSock;
    case MAGNET_PL_PKT: return kPkt;
    case MAGNET_PL_TCP_STATE: return kTcp;
    case MAGNET_PL_SCHED_SWITCH: return kSwitch;
    case MAGNET_PL_SCHED_WAKEUP: return kWakeup;
    case MAGNET_PL_PROC_FORK: return kFork;
    case MAGNET_PL_PROC_EXIT: return kExit;
    case MAGNET_PL_BLK: return kBlk;
    case MAGNET_PL_KVM_EXIT: return kKvmExit;
    case MAGNET_PL_KVM_ENTRY: return kKvmEntry;
    case MAGNET_PL_KVM_USERSPACE_EXIT: return kKvmUserspaceExit;
    case MAGNET_PL_KVM_WAKEUP: return kKvmWakeup;
    case MAGNET_PL_KVM_HALT_POLL: return kKvmHaltPoll;
    case MAGNET_PL_NET_DROP: return kNetDrop;
    case MAGNET_PL_VMNET_QUEUE: return kVmnetQueue;
    case MAGNET_PL_VMNET_VHOST: return kVmnetVhost;
    case MAGNET_PL_APP_ADD: return kAppAdd;
    case MAGNET_PL_PKT_SNAP: return kPktSnap;
    default: return {};
  }
}

status check_record(std::span<const uint8_t> buf, std::string_view where) {
  if (buf.size() < sizeof(magnet_hdr))
    return error{std::string(where) + ": truncated record header (" +
                 std::to_string(buf.size()) + " of " + std::to_string(sizeof(magnet_hdr)) +
                 " bytes)"};
  const auto& h = hdr_of(buf.data());
  if (h.len < sizeof(magnet_hdr) || h.len % MAGNET_RECORD_ALIGN || h.len > MAGNET_MAX_RECORD)
    return error{std::string(where) + ": corrupt record: length " + std::to_string(h.len) +
                 " (must be a multiple of 8 between 40 and " +
                 std::to_string(MAGNET_MAX_RECORD) + ")"};
  if (h.len > buf.size())
    return error{std::string(where) + ": truncated record: " + event_name(h.type) +
                 " says " + std::to_string(h.len) + " bytes, " + std::to_string(buf.size()) +
                 " remain"};
  if (h.type == 0)
    return error{std::string(where) + ": corrupt record: event id 0 is invalid"};
  if (auto* e = find_event(h.type)) {
    size_t need = sizeof(magnet_hdr) + payload_min_size(e->payload_kind);
    if (h.len < need)
      return error{std::string(where) + ": corrupt record: " + std::string(e->name) +
                   " is " + std::to_string(h.len) + " bytes, its payload needs " +
                   std::to_string(need)};
    if (e->payload_kind == MAGNET_PL_PKT_SNAP) {
      magnet_pkt_snap ps;
      std::memcpy(&ps, buf.data() + sizeof(magnet_hdr), sizeof ps);
      if (ps.cap_len > h.len - need)
        return error{std::string(where) + ": corrupt record: " + std::string(e->name) +
                     " says " + std::to_string(ps.cap_len) + " captured bytes, its " +
                     std::to_string(h.len) + " bytes hold " + std::to_string(h.len - need)};
    }
  }
  return {};
}

void swap_header(uint8_t* rec) {
  swap_at<uint64_t>(rec + offsetof(magnet_hdr, ts_ns));
  swap_at<uint64_t>(rec + offsetof(magnet_hdr, abstract_id));
  swap_at<uint32_t>(rec + offsetof(magnet_hdr, tgid));
  swap_at<uint32_t>(rec + offsetof(magnet_hdr, tid));
  swap_at<uint32_t>(rec + offsetof(magnet_hdr, vm_id));
  swap_at<int32_t>(rec + offsetof(magnet_hdr, size));
  swap_at<uint16_t>(rec + offsetof(magnet_hdr, type));
  swap_at<uint16_t>(rec + offsetof(magnet_hdr, cpu));
  swap_at<uint16_t>(rec + offsetof(magnet_hdr, len));
  swap_at<uint16_t>(rec + offsetof(magnet_hdr, flags));
}

void swap_payload(uint8_t* rec) {
  auto* e = find_event(hdr_of(rec).type);
  if (!e) return;  // opaque: unknown layout
  uint8_t* p = rec + sizeof(magnet_hdr);
  const size_t plen = hdr_of(rec).len - sizeof(magnet_hdr);
  for (const auto& f : payload_fields(e->payload_kind)) {
    if (f.off + f.size > plen) continue;  // written by an older minor
    switch (f.size) {
      case 2: if (f.type != ftype::str) swap_at<uint16_t>(p + f.off); break;
      case 4: if (f.type != ftype::str) swap_at<uint32_t>(p + f.off); break;
      case 8: if (f.type != ftype::str) swap_at<uint64_t>(p + f.off); break;
      default: break;  // bytes, strings, addresses: byte order free
    }
  }
}

std::string csv_header() {
  std::string s = "ts_ns,cpu,event,vm,tgid,tid,abstract_id,size,flags";
  for (auto c : csv_payload_columns()) {
    s += ',';
    s += c;
  }
  return s;
}

std::string format_record(const uint8_t* rec, out_format fmt) {
  const auto& h = hdr_of(rec);
  const auto* e = find_event(h.type);
  auto fields = e ? payload_fields(e->payload_kind) : std::span<const field>{};
  // Fields appended by a later minor than the writer's are absent.
  const size_t plen = h.len - sizeof(magnet_hdr);
  while (!fields.empty() && fields.back().off + fields.back().size > plen)
    fields = fields.first(fields.size() - 1);
  const uint8_t* pl = rec + sizeof(magnet_hdr);
  std::string name = event_name(h.type);
  const bool v6 = record_is_v6(pl, fields);
  char buf[256];
  std::string s;

  switch (fmt) {
    case out_format::text: {
      std::snprintf(buf, sizeof buf,
                    "%llu cpu=%u %s vm=%u tgid=%u tid=%u id=0x%llx size=%d", h.ts_ns,
                    h.cpu, name.c_str(), h.vm_id, h.tgid, h.tid, h.abstract_id, h.size);
      s = buf;
      if (h.flags & MAGNET_RF_TCP) s += " tcp";
      if (h.flags & MAGNET_RF_UDP) s += " udp";
      if (h.flags & MAGNET_RF_SAMPLED) s += " sampled";
      for (const auto& f : fields) {
        s += ' ';
        s += f.name;
        s += '=';
        s += value_str(pl, f, v6);
      }
      if (e && e->payload_kind == MAGNET_PL_PKT_SNAP) s += " data=" + snap_hex(rec);
      return s;
    }
    case out_format::csv: {
      std::snprintf(buf, sizeof buf, "%llu,%u,%s,%u,%u,%u,0x%llx,%d,%u", h.ts_ns,
                    h.cpu, name.c_str(), h.vm_id, h.tgid, h.tid, h.abstract_id, h.size, h.flags);
      s = buf;
      for (auto col : csv_payload_columns()) {
        s += ',';
        if (col == kSnapData) s += snap_hex(rec);
        for (const auto& f : fields)
          if (f.name == col) {
            s += value_str(pl, f, v6);
            break;
          }
      }
      return s;
    }
    case out_format::json: {
      // nlohmann escapes every string and writes a number that JSON cannot
      // hold (none here: all are integers) as null.
      nlohmann::ordered_json j{{"ts_ns", h.ts_ns},   {"cpu", h.cpu},   {"event", name},
                               {"vm", h.vm_id},      {"tgid", h.tgid}, {"tid", h.tid},
                               {"abstract_id", hex_str(h.abstract_id)},
                               {"size", h.size},     {"flags", h.flags}};
      for (const auto& f : fields) j[std::string(f.name)] = json_value(pl, f, v6);
      if (e && e->payload_kind == MAGNET_PL_PKT_SNAP) j[std::string(kSnapData)] = snap_hex(rec);
      return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
  }
  return s;
}

}  // namespace magnet
