// Exports of a trace for other tools (`magnet dump --format ulm|perfetto`):
// NetLogger ULM lines, as MAGNeT fed NetLogger's visualiser, and the typed
// payload values both exporters read from the record codec's field tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/event.h"
#include "magnet/record.h"

namespace magnet::host {

// One payload field of a record, typed: integers stay integers (Perfetto
// keeps them as numbers), addresses, strings and hex words become text.
struct field_value {
  std::string_view name;  // the codec's field name (record.cc), e.g. "sport"
  enum class kind { u64, s64, text } k;
  uint64_t u = 0;
  int64_t s = 0;
  std::string text;
};

// The payload fields of @rec that its length holds (fields appended by a
// later format minor may be missing), in the codec's order.  None for
// unknown event ids.
std::vector<field_value> payload_values(const uint8_t* rec);

// One ULM line (no newline) for an event record:
//   DATE=YYYYMMDDhhmmss.ffffff HOST=h PROG=magnet NL.EVNT=net.sock.send LVL=Usage
//   VM=.. TGID=.. TID=.. CPU=.. FLOW=0x.. SIZE=.. [FLAGS=..] then the payload
//   fields, upper-cased (SPORT=5000 SADDR=10.0.0.1 ...).
// DATE is UTC wall time: ts_ns + sysinfo.realtime_offset_ns, in microseconds
// (truncated).  stream.lost has LVL=Warning.  Empty for the stream's own
// records (sysinfo, event descriptors), which are not events.
std::string ulm_line(const uint8_t* rec, const magnet_sysinfo& si);

// A ULM value as written: bare when it has no space, '"', '\\' or '=' and is
// not empty, else in double quotes with '"' and '\\' escaped by '\\'.
std::string ulm_value(std::string_view v);

}  // namespace magnet::host
