#include "magnet/capture/consumer.h"

#include <bpf/bpf.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet {

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
  // Quota losses: per VM, not per probe or CPU; the interval runs from the
  // last look to now (both CLOCK_MONOTONIC, the records' clock).
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
  for (const auto& [vm, n] : src_.vm_quota_lost()) {
    uint64_t& seen = vm_quota_seen_[vm];
    if (n <= seen) continue;
    magnet_lost l{};
    l.count = n - seen;
    l.first_ts_ns = quota_since_ns_ ? std::min(quota_since_ns_, now) : now;
    l.last_ts_ns = now;
    l.cpu = 0xffff;
    l.reason = MAGNET_LOST_VM_QUOTA;
    seen = n;
    magnet_hdr h{};
    h.ts_ns = l.first_ts_ns;
    h.type = MAGNET_EV_LOST;
    h.vm_id = vm;
    h.cpu = 0xffff;
    h.size = static_cast<int32_t>(std::min<uint64_t>(l.count, INT32_MAX));
    out.push_back(make_record(h, l));
    lost_total_ += l.count;
    added += l.count;
  }
  quota_since_ns_ = now;
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

result<std::unique_ptr<ring_reader>> ring_reader::open(int fd) {
  bpf_map_info info{};
  uint32_t ilen = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd, &info, &ilen) < 0)
    return error::from_errno("reading the ring buffer map's info");
  if (info.type != BPF_MAP_TYPE_RINGBUF)
    return error{"map " + std::to_string(info.id) + " is not a ring buffer", EINVAL};
  std::unique_ptr<ring_reader> r(new ring_reader());
  r->page_ = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  uint64_t size = info.max_entries;  // a power of two, a multiple of the page
  r->mask_ = size - 1;
  void* c = ::mmap(nullptr, r->page_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (c == MAP_FAILED) return error::from_errno("mapping the ring buffer's consumer page");
  r->consumer_pos_ = static_cast<uint64_t*>(c);
  // The data area is mapped twice in a row, so a record that wraps is
  // still contiguous.
  r->prod_map_len_ = r->page_ + 2 * size;
  void* p = ::mmap(nullptr, r->prod_map_len_, PROT_READ, MAP_SHARED, fd,
                   static_cast<off_t>(r->page_));
  if (p == MAP_FAILED) return error::from_errno("mapping the ring buffer's data");
  r->prod_map_ = p;
  r->producer_pos_ = static_cast<const uint64_t*>(p);
  r->data_ = static_cast<const uint8_t*>(p) + r->page_;
  r->epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (r->epfd_ < 0) return error::from_errno("epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (::epoll_ctl(r->epfd_, EPOLL_CTL_ADD, fd, &ev) < 0)
    return error::from_errno("watching the ring buffer for wakeups");
  return r;
}

ring_reader::~ring_reader() {
  if (epfd_ >= 0) ::close(epfd_);
  if (consumer_pos_) ::munmap(consumer_pos_, page_);
  if (prod_map_) ::munmap(prod_map_, prod_map_len_);
}

result<bool> ring_reader::wait(int timeout_ms) {
  epoll_event ev;
  int n = ::epoll_wait(epfd_, &ev, 1, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return false;
    return error::from_errno("waiting on the ring buffer");
  }
  return n > 0;
}

result<std::unique_ptr<ring_consumer>> ring_consumer::create(int fd, drop_source& drops,
                                                              sink_fn sink) {
  std::unique_ptr<ring_consumer> c(new ring_consumer(drops, std::move(sink)));
  auto r = ring_reader::open(fd);
  if (!r) return r.err();
  c->ring_ = std::move(*r);
  c->batch_.reserve(4 << 20);
  return c;
}

int ring_consumer::epoll_fd() const { return ring_->epoll_fd(); }

ring_consumer::~ring_consumer() = default;

namespace {
// A batch is handed to the sink once it holds this much.
constexpr size_t kBatchBytes = 8u << 20;
}  // namespace

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
  // Producers below the watermark do not wake us: a wait that times out
  // must still consume what is waiting.
  if (timeout_ms > 0) {
    auto w = ring_->wait(timeout_ms);
    if (!w) return w.err();
  }
  uint64_t delivered = 0;
  bool full;
  do {
    full = false;
    ring_->consume([&](const uint8_t* p, uint32_t size) {
      offs_.push_back(static_cast<uint32_t>(batch_.size()));
      batch_.insert(batch_.end(), p, p + size);
      full = batch_.size() >= kBatchBytes;
      return !full;
    });
    delivered += deliver();
  } while (full);
  return delivered;
}

}  // namespace magnet
