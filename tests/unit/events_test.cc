#include <gtest/gtest.h>

#include "magnet/events.h"

namespace magnet {
namespace {

TEST(Events, SelectByExactNameAndPrefix) {
  auto one = select_events("net.sock.send");
  ASSERT_TRUE(one) << one.err().message;
  EXPECT_EQ(*one, (std::set<uint16_t>{MAGNET_EV_NET_SOCK_SEND}));

  auto grp = select_events("net.sock");
  ASSERT_TRUE(grp);
  EXPECT_EQ(*grp, (std::set<uint16_t>{MAGNET_EV_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_RECV}));

  auto net = select_events("net");
  ASSERT_TRUE(net);
  EXPECT_EQ(net->size(), 10u);  // 8 layer events + tcp state + drops

  auto star = select_events(" net.dev.* , sched.switch ");
  ASSERT_TRUE(star);
  EXPECT_EQ(*star, (std::set<uint16_t>{MAGNET_EV_NET_DEV_XMIT, MAGNET_EV_NET_DEV_RECV,
                                       MAGNET_EV_SCHED_SWITCH}));
  auto all = select_events("all");
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), size_t{MAGNET_NPROBES} - 2) << "all but net.pkt.*";
  EXPECT_FALSE(all->count(MAGNET_EV_NET_PKT_XMIT));
}

// Packet capture copies bytes of every packet: only a part that names it
// turns it on, so "net" (record's default) and "all" keep their cost.
TEST(Events, PacketCaptureIsSelectedOnlyByName) {
  auto net = select_events("net");
  ASSERT_TRUE(net);
  EXPECT_FALSE(net->count(MAGNET_EV_NET_PKT_XMIT));
  EXPECT_FALSE(net->count(MAGNET_EV_NET_PKT_RECV));
  auto pkt = select_events("net.pkt");
  ASSERT_TRUE(pkt);
  EXPECT_EQ(*pkt, (std::set<uint16_t>{MAGNET_EV_NET_PKT_XMIT, MAGNET_EV_NET_PKT_RECV}));
  auto one = select_events("net.pkt.recv,net.dev");
  ASSERT_TRUE(one);
  EXPECT_EQ(*one, (std::set<uint16_t>{MAGNET_EV_NET_PKT_RECV, MAGNET_EV_NET_DEV_XMIT,
                                      MAGNET_EV_NET_DEV_RECV}));
}

TEST(Events, PrefixStopsAtDots) {
  // "net.so" is not a component prefix of net.sock.*
  auto r = select_events("net.so");
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("unknown probe 'net.so'"), std::string::npos);
  EXPECT_NE(r.err().message.find("net.sock.send"), std::string::npos) << "lists known probes";
}

TEST(Events, UnknownAndEmptyListsAreErrors) {
  EXPECT_FALSE(select_events("bogus"));
  EXPECT_FALSE(select_events(""));
  EXPECT_FALSE(select_events(",,"));
  EXPECT_FALSE(select_events("net,bogus"));
}

TEST(Events, NamesOfUnknownIdsAreHex) {
  EXPECT_EQ(event_name(MAGNET_EV_NET_IP_RECV), "net.ip.recv");
  EXPECT_EQ(event_name(0x7abc), "0x7abc");
}

}  // namespace
}  // namespace magnet
