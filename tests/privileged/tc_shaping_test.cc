// The shared link's capacity as tc shapes it, read over rtnetlink from the
// kernel (tbf and htb), on a veth pair this test creates and removes.
#include <gtest/gtest.h>
#include <net/if.h>

#include "proc.h"
#include "magnet/metrics/tc.h"

namespace magnet::host {
namespace {

using test::sh;

struct veth {
  veth() {
    sh("ip link del mgtc0 2>/dev/null || true");
    sh("ip link add mgtc0 type veth peer name mgtc1");
    ifindex = static_cast<int>(if_nametoindex("mgtc0"));
  }
  ~veth() { test::run({"ip", "link", "del", "mgtc0"}); }
  int ifindex = 0;
};

TEST(TcShaping, TbfRateAndQueueLength) {
  veth v;
  ASSERT_GT(v.ifindex, 0);
  sh("tc qdisc add dev mgtc0 root tbf rate 20mbit burst 32kbit limit 125000");
  auto s = read_tc_shaping(v.ifindex);
  ASSERT_TRUE(s) << s.err().message;
  EXPECT_EQ(s->kind, "tbf");
  EXPECT_DOUBLE_EQ(s->rate_bps, 20e6);
  EXPECT_NEAR(s->queue_limit_s, 0.05, 1e-9) << "125000 bytes at 2.5 MB/s";
}

TEST(TcShaping, HtbTakesTheLargestTopLevelCeil) {
  veth v;
  sh("tc qdisc add dev mgtc0 root handle 1: htb default 10 r2q 100");
  sh("tc class add dev mgtc0 parent 1: classid 1:1 htb rate 30mbit ceil 40mbit");
  sh("tc class add dev mgtc0 parent 1:1 classid 1:10 htb rate 5mbit ceil 90mbit");
  auto s = read_tc_shaping(v.ifindex);
  ASSERT_TRUE(s) << s.err().message;
  EXPECT_EQ(s->kind, "htb");
  EXPECT_DOUBLE_EQ(s->rate_bps, 40e6) << "a child's ceil cannot exceed its parent's";
  EXPECT_EQ(s->queue_limit_s, 0);
}

TEST(TcShaping, UnshapedDevicesAndMissingOnesAreNamedErrors) {
  veth v;
  auto s = read_tc_shaping(v.ifindex);  // noqueue on a fresh veth
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("not shaped by tbf or htb"), std::string::npos) << s.err().message;
  sh("tc qdisc add dev mgtc0 root pfifo limit 100");
  s = read_tc_shaping(v.ifindex);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("pfifo"), std::string::npos) << s.err().message;
  s = read_tc_shaping(1 << 30);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("device 1073741824"), std::string::npos) << s.err().message;
}

}  // namespace
}  // namespace magnet::host
