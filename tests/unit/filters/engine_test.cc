#include "magnet/filters/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <tuple>

#include "magnet/events.h"
#include "magnet/filters/config.h"
#include "records.h"

namespace magnet::filters {
namespace {

using namespace testing;

std::vector<uint8_t> cat(const std::vector<std::vector<uint8_t>>& rs) {
  std::vector<uint8_t> all;
  for (const auto& r : rs) all.insert(all.end(), r.begin(), r.end());
  return all;
}

view_spec spec(std::string name, std::string filter) {
  view_spec s;
  s.name = std::move(name);
  s.filter = std::move(filter);
  return s;
}

window_spec count_w(uint32_t n) { return {window_stats::kind::count, n, 0}; }
window_spec time_w(uint64_t ns) { return {window_stats::kind::time, 0, ns}; }

view_snapshot snap(const engine& e, std::string_view v, uint32_t vm = 0) {
  auto s = e.snapshot(v, vm);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.err().message);
  return s.ok() ? std::move(s).value() : view_snapshot{};
}

// ---------------------------------------------------------- windows ---

TEST(Engine, MagnetdBandwidthOverLastNReceives) {
  engine e;
  auto v = spec("bw", "event == net.sock.recv");
  v.windows = {count_w(3), time_w(2000)};
  ASSERT_TRUE(e.add_view(v).ok());
  std::vector<std::vector<uint8_t>> rs;
  // recv at 1000..5000 with sizes 100..500, interleaved with sends (filtered out)
  for (int i = 1; i <= 5; ++i) {
    rs.push_back(sock_rec({.ts = uint64_t(i * 1000), .type = MAGNET_EV_NET_SOCK_RECV, .size = i * 100}));
    rs.push_back(sock_rec({.ts = uint64_t(i * 1000 + 1), .type = MAGNET_EV_NET_SOCK_SEND, .size = 9999}));
  }
  e.feed(cat(rs));
  auto s = snap(e, "bw");
  EXPECT_EQ(s.matched, 5u);
  ASSERT_EQ(s.windows.size(), 2u);
  // last 3 recv: 300@3000 400@4000 500@5000 -> (400+500) / 2000ns
  EXPECT_EQ(s.windows[0].events, 3u);
  EXPECT_EQ(s.windows[0].bytes, 1200u);
  EXPECT_DOUBLE_EQ(s.windows[0].bandwidth_bps, 900 * 1e9 / 2000);
  // time window, now = stream time 5001: (3001, 5001] holds 400, 500
  EXPECT_EQ(s.ts_ns, 5001u);
  EXPECT_EQ(s.windows[1].events, 2u);
  EXPECT_EQ(s.windows[1].bytes, 900u);
  EXPECT_DOUBLE_EQ(s.windows[1].bandwidth_bps, 900 * 1e9 / 2000);
  // value sketch of sizes
  EXPECT_EQ(s.value.count, 5u);
  EXPECT_EQ(s.value.min, 100);
  EXPECT_EQ(s.value.max, 500);
  EXPECT_NEAR(s.value.p50, 300, 3);
}

TEST(Engine, InterarrivalValue) {
  engine e;
  auto v = spec("ia", "event == kvm.exit");
  v.value = value_kind::interarrival;
  ASSERT_TRUE(e.add_view(v).ok());
  for (uint64_t t : {100, 200, 400, 800}) e.feed(kvm_exit_rec({.ts = t, .type = MAGNET_EV_KVM_EXIT}, 0));
  auto s = snap(e, "ia");
  EXPECT_EQ(s.value.count, 3u);
  EXPECT_EQ(s.value.min, 100);
  EXPECT_EQ(s.value.max, 400);
  EXPECT_EQ(s.value.sum, 700);
}

// ---------------------------------------------------------- group-by ---

// View "g": every record, grouped by every key.
view_spec all_groups_view() {
  auto v = spec("g", "");
  v.group_by = {group_key::connection, group_key::vm, group_key::cpu, group_key::event,
                group_key::process, group_key::vcpu};
  return v;
}

TEST(Engine, GroupByExact) {
  engine e;
  ASSERT_TRUE(e.add_view(all_groups_view()).ok());
  e.feed(sock_rec({.ts = 100, .type = MAGNET_EV_NET_SOCK_SEND, .vm = 1, .cpu = 0, .tgid = 10, .tid = 11, .id = 0xa, .size = 100}));
  e.feed(sock_rec({.ts = 300, .type = MAGNET_EV_NET_SOCK_SEND, .vm = 1, .cpu = 1, .tgid = 10, .tid = 12, .id = 0xa, .size = 300}));
  e.feed(sock_rec({.ts = 500, .type = MAGNET_EV_NET_SOCK_RECV, .vm = 2, .cpu = 1, .tgid = 20, .tid = 21, .id = 0xb, .size = -104}));
  e.feed(kvm_exit_rec({.ts = 600, .type = MAGNET_EV_KVM_EXIT, .vm = 2, .cpu = 0, .tgid = 20, .tid = 22}, 3));
  e.feed(kvm_exit_rec({.ts = 700, .type = MAGNET_EV_KVM_EXIT, .vm = 2, .cpu = 0, .tgid = 20, .tid = 22}, 3));
  auto s = snap(e, "g");
  ASSERT_EQ(s.groups.size(), 6u);
  auto& conn = s.groups[0];
  ASSERT_EQ(conn.rows.size(), 3u);  // 0xa, 0xb, 0 (kvm records)
  EXPECT_EQ(conn.rows[0].key, 0xau);
  EXPECT_EQ(conn.rows[0].events, 2u);
  EXPECT_EQ(conn.rows[0].bytes, 400u);
  EXPECT_DOUBLE_EQ(conn.rows[0].bandwidth_bps, 300 * 1e9 / 200);  // bytes after the first
  // A connection is labelled by its ends, from its first record.
  EXPECT_EQ(conn.rows[0].label, "10.0.0.1:5000 > 10.0.0.2:6000 udp");
  auto row = [](const group_table& t, uint64_t k, uint64_t k2 = 0) -> const group_row* {
    for (const auto& r : t.rows)
      if (r.key == k && r.key2 == k2) return &r;
    return nullptr;
  };
  ASSERT_TRUE(row(conn, 0xb));
  EXPECT_EQ(row(conn, 0xb)->errors, 1u);
  EXPECT_EQ(row(conn, 0xb)->bytes, 0u);
  auto& vm = s.groups[1];
  ASSERT_EQ(vm.rows.size(), 2u);
  EXPECT_EQ(row(vm, 1)->events, 2u);
  EXPECT_EQ(row(vm, 2)->events, 3u);
  EXPECT_EQ(row(vm, 2)->label, "vm 2");
  auto& cpu = s.groups[2];
  EXPECT_EQ(row(cpu, 0)->events, 3u);
  EXPECT_EQ(row(cpu, 1)->events, 2u);
  auto& ev = s.groups[3];
  EXPECT_EQ(row(ev, MAGNET_EV_KVM_EXIT)->events, 2u);
  EXPECT_EQ(row(ev, MAGNET_EV_NET_SOCK_SEND)->label, "net.sock.send");
  auto& proc = s.groups[4];
  EXPECT_EQ(row(proc, 10)->events, 2u);
  EXPECT_EQ(row(proc, 20)->events, 3u);
  auto& vcpu = s.groups[5];
  ASSERT_EQ(vcpu.rows.size(), 4u);  // tid 10/11, 10/12, 20/21, kvm vm2 vcpu3
  EXPECT_EQ(row(vcpu, 2, 3)->events, 2u);
  EXPECT_EQ(row(vcpu, 2, 3)->label, "vm 2 vcpu 3");
  EXPECT_EQ(row(vcpu, 10, 12)->label, "tid 10/12");
}

TEST(Engine, ConnectionLabelsNameBothEnds) {
  engine e;
  auto v = spec("g", "");
  v.group_by = {group_key::connection};
  ASSERT_TRUE(e.add_view(v).ok());
  e.feed(sock_rec({.ts = 1, .id = 1, .size = 10}, "192.168.7.1", 40000, "10.77.0.1", 5201, IPPROTO_TCP));
  e.feed(pkt_rec({.ts = 2, .type = MAGNET_EV_NET_DEV_RECV, .id = 2, .size = 20}, 3, 0, 0, IPPROTO_UDP,
                 53, 33000, "fd00::1", "fd00::2"));
  e.feed(pkt_rec({.ts = 3, .type = MAGNET_EV_NET_DEV_RECV, .id = 3, .size = 30}, 3, 0, 0, 47, 0, 0,
                 "10.0.0.1", "10.0.0.2"));
  e.feed(kvm_exit_rec({.ts = 4, .type = MAGNET_EV_KVM_EXIT, .id = 4, .size = 40}, 1));
  auto t = snap(e, "g").groups[0];
  std::map<uint64_t, std::string> label;
  for (const auto& r : t.rows) label[r.key] = r.label;
  EXPECT_EQ(label[1], "192.168.7.1:40000 > 10.77.0.1:5201 tcp");
  EXPECT_EQ(label[2], "[fd00::1]:53 > [fd00::2]:33000 udp");
  EXPECT_EQ(label[3], "10.0.0.1:0 > 10.0.0.2:0 proto 47");
  EXPECT_EQ(label[4], "0x0000000000000004") << "no addresses: the id";
}

TEST(Engine, GroupOverflowGoesToOther) {
  engine e;
  auto v = spec("g", "");
  v.group_by = {group_key::connection};
  v.max_groups = 3;
  ASSERT_TRUE(e.add_view(v).ok());
  for (uint64_t id = 1; id <= 5; ++id)
    e.feed(sock_rec({.ts = id, .id = id, .size = int32_t(id * 10)}));
  auto t = snap(e, "g").groups[0];
  EXPECT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.other_events, 2u);
  EXPECT_EQ(t.other_bytes, 90u);
  EXPECT_EQ(t.rows[0].key, 3u);  // sorted by bytes
}

TEST(Engine, GroupLabelsAndOrder) {
  engine e;
  ASSERT_TRUE(e.add_view(all_groups_view()).ok());
  std::mt19937_64 rng(9);
  const uint32_t big = 0xffffffffu;
  std::vector<std::vector<uint8_t>> rs;
  for (int i = 0; i < 3000; ++i) {
    // Sizes from a small set: many rows tie on bytes and events.
    hdr_args a{.ts = uint64_t(i), .vm = i % 7 ? uint32_t(rng() % 5) : big, .cpu = uint16_t(i % 9 ? rng() % 3 : 65535),
               .tgid = i % 5 ? uint32_t(rng() % 6) : big, .tid = i % 3 ? uint32_t(rng() % 4) : big,
               .id = i % 11 ? rng() % 40 : 0xfedcba9876543210ull, .size = int32_t(rng() % 3) * 100};
    if (i % 13 == 0) {
      a.type = MAGNET_EV_KVM_EXIT;
      rs.push_back(kvm_exit_rec(a, i % 2 ? big : uint32_t(rng() % 3)));
    } else {
      a.type = i % 17 ? uint16_t(MAGNET_EV_NET_SOCK_SEND) : uint16_t(0x7ff0);  // an unknown event id too
      rs.push_back(sock_rec(a));
    }
  }
  e.feed(cat(rs));
  auto s = snap(e, "g");
  ASSERT_EQ(s.groups.size(), 6u);
  auto kvm_rows = 0;
  for (const auto& t : s.groups) {
    ASSERT_FALSE(t.rows.empty());
    for (size_t i = 0; i < t.rows.size(); ++i) {
      const auto& r = t.rows[i];
      std::string want;
      char b[32];
      switch (t.by) {
        case group_key::connection:
          // by its ends when its first record had them (sock records here),
          // else by the id (kvm records, the unknown event)
          std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(r.key));
          want = r.label == "10.0.0.1:5000 > 10.0.0.2:6000 udp" ? r.label : b;
          break;
        case group_key::vm: want = "vm " + std::to_string(r.key); break;
        case group_key::cpu: want = "cpu " + std::to_string(r.key); break;
        case group_key::event: want = event_name(static_cast<uint16_t>(r.key)); break;
        case group_key::process: want = "tgid " + std::to_string(r.key); break;
        case group_key::vcpu:
          // kvm rows: (vm, vcpu); the others (tgid, tid).  The label tells.
          if (r.label.rfind("vm ", 0) == 0) {
            want = "vm " + std::to_string(r.key) + " vcpu " + std::to_string(r.key2);
            ++kvm_rows;
          } else {
            want = "tid " + std::to_string(r.key) + "/" + std::to_string(r.key2);
          }
          break;
      }
      EXPECT_EQ(r.label, want) << name_of(t.by);
      if (i == 0) continue;
      const auto& p = t.rows[i - 1];  // bytes, then events, descending; then key, key2
      EXPECT_TRUE(p.bytes > r.bytes || (p.bytes == r.bytes && p.events > r.events) ||
                  (p.bytes == r.bytes && p.events == r.events && std::tie(p.key, p.key2) <= std::tie(r.key, r.key2)))
          << name_of(t.by) << " row " << i;
    }
  }
  EXPECT_GT(kvm_rows, 0);
  auto has = [&](size_t g, const std::string& label) {
    for (const auto& r : s.groups[g].rows)
      if (r.label == label) return true;
    return false;
  };
  EXPECT_TRUE(std::any_of(s.groups[0].rows.begin(), s.groups[0].rows.end(),
                          [](const group_row& r) { return r.key == 0xfedcba9876543210ull; }));
  EXPECT_TRUE(has(1, "vm 4294967295"));
  EXPECT_TRUE(has(2, "cpu 65535"));
  EXPECT_TRUE(has(3, "0x7ff0"));
  EXPECT_TRUE(has(4, "tgid 4294967295"));
  EXPECT_TRUE(has(5, "tid 4294967295/4294967295"));
  EXPECT_TRUE(has(5, "vm 4294967295 vcpu 4294967295"));
}

TEST(Engine, SnapshotIntoReusedBufferEqualsFresh) {
  engine e;
  auto a = spec("a", "event == net");
  a.per_vm = true;
  a.windows = {count_w(4), time_w(1000)};
  a.group_by = {group_key::connection, group_key::vcpu};
  a.correlate = {{"c", "event == net.sock.send", "event == net.sock.recv", corr_key::abstract_id, 1000, 8}};
  auto b = spec("b", "event == net.sock.recv");
  b.per_vm = true;
  a.vms = {1, 2};
  b.vms = {2, 3};  // VM 3 has only b: its view lands where VM 1's a was
  b.value = value_kind::none;
  b.group_by = {group_key::event};
  ASSERT_TRUE(e.add_view(a).ok());
  ASSERT_TRUE(e.add_view(b).ok());
  std::vector<std::vector<uint8_t>> rs;
  // VM 1: many connections, rising bandwidth; VM 2: one event per connection
  // (bandwidth 0, a single timestamp), fewer rows, and view b too; VM 3: b.
  for (uint64_t i = 0; i < 30; ++i)
    rs.push_back(sock_rec({.ts = 10 + i, .type = i % 2 ? MAGNET_EV_NET_SOCK_RECV : MAGNET_EV_NET_SOCK_SEND,
                           .vm = 1, .tgid = 5, .tid = 6, .id = i % 7, .size = int32_t(100 * i)}));
  for (uint64_t i = 0; i < 3; ++i)
    rs.push_back(sock_rec({.ts = 50 + i, .type = MAGNET_EV_NET_SOCK_RECV, .vm = 2, .tgid = 5, .tid = 6,
                           .id = 100 + i, .size = 10}));
  rs.push_back(sock_rec({.ts = 60, .type = MAGNET_EV_NET_SOCK_RECV, .vm = 3, .id = 1, .size = 10}));
  e.feed(cat(rs));
  std::vector<view_snapshot> out;
  for (uint32_t vm : {1u, 2u, 1u, 3u, 4u, 0u, 2u, 2u, 1u, 3u}) {
    e.snapshot_vm(vm, out);
    auto fresh = e.snapshot_vm(vm);
    ASSERT_EQ(out.size(), fresh.size()) << vm;
    EXPECT_EQ(to_json(out), to_json(fresh)) << vm;
    for (size_t i = 0; i < out.size(); ++i) {  // what JSON leaves out for value: none
      EXPECT_EQ(out[i].value_of, fresh[i].value_of);
      EXPECT_EQ(out[i].value.count, fresh[i].value.count) << out[i].view;
      EXPECT_EQ(out[i].value.max, fresh[i].value.max) << out[i].view;
    }
  }
  e.snapshot_vm(1, out, 12345);
  EXPECT_EQ(to_json(out), to_json(e.snapshot_vm(1, 12345)));
  EXPECT_EQ(out[0].ts_ns, 12345u);
}

// ----------------------------------------------------------- sampling ---

TEST(Engine, SamplingAndKernelPushdownOfRates) {
  engine e;
  auto a = spec("a", "event == net.sock");
  a.sample_every = 4;
  auto b = spec("b", "event == net.sock.recv");
  b.sample_every = 6;
  ASSERT_TRUE(e.add_view(a).ok());
  ASSERT_TRUE(e.add_view(b).ok());
  auto k = e.pushdown();
  EXPECT_EQ(k.sample_every.at(MAGNET_EV_NET_SOCK_RECV), 2u);  // gcd(4, 6)
  EXPECT_EQ(k.sample_every.at(MAGNET_EV_NET_SOCK_SEND), 4u);
  EXPECT_FALSE(k.sample_every.count(MAGNET_EV_SCHED_SWITCH));  // no view wants it
  for (int i = 0; i < 24; ++i) e.feed(sock_rec({.ts = uint64_t(i), .type = MAGNET_EV_NET_SOCK_RECV}));
  EXPECT_EQ(snap(e, "a").sampled, 6u);
  EXPECT_EQ(snap(e, "b").sampled, 4u);
  EXPECT_EQ(snap(e, "b").matched, 24u);
  // The host installs the kernel rates; the engine samples the remainder.
  engine f;
  ASSERT_TRUE(f.add_view(a).ok());
  ASSERT_TRUE(f.add_view(b).ok());
  f.set_kernel_sampling(f.pushdown().sample_every);
  // 24 original records -> kernel keeps 12 (1 in 2)
  for (int i = 0; i < 12; ++i) f.feed(sock_rec({.ts = uint64_t(i), .type = MAGNET_EV_NET_SOCK_RECV}));
  EXPECT_EQ(snap(f, "a").sampled, 6u);  // 1 in 2 of 12
  EXPECT_EQ(snap(f, "b").sampled, 4u);  // 1 in 3 of 12
  // A view without sampling disables kernel sampling for its events.
  ASSERT_TRUE(f.add_view(spec("all", "")).ok());
  EXPECT_TRUE(f.pushdown().sample_every.empty());
}

// The host samples in the kernel whatever the views ask (magnet host
// --sample): a view says the rate it sees, and samples the types the kernel
// did not (or sampled less) down to it, so that every record it keeps stands
// for as many events and its counts scale back by sample_every.
TEST(Engine, KernelSamplingTheViewsDidNotAskForIsTheirsToSay) {
  engine e;
  e.set_kernel_sampling({{MAGNET_EV_NET_SOCK_SEND, 8}, {MAGNET_EV_NET_SOCK_RECV, 2}});
  auto both = spec("both", "event == net.sock");
  auto recv = spec("recv", "event == net.sock.recv");
  recv.sample_every = 4;
  auto odd = spec("odd", "event == net.sock.send");
  odd.sample_every = 12;  // not a multiple of the kernel's 8: the least common one, 24
  auto other = spec("other", "event == sched.switch");
  for (const auto& v : {both, recv, odd, other}) ASSERT_TRUE(e.add_view(v).ok());
  // What the kernel let through of 80 sends and 80 receives, alternating
  // (the worst order for a counter shared by both types).
  for (int i = 0; i < 50; ++i) {
    if (i < 10) e.feed(sock_rec({.ts = uint64_t(2 * i), .type = MAGNET_EV_NET_SOCK_SEND}));
    if (i < 40) e.feed(sock_rec({.ts = uint64_t(2 * i + 1), .type = MAGNET_EV_NET_SOCK_RECV}));
  }
  auto b = snap(e, "both");
  EXPECT_EQ(b.sample_every, 8u);
  EXPECT_EQ(b.matched, 50u);
  EXPECT_EQ(b.sampled, 20u) << "all 10 sends, 1 in 4 of the 40 receives: 1 in 8 of each";
  auto r = snap(e, "recv");
  EXPECT_EQ(r.sample_every, 4u);
  EXPECT_EQ(r.sampled, 20u) << "1 in 2 of what the kernel kept";
  auto o = snap(e, "odd");
  EXPECT_EQ(o.sample_every, 24u);
  EXPECT_EQ(o.sampled, 3u);
  EXPECT_EQ(snap(e, "other").sample_every, 1u) << "no type of it is sampled";
  // Told again (none now): every view back to its own rate.
  e.set_kernel_sampling({});
  EXPECT_EQ(snap(e, "both").sample_every, 1u);
  EXPECT_EQ(snap(e, "odd").sample_every, 12u);
}

// ----------------------------------------------------------- pushdown ---

TEST(Engine, PushdownIsTheUnionOfViews) {
  engine e;
  EXPECT_TRUE(e.pushdown().filter.empty());
  ASSERT_TRUE(e.add_view(spec("a", "vm == 1 and event == net.sock and cpu == 0")).ok());
  ASSERT_TRUE(e.add_view(spec("b", "vm in {2, 3} and event == sched.switch")).ok());
  auto k = e.pushdown();
  EXPECT_EQ(k.filter.vm, (std::set<uint32_t>{1, 2, 3}));
  EXPECT_EQ(k.filter.events, (std::set<uint16_t>{MAGNET_EV_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_RECV,
                                                 MAGNET_EV_SCHED_SWITCH}));
  EXPECT_FALSE(k.filter.cpu);  // b has no cpu constraint
  auto pv = spec("pv", "event == net.sock");
  pv.per_vm = true;
  pv.vms = {7, 8};
  ASSERT_TRUE(e.add_view(pv).ok());
  EXPECT_EQ(e.pushdown().filter.vm, (std::set<uint32_t>{1, 2, 3, 7, 8}));
  ASSERT_TRUE(e.add_view(spec("c", "tgid == 5 or cpu == 1")).ok());
  EXPECT_TRUE(e.pushdown().filter.empty());
  ASSERT_TRUE(e.remove_view("c").ok());
  EXPECT_EQ(e.pushdown().filter.vm, (std::set<uint32_t>{1, 2, 3, 7, 8}));
}

// -------------------------------------------------------- correlation ---

TEST(Engine, CrossLayerLatency) {
  engine e;
  auto v = spec("lat", "event in {net.ip.send, net.dev.xmit}");
  v.correlate = {{"ip-to-dev", "event == net.ip.send", "event == net.dev.xmit", corr_key::automatic, 1000, 16}};
  ASSERT_TRUE(e.add_view(v).ok());
  std::vector<std::vector<uint8_t>> rs;
  // UDP packets keyed by (flow, ip_id); latencies 10, 20, 30
  for (int i = 0; i < 3; ++i)
    rs.push_back(pkt_rec({.ts = uint64_t(100 * i), .type = MAGNET_EV_NET_IP_SEND, .id = 0xf}, 3, uint16_t(i)));
  for (int i = 2; i >= 0; --i)  // out of order at the lower layer
    rs.push_back(pkt_rec({.ts = uint64_t(100 * i + 10 * (i + 1) + 1000 * 0), .type = MAGNET_EV_NET_DEV_XMIT, .id = 0xf}, 3, uint16_t(i)));
  // TCP: keyed by tcp_seq, not ip_id
  rs.push_back(pkt_rec({.ts = 500, .type = MAGNET_EV_NET_IP_SEND, .id = 0xe}, 3, 1, 777, IPPROTO_TCP));
  rs.push_back(pkt_rec({.ts = 540, .type = MAGNET_EV_NET_DEV_XMIT, .id = 0xe}, 3, 2, 777, IPPROTO_TCP));
  // unmatched: other flow
  rs.push_back(pkt_rec({.ts = 600, .type = MAGNET_EV_NET_DEV_XMIT, .id = 0xd}, 3, 0));
  e.feed(cat(rs));
  auto c = snap(e, "lat").correlations.at(0);
  EXPECT_EQ(c.name, "ip-to-dev");
  EXPECT_EQ(c.matched, 4u);
  EXPECT_EQ(c.unmatched, 1u);
  EXPECT_EQ(c.pending, 0u);
  EXPECT_EQ(c.latency_ns.min, 10);
  EXPECT_EQ(c.latency_ns.max, 40);
  EXPECT_EQ(c.latency_ns.sum, 10 + 20 + 30 + 40);
}

TEST(Engine, CorrelationTimeoutEvictionReorder) {
  engine e;
  auto v = spec("c", "");
  v.correlate = {{"x", "event == net.ip.send", "event == net.dev.xmit", corr_key::ip_id, 100, 4}};
  ASSERT_TRUE(e.add_view(v).ok());
  auto from = [](uint64_t ts, uint16_t id) { return pkt_rec({.ts = ts, .type = MAGNET_EV_NET_IP_SEND, .id = 1}, 3, id); };
  auto to = [](uint64_t ts, uint16_t id) { return pkt_rec({.ts = ts, .type = MAGNET_EV_NET_DEV_XMIT, .id = 1}, 3, id); };
  e.feed(from(0, 1));
  e.feed(to(150, 1));  // the pending entry expired at 100 < 150
  auto c = snap(e, "c").correlations[0];
  EXPECT_EQ(c.expired, 1u);
  EXPECT_EQ(c.unmatched, 1u);
  EXPECT_EQ(c.matched, 0u);
  for (uint16_t i = 0; i < 6; ++i) e.feed(from(200 + i, 10 + i));  // 6 into a table of 4
  c = snap(e, "c").correlations[0];
  EXPECT_EQ(c.evicted, 2u);
  EXPECT_EQ(c.pending, 4u);
  e.feed(to(210, 10));  // evicted: unmatched
  e.feed(to(210, 15));  // still pending: 5 ns
  e.feed(from(300, 20));
  e.feed(to(299, 20));  // earlier than its from
  c = snap(e, "c").correlations[0];
  EXPECT_EQ(c.unmatched, 2u);
  EXPECT_EQ(c.matched, 1u);
  EXPECT_EQ(c.latency_ns.max, 5);
  EXPECT_EQ(c.reordered, 1u);
}

// ------------------------------------------------ per-VM split: security ---

view_spec per_vm_view() {
  auto v = spec("vmnet", "event == net.sock.recv and sport == 5000");
  v.per_vm = true;
  v.windows = {count_w(100), time_w(1'000'000)};
  v.group_by = {group_key::connection, group_key::vm, group_key::vcpu};
  v.correlate = {{"sock-dev", "event == net.sock.recv", "event == net.sock.recv", corr_key::abstract_id, 1'000'000, 64}};
  return v;
}

TEST(Isolation, ViewsOfVmKSeeOnlyVmK) {
  engine e;
  ASSERT_TRUE(e.add_view(per_vm_view()).ok());
  ASSERT_TRUE(e.add_view(spec("host-global", "")).ok());
  std::vector<std::vector<uint8_t>> rs;
  // Identical records except vm_id: 1, 2 and host (0).
  for (int i = 0; i < 10; ++i)
    for (uint32_t vm : {1u, 2u, 0u})
      rs.push_back(sock_rec({.ts = uint64_t(1000 + i), .type = MAGNET_EV_NET_SOCK_RECV, .vm = vm,
                             .tgid = 7, .tid = 7, .id = 0x100 + vm, .size = int32_t(vm * 1000 + 1)}));
  e.feed(cat(rs));
  auto v1 = e.snapshot_vm(1);
  ASSERT_EQ(v1.size(), 1u);  // the global view is never delivered to a VM
  EXPECT_EQ(v1[0].view, "vmnet");
  EXPECT_EQ(v1[0].vm, 1u);
  EXPECT_EQ(v1[0].matched, 10u);
  EXPECT_EQ(v1[0].windows[0].bytes, 10u * 1001);
  EXPECT_EQ(v1[0].value.max, 1001);
  ASSERT_EQ(v1[0].groups[0].rows.size(), 1u);
  EXPECT_EQ(v1[0].groups[0].rows[0].key, 0x101u);
  ASSERT_EQ(v1[0].groups[1].rows.size(), 1u);
  EXPECT_EQ(v1[0].groups[1].rows[0].key, 1u);
  auto v2 = e.snapshot_vm(2);
  ASSERT_EQ(v2.size(), 1u);
  EXPECT_EQ(v2[0].windows[0].bytes, 10u * 2001);
  EXPECT_TRUE(e.snapshot_vm(0).empty());  // host records reach no per-VM view
  EXPECT_TRUE(e.snapshot_vm(3).empty());
  EXPECT_FALSE(e.snapshot("vmnet", 0).ok());
  EXPECT_EQ(e.isolation_violations(), 0u);
  // The serialized view of VM 1 mentions nothing of VM 2 or the host.
  auto j = to_json(v1);
  EXPECT_EQ(j.find("0x0000000000000102"), std::string::npos);
  EXPECT_EQ(j.find("0x0000000000000100"), std::string::npos);
  EXPECT_EQ(j.find("2001"), std::string::npos);
}

TEST(Isolation, TemplatesCannotWidenTheirScope) {
  engine e;
  for (auto f : {"vm == 2", "vm != 0", "not vm == 1", "cpu == 1 or vm in {1, 2}", "vm > 0"}) {
    auto v = per_vm_view();
    v.filter = f;
    auto st = e.add_view(v);
    ASSERT_FALSE(st.ok()) << f;
    EXPECT_NE(st.err().message.find("must not filter on 'vm'"), std::string::npos) << st.err().message;
  }
  auto v = per_vm_view();
  v.correlate[0].to = "vm == 3";
  EXPECT_FALSE(e.add_view(v).ok());
  // vms: [...] narrows, never widens: VM 0 in the list is ignored.
  auto w = per_vm_view();
  w.vms = {0, 2};
  ASSERT_TRUE(e.add_view(w).ok());
  e.feed(sock_rec({.ts = 1, .type = MAGNET_EV_NET_SOCK_RECV, .vm = 0, .size = 1}));
  e.feed(sock_rec({.ts = 2, .type = MAGNET_EV_NET_SOCK_RECV, .vm = 1, .size = 1}));
  e.feed(sock_rec({.ts = 3, .type = MAGNET_EV_NET_SOCK_RECV, .vm = 2, .size = 1}));
  EXPECT_TRUE(e.snapshot_vm(1).empty());
  ASSERT_EQ(e.snapshot_vm(2).size(), 1u);
  EXPECT_EQ(e.snapshot_vm(2)[0].matched, 1u);
  EXPECT_FALSE(e.snapshot("vmnet", 0).ok());
}

TEST(Isolation, CorrelationNeverPairsAcrossVms) {
  engine e;
  auto v = spec("lat", "");
  v.per_vm = true;
  v.correlate = {{"x", "event == net.ip.send", "event == net.dev.xmit", corr_key::ip_id, 1'000'000, 64}};
  ASSERT_TRUE(e.add_view(v).ok());
  // Same flow id and ip_id: the from is in VM 1, the to in VM 2.
  e.feed(pkt_rec({.ts = 10, .type = MAGNET_EV_NET_IP_SEND, .vm = 1, .id = 5}, 3, 42));
  e.feed(pkt_rec({.ts = 20, .type = MAGNET_EV_NET_DEV_XMIT, .vm = 2, .id = 5}, 3, 42));
  auto c1 = snap(e, "lat", 1).correlations[0];
  auto c2 = snap(e, "lat", 2).correlations[0];
  EXPECT_EQ(c1.matched + c2.matched, 0u);
  EXPECT_EQ(c1.pending, 1u);
  EXPECT_EQ(c2.unmatched, 1u);
}

TEST(Isolation, RandomStreamsPropertyTest) {
  for (uint64_t seed : {1, 2, 3}) {
    std::mt19937_64 rng(seed);
    engine e;
    auto v = spec("all", "");
    v.per_vm = true;
    v.windows = {count_w(1000)};
    v.group_by = {group_key::connection, group_key::vm, group_key::process};
    ASSERT_TRUE(e.add_view(v).ok());
    std::map<uint32_t, uint64_t> count, bytes;
    std::vector<uint8_t> buf;
    for (int i = 0; i < 5000; ++i) {
      uint32_t vm = rng() % 6;  // 0 = host
      // ids and tgids encode the VM, so a foreign row would be visible
      int32_t size = int32_t(rng() % 1000);
      auto r = sock_rec({.ts = uint64_t(i), .type = MAGNET_EV_NET_SOCK_RECV, .vm = vm,
                         .tgid = vm * 1000 + uint32_t(rng() % 3), .id = (uint64_t(vm) << 32) | (rng() % 5), .size = size});
      buf.insert(buf.end(), r.begin(), r.end());
      if (vm) {
        ++count[vm];
        bytes[vm] += size;
      }
    }
    e.feed(buf);
    EXPECT_EQ(e.stats().records, 5000u);
    for (uint32_t vm = 1; vm <= 5; ++vm) {
      auto s = e.snapshot_vm(vm);
      ASSERT_EQ(s.size(), 1u);
      EXPECT_EQ(s[0].matched, count[vm]);
      EXPECT_EQ(s[0].windows[0].bytes, bytes[vm]);
      for (const auto& r : s[0].groups[0].rows) EXPECT_EQ(r.key >> 32, vm);
      ASSERT_EQ(s[0].groups[1].rows.size(), 1u);
      EXPECT_EQ(s[0].groups[1].rows[0].key, vm);
      for (const auto& r : s[0].groups[2].rows) EXPECT_EQ(r.key / 1000, vm);
    }
    EXPECT_EQ(e.isolation_violations(), 0u);
  }
}

// ----------------------------------------------------- engine surface ---

TEST(Engine, AddRemoveAndValidation) {
  engine e;
  ASSERT_TRUE(e.add_view(spec("a", "cpu == 1")).ok());
  auto dup = e.add_view(spec("a", ""));
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.err().message, "view 'a': a view with this name already exists");
  auto bad = e.add_view(spec("b", "cpu = 1"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().message, "view 'b': filter: '=' is not an operator at column 5; use '=='");
  auto big = spec("big", "");
  big.windows = {count_w(1 << 20)};
  auto st = e.add_view(big);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("exceeds the 1048576-byte budget"), std::string::npos);
  auto s0 = spec("s0", "");
  s0.sample_every = 0;
  EXPECT_FALSE(e.add_view(s0).ok());
  EXPECT_EQ(e.view_names(), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(e.remove_view("a").ok());
  EXPECT_FALSE(e.remove_view("a").ok());
  EXPECT_TRUE(e.view_names().empty());
}

TEST(Engine, MalformedBatchesStop) {
  engine e;
  ASSERT_TRUE(e.add_view(spec("a", "")).ok());
  auto good = sock_rec({.ts = 1});
  auto buf = cat({good, good});
  buf[good.size() + offsetof(magnet_hdr, len)] = 41;  // not a multiple of 8
  e.feed(buf);
  EXPECT_EQ(e.stats().records, 1u);
  EXPECT_EQ(e.stats().malformed, 1u);
  e.feed(std::span<const uint8_t>(good.data(), good.size() - 8));  // truncated
  EXPECT_EQ(e.stats().malformed, 2u);
}

TEST(Engine, SourcesAndRun) {
  std::vector<std::vector<uint8_t>> rs;
  for (int i = 0; i < 3000; ++i) rs.push_back(sock_rec({.ts = uint64_t(i), .vm = uint32_t(i % 3), .size = 10}));
  engine e;
  auto v = spec("pv", "");
  v.per_vm = true;
  ASSERT_TRUE(e.add_view(v).ok());
  auto src = memory_source(cat(rs), 4096);
  auto n = e.run(src);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3000u);
  EXPECT_EQ(snap(e, "pv", 1).matched, 1000u);

  // trace file round trip
  char path[] = "/tmp/magnet-engine-test-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    auto w = trace_writer::create(path, local_sysinfo(), {MAGNET_EV_NET_SOCK_RECV});
    ASSERT_TRUE(w.ok()) << w.err().message;
    for (const auto& r : rs) ASSERT_TRUE(w->append(r).ok());
    ASSERT_TRUE(w->close().ok());
  }
  auto ts = trace_source::open(path);
  ASSERT_TRUE(ts.ok()) << ts.err().message;
  engine f;
  ASSERT_TRUE(f.add_view(spec("recv", "event == net.sock.recv")).ok());
  auto m = f.run(**ts);
  ASSERT_TRUE(m.ok());
  EXPECT_GE(*m, 3000u);  // plus the stream records (sysinfo, descriptors)
  EXPECT_EQ(snap(f, "recv").matched, 3000u);
  unlink(path);
  EXPECT_FALSE(trace_source::open("/nonexistent/trace").ok());
}

TEST(Engine, SnapshotJson) {
  engine e;
  auto v = spec("j", "");
  v.windows = {count_w(10), time_w(1000)};
  v.group_by = {group_key::vm};
  v.correlate = {{"c", "event == net.ip.send", "event == net.dev.xmit"}};
  ASSERT_TRUE(e.add_view(v).ok());
  e.feed(sock_rec({.ts = 5, .vm = 3, .size = 7}));
  auto j = nlohmann::json::parse(to_json(snap(e, "j")));
  EXPECT_EQ(j["view"], "j");
  EXPECT_EQ(j["windows"][0]["kind"], "count");
  EXPECT_EQ(j["windows"][0]["length_events"], 10);
  EXPECT_EQ(j["windows"][1]["length_ns"], 1000);
  EXPECT_EQ(j["windows"][1]["bytes"], 7);
  EXPECT_EQ(j["value"]["of"], "size");
  EXPECT_EQ(j["value"]["p50"], 7.0);
  EXPECT_EQ(j["groups"][0]["by"], "vm");
  EXPECT_EQ(j["groups"][0]["rows"][0]["label"], "vm 3");
  EXPECT_EQ(j["correlations"][0]["name"], "c");
  EXPECT_TRUE(j["memory_bytes"].get<size_t>() > 0);
}

TEST(Engine, PerVmMemoryWithinBudget) {
  // The heaviest accepted view, driven to its worst case.
  auto v = spec("heavy", "");
  v.per_vm = true;
  v.windows = {count_w(8192), time_w(1'000'000'000)};
  v.windows[1].max_events = 8192;
  v.group_by = {group_key::connection, group_key::vcpu};
  v.max_groups = 1024;
  v.correlate = {{"c", "event == net.ip.send", "event == net.dev.xmit", corr_key::ip_id, 1'000'000'000, 1024}};
  size_t bound = max_memory_bytes(v);
  engine e;
  ASSERT_TRUE(e.add_view(v).ok()) << bound;
  std::vector<uint8_t> buf;
  for (uint32_t i = 0; i < 40000; ++i) {
    auto r = pkt_rec({.ts = i, .type = i % 2 ? MAGNET_EV_NET_IP_SEND : MAGNET_EV_NET_DEV_XMIT, .vm = 1,
                      .tgid = i, .tid = i, .id = i, .size = int32_t(i)}, 3, uint16_t(i));
    buf.insert(buf.end(), r.begin(), r.end());
  }
  e.feed(buf);
  auto s = snap(e, "heavy", 1);
  EXPECT_LE(s.memory_bytes, bound);
  EXPECT_LE(s.memory_bytes, kViewMemoryBudget);
  RecordProperty("per_vm_view_bytes", std::to_string(s.memory_bytes));
  std::printf("heavy per-VM view: %zu bytes (bound %zu)\n", s.memory_bytes, bound);
}

// ------------------------------------------------------------- config ---

TEST(Config, ParsesViews) {
  auto r = parse_views(R"(
views:
  - name: sock-recv-bw
    filter: "event == net.sock.recv"
    per_vm: true
    windows:
      - events: 1000
      - ms: 100
        max_events: 4096
    group_by: [connection, vcpu]
  - name: tap-to-wire
    filter: event in {net.ip.send, net.dev.xmit}
    sample_every: 2
    value: none
    accuracy: 0.02
    max_groups: 64
    group_by: vm
    correlate:
      - name: ip-dev
        from: event == net.ip.send
        to: event == net.dev.xmit
        key: ip_id
        timeout_ms: 50
        max_pending: 512
)");
  ASSERT_TRUE(r.ok()) << r.err().message;
  auto& vs = *r;
  ASSERT_EQ(vs.size(), 2u);
  EXPECT_EQ(vs[0].name, "sock-recv-bw");
  EXPECT_TRUE(vs[0].per_vm);
  ASSERT_EQ(vs[0].windows.size(), 2u);
  EXPECT_EQ(vs[0].windows[0].events, 1000u);
  EXPECT_EQ(vs[0].windows[1].k, window_stats::kind::time);
  EXPECT_EQ(vs[0].windows[1].ns, 100'000'000u);
  EXPECT_EQ(vs[0].windows[1].max_events, 4096u);
  EXPECT_EQ(vs[0].group_by, (std::vector<group_key>{group_key::connection, group_key::vcpu}));
  EXPECT_EQ(vs[1].sample_every, 2u);
  EXPECT_EQ(vs[1].value, value_kind::none);
  EXPECT_EQ(vs[1].accuracy, 0.02);
  EXPECT_EQ(vs[1].group_by, (std::vector<group_key>{group_key::vm}));
  ASSERT_EQ(vs[1].correlate.size(), 1u);
  EXPECT_EQ(vs[1].correlate[0].key, corr_key::ip_id);
  EXPECT_EQ(vs[1].correlate[0].timeout_ns, 50'000'000u);
  EXPECT_EQ(vs[1].correlate[0].max_pending, 512u);
  engine e;
  ASSERT_TRUE(add_views(e, vs).ok());
  EXPECT_EQ(e.view_names().size(), 2u);
}

TEST(Config, Errors) {
  auto err = [](const char* y) {
    auto r = parse_views(y);
    EXPECT_FALSE(r.ok()) << y;
    return r.ok() ? std::string() : r.err().message;
  };
  EXPECT_EQ(err("views:\n  - name: a\n    filtr: cpu == 1\n"),
            "config: unknown key 'filtr' in view 'a' (known: name, filter, per_vm, vms, sample_every, "
            "windows, value, accuracy, group_by, max_groups, correlate) at line 3, column 5");
  EXPECT_NE(err("views:\n  - name: a\n    windows:\n      - events: 5\n        ms: 3\n").find("exactly one of"), std::string::npos);
  EXPECT_NE(err("views:\n  - name: a\n    group_by: [flow]\n").find("unknown group_by key 'flow'"), std::string::npos);
  EXPECT_NE(err("views:\n  - name: a\n  - name: a\n").find("duplicate view name 'a'"), std::string::npos);
  EXPECT_NE(err("views:\n  - name: a\n    sample_every: -1\n").find("non-negative"), std::string::npos);
  EXPECT_NE(err("nothing: 1\n").find("top-level 'views:'"), std::string::npos);
  EXPECT_NE(err("views: [").find("config: "), std::string::npos);
  EXPECT_NE(err("views:\n  - name: a\n    correlate:\n      - name: c\n        from: x\n").find("needs name, from and to"), std::string::npos);
  // add_views is all-or-nothing
  engine e;
  auto vs = parse_views("views:\n  - name: ok\n  - name: bad\n    filter: cpu ==\n");
  ASSERT_TRUE(vs.ok());
  auto st = add_views(e, *vs);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().message, "view 'bad': filter: expected a value after '==' at column 7");
  EXPECT_TRUE(e.view_names().empty());
  EXPECT_FALSE(load_views("/nonexistent.yaml").ok());
}

}  // namespace
}  // namespace magnet::filters
