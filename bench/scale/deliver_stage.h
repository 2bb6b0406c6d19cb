// The daemon's delivery at N VMs without vsock: the hub
// (host/deliver) on this thread's io_context, every VM with one guest
// connected over an AF_UNIX socket pair (adopt(), the test transport) and
// subscribed as the guest agent is (periodic 100 ms, every stat).  The
// guests' ends are read by a thread of their own, whose cost is not counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>

#include "magnet/deliver/deliver.h"
#include "magnet/view_codec.h"

namespace magnet::bench {

struct guest_end;

class deliver_stage {
 public:
  // @stats: VM id (1..n) -> its stats of the tick, as the daemon publishes them.
  using stats_of = std::function<const std::vector<view::stat_value>&(uint32_t vm)>;
  deliver_stage(unsigned n, stats_of stats);
  ~deliver_stage();
  deliver_stage(const deliver_stage&) = delete;

  struct window {
    double cpu_ms_per_tick = 0;  // this thread: publish, the hub's writes and timers
    double core_pct = 0;         // the same, % of one core
    double frames_per_s = 0;     // stats frames the guests received
  };
  // @ticks daemon ticks of 100 ms in real time.
  window run(unsigned ticks);
  uint64_t stats_frames() const;
  int64_t heap_per_vm = 0;  // the hub's C++ heap with every VM's guest subscribed, per VM

 private:
  void tick(uint64_t now_ns);
  void reader();

  unsigned n_;
  stats_of stats_;
  boost::asio::io_context io_;
  std::unique_ptr<host::delivery_hub> hub_;
  std::vector<std::unique_ptr<guest_end>> guests_;
  int epoll_ = -1;
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

}  // namespace magnet::bench
