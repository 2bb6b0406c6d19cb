// The registry's pure parts (thread roles; the domain XML has
// domain_xml_test.cc) and the vCPU scheduling accountant, on exact
// synthetic input.
#include <gtest/gtest.h>
#include <unistd.h>

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
