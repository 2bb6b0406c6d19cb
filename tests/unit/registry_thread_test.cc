// The registry's thread against the thread that consumes what it reports,
// as `magnet host` runs them: the registry follows libvirt in its own thread
// and posts each change to a Boost.Asio loop on another, while a third reads
// its state.  libvirt's test driver (test:///default, inside this process,
// one running domain "test") stands in for libvirtd; the tests start and
// stop that domain many times and define others of their own (undefined
// again at their end).  Run under ThreadSanitizer by tools/test.
#include <gtest/gtest.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>

#include "magnet/control.h"
#include "magnet/registry/registry.h"

namespace magnet::host {
namespace {

namespace asio = boost::asio;

// The names of the fields in which @a and @b differ, each with both values
// where they are numbers.
std::string differing_fields(const vm_info& a, const vm_info& b) {
  std::string d;
  auto num = [&](const char* name, long long x, long long y) {
    if (x != y) d += std::string(" ") + name + " " + std::to_string(x) + " -> " + std::to_string(y);
  };
  auto other = [&](const char* name, bool same) {
    if (!same) d += std::string(" ") + name;
  };
  num("libvirt_id", a.libvirt_id, b.libvirt_id);
  num("qemu_pid", a.qemu_pid, b.qemu_pid);
  num("vsock_cid", a.vsock_cid, b.vsock_cid);
  other("uuid", a.uuid == b.uuid);
  other("name", a.name == b.name);
  other("threads", a.threads == b.threads);
  other("taps", a.taps == b.taps);
  other("view_channel", a.view_channel == b.view_channel);
  other("allowances", a.allowance_tx_bps == b.allowance_tx_bps && a.allowance_rx_bps == b.allowance_rx_bps);
  other("cgroups", a.cgroups == b.cgroups && a.cgroup_ids == b.cgroup_ids);
  return d.empty() ? " nothing" : d;
}

// Like the daemon's tagger: the registry thread posts, the loop applies.
struct posting_tagger : vm_tagger {
  explicit posting_tagger(asio::io_context& i) : io(i) {}
  void vm_changed(const vm_info& vm) override {
    asio::post(io, [this, vm] {
      auto it = vms.find(vm.vm_id);
      if (it == vms.end()) {
        ++appeared;
      } else {
        // A change of a running VM: told only when something differs.
        if (it->second == vm) ++repeated;
        changes += "vm " + std::to_string(vm.vm_id) + ":" + differing_fields(it->second, vm) + "\n";
      }
      vms[vm.vm_id] = vm;
      ++changed;
    });
  }
  void vm_gone(uint32_t id) override {
    asio::post(io, [this, id] {
      vms.erase(id);
      ++gone;
    });
  }
  asio::io_context& io;
  std::map<uint32_t, vm_info> vms;  // loop thread only
  int changed = 0, gone = 0, appeared = 0, repeated = 0;
  std::string changes;  // each change of a running VM
};

// Runs @io until @ok holds (bounded).
bool run_until(asio::io_context& io, const std::function<bool()>& ok, int timeout_s = 10) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (!ok()) {
    if (std::chrono::steady_clock::now() > end) return false;
    io.restart();
    io.run_for(std::chrono::milliseconds(20));
  }
  return true;
}

TEST(RegistryThread, FollowsDomainsStartingAndStoppingWhileAnotherThreadReads) {
  asio::io_context io;
  posting_tagger t(io);
  registry reg("test:///default", t);
  ASSERT_TRUE(reg.reconcile()) << "libvirt's test driver is built into libvirt";
  virConnectPtr c = virConnectOpen("test:///default");  // the same driver state
  ASSERT_NE(c, nullptr);
  virDomainPtr d = virDomainLookupByName(c, "test");
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(run_until(io, [&] { return t.vms.size() == 1; }));
  const uint32_t id = t.vms.begin()->first;
  EXPECT_EQ(t.vms.begin()->second.name, "test");

  reg.start();
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (!done) {
      for (const auto& vm : reg.vms()) EXPECT_EQ(vm.vm_id, id);
      (void)reg.connected();
      ++reads;
    }
  });
  constexpr int kRounds = 8;
  for (int i = 0; i < kRounds; ++i) {
    ASSERT_EQ(virDomainDestroy(d), 0);
    ASSERT_TRUE(run_until(io, [&] { return t.vms.empty(); })) << "round " << i << ": stop";
    ASSERT_EQ(virDomainCreate(d), 0);
    ASSERT_TRUE(run_until(io, [&] { return t.vms.size() == 1; })) << "round " << i << ": start";
    EXPECT_EQ(t.vms.begin()->first, id) << "the id is stable per UUID";
  }
  done = true;
  reader.join();
  reg.stop();
  io.restart();
  io.poll();
  // Each stop is one vm_gone, each start one new VM.  A running VM may
  // also be reported changed (CI once saw one such change among 8 rounds,
  // under ASan, never reproduced in 350 runs here), never with nothing
  // changed.
  EXPECT_EQ(t.gone, kRounds);
  EXPECT_EQ(t.appeared, kRounds + 1);
  EXPECT_EQ(t.repeated, 0) << t.changes;
  EXPECT_LE(t.changed, t.appeared + 2) << t.changes;
  if (!t.changes.empty()) std::printf("changes of a running VM:\n%s", t.changes.c_str());
  EXPECT_GT(reads.load(), kRounds);
  EXPECT_TRUE(reg.connected());
  virDomainFree(d);
  virConnectClose(c);
}


// A domain of the test driver, defined and started with @devices (and
// @metadata); undefined again by ~test_domain.
struct test_domain {
  test_domain(virConnectPtr c, const std::string& name, const std::string& devices,
              const std::string& metadata = "") {
    const std::string xml = "<domain type='test'><name>" + name + "</name>" + metadata +
                            "<memory>1024</memory><os><type>hvm</type></os><devices>" + devices +
                            "</devices></domain>";
    d = virDomainDefineXML(c, xml.c_str());
    if (d && virDomainCreate(d) != 0) {
      virDomainUndefine(d);
      virDomainFree(d);
      d = nullptr;
    }
  }
  ~test_domain() {
    if (!d) return;
    if (virDomainIsActive(d) == 1) virDomainDestroy(d);
    virDomainUndefine(d);
    virDomainFree(d);
  }
  std::string uuid() const {
    char u[VIR_UUID_STRING_BUFLEN] = {};
    virDomainGetUUIDString(d, u);
    return u;
  }
  virDomainPtr d = nullptr;
};

std::optional<vm_info> named(const std::vector<vm_info>& vms, const std::string& name) {
  for (const auto& vm : vms)
    if (vm.name == name) return vm;
  return {};
}

// Sets the inbound average (kB/s) of the test domain's interface: a change
// of its live description that libvirt's test driver announces with no
// event (it cannot hot-plug: attach and detach are unsupported there), so
// only a pass or a device event can find it.
void set_inbound(virDomainPtr d, unsigned kbytes) {
  virTypedParameterPtr p = nullptr;
  int n = 0, max = 0;
  ASSERT_EQ(virTypedParamsAddUInt(&p, &n, &max, VIR_DOMAIN_BANDWIDTH_IN_AVERAGE, kbytes), 0);
  ASSERT_EQ(virDomainSetInterfaceParameters(d, "testnet0", p, n, VIR_DOMAIN_AFFECT_LIVE), 0);
  virTypedParamsFree(p, n);
}

// libvirt's device events call devices_changed() for their domain; the test
// driver cannot emit them, so the test calls it as they would.  With a
// period of an hour, only that call can make the registry see the change.
TEST(RegistryThread, DeviceEventDescribesItsDomainAtOnceNotAtThePeriod) {
  asio::io_context io;
  posting_tagger t(io);
  registry reg("test:///default", t, std::chrono::hours(1));
  reg.start();  // its first pass is whole; the next is due in an hour
  ASSERT_TRUE(run_until(io, [&] { return t.vms.size() == 1; }));
  virConnectPtr c = virConnectOpen("test:///default");
  ASSERT_NE(c, nullptr);
  virDomainPtr d = virDomainLookupByName(c, "test");
  ASSERT_NE(d, nullptr);
  char uuid[VIR_UUID_STRING_BUFLEN] = {};
  virDomainGetUUIDString(d, uuid);
  const int changed = t.changed;
  set_inbound(d, 1000);
  // Control: nothing tells the registry, so it sees nothing for the period.
  run_until(io, [&] { return t.changed != changed; }, 2);
  EXPECT_EQ(t.changed, changed) << "a pass ran although the period is an hour: " << t.changes;
  auto t0 = std::chrono::steady_clock::now();
  reg.devices_changed(uuid);
  ASSERT_TRUE(run_until(io, [&] { return t.changed != changed; }, 5)) << "the device event was not acted on";
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("device event to the tagger's change: %.1f ms\n", ms);
  EXPECT_LT(ms, 1000) << "the device event waited";
  EXPECT_DOUBLE_EQ(t.vms.begin()->second.allowance_rx_bps, 8e6) << "inbound 1000 kB/s";
  EXPECT_EQ(t.changed, changed + 1) << t.changes;
  reg.stop();
  set_inbound(d, 0);
  virDomainFree(d);
  virConnectClose(c);
}

// A tenant who can write its domain's <metadata> (through a management
// layer) claims CID 9; its vsock device has 7.  (libvirt keeps a metadata
// element in a default namespace as written; the regex reader took 9.)
TEST(RegistryThread, MetadataImpostorIsNotTheVmsCid) {
  asio::io_context io;
  posting_tagger t(io);
  registry reg("test:///default", t);
  virConnectPtr c = virConnectOpen("test:///default");
  ASSERT_NE(c, nullptr);
  test_domain imp(c, "impostor", "<vsock model='virtio'><cid auto='no' address='7'/></vsock>",
                  "<metadata><info xmlns='urn:tenant'><devices><vsock><cid address='9'/></vsock></devices>"
                  "<vsock><cid address='9'/></vsock></info></metadata>");
  ASSERT_NE(imp.d, nullptr) << virGetLastErrorMessage();
  ASSERT_TRUE(reg.reconcile());
  auto vm = named(reg.vms(), "impostor");
  ASSERT_TRUE(vm);
  EXPECT_EQ(vm->vsock_cid, 7u);
  auto owner = reg.cid_owner(7);
  ASSERT_TRUE(owner) << owner.err().message;
  EXPECT_EQ(*owner, vm->vm_id);
  owner = reg.cid_owner(9);
  ASSERT_TRUE(owner) << owner.err().message;
  EXPECT_EQ(*owner, 0u);
  virConnectClose(c);
}

// cid_owner() answers from the domain's live description, not from what
// the registry last saw: here the registry's thread does not run, so only
// that read can know the CID moved.
TEST(RegistryThread, CidOwnerReadsTheLiveDescription) {
  asio::io_context io;
  posting_tagger t(io);
  registry reg("test:///default", t);
  auto none = reg.cid_owner(7);
  EXPECT_TRUE(none && *none == 0) << "no VM known with the CID: no one's, without asking libvirt";
  virConnectPtr c = virConnectOpen("test:///default");
  ASSERT_NE(c, nullptr);
  auto moved = std::make_unique<test_domain>(c, "mover", "<vsock model='virtio'><cid auto='no' address='7'/></vsock>");
  ASSERT_NE(moved->d, nullptr) << virGetLastErrorMessage();
  ASSERT_TRUE(reg.reconcile());
  auto vm = named(reg.vms(), "mover");
  ASSERT_TRUE(vm);
  const uint32_t id = vm->vm_id;
  auto owner = [&](uint32_t cid) {
    auto o = reg.cid_owner(cid);
    EXPECT_TRUE(o) << o.err().message;
    return o ? *o : ~0u;
  };
  EXPECT_EQ(owner(7), id);
  EXPECT_EQ(owner(8), 0u);
  // Stopped: the registry still says 7, libvirt says not running.
  ASSERT_EQ(virDomainDestroy(moved->d), 0);
  EXPECT_EQ(named(reg.vms(), "mover").value_or(vm_info{}).vsock_cid, 7u) << "not seen yet";
  EXPECT_EQ(owner(7), 0u);
  // Running again with CID 8 (its vsock device replaced): 7 is no one's
  // now, and 8 is no one's until the registry has seen the domain with it.
  const std::string uuid = moved->uuid();
  const std::string xml = "<domain type='test'><name>mover</name><uuid>" + uuid +
                          "</uuid><memory>1024</memory><os><type>hvm</type></os><devices>"
                          "<vsock model='virtio'><cid auto='no' address='8'/></vsock></devices></domain>";
  virDomainPtr again = virDomainDefineXML(c, xml.c_str());
  ASSERT_NE(again, nullptr) << virGetLastErrorMessage();
  ASSERT_EQ(virDomainCreate(again), 0);
  virDomainFree(again);
  EXPECT_EQ(owner(7), 0u) << "the registry's stale CID is not confirmed";
  EXPECT_EQ(owner(8), 0u);
  ASSERT_TRUE(reg.reconcile());
  EXPECT_EQ(owner(8), id);
  EXPECT_EQ(owner(7), 0u);
  // From another thread while the registry's own thread follows the
  // domain stopping and starting: never another VM's id.
  ASSERT_TRUE(run_until(io, [&] { return t.vms.size() == 2; }));
  const int gone = t.gone, appeared = t.appeared;
  reg.start();
  std::atomic<bool> done{false};
  std::atomic<int> asked{0}, confirmed{0};
  std::thread asker([&] {
    while (!done) {
      auto o = reg.cid_owner(8);
      if (o && *o != 0 && *o != id) ADD_FAILURE() << "CID 8 given to vm " << *o;
      confirmed += o && *o == id;
      ++asked;
    }
  });
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(virDomainDestroy(moved->d), 0);
    ASSERT_TRUE(run_until(io, [&] { return t.gone > gone + i; }));
    ASSERT_EQ(virDomainCreate(moved->d), 0);
    ASSERT_TRUE(run_until(io, [&] { return t.appeared > appeared + i; }));
  }
  // Running, and seen running: the asker is confirmed before it stops.
  // (Stopping at once raced it: under ASan on a loaded machine it asked
  // 510 times in the cycles' 95 ms and never between a start being seen
  // and the next stop, a fresh clone's CI run of 2026-11-27.)
  EXPECT_TRUE(run_until(io, [&] { return confirmed.load() > 0; }));
  done = true;
  asker.join();
  reg.stop();
  EXPECT_GT(confirmed.load(), 0) << asked.load() << " asked";
  std::printf("cid_owner from another thread: %d asked, %d confirmed\n", asked.load(), confirmed.load());
  virConnectClose(c);
}

// Nothing thrown on the registry thread ends it (std::terminate would end
// the daemon), and the VM the failed pass found still reaches the tagger.
TEST(RegistryThread, AThrowingPassIsLoggedAndTheNextOneTellsEveryVm) {
  asio::io_context io;
  struct throwing_tagger : posting_tagger {
    using posting_tagger::posting_tagger;
    void vm_changed(const vm_info& vm) override {
      if (throws.fetch_sub(1) > 0) throw std::runtime_error("tagger failed on purpose");
      posting_tagger::vm_changed(vm);
    }
    std::atomic<int> throws{1};
  } t(io);
  registry reg("test:///default", t, std::chrono::hours(1));
  reg.start();  // its first pass throws
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (t.throws.load() > 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_LE(t.throws.load(), 0) << "the first pass did not reach the tagger";
  ASSERT_EQ(reg.vms().size(), 1u) << "the pass knew the VM when the tagger threw";
  reg.devices_changed(reg.vms().front().uuid);
  EXPECT_TRUE(run_until(io, [&] { return t.vms.size() == 1; }, 5))
      << "the VM the failed pass found never reached the tagger";
  reg.stop();
}

// Descriptions the reader refuses (here a CID libvirt's test driver takes
// but no guest can have): the pass goes on, logs it, lists the others.
TEST(RegistryThread, ARefusedDescriptionIsLoggedNeverThrown) {
  asio::io_context io;
  posting_tagger t(io);
  registry reg("test:///default", t);
  virConnectPtr c = virConnectOpen("test:///default");
  ASSERT_NE(c, nullptr);
  test_domain any(c, "cid-any", "<vsock model='virtio'><cid auto='no' address='4294967295'/></vsock>");
  ASSERT_NE(any.d, nullptr) << virGetLastErrorMessage();
  test_domain tap(c, "bad-tap", "<interface type='ethernet'><target dev='a/b'/></interface>");
  ASSERT_NE(tap.d, nullptr) << virGetLastErrorMessage();
  status s;
  EXPECT_NO_THROW(s = reg.reconcile());
  EXPECT_TRUE(s) << s.err().message;
  const auto vms = reg.vms();
  EXPECT_TRUE(named(vms, "test"));
  EXPECT_FALSE(named(vms, "cid-any"));
  EXPECT_FALSE(named(vms, "bad-tap"));
  auto o = reg.cid_owner(4294967295u);
  EXPECT_TRUE(o && *o == 0);
  virConnectClose(c);
}

// More running domains than VM ids (MAGNET_MAX_VM_ID, the kernel's 8-bit
// tag): no id is ever given to two of them, the ones left over are never
// told to the tagger (an id 0 shared by several VMs would mix their events
// and views), and a pass that finds the same domains again changes nothing.
// A node file of libvirt's test driver holds them (running at load).
TEST(Registry, MoreDomainsThanIdsNeverShareAnIdAndTheRestStayUntagged) {
  constexpr unsigned kDomains = MAGNET_MAX_VM_ID + 45;
  char dir[] = "/tmp/magnet-registry-ids-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string node = std::string(dir) + "/node.xml";
  {
    std::FILE* f = std::fopen(node.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("<node>\n", f);
    for (unsigned i = 1; i <= kDomains; ++i)
      std::fprintf(f,
                   "<domain type='test'><name>ids-%u</name><uuid>%08x-1d5a-4e5f-8a9b-%012x</uuid>"
                   "<memory>65536</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>\n",
                   i, i, i);
    std::fputs("</node>\n", f);
    ASSERT_EQ(std::fclose(f), 0);
  }
  struct counting_tagger : vm_tagger {
    void vm_changed(const vm_info& vm) override { told[vm.vm_id].push_back(vm.uuid); }
    void vm_gone(uint32_t id) override { gone.push_back(id); }
    std::map<uint32_t, std::vector<std::string>> told;  // id -> the domains told with it
    std::vector<uint32_t> gone;
  } t;
  registry reg("test://" + node, t, std::chrono::hours(1));
  ASSERT_TRUE(reg.reconcile()) << "the test driver's node file " << node;
  std::map<uint32_t, int> holders;
  unsigned untagged = 0;
  for (const auto& vm : reg.vms()) vm.vm_id ? ++holders[vm.vm_id] : ++untagged;
  EXPECT_EQ(reg.vms().size(), kDomains);
  EXPECT_EQ(holders.size(), size_t{MAGNET_MAX_VM_ID}) << "every id in use, each once";
  for (const auto& [id, n] : holders) EXPECT_EQ(n, 1) << "id " << id << " given to " << n << " domains";
  EXPECT_EQ(untagged, kDomains - MAGNET_MAX_VM_ID);
  EXPECT_EQ(t.told.count(0), 0u) << "a VM without an id was told to the tagger";
  for (const auto& [id, uuids] : t.told) EXPECT_EQ(uuids.size(), 1u) << "id " << id;
  EXPECT_TRUE(t.gone.empty());
  const size_t told_first = t.told.size();
  ASSERT_TRUE(reg.reconcile());
  EXPECT_EQ(t.told.size(), told_first);
  for (const auto& [id, uuids] : t.told) EXPECT_EQ(uuids.size(), 1u) << "id " << id << " told again";
  EXPECT_TRUE(t.gone.empty()) << "a second pass over the same domains took ids away";
  reg.stop();
  std::remove(node.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace magnet::host
