// The event ABI: sizes, offsets, id ranges and the catalogue.
#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <iterator>
#include <string>
#include <string_view>

#include "magnet/control.h"
#include "magnet/events.h"
#include "magnet/flow.h"

namespace magnet {
namespace {

TEST(Abi, HeaderLayoutIsFixed) {
  EXPECT_EQ(sizeof(magnet_hdr), 40u);
  EXPECT_EQ(offsetof(magnet_hdr, ts_ns), 0u);
  EXPECT_EQ(offsetof(magnet_hdr, abstract_id), 8u);
  EXPECT_EQ(offsetof(magnet_hdr, tgid), 16u);
  EXPECT_EQ(offsetof(magnet_hdr, tid), 20u);
  EXPECT_EQ(offsetof(magnet_hdr, vm_id), 24u);
  EXPECT_EQ(offsetof(magnet_hdr, size), 28u);
  EXPECT_EQ(offsetof(magnet_hdr, type), 32u);
  EXPECT_EQ(offsetof(magnet_hdr, cpu), 34u);
  EXPECT_EQ(offsetof(magnet_hdr, len), 36u);
  EXPECT_EQ(offsetof(magnet_hdr, flags), 38u);
}

TEST(Abi, EveryPayloadIsAMultipleOfTheRecordAlignment) {
  for (uint16_t k = 1; k < MAGNET_PL_COUNT; ++k) {
    SCOPED_TRACE(std::string(payload_kind_name(k)));
    ASSERT_GT(payload_size(k), 0u);
    EXPECT_EQ(payload_size(k) % MAGNET_RECORD_ALIGN, 0u);
    EXPECT_LE(sizeof(magnet_hdr) + payload_size(k), size_t{MAGNET_MAX_RECORD});
  }
}

TEST(Abi, EventIdsAreUniqueAndInTheirReservedRanges) {
  std::set<uint16_t> ids;
  std::set<std::string_view> names;
  for (const auto& e : all_events()) {
    SCOPED_TRACE(std::string(e.name));
    EXPECT_TRUE(ids.insert(e.type).second) << "duplicate id";
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate name";
    EXPECT_NE(e.type, 0);
    auto n = e.name;
    if (n.starts_with("stream.")) EXPECT_LT(e.type, 0x0100);
    else if (n.starts_with("net.")) EXPECT_TRUE(e.type >= 0x0100 && e.type < 0x0200);
    else if (n.starts_with("sched.") || n.starts_with("proc.")) EXPECT_TRUE(e.type >= 0x0200 && e.type < 0x0300);
    else if (n.starts_with("blk.")) EXPECT_TRUE(e.type >= 0x0300 && e.type < 0x0400);
    else if (n.starts_with("kvm.")) EXPECT_TRUE(e.type >= 0x0400 && e.type < 0x0500);
    else if (n.starts_with("vmnet.")) EXPECT_TRUE(e.type >= 0x0500 && e.type < 0x0600);
    else if (n.starts_with("app.")) EXPECT_TRUE(e.type >= 0x0600 && e.type < 0x0700);
    else ADD_FAILURE() << "event outside any reserved range";
  }
}

TEST(Abi, StableIdsNeverChange) {
  // Changing any of these breaks every trace ever written.
  EXPECT_EQ(MAGNET_EV_SYSINFO, 0x0001);
  EXPECT_EQ(MAGNET_EV_LOST, 0x0002);
  EXPECT_EQ(MAGNET_EV_NET_SOCK_SEND, 0x0100);
  EXPECT_EQ(MAGNET_EV_NET_DEV_RECV, 0x0107);
  EXPECT_EQ(MAGNET_EV_NET_PKT_XMIT, 0x010a);
  EXPECT_EQ(MAGNET_EV_NET_PKT_RECV, 0x010b);
  EXPECT_EQ(MAGNET_EV_SCHED_SWITCH, 0x0200);
  EXPECT_EQ(MAGNET_EV_BLK_ISSUE, 0x0300);
  EXPECT_EQ(MAGNET_EV_KVM_EXIT, 0x0400);
  EXPECT_EQ(MAGNET_EV_APP_ADD, 0x0600);
}

TEST(Abi, AppAddLayoutIsFixed) {
  EXPECT_EQ(sizeof(magnet_app_add), 16u);
  EXPECT_EQ(offsetof(magnet_app_add, event_id), 0u);
  EXPECT_EQ(offsetof(magnet_app_add, abstract_id), 4u);
  EXPECT_EQ(offsetof(magnet_app_add, value), 8u);
  EXPECT_EQ(payload_size(MAGNET_PL_APP_ADD), 16u);
}

TEST(Abi, ProbeSlotsMapBothWays) {
  for (int s = 0; s < MAGNET_NPROBES; ++s) {
    uint16_t t = probe_type(s);
    ASSERT_NE(t, 0) << s;
    EXPECT_EQ(probe_slot(t), s);
    EXPECT_NE(find_event(t), nullptr);
  }
  EXPECT_EQ(probe_slot(MAGNET_EV_LOST), -1);
}

// Each slot is its own probe's: the slot MAGNET_P_X (the index the BPF
// programs use) holds the event MAGNET_EV_X of the proto catalogue, whose
// name is the one given here.  A bijection with two entries swapped passes
// the test above and fails this one.
TEST(Abi, EachProbeSlotHoldsTheEventOfItsOwnName) {
  struct slot {
    int slot;
    uint16_t type;
    std::string_view name;
  };
#define SLOT(sym, name) slot{MAGNET_P_##sym, MAGNET_EV_##sym, name}
  constexpr slot kSlots[] = {
      SLOT(NET_SOCK_SEND, "net.sock.send"),
      SLOT(NET_SOCK_RECV, "net.sock.recv"),
      SLOT(NET_L4_SEND, "net.l4.send"),
      SLOT(NET_L4_RECV, "net.l4.recv"),
      SLOT(NET_IP_SEND, "net.ip.send"),
      SLOT(NET_IP_RECV, "net.ip.recv"),
      SLOT(NET_DEV_XMIT, "net.dev.xmit"),
      SLOT(NET_DEV_RECV, "net.dev.recv"),
      SLOT(NET_TCP_STATE, "net.tcp.state"),
      SLOT(SCHED_SWITCH, "sched.switch"),
      SLOT(SCHED_WAKEUP, "sched.wakeup"),
      SLOT(PROC_FORK, "proc.fork"),
      SLOT(PROC_EXIT, "proc.exit"),
      SLOT(BLK_ISSUE, "blk.issue"),
      SLOT(BLK_COMPLETE, "blk.complete"),
      SLOT(KVM_EXIT, "kvm.exit"),
      SLOT(KVM_ENTRY, "kvm.entry"),
      SLOT(KVM_USERSPACE_EXIT, "kvm.userspace_exit"),
      SLOT(KVM_WAKEUP, "kvm.wakeup"),
      SLOT(KVM_HALT_POLL, "kvm.halt_poll"),
      SLOT(NET_DROP, "net.drop"),
      SLOT(VMNET_QUEUE_TX, "vmnet.queue.tx"),
      SLOT(VMNET_QUEUE_RX, "vmnet.queue.rx"),
      SLOT(VMNET_VHOST_TX, "vmnet.vhost.tx"),
      SLOT(VMNET_VHOST_RX, "vmnet.vhost.rx"),
      SLOT(NET_PKT_XMIT, "net.pkt.xmit"),
      SLOT(NET_PKT_RECV, "net.pkt.recv"),
  };
#undef SLOT
  static_assert(std::size(kSlots) == MAGNET_NPROBES, "a slot without a line here");
  std::set<int> seen;
  for (const auto& s : kSlots) {
    SCOPED_TRACE(std::string(s.name));
    EXPECT_TRUE(seen.insert(s.slot).second) << "slot " << s.slot << " listed twice";
    EXPECT_EQ(probe_type(s.slot), s.type) << "slot " << s.slot << " holds "
                                          << event_name(probe_type(s.slot));
    EXPECT_EQ(probe_slot(s.type), s.slot);
    EXPECT_EQ(event_name(probe_type(s.slot)), s.name);
    const auto* e = find_event(s.name);
    ASSERT_NE(e, nullptr) << "not in the catalogue";
    EXPECT_EQ(e->type, s.type);
  }
}

// A packet record: 40-byte header, 16 bytes of lengths, then the captured
// bytes padded to 8; at the largest snap it still fits a record.
TEST(Abi, PacketSnapLayoutIsFixed) {
  EXPECT_EQ(sizeof(magnet_pkt_snap), 16u);
  EXPECT_EQ(offsetof(magnet_pkt_snap, ifindex), 0u);
  EXPECT_EQ(offsetof(magnet_pkt_snap, wire_len), 4u);
  EXPECT_EQ(offsetof(magnet_pkt_snap, cap_len), 8u);
  EXPECT_EQ(offsetof(magnet_pkt_snap, l3proto), 10u);
  EXPECT_EQ(offsetof(magnet_pkt_snap, mac_len), 12u);
  EXPECT_EQ(MAGNET_SNAP_MAX, 128);
  EXPECT_EQ(MAGNET_SNAP_MAX % MAGNET_RECORD_ALIGN, 0);
  EXPECT_LE(sizeof(magnet_hdr) + sizeof(magnet_pkt_snap) + MAGNET_SNAP_MAX, size_t{MAGNET_MAX_RECORD});
  const auto* e = find_event("net.pkt.recv");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->payload_kind, MAGNET_PL_PKT_SNAP);
  EXPECT_EQ(payload_size(MAGNET_PL_PKT_SNAP), sizeof(magnet_pkt_snap));
  EXPECT_EQ(payload_kind_name(MAGNET_PL_PKT_SNAP), "pkt_snap");
}

TEST(Abi, FlowIdDependsOnDirectionAndEveryTupleField) {
  uint8_t a[16] = {10, 0, 0, 1}, b[16] = {10, 0, 0, 2};
  uint64_t f = magnet_flow_id(a, b, 5000, 6000, 17);
  EXPECT_NE(f, 0u);
  EXPECT_EQ(f, magnet_flow_id(a, b, 5000, 6000, 17));
  EXPECT_NE(f, magnet_flow_id(b, a, 6000, 5000, 17));
  EXPECT_NE(f, magnet_flow_id(a, b, 5001, 6000, 17));
  EXPECT_NE(f, magnet_flow_id(a, b, 5000, 6001, 17));
  EXPECT_NE(f, magnet_flow_id(a, b, 5000, 6000, 6));
}

}  // namespace
}  // namespace magnet
