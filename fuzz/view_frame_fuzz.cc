// libFuzzer target: the view protocol's streaming frame decoder, fed the way
// a hostile guest can feed it (any bytes, cut anywhere), with and without
// resynchronisation.  Oracle besides the sanitizers: every frame it accepts
// encodes back to a frame that decodes to the same message.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "magnet/view_codec.h"

using namespace magnet::view;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // First byte: chunk size for the stream (1..32, 0 = all at once) and
  // whether to resynchronise after a bad frame (top bit).
  const size_t chunk = data[0] & 0x1f;
  const bool resync_on_bad = data[0] & 0x80;
  data++;
  size--;
  reader r;
  frame f;
  magnet::error e;
  size_t off = 0;
  while (off < size) {
    auto room = r.prepare();
    size_t n = std::min({room.size(), size - off, chunk ? chunk : size});
    std::copy(data + off, data + off + n, room.begin());
    r.commit(n);
    off += n;
    for (;;) {
      auto st = r.next(f, e);
      if (st == reader::state::more) break;
      if (st == reader::state::bad) {
        if (!resync_on_bad) return 0;  // a connection would be closed here
        r.resync();
        continue;
      }
      if (std::holds_alternative<unknown>(f.m)) continue;
      std::vector<uint8_t> again;
      if (!encode(again, f.m, f.h.seq, f.h.ts_ns, f.h.version)) abort();
      reader r2;
      r2.append(again);
      frame g;
      if (r2.next(g, e) != reader::state::frame) abort();
      if (!(g.m == f.m) || g.h.seq != f.h.seq || g.h.ts_ns != f.h.ts_ns) abort();
    }
  }
  return 0;
}
