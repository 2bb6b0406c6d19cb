#include "magnet/export/perfetto.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "magnet/export/ulm.h"
#include "magnet/capture/latency.h"
#include "magnet/events.h"
#include "magnet/record.h"

namespace magnet::host {
namespace {

// Field numbers of proto/perfetto/trace.proto (Perfetto's own numbers).
namespace fld {
constexpr uint32_t trace_packet = 1;
namespace packet {
constexpr uint32_t clock_snapshot = 6;
constexpr uint32_t timestamp = 8;
constexpr uint32_t trusted_packet_sequence_id = 10;
constexpr uint32_t track_event = 11;
constexpr uint32_t interned_data = 12;
constexpr uint32_t sequence_flags = 13;
constexpr uint32_t trace_packet_defaults = 59;
constexpr uint32_t track_descriptor = 60;
constexpr uint32_t first_packet_on_sequence = 87;
}  // namespace packet
namespace defaults {
constexpr uint32_t timestamp_clock_id = 58;
}
namespace clock_snapshot {
constexpr uint32_t clocks = 1;
constexpr uint32_t primary_trace_clock = 2;
constexpr uint32_t clock_id = 1;   // Clock
constexpr uint32_t timestamp = 2;  // Clock
}  // namespace clock_snapshot
namespace interned {
constexpr uint32_t event_names = 2;
constexpr uint32_t debug_annotation_names = 3;
constexpr uint32_t iid = 1;   // EventName, DebugAnnotationName
constexpr uint32_t name = 2;  // EventName, DebugAnnotationName
}  // namespace interned
namespace event {
constexpr uint32_t debug_annotations = 4;
constexpr uint32_t type = 9;
constexpr uint32_t name_iid = 10;
constexpr uint32_t track_uuid = 11;
constexpr uint32_t counter_value = 30;
constexpr uint32_t flow_ids = 47;
}  // namespace event
namespace annotation {
constexpr uint32_t name_iid = 1;
constexpr uint32_t uint_value = 3;
constexpr uint32_t int_value = 4;
constexpr uint32_t string_value = 6;
}  // namespace annotation
namespace track {
constexpr uint32_t uuid = 1;
constexpr uint32_t name = 2;
constexpr uint32_t process = 3;
constexpr uint32_t parent_uuid = 5;
constexpr uint32_t counter = 8;
}  // namespace track
namespace process {
constexpr uint32_t pid = 1;
constexpr uint32_t process_name = 6;
}  // namespace process
}  // namespace fld

constexpr uint32_t kSequenceId = 1;
constexpr uint32_t kSeqIncrementalStateCleared = 1;
constexpr uint32_t kSeqNeedsIncrementalState = 2;
constexpr uint32_t kClockRealtime = 1;
constexpr uint32_t kClockMonotonic = 3;
enum event_type : uint32_t { slice_begin = 1, slice_end = 2, instant = 3, counter = 4 };

// Protobuf wire format: varints, fixed64 and length-delimited fields.
class pb {
 public:
  void varint(uint32_t field, uint64_t v) {
    key(field, 0);
    raw_varint(v);
  }
  void fixed64(uint32_t field, uint64_t v) {
    key(field, 1);
    for (int i = 0; i < 8; ++i) buf_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  void bytes(uint32_t field, std::string_view s) {
    key(field, 2);
    raw_varint(s.size());
    buf_.append(s);
  }
  void msg(uint32_t field, const pb& m) { bytes(field, m.buf_); }
  bool empty() const { return buf_.empty(); }
  const std::string& data() const { return buf_; }

 private:
  void key(uint32_t field, uint32_t wire_type) { raw_varint(uint64_t{field} << 3 | wire_type); }
  void raw_varint(uint64_t v) {
    while (v >= 0x80) {
      buf_ += static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    buf_ += static_cast<char>(v);
  }
  std::string buf_;
};

// Track uuids: a kind in the top byte, the identity below.
enum track_kind : uint64_t {
  tk_cpu = 1,
  tk_host = 2,      // host-wide tracks (enum host_track)
  tk_vm = 3,        // a VM's process track
  tk_vm_child = 4,  // a VM's other tracks (enum vm_track)
  tk_vcpu_sched = 5,
  tk_vcpu_kvm = 6,
};
enum host_track_id : uint64_t {
  ht_socket = 1, ht_transport, ht_ip, ht_device, ht_drops, ht_block, ht_lost, ht_other
};
enum vm_track_id : uint64_t { vt_network = 1, vt_block, vt_tx_rate, vt_rx_rate, vt_other };

constexpr uint64_t uuid_of(track_kind k, uint64_t id) { return k << 56 | id; }

// A VM as the export shows it: its vm id, or, for kvm records the registry
// did not tag (`magnet record` without the daemon), its QEMU process.
using vm_key = uint64_t;
constexpr vm_key kQemuKey = 1ull << 32;
vm_key vm_key_of(const magnet_hdr& h) { return h.vm_id ? h.vm_id : kQemuKey | h.tgid; }
std::string vm_label(vm_key k) {
  return (k & kQemuKey) ? "QEMU " + std::to_string(k & 0xffffffff) : "VM " + std::to_string(k);
}

struct vcpu_ref {
  vm_key vm;
  uint32_t vcpu;
  auto operator<=>(const vcpu_ref&) const = default;
};
uint64_t vcpu_id_bits(const vcpu_ref& v) { return v.vm << 20 | (v.vcpu & 0xfffff); }

bool is_kvm(uint16_t t) { return t >= 0x0400 && t <= 0x04ff; }

// The vCPU a kvm record names (0xffffffff: unknown).
uint32_t kvm_vcpu(const uint8_t* rec) {
  const uint8_t* pl = rec + sizeof(magnet_hdr);
  uint32_t v = UINT32_MAX;
  switch (hdr_of(rec).type) {
    case MAGNET_EV_KVM_EXIT: v = reinterpret_cast<const magnet_kvm_exit*>(pl)->vcpu_id; break;
    case MAGNET_EV_KVM_ENTRY: v = reinterpret_cast<const magnet_kvm_entry*>(pl)->vcpu_id; break;
    case MAGNET_EV_KVM_USERSPACE_EXIT:
      v = reinterpret_cast<const magnet_kvm_userspace_exit*>(pl)->vcpu_id;
      break;
    case MAGNET_EV_KVM_WAKEUP: v = reinterpret_cast<const magnet_kvm_wakeup*>(pl)->vcpu_id; break;
    case MAGNET_EV_KVM_HALT_POLL:
      v = reinterpret_cast<const magnet_kvm_halt_poll*>(pl)->vcpu_id;
      break;
    default: break;
  }
  return v;
}

// What the first pass learns: the vCPU threads, each VM's QEMU process,
// the tap byte counts per bin.
struct vm_info {
  uint32_t tgid = 0;
  std::map<uint64_t, uint64_t> tx_bins, rx_bins;  // bin -> bytes
};
struct scan_result {
  uint64_t t0 = UINT64_MAX;
  std::map<vm_key, vm_info> vms;
  std::unordered_map<uint32_t, vcpu_ref> vcpu_of_tid;
};

// A packet's identity in its headers, as the probes record it.
struct packet_key {
  uint64_t flow;
  uint32_t tcp_seq;
  uint16_t ip_id;
  uint8_t ip_version, protocol;
  auto operator<=>(const packet_key&) const = default;
};

class exporter {
 public:
  exporter(trace_reader& r, std::FILE* out, const perfetto_options& opt)
      : r_(r), out_(out), opt_(opt), si_(r.sysinfo()) {}

  status run() {
    scan();
    r_.rewind();
    begin_sequence();
    uint64_t n = 0;
    for (;;) {
      auto rec = r_.next();
      if (!rec) return rec.err();
      if (!*rec) break;
      record(*rec);
      if (++n % 65536 == 0) forget_old_packets(hdr_of(*rec).ts_ns);
      if (failed_) break;
    }
    rates();
    if (!failed_ && std::fflush(out_) != 0) failed_ = true;
    if (failed_ || std::ferror(out_)) return error::from_errno("cannot write the Perfetto trace");
    return {};
  }

 private:
  // ---- first pass -------------------------------------------------------
  void scan() {
    for (;;) {
      auto rec = r_.next();
      if (!rec || !*rec) break;
      const auto& h = hdr_of(*rec);
      if (h.type == MAGNET_EV_SYSINFO || h.type == MAGNET_EV_EVENT_DESC) continue;
      s_.t0 = std::min<uint64_t>(s_.t0, h.ts_ns);
      if (is_kvm(h.type)) {
        auto& vm = s_.vms[vm_key_of(h)];
        if (!vm.tgid) vm.tgid = h.tgid;
        uint32_t vcpu = kvm_vcpu(*rec);
        if (vcpu != UINT32_MAX && h.tid) s_.vcpu_of_tid[h.tid] = {vm_key_of(h), vcpu};
      }
    }
    if (si_.start_ts_ns && si_.start_ts_ns < s_.t0) s_.t0 = si_.start_ts_ns;
    if (s_.t0 == UINT64_MAX) s_.t0 = 0;
    r_.rewind();
    for (;;) {
      auto rec = r_.next();
      if (!rec || !*rec) break;
      const auto& h = hdr_of(*rec);
      if (!h.vm_id || h.size <= 0 || h.ts_ns < s_.t0) continue;
      if (h.type != MAGNET_EV_NET_DEV_RECV && h.type != MAGNET_EV_NET_DEV_XMIT) continue;
      auto& vm = s_.vms[h.vm_id];
      auto& bins = h.type == MAGNET_EV_NET_DEV_RECV ? vm.tx_bins : vm.rx_bins;
      bins[(h.ts_ns - s_.t0) / opt_.rate_bin_ns] += static_cast<uint64_t>(h.size);
    }
  }

  // ---- packets ----------------------------------------------------------
  void write_packet(pb& p) {
    if (failed_) return;
    p.varint(fld::packet::trusted_packet_sequence_id, kSequenceId);
    if (!first_done_) {
      // The caller added the defaults; this packet starts the sequence.
      p.varint(fld::packet::sequence_flags, kSeqIncrementalStateCleared);
      p.varint(fld::packet::first_packet_on_sequence, 1);
      first_done_ = true;
    } else {
      p.varint(fld::packet::sequence_flags, kSeqNeedsIncrementalState);
    }
    pb outer;
    outer.msg(fld::trace_packet, p);
    const auto& d = outer.data();
    if (std::fwrite(d.data(), 1, d.size(), out_) != d.size()) failed_ = true;
  }

  void begin_sequence() {
    pb defaults;
    defaults.varint(fld::defaults::timestamp_clock_id, kClockMonotonic);
    // Monotonic time at the start and the wall time then: the viewer shows
    // wall-clock time, and MONOTONIC is the trace clock (nothing to convert).
    const uint64_t mono = si_.start_ts_ns ? si_.start_ts_ns : s_.t0;
    pb snap, c_mono, c_real;
    c_mono.varint(fld::clock_snapshot::clock_id, kClockMonotonic);
    c_mono.varint(fld::clock_snapshot::timestamp, mono);
    c_real.varint(fld::clock_snapshot::clock_id, kClockRealtime);
    c_real.varint(fld::clock_snapshot::timestamp,
                  static_cast<uint64_t>(static_cast<int64_t>(mono) + si_.realtime_offset_ns));
    snap.msg(fld::clock_snapshot::clocks, c_mono);
    snap.msg(fld::clock_snapshot::clocks, c_real);
    snap.varint(fld::clock_snapshot::primary_trace_clock, kClockMonotonic);
    pb p;
    p.msg(fld::packet::clock_snapshot, snap);
    p.msg(fld::packet::trace_packet_defaults, defaults);
    write_packet(p);
  }

  // ---- tracks (described on first use) ----------------------------------
  uint64_t track(uint64_t uuid, const std::string& name, uint64_t parent = 0,
                 bool is_counter = false, uint32_t pid = 0) {
    if (!described_.insert(uuid).second) return uuid;
    pb d;
    d.varint(fld::track::uuid, uuid);
    if (parent) d.varint(fld::track::parent_uuid, parent);
    if (pid) {
      pb proc;
      proc.varint(fld::process::pid, pid);
      proc.bytes(fld::process::process_name, name);
      d.msg(fld::track::process, proc);
    } else {
      d.bytes(fld::track::name, name);
    }
    if (is_counter) d.msg(fld::track::counter, pb{});
    pb p;
    p.msg(fld::packet::track_descriptor, d);
    write_packet(p);
    return uuid;
  }
  uint64_t cpu_track(uint16_t cpu) {
    return track(uuid_of(tk_cpu, cpu), "CPU " + std::to_string(cpu));
  }
  uint64_t host_track(host_track_id t) {
    static const char* names[] = {"",           "net: socket", "net: transport",
                                  "net: ip",    "net: device", "net: drops",
                                  "block I/O",  "magnet: lost records", "other events"};
    return track(uuid_of(tk_host, t), names[t]);
  }
  uint64_t vm_track(vm_key k) {
    auto it = s_.vms.find(k);
    uint32_t pid = it != s_.vms.end() ? it->second.tgid : 0;
    if (k & kQemuKey) pid = static_cast<uint32_t>(k);
    return track(uuid_of(tk_vm, k), vm_label(k), 0, false, pid);
  }
  uint64_t vm_child(vm_key k, vm_track_id t) {
    static const char* names[] = {"", "network", "block I/O", "tap tx bytes/s (guest -> host)",
                                  "tap rx bytes/s (host -> guest)", "events"};
    uint64_t parent = vm_track(k);
    return track(uuid_of(tk_vm_child, t << 40 | k), vm_label(k) + " " + names[t], parent,
                 t == vt_tx_rate || t == vt_rx_rate);
  }
  uint64_t vcpu_track(const vcpu_ref& v, bool kvm) {
    uint64_t parent = vm_track(v.vm);
    return track(uuid_of(kvm ? tk_vcpu_kvm : tk_vcpu_sched, vcpu_id_bits(v)),
                 "vCPU " + std::to_string(v.vcpu) + (kvm ? " KVM" : " on CPU"), parent);
  }

  // ---- events -----------------------------------------------------------
  uint64_t intern(std::map<std::string, uint64_t, std::less<>>& index, std::string_view s,
                  uint32_t field, pb& interned) {
    if (auto it = index.find(s); it != index.end()) return it->second;
    uint64_t iid = index.size() + 1;
    index.emplace(std::string(s), iid);
    pb entry;
    entry.varint(fld::interned::iid, iid);
    entry.bytes(fld::interned::name, s);
    interned.msg(field, entry);
    return iid;
  }

  void emit(uint64_t ts, uint64_t track_uuid, event_type type, std::string_view name = {},
            const std::vector<field_value>& args = {}, uint64_t flow = 0,
            int64_t counter_value = 0) {
    pb ev, interned;
    ev.varint(fld::event::type, type);
    ev.varint(fld::event::track_uuid, track_uuid);
    if (!name.empty())
      ev.varint(fld::event::name_iid,
                intern(names_, name, fld::interned::event_names, interned));
    if (type == counter) ev.varint(fld::event::counter_value, static_cast<uint64_t>(counter_value));
    if (flow) ev.fixed64(fld::event::flow_ids, flow);
    for (const auto& a : args) {
      pb an;
      an.varint(fld::annotation::name_iid,
                intern(arg_names_, a.name, fld::interned::debug_annotation_names, interned));
      switch (a.k) {
        case field_value::kind::u64: an.varint(fld::annotation::uint_value, a.u); break;
        case field_value::kind::s64:
          an.varint(fld::annotation::int_value, static_cast<uint64_t>(a.s));
          break;
        case field_value::kind::text: an.bytes(fld::annotation::string_value, a.text); break;
      }
      ev.msg(fld::event::debug_annotations, an);
    }
    pb p;
    p.varint(fld::packet::timestamp, ts);
    p.msg(fld::packet::track_event, ev);
    if (!interned.empty()) p.msg(fld::packet::interned_data, interned);
    write_packet(p);
  }

  // A slice track's state: the open slice and the last time written, so a
  // record out of order never makes a slice end before it began.
  struct slice_state {
    bool open = false;
    uint64_t last = 0;
  };
  void begin(slice_state& st, uint64_t track_uuid, uint64_t ts, std::string_view name,
             const std::vector<field_value>& args = {}) {
    if (st.open) end(st, track_uuid, ts);
    ts = std::max<uint64_t>(ts, st.last);
    emit(ts, track_uuid, slice_begin, name, args);
    st.open = true;
    st.last = ts;
  }
  void end(slice_state& st, uint64_t track_uuid, uint64_t ts) {
    if (!st.open) return;
    ts = std::max<uint64_t>(ts, st.last);
    emit(ts, track_uuid, slice_end);
    st.open = false;
    st.last = ts;
  }

  static field_value u(std::string_view n, uint64_t v) {
    return {n, field_value::kind::u64, v};
  }
  static field_value s(std::string_view n, int64_t v) {
    return {n, field_value::kind::s64, 0, v};
  }
  static field_value t(std::string_view n, std::string v) {
    return {n, field_value::kind::text, 0, 0, std::move(v)};
  }
  static std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%" PRIx64, v);
    return b;
  }

  // The record's header and payload fields, as arguments.
  std::vector<field_value> args_of(const uint8_t* rec) {
    const auto& h = hdr_of(rec);
    std::vector<field_value> a;
    a.push_back(u("vm", h.vm_id));
    a.push_back(u("tgid", h.tgid));
    a.push_back(u("tid", h.tid));
    a.push_back(u("cpu", h.cpu));
    a.push_back(s("size", h.size));
    if (h.abstract_id) a.push_back(t("abstract_id", hex(h.abstract_id)));
    if (h.flags) a.push_back(u("flags", h.flags));
    for (auto& v : payload_values(rec)) a.push_back(std::move(v));
    return a;
  }

  // ---- packet journeys --------------------------------------------------
  struct journey {
    uint64_t flow_id;
    uint64_t last;
  };
  bool fresh(const journey& j, uint64_t ts) const {
    return ts >= j.last ? ts - j.last <= opt_.journey_ns : true;
  }
  uint64_t new_flow() { return ++flows_; }

  uint64_t journey_of(const uint8_t* rec) {
    const auto& h = hdr_of(rec);
    const uint64_t aid = h.abstract_id;
    if (!aid) return 0;
    const uint8_t* pl = rec + sizeof(magnet_hdr);
    auto latest = [&]() -> uint64_t {
      auto it = current_.find(aid);
      if (it == current_.end() || !fresh(it->second, h.ts_ns)) return 0;
      it->second.last = std::max<uint64_t>(it->second.last, h.ts_ns);
      return it->second.flow_id;
    };
    switch (h.type) {
      case MAGNET_EV_NET_SOCK_SEND: {
        // The datagram (or first segment) this send makes is the next new
        // packet of the flow on the way out.
        uint64_t f = new_flow();
        pending_send_[aid] = {f, h.ts_ns};
        current_[aid] = {f, h.ts_ns};
        return f;
      }
      case MAGNET_EV_NET_SOCK_RECV: {
        // A UDP socket takes its datagrams in the order they were delivered
        // to it (net.l4.recv); an unconnected one records only its own end,
        // so its flow id is not the datagram's and the port is the link.
        const auto* so = reinterpret_cast<const magnet_sock*>(pl);
        if (so->protocol == 17)
          if (auto it = udp_queued_.find(so->dport); it != udp_queued_.end()) {
            auto& q = it->second;
            while (!q.empty() && !fresh(q.front(), h.ts_ns)) q.pop_front();
            if (!q.empty()) {
              const uint64_t f = q.front().flow_id;
              q.pop_front();
              return f;
            }
          }
        return latest();
      }
      case MAGNET_EV_VMNET_QUEUE_TX:
      case MAGNET_EV_VMNET_QUEUE_RX:
        // No packet identity in these records: the flow's latest packet.
        return latest();
      case MAGNET_EV_NET_L4_SEND:
      case MAGNET_EV_NET_L4_RECV:
      case MAGNET_EV_NET_IP_SEND:
      case MAGNET_EV_NET_IP_RECV:
      case MAGNET_EV_NET_DEV_XMIT:
      case MAGNET_EV_NET_DEV_RECV: {
        const auto* p = reinterpret_cast<const magnet_pkt*>(pl);
        packet_key k{aid, p->tcp_seq, p->ip_id, p->ip_version, p->protocol};
        auto it = packets_.find(k);
        uint64_t f = 0;
        if (it != packets_.end() && fresh(it->second, h.ts_ns)) {
          f = it->second.flow_id;
        } else {
          const bool out = h.type == MAGNET_EV_NET_L4_SEND || h.type == MAGNET_EV_NET_IP_SEND ||
                           h.type == MAGNET_EV_NET_DEV_XMIT;
          auto ps = pending_send_.find(aid);
          if (out && ps != pending_send_.end() && fresh(ps->second, h.ts_ns)) {
            f = ps->second.flow_id;
            pending_send_.erase(ps);
          } else {
            f = new_flow();
          }
        }
        packets_[k] = {f, std::max<uint64_t>(h.ts_ns, it != packets_.end() ? it->second.last : 0)};
        current_[aid] = {f, h.ts_ns};
        if (h.type == MAGNET_EV_NET_L4_RECV && p->protocol == 17) {
          auto& q = udp_queued_[p->dport];
          q.push_back({f, h.ts_ns});
          if (q.size() > kUdpQueueMax) q.pop_front();
        }
        return f;
      }
      default: return 0;
    }
  }

  void forget_old_packets(uint64_t now) {
    auto old = [&](const journey& j) { return now > j.last && now - j.last > opt_.journey_ns; };
    std::erase_if(packets_, [&](const auto& kv) { return old(kv.second); });
    std::erase_if(current_, [&](const auto& kv) { return old(kv.second); });
    std::erase_if(pending_send_, [&](const auto& kv) { return old(kv.second); });
    std::erase_if(udp_queued_,
                  [&](const auto& kv) { return kv.second.empty() || old(kv.second.back()); });
  }

  // ---- one record -------------------------------------------------------
  void record(const uint8_t* rec) {
    const auto& h = hdr_of(rec);
    const uint8_t* pl = rec + sizeof(magnet_hdr);
    const std::string name = event_name(h.type);
    switch (h.type) {
      case MAGNET_EV_SYSINFO:
      case MAGNET_EV_EVENT_DESC: return;
      case MAGNET_EV_SCHED_SWITCH:
        return sched_switch(h, *reinterpret_cast<const magnet_sched_switch*>(pl));
      case MAGNET_EV_KVM_EXIT: return kvm_exit(rec);
      case MAGNET_EV_KVM_ENTRY: return kvm_entry(rec);
      default: break;
    }
    uint64_t tr;
    if (h.type == MAGNET_EV_LOST) {
      tr = host_track(ht_lost);
    } else if (is_kvm(h.type)) {
      uint32_t vcpu = kvm_vcpu(rec);
      auto it = s_.vcpu_of_tid.find(h.tid);
      if (vcpu != UINT32_MAX) tr = vcpu_track({vm_key_of(h), vcpu}, true);
      else if (it != s_.vcpu_of_tid.end()) tr = vcpu_track(it->second, true);
      else tr = vm_child(vm_key_of(h), vt_other);
    } else if ((h.type >= 0x0100 && h.type <= 0x01ff) || (h.type >= 0x0500 && h.type <= 0x05ff)) {
      if (h.vm_id) {
        tr = vm_child(h.vm_id, vt_network);
      } else {
        switch (h.type) {
          case MAGNET_EV_NET_SOCK_SEND:
          case MAGNET_EV_NET_SOCK_RECV: tr = host_track(ht_socket); break;
          case MAGNET_EV_NET_L4_SEND:
          case MAGNET_EV_NET_L4_RECV:
          case MAGNET_EV_NET_TCP_STATE: tr = host_track(ht_transport); break;
          case MAGNET_EV_NET_IP_SEND:
          case MAGNET_EV_NET_IP_RECV: tr = host_track(ht_ip); break;
          case MAGNET_EV_NET_DROP: tr = host_track(ht_drops); break;
          default: tr = host_track(ht_device); break;
        }
      }
    } else if (h.type == MAGNET_EV_BLK_ISSUE || h.type == MAGNET_EV_BLK_COMPLETE) {
      tr = h.vm_id ? vm_child(h.vm_id, vt_block) : host_track(ht_block);
    } else if (h.vm_id) {
      tr = vm_child(h.vm_id, vt_other);
    } else {
      tr = cpu_track(h.cpu);  // wakeups, forks, exits, ids of a later format
    }
    emit(h.ts_ns, tr, instant, name, args_of(rec), journey_of(rec));
  }

  void sched_switch(const magnet_hdr& h, const magnet_sched_switch& sw) {
    const uint64_t cpu = cpu_track(h.cpu);
    auto& st = cpu_slices_[h.cpu];
    end(st, cpu, h.ts_ns);
    if (auto it = s_.vcpu_of_tid.find(sw.prev_tid); it != s_.vcpu_of_tid.end())
      end(vcpu_on_cpu_[it->second], vcpu_track(it->second, false), h.ts_ns);
    if (sw.next_tid) {
      std::string comm(sw.next_comm, strnlen(sw.next_comm, sizeof sw.next_comm));
      begin(st, cpu, h.ts_ns, comm + " " + std::to_string(sw.next_tid),
            {u("tid", sw.next_tid), u("prio", sw.next_prio), s("prev_state", sw.prev_state),
             u("prev_tid", sw.prev_tid)});
    }
    if (auto it = s_.vcpu_of_tid.find(sw.next_tid); it != s_.vcpu_of_tid.end())
      begin(vcpu_on_cpu_[it->second], vcpu_track(it->second, false), h.ts_ns,
            "CPU " + std::to_string(h.cpu), {u("tid", sw.next_tid)});
  }

  void kvm_exit(const uint8_t* rec) {
    const auto& h = hdr_of(rec);
    const auto& e = *reinterpret_cast<const magnet_kvm_exit*>(rec + sizeof(magnet_hdr));
    vcpu_ref v{vm_key_of(h), e.vcpu_id};
    const uint64_t tr = vcpu_track(v, true);
    auto& st = vcpu_kvm_[v];
    end(st, tr, h.ts_ns);
    begin(st, tr, h.ts_ns, "exit " + kvm_exit_reason_name(e.isa, e.exit_reason), args_of(rec));
    vcpu_in_exit_[v] = true;
  }

  void kvm_entry(const uint8_t* rec) {
    const auto& h = hdr_of(rec);
    const auto& e = *reinterpret_cast<const magnet_kvm_entry*>(rec + sizeof(magnet_hdr));
    // Minor 0 wrote kvm.entry without the exit it ends.
    const bool has_exit = h.len >= sizeof(magnet_hdr) + sizeof(magnet_kvm_entry);
    vcpu_ref v{vm_key_of(h), e.vcpu_id};
    const uint64_t tr = vcpu_track(v, true);
    auto& st = vcpu_kvm_[v];
    auto& in_exit = vcpu_in_exit_[v];
    if (in_exit) {
      end(st, tr, h.ts_ns);
    } else if (has_exit && e.exit_ns) {
      // No kvm.exit recorded (not probed, or sampled away): the entry says
      // how long the exit it ends took.
      const uint64_t from = h.ts_ns > e.exit_ns ? h.ts_ns - e.exit_ns : 0;
      end(st, tr, from);
      begin(st, tr, from, "exit " + kvm_exit_reason_name(e.isa, e.exit_reason),
            {u("exit_reason", e.exit_reason), u("exit_ns", e.exit_ns)});
      end(st, tr, h.ts_ns);
    } else {
      end(st, tr, h.ts_ns);
    }
    begin(st, tr, h.ts_ns, "guest", args_of(rec));
    in_exit = false;
  }

  // ---- rate counters ----------------------------------------------------
  void rates() {
    const double per_s = 1e9 / static_cast<double>(opt_.rate_bin_ns);
    for (const auto& [k, vm] : s_.vms) {
      if (vm.tx_bins.empty() && vm.rx_bins.empty()) continue;
      uint64_t first = UINT64_MAX, last = 0;
      for (const auto* bins : {&vm.tx_bins, &vm.rx_bins})
        if (!bins->empty()) {
          first = std::min(first, bins->begin()->first);
          last = std::max(last, bins->rbegin()->first);
        }
      for (auto [t, bins] :
           {std::pair{vt_tx_rate, &vm.tx_bins}, std::pair{vt_rx_rate, &vm.rx_bins}}) {
        const uint64_t tr = vm_child(k, t);
        for (uint64_t b = first; b <= last + 1; ++b) {
          auto it = bins->find(b);
          const uint64_t bytes = it == bins->end() || b > last ? 0 : it->second;
          emit(s_.t0 + b * opt_.rate_bin_ns, tr, counter, {}, {}, 0,
               static_cast<int64_t>(static_cast<double>(bytes) * per_s + 0.5));
        }
      }
    }
  }

  trace_reader& r_;
  std::FILE* out_;
  perfetto_options opt_;
  const magnet_sysinfo& si_;
  scan_result s_;
  bool failed_ = false, first_done_ = false;
  std::set<uint64_t> described_;
  std::map<std::string, uint64_t, std::less<>> names_, arg_names_;
  std::map<uint16_t, slice_state> cpu_slices_;
  std::map<vcpu_ref, slice_state> vcpu_on_cpu_, vcpu_kvm_;
  std::map<vcpu_ref, bool> vcpu_in_exit_;
  std::map<packet_key, journey> packets_;
  std::unordered_map<uint64_t, journey> current_, pending_send_;
  // Datagrams delivered to a local UDP port and not yet received, oldest first.
  static constexpr size_t kUdpQueueMax = 4096;
  std::unordered_map<uint16_t, std::deque<journey>> udp_queued_;
  uint64_t flows_ = 0;
};

}  // namespace

status export_perfetto(trace_reader& r, std::FILE* out, const perfetto_options& opt) {
  r.rewind();
  return exporter(r, out, opt).run();
}

}  // namespace magnet::host
