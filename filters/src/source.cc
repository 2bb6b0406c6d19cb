#include <cstring>

#include "magnet/filters/engine.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet::filters {

memory_source::memory_source(std::vector<uint8_t> records, size_t batch_bytes)
    : buf_(std::move(records)), batch_(std::max<size_t>(batch_bytes, MAGNET_MAX_RECORD)) {}

memory_source memory_source::of(const std::vector<std::vector<uint8_t>>& records) {
  std::vector<uint8_t> all;
  for (const auto& r : records) all.insert(all.end(), r.begin(), r.end());
  return memory_source(std::move(all));
}

result<std::span<const uint8_t>> memory_source::next_batch() {
  size_t start = pos_;
  // Whole records only: a batch ends at a record boundary.
  while (pos_ < buf_.size()) {
    if (buf_.size() - pos_ < sizeof(magnet_hdr))
      return error{"memory source: truncated record header at offset " + std::to_string(pos_)};
    uint16_t len;
    std::memcpy(&len, buf_.data() + pos_ + offsetof(magnet_hdr, len), sizeof len);
    if (len < sizeof(magnet_hdr) || len % MAGNET_RECORD_ALIGN || len > buf_.size() - pos_)
      return error{"memory source: corrupt record length " + std::to_string(len) + " at offset " +
                   std::to_string(pos_)};
    if (pos_ - start + len > batch_ && pos_ > start) break;
    pos_ += len;
  }
  return std::span<const uint8_t>(buf_.data() + start, pos_ - start);
}

struct trace_source::impl {
  explicit impl(trace_reader r) : reader(std::move(r)) {}
  trace_reader reader;
  std::vector<uint8_t> buf;
};

trace_source::trace_source(std::unique_ptr<impl> p) : p_(std::move(p)) {}
trace_source::~trace_source() = default;

result<std::unique_ptr<trace_source>> trace_source::open(const std::string& path) {
  auto r = trace_reader::open(path);
  if (!r) return r.err();
  return std::unique_ptr<trace_source>(new trace_source(std::make_unique<impl>(std::move(r).value())));
}

result<std::span<const uint8_t>> trace_source::next_batch() {
  constexpr size_t kBatch = 256 * 1024;
  auto& buf = p_->buf;
  buf.clear();
  if (buf.capacity() < kBatch + MAGNET_MAX_RECORD) buf.reserve(kBatch + MAGNET_MAX_RECORD);
  while (buf.size() < kBatch) {
    auto n = p_->reader.next();
    if (!n) return n.err();
    const uint8_t* rec = *n;
    if (!rec) break;
    buf.insert(buf.end(), rec, rec + hdr_of(rec).len);
  }
  return std::span<const uint8_t>(buf.data(), buf.size());
}

}  // namespace magnet::filters
