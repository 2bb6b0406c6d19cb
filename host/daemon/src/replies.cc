// The query socket's replies (magnet top, views, vms, kvm, stats, sessions,
// mark): JSON from what the daemon holds, each VM found by name, UUID or id
// (magnet/admin/vm_key.h: a key that means two VMs is an error).
#include <algorithm>
#include <array>

#include "host_daemon.h"
#include "magnet/admin/request.h"
#include "magnet/admin/vm_key.h"
#include "magnet/capture/latency.h"
#include "magnet/events.h"
#include "magnet/trace_file.h"

namespace magnet::host {

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string host_daemon::handle(const std::string& req, const admin_peer& peer) {
  // The grammar lives in admin_request.cc, the parser the fuzz target
  // `admin_request` runs; here only what the daemon knows: VMs and rights.
  const admin_request r = parse_admin_request(req);
  using k = admin_request::kind;
  switch (r.k) {
    case k::top: return "ok " + dump(top_json());
    case k::vms: return "ok " + dump(vms_json(peer.host_internals));
    case k::sessions: return "ok " + dump(sessions_json(peer.host_internals));
    case k::kvm:
    case k::stats: {
      auto vm = lookup_vm(r.vm);
      if (!vm) return "error " + vm.err().message;
      return "ok " + dump(r.k == k::kvm ? kvm_json((*vm)->vm_id) : stats_json((*vm)->vm_id));
    }
    case k::views: {
      if (r.vm.empty()) return "ok " + filters::to_json(eng_.snapshot());
      auto vm = lookup_vm(r.vm);
      if (!vm) return "error " + vm.err().message;
      // Only that VM's instances: the same data the VM itself would receive.
      return "ok " + filters::to_json(eng_.snapshot_vm((*vm)->vm_id));
    }
    case k::mark: {
      if (!peer.may_write) return "error mark changes what a VM receives: root only";
      auto vm = lookup_vm(r.vm);
      if (!vm) return "error " + vm.err().message;
      if (!r.value) return admin_bad_mark_value_error(r);
      // The change's own moment (CLOCK_MONOTONIC), for a latency probe on this host's clock.
      const uint64_t at = monotonic_ns();
      hub_.set_marker((*vm)->vm_id, *r.value, at);
      return "ok {\"changed_ns\":" + std::to_string(at) + "}";
    }
    case k::unknown: break;
  }
  return admin_unknown_request_error(r);
}

result<const vm_info*> host_daemon::lookup_vm(const std::string& key) const {
  std::vector<vm_ref> refs;
  std::vector<const vm_info*> by;
  for (const auto& [id, vm] : vms_) {
    refs.push_back({id, vm.name, vm.uuid});
    by.push_back(&vm);
  }
  auto i = find_vm_by_key(refs, key);
  if (!i) return i.err();
  return by[*i];
}

const vm_info* host_daemon::find_vm(const std::string& key) const {
  auto vm = lookup_vm(key);
  return vm ? *vm : nullptr;
}

ojson host_daemon::kvm_json(uint32_t vm) const {
  ojson exits = ojson::array();
  // From the stats delivered to the VM (the last second).
  std::map<uint32_t, std::array<double, 3>> by;
  for (const auto& v : metrics_.stats(vm)) {
    if (!v.valid()) continue;
    if (v.id == MAGNET_STAT_KVM_REASON_EXITS) by[v.index][0] = v.value;
    if (v.id == MAGNET_STAT_KVM_REASON_TIME) by[v.index][1] = v.value;
    if (v.id == MAGNET_STAT_KVM_REASON_MEAN) by[v.index][2] = v.value;
  }
  std::vector<std::pair<uint32_t, std::array<double, 3>>> rows(by.begin(), by.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second[1] > b.second[1]; });
  for (const auto& [idx, f] : rows) {
    uint32_t isa = idx >> 24, code = idx & 0xffffff;
    std::string name = idx == MAGNET_VIEW_REASON_HALT_POLLED  ? "halt(polled)"
                       : idx == MAGNET_VIEW_REASON_HALT_SLEPT ? "halt(slept)"
                                                              : kvm_exit_reason_name(isa, code);
    exits.push_back(ojson{{"reason", name},
                          {"code", idx >= MAGNET_VIEW_REASON_HALT_POLLED ? 0 : code},
                          {"isa", idx >= MAGNET_VIEW_REASON_HALT_POLLED ? 0 : isa},
                          {"exits_per_s", f[0]},
                          {"mean_us", f[2]},
                          {"time_frac", f[1]}});
  }
  return ojson{{"vm", vm}, {"exits", exits}};
}

// What a read-only peer sees of a VM, per field: its magnet id, name and
// UUID (the keys of every request), libvirt's domain id (what `virsh -r
// list` shows anyone allowed to read libvirt), its threads' roles and vCPU
// indexes and its taps' names (what `ip link` shows any local user in that
// namespace).  Root only: QEMU's PID and the threads' ids (targets for
// signals, ptrace and /proc), the taps' ifindexes (numbers in QEMU's
// network namespace, not necessarily the peer's), the cgroup paths and
// the vsock CID (how the host reaches into the guest).
ojson host_daemon::vms_json(bool host_internals) const {
  ojson a = ojson::array();
  for (const auto& [id, vm] : vms_) {
    ojson threads = ojson::array(), taps = ojson::array();
    for (const auto& t : vm.threads) {
      ojson j{{"role", t.role}, {"vcpu", t.vcpu}};
      if (host_internals) j["tid"] = t.tid;
      threads.push_back(std::move(j));
    }
    for (const auto& t : vm.taps) {
      ojson j{{"name", t.name}};
      if (host_internals) j["ifindex"] = t.ifindex;
      taps.push_back(std::move(j));
    }
    ojson v{{"vm", id}, {"name", vm.name}, {"uuid", vm.uuid}, {"libvirt_id", vm.libvirt_id}};
    if (host_internals) {
      v["qemu_pid"] = vm.qemu_pid;
      v["vsock_cid"] = vm.vsock_cid;
    }
    v["threads"] = std::move(threads);
    v["taps"] = std::move(taps);
    if (host_internals) v["cgroups"] = vm.cgroups;
    a.push_back(std::move(v));
  }
  return a;
}

ojson host_daemon::top_json() const {
  ojson vms = ojson::array();
  for (const auto& [id, vm] : vms_) {
    int nvcpu = 0;
    for (const auto& t : vm.threads) nvcpu += t.role == "vcpu";
    auto v = [&](uint16_t sid, uint32_t index = 0) { return metrics_.value(id, sid, index); };
    const auto w = vm_watts(id);  // null: the host has no power source
    ojson per = ojson::array();
    for (const auto& s : metrics_.stats(id))
      if (s.id == MAGNET_STAT_VCPU_RUN)
        per.push_back(ojson{{"vcpu", s.index},
                            {"run", v(MAGNET_STAT_VCPU_RUN, s.index)},
                            {"wait", v(MAGNET_STAT_VCPU_WAIT, s.index)},
                            {"halt", v(MAGNET_STAT_VCPU_HALT, s.index)}});
    vms.push_back(ojson{{"vm", id},
                        {"name", vm.name},
                        {"vcpus", nvcpu},
                        {"vcpu_run", v(MAGNET_STAT_VCPU_RUN_SUM)},
                        {"vcpu_wait", v(MAGNET_STAT_VCPU_WAIT_SUM)},
                        {"vcpu_halt", v(MAGNET_STAT_VCPU_HALT_SUM)},
                        {"exits_per_s", v(MAGNET_STAT_KVM_EXITS)},
                        {"exit_time", v(MAGNET_STAT_KVM_EXIT_TIME)},
                        {"rx_mbps", v(MAGNET_STAT_TAP_RX_BPS) / 1e6},
                        {"tx_mbps", v(MAGNET_STAT_TAP_TX_BPS) / 1e6},
                        {"drops_per_s", v(MAGNET_STAT_DROPS_TAP)},
                        {"queue_tx_us", v(MAGNET_STAT_QUEUE_TX_MEAN)},
                        {"queue_tx_p99_us", v(MAGNET_STAT_QUEUE_TX_P99)},
                        {"queue_tx_per_s", v(MAGNET_STAT_QUEUE_TX_PPS)},
                        {"queue_rx_us", v(MAGNET_STAT_QUEUE_RX_MEAN)},
                        {"queue_rx_p99_us", v(MAGNET_STAT_QUEUE_RX_P99)},
                        {"queue_rx_per_s", v(MAGNET_STAT_QUEUE_RX_PPS)},
                        {"lost_quota", losses_.count(id) ? losses_.at(id).first : 0},
                        {"lost_ring", losses_.count(id) ? losses_.at(id).second : 0},
                        {"power_watts", w ? ojson(*w) : ojson(nullptr)},
                        {"per_vcpu", per}});
  }
  // --sample: the events whose streamed records the kernel keeps 1 in N.
  ojson sampled = ojson::object();
  for (const auto& [t, n] : sampling_)
    if (probes_.count(t)) sampled[event_name(t)] = n;
  // at_ms: the tick these figures are from (monotonic), as the dashboard's
  // samples carry it: a reader can tell the same tick from the next.
  return ojson{{"at_ms", metrics_.sampled_at() / 1000000}, {"lost", cons_->lost()}, {"libvirt", reg_.connected()},
               {"sample_every", sampled}, {"vms", vms}};
}

// What is delivered to the VM, by name (no per-connection values).
ojson host_daemon::stats_json(uint32_t vm) const {
  ojson a = ojson::array();
  for (const auto& s : vm_stats(vm)) {
    const auto* info = view::find_stat(s.id);
    a.push_back(ojson{{"name", info ? std::string(info->name) : std::to_string(s.id)},
                      {"index", s.index},
                      {"value", s.value},
                      {"valid", s.valid()},
                      {"window_us", s.window_us}});
  }
  return ojson{{"vm", vm}, {"at_ns", metrics_.sampled_at()}, {"stats", a}};
}

// The peer's CID, as in vms_json, is root's only.
ojson host_daemon::sessions_json(bool host_internals) const {
  ojson a = ojson::array();
  for (const auto& s : hub_.sessions()) {
    auto it = vms_.find(s.subject);
    ojson j{{"vm", s.subject},
            {"name", it != vms_.end() ? it->second.name : ""},
            {"transport", s.kind_name}};
    if (host_internals) j["cid"] = s.peer;
    j.update(ojson{{"hello", s.hello},
                   {"subscribed", s.subscribed},
                   {"period_ms", s.period_ms},
                   {"mode", s.mode},
                   {"frames", s.frames},
                   {"bytes", s.bytes},
                   {"stats_replaced", s.stats_replaced},
                   {"events_lost", s.events_lost},
                   {"label", s.label}});
    a.push_back(std::move(j));
  }
  return ojson{{"vsock", hub_.listening_vsock()}, {"sessions", a}};
}

}  // namespace magnet::host
