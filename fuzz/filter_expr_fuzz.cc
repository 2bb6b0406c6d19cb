// libFuzzer target: the filter-expression language (`magnet record
// --filter`, views' `filter:`), then the parsed predicate against records.
// Input: the expression, a NUL byte, then record material (160 bytes per
// record: header and payload as they come, the event type mapped onto the
// catalogue unless its top bit is set, the length clamped to the bytes).
// Oracle besides the sanitizers: the pushdown is sound, i.e. a record the
// predicate matches passes every engaged pushdown set (cgroup aside: records
// do not carry it) -- the kernel may drop only what the predicate rejects.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "magnet/events.h"
#include "magnet/filters/predicate.h"

using namespace magnet;

namespace {
constexpr size_t kChunk = 160;

template <class S, class V>
bool passes(const S& set, V v) {
  return !set || set->count(v);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t elen = nul ? static_cast<size_t>(nul - data) : size;
  auto p = filters::predicate::parse(std::string_view(reinterpret_cast<const char*>(data), elen));
  if (!p) return 0;
  if (!nul) return 0;
  const auto events = all_events();
  const auto& push = p->push();
  alignas(8) uint8_t rec[kChunk];
  for (size_t off = elen + 1; off + sizeof(magnet_hdr) <= size; off += kChunk) {
    std::memset(rec, 0, sizeof rec);
    std::memcpy(rec, data + off, std::min(kChunk, size - off));
    magnet_hdr h;
    std::memcpy(&h, rec, sizeof h);
    if (!(h.type & 0x8000)) h.type = events[h.type % events.size()].type;
    h.len = static_cast<uint16_t>(std::clamp<size_t>(h.len, sizeof(magnet_hdr), kChunk) & ~size_t{7});
    std::memcpy(rec, &h, sizeof h);
    if (!p->match(rec)) continue;
    if (!passes(push.cpu, h.cpu) || !passes(push.tgid, h.tgid) || !passes(push.vm, h.vm_id) ||
        !passes(push.abstract_id, h.abstract_id) || !passes(push.events, h.type))
      abort();  // the kernel would drop a record the predicate keeps
  }
  return 0;
}
