// A VM's work beyond its vCPUs: the CPU time of its vhost workers and QEMU
// threads (helper_clock, from /proc/TID/schedstat) on a synthetic /proc
// tree and on real threads of this test, and that work in the meter's split
// (each VM's share follows it, the energy still adds up).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include "magnet/power/meter.h"
#include "magnet/power/thread_clock.h"

namespace magnet::power {
namespace {

namespace fs = std::filesystem;

// ROOT/TID/schedstat files, written in place (the same file, as the
// kernel's is the same file however often it is read).
struct proc_tree {
  std::string root = "/tmp/magnet-proc-" + std::to_string(getpid());
  proc_tree() { fs::remove_all(root); }
  ~proc_tree() { fs::remove_all(root); }
  void ran(pid_t tid, uint64_t ns) {
    fs::create_directories(root + "/" + std::to_string(tid));
    std::ofstream(root + "/" + std::to_string(tid) + "/schedstat") << ns << " 12345 67\n";
  }
  void ended(pid_t tid) { fs::remove_all(root + "/" + std::to_string(tid)); }
};

TEST(HelperClock, EachThreadAddsItsGrowthFromItsSecondReadingByRole) {
  proc_tree p;
  p.ran(101, 5'000);
  p.ran(102, 7'000);
  p.ran(201, 9'000);
  helper_clock c(p.root);
  c.set_threads(1, {{101, helper_role::vhost}, {102, helper_role::io}});
  c.set_threads(2, {{201, helper_role::io}});
  c.set_threads(3, {});
  auto t = c.read();
  EXPECT_EQ(c.reading(), 3u);
  EXPECT_EQ(c.open_files(), 3u) << "kept open, read again with pread";
  EXPECT_EQ(t[1].vhost_ns + t[1].io_ns + t[2].io_ns, 0u) << "first readings are baselines";
  ASSERT_EQ(t.count(3), 1u) << "a VM without helper threads has its zeros";
  p.ran(101, 6'000);
  p.ran(102, 7'500);
  p.ran(201, 9'300);
  t = c.read();
  EXPECT_EQ(t[1].vhost_ns, 1'000u);
  EXPECT_EQ(t[1].io_ns, 500u);
  EXPECT_EQ(t[2].io_ns, 300u);
  EXPECT_EQ(t[2].vhost_ns, 0u);
  // A reading below the one before adds nothing; the next counts from it.
  p.ran(101, 100);
  EXPECT_EQ(c.read().at(1).vhost_ns, 1'000u);
  p.ran(101, 400);
  EXPECT_EQ(c.read().at(1).vhost_ns, 1'300u);
  // A thread new to the registry's list: what it ran before is not this
  // interval's.  One no longer listed: what it ran since is not counted.
  p.ran(103, 50'000'000);
  c.set_threads(1, {{101, helper_role::vhost}, {103, helper_role::io}});
  EXPECT_EQ(c.open_files(), 2u) << "102's file closed";
  p.ran(102, 99'000);
  EXPECT_EQ(c.read().at(1).io_ns, 500u);
  p.ran(103, 50'000'200);
  EXPECT_EQ(c.read().at(1).io_ns, 700u);
  // A VM forgotten: its totals and files go.
  c.forget(2);
  EXPECT_EQ(c.totals().count(2), 0u);
  EXPECT_EQ(c.open_files(), 2u);
}

TEST(HelperClock, AThreadWhoseFileCannotBeReadAddsNothingAndIsTriedAgain) {
  proc_tree p;
  p.ran(101, 1'000);
  // No file held open: each reading opens its file, as past the budget.
  helper_clock c(p.root, 0);
  c.set_threads(1, {{101, helper_role::io}, {102, helper_role::io}});
  c.read();
  EXPECT_EQ(c.reading(), 1u) << "102 has no file yet";
  EXPECT_EQ(c.open_files(), 0u);
  p.ran(102, 8'000);
  p.ran(101, 1'200);
  EXPECT_EQ(c.read().at(1).io_ns, 200u) << "102's first reading is its baseline";
  p.ended(101);
  p.ran(102, 8'100);
  EXPECT_EQ(c.read().at(1).io_ns, 300u);
  EXPECT_EQ(c.reading(), 1u);
  p.ran(101, 5'000);  // back (the test's tree; a thread's number taken anew)
  p.ran(102, 8'200);
  EXPECT_EQ(c.read().at(1).io_ns, 400u) << "101 is a baseline again";
  p.ran(101, 5'050);
  EXPECT_EQ(c.read().at(1).io_ns, 450u);
  // A garbled file is one that cannot be read.
  fs::create_directories(p.root + "/104");
  std::ofstream(p.root + "/104/schedstat") << "x\n";
  c.set_threads(1, {{104, helper_role::io}});
  c.read();
  EXPECT_EQ(c.reading(), 0u);
}

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// A thread of this test that runs 20 ms of CPU each time it is told to,
// then waits (off the CPU) and says how much it has run in all.
struct burner {
  std::mutex mu;
  std::condition_variable cv;
  int asked = 0, done = 0;
  bool quit = false;
  pid_t tid = 0;
  uint64_t ran_ns = 0;
  std::thread th{[this] { loop(); }};
  void loop() {
    std::unique_lock l(mu);
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    for (;;) {
      ran_ns = thread_cpu_ns();
      ++done;
      cv.notify_all();
      cv.wait(l, [&] { return quit || asked > done - 1; });
      if (quit) return;
      const uint64_t until = thread_cpu_ns() + 20'000'000;
      while (thread_cpu_ns() < until) {
      }
    }
  }
  // Its CPU time when it waits again after one more round.
  uint64_t round() {
    std::unique_lock l(mu);
    ++asked;
    cv.notify_all();
    cv.wait(l, [&] { return done > asked; });
    return ran_ns;
  }
  uint64_t started() {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return done > 0; });
    return ran_ns;
  }
  // Until it is off the CPU: the kernel's figure of a running thread lags
  // up to a scheduler tick; of a sleeping one it is exact.
  void asleep() const {
    const std::string stat = "/proc/self/task/" + std::to_string(tid) + "/stat";
    for (int i = 0; i < 100000; ++i) {
      std::ifstream f(stat);
      std::string text((std::istreambuf_iterator<char>(f)), {});
      const size_t end = text.rfind(") ");
      if (end != std::string::npos && end + 2 < text.size() && text[end + 2] == 'S') return;
      std::this_thread::yield();
    }
  }
  void stop() {
    {
      std::lock_guard l(mu);
      quit = true;
    }
    cv.notify_all();
    th.join();
  }
};

// The kernel's figure: a thread of this process is read as it ran, to
// within its few microseconds of waking and waiting; once it has ended it
// adds nothing.
TEST(HelperClock, ReadsWhatARealThreadRanAndNothingOnceItEnded) {
  burner b;
  uint64_t before = b.started();
  b.asleep();
  helper_clock c;
  c.set_threads(7, {{b.tid, helper_role::vhost}});
  c.read();
  ASSERT_EQ(c.reading(), 1u) << "/proc/" << b.tid << "/schedstat";
  uint64_t counted = 0;
  for (int i = 0; i < 3; ++i) {
    const uint64_t after = b.round();
    b.asleep();
    const uint64_t now = c.read().at(7).vhost_ns;
    const uint64_t ran = after - before;
    EXPECT_GE(ran, 20'000'000u);
    EXPECT_NEAR(static_cast<double>(now - counted), static_cast<double>(ran), 1e6) << "round " << i;
    counted = now;
    before = after;
  }
  b.stop();
  // Its file may still be read for a moment (the thread's end in the
  // kernel follows join's return); then it fails.
  for (int i = 0; i < 200 && c.reading(); ++i) {
    c.read();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(c.reading(), 0u) << "an ended thread's file still reads";
  EXPECT_LT(c.totals().at(7).vhost_ns - counted, 1'000'000u) << "its last microseconds at most";
  EXPECT_EQ(c.open_files(), 0u) << "an ended thread's file is closed";
}

// The helper threads' time in the split: a VM whose only work is its vhost
// and I/O threads gets its share, one whose I/O counter went back gets
// nothing for that interval, and VMs + idle + own = the host's energy.
TEST(PowerMeter, VhostAndIoThreadTimeIsTheVmsWorkAndEnergyStillAddsUp) {
  power_model m = *parse_power_model("idle = 100\nfull = 200\n", "straight.conf");
  power_meter meter(m);
  const uint64_t s = 1'000'000'000;
  ASSERT_TRUE(meter.sample(1 * s, {0, 0}, {{1, {0, 0, 0}}, {2, {0, 0, 0}}}).ok());
  // 1 s at 50 %: 150 J, 100 idle; busy 1000 ns: VM 1 ran vCPUs 100 and its
  // vhost 200 and I/O threads 100, VM 2 its I/O threads 300 alone.
  ASSERT_TRUE(meter.sample(2 * s, {1000, 1000}, {{1, {100, 200, 100}}, {2, {0, 0, 300}}}).ok());
  EXPECT_DOUBLE_EQ(meter.totals().vms.at(1), 20);
  EXPECT_DOUBLE_EQ(meter.totals().vms.at(2), 15);
  EXPECT_DOUBLE_EQ(meter.totals().own_j, 15);
  // VM 2's I/O counter went back (its threads seen anew): nothing for it;
  // VM 1's vhost 500 of 1000 busy at 50 %: 25 J.
  ASSERT_TRUE(meter.sample(3 * s, {2000, 2000}, {{1, {100, 700, 100}}, {2, {0, 0, 10}}}).ok());
  EXPECT_DOUBLE_EQ(meter.totals().vms.at(1), 45);
  EXPECT_DOUBLE_EQ(meter.totals().vms.at(2), 15);
  const auto& t = meter.totals();
  double all = t.idle_j + t.own_j + t.gone_j;
  for (const auto& [id, j] : t.vms) all += j;
  EXPECT_NEAR(all, t.host_j, 1e-9 * t.host_j);
  EXPECT_DOUBLE_EQ(t.host_j, 300);
}

}  // namespace
}  // namespace magnet::power
