// The per-tick cost of reading each VM's vhost workers' and QEMU threads'
// CPU time (helper_clock::read, host/power/src/thread_clock.cc), which the
// daemon does at every 100 ms tick when it has a power source.  Stand-ins
// for the threads: N VMs of T threads of this process, asleep (reading a
// thread's schedstat costs the same whether it runs or not).  Two ways:
// each file kept open and read again with pread (the daemon's, up to
// helper_clock::kMaxOpen files), and each opened, read and closed at every
// tick (past that budget).  Per read() the wall time (CLOCK_MONOTONIC) and
// this thread's CPU time; median and min-max over the runs.
//
//   thread_clock_bench [--vms N] [--threads N] [--runs N] [--json]
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../summary.h"
#include "magnet/power/thread_clock.h"

using namespace magnet::power;

namespace {

uint64_t clock_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// @n threads asleep until the end, and their ids.
struct sleepers {
  std::mutex mu;
  std::condition_variable cv;
  bool quit = false;
  std::vector<pid_t> tids;
  std::vector<std::thread> threads;
  explicit sleepers(unsigned n) {
    for (unsigned i = 0; i < n; ++i)
      threads.emplace_back([this] {
        std::unique_lock l(mu);
        tids.push_back(static_cast<pid_t>(::syscall(SYS_gettid)));
        cv.notify_all();
        cv.wait(l, [&] { return quit; });
      });
    std::unique_lock l(mu);
    cv.wait(l, [&] { return tids.size() == threads.size(); });
  }
  ~sleepers() {
    {
      std::lock_guard l(mu);
      quit = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
  }
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "thread_clock_bench: %s\nusage: thread_clock_bench [--vms N] [--threads N] [--runs N] [--json]\n",
               why);
  std::exit(2);
}

unsigned count_arg(int& i, int argc, char** argv) {
  if (i + 1 >= argc) usage((std::string(argv[i]) + " needs a value").c_str());
  char* end = nullptr;
  unsigned long v = std::strtoul(argv[++i], &end, 10);
  if (!*argv[i] || *end || v == 0 || v > 10000)
    usage((std::string(argv[i - 1]) + ": '" + argv[i] + "' is not a count from 1 to 10000").c_str());
  return static_cast<unsigned>(v);
}

struct way {
  const char* name;
  size_t max_open;
  std::vector<double> wall_us, cpu_us;
};

void measure(way& w, const sleepers& s, unsigned vms, unsigned per_vm, unsigned runs) {
  helper_clock c("/proc", w.max_open);
  for (unsigned v = 0; v < vms; ++v) {
    std::vector<helper_thread> h;
    for (unsigned t = 0; t < per_vm; ++t)
      h.push_back({s.tids[v * per_vm + t], t % 3 ? helper_role::io : helper_role::vhost});
    c.set_threads(v + 1, h);
  }
  c.read();  // the baselines (and the files opened)
  if (c.reading() != s.tids.size()) usage("a thread's /proc/TID/schedstat cannot be read");
  for (unsigned r = 0; r < runs; ++r) {
    const uint64_t w0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    c.read();
    w.cpu_us.push_back(double(clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / 1e3);
    w.wall_us.push_back(double(clock_ns(CLOCK_MONOTONIC) - w0) / 1e3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  unsigned vms = 10, per_vm = 8, runs = 500;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--vms")) vms = count_arg(i, argc, argv);
    else if (!std::strcmp(argv[i], "--threads")) per_vm = count_arg(i, argc, argv);
    else if (!std::strcmp(argv[i], "--runs")) runs = count_arg(i, argc, argv);
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("usage: thread_clock_bench [--vms N] [--threads N] [--runs N] [--json]\n");
      return 0;
    } else usage((std::string("unknown argument '") + argv[i] + "'").c_str());
  }
  if (vms * per_vm > 4096) usage("more than 4096 threads in all");
  if (vms * per_vm > helper_clock::kMaxOpen)
    std::fprintf(stderr, "thread_clock_bench: %u threads: past %zu the 'kept open' way opens the rest each tick\n",
                 vms * per_vm, helper_clock::kMaxOpen);
  sleepers s(vms * per_vm);
  way ways[] = {{"kept open", helper_clock::kMaxOpen, {}, {}}, {"opened each tick", 0, {}, {}}};
  for (auto& w : ways) measure(w, s, vms, per_vm, runs);
  if (json) std::printf("{\"vms\":%u,\"threads_per_vm\":%u,\"runs\":%u,\"ways\":[", vms, per_vm, runs);
  else std::printf("%u VMs x %u threads, %u runs: one read() (a tick's)\n%-20s %-28s %-28s %s\n", vms, per_vm, runs,
                   "way", "wall us, median (min-max)", "CPU us, median (min-max)", "CPU us per thread");
  const unsigned n = vms * per_vm;
  for (size_t i = 0; i < 2; ++i) {
    const magnet::bench::summary wl = magnet::bench::summarize(ways[i].wall_us),
                                 cp = magnet::bench::summarize(ways[i].cpu_us);
    if (json)
      std::printf("%s{\"way\":\"%s\",\"wall_us\":{\"median\":%.2f,\"min\":%.2f,\"max\":%.2f},"
                  "\"cpu_us\":{\"median\":%.2f,\"min\":%.2f,\"max\":%.2f}}",
                  i ? "," : "", ways[i].name, wl.med, wl.min, wl.max, cp.med, cp.min, cp.max);
    else
      std::printf("%-20s %8.1f (%.1f-%.1f)%*s %8.1f (%.1f-%.1f)%*s %.2f\n", ways[i].name, wl.med, wl.min, wl.max, 6, "",
                  cp.med, cp.min, cp.max, 6, "", cp.med / n);
  }
  if (json) std::printf("]}\n");
  return 0;
}
