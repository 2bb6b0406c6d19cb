// Measures what a per-VM view instance really allocates, with a counting
// global operator new (its own executable: the override is process-wide).
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "magnet/filters/engine.h"
#include "records.h"

namespace {
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_allocs{0};
}

void* operator new(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  g_live += static_cast<int64_t>(malloc_usable_size(p));
  ++g_allocs;
  return p;
}
void operator delete(void* p) noexcept {
  if (!p) return;
  g_live -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }

namespace magnet::filters {
namespace {

using namespace testing;

TEST(Memory, PerVmInstanceAllocatesAtMostOneMiB) {
  view_spec v;
  v.name = "heavy";
  v.per_vm = true;
  v.windows = {{window_stats::kind::count, 8192, 0}, {window_stats::kind::time, 0, 1'000'000'000, 8192}};
  v.group_by = {group_key::connection, group_key::vcpu};
  v.max_groups = 1024;
  v.correlate = {{"c", "event == net.ip.send", "event == net.dev.xmit", corr_key::ip_id, 1'000'000'000, 1024}};
  // The worst-case stream, built before measuring.
  std::vector<uint8_t> buf;
  for (uint32_t i = 0; i < 40000; ++i) {
    auto r = pkt_rec({.ts = i, .type = i % 2 ? MAGNET_EV_NET_IP_SEND : MAGNET_EV_NET_DEV_XMIT, .vm = 1,
                      .tgid = i, .tid = i, .id = i, .size = int32_t(i)}, 3, uint16_t(i));
    buf.insert(buf.end(), r.begin(), r.end());
  }
  engine e;
  ASSERT_TRUE(e.add_view(v).ok());
  int64_t before = g_live.load();
  e.add_vm(1);
  e.feed(buf);
  int64_t used = g_live.load() - before;
  auto s = e.snapshot("heavy", 1);
  ASSERT_TRUE(s.ok());
  std::printf("per-VM instance: allocated %lld bytes, accounted %zu, bound %zu\n",
              static_cast<long long>(used), s->memory_bytes, max_memory_bytes(v));
  EXPECT_LE(used, static_cast<int64_t>(kViewMemoryBudget));
  // The accounting used for snapshots tracks the real allocation.
  EXPECT_NEAR(static_cast<double>(used), static_cast<double>(s->memory_bytes), 0.05 * used);

  // The typical view of the 100-VM benchmark, and a second VM costs the same.
  engine f;
  ASSERT_TRUE(f.add_view(hundred_vms_view()).ok());
  before = g_live.load();
  f.add_vm(1);
  std::printf("typical per-VM view, empty: %lld bytes\n", static_cast<long long>(g_live.load() - before));
}

TEST(Memory, SteadyStateFeedDoesNotAllocate) {
  view_spec v;
  v.name = "sock";
  v.filter = "event == net.sock";
  v.per_vm = true;
  v.windows = {{window_stats::kind::count, 1000, 0}, {window_stats::kind::time, 0, 10'000'000}};
  v.group_by = {group_key::connection};
  engine e;
  ASSERT_TRUE(e.add_view(v).ok());
  std::vector<uint8_t> buf;
  for (uint32_t i = 0; i < 20000; ++i) {
    auto r = sock_rec({.ts = i * 1000ull, .type = MAGNET_EV_NET_SOCK_RECV, .vm = 1 + i % 4, .id = i % 16, .size = int32_t(i % 1500)});
    buf.insert(buf.end(), r.begin(), r.end());
  }
  e.feed(buf);  // warm-up: instances, rings, tables reach their size
  auto shift = [&](uint64_t d) {
    for (size_t off = 0; off < buf.size(); off += reinterpret_cast<magnet_hdr*>(buf.data() + off)->len)
      reinterpret_cast<magnet_hdr*>(buf.data() + off)->ts_ns += d;
  };
  shift(20000ull * 1000);
  int64_t before = g_live.load(), allocs = g_allocs.load();
  e.feed(buf);
  EXPECT_EQ(g_live.load(), before);
  EXPECT_EQ(g_allocs.load(), allocs);  // not even transient allocations
}

TEST(Memory, ReusedSnapshotBuffersDoNotAllocate) {
  // What a 10 Hz server can do: keep the snapshot vector and the JSON
  // buffer across ticks.  Once they have held a VM's views, further ticks
  // (new records, no new rows) allocate nothing.
  view_spec v;
  v.name = "net-view-with-a-name-longer-than-sso";
  v.filter = "event == net";
  v.per_vm = true;
  v.windows = {{window_stats::kind::count, 1000, 0}, {window_stats::kind::time, 0, 1'000'000'000}};
  v.group_by = {group_key::connection, group_key::vcpu};  // 18-character labels
  v.correlate = {{"correlation-with-a-long-name", "event == net.sock.send", "event == net.sock.recv",
                  corr_key::abstract_id, 1'000'000, 64}};
  engine e;
  ASSERT_TRUE(e.add_view(v).ok());
  std::vector<uint8_t> buf;
  for (uint32_t i = 0; i < 8000; ++i) {
    auto r = sock_rec({.ts = i * 1000ull, .type = i % 2 ? MAGNET_EV_NET_SOCK_RECV : MAGNET_EV_NET_SOCK_SEND,
                       .vm = 1 + i % 4, .tgid = 7, .tid = 8 + i % 3, .id = i % 16, .size = int32_t(i % 1500)});
    buf.insert(buf.end(), r.begin(), r.end());
  }
  e.feed(buf);
  std::vector<view_snapshot> snaps;
  std::string json;
  auto tick = [&] {
    for (uint32_t vm = 1; vm <= 4; ++vm) {
      e.snapshot_vm(vm, snaps);
      json.clear();
      to_json(snaps, json);
    }
  };
  tick();  // sizes the buffers
  for (size_t off = 0; off < buf.size(); off += reinterpret_cast<magnet_hdr*>(buf.data() + off)->len)
    reinterpret_cast<magnet_hdr*>(buf.data() + off)->ts_ns += 8000ull * 1000;
  e.feed(buf);
  int64_t allocs = g_allocs.load();
  tick();
  EXPECT_EQ(g_allocs.load(), allocs);
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].groups[0].rows.size(), 4u);  // VM 4's connections
  EXPECT_EQ(json, to_json(e.snapshot_vm(4)));
}

}  // namespace
}  // namespace magnet::filters
