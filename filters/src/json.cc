// Snapshot serialisation: the format views are delivered in (docs/engine.md).
//
// A streaming writer: the text goes straight into one std::string, with no
// intermediate document.  The daemon serialises every VM's views at 10 Hz,
// so this is on its hot path (bench/engine, BM_HundredVms).
//
// Output rules (tests/unit/filters/json_test.cc checks them against a
// DOM-based reference serialiser):
// * Object keys are written in lexicographic order (the order the former
//   nlohmann-json serialiser produced), no whitespace.
// * Integers in decimal.  Doubles in the shortest form that reads back to
//   the same value (as std::to_chars), always with a '.' or an exponent so they
//   stay floating-point for a typed reader: 7 is written "7.0", 3.5e8
//   "350000000.0"; NaN and +-infinity, which JSON cannot express, as null.
// * Strings (view, label and correlation names) escape '"', '\\' and the
//   control characters below 0x20 (\b \t \n \f \r, else \u00xx); UTF-8 is
//   copied as is, and bytes that are not well-formed UTF-8 become U+FFFD
//   (one per maximal ill-formed subpart), so the output is always valid JSON.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "magnet/filters/engine.h"
#include "text.h"

namespace magnet::filters {

namespace {

using text::put_lit;
using text::put_u;

// Room for one number: uint64 20 characters; a double 25 (a '-', then at
// most 23 characters of std::to_chars' shortest form, or 22 digits of a
// fixed-notation integral value and ".0").  The rooms below add the
// literal text of each object (counted, plus slack) to its numbers.
constexpr size_t kU = text::kMaxU64, kD = 25, kB = 5;
// A JSON string of n input bytes takes at most 6n + 2 characters (\u00xx).
constexpr size_t str_room(std::string_view s) { return 6 * s.size() + 2; }

char* put_b(char* p, bool v) { return v ? put_lit(p, "true") : put_lit(p, "false"); }

// The shortest decimal that reads back as v, for v > 0 not an integer in
// [2^-7, 2^53) (rates, bandwidths, means): Steele & White's free-format
// digit generation, exact in 64-bit integers, about twice as fast as
// std::to_chars here and with the same digits (ties to even).  Returns
// nullptr for other values.
char* put_fraction(char* p, double v) {
  const auto bits = std::bit_cast<uint64_t>(v);
  const uint64_t mantissa = bits & ((uint64_t{1} << 52) - 1);
  const int biased = static_cast<int>(bits >> 52) & 0x7ff;
  const int s = 1075 - biased;  // v = m / 2^s
  // Subnormals, powers of two (their lower neighbour is closer) and values
  // outside the range take the general path.
  if (biased == 0 || mantissa == 0 || s <= 0 || s > 59) return nullptr;
  const uint64_t m = mantissa | (uint64_t{1} << 52);
  const uint64_t ip = m >> s;
  // In units of 2^-(s+1): the fraction left (r, below `one`) and half an
  // ulp (both scaled by 10 per digit).  r < 2^60 and half_ulp < 2^63: no
  // overflow.
  const uint64_t one = uint64_t{1} << (s + 1);
  uint64_t r = (m & ((uint64_t{1} << s) - 1)) << 1, half_ulp = 1;
  p = put_u(p, ip);
  *p++ = '.';
  for (;;) {
    r *= 10;
    half_ulp *= 10;
    int d = static_cast<int>(r >> (s + 1));
    r &= one - 1;
    const bool down = r < half_ulp;        // stopping at d stays within half an ulp
    const bool up = r + half_ulp > one;  // so does d + 1
    if (!down && !up) {
      *p++ = static_cast<char>('0' + d);
      continue;
    }
    // The closer of d and d + 1; ties to even.  d + 1 <= 9: with d = 9, `up`
    // here is the same test as `up` one digit earlier (or, for the first
    // digit, v within half an ulp of the next integer), which would have
    // stopped the loop already.
    if (up && (!down || 2 * r > one || (2 * r == one && (d & 1)))) ++d;
    *p++ = static_cast<char>('0' + d);
    break;
  }
  return p;
}

char* put_d(char* p, double v) {
  if (!std::isfinite(v)) return put_lit(p, "null");
  if (std::signbit(v)) {
    *p++ = '-';
    v = -v;
  }
  // Integral values below 1e15 (exact as integers): the integer and ".0",
  // cheaper than the general conversion and the form nlohmann-json used.
  if (v < 1e15 && v == std::floor(v)) return put_lit(put_u(p, static_cast<uint64_t>(v)), ".0");
  if (char* e = put_fraction(p, v)) return e;
  char* e = std::to_chars(p, p + 23, v).ptr;
  for (char* q = p; q < e; ++q)
    if (*q == '.' || *q == 'e') return e;
  return put_lit(e, ".0");  // e.g. 2^53: fixed notation without a point
}

// The well-formed UTF-8 sequence starting at b (lead byte >= 0x80): its
// length, or 0 and in `bad` the length of the maximal ill-formed subpart.
size_t utf8_len(const unsigned char* b, const unsigned char* e, size_t& bad) {
  unsigned c = b[0], lo = 0x80, hi = 0xbf;
  size_t need;
  if (c >= 0xc2 && c <= 0xdf) {
    need = 1;
  } else if (c >= 0xe0 && c <= 0xef) {
    need = 2;
    if (c == 0xe0) lo = 0xa0;       // no overlong forms
    else if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    need = 3;
    if (c == 0xf0) lo = 0x90;
    else if (c == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
  } else {
    bad = 1;
    return 0;
  }
  for (size_t i = 1; i <= need; ++i) {
    if (b + i == e || b[i] < lo || b[i] > hi) {
      bad = i;
      return 0;
    }
    lo = 0x80;
    hi = 0xbf;
  }
  return need + 1;
}

// Whether one of the 8 bytes in w is below 0x20, '"', '\\' or above 0x7f
// (a plain byte above such a byte may be flagged too: the caller then goes
// byte by byte, which is exact).
inline bool needs_care(uint64_t w) {
  constexpr uint64_t k01 = 0x0101010101010101, k80 = 0x8080808080808080;
  const uint64_t quote = w ^ (k01 * '"'), backslash = w ^ (k01 * '\\');
  const uint64_t below_20 = (w - k01 * 0x20) & ~w;
  const uint64_t is_quote = (quote - k01) & ~quote, is_backslash = (backslash - k01) & ~backslash;
  return ((below_20 | is_quote | is_backslash | w) & k80) != 0;
}

char* put_s(char* p, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  *p++ = '"';
  auto* b = reinterpret_cast<const unsigned char*>(s.data());
  auto* e = b + s.size();
  while (b < e) {
    while (e - b >= 8) {  // plain ASCII 8 bytes at a time
      uint64_t w;
      std::memcpy(&w, b, 8);
      if (needs_care(w)) break;
      std::memcpy(p, &w, 8);
      p += 8;
      b += 8;
    }
    if (b == e) break;
    unsigned char c = *b;
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      *p++ = static_cast<char>(c);
      ++b;
      continue;
    }
    if (c >= 0x80) {
      size_t bad = 0, n = utf8_len(b, e, bad);
      if (n) {
        std::memcpy(p, b, n);
        p += n;
        b += n;
      } else {
        p = put_lit(p, "\xef\xbf\xbd");  // U+FFFD
        b += bad;
      }
      continue;
    }
    *p++ = '\\';
    switch (c) {
      case '"': *p++ = '"'; break;
      case '\\': *p++ = '\\'; break;
      case '\b': *p++ = 'b'; break;
      case '\t': *p++ = 't'; break;
      case '\n': *p++ = 'n'; break;
      case '\f': *p++ = 'f'; break;
      case '\r': *p++ = 'r'; break;
      default:
        p = put_lit(p, "u00");
        *p++ = kHex[c >> 4];
        *p++ = kHex[c & 15];
    }
    ++b;
  }
  *p++ = '"';
  return p;
}

// A dist_stats object, with "of" (the measured quantity) when not empty.
constexpr size_t kDistRoom = 112 + kU + 8 * kD;  // 87 + "of" (<= 20)
char* put_dist(char* p, const dist_stats& d, std::string_view of) {
  p = put_lit(p, "{\"count\":");
  p = put_u(p, d.count);
  p = put_lit(p, ",\"max\":");
  p = put_d(p, d.max);
  p = put_lit(p, ",\"mean\":");
  p = put_d(p, d.mean);
  p = put_lit(p, ",\"min\":");
  p = put_d(p, d.min);
  if (!of.empty()) {
    p = put_lit(p, ",\"of\":");
    p = put_s(p, of);
  }
  p = put_lit(p, ",\"p50\":");
  p = put_d(p, d.p50);
  p = put_lit(p, ",\"p90\":");
  p = put_d(p, d.p90);
  p = put_lit(p, ",\"p99\":");
  p = put_d(p, d.p99);
  p = put_lit(p, ",\"relative_accuracy\":");
  p = put_d(p, d.relative_accuracy);
  p = put_lit(p, ",\"sum\":");
  p = put_d(p, d.sum);
  *p++ = '}';
  return p;
}

constexpr size_t kWindowRoom = 144 + 6 * kU + 2 * kD + kB;  // 133
char* put_window(char* p, const window_stats& w) {
  const bool count = w.k == window_stats::kind::count;
  p = put_lit(p, "{\"bandwidth_bps\":");
  p = put_d(p, w.bandwidth_bps);
  p = put_lit(p, ",\"bytes\":");
  p = put_u(p, w.bytes);
  p = put_lit(p, ",\"errors\":");
  p = put_u(p, w.errors);
  p = put_lit(p, ",\"events\":");
  p = put_u(p, w.events);
  p = put_lit(p, ",\"first_ts_ns\":");
  p = put_u(p, w.first_ts);
  p = count ? put_lit(p, ",\"kind\":\"count\"") : put_lit(p, ",\"kind\":\"time\"");
  p = put_lit(p, ",\"last_ts_ns\":");
  p = put_u(p, w.last_ts);
  p = count ? put_lit(p, ",\"length_events\":") : put_lit(p, ",\"length_ns\":");
  p = put_u(p, w.length);
  p = put_lit(p, ",\"rate_eps\":");
  p = put_d(p, w.rate_eps);
  p = put_lit(p, ",\"truncated\":");
  p = put_b(p, w.truncated);
  *p++ = '}';
  return p;
}

constexpr size_t kRowRoom = 112 + 7 * kU + kD;  // 100, without the label
char* put_row(char* p, const group_row& r) {
  p = put_lit(p, "{\"bandwidth_bps\":");
  p = put_d(p, r.bandwidth_bps);
  p = put_lit(p, ",\"bytes\":");
  p = put_u(p, r.bytes);
  p = put_lit(p, ",\"errors\":");
  p = put_u(p, r.errors);
  p = put_lit(p, ",\"events\":");
  p = put_u(p, r.events);
  p = put_lit(p, ",\"first_ts_ns\":");
  p = put_u(p, r.first_ts);
  p = put_lit(p, ",\"key\":");
  p = put_u(p, r.key);
  p = put_lit(p, ",\"key2\":");
  p = put_u(p, r.key2);
  p = put_lit(p, ",\"label\":");
  p = put_s(p, r.label);
  p = put_lit(p, ",\"last_ts_ns\":");
  p = put_u(p, r.last_ts);
  *p++ = '}';
  return p;
}

constexpr size_t kCorrRoom = 112 + 6 * kU + kDistRoom;  // 93, without the name
char* put_corr(char* p, const correlation_stats& c) {
  p = put_lit(p, "{\"evicted\":");
  p = put_u(p, c.evicted);
  p = put_lit(p, ",\"expired\":");
  p = put_u(p, c.expired);
  p = put_lit(p, ",\"latency_ns\":");
  p = put_dist(p, c.latency_ns, {});
  p = put_lit(p, ",\"matched\":");
  p = put_u(p, c.matched);
  p = put_lit(p, ",\"name\":");
  p = put_s(p, c.name);
  p = put_lit(p, ",\"pending\":");
  p = put_u(p, c.pending);
  p = put_lit(p, ",\"reordered\":");
  p = put_u(p, c.reordered);
  p = put_lit(p, ",\"unmatched\":");
  p = put_u(p, c.unmatched);
  *p++ = '}';
  return p;
}

constexpr size_t kGroupRoom = 80 + 2 * kU;  // 61 with "connection", without the rows
constexpr size_t kHeadRoom = 160 + 6 * kU + kB + kDistRoom;  // 140, without the view name

// An upper bound of the text of s: the sum of the parts' rooms.
size_t snapshot_room(const view_snapshot& s) {
  size_t n = kHeadRoom + str_room(s.view) + s.windows.size() * (kWindowRoom + 1);
  for (const auto& g : s.groups) {
    n += kGroupRoom + 1;
    for (const auto& r : g.rows) n += kRowRoom + 1 + str_room(r.label);
  }
  for (const auto& c : s.correlations) n += kCorrRoom + 1 + str_room(c.name);
  return n;
}

// Writes s; needs snapshot_room(s) characters.
char* put_snapshot(char* p, const view_snapshot& s) {
  p = put_lit(p, "{\"correlations\":[");
  for (size_t i = 0; i < s.correlations.size(); ++i) {
    if (i) *p++ = ',';
    p = put_corr(p, s.correlations[i]);
  }
  p = put_lit(p, "],\"groups\":[");
  for (size_t i = 0; i < s.groups.size(); ++i) {
    const group_table& g = s.groups[i];
    if (i) *p++ = ',';
    p = put_lit(p, "{\"by\":\"");
    std::string_view by = name_of(g.by);  // fixed ASCII names, at most 10
    std::memcpy(p, by.data(), by.size());
    p += by.size();
    p = put_lit(p, "\",\"other_bytes\":");
    p = put_u(p, g.other_bytes);
    p = put_lit(p, ",\"other_events\":");
    p = put_u(p, g.other_events);
    p = put_lit(p, ",\"rows\":[");
    for (size_t j = 0; j < g.rows.size(); ++j) {
      if (j) *p++ = ',';
      p = put_row(p, g.rows[j]);
    }
    p = put_lit(p, "]}");
  }
  p = put_lit(p, "],\"matched\":");
  p = put_u(p, s.matched);
  p = put_lit(p, ",\"memory_bytes\":");
  p = put_u(p, s.memory_bytes);
  p = put_lit(p, ",\"per_vm\":");
  p = put_b(p, s.per_vm);
  p = put_lit(p, ",\"sample_every\":");
  p = put_u(p, s.sample_every);
  p = put_lit(p, ",\"sampled\":");
  p = put_u(p, s.sampled);
  p = put_lit(p, ",\"ts_ns\":");
  p = put_u(p, s.ts_ns);
  if (s.value_of != value_kind::none) {
    p = put_lit(p, ",\"value\":");
    p = put_dist(p, s.value, name_of(s.value_of));
  }
  p = put_lit(p, ",\"view\":");
  p = put_s(p, s.view);
  p = put_lit(p, ",\"vm\":");
  p = put_u(p, s.vm);
  p = put_lit(p, ",\"windows\":[");
  for (size_t i = 0; i < s.windows.size(); ++i) {
    if (i) *p++ = ',';
    p = put_window(p, s.windows[i]);
  }
  return put_lit(p, "]}");
}

// Appends to out the text `write(cursor)` writes (returning its end) into
// at most n characters.  The text goes through a thread-local scratch
// buffer, kept between calls (cache-warm, never zero-filled), and then once
// into out at its exact size; texts that may be larger than kScratchMax are
// written into out directly.  `spare`: capacity to leave after the text.
template <class F>
void append(std::string& out, size_t n, F&& write, size_t spare = 0) {
  static constexpr size_t kScratchMax = 256 * 1024;
  thread_local std::unique_ptr<char[]> scratch;
  thread_local size_t scratch_size = 0;
  if (n <= kScratchMax) {
    if (scratch_size < n) {
      scratch_size = std::min(std::max(n, 2 * scratch_size), kScratchMax);
      scratch.reset(new char[scratch_size]);
    }
    char* end = write(scratch.get());
    // The rooms are upper bounds (json_test's worst cases check each part);
    // were one wrong, memory is already corrupt: stop here.
    if (end > scratch.get() + n) std::abort();
    if (spare) out.reserve(out.size() + static_cast<size_t>(end - scratch.get()) + spare);
    out.append(scratch.get(), end);
    return;
  }
  size_t at = out.size();
  out.resize(at + n);
  char* end = write(out.data() + at);
  if (end > out.data() + at + n) std::abort();
  out.resize(static_cast<size_t>(end - out.data()));
}

// The returned strings keep a little room: a server typically frames the
// text ("ok " before, "\n" after) without another allocation.
constexpr size_t kFraming = 16;

void put_one(const view_snapshot& s, std::string& out, size_t spare) {
  append(out, snapshot_room(s), [&](char* p) { return put_snapshot(p, s); }, spare);
}

void put_array(std::span<const view_snapshot> s, std::string& out, size_t spare) {
  size_t n = 2;
  for (const auto& v : s) n += snapshot_room(v) + 1;
  append(out, n, [&](char* p) {
    *p++ = '[';
    for (size_t i = 0; i < s.size(); ++i) {
      if (i) *p++ = ',';
      p = put_snapshot(p, s[i]);
    }
    *p++ = ']';
    return p;
  }, spare);
}

}  // namespace

void to_json(const view_snapshot& s, std::string& out) { put_one(s, out, 0); }
void to_json(std::span<const view_snapshot> s, std::string& out) { put_array(s, out, 0); }

std::string to_json(const view_snapshot& s) {
  std::string out;
  put_one(s, out, kFraming);
  return out;
}

std::string to_json(std::span<const view_snapshot> s) {
  std::string out;
  put_array(s, out, kFraming);
  return out;
}

}  // namespace magnet::filters
