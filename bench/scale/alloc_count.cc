// The C++ heap's live bytes, counted by replacing the global operator new
// and delete (malloc_usable_size: what each block really holds).  Memory
// that C libraries take with malloc (libvirt, GLib) is not counted.
#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "alloc_count.h"

namespace {

std::atomic<int64_t> g_live{0};

void* take(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  g_live.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}

void* take_aligned(size_t n, std::align_val_t a) {
  const size_t al = static_cast<size_t>(a);
  const size_t rounded = n ? (n + al - 1) / al * al : al;  // aligned_alloc wants a multiple
  void* p = std::aligned_alloc(al, rounded);
  if (!p) throw std::bad_alloc();
  g_live.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}

void give(void* p) noexcept {
  if (!p) return;
  g_live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}

}  // namespace

namespace magnet::bench {
int64_t live_heap_bytes() { return g_live.load(std::memory_order_relaxed); }
}  // namespace magnet::bench

void* operator new(size_t n) { return take(n); }
void* operator new[](size_t n) { return take(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return take(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void* operator new(size_t n, std::align_val_t a) { return take_aligned(n, a); }
void* operator new[](size_t n, std::align_val_t a) { return take_aligned(n, a); }
void operator delete(void* p) noexcept { give(p); }
void operator delete[](void* p) noexcept { give(p); }
void operator delete(void* p, size_t) noexcept { give(p); }
void operator delete[](void* p, size_t) noexcept { give(p); }
void operator delete(void* p, std::align_val_t) noexcept { give(p); }
void operator delete[](void* p, std::align_val_t) noexcept { give(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { give(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { give(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { give(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { give(p); }
