// The registry's thread against the thread that consumes what it reports,
// as `magnet host` runs them: the registry follows libvirt in its own thread
// and posts each change to a Boost.Asio loop on another, while a third reads
// its state.  libvirt's test driver (test:///default, inside this process,
// one running domain "test") stands in for libvirtd; this test starts and
// stops that domain many times.  Run under ThreadSanitizer by tools/test.
#include <gtest/gtest.h>
#include <libvirt/libvirt.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>

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

}  // namespace
}  // namespace magnet::host
