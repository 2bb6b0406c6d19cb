#include "magnet/agent/journey.h"

#include <algorithm>

#include "magnet/event.h"
#include "magnet/flow.h"
#include "magnet/record.h"

namespace magnet::guest {

namespace {

constexpr uint8_t kUdp = 17;

template <class Fn>
void each_record(std::span<const uint8_t> recs, Fn&& fn) {
  for (size_t off = 0; off + sizeof(magnet_hdr) <= recs.size();) {
    const uint8_t* r = recs.data() + off;
    const auto& h = hdr_of(r);
    if (h.len < sizeof(magnet_hdr) || off + h.len > recs.size()) break;
    off += h.len;
    fn(h, r + sizeof(magnet_hdr), h.len - sizeof(magnet_hdr));
  }
}

}  // namespace

void journey::expire(uint64_t now) {
  while (!order_.empty() && (order_.size() > kMaxPending || order_.front().first + kMaxAgeNs < now)) {
    auto it = pending_.find(order_.front().second);
    if (it != pending_.end() && it->second.dev_ns == order_.front().first) pending_.erase(it);
    order_.pop_front();
  }
}

void journey::guest_records(std::span<const uint8_t> recs) {
  each_record(recs, [&](const magnet_hdr& h, const uint8_t* p, size_t n) {
    if (h.type == MAGNET_EV_NET_SOCK_SEND && n >= sizeof(magnet_sock)) {
      const auto& s = *reinterpret_cast<const magnet_sock*>(p);
      if (s.protocol != kUdp || h.size <= 0 || !s.call_ns || s.call_ns > h.ts_ns) return;
      // The call's datagram left through the device while the call ran:
      // its transmit record came first (the send's record is written at
      // its return).  (local -> remote), as the packet says.
      const uint64_t flow = magnet_flow_id(s.saddr, s.daddr, s.sport, s.dport, static_cast<__u8>(s.protocol));
      auto it = unsent_.find(flow);
      if (it == unsent_.end()) return;
      const uint64_t start = h.ts_ns - s.call_ns;
      auto& q = it->second;
      // Transmits before this call began found no call of their own.
      while (!q.empty() && q.front().first < start) q.pop_front();
      while (!q.empty() && q.front().first <= h.ts_ns) {
        if (auto pt = pending_.find(q.front().second); pt != pending_.end() && pt->second.dev_ns == q.front().first)
          pt->second.sock_ns = start;
        q.pop_front();
      }
      if (q.empty()) unsent_.erase(it);
    } else if (h.type == MAGNET_EV_NET_DEV_XMIT && n >= sizeof(magnet_pkt)) {
      const auto& pk = *reinterpret_cast<const magnet_pkt*>(p);
      if (pk.ip_version != 4) return;  // the IPv4 id names the packet
      key k{h.abstract_id, pk.ip_id};
      pending_[k] = sent{h.ts_ns, 0};
      order_.emplace_back(h.ts_ns, k);
      if (pk.protocol == kUdp) {
        auto& q = unsent_[h.abstract_id];
        q.emplace_back(h.ts_ns, k);
        if (q.size() > 1024) q.pop_front();
        if (unsent_.size() > 256) unsent_.erase(unsent_.begin());
      }
      last_guest_ns_ = std::max<uint64_t>(last_guest_ns_, h.ts_ns);
    }
  });
  expire(last_guest_ns_);
}

void journey::host_records(std::span<const uint8_t> recs) {
  if (!have_offset_) return;
  each_record(recs, [&](const magnet_hdr& h, const uint8_t* p, size_t n) {
    // (A host of format minor 1 sends no IPv4 id: nothing to match.)
    if (h.type != MAGNET_EV_VMNET_QUEUE_TX || n < sizeof(magnet_vmnet_queue)) return;
    const auto& q = *reinterpret_cast<const magnet_vmnet_queue*>(p);
    auto it = pending_.find(key{h.abstract_id, q.ip_id});
    if (it == pending_.end()) return;
    const sent s = it->second;
    pending_.erase(it);
    // Host times on the guest's clock.
    const int64_t tap = static_cast<int64_t>(h.ts_ns - q.delay_ns) - offset_;
    const int64_t dev_tap = tap - static_cast<int64_t>(s.dev_ns);
    if (s.sock_ns) open_.sock_dev.add(static_cast<double>(s.dev_ns - s.sock_ns));
    open_.dev_tap.add(static_cast<double>(std::max<int64_t>(dev_tap, 0)));
    open_.tap_wire.add(static_cast<double>(q.delay_ns));
    ++open_.matched;
    ++matched_total_;
  });
}

void journey::tick(uint64_t slot_ns, std::vector<view::stat_value>& out) {
  open_.ns = slot_ns;
  slots_.push_back(std::move(open_));
  open_ = slot{};
  if (slots_.size() > 10) slots_.pop_front();
  slot w;
  for (const auto& s : slots_) {
    w.ns += s.ns;
    w.matched += s.matched;
    (void)w.sock_dev.merge(s.sock_dev);
    (void)w.dev_tap.merge(s.dev_tap);
    (void)w.tap_wire.merge(s.tap_wire);
  }
  const uint32_t win = static_cast<uint32_t>(w.ns / 1000);
  auto put = [&](uint16_t id, const filters::quantile_sketch& sk) {
    for (uint32_t pct : {50u, 99u})
      out.push_back({id, static_cast<uint16_t>(sk.count() ? MAGNET_VSTAT_VALID : 0), pct, win, 0,
                     sk.count() ? sk.quantile(pct / 100.0) / 1e3 : 0});
  };
  put(MAGNET_STAT_JOURNEY_SOCK_DEV, w.sock_dev);
  put(MAGNET_STAT_JOURNEY_DEV_TAP, w.dev_tap);
  put(MAGNET_STAT_JOURNEY_TAP_WIRE, w.tap_wire);
  out.push_back({MAGNET_STAT_JOURNEY_MATCHED, MAGNET_VSTAT_VALID, 0, win, 0,
                 w.ns ? static_cast<double>(w.matched) * 1e9 / static_cast<double>(w.ns) : 0});
}

}  // namespace magnet::guest
