// Private: the bounded per-view tables (group-by rows, correlation pending
// entries).  Open addressing with linear probing and backward-shift deletion:
// no per-entry allocation, and capacities that are fixed by the view spec so
// the memory bound in max_memory_bytes() holds.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "magnet/filters/sketch.h"

namespace magnet::filters {

inline uint64_t mix_key(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return x;
}

// (k1, k2) -> uint32 index.  Grows by doubling up to max_slots.
class index_map {
 public:
  static constexpr uint32_t npos = 0xffffffffu;
  explicit index_map(uint32_t max_entries)
      : max_slots_(std::bit_ceil(std::max<uint32_t>(max_entries, 4) * 2)) {}

  uint32_t find(uint64_t k1, uint64_t k2) const {
    if (slots_.empty()) return npos;
    size_t m = slots_.size() - 1;
    for (size_t i = mix_key(k1, k2) & m;; i = (i + 1) & m) {
      const slot& s = slots_[i];
      if (s.idx == npos) return npos;
      if (s.k1 == k1 && s.k2 == k2) return s.idx;
    }
  }
  // Caller guarantees the key is absent and size() < max entries.
  void insert(uint64_t k1, uint64_t k2, uint32_t idx) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    size_t m = slots_.size() - 1;
    size_t i = mix_key(k1, k2) & m;
    while (slots_[i].idx != npos) i = (i + 1) & m;
    slots_[i] = {k1, k2, idx};
    ++size_;
  }
  void update(uint64_t k1, uint64_t k2, uint32_t idx) {
    size_t m = slots_.size() - 1;
    for (size_t i = mix_key(k1, k2) & m;; i = (i + 1) & m)
      if (slots_[i].k1 == k1 && slots_[i].k2 == k2 && slots_[i].idx != npos) {
        slots_[i].idx = idx;
        return;
      }
  }
  void erase(uint64_t k1, uint64_t k2) {
    if (slots_.empty()) return;
    size_t m = slots_.size() - 1;
    size_t i = mix_key(k1, k2) & m;
    for (;; i = (i + 1) & m) {
      if (slots_[i].idx == npos) return;
      if (slots_[i].k1 == k1 && slots_[i].k2 == k2) break;
    }
    // Backward shift: move later members of the probe run into the hole.
    size_t hole = i;
    for (size_t j = (hole + 1) & m; slots_[j].idx != npos; j = (j + 1) & m) {
      size_t home = mix_key(slots_[j].k1, slots_[j].k2) & m;
      // j may move to hole if its home is not in (hole, j] cyclically
      bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
      if (!between) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].idx = npos;
    --size_;
  }
  size_t size() const { return size_; }
  void clear() {
    for (auto& s : slots_) s.idx = npos;
    size_ = 0;
  }
  size_t memory_bytes() const { return slots_.capacity() * sizeof(slot); }
  static size_t max_memory_bytes(uint32_t max_entries) {
    return std::bit_ceil(std::max<uint32_t>(max_entries, 4) * 2) * sizeof(slot);
  }

 private:
  struct slot {
    uint64_t k1 = 0, k2 = 0;
    uint32_t idx = npos;
  };
  void rehash(size_t n) {
    if (n > max_slots_) n = max_slots_;
    std::vector<slot> old = std::move(slots_);
    slots_.assign(n, slot{});
    size_ = 0;
    for (const auto& s : old)
      if (s.idx != npos) insert(s.k1, s.k2, s.idx);
  }
  std::vector<slot> slots_;
  size_t size_ = 0;
  size_t max_slots_;
};

}  // namespace magnet::filters
