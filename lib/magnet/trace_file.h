// Trace files: "MAGNETTR", a sysinfo record, one event_desc record per event
// type the recording may hold, then records in stream order.  Self-describing
// and readable on a machine of the other endianness.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "magnet/event.h"
#include "magnet/result.h"

namespace magnet {

// A complete record (header + payload), padded to MAGNET_RECORD_ALIGN.
std::vector<uint8_t> make_record(const magnet_hdr& h, const void* payload, size_t plen);

template <class P>
std::vector<uint8_t> make_record(magnet_hdr h, const P& payload) {
  return make_record(h, &payload, sizeof payload);
}

// The sysinfo of this machine now; start_ts_ns = CLOCK_MONOTONIC now.
magnet_sysinfo local_sysinfo();
uint64_t monotonic_ns();

class trace_writer {
 public:
  static result<trace_writer> create(const std::string& path, const magnet_sysinfo& si,
                                     const std::set<uint16_t>& types);
  trace_writer(trace_writer&& o) noexcept;
  trace_writer& operator=(trace_writer&&) = delete;
  ~trace_writer();

  // Appends whole records (one or many, back to back).
  status append(std::span<const uint8_t> records);
  status flush();
  status close();
  uint64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  status write_all(std::span<const uint8_t> data);
  trace_writer(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  std::vector<uint8_t> buf_;
  uint64_t bytes_ = 0;
};

class trace_reader {
 public:
  static result<trace_reader> open(const std::string& path);
  trace_reader(trace_reader&& o) noexcept;
  trace_reader& operator=(trace_reader&&) = delete;
  ~trace_reader();

  const magnet_sysinfo& sysinfo() const { return sysinfo_; }
  bool foreign_endian() const { return foreign_; }
  const std::set<uint16_t>& described_types() const { return types_; }

  // The next record in native byte order; nullptr at the end.  A corrupt or
  // truncated record is an error naming its offset.
  result<const uint8_t*> next();
  void rewind() { pos_ = first_; }
  // Walks the whole file once; the first problem is the error.
  result<uint64_t> validate();

 private:
  trace_reader(std::string path) : path_(std::move(path)) {}
  status parse_head();
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  size_t pos_ = 0, first_ = 0;
  bool foreign_ = false;
  magnet_sysinfo sysinfo_{};
  std::set<uint16_t> types_;
  alignas(8) uint8_t scratch_[MAGNET_MAX_RECORD];
};

}  // namespace magnet
