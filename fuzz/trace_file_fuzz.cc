// libFuzzer target: trace files as `magnet dump` reads them (any bytes, in
// either byte order: the sysinfo record's endianness marker decides).
// Oracles besides the sanitizers:
// - every record next() returns passes check_record and formats;
// - validate() agrees with a walk by next();
// - differential: a file that reads without error is written again from
//   its records in both byte orders, and both read back to the same
//   sysinfo, descriptors and records (the foreign one through the
//   copy-and-swap path, the native one through the mapped file).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/record.h"
#include "magnet/trace_file.h"

using namespace magnet;

namespace {

// The bytes as a file: a memfd, opened by the reader through /proc.
std::string as_file(const uint8_t* data, size_t size) {
  static int fd = memfd_create("magnet-trace-fuzz", 0);
  if (fd < 0) abort();
  if (ftruncate(fd, 0) != 0) abort();
  for (size_t off = 0; off < size;) {
    ssize_t n = pwrite(fd, data + off, size - off, static_cast<off_t>(off));
    if (n <= 0) abort();
    off += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

struct reading {
  bool ok = false;  // opened and walked to the end without an error
  bool foreign = false;
  magnet_sysinfo si{};
  std::set<uint16_t> types;
  std::vector<std::vector<uint8_t>> recs;
};

reading read_trace(const uint8_t* data, size_t size) {
  reading out;
  auto r = trace_reader::open(as_file(data, size));
  if (!r) return out;
  out.foreign = r->foreign_endian();
  out.si = r->sysinfo();
  out.types = r->described_types();
  bool error = false;
  for (;;) {
    auto n = r->next();
    if (!n) {
      error = true;
      break;
    }
    if (!*n) break;
    const uint8_t* rec = *n;
    const uint16_t len = hdr_of(rec).len;
    if (!check_record({rec, len}, "fuzz")) abort();  // next() returned a bad record
    for (auto f : {out_format::text, out_format::csv, out_format::json})
      if (format_record(rec, f).empty()) abort();
    out.recs.emplace_back(rec, rec + len);
  }
  auto v = r->validate();
  if (static_cast<bool>(v) == error) abort();  // validate() disagrees with next()
  if (v && *v != out.recs.size()) abort();
  out.ok = !error;
  return out;
}

std::vector<uint8_t> write_back(const std::vector<std::vector<uint8_t>>& recs, bool swap) {
  const std::string_view magic = MAGNET_FILE_MAGIC;
  std::vector<uint8_t> b(magic.begin(), magic.end());
  for (auto rec : recs) {
    if (swap) {
      swap_payload(rec.data());  // needs the native type and length: before the header
      swap_header(rec.data());
    }
    b.insert(b.end(), rec.begin(), rec.end());
  }
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reading a = read_trace(data, size);
  if (!a.ok) return 0;
  for (bool swap : {false, true}) {
    auto bytes = write_back(a.recs, swap);
    reading b = read_trace(bytes.data(), bytes.size());
    if (!b.ok) abort();
    if (b.foreign != swap) abort();
    if (std::memcmp(&a.si, &b.si, sizeof a.si) != 0) abort();
    if (a.types != b.types) abort();
    if (a.recs != b.recs) abort();
  }
  return 0;
}
