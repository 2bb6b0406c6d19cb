#include "magnet/trace_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/version.h"

namespace magnet {

namespace {
constexpr size_t kMagicLen = 8;
constexpr size_t kFlushAt = 1 << 20;

uint64_t clock_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

void copy_str(char* dst, size_t n, const std::string& s) {
  std::strncpy(dst, s.c_str(), n - 1);
  dst[n - 1] = 0;
}
}  // namespace

uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }

std::vector<uint8_t> make_record(const magnet_hdr& h, const void* payload, size_t plen) {
  size_t len = sizeof(magnet_hdr) + plen;
  len = (len + MAGNET_RECORD_ALIGN - 1) / MAGNET_RECORD_ALIGN * MAGNET_RECORD_ALIGN;
  std::vector<uint8_t> rec(len, 0);
  magnet_hdr hh = h;
  hh.len = static_cast<uint16_t>(len);
  std::memcpy(rec.data(), &hh, sizeof hh);
  if (plen) std::memcpy(rec.data() + sizeof hh, payload, plen);
  return rec;
}

magnet_sysinfo local_sysinfo() {
  magnet_sysinfo si{};
  si.endian_marker = MAGNET_ENDIAN_MARKER;
  si.format_major = MAGNET_FORMAT_MAJOR;
  si.format_minor = MAGNET_FORMAT_MINOR;
  si.ncpus = static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_CONF));
  // The offset is read between two monotonic reads; keep the tightest pair.
  int64_t best_gap = INT64_MAX;
  for (int i = 0; i < 5; ++i) {
    uint64_t m0 = clock_ns(CLOCK_MONOTONIC);
    uint64_t r = clock_ns(CLOCK_REALTIME);
    uint64_t m1 = clock_ns(CLOCK_MONOTONIC);
    int64_t gap = static_cast<int64_t>(m1 - m0);
    if (gap < best_gap) {
      best_gap = gap;
      si.realtime_offset_ns = static_cast<int64_t>(r) - static_cast<int64_t>(m0 + gap / 2);
    }
  }
  si.start_ts_ns = clock_ns(CLOCK_MONOTONIC);
  std::ifstream bid("/proc/sys/kernel/random/boot_id");
  std::string uuid;
  if (bid >> uuid) {
    size_t j = 0;
    for (size_t i = 0; i + 1 < uuid.size() && j < 16; ++i) {
      if (uuid[i] == '-') continue;
      si.boot_id[j++] = static_cast<uint8_t>(std::stoi(uuid.substr(i, 2), nullptr, 16));
      ++i;
    }
  }
  utsname u{};
  uname(&u);
  copy_str(si.hostname, sizeof si.hostname, u.nodename);
  copy_str(si.kernel_release, sizeof si.kernel_release, u.release);
  copy_str(si.tool_version, sizeof si.tool_version, std::string("magnet ") + kVersion);
  return si;
}

// ---------------------------------------------------------------- writer

result<trace_writer> trace_writer::create(const std::string& path, const magnet_sysinfo& si,
                                          const std::set<uint16_t>& types) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error::from_errno("cannot create trace file " + path);
  trace_writer w(fd, path);
  w.buf_.reserve(kFlushAt * 2);
  w.buf_.insert(w.buf_.end(), MAGNET_FILE_MAGIC, MAGNET_FILE_MAGIC + kMagicLen);
  magnet_hdr h{};
  h.ts_ns = si.start_ts_ns;
  h.type = MAGNET_EV_SYSINFO;
  auto rec = make_record(h, si);
  w.buf_.insert(w.buf_.end(), rec.begin(), rec.end());
  for (uint16_t t : types) {
    const auto* e = find_event(t);
    if (!e) continue;
    magnet_event_desc d{};
    d.type = t;
    d.payload_kind = e->payload_kind;
    copy_str(d.name, sizeof d.name, std::string(e->name));
    magnet_hdr dh{};
    dh.ts_ns = si.start_ts_ns;
    dh.type = MAGNET_EV_EVENT_DESC;
    auto drec = make_record(dh, d);
    w.buf_.insert(w.buf_.end(), drec.begin(), drec.end());
  }
  if (auto s = w.flush(); !s) return s.err();
  return w;
}

trace_writer::trace_writer(trace_writer&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), buf_(std::move(o.buf_)),
      bytes_(o.bytes_) {}

trace_writer::~trace_writer() { (void)close(); }

status trace_writer::append(std::span<const uint8_t> records) {
  // A batch as large as the buffer goes to the file as it is: one copy less.
  if (records.size() >= kFlushAt) {
    if (auto s = flush(); !s) return s;
    return write_all(records);
  }
  buf_.insert(buf_.end(), records.begin(), records.end());
  if (buf_.size() >= kFlushAt) return flush();
  return {};
}

status trace_writer::write_all(std::span<const uint8_t> data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd_, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return error::from_errno("writing " + path_);
    }
    off += static_cast<size_t>(n);
  }
  bytes_ += data.size();
  return {};
}

status trace_writer::flush() {
  auto s = write_all(buf_);
  if (s) buf_.clear();
  return s;
}

status trace_writer::close() {
  if (fd_ < 0) return {};
  auto s = flush();
  if (s && ::fsync(fd_) < 0 && errno != EINVAL) s = error::from_errno("fsync " + path_);
  if (::close(fd_) < 0 && s) s = error::from_errno("closing " + path_);
  fd_ = -1;
  return s;
}

// ---------------------------------------------------------------- reader

result<trace_reader> trace_reader::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error::from_errno("cannot open trace file " + path);
  struct stat st {};
  if (fstat(fd, &st) < 0) {
    int e = errno;
    ::close(fd);
    return error::from_errno("cannot stat " + path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return error{path + ": not a regular file"};
  }
  trace_reader r(path);
  r.size_ = static_cast<size_t>(st.st_size);
  if (r.size_ > 0) {
    void* m = mmap(nullptr, r.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return error::from_errno("cannot map " + path, e);
    }
    r.map_ = static_cast<const uint8_t*>(m);
    madvise(m, r.size_, MADV_SEQUENTIAL);
  }
  ::close(fd);
  if (auto s = r.parse_head(); !s) return s.err();
  return r;
}

trace_reader::trace_reader(trace_reader&& o) noexcept
    : path_(std::move(o.path_)), map_(std::exchange(o.map_, nullptr)), size_(o.size_),
      pos_(o.pos_), first_(o.first_), foreign_(o.foreign_), sysinfo_(o.sysinfo_),
      types_(std::move(o.types_)) {}

trace_reader::~trace_reader() {
  if (map_) munmap(const_cast<uint8_t*>(map_), size_);
}

status trace_reader::parse_head() {
  if (size_ < kMagicLen || std::memcmp(map_, MAGNET_FILE_MAGIC, kMagicLen) != 0)
    return error{path_ + ": not a magnet trace file (missing \"" MAGNET_FILE_MAGIC "\" magic)"};
  pos_ = kMagicLen;
  if (size_ - pos_ < sizeof(magnet_hdr) + sizeof(magnet_sysinfo))
    return error{path_ + ": truncated: the sysinfo record is incomplete"};
  std::memcpy(scratch_, map_ + pos_, sizeof(magnet_hdr) + sizeof(magnet_sysinfo));
  magnet_sysinfo si;
  std::memcpy(&si, scratch_ + sizeof(magnet_hdr), sizeof si);
  if (si.endian_marker == MAGNET_ENDIAN_MARKER) {
    foreign_ = false;
  } else if (si.endian_marker == __builtin_bswap64(MAGNET_ENDIAN_MARKER)) {
    foreign_ = true;
    swap_header(scratch_);
    swap_payload(scratch_);
  } else {
    return error{path_ + ": corrupt sysinfo record (bad endianness marker)"};
  }
  const auto& h = hdr_of(scratch_);
  if (h.type != MAGNET_EV_SYSINFO)
    return error{path_ + ": corrupt: first record is " + event_name(h.type) +
                 ", expected stream.sysinfo"};
  std::memcpy(&sysinfo_, scratch_ + sizeof(magnet_hdr), sizeof sysinfo_);
  if (sysinfo_.format_major != MAGNET_FORMAT_MAJOR)
    return error{path_ + ": format version " + std::to_string(sysinfo_.format_major) + "." +
                 std::to_string(sysinfo_.format_minor) + " is not readable by this build (" +
                 std::to_string(MAGNET_FORMAT_MAJOR) + ".x)"};
  first_ = pos_;
  // Collect the self-description that follows.
  for (;;) {
    size_t save = pos_;
    auto r = next();
    if (!r) return r.err();
    const uint8_t* rec = *r;
    if (!rec) break;
    const auto& rh = hdr_of(rec);
    if (rh.type == MAGNET_EV_SYSINFO) continue;
    if (rh.type != MAGNET_EV_EVENT_DESC) {
      pos_ = save;
      break;
    }
    magnet_event_desc d;
    std::memcpy(&d, rec + sizeof(magnet_hdr), sizeof d);
    types_.insert(d.type);
  }
  pos_ = first_;
  return {};
}

result<const uint8_t*> trace_reader::next() {
  if (pos_ >= size_) return static_cast<const uint8_t*>(nullptr);
  std::string where = path_ + " at offset " + std::to_string(pos_);
  std::span<const uint8_t> rest(map_ + pos_, size_ - pos_);
  const uint8_t* rec = map_ + pos_;
  if (foreign_ || (reinterpret_cast<uintptr_t>(rec) % 8)) {
    // Copy (and for a foreign trace, swap) into aligned scratch space; the
    // header first, so its length can be checked before the payload is read.
    size_t avail = std::min(rest.size(), sizeof scratch_);
    std::memcpy(scratch_, rec, std::min(avail, sizeof(magnet_hdr)));
    if (foreign_ && avail >= sizeof(magnet_hdr)) swap_header(scratch_);
    if (auto s = check_record({scratch_, avail}, where); !s) return s.err();
    uint16_t len = hdr_of(scratch_).len;
    std::memcpy(scratch_ + sizeof(magnet_hdr), rec + sizeof(magnet_hdr), len - sizeof(magnet_hdr));
    if (foreign_) swap_payload(scratch_);
    pos_ += len;
    return static_cast<const uint8_t*>(scratch_);
  }
  if (auto s = check_record(rest, where); !s) return s.err();
  pos_ += hdr_of(rec).len;
  return rec;
}

result<uint64_t> trace_reader::validate() {
  size_t save = pos_;
  pos_ = first_;
  uint64_t n = 0;
  for (;;) {
    auto r = next();
    if (!r) {
      pos_ = save;
      return r.err();
    }
    if (!*r) break;
    ++n;
  }
  pos_ = save;
  return n;
}

}  // namespace magnet
