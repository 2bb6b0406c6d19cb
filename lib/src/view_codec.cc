#include "magnet/view_codec.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "magnet/record.h"

namespace magnet::view {
namespace {

// Event records travel in the event ABI's own layout, which is native: the
// wire says little-endian, so only little-endian hosts may send them as is.
static_assert(std::endian::native == std::endian::little,
              "event batches carry native records: add byte swapping for big-endian hosts");

template <class T>
T get(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}

template <class T>
void put(std::vector<uint8_t>& o, T v) {
  if constexpr (std::endian::native == std::endian::little) {
    const size_t n = o.size();
    o.resize(n + sizeof(T));
    std::memcpy(o.data() + n, &v, sizeof v);  // the wire order already
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) o.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
}

double get_double(const uint8_t* p) { return std::bit_cast<double>(get<uint64_t>(p)); }
void put_double(std::vector<uint8_t>& o, double d) { put(o, std::bit_cast<uint64_t>(d)); }

error bad(std::string what) { return error{std::move(what), EPROTO}; }

std::string num(uint64_t v) { return std::to_string(v); }

}  // namespace

uint8_t type_of(const message& m) {
  struct v {
    uint8_t operator()(const hello&) { return MAGNET_VMSG_HELLO; }
    uint8_t operator()(const subscribe&) { return MAGNET_VMSG_SUBSCRIBE; }
    uint8_t operator()(const pull&) { return MAGNET_VMSG_PULL; }
    uint8_t operator()(const welcome&) { return MAGNET_VMSG_WELCOME; }
    uint8_t operator()(const stats&) { return MAGNET_VMSG_STATS; }
    uint8_t operator()(const events&) { return MAGNET_VMSG_EVENTS; }
    uint8_t operator()(const errmsg&) { return MAGNET_VMSG_ERROR; }
    uint8_t operator()(const ping&) { return MAGNET_VMSG_PING; }
    uint8_t operator()(const pong&) { return MAGNET_VMSG_PONG; }
    uint8_t operator()(const resync&) { return MAGNET_VMSG_RESYNC; }
    uint8_t operator()(const unknown& u) { return u.type; }
  };
  return std::visit(v{}, m);
}

std::string type_name(uint8_t t) {
  switch (t) {
    case MAGNET_VMSG_HELLO: return "hello";
    case MAGNET_VMSG_SUBSCRIBE: return "subscribe";
    case MAGNET_VMSG_PULL: return "pull";
    case MAGNET_VMSG_WELCOME: return "welcome";
    case MAGNET_VMSG_STATS: return "stats";
    case MAGNET_VMSG_EVENTS: return "events";
    case MAGNET_VMSG_ERROR: return "error";
    case MAGNET_VMSG_PING: return "ping";
    case MAGNET_VMSG_PONG: return "pong";
    case MAGNET_VMSG_RESYNC: return "resync";
  }
  char b[8];
  std::snprintf(b, sizeof b, "0x%02x", t);
  return b;
}

// ------------------------------------------------------------- encoding ---

namespace {

struct body_writer {
  std::vector<uint8_t>& o;
  uint16_t flags = 0;

  void operator()(const hello& m) {
    o.push_back(m.min_version);
    o.push_back(m.max_version);
    o.push_back(m.role);
    size_t n = std::min<size_t>(m.label.size(), MAGNET_VIEW_MAX_LABEL);
    o.push_back(static_cast<uint8_t>(n));
    put<uint32_t>(o, m.features);
    o.insert(o.end(), m.label.begin(), m.label.begin() + static_cast<long>(n));
  }
  void operator()(const subscribe& m) {
    put<uint32_t>(o, m.period_ms);
    o.push_back(m.mode);
    o.push_back(m.flags);
    put<uint16_t>(o, static_cast<uint16_t>(m.ids.size()));
    put<uint16_t>(o, static_cast<uint16_t>(m.events.size()));
    put<uint16_t>(o, 0);
    for (uint16_t id : m.ids) put<uint16_t>(o, id);
    for (uint16_t t : m.events) put<uint16_t>(o, t);
  }
  void operator()(const pull&) {}
  void operator()(const welcome& m) {
    o.push_back(m.version);
    o.insert(o.end(), 3, 0);
    put<uint32_t>(o, m.min_period_ms);
    put<uint64_t>(o, m.session_id);
    put<uint32_t>(o, m.max_sub_ids);
    put<uint32_t>(o, m.max_body);
  }
  void operator()(const stats& m) {
    put<uint16_t>(o, static_cast<uint16_t>(m.values.size()));
    put<uint16_t>(o, static_cast<uint16_t>(kStatSize));
    put<uint32_t>(o, m.flags);
    for (const auto& v : m.values) {
      put<uint16_t>(o, v.id);
      put<uint16_t>(o, v.flags);
      put<uint32_t>(o, v.index);
      put<uint32_t>(o, v.window_us);
      put<uint32_t>(o, v.age_us);
      put_double(o, v.value);
    }
  }
  void operator()(const events& m) {
    put<uint32_t>(o, m.n);
    put<uint32_t>(o, m.lost);
    o.insert(o.end(), m.records.begin(), m.records.end());
  }
  void operator()(const errmsg& m) {
    size_t n = std::min<size_t>(m.text.size(), MAGNET_VIEW_MAX_ERROR_TEXT);
    put<uint16_t>(o, m.code);
    put<uint16_t>(o, static_cast<uint16_t>(n));
    put<uint32_t>(o, 0);
    o.insert(o.end(), m.text.begin(), m.text.begin() + static_cast<long>(n));
  }
  void operator()(const ping& m) {
    put<uint64_t>(o, m.token);
    put<uint64_t>(o, m.sent_ns);
  }
  void operator()(const pong& m) {
    put<uint64_t>(o, m.token);
    put<uint64_t>(o, m.sent_ns);
    put<uint64_t>(o, m.peer_ns);
  }
  void operator()(const resync& m) {
    put<uint64_t>(o, m.token);
    if (m.reply) flags |= MAGNET_VF_REPLY;
  }
  void operator()(const unknown&) {}
};

}  // namespace

status encode(std::vector<uint8_t>& out, const message& m, uint32_t seq, uint64_t ts_ns,
              uint8_t version) {
  const size_t start = out.size();
  put<uint32_t>(out, MAGNET_VIEW_MAGIC);
  out.push_back(version);
  out.push_back(type_of(m));
  put<uint16_t>(out, 0);  // flags, below
  put<uint32_t>(out, 0);  // body_len, below
  put<uint32_t>(out, seq);
  put<uint64_t>(out, ts_ns);
  body_writer w{out};
  std::visit(w, m);
  const size_t body = out.size() - start - kHeaderSize;
  if (body > MAGNET_VIEW_MAX_BODY) {
    out.resize(start);
    return bad(type_name(type_of(m)) + " body of " + num(body) +
               " bytes exceeds the maximum of " + num(MAGNET_VIEW_MAX_BODY));
  }
  out[start + 6] = static_cast<uint8_t>(w.flags);
  out[start + 7] = static_cast<uint8_t>(w.flags >> 8);
  for (int i = 0; i < 4; ++i) out[start + 8 + i] = static_cast<uint8_t>(body >> (8 * i));
  return {};
}

// ------------------------------------------------------------- decoding ---

result<header> decode_header(std::span<const uint8_t> b) {
  if (b.size() < kHeaderSize) return bad("header truncated at " + num(b.size()) + " bytes");
  const uint8_t* p = b.data();
  uint32_t magic = get<uint32_t>(p);
  if (magic != MAGNET_VIEW_MAGIC) {
    char m[16];
    std::snprintf(m, sizeof m, "0x%08x", magic);
    return bad(std::string("bad magic ") + m);
  }
  header h;
  h.version = p[4];
  h.type = p[5];
  h.flags = get<uint16_t>(p + 6);
  h.body_len = get<uint32_t>(p + 8);
  h.seq = get<uint32_t>(p + 12);
  h.ts_ns = get<uint64_t>(p + 16);
  if (h.version == 0) return bad("version 0 does not exist");
  if (h.body_len > MAGNET_VIEW_MAX_BODY)
    return bad(type_name(h.type) + " body of " + num(h.body_len) +
               " bytes exceeds the maximum of " + num(MAGNET_VIEW_MAX_BODY));
  return h;
}

namespace {

// Bodies with a variable part must be exactly as long as they say; bodies
// of fixed fields only may be longer (fields appended by a later version).
status need(std::string_view what, size_t have, size_t want, bool exact) {
  if (have < want || (exact && have != want))
    return bad(std::string(what) + " body is " + num(have) + " bytes, expected " +
               (exact ? "" : "at least ") + num(want));
  return {};
}

result<message> body_hello(std::span<const uint8_t> b) {
  if (auto s = need("hello", b.size(), sizeof(magnet_view_hello), false); !s) return s.err();
  hello m;
  m.min_version = b[0];
  m.max_version = b[1];
  m.role = b[2];
  uint8_t n = b[3];
  m.features = get<uint32_t>(b.data() + 4);
  if (n > MAGNET_VIEW_MAX_LABEL) return bad("hello label of " + num(n) + " bytes exceeds 64");
  if (auto s = need("hello", b.size(), sizeof(magnet_view_hello) + n, true); !s) return s.err();
  if (m.min_version == 0 || m.min_version > m.max_version)
    return bad("hello versions " + num(m.min_version) + ".." + num(m.max_version) +
               " are not a range");
  if (m.role != MAGNET_VROLE_AGENT && m.role != MAGNET_VROLE_APP)
    return bad("hello role " + num(m.role) + " is unknown");
  m.label.assign(reinterpret_cast<const char*>(b.data()) + 8, n);
  return message{std::move(m)};
}

result<message> body_subscribe(std::span<const uint8_t> b) {
  if (auto s = need("subscribe", b.size(), sizeof(magnet_view_subscribe), false); !s)
    return s.err();
  subscribe m;
  const uint8_t* p = b.data();
  m.period_ms = get<uint32_t>(p);
  m.mode = p[4];
  m.flags = p[5];
  uint16_t ni = get<uint16_t>(p + 6), ne = get<uint16_t>(p + 8);
  if (ni > MAGNET_VIEW_MAX_SUB_IDS)
    return bad("subscribe names " + num(ni) + " stats, at most " + num(MAGNET_VIEW_MAX_SUB_IDS));
  if (ne > MAGNET_VIEW_MAX_SUB_EVENTS)
    return bad("subscribe names " + num(ne) + " event types, at most " +
               num(MAGNET_VIEW_MAX_SUB_EVENTS));
  if (auto s = need("subscribe", b.size(), sizeof(magnet_view_subscribe) + 2u * (ni + ne), true);
      !s)
    return s.err();
  if (m.mode < MAGNET_VMODE_PERIODIC || m.mode > MAGNET_VMODE_PULL)
    return bad("subscribe mode " + num(m.mode) + " is unknown");
  if (m.period_ms < MAGNET_VIEW_MIN_PERIOD_MS || m.period_ms > MAGNET_VIEW_MAX_PERIOD_MS)
    return bad("subscribe period " + num(m.period_ms) + " ms is outside " +
               num(MAGNET_VIEW_MIN_PERIOD_MS) + ".." + num(MAGNET_VIEW_MAX_PERIOD_MS) + " ms");
  if (m.flags & ~MAGNET_VSUB_EVENTS) return bad("subscribe flags " + num(m.flags) + " has unknown bits");
  p += sizeof(magnet_view_subscribe);
  for (uint16_t i = 0; i < ni; ++i, p += 2) m.ids.push_back(get<uint16_t>(p));
  for (uint16_t i = 0; i < ne; ++i, p += 2) m.events.push_back(get<uint16_t>(p));
  return message{std::move(m)};
}

result<message> body_welcome(std::span<const uint8_t> b) {
  if (auto s = need("welcome", b.size(), sizeof(magnet_view_welcome), false); !s) return s.err();
  welcome m;
  const uint8_t* p = b.data();
  m.version = p[0];
  m.min_period_ms = get<uint32_t>(p + 4);
  m.session_id = get<uint64_t>(p + 8);
  m.max_sub_ids = get<uint32_t>(p + 16);
  m.max_body = get<uint32_t>(p + 20);
  if (m.version == 0) return bad("welcome chose version 0");
  if (m.min_period_ms == 0) return bad("welcome minimum period is 0");
  return message{m};
}

result<message> body_stats(std::span<const uint8_t> b) {
  if (auto s = need("stats", b.size(), sizeof(magnet_view_stats), false); !s) return s.err();
  const uint8_t* p = b.data();
  uint16_t n = get<uint16_t>(p), rs = get<uint16_t>(p + 2);
  stats m;
  m.flags = get<uint32_t>(p + 4);
  if (rs < kStatSize || rs > 256 || rs % 8)
    return bad("stats record size " + num(rs) + " is not a multiple of 8 in 24..256");
  if (auto s = need("stats", b.size(), sizeof(magnet_view_stats) + size_t{n} * rs, true); !s)
    return s.err();
  m.values.reserve(n);
  p += sizeof(magnet_view_stats);
  for (uint16_t i = 0; i < n; ++i, p += rs) {
    stat_value v;
    v.id = get<uint16_t>(p);
    v.flags = get<uint16_t>(p + 2);
    v.index = get<uint32_t>(p + 4);
    v.window_us = get<uint32_t>(p + 8);
    v.age_us = get<uint32_t>(p + 12);
    v.value = get_double(p + 16);
    if (!std::isfinite(v.value))
      return bad("stats record " + num(i) + " (id " + num(v.id) + ") is not a finite number");
    m.values.push_back(v);
  }
  return message{std::move(m)};
}

result<message> body_events(std::span<const uint8_t> b) {
  if (auto s = need("events", b.size(), sizeof(magnet_view_events), false); !s) return s.err();
  events m;
  m.n = get<uint32_t>(b.data());
  m.lost = get<uint32_t>(b.data() + 4);
  auto recs = b.subspan(sizeof(magnet_view_events));
  uint32_t count = 0;
  for (size_t off = 0; off < recs.size(); ++count) {
    if (auto s = check_record(recs.subspan(off), "event record " + num(count)); !s)
      return bad(s.err().message);
    off += hdr_of(recs.data() + off).len;
  }
  if (count != m.n)
    return bad("events says " + num(m.n) + " records, body holds " + num(count));
  m.records.assign(recs.begin(), recs.end());
  return message{std::move(m)};
}

result<message> body_error(std::span<const uint8_t> b) {
  if (auto s = need("error", b.size(), sizeof(magnet_view_errmsg), false); !s) return s.err();
  errmsg m;
  m.code = get<uint16_t>(b.data());
  uint16_t n = get<uint16_t>(b.data() + 2);
  if (n > MAGNET_VIEW_MAX_ERROR_TEXT)
    return bad("error text of " + num(n) + " bytes exceeds " + num(MAGNET_VIEW_MAX_ERROR_TEXT));
  if (auto s = need("error", b.size(), sizeof(magnet_view_errmsg) + n, true); !s) return s.err();
  m.text.assign(reinterpret_cast<const char*>(b.data()) + sizeof(magnet_view_errmsg), n);
  return message{std::move(m)};
}

}  // namespace

result<message> decode_body(const header& h, std::span<const uint8_t> b) {
  if (b.size() != h.body_len)
    return bad("body of " + num(b.size()) + " bytes, header says " + num(h.body_len));
  switch (h.type) {
    case MAGNET_VMSG_HELLO: return body_hello(b);
    case MAGNET_VMSG_SUBSCRIBE: return body_subscribe(b);
    case MAGNET_VMSG_PULL: return message{pull{}};
    case MAGNET_VMSG_WELCOME: return body_welcome(b);
    case MAGNET_VMSG_STATS: return body_stats(b);
    case MAGNET_VMSG_EVENTS: return body_events(b);
    case MAGNET_VMSG_ERROR: return body_error(b);
    case MAGNET_VMSG_PING: {
      if (auto s = need("ping", b.size(), sizeof(magnet_view_ping), false); !s) return s.err();
      return message{ping{get<uint64_t>(b.data()), get<uint64_t>(b.data() + 8)}};
    }
    case MAGNET_VMSG_PONG: {
      if (auto s = need("pong", b.size(), sizeof(magnet_view_pong), false); !s) return s.err();
      return message{pong{get<uint64_t>(b.data()), get<uint64_t>(b.data() + 8),
                          get<uint64_t>(b.data() + 16)}};
    }
    case MAGNET_VMSG_RESYNC: {
      if (auto s = need("resync", b.size(), sizeof(magnet_view_resync), false); !s) return s.err();
      return message{resync{get<uint64_t>(b.data()), (h.flags & MAGNET_VF_REPLY) != 0}};
    }
  }
  return message{unknown{h.type}};
}

// --------------------------------------------------------------- reader ---

std::span<uint8_t> reader::prepare() { return {buf_ + used_, sizeof buf_ - used_}; }

void reader::commit(size_t n) { used_ += std::min(n, sizeof buf_ - used_); }

void reader::append(std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    auto room = prepare();
    if (room.empty()) return;  // a full buffer always holds a frame: next() first
    size_t n = std::min(room.size(), bytes.size());
    std::memcpy(room.data(), bytes.data(), n);
    commit(n);
    bytes = bytes.subspan(n);
  }
}

void reader::consume(size_t n) {
  std::memmove(buf_, buf_ + n, used_ - n);
  used_ -= n;
}

void reader::resync() { scanning_ = true; }

reader::state reader::next(frame& out, error& err) {
  if (scanning_) {
    // Skip to the next magic whose header also decodes.
    size_t i = 0;
    for (; i + 4 <= used_; ++i) {
      if (get<uint32_t>(buf_ + i) != MAGNET_VIEW_MAGIC) continue;
      if (used_ - i < kHeaderSize) break;  // wait for the rest of this candidate
      if (decode_header({buf_ + i, kHeaderSize})) break;
    }
    if (i + 4 > used_) i = used_ > 3 ? used_ - 3 : 0;  // keep a possible magic prefix
    skipped_ += i;
    consume(i);
    if (used_ < kHeaderSize) return state::more;
    scanning_ = false;
  }
  if (used_ < kHeaderSize) return state::more;
  auto h = decode_header({buf_, kHeaderSize});
  if (!h) {
    err = h.err();
    consume(std::min<size_t>(used_, 1));  // resync() would start at the next byte
    return state::bad;
  }
  if (used_ < kHeaderSize + h->body_len) return state::more;
  auto m = decode_body(*h, {buf_ + kHeaderSize, h->body_len});
  consume(kHeaderSize + h->body_len);
  if (!m) {
    err = error{type_name(h->type) + ": " + m.err().message, EPROTO};
    return state::bad;
  }
  out.h = *h;
  out.m = std::move(*m);
  return state::frame;
}

// ---------------------------------------------------------- stat catalog ---

namespace {
constexpr stat_info kStats[] = {
#define MAGNET_X_STAT_INFO(sym, id, name, unit, desc) {id, name, unit, desc},
    MAGNET_VIEW_STATS(MAGNET_X_STAT_INFO)
#undef MAGNET_X_STAT_INFO
};
}  // namespace

std::span<const stat_info> all_stats() { return kStats; }

const stat_info* find_stat(uint16_t id) {
  for (const auto& s : kStats)
    if (s.id == id) return &s;
  return nullptr;
}

const stat_info* find_stat(std::string_view name) {
  for (const auto& s : kStats)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace magnet::view
