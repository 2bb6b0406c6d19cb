// Every proto/ struct the BPF object uses has, in the object's BTF, exactly
// the members, offsets and sizes C++ sees (Tetragon's alignchecker idea).
#include <bpf/btf.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <string>

#include "magnet/control.h"

namespace {

struct member {
  size_t off, size;
};
using layout = std::map<std::string, member>;

#define M(s, m) {#m, {offsetof(s, m), sizeof(((s*)nullptr)->m)}}

const std::map<std::string, std::pair<size_t, layout>> kStructs = {
    {"magnet_hdr",
     {sizeof(magnet_hdr),
      {M(magnet_hdr, ts_ns), M(magnet_hdr, abstract_id), M(magnet_hdr, tgid), M(magnet_hdr, tid),
       M(magnet_hdr, vm_id), M(magnet_hdr, size), M(magnet_hdr, type), M(magnet_hdr, cpu),
       M(magnet_hdr, len), M(magnet_hdr, flags)}}},
    {"magnet_sock",
     {sizeof(magnet_sock),
      {M(magnet_sock, family), M(magnet_sock, protocol), M(magnet_sock, sport),
       M(magnet_sock, dport), M(magnet_sock, saddr), M(magnet_sock, daddr), M(magnet_sock, call_ns)}}},
    {"magnet_pkt",
     {sizeof(magnet_pkt),
      {M(magnet_pkt, ifindex), M(magnet_pkt, skb_len), M(magnet_pkt, tcp_seq),
       M(magnet_pkt, l3proto), M(magnet_pkt, ip_id), M(magnet_pkt, frag_off),
       M(magnet_pkt, tot_len), M(magnet_pkt, sport), M(magnet_pkt, dport),
       M(magnet_pkt, ip_version), M(magnet_pkt, protocol), M(magnet_pkt, tos), M(magnet_pkt, ttl),
       M(magnet_pkt, tcp_flags), M(magnet_pkt, reserved0), M(magnet_pkt, reserved1),
       M(magnet_pkt, saddr), M(magnet_pkt, daddr)}}},
    {"magnet_tcp_state",
     {sizeof(magnet_tcp_state),
      {M(magnet_tcp_state, family), M(magnet_tcp_state, sport), M(magnet_tcp_state, dport),
       M(magnet_tcp_state, state), M(magnet_tcp_state, ca_state), M(magnet_tcp_state, snd_wnd),
       M(magnet_tcp_state, rcv_wnd), M(magnet_tcp_state, srtt_us), M(magnet_tcp_state, rto_us),
       M(magnet_tcp_state, packets_out), M(magnet_tcp_state, retrans_out),
       M(magnet_tcp_state, snd_ssthresh), M(magnet_tcp_state, snd_cwnd),
       M(magnet_tcp_state, write_seq), M(magnet_tcp_state, copied_seq),
       M(magnet_tcp_state, snd_nxt), M(magnet_tcp_state, snd_una), M(magnet_tcp_state, flags),
       M(magnet_tcp_state, reserved), M(magnet_tcp_state, saddr), M(magnet_tcp_state, daddr)}}},
    {"magnet_sched_switch",
     {sizeof(magnet_sched_switch),
      {M(magnet_sched_switch, prev_tid), M(magnet_sched_switch, next_tid),
       M(magnet_sched_switch, prev_state), M(magnet_sched_switch, prev_prio),
       M(magnet_sched_switch, next_prio), M(magnet_sched_switch, prev_comm),
       M(magnet_sched_switch, next_comm)}}},
    {"magnet_sched_wakeup",
     {sizeof(magnet_sched_wakeup),
      {M(magnet_sched_wakeup, tid), M(magnet_sched_wakeup, target_cpu),
       M(magnet_sched_wakeup, prio), M(magnet_sched_wakeup, reserved),
       M(magnet_sched_wakeup, comm)}}},
    {"magnet_proc_fork",
     {sizeof(magnet_proc_fork),
      {M(magnet_proc_fork, parent_tid), M(magnet_proc_fork, child_tid),
       M(magnet_proc_fork, parent_comm), M(magnet_proc_fork, child_comm)}}},
    {"magnet_proc_exit",
     {sizeof(magnet_proc_exit),
      {M(magnet_proc_exit, exit_code), M(magnet_proc_exit, reserved), M(magnet_proc_exit, comm)}}},
    {"magnet_blk",
     {sizeof(magnet_blk),
      {M(magnet_blk, dev), M(magnet_blk, nr_bytes), M(magnet_blk, sector),
       M(magnet_blk, latency_ns), M(magnet_blk, rwbs), M(magnet_blk, error),
       M(magnet_blk, reserved)}}},
    {"magnet_kvm_exit",
     {sizeof(magnet_kvm_exit),
      {M(magnet_kvm_exit, vcpu_id), M(magnet_kvm_exit, exit_reason), M(magnet_kvm_exit, isa),
       M(magnet_kvm_exit, reserved), M(magnet_kvm_exit, guest_rip), M(magnet_kvm_exit, info1),
       M(magnet_kvm_exit, info2)}}},
    {"magnet_kvm_entry",
     {sizeof(magnet_kvm_entry),
      {M(magnet_kvm_entry, vcpu_id), M(magnet_kvm_entry, reserved),
       M(magnet_kvm_entry, guest_rip), M(magnet_kvm_entry, exit_ns),
       M(magnet_kvm_entry, exit_reason), M(magnet_kvm_entry, isa), M(magnet_kvm_entry, flags)}}},
    {"magnet_kvm_userspace_exit",
     {sizeof(magnet_kvm_userspace_exit),
      {M(magnet_kvm_userspace_exit, vcpu_id), M(magnet_kvm_userspace_exit, reason),
       M(magnet_kvm_userspace_exit, error), M(magnet_kvm_userspace_exit, reserved)}}},
    {"magnet_kvm_wakeup",
     {sizeof(magnet_kvm_wakeup),
      {M(magnet_kvm_wakeup, halt_ns), M(magnet_kvm_wakeup, vcpu_id), M(magnet_kvm_wakeup, waited),
       M(magnet_kvm_wakeup, valid), M(magnet_kvm_wakeup, reserved)}}},
    {"magnet_kvm_halt_poll",
     {sizeof(magnet_kvm_halt_poll),
      {M(magnet_kvm_halt_poll, vcpu_id), M(magnet_kvm_halt_poll, new_ns),
       M(magnet_kvm_halt_poll, old_ns), M(magnet_kvm_halt_poll, grow),
       M(magnet_kvm_halt_poll, reserved)}}},
    {"magnet_net_drop",
     {sizeof(magnet_net_drop),
      {M(magnet_net_drop, location), M(magnet_net_drop, reason), M(magnet_net_drop, ifindex),
       M(magnet_net_drop, protocol), M(magnet_net_drop, reserved), M(magnet_net_drop, reserved2)}}},
    {"magnet_vmnet_queue",
     {sizeof(magnet_vmnet_queue),
      {M(magnet_vmnet_queue, delay_ns), M(magnet_vmnet_queue, in_ifindex),
       M(magnet_vmnet_queue, out_ifindex), M(magnet_vmnet_queue, ip_id), M(magnet_vmnet_queue, reserved),
       M(magnet_vmnet_queue, reserved2)}}},
    {"magnet_vmnet_vhost", {sizeof(magnet_vmnet_vhost), {M(magnet_vmnet_vhost, duration_ns)}}},
    {"magnet_pkt_snap",
     {sizeof(magnet_pkt_snap),
      {M(magnet_pkt_snap, ifindex), M(magnet_pkt_snap, wire_len), M(magnet_pkt_snap, cap_len),
       M(magnet_pkt_snap, l3proto), M(magnet_pkt_snap, mac_len), M(magnet_pkt_snap, reserved)}}},
    {"magnet_lat_stat",
     {sizeof(magnet_lat_stat),
      {M(magnet_lat_stat, count), M(magnet_lat_stat, total_ns), M(magnet_lat_stat, max_ns),
       M(magnet_lat_stat, aux), M(magnet_lat_stat, hist)}}},
    {"magnet_kvm_exit_key",
     {sizeof(magnet_kvm_exit_key),
      {M(magnet_kvm_exit_key, vm_id), M(magnet_kvm_exit_key, tgid), M(magnet_kvm_exit_key, vcpu_id),
       M(magnet_kvm_exit_key, reason), M(magnet_kvm_exit_key, isa)}}},
    {"magnet_vmnet_queue_key",
     {sizeof(magnet_vmnet_queue_key),
      {M(magnet_vmnet_queue_key, vm_id), M(magnet_vmnet_queue_key, dir)}}},
    {"magnet_vm_netdev_key",
     {sizeof(magnet_vm_netdev_key),
      {M(magnet_vm_netdev_key, netns_ino), M(magnet_vm_netdev_key, ifindex)}}},
    {"magnet_probe_ctl",
     {sizeof(magnet_probe_ctl),
      {M(magnet_probe_ctl, mode), M(magnet_probe_ctl, sample_every),
       M(magnet_probe_ctl, sample_ns)}}},
    {"magnet_filter_ctl",
     {sizeof(magnet_filter_ctl),
      {M(magnet_filter_ctl, active), M(magnet_filter_ctl, vm_tagging),
       M(magnet_filter_ctl, cpu_mask), M(magnet_filter_ctl, wakeup_watermark),
       M(magnet_filter_ctl, vm_cost_ns), M(magnet_filter_ctl, vm_burst_ns)}}},
    {"magnet_probe_pcpu",
     {sizeof(magnet_probe_pcpu),
      {M(magnet_probe_pcpu, seen), M(magnet_probe_pcpu, emitted), M(magnet_probe_pcpu, dropped),
       M(magnet_probe_pcpu, first_drop_ns), M(magnet_probe_pcpu, last_drop_ns),
       M(magnet_probe_pcpu, last_emit_ns), M(magnet_probe_pcpu, sample_count),
       M(magnet_probe_pcpu, reserved)}}},
    {"magnet_agg", {sizeof(magnet_agg), {M(magnet_agg, events), M(magnet_agg, bytes)}}},
    {"magnet_vm_pcpu",
     {sizeof(magnet_vm_pcpu),
      {M(magnet_vm_pcpu, credit_ns), M(magnet_vm_pcpu, last_ns), M(magnet_vm_pcpu, quota_lost),
       M(magnet_vm_pcpu, ring_lost)}}},
};

// The structs of the USDT object (kmod/bpf/usdt.bpf.c): the record it writes.
const std::map<std::string, std::pair<size_t, layout>> kUsdtStructs = {
    {"magnet_hdr", kStructs.at("magnet_hdr")},
    {"magnet_app_add",
     {sizeof(magnet_app_add),
      {M(magnet_app_add, event_id), M(magnet_app_add, abstract_id), M(magnet_app_add, value)}}},
};
#undef M

void expect_layouts(const char* obj, const std::map<std::string, std::pair<size_t, layout>>& structs) {
  btf* b = btf__parse_elf(obj, nullptr);
  ASSERT_NE(b, nullptr) << "cannot read BTF from " << obj;
  for (const auto& [name, want] : structs) {
    SCOPED_TRACE(name);
    int id = btf__find_by_name_kind(b, name.c_str(), BTF_KIND_STRUCT);
    ASSERT_GT(id, 0) << "struct missing from the object's BTF";
    const btf_type* t = btf__type_by_id(b, id);
    EXPECT_EQ(t->size, want.first) << "sizeof differs";
    const btf_member* m = btf_members(t);
    size_t seen = 0;
    for (int i = 0; i < btf_vlen(t); ++i, ++m) {
      std::string mname = btf__name_by_offset(b, m->name_off);
      auto it = want.second.find(mname);
      ASSERT_NE(it, want.second.end()) << "BTF member " << mname << " unknown to the C++ table";
      EXPECT_EQ(btf_member_bit_offset(t, i) / 8, it->second.off) << mname;
      EXPECT_EQ(static_cast<size_t>(btf__resolve_size(b, m->type)), it->second.size) << mname;
      ++seen;
    }
    EXPECT_EQ(seen, want.second.size()) << "member count differs";
  }
  btf__free(b);
}

TEST(BtfLayout, ProtoStructsMatchTheCompiledBpfObject) { expect_layouts(MAGNET_BPF_OBJ, kStructs); }

TEST(BtfLayout, AppAddMatchesTheUsdtBpfObject) { expect_layouts(MAGNET_USDT_BPF_OBJ, kUsdtStructs); }

}  // namespace
