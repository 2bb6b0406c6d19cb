#include "magnet/events.h"

#include <array>
#include <cstddef>
#include <cstdio>

namespace magnet {
namespace {

constexpr event_info kEvents[] = {
#define MAGNET_X_INFO(sym, id, name, pl) {id, name, pl},
    MAGNET_EVENTS(MAGNET_X_INFO)
#undef MAGNET_X_INFO
};

constexpr std::array<uint16_t, MAGNET_NPROBES> kSlotTypes = {
    MAGNET_EV_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_RECV, MAGNET_EV_NET_L4_SEND,
    MAGNET_EV_NET_L4_RECV,   MAGNET_EV_NET_IP_SEND,   MAGNET_EV_NET_IP_RECV,
    MAGNET_EV_NET_DEV_XMIT,  MAGNET_EV_NET_DEV_RECV,  MAGNET_EV_NET_TCP_STATE,
    MAGNET_EV_SCHED_SWITCH,  MAGNET_EV_SCHED_WAKEUP,  MAGNET_EV_PROC_FORK,
    MAGNET_EV_PROC_EXIT,     MAGNET_EV_BLK_ISSUE,     MAGNET_EV_BLK_COMPLETE,
    MAGNET_EV_KVM_EXIT,      MAGNET_EV_KVM_ENTRY,     MAGNET_EV_KVM_USERSPACE_EXIT,
    MAGNET_EV_KVM_WAKEUP,    MAGNET_EV_KVM_HALT_POLL, MAGNET_EV_NET_DROP,
    MAGNET_EV_VMNET_QUEUE_TX, MAGNET_EV_VMNET_QUEUE_RX, MAGNET_EV_VMNET_VHOST_TX,
    MAGNET_EV_VMNET_VHOST_RX, MAGNET_EV_NET_PKT_XMIT,  MAGNET_EV_NET_PKT_RECV,
};

// Packet capture copies every packet's first bytes into the stream: a
// recording asks for it by name ("net.pkt" or one of its events), never
// through "net" or "all", which mean the journey's cheaper records.
constexpr std::string_view kOptInGroup = "net.pkt";

bool selects(std::string_view name, std::string_view part) {
  if (name_matches(name, kOptInGroup)) return name_matches(name, part) && part.size() >= kOptInGroup.size();
  return part == "all" || name_matches(name, part);
}

}  // namespace

std::span<const event_info> all_events() { return kEvents; }

const event_info* find_event(uint16_t type) {
  for (const auto& e : kEvents)
    if (e.type == type) return &e;
  return nullptr;
}

const event_info* find_event(std::string_view name) {
  for (const auto& e : kEvents)
    if (e.name == name) return &e;
  return nullptr;
}

std::string event_name(uint16_t type) {
  if (auto* e = find_event(type)) return std::string(e->name);
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%04x", type);
  return buf;
}

size_t payload_size(uint16_t kind) {
  switch (kind) {
    case MAGNET_PL_SYSINFO: return sizeof(magnet_sysinfo);
    case MAGNET_PL_LOST: return sizeof(magnet_lost);
    case MAGNET_PL_EVENT_DESC: return sizeof(magnet_event_desc);
    case MAGNET_PL_SOCK: return sizeof(magnet_sock);
    case MAGNET_PL_PKT: return sizeof(magnet_pkt);
    case MAGNET_PL_TCP_STATE: return sizeof(magnet_tcp_state);
    case MAGNET_PL_SCHED_SWITCH: return sizeof(magnet_sched_switch);
    case MAGNET_PL_SCHED_WAKEUP: return sizeof(magnet_sched_wakeup);
    case MAGNET_PL_PROC_FORK: return sizeof(magnet_proc_fork);
    case MAGNET_PL_PROC_EXIT: return sizeof(magnet_proc_exit);
    case MAGNET_PL_BLK: return sizeof(magnet_blk);
    case MAGNET_PL_KVM_EXIT: return sizeof(magnet_kvm_exit);
    case MAGNET_PL_KVM_ENTRY: return sizeof(magnet_kvm_entry);
    case MAGNET_PL_KVM_USERSPACE_EXIT: return sizeof(magnet_kvm_userspace_exit);
    case MAGNET_PL_KVM_WAKEUP: return sizeof(magnet_kvm_wakeup);
    case MAGNET_PL_KVM_HALT_POLL: return sizeof(magnet_kvm_halt_poll);
    case MAGNET_PL_NET_DROP: return sizeof(magnet_net_drop);
    case MAGNET_PL_VMNET_QUEUE: return sizeof(magnet_vmnet_queue);
    case MAGNET_PL_VMNET_VHOST: return sizeof(magnet_vmnet_vhost);
    case MAGNET_PL_APP_ADD: return sizeof(magnet_app_add);
    // The fixed part; the captured bytes follow (hdr.len says how many).
    case MAGNET_PL_PKT_SNAP: return sizeof(magnet_pkt_snap);
    default: return 0;
  }
}

size_t payload_min_size(uint16_t kind) {
  // Minor 0 wrote kvm.entry without the exit fields appended in minor 1;
  // minor 1 sock records without call_ns and vmnet.queue without the IPv4
  // id, both appended in minor 2.
  switch (kind) {
    case MAGNET_PL_KVM_ENTRY: return offsetof(magnet_kvm_entry, exit_ns);
    case MAGNET_PL_SOCK: return offsetof(magnet_sock, call_ns);
    case MAGNET_PL_VMNET_QUEUE: return offsetof(magnet_vmnet_queue, ip_id);
    default: break;
  }
  return payload_size(kind);
}

std::string_view payload_kind_name(uint16_t kind) {
  static constexpr std::string_view names[] = {
      "none",  "sysinfo", "lost",         "event_desc",   "sock",
      "pkt",   "tcp_state", "sched_switch", "sched_wakeup", "proc_fork",
      "proc_exit", "blk", "kvm_exit",     "kvm_entry", "kvm_userspace_exit",
      "kvm_wakeup", "kvm_halt_poll", "net_drop", "vmnet_queue", "vmnet_vhost",
      "app_add", "pkt_snap"};
  static_assert(std::size(names) == MAGNET_PL_COUNT);
  return kind < MAGNET_PL_COUNT ? names[kind] : "unknown";
}

int probe_slot(uint16_t type) {
  for (size_t i = 0; i < kSlotTypes.size(); ++i)
    if (kSlotTypes[i] == type) return static_cast<int>(i);
  return -1;
}

uint16_t probe_type(int slot) {
  return slot >= 0 && slot < MAGNET_NPROBES ? kSlotTypes[slot] : 0;
}

bool name_matches(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return false;
  return name.size() == prefix.size() || name[prefix.size()] == '.';
}

result<std::set<uint16_t>> select_events(std::string_view list) {
  std::set<uint16_t> out;
  while (!list.empty()) {
    auto comma = list.find(',');
    auto part = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (part.empty()) continue;
    if (part.ends_with(".*")) part.remove_suffix(2);
    bool any = false;
    for (uint16_t t : kSlotTypes) {
      auto* e = find_event(t);
      if (selects(e->name, part)) {
        out.insert(t);
        any = true;
      }
    }
    if (!any) {
      std::string known;
      for (uint16_t t : kSlotTypes) known += (known.empty() ? "" : ", ") + event_name(t);
      return error{"unknown probe '" + std::string(part) + "' (known: " + known +
                   "; a prefix such as 'net' or 'net.sock' selects a group)"};
    }
  }
  if (out.empty()) return error{"empty probe list"};
  return out;
}

}  // namespace magnet
