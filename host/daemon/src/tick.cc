// The 100 ms tick: the kernel's per-VM counters sampled into per-VM
// metrics, published to each VM's own sessions; the shared links resolved
// again each second.
#include "host_daemon.h"
#include "magnet/events.h"
#include "magnet/log.h"
#include "magnet/trace_file.h"

namespace magnet::host {

namespace asio = boost::asio;

// The shared links of --link, resolved again each second: a namespace or a
// qdisc may come and go.  Each change of what is known is logged once.
void host_daemon::resolve_links() {
  std::vector<link_info> links;
  link_notes_.resize(opt_.links.size());
  for (size_t i = 0; i < opt_.links.size(); ++i) {
    std::string note;
    links.push_back(resolve_link(opt_.links[i], note));
    if (note != link_notes_[i])
      log_notice("magnet-host: [link] " + links.back().name + ": " + note);
    link_notes_[i] = std::move(note);
  }
  metrics_.set_links(std::move(links));
}

// The cumulative per-VM counters the kernel keeps, at @now.
void host_daemon::sample(uint64_t now) {
  std::map<uint32_t, vm_counters> c;
  std::vector<uint32_t> ids;
  for (const auto& [id, vm] : vms_) {
    c[id];
    ids.push_back(id);
  }
  auto agg = [&](uint16_t type, auto&& fn) {
    if (!probes_.count(type)) return;
    for (const auto& [vm, a] : cap_->aggregate(probe_slot(type), ids))
      if (auto it = c.find(vm); it != c.end()) fn(it->second, a);
  };
  agg(MAGNET_EV_NET_DEV_RECV, [](vm_counters& v, const magnet_agg& a) {
    v.tap_tx_bytes = a.bytes;
    v.tap_tx_pkts = a.events;
  });
  agg(MAGNET_EV_NET_DEV_XMIT, [](vm_counters& v, const magnet_agg& a) {
    v.tap_rx_bytes = a.bytes;
    v.tap_rx_pkts = a.events;
  });
  agg(MAGNET_EV_BLK_COMPLETE, [](vm_counters& v, const magnet_agg& a) {
    v.blk_bytes = a.bytes;
    v.blk_reqs = a.events;
  });
  agg(MAGNET_EV_KVM_EXIT, [](vm_counters& v, const magnet_agg& a) { v.exits = a.events; });
  for (const auto& [k, s] : cap_->kvm_exit_stats()) {
    auto it = c.find(k.vm_id);
    if (it == c.end()) continue;
    uint32_t idx = k.reason == MAGNET_KVM_REASON_HALT_POLLED   ? MAGNET_VIEW_REASON_HALT_POLLED
                   : k.reason == MAGNET_KVM_REASON_HALT_WAITED ? MAGNET_VIEW_REASON_HALT_SLEPT
                                                               : MAGNET_VIEW_REASON_INDEX(k.isa, k.reason);
    it->second.reasons[idx].merge(s);
  }
  for (const auto& [k, s] : cap_->vmnet_queue_stats())
    if (auto it = c.find(k.vm_id); it != c.end() && k.dir < 2) it->second.queue[k.dir].merge(s);
  for (const auto& [tid, t] : vcpus_.totals(now))
    if (auto it = c.find(t.vm); it != c.end())
      it->second.vcpu_ns[t.vcpu] = {t.run_ns, t.wait_ns, t.halt_ns};
  losses_ = cap_->vm_losses(ids);
  for (const auto& [vm, l] : losses_)
    if (auto it = c.find(vm); it != c.end()) it->second.lost = l.first + l.second;
  metrics_.sample(now, c);
  sample_power(now, c);
  totals_.retain(ids);
  counters_ = std::move(c);
  for (const auto& [id, vm] : vms_) hub_.publish(id, now, vm_stats(id));
}

void host_daemon::tick() {
  next_tick_ += std::chrono::milliseconds(100);
  timer_.expires_at(next_tick_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    (void)cons_->drain();  // below the watermark nothing wakes us: bound the delay
    uint64_t now = monotonic_ns();
    if (opt_.duration_ns && now - start_ns_ >= opt_.duration_ns) {
      io_.stop();
      return;
    }
    if (++ticks_ % 10 == 0) {
      cap_->rescan_netns();
      resolve_links();
    }
    sample(now);
    if (!streams_.empty() && ticks_ % std::max<uint64_t>(1, opt_.http_stream_ns / 100'000'000) == 0)
      push_streams();
    // A tick that ran late does not make the next ones bunch up.
    if (asio::steady_timer::clock_type::now() > next_tick_ + std::chrono::milliseconds(100))
      next_tick_ = asio::steady_timer::clock_type::now();
    tick();
  });
}

}  // namespace magnet::host
