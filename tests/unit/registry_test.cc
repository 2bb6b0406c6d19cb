// The registry's pure parts (domain XML, thread roles) and the vCPU
// scheduling accountant, on exact synthetic input.
#include <gtest/gtest.h>
#include <unistd.h>

#include "magnet/trace_file.h"
#include "magnet/registry/registry.h"
#include "magnet/metrics/vcpu_sched.h"

namespace magnet::host {
namespace {

TEST(Registry, DomainXmlGivesTapsAndVsockCid) {
  const char* xml = R"(<domain type='kvm'><name>g1</name><devices>
    <interface type='bridge'><mac address='52:54:00:00:00:01'/><source bridge='br0'/>
      <target dev='vnet3'/><model type='virtio'/></interface>
    <interface type="ethernet"><target dev="tapg1b" managed="no"/></interface>
    <serial type='pty'><target port='0'/></serial>
    <vsock model='virtio'><cid auto='no' address='7'/></vsock>
  </devices></domain>)";
  auto f = parse_domain_xml(xml);
  EXPECT_EQ(f.taps, (std::vector<std::string>{"vnet3", "tapg1b"}));
  EXPECT_EQ(f.vsock_cid, 7u);
  EXPECT_TRUE(parse_domain_xml("<domain/>").taps.empty());
  EXPECT_EQ(parse_domain_xml("<domain/>").vsock_cid, 0u);
}

TEST(Registry, ViewChannelAndBandwidthFromDomainXml) {
  const std::string xml = R"(<domain><devices>
    <interface type='bridge'><target dev='vnet3'/>
      <bandwidth><inbound average='2500' peak='5000'/><outbound average='1250'/></bandwidth>
    </interface>
    <interface type='bridge'><target dev='vnet4'/></interface>
    <channel type='unix'><source mode='bind' path='/run/x/ctl.sock'/>
      <target type='virtio' name='org.magnet.ctl.0'/></channel>
    <channel type='unix'><source path='/run/x/view.sock' mode='bind'/>
      <target type='virtio' name='org.magnet.view.0'/></channel>
  </devices></domain>)";
  auto f = parse_domain_xml(xml);
  EXPECT_EQ(f.view_channel, "/run/x/view.sock") << "the channel with magnet's name, not another";
  EXPECT_DOUBLE_EQ(f.allowance_rx_bps, 20e6) << "inbound 2500 kB/s";
  EXPECT_DOUBLE_EQ(f.allowance_tx_bps, 10e6) << "outbound 1250 kB/s";
  // QEMU connecting out (mode connect) is not a channel the daemon can dial.
  auto c = parse_domain_xml(R"(<domain><devices><channel type='unix'>
    <source mode='connect' path='/tmp/v.sock'/><target type='virtio' name='org.magnet.view.0'/>
    </channel></devices></domain>)");
  EXPECT_EQ(c.view_channel, "");
  EXPECT_EQ(parse_domain_xml("<domain/>").allowance_tx_bps, 0);
}

TEST(Registry, ThreadRolesFromQemuThreadNames) {
  EXPECT_EQ(classify_thread(10, "CPU 0/KVM", 5).role, "vcpu");
  EXPECT_EQ(classify_thread(10, "CPU 12/TCG", 5).vcpu, 12);
  EXPECT_EQ(classify_thread(10, "IO iothread1", 5).role, "iothread");
  EXPECT_EQ(classify_thread(10, "vhost-5", 5).role, "vhost");
  EXPECT_EQ(classify_thread(10, "vhost-6", 5).role, "emulator") << "another VM's worker";
  EXPECT_EQ(classify_thread(10, "qemu-system-x86", 5).role, "emulator");
  EXPECT_EQ(classify_thread(10, "CPU x/KVM", 5).role, "emulator");
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
