// Per-vCPU scheduling time from sched.switch / sched.wakeup records: the
// host-side truth behind a guest's "steal".  For each vCPU thread:
//   run   — on a host CPU
//   wait  — runnable but not running (preempted, or woken and queued)
//   halt  — sleeping (the guest halted the vCPU, or it blocks in the host)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <span>

namespace magnet::host {

struct vcpu_times {
  uint32_t vm = 0;
  int vcpu = -1;
  uint64_t run_ns = 0, wait_ns = 0, halt_ns = 0;
};

class vcpu_sched {
 public:
  void add_thread(pid_t tid, uint32_t vm, int vcpu);
  void remove_vm(uint32_t vm);
  // Back-to-back records; anything but sched.switch/wakeup is ignored.
  void feed(std::span<const uint8_t> records);
  // Totals so far, with open intervals counted up to @now_ns.
  std::map<pid_t, vcpu_times> totals(uint64_t now_ns) const;

 private:
  enum class state : uint8_t { unknown, running, runnable, sleeping };
  struct entry {
    vcpu_times t;
    state s = state::unknown;
    uint64_t since = 0;
  };
  static void close(entry& e, uint64_t ts);
  std::map<pid_t, entry> threads_;
};

}  // namespace magnet::host
