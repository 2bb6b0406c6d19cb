#include "consumer.h"

#include <bpf/libbpf.h>

#include <algorithm>
#include <cstring>

#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet::host {

uint64_t loss_tracker::collect(std::vector<std::vector<uint8_t>>& out) {
  uint64_t total = src_.total_dropped();
  if (total == seen_total_) return 0;
  seen_total_ = total;
  int ncpus = src_.ncpus();
  if (last_ts_.empty()) last_ts_.assign(static_cast<size_t>(MAGNET_NPROBES) * ncpus, 0);
  uint64_t added = 0;
  for (int slot = 0; slot < MAGNET_NPROBES; ++slot) {
    auto st = src_.probe_state(slot);
    for (int cpu = 0; cpu < static_cast<int>(st.size()) && cpu < ncpus; ++cpu) {
      uint64_t acked = src_.drop_ack(slot, cpu);
      if (st[cpu].dropped <= acked) continue;
      magnet_lost l{};
      l.count = st[cpu].dropped - acked;
      uint64_t& prev_last = last_ts_[static_cast<size_t>(slot) * ncpus + cpu];
      // first_drop_ns can be stale when a drop raced with the last
      // acknowledgement; the interval cannot start before the previous end.
      l.first_ts_ns = std::max<uint64_t>(st[cpu].first_drop_ns, prev_last);
      l.last_ts_ns = st[cpu].last_drop_ns;
      l.probe_type = probe_type(slot);
      l.cpu = static_cast<uint16_t>(cpu);
      l.reason = MAGNET_LOST_RINGBUF_FULL;
      prev_last = l.last_ts_ns;
      src_.set_drop_ack(slot, cpu, st[cpu].dropped);
      magnet_hdr h{};
      h.ts_ns = l.first_ts_ns;
      h.type = MAGNET_EV_LOST;
      h.cpu = static_cast<uint16_t>(cpu);
      h.size = static_cast<int32_t>(std::min<uint64_t>(l.count, INT32_MAX));
      out.push_back(make_record(h, l));
      lost_total_ += l.count;
      added += l.count;
    }
  }
  return added;
}

std::vector<uint8_t> merge_lost(std::span<const uint8_t> batch, std::span<const uint32_t> offs,
                                std::vector<std::vector<uint8_t>>& lost) {
  std::stable_sort(lost.begin(), lost.end(), [](const auto& a, const auto& b) {
    return hdr_of(a.data()).ts_ns < hdr_of(b.data()).ts_ns;
  });
  std::vector<uint8_t> out;
  out.reserve(batch.size() + lost.size() * 80);
  size_t li = 0;
  for (size_t i = 0; i < offs.size(); ++i) {
    const uint8_t* rec = batch.data() + offs[i];
    while (li < lost.size() && hdr_of(lost[li].data()).ts_ns < hdr_of(rec).ts_ns) {
      out.insert(out.end(), lost[li].begin(), lost[li].end());
      ++li;
    }
    out.insert(out.end(), rec, rec + hdr_of(rec).len);
  }
  for (; li < lost.size(); ++li) out.insert(out.end(), lost[li].begin(), lost[li].end());
  return out;
}

result<std::unique_ptr<ring_consumer>> ring_consumer::create(int fd, drop_source& drops,
                                                              sink_fn sink) {
  std::unique_ptr<ring_consumer> c(new ring_consumer(drops, std::move(sink)));
  c->rb_ = ring_buffer__new(fd, &ring_consumer::on_record, c.get(), nullptr);
  if (!c->rb_) return error::from_errno("creating the ring buffer consumer");
  c->batch_.reserve(4 << 20);
  return c;
}

int ring_consumer::epoll_fd() const { return ring_buffer__epoll_fd(rb_); }

ring_consumer::~ring_consumer() {
  if (rb_) ring_buffer__free(rb_);
}

namespace {
// on_record's "batch full" signal: libbpf stops consuming on a negative
// return (the record itself is already taken) and passes the value back.
constexpr int kBatchFull = ENOBUFS;
constexpr size_t kBatchBytes = 8u << 20;
}  // namespace

int ring_consumer::on_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<ring_consumer*>(ctx);
  auto* p = static_cast<const uint8_t*>(data);
  self->offs_.push_back(static_cast<uint32_t>(self->batch_.size()));
  self->batch_.insert(self->batch_.end(), p, p + size);
  return self->batch_.size() >= kBatchBytes ? -kBatchFull : 0;
}

uint64_t ring_consumer::deliver() {
  // Losses are read after the batch, so each lands among the records by time.
  lost_.clear();
  loss_.collect(lost_);
  if (batch_.empty() && lost_.empty()) return 0;
  uint64_t nrec = offs_.size() + lost_.size();
  if (lost_.empty()) {
    sink_(batch_);
    bytes_ += batch_.size();
  } else {
    auto merged = merge_lost(batch_, offs_, lost_);
    sink_(merged);
    bytes_ += merged.size();
  }
  records_ += nrec;
  batch_.clear();
  offs_.clear();
  return nrec;
}

result<uint64_t> ring_consumer::poll(int timeout_ms) {
  // libbpf 1.1's ring_buffer__poll consumes only rings epoll reported
  // ready; producers below the watermark do not wake us, so a poll that
  // times out must still consume what is waiting.
  int n = 0;
  if (timeout_ms > 0) n = ring_buffer__poll(rb_, timeout_ms);
  if (n >= 0 || n == -EINTR) n = ring_buffer__consume(rb_);
  uint64_t delivered = 0;
  for (;;) {
    if (n < 0 && n != -EINTR && n != -kBatchFull)
      return error{std::string("ring buffer poll: ") + std::strerror(-n), -n};
    delivered += deliver();
    if (n != -kBatchFull) break;
    n = ring_buffer__consume(rb_);
  }
  return delivered;
}

}  // namespace magnet::host
