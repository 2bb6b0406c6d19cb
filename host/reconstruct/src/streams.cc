// Phases 1 and 2: stream separation and sanitising.
#include <arpa/inet.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "magnet/reconstruct/reconstruct.h"

namespace magnet::reconstruct {

std::string to_string(const endpoint& e) {
  char buf[INET6_ADDRSTRLEN] = "";
  inet_ntop(e.v6 ? AF_INET6 : AF_INET, e.addr.data(), buf, sizeof buf);
  return (e.v6 ? "[" + std::string(buf) + "]" : std::string(buf)) + ":" + std::to_string(e.port);
}

const char* to_string(direction d) { return d == direction::a_to_b ? "a>b" : "b>a"; }

std::vector<stream> separate(const std::vector<packet>& packets) {
  // The key orders the two ends, so both directions find the same stream.
  std::map<std::pair<endpoint, endpoint>, size_t> index_of;
  std::vector<stream> out;
  for (const auto& p : packets) {
    auto key = p.src < p.dst ? std::pair{p.src, p.dst} : std::pair{p.dst, p.src};
    auto [it, fresh] = index_of.emplace(key, out.size());
    if (fresh) {
      out.emplace_back();
      out.back().a = p.src;
      out.back().b = p.dst;
    }
    stream& s = out[it->second];
    // A SYN without ACK names the opener, if it comes among the first few
    // packets (a later one is a new connection on the same ports).
    if ((p.flags & (kSyn | kAck)) == kSyn && p.src != s.a && s.segments.size() < 4) {
      std::swap(s.a, s.b);
      for (auto& g : s.segments) g.dir = g.dir == direction::a_to_b ? direction::b_to_a : direction::a_to_b;
    }
    if (!s.vm_id) s.vm_id = p.vm_id;
    s.segments.push_back({p.time_ns, p.src == s.a ? direction::a_to_b : direction::b_to_a, p.seq, p.payload,
                          p.flags, false});
  }
  return out;
}

namespace {

// A segment at its 64-bit byte offset from the direction's first byte.
struct placed {
  uint64_t off;
  segment seg;
};

// The direction's segments with payload at unwrapped offsets: sequence
// numbers wrap at 2^32, so each is read relative to the one before it.
// Returns whether the direction's first byte is known (a SYN was seen).
bool place(const std::vector<segment>& segs, direction d, std::vector<placed>& out) {
  std::optional<uint32_t> base;
  for (const auto& g : segs)
    if (g.dir == d && (g.flags & kSyn)) {
      base = g.seq + 1;
      break;
    }
  const bool syn = base.has_value();
  int64_t last = 0;
  for (const auto& g : segs) {
    if (g.dir != d || g.payload == 0) continue;
    if (!base) base = g.seq;
    const uint32_t last_seq = static_cast<uint32_t>(*base + static_cast<uint64_t>(last));
    const int64_t rel = last + static_cast<int32_t>(g.seq - last_seq);
    last = rel;
    if (rel + static_cast<int64_t>(g.payload) <= 0) continue;  // wholly before the first byte
    segment t = g;
    uint64_t off = static_cast<uint64_t>(std::max<int64_t>(rel, 0));
    t.payload = static_cast<uint32_t>(rel + g.payload - static_cast<int64_t>(off));
    out.push_back({off, t});
  }
  return syn;
}

// Byte order, each byte once (the first copy seen keeps its time), gaps
// filled.
std::vector<segment> in_byte_order(std::vector<placed> v, stream& s) {
  std::stable_sort(v.begin(), v.end(), [](const placed& x, const placed& y) { return x.off < y.off; });
  std::vector<segment> out;
  uint64_t next = 0;
  for (auto& p : v) {
    const uint64_t end = p.off + p.seg.payload;
    if (end <= next) {
      ++s.dropped;
      continue;
    }
    if (p.off > next) {
      segment fill = p.seg;
      fill.payload = static_cast<uint32_t>(p.off - next);
      fill.flags = 0;
      fill.filled = true;
      out.push_back(fill);
      s.filled_bytes += fill.payload;
      s.partial = true;
    } else if (p.off < next) {
      ++s.dropped;  // an overlap: only its new bytes are kept
      p.seg.seq += static_cast<uint32_t>(next - p.off);
      p.seg.payload = static_cast<uint32_t>(end - next);
    }
    out.push_back(p.seg);
    next = end;
  }
  uint64_t t = 0;
  for (auto& g : out) g.time_ns = t = std::max(t, g.time_ns);
  return out;
}

}  // namespace

void sanitise(stream& s) {
  std::vector<segment> dirs[2];
  for (direction d : {direction::a_to_b, direction::b_to_a}) {
    std::vector<placed> v;
    const bool syn = place(s.segments, d, v);
    if (!syn && !v.empty()) s.partial = true;
    dirs[index(d)] = in_byte_order(std::move(v), s);
  }
  std::vector<segment> merged;
  merged.reserve(dirs[0].size() + dirs[1].size());
  std::merge(dirs[0].begin(), dirs[0].end(), dirs[1].begin(), dirs[1].end(), std::back_inserter(merged),
             [](const segment& x, const segment& y) { return x.time_ns < y.time_ns; });
  s.segments = std::move(merged);
}

}  // namespace magnet::reconstruct
