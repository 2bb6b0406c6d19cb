// What a hostile guest got, checked against what the host knows: the e2e
// oracle of docs/guest.md "What a guest may see", written from that text
// and the event ABI (proto/), not from the table the daemon applies
// (lib/src/guest_schema.cc), so that the two can disagree.
//
// Input: the JSON line of `magnet-adversary events` (guest/tools/adversary.cc):
// every record it received (equal records once, with a count), per type
// counts, and every run of 3+ printable characters in any payload.
#pragma once

#include <cstdint>
#include <cstring>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

// The event ABI itself (the e2e programs do not link the project's
// libraries; the structs are included, never copied).
#include "../../proto/magnet/event.h"
#include "../../proto/magnet/flow.h"
#include "../../proto/magnet/view.h"

namespace magnet::e2e {

// What the host side knows, gathered by the test.
struct HostTruth {
  // Names of host tasks (/proc/*/task/*/comm of the daemon's host, and
  // swapper/N) other than vCPU threads: "CPU n/TCG" and "CPU n/KVM" are
  // this VM's own threads' names too (QEMU names every VM's alike), so
  // another VM's vCPU is caught by its tid instead.
  std::set<std::string> names;
  std::set<uint32_t> own_vcpus;           // host tids of this VM's vCPU threads
  std::vector<std::string> foreign_ipv4;  // other VMs' addresses, dotted
  std::set<uint64_t> foreign_flows;       // flow ids (proto/magnet/flow.h) of other VMs' flows
};

// Adds to @t.names the task names in @comms (one per line, as
// `cat /proc/[0-9]*/task/[0-9]*/comm` prints them) and swapper/0..@ncpus-1.
inline void AddHostNames(HostTruth& t, const std::string& comms, int ncpus) {
  static const std::regex vcpu(R"(CPU \d+/(TCG|KVM))");
  std::istringstream in(comms);
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && !std::regex_match(l, vcpu)) t.names.insert(l);
  for (int i = 0; i < ncpus; ++i) t.names.insert("swapper/" + std::to_string(i));
}

// Host tids of the threads named "CPU n/..." in `grep -H . /proc/PID/task/*/comm` output.
inline std::set<uint32_t> VcpuTids(const std::string& grep_out) {
  static const std::regex line(R"(/proc/\d+/task/(\d+)/comm:CPU \d+/(TCG|KVM))");
  std::set<uint32_t> tids;
  std::istringstream in(grep_out);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line)) tids.insert(static_cast<uint32_t>(std::stoul(m[1])));
  }
  return tids;
}

inline uint64_t UdpFlowId(const std::string& saddr, uint16_t sport, const std::string& daddr, uint16_t dport) {
  __u8 s[16] = {}, d[16] = {};
  unsigned a, b, c, e;
  if (std::sscanf(saddr.c_str(), "%u.%u.%u.%u", &a, &b, &c, &e) == 4) s[0] = a, s[1] = b, s[2] = c, s[3] = e;
  if (std::sscanf(daddr.c_str(), "%u.%u.%u.%u", &a, &b, &c, &e) == 4) d[0] = a, d[1] = b, d[2] = c, d[3] = e;
  return magnet_flow_id(s, d, sport, dport, 17);
}

// The types a guest may get (docs/guest.md's table, "sent to a guest").
inline bool GuestMayGet(uint16_t type) {
  switch (type) {
    case MAGNET_EV_LOST:
    case MAGNET_EV_NET_DEV_XMIT:
    case MAGNET_EV_NET_DEV_RECV:
    case MAGNET_EV_NET_DROP:
    case MAGNET_EV_SCHED_SWITCH:
    case MAGNET_EV_SCHED_WAKEUP:
    case MAGNET_EV_BLK_ISSUE:
    case MAGNET_EV_BLK_COMPLETE:
    case MAGNET_EV_KVM_EXIT:
    case MAGNET_EV_KVM_ENTRY:
    case MAGNET_EV_KVM_USERSPACE_EXIT:
    case MAGNET_EV_KVM_WAKEUP:
    case MAGNET_EV_KVM_HALT_POLL:
    case MAGNET_EV_VMNET_QUEUE_TX:
    case MAGNET_EV_VMNET_QUEUE_RX:
    case MAGNET_EV_VMNET_VHOST_TX:
    case MAGNET_EV_VMNET_VHOST_RX:
      return true;
    default:
      return false;
  }
}

inline std::vector<uint8_t> FromHex(const std::string& h) {
  std::vector<uint8_t> b;
  for (size_t i = 0; i + 1 < h.size(); i += 2) b.push_back(static_cast<uint8_t>(std::stoul(h.substr(i, 2), nullptr, 16)));
  return b;
}

// 8-byte payload fields that hold the guest's own addresses: its RIP (and,
// for some SVM exits, the next RIP in info2) are the guest kernel's, which
// it knows; no host address is ever kept in them.
inline bool GuestOwnAddress(uint16_t type, size_t off) {
  if (type == MAGNET_EV_KVM_EXIT)
    return off == offsetof(magnet_kvm_exit, guest_rip) || off == offsetof(magnet_kvm_exit, info2);
  return type == MAGNET_EV_KVM_ENTRY && off == offsetof(magnet_kvm_entry, guest_rip);
}

inline uint32_t U32(const std::vector<uint8_t>& p, size_t off) {
  uint32_t v = 0;
  if (off + 4 <= p.size()) std::memcpy(&v, p.data() + off, 4);
  return v;
}

// Every leak in one received record, as lines naming it.
inline void RecordLeaks(const nlohmann::json& r, const HostTruth& t, std::vector<std::string>& out) {
  const uint16_t type = r.value("type", 0);
  const std::string what = r.value("name", "?") + " " + r.dump().substr(0, 400);
  for (const char* f : {"vm_id", "tgid", "tid", "cpu"})
    if (r.value(f, 0u) != 0) out.push_back(std::string("header ") + f + " not zero: " + what);
  const auto p = FromHex(r.value("payload", ""));
  // Task ids: none but this VM's vCPU threads (the schema zeroes even those).
  std::vector<size_t> tid_offs;
  if (type == MAGNET_EV_SCHED_SWITCH)
    tid_offs = {offsetof(magnet_sched_switch, prev_tid), offsetof(magnet_sched_switch, next_tid)};
  if (type == MAGNET_EV_SCHED_WAKEUP) tid_offs = {offsetof(magnet_sched_wakeup, tid)};
  for (size_t off : tid_offs)
    if (uint32_t tid = U32(p, off); tid != 0 && !t.own_vcpus.count(tid))
      out.push_back("host tid " + std::to_string(tid) + " (not a vCPU of this VM): " + what);
  // Kernel addresses: any 8-byte field in the kernel half (0xffff8...).
  for (size_t off = 0; off + 8 <= p.size(); off += 8) {
    uint64_t w;
    std::memcpy(&w, p.data() + off, 8);
    if (w >= 0xffff800000000000ull && !GuestOwnAddress(type, off)) {
      char b[64];
      std::snprintf(b, sizeof b, "kernel address 0x%016llx at payload offset %zu: ", static_cast<unsigned long long>(w), off);
      out.push_back(b + what);
    }
  }
  // Another VM's flows: its addresses in any payload, its flow ids as the id.
  for (const auto& a : t.foreign_ipv4) {
    unsigned x[4];
    if (std::sscanf(a.c_str(), "%u.%u.%u.%u", &x[0], &x[1], &x[2], &x[3]) != 4) continue;
    const uint8_t ip[4] = {uint8_t(x[0]), uint8_t(x[1]), uint8_t(x[2]), uint8_t(x[3])};
    for (size_t i = 0; i + 4 <= p.size(); ++i)
      if (std::memcmp(p.data() + i, ip, 4) == 0) out.push_back("another VM's address " + a + ": " + what);
  }
  auto id = FromHex(r.value("abstract_id", ""));
  uint64_t aid = 0;
  if (id.size() == 8) std::memcpy(&aid, id.data(), 8);
  if (t.foreign_flows.count(aid)) out.push_back("another VM's flow id: " + what);
}

// Every leak in what the adversary got; empty: none.
inline std::vector<std::string> GuestLeaks(const nlohmann::json& adv, const HostTruth& t) {
  // The shortest lines first: names and types, then record by record.
  std::vector<std::string> out;
  for (const auto& s : adv["strings"]) {
    const std::string str = s.get<std::string>();
    if (t.names.count(str)) out.push_back("host task name \"" + str + "\"");
  }
  for (const auto& [name, v] : adv["types"].items())
    if (!GuestMayGet(v.value("type", 0)))
      out.push_back("a type a guest may not get: " + name + " (" + std::to_string(v.value("records", 0)) + " records)");
  for (const auto& r : adv["records"]) RecordLeaks(r, t, out);
  return out;
}

}  // namespace magnet::e2e
