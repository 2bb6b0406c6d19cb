// The event catalogue, generated from proto/'s MAGNET_EVENTS list: names,
// payload kinds, sizes, and selection by dotted prefix.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "magnet/event.h"
#include "magnet/result.h"

namespace magnet {

struct event_info {
  uint16_t type;
  std::string_view name;
  uint16_t payload_kind;
};

std::span<const event_info> all_events();
const event_info* find_event(uint16_t type);
const event_info* find_event(std::string_view name);
std::string event_name(uint16_t type);  // "0x1234" for unknown ids

// Size of the fixed payload struct of a kind (0 for none/unknown).
size_t payload_size(uint16_t payload_kind);
// Smallest payload a reader accepts: fields appended by a later format minor
// may be missing from records an older writer made.
size_t payload_min_size(uint16_t payload_kind);
std::string_view payload_kind_name(uint16_t payload_kind);

// Probe slot of a probe-produced event type, or -1.
int probe_slot(uint16_t type);
uint16_t probe_type(int slot);

// "net.sock,sched.switch" -> the event types; a part selects every event
// whose name equals it or starts with it followed by '.'.  "all" selects
// every probe event but packet capture (net.pkt.*), which only a part
// naming "net.pkt" or one of its events selects.  Unknown names give an
// error listing what exists.
result<std::set<uint16_t>> select_events(std::string_view list);

// True if @name equals @prefix or starts with "@prefix.".
bool name_matches(std::string_view name, std::string_view prefix);

}  // namespace magnet
