// The registry's pure parts (thread roles; the domain XML has
// domain_xml_test.cc) and the vCPU scheduling accountant, on exact
// synthetic input.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "magnet/trace_file.h"
#include "magnet/registry/registry.h"
#include "magnet/metrics/vcpu_sched.h"

namespace magnet::host {
namespace {

TEST(Registry, ThreadRolesFromQemuThreadNames) {
  EXPECT_EQ(classify_thread(10, "CPU 0/KVM", 5).role, "vcpu");
  EXPECT_EQ(classify_thread(10, "CPU 12/TCG", 5).vcpu, 12);
  EXPECT_EQ(classify_thread(10, "IO iothread1", 5).role, "iothread");
  EXPECT_EQ(classify_thread(10, "vhost-5", 5).role, "vhost");
  EXPECT_EQ(classify_thread(10, "vhost-6", 5).role, "emulator") << "another VM's worker";
  EXPECT_EQ(classify_thread(10, "qemu-system-x86", 5).role, "emulator");
  EXPECT_EQ(classify_thread(10, "CPU x/KVM", 5).role, "emulator");
  EXPECT_EQ(classify_thread(10, "CPU 1/XYZ", 5).role, "emulator");
  EXPECT_EQ(classify_thread(10, "CPU 1/KVMX", 5).role, "emulator");
  EXPECT_EQ(classify_thread(10, "CPU /KVM", 5).role, "emulator");
}

// Names that std::stoi threw on (out of range) or read wrongly: never a
// vCPU, never an exception.
TEST(Registry, ThreadNamesOutOfRangeAreNotVcpus) {
  for (const char* comm : {"CPU 99999999999/KVM", "CPU -1/KVM", "CPU +1/KVM", "CPU 1 /KVM", "CPU 0x1/TCG"}) {
    vm_thread t;
    EXPECT_NO_THROW(t = classify_thread(10, comm, 5)) << comm;
    EXPECT_EQ(t.role, "emulator") << comm;
    EXPECT_EQ(t.vcpu, -1) << comm;
  }
  EXPECT_EQ(classify_thread(10, "CPU 2147483647/KVM", 5).vcpu, 2147483647);
}

TEST(Registry, OwnProcessThreadsAreListed) {
  auto t = qemu_threads(getpid());
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.front().tid, getpid());
}

// A process of ours named @comm (a stand-in for a pre-6.4 vhost kernel
// worker), until the fixture ends: SIGKILL and reaped.
struct named_child {
  pid_t pid = -1;
  explicit named_child(const std::string& comm) {
    int ready[2];
    if (pipe(ready) != 0) return;
    pid = fork();
    if (pid == 0) {
      prctl(PR_SET_NAME, comm.c_str());
      (void)!write(ready[1], "x", 1);
      for (;;) pause();
    }
    char c;
    if (pid > 0 && read(ready[0], &c, 1) != 1) pid = -1;  // named before it is looked for
    close(ready[0]);
    close(ready[1]);
  }
  ~named_child() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

// One walk of /proc finds each owner's workers by the exact name
// "vhost-<pid>", and nothing named like it.
TEST(Registry, VhostWorkersAreFoundByOwnerInOneWalk) {
  const pid_t self = getpid();
  named_child worker("vhost-" + std::to_string(self)), impostor("vhost-" + std::to_string(self) + "x"),
      other("vhost-x");
  ASSERT_GT(worker.pid, 0);
  ASSERT_GT(impostor.pid, 0);
  auto w = scan_vhost_workers();
  ASSERT_EQ(w.count(self), 1u);
  EXPECT_EQ(w[self], std::vector<pid_t>{worker.pid});
  for (const auto& [owner, pids] : w)
    for (pid_t p : pids) EXPECT_TRUE(p != impostor.pid && p != other.pid) << "owner " << owner;
  // Found by a VM's own walk as well (qemu_threads without a pass's scan).
  auto t = qemu_threads(self);
  auto it = std::find_if(t.begin(), t.end(), [&](const vm_thread& x) { return x.tid == worker.pid; });
  ASSERT_NE(it, t.end());
  EXPECT_EQ(it->role, "vhost");
}

// A pass describes its VMs from the one walk it made: qemu_threads with a
// pass's workers does not walk /proc again (a walk per VM cost VMs x
// processes, bench/scale).  The workers given are the only ones listed,
// although a real one runs now.
TEST(Registry, VmThreadsComeFromThePassWalk) {
  const pid_t self = getpid();
  named_child worker("vhost-" + std::to_string(self));
  ASSERT_GT(worker.pid, 0);
  const pid_t from_pass = 4'000'000;  // above pid_max's limit: no process has it
  auto t = qemu_threads(self, vhost_workers{{self, {from_pass}}, {self + 1, {from_pass + 1}}});
  std::vector<pid_t> vhost;
  for (const auto& x : t)
    if (x.role == "vhost") vhost.push_back(x.tid);
  EXPECT_EQ(vhost, std::vector<pid_t>{from_pass});
  EXPECT_EQ(t.front().tid, self) << "the process's own threads are still read";
}

std::vector<uint8_t> sw(uint64_t ts, uint32_t prev, uint32_t next, int64_t prev_state) {
  magnet_hdr h{};
  h.ts_ns = ts;
  h.type = MAGNET_EV_SCHED_SWITCH;
  magnet_sched_switch s{};
  s.prev_tid = prev;
  s.next_tid = next;
  s.prev_state = prev_state;
  return make_record(h, s);
}

std::vector<uint8_t> wake(uint64_t ts, uint32_t tid) {
  magnet_hdr h{};
  h.ts_ns = ts;
  h.type = MAGNET_EV_SCHED_WAKEUP;
  magnet_sched_wakeup w{};
  w.tid = tid;
  return make_record(h, w);
}

TEST(VcpuSched, RunWaitAndHaltAddUpExactly) {
  vcpu_sched v;
  v.add_thread(100, 3, 0);
  std::vector<uint8_t> s;
  auto add = [&](std::vector<uint8_t> r) { s.insert(s.end(), r.begin(), r.end()); };
  add(sw(1000, 1, 100, 0));   // vCPU switched in: running from 1000
  add(sw(1500, 100, 2, 0));   // preempted: runnable (wait) from 1500
  add(sw(1800, 2, 100, 0));   // back on CPU: waited 300
  add(sw(2800, 100, 1, 1));   // halts (TASK_INTERRUPTIBLE): ran 500 + 1000
  add(wake(4800, 100));       // woken: halted 2000, now runnable
  add(sw(4900, 1, 100, 0));   // waited 100, running
  add(sw(5000, 7, 8, 0));     // unrelated switch
  v.feed(s);
  auto t = v.totals(5400);    // still running: +500
  ASSERT_EQ(t.count(100), 1u);
  EXPECT_EQ(t[100].vm, 3u);
  EXPECT_EQ(t[100].vcpu, 0);
  EXPECT_EQ(t[100].run_ns, 500u + 1000u + 500u);
  EXPECT_EQ(t[100].wait_ns, 300u + 100u);
  EXPECT_EQ(t[100].halt_ns, 2000u);
  v.remove_vm(3);
  EXPECT_TRUE(v.totals(6000).empty());
}

}  // namespace
}  // namespace magnet::host
