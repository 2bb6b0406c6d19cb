// Record builders (and the benchmark's view) shared by the filters tests
// and bench/engine.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "magnet/event.h"
#include "magnet/filters/engine.h"
#include "magnet/trace_file.h"

namespace magnet::filters::testing {

inline void put_addr(uint8_t* dst, const std::string& a) {
  std::memset(dst, 0, 16);
  if (inet_pton(AF_INET, a.c_str(), dst) != 1) inet_pton(AF_INET6, a.c_str(), dst);
}

struct hdr_args {
  uint64_t ts = 0;
  uint16_t type = MAGNET_EV_NET_SOCK_RECV;
  uint32_t vm = 0;
  uint16_t cpu = 0;
  uint32_t tgid = 0, tid = 0;
  uint64_t id = 0;
  int32_t size = 0;
};

inline magnet_hdr hdr(const hdr_args& a) {
  magnet_hdr h{};
  h.ts_ns = a.ts;
  h.type = a.type;
  h.vm_id = a.vm;
  h.cpu = a.cpu;
  h.tgid = a.tgid;
  h.tid = a.tid;
  h.abstract_id = a.id;
  h.size = a.size;
  return h;
}

inline std::vector<uint8_t> sock_rec(const hdr_args& a, const std::string& saddr = "10.0.0.1",
                                     uint16_t sport = 5000, const std::string& daddr = "10.0.0.2",
                                     uint16_t dport = 6000, uint16_t proto = IPPROTO_UDP) {
  magnet_sock s{};
  s.family = saddr.find(':') == std::string::npos ? AF_INET : AF_INET6;
  s.protocol = proto;
  s.sport = sport;
  s.dport = dport;
  put_addr(s.saddr, saddr);
  put_addr(s.daddr, daddr);
  return make_record(hdr(a), s);
}

inline std::vector<uint8_t> pkt_rec(const hdr_args& a, uint32_t ifindex = 3, uint16_t ip_id = 0,
                                    uint32_t tcp_seq = 0, uint8_t proto = IPPROTO_UDP,
                                    uint16_t sport = 5000, uint16_t dport = 6000,
                                    const std::string& saddr = "10.0.0.1",
                                    const std::string& daddr = "10.0.0.2") {
  magnet_pkt p{};
  p.ifindex = ifindex;
  p.ip_id = ip_id;
  p.tcp_seq = tcp_seq;
  p.protocol = proto;
  p.sport = sport;
  p.dport = dport;
  const bool v6 = saddr.find(':') != std::string::npos;
  p.ip_version = v6 ? 6 : 4;
  p.l3proto = v6 ? 0x86dd : 0x0800;
  put_addr(p.saddr, saddr);
  put_addr(p.daddr, daddr);
  return make_record(hdr(a), p);
}

inline std::vector<uint8_t> sched_rec(const hdr_args& a) {
  magnet_sched_switch s{};
  s.prev_tid = a.tid;
  return make_record(hdr(a), s);
}

inline std::vector<uint8_t> kvm_exit_rec(const hdr_args& a, uint32_t vcpu) {
  magnet_kvm_exit k{};
  k.vcpu_id = vcpu;
  return make_record(hdr(a), k);
}

// The per-VM view of the 100-VM benchmark (BM_HundredVms): network
// records, a count window of 1000 events and a 1 s time window, the size
// sketch, group-by connection and vcpu.
inline view_spec hundred_vms_view() {
  view_spec v;
  v.name = "net";
  v.filter = "event == net";
  v.per_vm = true;
  v.windows = {{window_stats::kind::count, 1000, 0}, {window_stats::kind::time, 0, 1'000'000'000}};
  v.group_by = {group_key::connection, group_key::vcpu};
  return v;
}

}  // namespace magnet::filters::testing
