// The CPU time of the threads that work for a VM besides its vCPUs: its
// vhost workers, and QEMU's I/O threads, main loop and other threads
// (docs/placement.md, "A VM's work").  The kernel's own figure for each
// thread: the first field of /proc/TID/schedstat, the thread's time on a
// CPU in nanoseconds (the scheduler's sum_exec_runtime: exact, where
// /proc/stat and the stat files count ticks of 10 ms).  The file is mode
// 0444 and asks for no ptrace access: the daemon reads it after dropping
// its privileges, with the calls its syscall filter allows (openat,
// pread64, close).
//
// A thread's file is opened once and read again with pread at each tick:
// one system call per thread per tick.  An open file stays its thread's:
// once the thread has ended a read fails (ESRCH), and a later task given
// the same number is another file.  Past @max_open files (the daemon's own
// descriptors are not for thousands of QEMU worker threads) a thread's file
// is opened, read and closed at each tick.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace magnet::power {

// What a thread does for its VM: vm_work::vhost_ns or io_threads_ns.
enum class helper_role { vhost, io };

struct helper_thread {
  pid_t tid = 0;
  helper_role role = helper_role::io;
};

// A VM's helper threads' CPU time, nanoseconds, summed since the clock was
// given the VM (set_threads); only grows while the VM is known.
struct helper_times {
  uint64_t vhost_ns = 0;
  uint64_t io_ns = 0;
};

class helper_clock {
 public:
  static constexpr size_t kMaxOpen = 256;

  explicit helper_clock(std::string proc_root = "/proc", size_t max_open = kMaxOpen)
      : proc_(std::move(proc_root)), max_open_(max_open) {}
  ~helper_clock();
  helper_clock(const helper_clock&) = delete;
  helper_clock& operator=(const helper_clock&) = delete;

  // @vm's helper threads now (the registry's list).  Threads it no longer
  // lists are closed and their time since their last reading is not
  // counted; new ones count from their first reading on (the time they ran
  // before is not the interval's).
  void set_threads(uint32_t vm, const std::vector<helper_thread>& threads);
  void forget(uint32_t vm);

  // Reads every thread once: each thread adds what it ran since its last
  // reading.  A thread's first reading is its baseline and adds nothing; so
  // does a reading below the one before.  A thread whose file cannot be
  // read (it has ended, or has not been seen yet) adds nothing and is tried
  // again at the next call, its next reading a baseline.
  const std::map<uint32_t, helper_times>& read();

  const std::map<uint32_t, helper_times>& totals() const { return totals_; }
  // Threads read at the last read(), and files held open now.
  size_t reading() const { return reading_; }
  size_t open_files() const { return open_; }

 private:
  struct thread_state {
    helper_role role = helper_role::io;
    int fd = -1;
    bool have = false;  // last_ns is a reading
    uint64_t last_ns = 0;
  };
  // The thread's time so far, or false when its file cannot be read.
  bool sample(pid_t tid, thread_state& t, uint64_t& ns);
  void close_file(thread_state& t);

  std::string proc_;
  size_t max_open_;
  std::map<uint32_t, std::map<pid_t, thread_state>> vms_;
  std::map<uint32_t, helper_times> totals_;
  size_t reading_ = 0, open_ = 0;
};

}  // namespace magnet::power
