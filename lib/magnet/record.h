// Records: validation, byte order, field descriptors and formatting.
// One field table per payload kind drives byte swapping and every output
// format, so a new payload field is described once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "magnet/event.h"
#include "magnet/result.h"

namespace magnet {

enum class ftype : uint8_t { u8, u16, u32, u64, s32, s64, addr, str, hex64 };

struct field {
  std::string_view name;
  uint16_t off;
  uint16_t size;
  ftype type;
};

std::span<const field> payload_fields(uint16_t payload_kind);

inline const magnet_hdr& hdr_of(const uint8_t* rec) {
  return *reinterpret_cast<const magnet_hdr*>(rec);
}

// Calls @fn(hdr, rec) for each record of a VM (vm_id != 0) in @recs,
// records back to back as the consumer hands them over; stops at the first
// one whose length is not sane or does not fit.
template <class F>
void for_each_vm_record(std::span<const uint8_t> recs, F&& fn) {
  for (size_t off = 0; off + sizeof(magnet_hdr) <= recs.size();) {
    const uint8_t* r = recs.data() + off;
    const auto& h = hdr_of(r);
    if (h.len < sizeof(magnet_hdr) || off + h.len > recs.size()) break;
    off += h.len;
    if (h.vm_id) fn(h, r);
  }
}

// Checks one record at the start of @buf: length sane, fits in @buf, long
// enough for its payload.  @where names the position in messages.
status check_record(std::span<const uint8_t> buf, std::string_view where);

// In-place byte swap of a record written on a machine of the other
// endianness.  The header is swapped first (its len is then readable).
void swap_header(uint8_t* rec);
void swap_payload(uint8_t* rec);

// Formatting (one record, no trailing newline).
enum class out_format { text, csv, json };
std::string csv_header();
std::string format_record(const uint8_t* rec, out_format fmt);

}  // namespace magnet
