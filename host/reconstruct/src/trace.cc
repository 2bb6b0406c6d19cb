// magnet traces: the device-layer packet records of TCP segments.
#include <cstring>
#include <map>
#include <tuple>

#include "magnet/event.h"
#include "magnet/reconstruct/readers.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet::reconstruct {

uint32_t tcp_header_estimate(const std::vector<std::pair<uint32_t, uint32_t>>& v) {
  std::map<uint32_t, size_t> votes;
  for (size_t i = 1; i < v.size(); ++i) {
    const uint32_t advance = v[i].first - v[i - 1].first;
    if (advance == 0 || advance > v[i - 1].second) continue;  // a repeat, or bytes the capture missed
    const uint32_t h = v[i - 1].second - advance;
    if (h >= 20 && h <= 60) ++votes[h];
  }
  uint32_t best = 32;
  size_t most = 0;
  for (const auto& [h, n] : votes)
    if (n > most) most = n, best = h;
  return best;
}

namespace {

struct raw_pkt {
  packet p;
  uint32_t l4_len;  // bytes after the IP header (its options unknown: counted in the TCP header)
};

bool is_device(uint16_t type) { return type == MAGNET_EV_NET_DEV_XMIT || type == MAGNET_EV_NET_DEV_RECV; }

// The packet in one record, or false for anything but a device record of TCP.
bool to_raw(const uint8_t* rec, raw_pkt& r) {
  const auto& h = hdr_of(rec);
  if (!is_device(h.type) || !(h.flags & MAGNET_RF_TCP) || h.len < sizeof(magnet_hdr) + sizeof(magnet_pkt))
    return false;
  magnet_pkt k;
  std::memcpy(&k, rec + sizeof(magnet_hdr), sizeof k);
  if (k.protocol != 6 || (k.ip_version != 4 && k.ip_version != 6)) return false;
  const uint32_t ip_hdr = k.ip_version == 4 ? 20 : 0;  // IPv6's tot_len is its payload length already
  if (k.tot_len < ip_hdr) return false;
  r.p.time_ns = h.ts_ns;
  r.p.src.v6 = r.p.dst.v6 = k.ip_version == 6;
  std::memcpy(r.p.src.addr.data(), k.saddr, r.p.src.v6 ? 16 : 4);
  std::memcpy(r.p.dst.addr.data(), k.daddr, r.p.dst.v6 ? 16 : 4);
  r.p.src.port = k.sport;
  r.p.dst.port = k.dport;
  r.p.seq = k.tcp_seq;
  r.p.flags = k.tcp_flags;
  r.p.vm_id = h.vm_id;
  r.l4_len = k.tot_len - ip_hdr;
  return true;
}

}  // namespace

result<capture> read_trace(const std::string& path) {
  auto r = trace_reader::open(path);
  if (!r) return r.err();
  if (auto n = r->validate(); !n) return n.err();
  std::vector<raw_pkt> raw;
  for (;;) {
    auto rec = r->next();
    if (!rec) return rec.err();
    if (!*rec) break;
    raw_pkt x;
    if (to_raw(*rec, x)) raw.push_back(x);
  }
  if (raw.empty())
    return error{path + ": no TCP packet records of the device layer (net.dev.xmit, net.dev.recv): record "
                        "with those probes and their packet headers"};
  // The TCP header length per direction of each connection.
  std::map<std::tuple<endpoint, endpoint>, std::vector<std::pair<uint32_t, uint32_t>>> by_dir;
  for (const auto& x : raw) by_dir[{x.p.src, x.p.dst}].emplace_back(x.p.seq, x.l4_len);
  std::map<std::tuple<endpoint, endpoint>, uint32_t> hdr;
  for (const auto& [k, v] : by_dir) hdr[k] = tcp_header_estimate(v);
  capture c;
  for (auto& x : raw) {
    const uint32_t h = hdr[{x.p.src, x.p.dst}];
    x.p.payload = x.l4_len > h ? x.l4_len - h : 0;
    c.packets.push_back(x.p);
  }
  return c;
}

}  // namespace magnet::reconstruct
