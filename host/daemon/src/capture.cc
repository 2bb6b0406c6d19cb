// The daemon's inputs: its views, the capture core and its ring, and the
// registry's VMs, which it tags in the kernel and hands to the engine, the
// vCPU accounting and the delivery hub.
#include <sys/random.h>

#include "host_daemon.h"
#include "magnet/events.h"
#include "magnet/filters/config.h"
#include "magnet/log.h"
#include "magnet/registry/kernel_tags.h"

namespace magnet::host {

namespace asio = boost::asio;

namespace {

uint64_t random64() {
  uint64_t v = 0;
  while (getrandom(&v, sizeof v, 0) != sizeof v) {
  }
  return v;
}

// A vsock peer's CID is checked with the registry at accept: a CID moved
// to another VM since the hub's last update is not trusted.
deliver_options with_cid_check(deliver_options d, const registry& r) {
  d.cid_owner = [&r](uint32_t cid) { return r.cid_owner(cid); };
  return d;
}

}  // namespace

host_daemon::host_daemon(const daemon_options& o)
    : opt_(o), reg_(o.uri, *this), hub_(io_, with_cid_check(o.delivery, reg_)) {}

void host_daemon::vm_changed(const vm_info& vm) {
  tag_vm_in_kernel(*cap_, vm);
  asio::post(io_, [this, vm] {
    auto old = vms_.find(vm.vm_id);
    if (old == vms_.end() || old->second.qemu_pid != vm.qemu_pid) {
      log_notice("magnet-host: [vm.up] " + vm.name + " id " + std::to_string(vm.vm_id) +
                      " qemu pid " + std::to_string(vm.qemu_pid));
      // A new process is a new identity: a new session for its guest.
      sessions_[vm.vm_id] = random64();
    }
    vms_[vm.vm_id] = vm;
    eng_.add_vm(vm.vm_id);
    vcpus_.remove_vm(vm.vm_id);
    for (const auto& t : vm.threads)
      if (t.role == "vcpu") vcpus_.add_thread(t.tid, vm.vm_id, t.vcpu);
    power_threads(vm);
    vms_changed();
  });
}

void host_daemon::vm_gone(uint32_t vm_id) {
  (void)cap_->untag_vm(vm_id);
  asio::post(io_, [this, vm_id] {
    if (!vms_.count(vm_id)) return;
    log_notice("magnet-host: [vm.down] id " + std::to_string(vm_id));
    vms_.erase(vm_id);
    sessions_.erase(vm_id);
    eng_.remove_vm(vm_id);
    vcpus_.remove_vm(vm_id);
    helpers_.forget(vm_id);
    vms_changed();
  });
}

status host_daemon::load_views() {
  result<std::vector<filters::view_spec>> specs =
      opt_.views_path.empty() ? filters::parse_views(kDefaultViews)
                              : filters::load_views(opt_.views_path);
  if (!specs) return specs.err();
  filters::engine fresh;
  // Before the views: each takes the rate of what the kernel streams it.
  fresh.set_kernel_sampling(sampling_);
  if (auto s = filters::add_views(fresh, *specs); !s) return s;
  for (const auto& [id, vm] : vms_) fresh.add_vm(id);
  eng_ = std::move(fresh);
  return {};
}

status host_daemon::setup_capture() {
  auto types = select_events(opt_.probes);
  if (!types) return types.err();
  capture_options co;
  co.probes = *types;
  co.ring_bytes = opt_.ring_bytes;
  auto c = capture::open(co);
  if (!c) return c.err();
  cap_ = std::move(*c);
  cap_->set_vm_quota(opt_.vm_quota, 0.1);
  for (uint16_t t : *types) {
    const probe_plan* p = cap_->plan_for(t);
    if (!p || p->chosen < 0) {
      log_warning("magnet-host: [probe.unavailable] " + event_name(t) + " cannot attach here");
      continue;
    }
    // Everything is VM-only: the host daemon serves per-VM figures.  Every
    // event is counted in kernel; events are streamed for the engine, the
    // vCPU accounting (sched), the per-VM metrics and the guests' events.
    uint32_t mode = MAGNET_MODE_AGGREGATE | MAGNET_MODE_VM_ONLY | MAGNET_MODE_STREAM;
    // KVM figures come from in-kernel statistics: exits are too many to stream.
    if (!streamed_by_daemon(t)) mode &= ~MAGNET_MODE_STREAM;
    // --sample: set before the probe streams its first record.
    if (auto it = sampling_.find(t); it != sampling_.end()) cap_->set_sampling(t, it->second, 0);
    if (auto s = cap_->set_mode(t, mode); !s) return s;
    probes_.insert(t);
  }
  log_sampling();
  metrics_.set_sample_weights(sample_weights(sampling_));
  totals_.set_sample_weights(sample_weights(sampling_));
  auto k = ring_consumer::create(cap_->ringbuf_fd(), *cap_, [this](std::span<const uint8_t> b) {
    eng_.feed(b);
    vcpus_.feed(b);
    metrics_.feed(b);
    totals_.feed(b, metrics_.links());
    hub_.publish_events(b);
  });
  if (!k) return k.err();
  cons_ = std::move(*k);
  return {};
}

// --sample: one line per rate, naming the probes' events it applies to.
void host_daemon::log_sampling() const {
  std::map<uint32_t, std::string> by_rate;
  for (const auto& [t, n] : sampling_)
    if (probes_.count(t)) by_rate[n] += (by_rate[n].empty() ? "" : ", ") + event_name(t);
  for (const auto& [n, names] : by_rate)
    log_notice("magnet-host: [sample] " + names + ": 1 in " + std::to_string(n) +
               " of the streamed records (per CPU); counted figures count each " +
               std::to_string(n) + " times, the views and quantiles see 1 in " + std::to_string(n) +
               "; the in-kernel counts stay exact");
}

void host_daemon::arm_ring() {
  ring_fd_->async_wait(asio::posix::descriptor_base::wait_read, [this](boost::system::error_code ec) {
    if (ec) return;
    if (auto r = cons_->drain(); !r) log_error("magnet-host: " + r.err().message);
    arm_ring();
  });
}

void host_daemon::vms_changed() {
  std::vector<vm_ident> ids;
  for (const auto& [id, vm] : vms_) {
    vm_ident v;
    v.vm_id = id;
    v.name = vm.name;
    v.cid = vm.vsock_cid;
    v.qemu_pid = vm.qemu_pid;
    v.session_id = sessions_[id];
    v.channel = vm.view_channel;
    for (const auto& t : vm.threads)
      if (t.role == "vcpu" && t.tid > 0) v.vcpu_tids.insert(static_cast<uint32_t>(t.tid));
    ids.push_back(std::move(v));
    metrics_.set_allowance(id, vm.allowance_tx_bps, vm.allowance_rx_bps);
  }
  hub_.set_vms(ids);
}

}  // namespace magnet::host
