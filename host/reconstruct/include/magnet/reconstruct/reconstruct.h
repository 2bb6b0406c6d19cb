// The phases of message reconstruction (after Singh & Subhlok's method, with
// what a host sees today: GSO super-segments, PSH, direction changes, time
// gaps), best-of-N reconciliation, the summary table and the scoring
// against a truth.  Pure functions over segment.h's types.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "magnet/reconstruct/segment.h"

namespace magnet::reconstruct {

// Phase 1: packets grouped by connection (the 5-tuple, both directions), in
// order of each connection's first packet.
std::vector<stream> separate(const std::vector<packet>& packets);

// Phase 2: per direction, segments put in byte order from the first byte
// (after the SYN, or the first seen byte, then marked partial); bytes sent
// again (retransmissions, duplicates) dropped, overlaps trimmed, the bytes
// no segment carried put in as one filled segment per gap.  Segments
// without payload are dropped.  Each direction's times are made monotone
// (a reordered segment takes its predecessor's time if that is later), and
// both directions merged by time.
void sanitise(stream& s);

// When a segment's size ends a message (the seed's rule: shorter than the
// direction's MSS).  auto_: only in a direction where no segment carries
// PSH: where the sender sets PSH it marks every end of a write, and with
// GSO super-segments of varying sizes the size says nothing.
enum class size_rule { auto_, always, never };

struct cut_options {
  uint64_t gap_ns = 0;   // a pause longer than this between segments of a message ends it (0: none)
  uint32_t mss = 0;      // the MSS for the size rule; 0: the largest payload seen per direction
  size_rule size = size_rule::auto_;
};

// Phase 3: a sanitised stream cut into messages: after a segment with PSH
// or FIN, after one shorter than the MSS (size_rule), before a segment of
// the other direction, and before one that comes more than gap_ns after
// the message's last.  A filled segment never ends a message.
std::vector<message> cut(const stream& s, const cut_options& o);

// The largest payload per direction (filled segments not counted).
std::array<uint32_t, 2> mss_estimate(const stream& s);

// Phase 4: best of N.  Each run's messages are turned into cut offsets per
// direction (the byte offset where a message ends); an offset is kept when
// more than half the runs cut there.  Messages are rebuilt from the kept
// cuts and ordered, and timed, by the first run: each takes the times of
// the first run's messages holding its first and last byte.
std::vector<message> reconcile(const std::vector<std::vector<message>>& runs);

// The MAGNeT table: application messages against wire segments, per
// direction.  Intervals are between the starts of successive ones.
struct figures {
  uint64_t count = 0;
  double mean_size = 0, median_size = 0;
  double mean_interval_ns = 0, median_interval_ns = 0;
};
struct summary_row {
  direction dir;
  figures messages, segments;
};
std::vector<summary_row> summarise(const stream& sanitised, const std::vector<message>& msgs);

// A reconstruction against the truth (what the application sent), per
// direction by byte offset.  Each percentage is of the reconstructed
// messages and includes the ones before it: exact (same first and last
// byte); within 100 bytes (the true message it overlaps most differs in
// size by at most 100); approximate (also: it is the merge of two
// neighbouring true messages, or a true message is its merge with a
// neighbour); no match is the rest.
struct score {
  uint64_t messages = 0;
  double exact_pct = 0, within100_pct = 0, approximate_pct = 0, no_match_pct = 0;
};
score compare(const std::vector<message>& reconstructed, const std::vector<message>& truth);

}  // namespace magnet::reconstruct
