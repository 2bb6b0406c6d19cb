// The view protocol codec: round trips of every message and every rejection
// path of the decoder, the streaming reader and its resynchronisation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "magnet/event.h"
#include "magnet/view_codec.h"

namespace magnet::view {
namespace {

std::vector<uint8_t> enc(const message& m, uint32_t seq = 7, uint64_t ts = 123456789) {
  std::vector<uint8_t> out;
  auto s = encode(out, m, seq, ts);
  EXPECT_TRUE(s) << s.err().message;
  return out;
}

// Decodes exactly one frame from @b with the streaming reader.
result<frame> dec(const std::vector<uint8_t>& b) {
  reader r;
  r.append(b);
  frame f;
  error e;
  switch (r.next(f, e)) {
    case reader::state::frame: return f;
    case reader::state::bad: return e;
    case reader::state::more: return error{"incomplete"};
  }
  return error{"?"};
}

template <class T>
T roundtrip(const T& m) {
  auto f = dec(enc(m));
  EXPECT_TRUE(f) << f.err().message;
  if (!f) return T{};
  EXPECT_EQ(f->h.seq, 7u);
  EXPECT_EQ(f->h.ts_ns, 123456789u);
  EXPECT_EQ(f->h.version, MAGNET_VIEW_VERSION);
  EXPECT_EQ(f->h.type, type_of(m));
  const T* got = std::get_if<T>(&f->m);
  EXPECT_NE(got, nullptr);
  return got ? *got : T{};
}

std::vector<uint8_t> event_record(uint16_t type, size_t payload) {
  std::vector<uint8_t> r(sizeof(magnet_hdr) + payload);
  magnet_hdr h{};
  h.ts_ns = 5;
  h.vm_id = 3;
  h.type = type;
  h.len = static_cast<uint16_t>(r.size());
  std::memcpy(r.data(), &h, sizeof h);
  return r;
}

TEST(ViewCodec, EveryMessageRoundTrips) {
  hello h{1, 1, MAGNET_VROLE_AGENT, 0, "magnet-agent 0.1"};
  EXPECT_EQ(roundtrip(h), h);
  subscribe s{100, MAGNET_VMODE_ON_CHANGE, MAGNET_VSUB_EVENTS, {1, 2, 0x0101}, {0x0500}};
  EXPECT_EQ(roundtrip(s), s);
  EXPECT_EQ(roundtrip(pull{}), pull{});
  welcome w{1, 20, 0x1122334455667788ull, 256, MAGNET_VIEW_MAX_BODY};
  EXPECT_EQ(roundtrip(w), w);
  stats st{MAGNET_VSTATS_GAP,
           {{MAGNET_STAT_TAP_TX_BPS, MAGNET_VSTAT_VALID, 0, 1000000, 1234, 2.5e7},
            {MAGNET_STAT_VCPU_RUN, 0, 3, 1000000, 0, -0.0},
            {0x7777, MAGNET_VSTAT_VALID, 0xffffffff, 0, 0xffffffff, 1e300}}};
  EXPECT_EQ(roundtrip(st), st);
  events ev;
  auto r1 = event_record(MAGNET_EV_VMNET_QUEUE_TX, sizeof(magnet_vmnet_queue));
  auto r2 = event_record(MAGNET_EV_NET_DROP, sizeof(magnet_net_drop));
  ev.records = r1;
  ev.records.insert(ev.records.end(), r2.begin(), r2.end());
  ev.n = 2;
  ev.lost = 9;
  EXPECT_EQ(roundtrip(ev), ev);
  errmsg e{MAGNET_VERR_RATE, "too many subscriptions"};
  EXPECT_EQ(roundtrip(e), e);
  ping p{42, 1000};
  EXPECT_EQ(roundtrip(p), p);
  pong q{42, 1000, 2000};
  EXPECT_EQ(roundtrip(q), q);
  resync rs{77, true};
  EXPECT_EQ(roundtrip(rs), rs);
  resync rq{78, false};
  EXPECT_EQ(roundtrip(rq), rq);
}

TEST(ViewCodec, HeaderIsLittleEndianOnTheWire) {
  auto b = enc(ping{1, 2}, 0x01020304, 0x1122334455667788ull);
  ASSERT_EQ(b.size(), kHeaderSize + 16);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "MGNV");
  EXPECT_EQ(b[4], MAGNET_VIEW_VERSION);
  EXPECT_EQ(b[5], MAGNET_VMSG_PING);
  EXPECT_EQ(b[8], 16);  // body_len
  EXPECT_EQ(b[12], 0x04);
  EXPECT_EQ(b[15], 0x01);
  EXPECT_EQ(b[16], 0x88);
  EXPECT_EQ(b[23], 0x11);
}

TEST(ViewCodec, UnknownTypeIsFramedForForwardCompatibility) {
  auto b = enc(ping{1, 2});
  b[5] = 0x3e;  // a server message type of a later version
  auto f = dec(b);
  ASSERT_TRUE(f) << f.err().message;
  ASSERT_TRUE(std::holds_alternative<unknown>(f->m));
  EXPECT_EQ(std::get<unknown>(f->m).type, 0x3e);
}

TEST(ViewCodec, FixedBodiesAcceptAppendedFields) {
  auto b = enc(welcome{1, 20, 5, 256, 16384});
  b.insert(b.end(), {1, 2, 3, 4, 5, 6, 7, 8});
  b[8] = static_cast<uint8_t>(b[8] + 8);
  auto f = dec(b);
  ASSERT_TRUE(f) << f.err().message;
  EXPECT_EQ(std::get<welcome>(f->m).session_id, 5u);
}

// ---------------------------------------------------------- rejections ---

// Re-encodes a frame's body length after the body was edited.
void fix_len(std::vector<uint8_t>& b) {
  uint32_t n = static_cast<uint32_t>(b.size() - kHeaderSize);
  for (int i = 0; i < 4; ++i) b[8 + i] = static_cast<uint8_t>(n >> (8 * i));
}

void expect_bad(std::vector<uint8_t> b, const std::string& words) {
  auto f = dec(b);
  ASSERT_FALSE(f) << "accepted a frame that should be refused (" << words << ")";
  EXPECT_NE(f.err().message.find(words), std::string::npos) << f.err().message;
}

TEST(ViewCodec, HeaderRejections) {
  auto b = enc(ping{});
  auto m = b;
  m[0] = 'X';
  expect_bad(m, "bad magic");
  m = b;
  m[4] = 0;
  expect_bad(m, "version 0");
  m = b;
  uint32_t big = MAGNET_VIEW_MAX_BODY + 1;
  std::memcpy(&m[8], &big, 4);
  expect_bad(m, "exceeds the maximum");
  EXPECT_FALSE(decode_header(std::span<const uint8_t>(b.data(), 10)));
}

TEST(ViewCodec, HelloRejections) {
  auto good = enc(hello{1, 1, MAGNET_VROLE_AGENT, 0, "abc"});
  auto b = good;
  b[kHeaderSize + 3] = 65;  // label_len > 64
  expect_bad(b, "exceeds 64");
  b = good;
  b[kHeaderSize + 3] = 5;  // claims more label than the body holds
  expect_bad(b, "expected 13");
  b = good;
  b.push_back('x');
  fix_len(b);
  expect_bad(b, "expected 11");  // exact: a label with an unannounced tail
  b = good;
  b[kHeaderSize + 0] = 2;  // min > max
  expect_bad(b, "not a range");
  b = good;
  b[kHeaderSize + 0] = 0;
  expect_bad(b, "not a range");
  b = good;
  b[kHeaderSize + 2] = 9;
  expect_bad(b, "role 9");
  b = good;
  b.resize(kHeaderSize + 5);
  fix_len(b);
  expect_bad(b, "at least 8");
}

TEST(ViewCodec, SubscribeRejections) {
  auto good = enc(subscribe{100, MAGNET_VMODE_PERIODIC, 0, {1, 2}, {}});
  auto b = good;
  b[kHeaderSize + 4] = 4;
  expect_bad(b, "mode 4");
  b = good;
  b[kHeaderSize + 4] = 0;
  expect_bad(b, "mode 0");
  for (uint32_t p : {0u, 19u, 60001u}) {
    b = good;
    std::memcpy(&b[kHeaderSize], &p, 4);
    expect_bad(b, "period " + std::to_string(p));
  }
  b = good;
  b[kHeaderSize + 5] = 0x80;
  expect_bad(b, "unknown bits");
  b = good;
  uint16_t many = MAGNET_VIEW_MAX_SUB_IDS + 1;
  std::memcpy(&b[kHeaderSize + 6], &many, 2);
  expect_bad(b, "at most 256");
  b = good;
  uint16_t evs = MAGNET_VIEW_MAX_SUB_EVENTS + 1;
  std::memcpy(&b[kHeaderSize + 8], &evs, 2);
  expect_bad(b, "at most 32");
  b = good;
  b[kHeaderSize + 6] = 3;  // three ids announced, two present
  expect_bad(b, "expected 18");
  b = good;
  b.push_back(0);
  b.push_back(0);
  fix_len(b);
  expect_bad(b, "expected 16");
}

TEST(ViewCodec, WelcomeRejections) {
  auto good = enc(welcome{1, 20, 5, 256, 16384});
  auto b = good;
  b[kHeaderSize] = 0;
  expect_bad(b, "version 0");
  b = good;
  std::memset(&b[kHeaderSize + 4], 0, 4);
  expect_bad(b, "minimum period is 0");
  b = good;
  b.resize(kHeaderSize + 23);
  fix_len(b);
  expect_bad(b, "at least 24");
}

TEST(ViewCodec, StatsRejections) {
  stats st{0, {{1, 1, 0, 0, 0, 1.0}, {2, 1, 0, 0, 0, 2.0}}};
  auto good = enc(st);
  auto b = good;
  b[kHeaderSize + 2] = 16;  // record size below 24
  expect_bad(b, "record size 16");
  b = good;
  b[kHeaderSize + 2] = 28;  // not a multiple of 8
  expect_bad(b, "record size 28");
  b = good;
  b[kHeaderSize] = 3;  // three records announced
  expect_bad(b, "expected 80");
  for (double bad_value : {std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity()}) {
    stats s2{0, {{1, 1, 0, 0, 0, bad_value}}};
    std::vector<uint8_t> out;
    ASSERT_TRUE(encode(out, s2, 1, 1));
    expect_bad(out, "not a finite number");
  }
  // A later version's longer records are stepped over by their size.
  std::vector<uint8_t> wide = good;
  std::vector<uint8_t> body(good.begin() + kHeaderSize, good.begin() + kHeaderSize + 8);
  body[2] = 32;
  for (int i = 0; i < 2; ++i) {
    auto rec = std::vector<uint8_t>(good.begin() + kHeaderSize + 8 + 24 * i,
                                    good.begin() + kHeaderSize + 8 + 24 * (i + 1));
    body.insert(body.end(), rec.begin(), rec.end());
    body.insert(body.end(), 8, 0xee);
  }
  wide.resize(kHeaderSize);
  wide.insert(wide.end(), body.begin(), body.end());
  fix_len(wide);
  auto f = dec(wide);
  ASSERT_TRUE(f) << f.err().message;
  EXPECT_EQ(std::get<stats>(f->m), st);
}

TEST(ViewCodec, EventsRejections) {
  events ev;
  ev.records = event_record(MAGNET_EV_VMNET_QUEUE_TX, sizeof(magnet_vmnet_queue));
  ev.n = 1;
  auto good = enc(ev);
  auto b = good;
  b[kHeaderSize] = 2;  // two announced, one present
  expect_bad(b, "says 2 records, body holds 1");
  b = good;
  // Record length pointing past the body.
  uint16_t len = 200;
  std::memcpy(&b[kHeaderSize + 8 + offsetof(magnet_hdr, len)], &len, 2);
  expect_bad(b, "event record 0");
  b = good;
  len = 8;  // shorter than a header
  std::memcpy(&b[kHeaderSize + 8 + offsetof(magnet_hdr, len)], &len, 2);
  expect_bad(b, "event record 0");
  b = good;
  b.resize(kHeaderSize + 4);
  fix_len(b);
  expect_bad(b, "at least 8");
}

TEST(ViewCodec, ErrorAndSmallBodiesRejections) {
  auto good = enc(errmsg{1, "abc"});
  auto b = good;
  uint16_t n = MAGNET_VIEW_MAX_ERROR_TEXT + 1;
  std::memcpy(&b[kHeaderSize + 2], &n, 2);
  expect_bad(b, "exceeds 256");
  b = good;
  b[kHeaderSize + 2] = 4;
  expect_bad(b, "expected 12");
  for (auto [m, want] : std::vector<std::pair<message, size_t>>{
           {ping{}, 16}, {pong{}, 24}, {resync{}, 8}}) {
    auto x = enc(m);
    x.resize(x.size() - 1);
    fix_len(x);
    expect_bad(x, "at least " + std::to_string(want));
  }
}

TEST(ViewCodec, EncoderRefusesOversizeBodies) {
  stats st;
  st.values.resize(max_stats_per_frame() + 1);
  std::vector<uint8_t> out = {1, 2, 3};
  auto s = encode(out, st, 1, 1);
  EXPECT_FALSE(s);
  EXPECT_EQ(out.size(), 3u) << "nothing appended";
  st.values.resize(max_stats_per_frame());
  EXPECT_TRUE(encode(out, st, 1, 1));
  EXPECT_LE(out.size() - 3, kMaxFrame);
}

// ---------------------------------------------------------------- reader ---

TEST(ViewReader, FramesSplitAtEveryByteAndBatched) {
  std::vector<uint8_t> all;
  for (uint32_t i = 1; i <= 3; ++i) {
    auto b = enc(ping{i, i * 10}, i);
    all.insert(all.end(), b.begin(), b.end());
  }
  reader r;
  frame f;
  error e;
  std::vector<uint64_t> tokens;
  for (uint8_t c : all) {
    r.append({&c, 1});
    while (r.next(f, e) == reader::state::frame) tokens.push_back(std::get<ping>(f.m).token);
  }
  EXPECT_EQ(tokens, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_FALSE(r.partial());
  reader r2;
  r2.append(all);
  int n = 0;
  while (r2.next(f, e) == reader::state::frame) ++n;
  EXPECT_EQ(n, 3);
}

TEST(ViewReader, ResynchronisesAfterGarbageAndFalseMagic) {
  std::vector<uint8_t> s = {'x', 'y', 'M', 'G', 'N', 'V', 0, 0, 0xff, 0xff, 0xff, 0xff};
  s.resize(40, 0x55);  // a "magic" whose header does not decode, then noise
  auto good = enc(resync{99, false});
  s.insert(s.end(), good.begin(), good.end());
  reader r;
  r.append(s);
  frame f;
  error e;
  ASSERT_EQ(r.next(f, e), reader::state::bad);
  EXPECT_NE(e.message.find("magic"), std::string::npos) << e.message;
  r.resync();
  ASSERT_EQ(r.next(f, e), reader::state::frame) << e.message;
  EXPECT_EQ(std::get<resync>(f.m).token, 99u);
  EXPECT_EQ(r.skipped(), 39u);
  EXPECT_FALSE(r.resyncing());
}

TEST(ViewReader, ResyncWaitsForAMagicCutInTwo) {
  auto good = enc(ping{5, 6});
  reader r;
  r.resync();
  std::vector<uint8_t> junk = {1, 2, 3, 4, 5};
  r.append(junk);
  r.append({good.data(), 2});  // "MG"
  frame f;
  error e;
  EXPECT_EQ(r.next(f, e), reader::state::more);
  r.append({good.data() + 2, good.size() - 2});
  ASSERT_EQ(r.next(f, e), reader::state::frame) << e.message;
  EXPECT_EQ(std::get<ping>(f.m).token, 5u);
}

TEST(ViewReader, MemoryIsBoundedByOneFrame) {
  reader r;
  std::vector<uint8_t> big(3 * kMaxFrame, 0xab);
  r.append(big);  // stops when full
  EXPECT_TRUE(r.prepare().empty());
  frame f;
  error e;
  EXPECT_EQ(r.next(f, e), reader::state::bad);
  r.resync();
  EXPECT_EQ(r.next(f, e), reader::state::more);
  EXPECT_FALSE(r.prepare().empty());
}

// --------------------------------------------------------------- catalog ---

TEST(ViewStats, IdsAndNamesAreUniqueAndInTheirRanges) {
  std::set<uint16_t> ids;
  std::set<std::string_view> names;
  for (const auto& s : all_stats()) {
    EXPECT_TRUE(ids.insert(s.id).second) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_EQ(find_stat(s.id), &s);
    EXPECT_EQ(find_stat(s.name), &s);
    EXPECT_FALSE(s.description.empty()) << s.name;
    const bool host = s.id >= 0x0001 && s.id <= 0x07ff, guest = s.id >= 0x0800 && s.id <= 0x0fff;
    EXPECT_TRUE(host || guest) << s.name;
    EXPECT_EQ(guest, s.name.substr(0, 6) == "guest." || s.name.substr(0, 8) == "journey." ||
                         s.name.substr(0, 6) == "clock." ||
                         (s.name.substr(0, 5) == "host." && s.id != MAGNET_STAT_HOST_MARKER))
        << s.name;
  }
  EXPECT_EQ(find_stat("no.such"), nullptr);
  EXPECT_EQ(find_stat(uint16_t{0}), nullptr);
}

// The fuzzer's seed corpus stays meaningful as the protocol evolves: the
// "ok-" seeds decode without an error, the "bad-" ones hit one.  (A seed's
// first byte is the fuzz target's control byte.)
TEST(ViewCodec, SeedCorpusDecodesAsNamed) {
  namespace fs = std::filesystem;
  int n = 0;
  for (const auto& ent : fs::directory_iterator(MAGNET_SOURCE_DIR "/fuzz/corpus/view_frame")) {
    std::ifstream f(ent.path(), std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), {});
    ASSERT_FALSE(b.empty()) << ent.path();
    reader r;
    r.append(std::span<const uint8_t>(b).subspan(1));
    frame fr;
    error e;
    int frames = 0, bad = 0;
    for (auto st = r.next(fr, e); st != reader::state::more; st = r.next(fr, e)) {
      if (st == reader::state::bad) {
        ++bad;
        r.resync();
      } else {
        ++frames;
      }
    }
    const std::string name = ent.path().filename();
    if (name.rfind("ok-", 0) == 0) {
      EXPECT_EQ(bad, 0) << name << ": " << e.message;
      EXPECT_GE(frames, 1) << name;
    } else {
      EXPECT_GE(bad, 1) << name;
    }
    ++n;
  }
  EXPECT_GE(n, 15);
}

}  // namespace
}  // namespace magnet::view
