// libFuzzer target: pcap files as `magnet reconstruct` reads them, and the
// segments they hold through every phase (host/reconstruct).
// Oracles besides the sanitizers:
// - each direction's messages hold exactly the bytes of its sanitised
//   segments, and no message is empty;
// - the best of three identical runs is that run (per direction, the same
//   sizes in the same order), and it scores 100 % exact against itself.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "magnet/reconstruct/readers.h"
#include "magnet/reconstruct/reconstruct.h"

using namespace magnet::reconstruct;

namespace {

std::vector<uint64_t> sizes(const std::vector<message>& m, direction d) {
  std::vector<uint64_t> out;
  for (const auto& x : m)
    if (x.dir == d) out.push_back(x.size);
  return out;
}

void check_stream(stream s) {
  sanitise(s);
  uint64_t bytes[2] = {0, 0};
  for (const auto& g : s.segments) bytes[index(g.dir)] += g.payload;
  for (uint64_t gap_ns : {uint64_t{0}, uint64_t{1'000'000}}) {
    const auto m = cut(s, {.gap_ns = gap_ns});
    uint64_t in_messages[2] = {0, 0};
    for (const auto& x : m) {
      if (x.size == 0 || x.segments == 0) abort();
      in_messages[index(x.dir)] += x.size;
    }
    if (in_messages[0] != bytes[0] || in_messages[1] != bytes[1]) abort();
    const auto best = reconcile({m, m, m});
    for (direction d : {direction::a_to_b, direction::b_to_a})
      if (sizes(best, d) != sizes(m, d)) abort();
    if (!m.empty() && compare(m, m).exact_pct != 100.0) abort();
    (void)summarise(s, m);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto c = read_pcap_memory(std::span<const uint8_t>(data, size));
  if (!c) return 0;
  for (const auto& s : separate(c->packets)) check_stream(s);
  return 0;
}
