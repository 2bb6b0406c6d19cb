// Private: hot-path access to the payload fields the predicate language and
// the engine use, without the catalogue's linear lookups.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "magnet/event.h"
#include "magnet/events.h"

namespace magnet::filters {

// Event type -> payload kind, compiled from the X-macro (a switch, so a new
// event in proto/ is picked up without edits here).
constexpr uint16_t kind_of(uint16_t type) {
  switch (type) {
#define MAGNET_X_KIND(sym, id, name, pl) \
  case id: return pl;
    MAGNET_EVENTS(MAGNET_X_KIND)
#undef MAGNET_X_KIND
    default: return MAGNET_PL_NONE;
  }
}

template <class T>
inline T load_at(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A record's payload, typed by its event.  Fields a payload lacks (or that a
// truncated record cannot hold) report absent through the has_* calls.
class payload_view {
 public:
  explicit payload_view(const uint8_t* rec) : rec_(rec) {
    uint16_t len = load_at<uint16_t>(rec + offsetof(magnet_hdr, len));
    uint16_t k = kind_of(load_at<uint16_t>(rec + offsetof(magnet_hdr, type)));
    size_t need = sizeof(magnet_hdr);
    switch (k) {
      case MAGNET_PL_SOCK:
      case MAGNET_PL_PKT:
      case MAGNET_PL_TCP_STATE:
      case MAGNET_PL_NET_DROP: need += payload_min_size(k); break;  // what any minor writes
      default: k = MAGNET_PL_NONE; break;
    }
    kind_ = len >= need ? k : static_cast<uint16_t>(MAGNET_PL_NONE);
  }

  uint16_t kind() const { return kind_; }
  // sock, pkt and tcp_state payloads describe a flow (addresses, ports,
  // protocol); pkt and net_drop payloads name a device.
  bool has_ports() const { return has_flow(); }
  bool has_addrs() const { return has_flow(); }
  bool has_proto() const { return has_flow(); }
  bool has_ifindex() const { return kind_ == MAGNET_PL_PKT || kind_ == MAGNET_PL_NET_DROP; }
  bool is_pkt() const { return kind_ == MAGNET_PL_PKT; }

  uint16_t sport() const {
    switch (kind_) {
      case MAGNET_PL_SOCK: return get<uint16_t>(offsetof(magnet_sock, sport));
      case MAGNET_PL_PKT: return get<uint16_t>(offsetof(magnet_pkt, sport));
      default: return get<uint16_t>(offsetof(magnet_tcp_state, sport));
    }
  }
  uint16_t dport() const {
    switch (kind_) {
      case MAGNET_PL_SOCK: return get<uint16_t>(offsetof(magnet_sock, dport));
      case MAGNET_PL_PKT: return get<uint16_t>(offsetof(magnet_pkt, dport));
      default: return get<uint16_t>(offsetof(magnet_tcp_state, dport));
    }
  }
  // tcp_state records describe TCP sockets: the protocol is implied.
  uint16_t proto() const {
    switch (kind_) {
      case MAGNET_PL_SOCK: return get<uint16_t>(offsetof(magnet_sock, protocol));
      case MAGNET_PL_PKT: return get<uint8_t>(offsetof(magnet_pkt, protocol));
      default: return IPPROTO_TCP;
    }
  }
  const uint8_t* saddr() const {
    switch (kind_) {
      case MAGNET_PL_SOCK: return pl() + offsetof(magnet_sock, saddr);
      case MAGNET_PL_PKT: return pl() + offsetof(magnet_pkt, saddr);
      default: return pl() + offsetof(magnet_tcp_state, saddr);
    }
  }
  const uint8_t* daddr() const {
    switch (kind_) {
      case MAGNET_PL_SOCK: return pl() + offsetof(magnet_sock, daddr);
      case MAGNET_PL_PKT: return pl() + offsetof(magnet_pkt, daddr);
      default: return pl() + offsetof(magnet_tcp_state, daddr);
    }
  }
  // 4 or 6 (0 when the payload has no addresses).
  int ip_version() const {
    switch (kind_) {
      case MAGNET_PL_SOCK: return get<uint16_t>(offsetof(magnet_sock, family)) == AF_INET6 ? 6 : 4;
      case MAGNET_PL_PKT: return get<uint16_t>(offsetof(magnet_pkt, l3proto)) == 0x86dd ? 6 : 4;
      case MAGNET_PL_TCP_STATE:
        return get<uint16_t>(offsetof(magnet_tcp_state, family)) == AF_INET6 ? 6 : 4;
      default: return 0;
    }
  }
  uint32_t ifindex() const {
    return kind_ == MAGNET_PL_NET_DROP ? get<uint32_t>(offsetof(magnet_net_drop, ifindex))
                                       : get<uint32_t>(offsetof(magnet_pkt, ifindex));
  }
  uint16_t ip_id() const { return get<uint16_t>(offsetof(magnet_pkt, ip_id)); }
  uint32_t tcp_seq() const { return get<uint32_t>(offsetof(magnet_pkt, tcp_seq)); }

 private:
  bool has_flow() const {
    return kind_ == MAGNET_PL_SOCK || kind_ == MAGNET_PL_PKT || kind_ == MAGNET_PL_TCP_STATE;
  }
  const uint8_t* pl() const { return rec_ + sizeof(magnet_hdr); }
  template <class T>
  T get(size_t off) const { return load_at<T>(pl() + off); }
  const uint8_t* rec_;
  uint16_t kind_;
};

}  // namespace magnet::filters
