// The view protocol codec (proto/magnet/view.h): typed messages, an encoder
// and a strict, bounded, streaming decoder.  Shared by the host daemon, the
// guest agent and the client library; nothing here does I/O.
//
// Decoding never trusts a length before checking it against the body it
// claims to describe, and every error names what was wrong (the text is for
// logs and ERROR frames).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "magnet/result.h"
#include "magnet/view.h"

namespace magnet::view {

constexpr size_t kHeaderSize = sizeof(magnet_view_hdr);
constexpr size_t kMaxFrame = kHeaderSize + MAGNET_VIEW_MAX_BODY;
constexpr size_t kStatSize = sizeof(magnet_view_stat);

struct header {
  uint8_t version = MAGNET_VIEW_VERSION;
  uint8_t type = 0;
  uint16_t flags = 0;
  uint32_t body_len = 0;
  uint32_t seq = 0;
  uint64_t ts_ns = 0;
};

struct hello {
  uint8_t min_version = MAGNET_VIEW_VERSION_MIN;
  uint8_t max_version = MAGNET_VIEW_VERSION;
  uint8_t role = MAGNET_VROLE_AGENT;
  uint32_t features = 0;
  std::string label;  // free text for logs; never an identity
  bool operator==(const hello&) const = default;
};

struct subscribe {
  uint32_t period_ms = 1000;
  uint8_t mode = MAGNET_VMODE_PERIODIC;
  uint8_t flags = 0;
  std::vector<uint16_t> ids;     // empty: every stat
  std::vector<uint16_t> events;  // with MAGNET_VSUB_EVENTS; empty: every type
  bool operator==(const subscribe&) const = default;
};

struct pull {
  bool operator==(const pull&) const = default;
};

struct welcome {
  uint8_t version = MAGNET_VIEW_VERSION;
  uint32_t min_period_ms = MAGNET_VIEW_MIN_PERIOD_MS;
  uint64_t session_id = 0;
  uint32_t max_sub_ids = MAGNET_VIEW_MAX_SUB_IDS;
  uint32_t max_body = MAGNET_VIEW_MAX_BODY;
  bool operator==(const welcome&) const = default;
};

struct stat_value {
  uint16_t id = 0;
  uint16_t flags = 0;  // MAGNET_VSTAT_*
  uint32_t index = 0;
  uint32_t window_us = 0;
  uint32_t age_us = 0;
  double value = 0;
  bool valid() const { return flags & MAGNET_VSTAT_VALID; }
  bool operator==(const stat_value&) const = default;
};

struct stats {
  uint32_t flags = 0;  // MAGNET_VSTATS_*
  std::vector<stat_value> values;
  bool operator==(const stats&) const = default;
};

// Event records (magnet_hdr + payload each), back to back, validated.
struct events {
  uint32_t lost = 0;
  uint32_t n = 0;
  std::vector<uint8_t> records;
  bool operator==(const events&) const = default;
};

struct errmsg {
  uint16_t code = 0;
  std::string text;
  bool operator==(const errmsg&) const = default;
};

struct ping {
  uint64_t token = 0, sent_ns = 0;
  bool operator==(const ping&) const = default;
};

struct pong {
  uint64_t token = 0, sent_ns = 0, peer_ns = 0;
  bool operator==(const pong&) const = default;
};

struct resync {
  uint64_t token = 0;
  bool reply = false;  // MAGNET_VF_REPLY in the header
  bool operator==(const resync&) const = default;
};

// A frame whose type this code does not know: kept so the receiver can
// answer MAGNET_VERR_UNKNOWN_TYPE and go on (forward compatibility).
struct unknown {
  uint8_t type = 0;
  bool operator==(const unknown&) const = default;
};

using message = std::variant<hello, subscribe, pull, welcome, stats, events, errmsg, ping, pong,
                             resync, unknown>;

uint8_t type_of(const message& m);
std::string type_name(uint8_t type);  // "hello", ..., "0x7f"

struct frame {
  header h;
  message m;
};

// ------------------------------------------------------------- encoding ---

// Appends one frame to @out.  The body must fit MAGNET_VIEW_MAX_BODY (the
// caller splits stats and events; see max_stats_per_frame): an oversize
// body is an error and nothing is appended.
status encode(std::vector<uint8_t>& out, const message& m, uint32_t seq, uint64_t ts_ns,
              uint8_t version = MAGNET_VIEW_VERSION);

constexpr size_t max_stats_per_frame() {
  return (MAGNET_VIEW_MAX_BODY - sizeof(magnet_view_stats)) / kStatSize;
}

// ------------------------------------------------------------- decoding ---

// Checks a header at the start of @b (kHeaderSize bytes): magic, length
// bound.  The type is not checked here (unknown types are framed too).
result<header> decode_header(std::span<const uint8_t> b);
// Decodes and checks a body of type h.type (b.size() == h.body_len).
result<message> decode_body(const header& h, std::span<const uint8_t> b);

// Streaming decoder over a byte stream: the caller reads into prepare(),
// commits what arrived, then takes frames with next() until it says more
// bytes are needed.  Memory is bounded by kMaxFrame.
//
// On a bad frame next() returns the error once; the stream is then out of
// step.  A caller that can resynchronise (a virtio-serial channel outlives
// its users) calls resync(): bytes are then skipped up to the next magic
// whose header is plausible.  Otherwise the caller closes the connection.
class reader {
 public:
  enum class state { more, frame, bad };

  std::span<uint8_t> prepare();  // free room (never empty)
  void commit(size_t n);
  // Feeds bytes through prepare/commit (tests, fuzzing).
  void append(std::span<const uint8_t> bytes);

  state next(frame& out, error& err);

  void resync();
  bool resyncing() const { return scanning_; }
  // Bytes of an incomplete frame are waiting (for frame deadlines).
  bool partial() const { return used_ > 0; }
  // Bytes dropped while resynchronising.
  uint64_t skipped() const { return skipped_; }

 private:
  void consume(size_t n);
  uint8_t buf_[kMaxFrame];
  size_t used_ = 0;
  bool scanning_ = false;
  uint64_t skipped_ = 0;
};

// ---------------------------------------------------------- stat catalog ---

struct stat_info {
  uint16_t id;
  std::string_view name, unit, description;
};
std::span<const stat_info> all_stats();
const stat_info* find_stat(uint16_t id);
const stat_info* find_stat(std::string_view name);

}  // namespace magnet::view
