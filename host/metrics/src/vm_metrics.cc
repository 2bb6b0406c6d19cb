#include "magnet/metrics/vm_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "magnet/event.h"
#include "magnet/record.h"

namespace magnet::host {
namespace {

using view::stat_value;

// The Ethernet header a link's shaper counts and vmnet.queue's size does not.
constexpr uint64_t kEthHeader = 14;

// A standing queue of its packets at the link: the VM's traffic is limited
// by the link.  A quarter of the link's queue, and never below 2 ms (bursts
// of a few packets wait that long without any congestion).
bool queued_at(const link_info& l, double p50_ns) {
  double threshold = std::max(2e-3, l.queue_limit_s / 4);
  return p50_ns / 1e9 >= threshold;
}

double rate(uint64_t now, uint64_t then, double secs) {
  return secs > 0 && now >= then ? static_cast<double>(now - then) / secs : 0;
}

struct emitter {
  std::vector<stat_value>& out;
  uint32_t window_us;
  void operator()(uint16_t id, double v, bool valid = true, uint32_t index = 0) {
    out.push_back({id, static_cast<uint16_t>(valid && std::isfinite(v) ? MAGNET_VSTAT_VALID : 0),
                   index, window_us, 0, std::isfinite(v) ? v : 0});
  }
};

// A counter's count and time since an earlier reading, as lat_stat::since
// gives them, without the copy and difference of its histogram, which no
// rate here reads.
struct count_time {
  uint64_t count = 0, total_ns = 0;
  double mean_ns() const { return count ? static_cast<double>(total_ns) / count : 0; }
};
count_time since(const lat_stat& now, const lat_stat& then) {
  return {now.count - std::min(now.count, then.count), now.total_ns - std::min(now.total_ns, then.total_ns)};
}

bool is_halt(uint32_t index) {
  if (index == MAGNET_VIEW_REASON_HALT_POLLED || index == MAGNET_VIEW_REASON_HALT_SLEPT)
    return true;
  return kvm_exit_reason_name(index >> 24, index & 0xffffff) == "hlt";
}

}  // namespace

void vm_metrics::set_allowance(uint32_t vm, double tx_bps, double rx_bps) {
  allowance_[vm] = {tx_bps, rx_bps};
}

int vm_metrics::link_of_device(uint32_t netns, uint32_t ifindex) const {
  for (size_t i = 0; i < links_.size(); ++i)
    if (links_[i].ifindex == ifindex && (!links_[i].netns_ino || !netns || links_[i].netns_ino == netns))
      return static_cast<int>(i);
  return -1;
}

void vm_metrics::feed(std::span<const uint8_t> recs) {
  for_each_vm_record(recs, [&](const magnet_hdr& h, const uint8_t* r) {
    auto it = vms_.find(h.vm_id);
    if (it == vms_.end()) return;  // a VM the daemon does not know (yet)
    slot& s = it->second.open;
    const uint64_t w = weights_(h);  // the events the record stands for (sampled: N)
    const uint8_t* p = r + sizeof(magnet_hdr);
    const size_t plen = h.len - sizeof(magnet_hdr);
    if ((h.type == MAGNET_EV_VMNET_QUEUE_TX || h.type == MAGNET_EV_VMNET_QUEUE_RX) &&
        plen >= offsetof(magnet_vmnet_queue, ip_id)) {  // what it reads: any minor
      const auto& q = *reinterpret_cast<const magnet_vmnet_queue*>(p);
      const int dir = h.type == MAGNET_EV_VMNET_QUEUE_TX ? 0 : 1;
      s.queue[dir].add(static_cast<double>(q.delay_ns));
      if (dir == 0) {
        int l = link_of_device(0, q.out_ifindex);
        if (l >= 0) {
          auto& ls = s.links[static_cast<size_t>(l)];
          // hdr.size is the packet as the tap received it (from the IP
          // header on); the link's shaper counts its Ethernet header too.
          uint64_t bytes = h.size > 0 ? (static_cast<uint64_t>(h.size) + kEthHeader) * w : 0;
          (h.flags & MAGNET_RF_TCP ? ls.elastic_bytes : ls.inelastic_bytes) += bytes;
          ls.delay.add(static_cast<double>(q.delay_ns));
        }
      }
    } else if (h.type == MAGNET_EV_NET_DROP && plen >= sizeof(magnet_net_drop)) {
      const auto& d = *reinterpret_cast<const magnet_net_drop*>(p);
      int l = link_of_device(0, d.ifindex);
      if (l >= 0) {
        // Dropped at the link (its qdisc, skb->len from the Ethernet header
        // on): offered to it all the same, so part of the VM's use there.
        auto& ls = s.links[static_cast<size_t>(l)];
        s.drops[1] += w;
        ls.drops += w;
        uint64_t bytes = h.size > 0 ? static_cast<uint64_t>(h.size) * w : 0;
        (h.flags & MAGNET_RF_TCP ? ls.elastic_bytes : ls.inelastic_bytes) += bytes;
      } else {
        s.drops[0] += w;
      }
    } else if (h.type == MAGNET_EV_BLK_COMPLETE && plen >= sizeof(magnet_blk)) {
      const auto& b = *reinterpret_cast<const magnet_blk*>(p);
      if (b.latency_ns) s.blk_lat.add(static_cast<double>(b.latency_ns));
    }
  });
}

void vm_metrics::sample(uint64_t now_ns, const std::map<uint32_t, vm_counters>& counters) {
  const uint64_t dt = now_ && now_ns > now_ ? now_ns - now_ : 0;
  now_ = now_ns;
  std::erase_if(vms_, [&](const auto& kv) { return !counters.count(kv.first); });
  for (const auto& [id, c] : counters) {
    vm_state& s = vms_[id];
    if (!s.have_base) {
      s.lost_base = c.lost;
      s.have_base = true;
    } else {
      // The slot that ends now (a VM's first tick has no slot yet).
      s.open.ns = dt;
      s.slots.push_back(std::move(s.open));
      s.open = slot{};
      if (s.slots.size() > kHistory) s.slots.pop_front();
    }
    // compute() reads the newest and the one kRateSlots before it.  The
    // oldest entry is reused: assigning into its maps keeps their nodes,
    // where a fresh copy would allocate every VM's maps every tick.
    if (s.cum.size() > kRateSlots) {
      auto reused = std::move(s.cum.front());
      s.cum.pop_front();
      reused.first = now_ns;
      reused.second = c;
      s.cum.push_back(std::move(reused));
    } else {
      s.cum.emplace_back(now_ns, c);
    }
    auto a = allowance_.find(id);
    s.allow_tx = a != allowance_.end() ? a->second.first : 0;
    s.allow_rx = a != allowance_.end() ? a->second.second : 0;
  }
  std::erase_if(allowance_, [&](const auto& kv) { return !counters.count(kv.first); });

  const link_use use = link_uses();
  for (auto& [id, s] : vms_) compute(id, s, use);
}

// Per link, per VM: its use in each of the last kLinkSlots slots (newest
// last), for the model and its error; then the link's shares of the
// window and of each slot.
vm_metrics::link_use vm_metrics::link_uses() const {
  link_use use(links_.size());
  for (const auto& [id, s] : vms_) {
    const size_t n = std::min(kLinkSlots, s.slots.size());
    for (size_t k = s.slots.size() - n; k < s.slots.size(); ++k) {
      const slot& sl = s.slots[k];
      const double secs = static_cast<double>(sl.ns) / 1e9;
      for (const auto& [l, ls] : sl.links) {
        if (l >= links_.size()) continue;  // a link of before set_links()
        auto& users = use[l].users;  // vms_ is walked in ascending id
        if (users.empty() || users.back().vm != id) users.push_back({id, std::vector<link_usage>(n), {}});
        auto& u = users.back().slots[k - (s.slots.size() - n)];
        if (secs > 0) {
          u.elastic_bps = static_cast<double>(ls.elastic_bytes) * 8 / secs;
          u.inelastic_bps = static_cast<double>(ls.inelastic_bytes) * 8 / secs;
        }
        u.limited = ls.drops > 0 || (ls.delay.count() && queued_at(links_[l], ls.delay.quantile(0.5)));
      }
    }
  }
  std::vector<link_usage> in;
  for (size_t l = 0; l < use.size(); ++l) {
    auto& lu = use[l];
    in.clear();
    for (auto& u : lu.users) {
      const auto& v = u.slots;
      for (size_t k = 0; k < v.size(); ++k) {
        u.window.elastic_bps += v[k].elastic_bps / static_cast<double>(v.size());
        u.window.inelastic_bps += v[k].inelastic_bps / static_cast<double>(v.size());
        u.window.limited |= v[k].limited;
      }
      in.push_back(u.window);
    }
    lu.window = link_share(links_[l].capacity_bps, in);
    for (size_t n = 1; n <= kLinkSlots; ++n)
      for (size_t k = 0; k < n; ++k) {
        in.clear();
        for (const auto& u : lu.users)
          if (u.slots.size() == n) in.push_back(u.slots[k]);
        lu.by_slots[n].emplace_back(links_[l].capacity_bps, in);
      }
  }
  return use;
}

namespace {

// The rate window of a tick: the counters at both of its ends.
struct rate_window {
  const vm_counters& c0;
  const vm_counters& c1;
  double secs;
  bool have;  // a window of some length exists (not the VM's first tick)
};

// What the streamed records of the window's closed slots add up to.
struct stream_sums {
  std::array<uint64_t, 3> drops{};  // tap, qdisc, elsewhere
  std::array<filters::quantile_sketch, 2> queue{filters::quantile_sketch{0.01},
                                                filters::quantile_sketch{0.01}};
  filters::quantile_sketch blk{0.01};
};

void emit_taps(emitter& emit, const rate_window& w) {
  emit(MAGNET_STAT_TAP_TX_BPS, rate(w.c1.tap_tx_bytes, w.c0.tap_tx_bytes, w.secs) * 8, w.have);
  emit(MAGNET_STAT_TAP_RX_BPS, rate(w.c1.tap_rx_bytes, w.c0.tap_rx_bytes, w.secs) * 8, w.have);
  emit(MAGNET_STAT_TAP_TX_PPS, rate(w.c1.tap_tx_pkts, w.c0.tap_tx_pkts, w.secs), w.have);
  emit(MAGNET_STAT_TAP_RX_PPS, rate(w.c1.tap_rx_pkts, w.c0.tap_rx_pkts, w.secs), w.have);
}

// Drops from the stream; host queueing: count and mean from the kernel's
// statistics (every packet), quantiles from the streamed records.
void emit_drops_and_queues(emitter& emit, const rate_window& w, const stream_sums& m) {
  const bool have = w.have;
  emit(MAGNET_STAT_DROPS_TAP, have ? m.drops[0] / w.secs : 0, have);
  emit(MAGNET_STAT_DROPS_QDISC, have ? m.drops[1] / w.secs : 0, have);
  emit(MAGNET_STAT_DROPS_HOST, have ? m.drops[2] / w.secs : 0, have);
  static constexpr uint16_t qids[2][4] = {
      {MAGNET_STAT_QUEUE_TX_MEAN, MAGNET_STAT_QUEUE_TX_P50, MAGNET_STAT_QUEUE_TX_P99,
       MAGNET_STAT_QUEUE_TX_PPS},
      {MAGNET_STAT_QUEUE_RX_MEAN, MAGNET_STAT_QUEUE_RX_P50, MAGNET_STAT_QUEUE_RX_P99,
       MAGNET_STAT_QUEUE_RX_PPS}};
  for (int d = 0; d < 2; ++d) {
    const count_time k = since(w.c1.queue[d], w.c0.queue[d]);
    const bool any = have && k.count > 0;
    const auto& q = m.queue[static_cast<size_t>(d)];
    emit(qids[d][0], k.mean_ns() / 1e3, any);
    emit(qids[d][1], q.quantile(0.5) / 1e3, any && q.count() > 0);
    emit(qids[d][2], q.quantile(0.99) / 1e3, any && q.count() > 0);
    emit(qids[d][3], have ? static_cast<double>(k.count) / w.secs : 0, have);
  }
}

// vCPUs: fractions of one host CPU, each and summed.
void emit_vcpus(std::vector<stat_value>& out, emitter& emit, const rate_window& w) {
  emitter lvl{out, 0};
  lvl(MAGNET_STAT_VCPU_COUNT, static_cast<double>(w.c1.vcpu_ns.size()));
  std::array<double, 3> sum{};
  static constexpr uint16_t ids[3] = {MAGNET_STAT_VCPU_RUN, MAGNET_STAT_VCPU_WAIT,
                                      MAGNET_STAT_VCPU_HALT};
  for (const auto& [v, ns1] : w.c1.vcpu_ns) {
    auto it = w.c0.vcpu_ns.find(v);
    const bool ok = w.have && it != w.c0.vcpu_ns.end();
    for (int i = 0; i < 3; ++i) {
      double f = ok ? rate(ns1[i], it->second[i], w.secs) / 1e9 : 0;
      sum[i] += f;
      emit(ids[i], f, ok, static_cast<uint32_t>(v));
    }
  }
  emit(MAGNET_STAT_VCPU_RUN_SUM, sum[0], w.have);
  emit(MAGNET_STAT_VCPU_WAIT_SUM, sum[1], w.have);
  emit(MAGNET_STAT_VCPU_HALT_SUM, sum[2], w.have);
}

// KVM exits, by reason, and the time in exit handling other than halts.
void emit_kvm(emitter& emit, const rate_window& w) {
  emit(MAGNET_STAT_KVM_EXITS, rate(w.c1.exits, w.c0.exits, w.secs), w.have);
  double exit_time = 0;
  for (const auto& [idx, st] : w.c1.reasons) {
    auto it = w.c0.reasons.find(idx);
    const count_time d = it != w.c0.reasons.end() ? since(st, it->second) : count_time{st.count, st.total_ns};
    if (!w.have || !d.count) continue;
    double frac = static_cast<double>(d.total_ns) / 1e9 / w.secs;
    if (!is_halt(idx)) exit_time += frac;
    emit(MAGNET_STAT_KVM_REASON_EXITS, static_cast<double>(d.count) / w.secs, true, idx);
    emit(MAGNET_STAT_KVM_REASON_TIME, frac, true, idx);
    emit(MAGNET_STAT_KVM_REASON_MEAN, d.mean_ns() / 1e3, true, idx);
  }
  emit(MAGNET_STAT_KVM_EXIT_TIME, exit_time, w.have);
}

void emit_blk(emitter& emit, const rate_window& w, const stream_sums& m) {
  emit(MAGNET_STAT_BLK_BPS, rate(w.c1.blk_bytes, w.c0.blk_bytes, w.secs), w.have);
  emit(MAGNET_STAT_BLK_IOPS, rate(w.c1.blk_reqs, w.c0.blk_reqs, w.secs), w.have);
  emit(MAGNET_STAT_BLK_LAT_MEAN, m.blk.mean() / 1e3, m.blk.count() > 0);
  emit(MAGNET_STAT_BLK_LAT_P99, m.blk.quantile(0.99) / 1e3, m.blk.count() > 0);
}

}  // namespace

void vm_metrics::compute(uint32_t id, vm_state& s, const link_use& use) {
  auto& out = s.stats;
  out.clear();
  if (s.cum.empty()) return;
  const auto& [t1, c1] = s.cum.back();
  const size_t back = std::min(kRateSlots, s.cum.size() - 1);
  const auto& [t0, c0] = s.cum[s.cum.size() - 1 - back];
  const double secs = static_cast<double>(t1 - t0) / 1e9;
  const rate_window w{c0, c1, secs, back > 0 && secs > 0};
  emitter emit{out, static_cast<uint32_t>(secs * 1e6)};
  // Stream-fed figures over the same slots.
  const size_t nslots = std::min(back, s.slots.size());
  stream_sums m;
  for (size_t k = s.slots.size() - nslots; k < s.slots.size(); ++k) {
    const slot& sl = s.slots[k];
    for (int i = 0; i < 3; ++i) m.drops[i] += sl.drops[i];
    for (int d = 0; d < 2; ++d) (void)m.queue[d].merge(sl.queue[d]);
    (void)m.blk.merge(sl.blk_lat);
  }
  emit_taps(emit, w);
  emit_drops_and_queues(emit, w, m);
  if (!links_.empty()) emit_link(id, s, use, nslots, w.have, secs, out);
  emitter lvl{out, 0};
  lvl(MAGNET_STAT_ALLOWANCE_TX, s.allow_tx);
  lvl(MAGNET_STAT_ALLOWANCE_RX, s.allow_rx);
  emit_vcpus(out, emit, w);
  emit_kvm(emit, w);
  emit_blk(emit, w, m);
  lvl(MAGNET_STAT_LOST_EVENTS, static_cast<double>(c1.lost - std::min(c1.lost, s.lost_base)));
}

// The shared link: the one this VM used most over the history, else the
// first configured.  Use and availability over the last kLinkSlots slots,
// and the spread of availability between those slots as its error; its
// packets' queueing delay and drops there over the rate window's slots.
void vm_metrics::emit_link(uint32_t id, const vm_state& s, const link_use& use, size_t nslots,
                           bool have, double secs, std::vector<view::stat_value>& out) const {
  std::vector<uint64_t> bytes(links_.size());
  for (const auto& sl : s.slots)
    for (const auto& [l, ls] : sl.links)
      if (l < bytes.size()) bytes[l] += ls.elastic_bytes + ls.inelastic_bytes;
  size_t l = 0;
  uint64_t most = 0;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] > most) most = bytes[i], l = i;
  const link_info& li = links_[l];
  const bool cap = li.capacity_bps > 0;
  const size_t nl = std::min(kLinkSlots, s.slots.size());
  const link_state& lu = use[l];
  auto me = std::lower_bound(lu.users.begin(), lu.users.end(), id,
                             [](const link_user& u, uint32_t vm) { return u.vm < vm; });
  const link_user* mine = me != lu.users.end() && me->vm == id ? &*me : nullptr;
  double avail = lu.window.available(mine ? &mine->window : nullptr);
  if (s.allow_tx > 0) avail = std::min(avail, s.allow_tx);
  std::array<double, kLinkSlots> per_slot{};
  double mean = 0, var = 0;
  for (size_t k = 0; k < nl; ++k) {
    per_slot[k] = lu.by_slots[nl][k].available(mine ? &mine->slots[k] : nullptr);
    mean += per_slot[k] / nl;
  }
  for (size_t k = 0; k < nl; ++k) {
    double a = per_slot[k] - mean;
    var += a * a / nl;
  }
  const link_usage own = mine ? mine->window : link_usage{};
  emitter lemit{out, static_cast<uint32_t>(nl * 100000)};
  lemit(MAGNET_STAT_LINK_CAPACITY, li.capacity_bps, cap);
  lemit(MAGNET_STAT_LINK_USE, own.elastic_bps + own.inelastic_bps, nl > 0);
  lemit(MAGNET_STAT_LINK_AVAILABLE, avail, cap && nl > 0);
  lemit(MAGNET_STAT_LINK_AVAILABLE_ERR, std::sqrt(var), cap && nl > 1);
  filters::quantile_sketch d{0.01};
  uint64_t ldrops = 0;
  for (size_t k = s.slots.size() - nslots; k < s.slots.size(); ++k)
    if (auto it = s.slots[k].links.find(l); it != s.slots[k].links.end()) {
      (void)d.merge(it->second.delay);
      ldrops += it->second.drops;
    }
  emitter emit{out, static_cast<uint32_t>(secs * 1e6)};
  emit(MAGNET_STAT_LINK_QUEUE_P50, d.quantile(0.5) / 1e3, d.count() > 0);
  emit(MAGNET_STAT_LINK_QUEUE_P99, d.quantile(0.99) / 1e3, d.count() > 0);
  emit(MAGNET_STAT_LINK_DROPS, have ? ldrops / secs : 0, have);
}

const std::vector<view::stat_value>& vm_metrics::stats(uint32_t vm) const {
  static const std::vector<view::stat_value> none;
  auto it = vms_.find(vm);
  return it != vms_.end() ? it->second.stats : none;
}

double vm_metrics::value(uint32_t vm, uint16_t id, uint32_t index) const {
  for (const auto& v : stats(vm))
    if (v.id == id && v.index == index) return v.valid() ? v.value : 0;
  return 0;
}

}  // namespace magnet::host
