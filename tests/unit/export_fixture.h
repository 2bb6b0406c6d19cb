// A trace with known records for the export tests (export_*_test.cc): two
// VMs with vCPU switches and KVM exits, one UDP flow from a host process to
// VM 1 whose two datagrams cross the socket, transport, IP and device layers
// and VM 1's tap, and tap traffic of both VMs in three 100 ms bins.
#pragma once

#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "magnet/event.h"
#include "magnet/trace_file.h"

namespace magnet::test {

constexpr uint64_t kStart = 1'000'000'000;  // monotonic ns at the recording's start
constexpr int64_t kRealtimeOffset = 1'700'000'000'000'000'000;  // 2023-11-14 22:13:20 UTC
constexpr uint64_t kFlow = 0x5eedf10e0000abcdull;               // the UDP flow's id
constexpr uint32_t kTapIfindex = 9, kBridgeIfindex = 4;

inline magnet_hdr hdr(uint16_t type, uint64_t ts_us, uint16_t cpu, uint32_t vm, uint32_t tgid,
                      uint32_t tid, int32_t size = 0, uint64_t id = 0, uint16_t flags = 0) {
  magnet_hdr h{};
  h.type = type;
  h.ts_ns = kStart + ts_us * 1000;
  h.cpu = cpu;
  h.vm_id = vm;
  h.tgid = tgid;
  h.tid = tid;
  h.size = size;
  h.abstract_id = id;
  h.flags = flags;
  return h;
}

inline std::vector<uint8_t> sched_switch(uint64_t ts_us, uint16_t cpu, uint32_t vm,
                                         uint32_t prev, const char* prev_comm, uint32_t next,
                                         const char* next_comm) {
  magnet_sched_switch s{};
  s.prev_tid = prev;
  s.next_tid = next;
  s.next_prio = 120;
  std::strncpy(s.prev_comm, prev_comm, sizeof s.prev_comm - 1);
  std::strncpy(s.next_comm, next_comm, sizeof s.next_comm - 1);
  return make_record(hdr(MAGNET_EV_SCHED_SWITCH, ts_us, cpu, vm, 0, 0), s);
}

inline std::vector<uint8_t> kvm_entry(uint64_t ts_us, uint16_t cpu, uint32_t vm, uint32_t tgid,
                                      uint32_t tid, uint32_t vcpu, uint64_t exit_ns = 0,
                                      uint32_t exit_reason = 0) {
  magnet_kvm_entry e{};
  e.vcpu_id = vcpu;
  e.exit_ns = exit_ns;
  e.exit_reason = exit_reason;
  e.isa = 1;
  return make_record(hdr(MAGNET_EV_KVM_ENTRY, ts_us, cpu, vm, tgid, tid, 0, vcpu), e);
}

inline std::vector<uint8_t> kvm_exit(uint64_t ts_us, uint16_t cpu, uint32_t vm, uint32_t tgid,
                                     uint32_t tid, uint32_t vcpu, uint32_t reason) {
  magnet_kvm_exit e{};
  e.vcpu_id = vcpu;
  e.exit_reason = reason;
  e.isa = 1;
  return make_record(hdr(MAGNET_EV_KVM_EXIT, ts_us, cpu, vm, tgid, tid, 0, vcpu), e);
}

inline magnet_pkt udp_pkt(uint16_t ip_id, uint32_t ifindex) {
  magnet_pkt p{};
  p.ifindex = ifindex;
  p.skb_len = 1500;
  p.l3proto = 0x0800;
  p.ip_id = ip_id;
  p.tot_len = 1500;
  p.sport = 5000;
  p.dport = 6000;
  p.ip_version = 4;
  p.protocol = 17;
  p.ttl = 64;
  p.saddr[0] = 10, p.saddr[3] = 1;
  p.daddr[0] = 10, p.daddr[2] = 1, p.daddr[3] = 2;
  return p;
}

// The layers one datagram crosses from the sender's socket into VM 1, in
// order (event ids), with its ip id.
inline std::vector<std::vector<uint8_t>> datagram(uint64_t ts_us, uint16_t ip_id) {
  std::vector<std::vector<uint8_t>> v;
  magnet_sock s{};
  s.family = 2;
  s.protocol = 17;
  s.sport = 5000;
  s.dport = 6000;
  s.saddr[0] = 10, s.saddr[3] = 1;
  s.daddr[0] = 10, s.daddr[2] = 1, s.daddr[3] = 2;
  v.push_back(make_record(
      hdr(MAGNET_EV_NET_SOCK_SEND, ts_us, 2, 0, 500, 501, 1472, kFlow, MAGNET_RF_UDP), s));
  v.push_back(make_record(
      hdr(MAGNET_EV_NET_L4_SEND, ts_us + 2, 2, 0, 500, 501, 1480, kFlow, MAGNET_RF_UDP),
      udp_pkt(ip_id, 0)));
  v.push_back(make_record(hdr(MAGNET_EV_NET_IP_SEND, ts_us + 4, 2, 0, 500, 501, 1500, kFlow),
                          udp_pkt(ip_id, 0)));
  v.push_back(make_record(hdr(MAGNET_EV_NET_DEV_XMIT, ts_us + 6, 2, 0, 500, 501, 1514, kFlow),
                          udp_pkt(ip_id, kBridgeIfindex)));
  // The host's tap of VM 1: the guest receives it (tap rx) ...
  v.push_back(make_record(hdr(MAGNET_EV_NET_DEV_XMIT, ts_us + 9, 2, 1, 0, 0, 1514, kFlow),
                          udp_pkt(ip_id, kTapIfindex)));
  // ... after this long in the host.
  magnet_vmnet_queue q{};
  q.delay_ns = 3000;
  q.in_ifindex = kBridgeIfindex;
  q.out_ifindex = kTapIfindex;
  v.push_back(make_record(hdr(MAGNET_EV_VMNET_QUEUE_RX, ts_us + 9, 2, 1, 0, 0, 1514, kFlow), q));
  return v;
}

inline std::vector<std::vector<uint8_t>> fixture_records() {
  std::vector<std::vector<uint8_t>> v;
  auto add = [&](std::vector<uint8_t> r) { v.push_back(std::move(r)); };
  // VM 1: QEMU 1000, vCPU 0 = thread 1001, vCPU 1 = 1002; VM 2: QEMU 2000,
  // vCPU 0 = 2001.
  add(sched_switch(10, 0, 1, 0, "swapper/0", 1001, "CPU 0/KVM"));
  add(kvm_entry(20, 0, 1, 1000, 1001, 0));
  add(sched_switch(30, 1, 2, 0, "swapper/1", 2001, "CPU 0/KVM"));
  add(kvm_entry(40, 1, 2, 2000, 2001, 0, 5000, 30));  // ends an I/O exit of 5 us
  add(kvm_exit(50, 0, 1, 1000, 1001, 0, 12));          // hlt
  add(kvm_entry(80, 0, 1, 1000, 1001, 0, 30000, 12));
  add(sched_switch(100, 0, 1, 1001, "CPU 0/KVM", 1002, "CPU 1/KVM"));
  add(kvm_entry(110, 0, 1, 1000, 1002, 1));
  for (auto& r : datagram(200, 0x0101)) add(std::move(r));
  for (auto& r : datagram(400, 0x0102)) add(std::move(r));
  // Tap bytes: VM 1 receives 1000 more in bin 1 and sends 500 in bin 2;
  // VM 2 sends 200 in bin 0.
  add(make_record(hdr(MAGNET_EV_NET_DEV_XMIT, 150'000, 1, 1, 0, 0, 1000, 0x77),
                  udp_pkt(7, kTapIfindex)));
  add(make_record(hdr(MAGNET_EV_NET_DEV_RECV, 250'000, 1, 1, 0, 0, 500, 0x78),
                  udp_pkt(8, kTapIfindex)));
  add(make_record(hdr(MAGNET_EV_NET_DEV_RECV, 50'000, 1, 2, 0, 0, 200, 0x79),
                  udp_pkt(9, kTapIfindex + 1)));
  return v;
}

inline magnet_sysinfo fixture_sysinfo() {
  magnet_sysinfo si = local_sysinfo();
  si.realtime_offset_ns = kRealtimeOffset;
  si.start_ts_ns = kStart;
  std::memset(si.hostname, 0, sizeof si.hostname);
  std::strcpy(si.hostname, "labhost");
  return si;
}

// Writes the fixture (or @records) as a trace file; removes it at the end.
struct fixture_trace {
  std::string path;
  explicit fixture_trace(const std::vector<std::vector<uint8_t>>& records = fixture_records(),
                         const std::string& tag = "t") {
    path = "/tmp/magnet-export-" + std::to_string(getpid()) + "-" + tag + ".mtr";
    std::set<uint16_t> types;
    for (const auto& r : records) types.insert(reinterpret_cast<const magnet_hdr*>(r.data())->type);
    auto w = trace_writer::create(path, fixture_sysinfo(), types);
    for (const auto& r : records) (void)w->append(r);
    (void)w->close();
  }
  ~fixture_trace() { unlink(path.c_str()); }
};

}  // namespace magnet::test
