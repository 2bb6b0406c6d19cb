// Drains the BPF ring buffer in batches and hands whole batches to a sink.
// Loss is never silent: after each batch the per-probe, per-CPU drop
// counters are read and a stream.lost record is inserted at the
// chronological place of the loss (ordered by the first drop's time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "magnet/control.h"
#include "magnet/result.h"

struct ring_buffer;

namespace magnet::host {

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
};

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
  static int on_record(void* ctx, void* data, size_t size);
  uint64_t deliver();
  ring_buffer* rb_ = nullptr;
  loss_tracker loss_;
  sink_fn sink_;
  std::vector<uint8_t> batch_;
  std::vector<uint32_t> offs_;
  std::vector<std::vector<uint8_t>> lost_;
  uint64_t records_ = 0, bytes_ = 0;
};

}  // namespace magnet::host
