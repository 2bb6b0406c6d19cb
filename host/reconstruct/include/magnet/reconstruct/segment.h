// TCP segments as a capture saw them, grouped into streams, and the
// application messages rebuilt from them (docs/reconstruct.md).  Plain data:
// the readers (readers.h) fill it, the phases (reconstruct.h) work on it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace magnet::reconstruct {

// The TCP flags the phases look at, as in the TCP header's byte 13.
enum tcp_flag : uint8_t { kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10 };

struct endpoint {
  std::array<uint8_t, 16> addr{};  // IPv4 in the first 4 bytes
  uint16_t port = 0;
  bool v6 = false;
  auto operator<=>(const endpoint&) const = default;
};
std::string to_string(const endpoint& e);

// One TCP segment as a reader found it, before stream separation.
// @payload is the size the capture recorded: a GSO/TSO super-segment at a
// tap is one segment of up to 64 KiB, never split into wire MSS pieces.
struct packet {
  uint64_t time_ns = 0;
  endpoint src, dst;
  uint32_t seq = 0;
  uint32_t payload = 0;
  uint8_t flags = 0;
  uint32_t vm_id = 0;  // magnet traces: the VM the record was tagged with
};

enum class direction : uint8_t { a_to_b = 0, b_to_a = 1 };
inline int index(direction d) { return static_cast<int>(d); }
const char* to_string(direction d);

struct segment {
  uint64_t time_ns = 0;
  direction dir = direction::a_to_b;
  uint32_t seq = 0;
  uint32_t payload = 0;
  uint8_t flags = 0;
  bool filled = false;  // sanitise: bytes the capture missed, put in their place
};

// Both directions of one connection.  Side a opened it (sent the SYN) or,
// without a SYN in the capture, sent its first segment.
struct stream {
  endpoint a, b;
  uint32_t vm_id = 0;
  std::vector<segment> segments;  // capture order until sanitised, then byte order per direction
  bool partial = false;           // started mid-connection, or bytes were missing (filled)
  uint64_t dropped = 0;           // sanitise: retransmitted or duplicated segments
  uint64_t filled_bytes = 0;      // sanitise: bytes of the gaps filled
};

struct message {
  direction dir = direction::a_to_b;
  uint64_t size = 0;
  uint64_t first_ns = 0, last_ns = 0;  // its first and last segment
  uint32_t segments = 0;
  bool gap = false;  // holds filled bytes: its size is right, its cuts may not be
};

}  // namespace magnet::reconstruct
