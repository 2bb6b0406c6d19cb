// The streaming snapshot serialiser (filters/src/json.cc) against a
// DOM-based reference: the nlohmann-json serialiser it replaced, kept here
// verbatim as the oracle.  Outputs are compared as parsed JSON values, with
// the JSON types (a double must stay a double) and the doubles' bits.
#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "magnet/filters/engine.h"
#include "records.h"

namespace magnet::filters {
namespace {

using namespace testing;
using nlohmann::json;

// ------------------------------------------------- reference serialiser ---

json ref_dist(const dist_stats& d) {
  return {{"count", d.count}, {"sum", d.sum},   {"mean", d.mean}, {"min", d.min},
          {"max", d.max},     {"p50", d.p50},   {"p90", d.p90},   {"p99", d.p99},
          {"relative_accuracy", d.relative_accuracy}};
}

json ref_window(const window_stats& w) {
  json j = {{"kind", w.k == window_stats::kind::count ? "count" : "time"},
            {"events", w.events},
            {"bytes", w.bytes},
            {"errors", w.errors},
            {"first_ts_ns", w.first_ts},
            {"last_ts_ns", w.last_ts},
            {"rate_eps", w.rate_eps},
            {"bandwidth_bps", w.bandwidth_bps},
            {"truncated", w.truncated}};
  if (w.k == window_stats::kind::count) j["length_events"] = w.length;
  else j["length_ns"] = w.length;
  return j;
}

json ref_snapshot(const view_snapshot& s) {
  json j = {{"view", s.view},
            {"per_vm", s.per_vm},
            {"vm", s.vm},
            {"ts_ns", s.ts_ns},
            {"matched", s.matched},
            {"sampled", s.sampled},
            {"sample_every", s.sample_every},
            {"memory_bytes", s.memory_bytes}};
  json ws = json::array();
  for (const auto& w : s.windows) ws.push_back(ref_window(w));
  j["windows"] = std::move(ws);
  if (s.value_of != value_kind::none) {
    j["value"] = ref_dist(s.value);
    j["value"]["of"] = std::string(name_of(s.value_of));
  }
  json gs = json::array();
  for (const auto& g : s.groups) {
    json rows = json::array();
    for (const auto& r : g.rows)
      rows.push_back({{"key", r.key},
                      {"key2", r.key2},
                      {"label", r.label},
                      {"events", r.events},
                      {"bytes", r.bytes},
                      {"errors", r.errors},
                      {"first_ts_ns", r.first_ts},
                      {"last_ts_ns", r.last_ts},
                      {"bandwidth_bps", r.bandwidth_bps}});
    gs.push_back({{"by", std::string(name_of(g.by))},
                  {"rows", std::move(rows)},
                  {"other_events", g.other_events},
                  {"other_bytes", g.other_bytes}});
  }
  j["groups"] = std::move(gs);
  json cs = json::array();
  for (const auto& c : s.correlations)
    cs.push_back({{"name", c.name},
                  {"matched", c.matched},
                  {"unmatched", c.unmatched},
                  {"expired", c.expired},
                  {"evicted", c.evicted},
                  {"reordered", c.reordered},
                  {"pending", c.pending},
                  {"latency_ns", ref_dist(c.latency_ns)}});
  j["correlations"] = std::move(cs);
  return j;
}

std::string ref_json(std::span<const view_snapshot> s,
                     json::error_handler_t h = json::error_handler_t::strict) {
  json a = json::array();
  for (const auto& v : s) a.push_back(ref_snapshot(v));
  return a.dump(-1, ' ', false, h);
}

// ----------------------------------------------------------- comparison ---

// Equal values of equal JSON types; doubles bit for bit (so -0.0 != 0.0).
void expect_same(const json& a, const json& b, const std::string& at = "$") {
  ASSERT_EQ(a.type_name(), b.type_name()) << at << ": " << a.dump() << " vs " << b.dump();
  if (a.is_object()) {
    ASSERT_EQ(a.size(), b.size()) << at << ": " << a.dump() << " vs " << b.dump();
    for (auto it = a.begin(); it != a.end(); ++it) {
      ASSERT_TRUE(b.contains(it.key())) << at << ": no key " << it.key() << " in " << b.dump();
      expect_same(it.value(), b[it.key()], at + "." + it.key());
    }
  } else if (a.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << at;
    for (size_t i = 0; i < a.size(); ++i) expect_same(a[i], b[i], at + "[" + std::to_string(i) + "]");
  } else if (a.is_number_float()) {
    double x = a.get<double>(), y = b.get<double>();
    EXPECT_EQ(std::memcmp(&x, &y, sizeof x), 0) << at << ": " << x << " vs " << y;
  } else {
    EXPECT_EQ(a, b) << at;
  }
}

// The new serialiser's text parses and equals the reference's, for the
// array form and for each snapshot alone.
void expect_matches_reference(const std::vector<view_snapshot>& s) {
  std::string text = to_json(s);
  json got = json::parse(text);  // throws (fails the test) if not JSON
  expect_same(got, json::parse(ref_json(s)));
  for (const auto& v : s) expect_same(json::parse(to_json(v)), json::parse(ref_snapshot(v).dump()));
}

// ----------------------------------------------------------- snapshots ---

std::vector<view_snapshot> engine_snapshots() {
  engine e;
  view_spec v = hundred_vms_view();
  v.windows[0].events = 100;
  v.group_by = {group_key::connection, group_key::vcpu, group_key::event, group_key::vm,
                group_key::cpu, group_key::process};
  v.correlate = {{"ip-to-dev", "event == net.ip.send", "event == net.dev.xmit", corr_key::ip_id,
                  1'000'000, 64}};
  EXPECT_TRUE(e.add_view(v).ok());
  view_spec g;
  g.name = "all-interarrival";
  g.value = value_kind::interarrival;
  g.windows = {{window_stats::kind::time, 0, 1000, 4}};  // truncates
  g.group_by = {group_key::vm};
  EXPECT_TRUE(e.add_view(g).ok());
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf;
  for (uint32_t i = 0; i < 2000; ++i) {
    uint32_t vm = 1 + static_cast<uint32_t>(rng() % 3);
    hdr_args a{.ts = 1000 + i * 37, .vm = vm, .cpu = uint16_t(rng() % 4), .tgid = 100 + vm,
               .tid = 200 + uint32_t(rng() % 3), .id = rng() % 8,
               .size = int32_t(rng() % 1500) - 20};  // some -errno
    std::vector<uint8_t> r;
    switch (rng() % 3) {
      case 0: a.type = MAGNET_EV_NET_IP_SEND; r = pkt_rec(a, 3, uint16_t(i)); break;
      case 1: a.type = MAGNET_EV_NET_DEV_XMIT; r = pkt_rec(a, 3, uint16_t(i - 1)); break;
      default: a.type = MAGNET_EV_NET_SOCK_RECV; r = sock_rec(a); break;
    }
    buf.insert(buf.end(), r.begin(), r.end());
  }
  e.feed(buf);
  auto s = e.snapshot();
  EXPECT_EQ(s.size(), 4u);  // 3 VM instances + the global view
  return s;
}

view_snapshot hand_snapshot() {
  view_snapshot s;
  s.view = "hand";
  s.vm = 7;
  s.per_vm = true;
  s.ts_ns = 18'000'000'000'000'000'000ull;
  s.matched = 3;
  s.sampled = 1;
  s.sample_every = 3;
  s.memory_bytes = 17000;
  window_stats w;
  w.k = window_stats::kind::time;
  w.length = 100'000'000;
  w.events = 5;
  w.bytes = 1500;
  w.first_ts = 1000;
  w.last_ts = 5000;
  w.rate_eps = 1e6;
  w.bandwidth_bps = 3.5e8;
  w.truncated = true;
  s.windows = {w};
  s.value = {5, 1500, 300, 100, 500, 301.25, 498.5, 0.015625, 0.01};
  s.groups.push_back({group_key::connection, {}, 4, 4096});  // empty table
  group_row r;
  r.key = 1;
  r.label = "0x0000000000000001";
  r.bandwidth_bps = 0.5;
  s.groups.push_back({group_key::vcpu, {r, r}, 0, 0});
  correlation_stats c;
  c.name = "c";
  c.matched = 2;
  c.latency_ns = {2, 30, 15, 10, 20, 10, 20, 20, 0.01};
  s.correlations = {c};
  return s;
}

// ---------------------------------------------------------------- tests ---

TEST(Json, EngineSnapshotsMatchReference) { expect_matches_reference(engine_snapshots()); }

TEST(Json, HandSnapshotMatchesReference) { expect_matches_reference({hand_snapshot()}); }

TEST(Json, KeysInReferenceOrderByteForByte) {
  // Only doubles whose shortest form both serialisers agree on: the text is
  // then identical, key order included.
  auto s = hand_snapshot();
  EXPECT_EQ(to_json(s), ref_snapshot(s).dump());
  std::vector<view_snapshot> two = {s, s};
  EXPECT_EQ(to_json(two), ref_json(two));
}

TEST(Json, EmptyParts) {
  view_snapshot bare;  // no windows, groups, correlations; value of size
  view_snapshot none;
  none.value_of = value_kind::none;  // no "value" key at all
  none.groups.push_back({group_key::event, {}, 0, 0});
  expect_matches_reference({bare, none});
  EXPECT_FALSE(json::parse(to_json(none)).contains("value"));
  EXPECT_EQ(to_json(std::span<const view_snapshot>{}), "[]");
  EXPECT_EQ(json::parse(to_json(none))["groups"][0]["rows"], json::array());
}

TEST(Json, StringsAreEscaped) {
  std::string ctl;
  for (int c = 0; c < 0x20; ++c) ctl += static_cast<char>(c);
  ctl += "\x7f";
  auto s = hand_snapshot();
  s.view = "q\"uote\\back/slash";
  s.groups[1].rows[0].label = ctl;
  s.groups[1].rows[1].label = "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 end";  // é 中 😀
  s.correlations[0].name = std::string("nul\0inside", 10);
  expect_matches_reference({s});
  auto text = to_json(s);
  EXPECT_NE(text.find(R"("view":"q\"uote\\back/slash")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(\u0000\u0001)"), std::string::npos);
  EXPECT_NE(text.find(R"(\b\t\n\u000b\f\r)"), std::string::npos);
  EXPECT_NE(text.find("\xf0\x9f\x98\x80"), std::string::npos);  // UTF-8 copied, not \u-escaped
  auto j = json::parse(text);
  EXPECT_EQ(j["view"], s.view);
  EXPECT_EQ(j["groups"][1]["rows"][0]["label"], ctl);
  EXPECT_EQ(j["correlations"][0]["name"], s.correlations[0].name);
}

TEST(Json, EscapesAtEveryPosition) {
  // The writer copies plain ASCII 8 bytes at a time: put each kind of byte
  // that needs care at every offset of strings of many lengths.
  const std::vector<std::string> specials = {"\"", "\\", std::string(1, '\0'), "\x1f", "\n", "\x7f",
                                             "\xc3\xa9", "\xe2\x82\xac", "\xff"};
  std::vector<view_snapshot> v(1);
  group_table t;
  for (size_t len = 0; len <= 26; ++len)
    for (size_t at = 0; at <= len; ++at)
      for (const auto& sp : specials) {
        group_row r;
        r.label = std::string(at, 'a') + sp + std::string(len - at, 'z');
        t.rows.push_back(r);
      }
  v[0].groups.push_back(t);
  v[0].view = std::string(40, 'v');
  expect_same(json::parse(to_json(v)), json::parse(ref_json(v, json::error_handler_t::replace)));
}

TEST(Json, InvalidUtf8BecomesReplacementCharacter) {
  // The reference throws on these (type_error 316); the writer replaces each
  // maximal ill-formed subpart with U+FFFD, as nlohmann-json's `replace`.
  const std::vector<std::string> bad = {
      "\xff",              // never a UTF-8 byte
      "a\x80z",            // lone continuation
      "\xc3",              // truncated at the end
      "\xc3(",             // lead byte without its continuation
      "\xe4\xb8",          // 3-byte sequence cut short
      "\xe4\xb8z\xe4",     //
      "\xc0\xaf",          // overlong '/'
      "\xe0\x80\xaf",      // overlong
      "\xed\xa0\x80",      // surrogate U+D800
      "\xf4\x90\x80\x80",  // above U+10FFFF
      "\xf0\x9f\x98",      // 4-byte cut short
      "\xf8\x88\x80\x80\x80",
  };
  for (const auto& b : bad) {
    auto s = hand_snapshot();
    s.groups[1].rows[0].label = b;
    std::vector<view_snapshot> v = {s};
    EXPECT_THROW(ref_json(v), json::type_error);
    std::string text = to_json(v);
    json got;
    ASSERT_NO_THROW(got = json::parse(text)) << text;
    expect_same(got, json::parse(ref_json(v, json::error_handler_t::replace)));
    EXPECT_NE(text.find("\xef\xbf\xbd"), std::string::npos);
  }
}

TEST(Json, NonFiniteDoublesAreNull) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto s = hand_snapshot();
  s.windows[0].rate_eps = nan;
  s.windows[0].bandwidth_bps = inf;
  s.value.mean = -inf;
  s.groups[1].rows[0].bandwidth_bps = -nan;
  s.correlations[0].latency_ns.p99 = inf;
  expect_matches_reference({s});  // nlohmann-json also writes null
  auto j = json::parse(to_json(s));
  EXPECT_TRUE(j["windows"][0]["rate_eps"].is_null());
  EXPECT_TRUE(j["windows"][0]["bandwidth_bps"].is_null());
  EXPECT_TRUE(j["value"]["mean"].is_null());
  EXPECT_TRUE(j["groups"][1]["rows"][0]["bandwidth_bps"].is_null());
  EXPECT_TRUE(j["correlations"][0]["latency_ns"]["p99"].is_null());
}

TEST(Json, DoublesRoundTripAndStayDoubles) {
  std::vector<double> xs = {0.0, -0.0, 1.0, 7.0, 0.1, 1.0 / 3, 3.5e8, 1e15, 1e15 + 1, 999999999999999.0,
                            9007199254740992.0, 9007199254740994.0, 1e21, 1e-5, 1.234e-5, 0.0001234,
                            5e-324, 2.2250738585072014e-308, std::numeric_limits<double>::max(),
                            -1234.5, -1e300, 18446744073709551616.0};
  std::mt19937_64 rng(3);
  while (xs.size() < 2000) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isfinite(d)) xs.push_back(d);
    xs.push_back(static_cast<double>(rng() % 100'000'000) / 1024);  // typical magnitudes
  }
  view_snapshot s;
  group_table t;
  for (double x : xs) {
    group_row r;
    r.bandwidth_bps = x;
    t.rows.push_back(r);
  }
  s.groups.push_back(t);
  std::vector<view_snapshot> v = {s};
  auto j = json::parse(to_json(v));
  expect_same(j, json::parse(ref_json(v)));
  const auto& rows = j[0]["groups"][0]["rows"];
  ASSERT_EQ(rows.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_TRUE(rows[i]["bandwidth_bps"].is_number_float()) << xs[i];
    double back = rows[i]["bandwidth_bps"].get<double>();
    ASSERT_EQ(std::memcmp(&back, &xs[i], sizeof back), 0) << xs[i];
  }
}

TEST(Json, FractionsAsShortestDigits) {
  // Non-integral doubles of [2^-7, 2^53) take the writer's own digit
  // generation: the text must be std::to_chars' shortest form exactly
  // (so it reads back bit for bit), ties, carries and range ends included.
  std::vector<double> xs = {0.1, 0.2, 0.3, 1.0 / 3, 2.0 / 3, 0.5, 1.5, 0.0078125 * 1.5,
                            std::nextafter(0.0078125, 1.0), 0.0078125 * 3,  // 2^-7 and just above
                            0.9999999999999999, 1.9999999999999998, 9.999999999999998, 99.99999999999999,
                            0.99999999999999994, 4503599627370495.5, 1e15 + 0.5, 123456789012345.67,
                            841872901525317.75, 193045534441193.375, 2.5e-2, 1234.5678};
  std::mt19937_64 rng(8);
  for (int i = 0; i < 100000; ++i) {
    xs.push_back(static_cast<double>(rng() % 10'000'000) * 1e9 / static_cast<double>(1 + rng() % 1'000'000'000));
    xs.push_back(std::ldexp(static_cast<double>(rng() >> 11), -static_cast<int>(rng() % 62)));
  }
  size_t checked = 0;
  for (double x : xs) {
    if (x == std::floor(x) || x < 0.0078125 || x >= 9007199254740992.0) continue;
    view_snapshot s;
    s.windows.resize(1);
    s.windows[0].rate_eps = x;
    s.windows[0].bandwidth_bps = -x;
    std::string text = to_json(s);
    char want[64];
    *std::to_chars(want, want + sizeof want, x).ptr = 0;
    ASSERT_NE(text.find(std::string("\"rate_eps\":") + want + ","), std::string::npos) << want << " in " << text;
    ASSERT_NE(text.find(std::string("\"bandwidth_bps\":-") + want + ","), std::string::npos) << want;
    ++checked;
  }
  EXPECT_GT(checked, 150000u);
}

TEST(Json, IntegersMatchReference) {
  std::vector<uint64_t> xs = {0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 99999999, 100000000,
                              100000001, 999999999999, 1000000000000, 9999999999999999,
                              10000000000000000, 10000000000000001, 9999999999999999999ull,
                              10000000000000000000ull, std::numeric_limits<uint64_t>::max()};
  for (uint64_t p = 1; p && p <= std::numeric_limits<uint64_t>::max() / 10; p *= 10)
    for (uint64_t d : {p - 1, p, p + 1, 2 * p, 5 * p - 1}) xs.push_back(d);
  std::mt19937_64 rng(4);
  for (int i = 0; i < 500; ++i) xs.push_back(rng() >> (rng() % 64));
  view_snapshot s;
  group_table t;
  for (size_t i = 0; i < xs.size(); ++i) {
    group_row r;
    r.key = xs[i];
    r.key2 = xs[xs.size() - 1 - i];
    r.events = xs[(i + 1) % xs.size()];
    r.bytes = xs[(i + 2) % xs.size()];
    r.errors = xs[(i + 3) % xs.size()];
    r.first_ts = xs[(i + 4) % xs.size()];
    r.last_ts = xs[(i + 5) % xs.size()];
    t.rows.push_back(r);
  }
  t.other_bytes = xs.back();
  s.groups.push_back(t);
  s.ts_ns = xs.back();
  s.vm = 0xffffffffu;
  s.sample_every = 0xffffffffu;
  std::vector<view_snapshot> v = {s};
  auto text = to_json(v);
  expect_same(json::parse(text), json::parse(ref_json(v)));
  EXPECT_EQ(text, ref_json(v));  // integers only: byte for byte
  auto j = json::parse(text);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(j[0]["groups"][0]["rows"][i]["key"].get<uint64_t>(), xs[i]);
}

// The longest text every field can take.  The writer sizes its buffer
// from per-part upper bounds and aborts if the text outgrew them; many
// copies of one part make any part's bound that is too small show.
view_snapshot worst_case(size_t windows, size_t groups, size_t rows, size_t corrs) {
  const uint64_t u = std::numeric_limits<uint64_t>::max();
  const double d1 = -1.2345678901234567e-300, d2 = -1.2345678901234567e+21;  // 24, 25 characters
  std::string ctl;  // control characters written \u00XX: 6 characters each
  for (int c = 1; c < 0x20; ++c)
    if (!std::strchr("\b\t\n\f\r", c)) ctl += static_cast<char>(c);
  view_snapshot s;
  s.view = ctl;
  s.vm = 0xffffffffu;
  s.per_vm = false;
  s.ts_ns = s.matched = s.sampled = u;
  s.sample_every = 0xffffffffu;
  s.memory_bytes = u;
  window_stats w;
  w.length = w.events = w.bytes = w.errors = w.first_ts = w.last_ts = u;
  w.rate_eps = d1;
  w.bandwidth_bps = d2;
  w.truncated = false;
  s.windows.assign(windows, w);  // count windows: the longer kind
  const dist_stats dd = {u, d1, d2, d1, d2, d1, d2, d1, d2};
  s.value = dd;
  s.value_of = value_kind::interarrival;
  group_row r;
  r.key = r.key2 = r.events = r.bytes = r.errors = r.first_ts = r.last_ts = u;
  r.label = ctl;
  r.bandwidth_bps = d2;
  for (size_t i = 0; i < groups; ++i) s.groups.push_back({group_key::connection, {}, u, u});
  if (rows) s.groups.push_back({group_key::connection, std::vector<group_row>(rows, r), u, u});
  correlation_stats c;
  c.name = ctl;
  c.matched = c.unmatched = c.expired = c.evicted = c.reordered = c.pending = u;
  c.latency_ns = dd;
  s.correlations.assign(corrs, c);
  return s;
}

TEST(Json, WorstCaseFields) {
  for (auto [w, g, r, c] : {std::tuple{2, 1, 2, 2}, {0, 0, 0, 0}, {1000, 0, 0, 0}, {0, 1000, 0, 0},
                            {0, 0, 1000, 0}, {0, 0, 0, 1000}}) {
    auto s = worst_case(w, g, r, c);
    if (w == 2) s.windows[1].k = window_stats::kind::time;
    std::vector<view_snapshot> v = {s, s};
    auto text = to_json(v);
    EXPECT_NE(text.find("-1234567890123456774144.0"), std::string::npos);  // d2, the longest double
    expect_same(json::parse(text), json::parse(ref_json(v, json::error_handler_t::replace)));
    std::string one;
    to_json(s, one);
    EXPECT_EQ(one, text.substr(1, one.size()));
  }
}

TEST(Json, AppendsToBuffer) {
  auto s = engine_snapshots();
  std::string out = "ok ";
  to_json(s, out);
  EXPECT_EQ(out, "ok " + to_json(s));
  // Reused buffer: the same text again, no growth once it is large enough.
  std::string buf;
  to_json(s, buf);
  size_t cap = buf.capacity();
  buf.clear();
  to_json(s, buf);
  EXPECT_EQ(buf, to_json(s));
  EXPECT_EQ(buf.capacity(), cap);
  std::string one;
  to_json(s[0], one);
  EXPECT_EQ(one, to_json(s[0]));
}

}  // namespace
}  // namespace magnet::filters
