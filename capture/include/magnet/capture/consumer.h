// Drains the BPF ring buffer in batches and hands whole batches to a sink.
// Loss is never silent: after each batch the per-probe, per-CPU drop
// counters are read and a stream.lost record is inserted at the
// chronological place of the loss (ordered by the first drop's time).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "magnet/control.h"
#include "magnet/result.h"

namespace magnet {

class capture;

// Counter access the consumer needs; capture implements it, tests fake it.
class drop_source {
 public:
  virtual ~drop_source() = default;
  virtual uint64_t total_dropped() const = 0;
  virtual int ncpus() const = 0;
  virtual std::vector<magnet_probe_pcpu> probe_state(int slot) const = 0;
  virtual uint64_t drop_ack(int slot, int cpu) const = 0;
  virtual void set_drop_ack(int slot, int cpu, uint64_t v) = 0;
  // Events each VM lost over its stream quota so far, summed over CPUs
  // (VMs that lost none may be absent).
  virtual std::map<uint32_t, uint64_t> vm_quota_lost() const { return {}; }
};

// Inserts lost records into a batch by timestamp.  Exposed for tests.
class loss_tracker {
 public:
  explicit loss_tracker(drop_source& src) : src_(src) {}
  // Appends the lost records owed since the last call to @out (unordered).
  uint64_t collect(std::vector<std::vector<uint8_t>>& out);
  uint64_t lost_total() const { return lost_total_; }

 private:
  drop_source& src_;
  uint64_t seen_total_ = 0;
  uint64_t lost_total_ = 0;
  std::vector<uint64_t> last_ts_;  // slot*ncpus+cpu -> last_drop_ns already reported
  std::map<uint32_t, uint64_t> vm_quota_seen_;  // VM -> quota losses already reported
  uint64_t quota_since_ns_ = 0;                 // when they were last looked at
};

// The consumer side of a BPF ring buffer map, read through its own mmap
// rather than libbpf's ring_buffer: libbpf (1.1) publishes the consumer
// position after every record, a store to the cache line every producer
// reads in bpf_ringbuf_reserve, so a busy consumer on another CPU made
// each reserve miss.  Here the position is published once per pass (and
// every kPublishBytes within a long pass, so producers see space freed).
class ring_reader {
 public:
  static result<std::unique_ptr<ring_reader>> open(int map_fd);
  ~ring_reader();
  ring_reader(const ring_reader&) = delete;
  ring_reader& operator=(const ring_reader&) = delete;

  // Calls @fn(data, size) for each committed record, in ring order, until
  // the ring is empty or @fn returns false (that record counts as taken).
  // Returns the records passed to @fn.
  template <typename Fn>
  uint64_t consume(Fn&& fn);
  // Waits up to @timeout_ms for a wakeup; true if one came.
  result<bool> wait(int timeout_ms);
  int epoll_fd() const { return epfd_; }

 private:
  ring_reader() = default;
  static constexpr uint64_t kPublishBytes = 256u << 10;
  int epfd_ = -1;
  size_t page_ = 0;
  uint64_t mask_ = 0;
  uint64_t* consumer_pos_ = nullptr;  // page 0, read-write
  void* prod_map_ = nullptr;          // page 1 on: producer position, then the data twice
  size_t prod_map_len_ = 0;
  const uint64_t* producer_pos_ = nullptr;
  const uint8_t* data_ = nullptr;
};

template <typename Fn>
uint64_t ring_reader::consume(Fn&& fn) {
  // The kernel's record header: 32-bit length with the busy and discard
  // bits (BPF_RINGBUF_BUSY_BIT, BPF_RINGBUF_DISCARD_BIT), then the page
  // offset; records are 8-byte aligned (BPF_RINGBUF_HDR_SZ = 8).
  constexpr uint32_t kBusy = 1u << 31, kDiscard = 1u << 30;
  uint64_t n = 0;
  uint64_t cons = __atomic_load_n(consumer_pos_, __ATOMIC_RELAXED);
  uint64_t published = cons;
  bool more = true;
  while (more) {
    uint64_t prod = __atomic_load_n(producer_pos_, __ATOMIC_ACQUIRE);
    if (cons == prod) break;
    while (cons < prod) {
      const uint8_t* hdr = data_ + (cons & mask_);
      uint32_t word = __atomic_load_n(reinterpret_cast<const uint32_t*>(hdr), __ATOMIC_ACQUIRE);
      if (word & kBusy) {  // reserved, not yet committed: stop here
        more = false;
        break;
      }
      uint32_t len = word & ~(kBusy | kDiscard);
      cons += (static_cast<uint64_t>(len) + 8 + 7) & ~uint64_t{7};
      if (!(word & kDiscard)) {
        ++n;
        if (!fn(hdr + 8, len)) {
          more = false;
          break;
        }
      }
      if (cons - published >= kPublishBytes) {
        __atomic_store_n(consumer_pos_, cons, __ATOMIC_RELEASE);
        published = cons;
      }
    }
  }
  if (cons != published) __atomic_store_n(consumer_pos_, cons, __ATOMIC_RELEASE);
  return n;
}

// Merges @lost records into the batch (records back to back, @offs their
// offsets) so that each lost record precedes the first record newer than it.
std::vector<uint8_t> merge_lost(std::span<const uint8_t> batch, std::span<const uint32_t> offs,
                                std::vector<std::vector<uint8_t>>& lost);

class ring_consumer {
 public:
  using sink_fn = std::function<void(std::span<const uint8_t> records)>;
  static result<std::unique_ptr<ring_consumer>> create(int ringbuf_fd, drop_source& drops,
                                                        sink_fn sink);
  ~ring_consumer();

  // Waits up to @timeout_ms for data (woken early by the watermark), then
  // drains what is there.  Returns records delivered (incl. lost records).
  result<uint64_t> poll(int timeout_ms);
  result<uint64_t> drain() { return poll(0); }

  int epoll_fd() const;  // readable when the watermark wakes the consumer
  uint64_t records() const { return records_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t lost() const { return loss_.lost_total(); }

 private:
  ring_consumer(drop_source& d, sink_fn s) : loss_(d), sink_(std::move(s)) {}
  uint64_t deliver();
  std::unique_ptr<ring_reader> ring_;
  loss_tracker loss_;
  sink_fn sink_;
  std::vector<uint8_t> batch_;
  std::vector<uint32_t> offs_;
  std::vector<std::vector<uint8_t>> lost_;
  uint64_t records_ = 0, bytes_ = 0;
};

}  // namespace magnet
