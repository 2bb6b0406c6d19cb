#include "journey.h"

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

// The packet's IPv4 id in a vmnet.queue record (MERGE: the field the capture
// work appends; until then no packet matches).
uint16_t vmnet_ip_id(const magnet_vmnet_queue&, size_t) { return 0; }

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
      if (s.protocol != kUdp || h.size <= 0) return;
      // The send's datagram: (local -> remote), as the packet will say.
      uint64_t flow = magnet_flow_id(s.saddr, s.daddr, s.sport, s.dport, static_cast<__u8>(s.protocol));
      auto& q = sends_[flow];
      q.push_back(h.ts_ns);
      if (q.size() > 1024) q.pop_front();
      if (sends_.size() > 256) sends_.erase(sends_.begin());
    } else if (h.type == MAGNET_EV_NET_DEV_XMIT && n >= sizeof(magnet_pkt)) {
      const auto& pk = *reinterpret_cast<const magnet_pkt*>(p);
      if (pk.ip_version != 4) return;  // the IPv4 id names the packet
      sent s{h.ts_ns, 0};
      if (pk.protocol == kUdp) {
        auto it = sends_.find(h.abstract_id);
        if (it != sends_.end()) {
          auto& q = it->second;
          // The oldest send not later than this transmit, dropping those
          // too old to be its own (a datagram the stack dropped).
          while (!q.empty() && q.front() + kMaxAgeNs < h.ts_ns) q.pop_front();
          if (!q.empty() && q.front() <= h.ts_ns) {
            s.sock_ns = q.front();
            q.pop_front();
          }
        }
      }
      key k{h.abstract_id, pk.ip_id};
      pending_[k] = s;
      order_.emplace_back(h.ts_ns, k);
      last_guest_ns_ = std::max<uint64_t>(last_guest_ns_, h.ts_ns);
    }
  });
  expire(last_guest_ns_);
}

void journey::host_records(std::span<const uint8_t> recs) {
  if (!have_offset_) return;
  each_record(recs, [&](const magnet_hdr& h, const uint8_t* p, size_t n) {
    if (h.type != MAGNET_EV_VMNET_QUEUE_TX || n < sizeof(magnet_vmnet_queue)) return;
    const auto& q = *reinterpret_cast<const magnet_vmnet_queue*>(p);
    auto it = pending_.find(key{h.abstract_id, vmnet_ip_id(q, n)});
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
