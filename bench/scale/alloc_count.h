// Live bytes of the C++ heap (alloc_count.cc replaces operator new/delete).
#pragma once

#include <cstdint>

namespace magnet::bench {
int64_t live_heap_bytes();
}  // namespace magnet::bench
