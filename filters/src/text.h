// Private: writing text through a raw cursor, for the snapshot paths that
// run at 10 Hz per VM (row labels in engine.cc, JSON in json.cc).  Each
// function writes at p, returns the end, and never writes a terminator; the
// caller guarantees the room (a number takes at most kMaxU64 characters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace magnet::filters::text {

inline constexpr size_t kMaxU64 = 20;

template <size_t N>
inline char* put_lit(char* p, const char (&s)[N]) {
  std::memcpy(p, s, N - 1);
  return p + N - 1;
}

inline constexpr char kDigitPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

// Exactly 8 digits (leading zeros kept) of v < 10^8: four independent pairs.
inline char* put_8digits(char* p, uint32_t v) {
  uint32_t hi = v / 10000, lo = v % 10000;
  std::memcpy(p, kDigitPairs + 2 * (hi / 100), 2);
  std::memcpy(p + 2, kDigitPairs + 2 * (hi % 100), 2);
  std::memcpy(p + 4, kDigitPairs + 2 * (lo / 100), 2);
  std::memcpy(p + 6, kDigitPairs + 2 * (lo % 100), 2);
  return p + 8;
}

// v < 10^8 without leading zeros.
inline char* put_below_1e8(char* p, uint32_t v) {
  unsigned n = v < 10 ? 1 : v < 100 ? 2 : v < 1000 ? 3 : v < 10000 ? 4 : v < 100000 ? 5
             : v < 1000000 ? 6 : v < 10000000 ? 7 : 8;
  char* e = p + n;
  char* q = e;
  while (v >= 100) {
    q -= 2;
    std::memcpy(q, kDigitPairs + 2 * (v % 100), 2);
    v /= 100;
  }
  if (v >= 10) std::memcpy(q - 2, kDigitPairs + 2 * v, 2);
  else q[-1] = static_cast<char>('0' + v);
  return e;
}

// Decimal, like std::to_chars, in 8-digit blocks of 32-bit arithmetic
// (timestamps have 10 to 20 digits).
inline char* put_u(char* p, uint64_t v) {
  if (v < 100000000) return put_below_1e8(p, static_cast<uint32_t>(v));
  uint64_t hi = v / 100000000;
  auto lo = static_cast<uint32_t>(v - hi * 100000000);
  if (hi < 100000000) {
    p = put_below_1e8(p, static_cast<uint32_t>(hi));
  } else {
    uint64_t top = hi / 100000000;  // < 1845
    p = put_below_1e8(p, static_cast<uint32_t>(top));
    p = put_8digits(p, static_cast<uint32_t>(hi - top * 100000000));
  }
  return put_8digits(p, lo);
}

// "0x" and 16 lower-case hex digits (printf "0x%016" PRIx64).
inline char* put_hex64(char* p, uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  *p++ = '0';
  *p++ = 'x';
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) p[i] = kHex[(v >> (60 - 4 * i)) & 15];
  return p + 16;
}

}  // namespace magnet::filters::text
