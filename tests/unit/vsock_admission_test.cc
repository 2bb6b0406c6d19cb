// The vsock accept decision (host/deliver admission.h) without sockets:
// which peers are guests of which VM, privileged source ports, the accept
// rate per VM, the registry's fresh word on a CID, and the connection cap
// that never locks the agent out.  And the reserved-port search the guest
// side uses to connect from a port below 1024 (lib/magnet/reserved_port.h).
#include <gtest/gtest.h>
#include <linux/vm_sockets.h>

#include <set>
#include <vector>

#include "magnet/deliver/admission.h"
#include "magnet/reserved_port.h"

namespace magnet::host {
namespace {

using namespace std::chrono_literals;
using steady = view::steady;

const std::vector<known_vm> kVms = {{1, 3}, {2, 4}, {5, 0}};

TEST(VsockAdmission, OnlyCidsOfExactlyOneRunningVmAreGuests) {
  vsock_admission a({});
  const auto now = steady::now();
  for (uint32_t cid : {0u, 1u, 2u, static_cast<uint32_t>(VMADDR_CID_ANY)}) {
    auto v = a.screen({cid, 1023}, kVms, now);
    EXPECT_EQ(v.why, refusal::not_guest) << cid;
    EXPECT_EQ(v.vm, 0u);
  }
  EXPECT_EQ(a.screen({9, 1023}, kVms, now).why, refusal::unknown_cid);
  std::vector<known_vm> twice = {{1, 3}, {2, 3}};
  EXPECT_EQ(a.screen({3, 1023}, twice, now).why, refusal::shared_cid);
  auto ok = a.screen({4, 1023}, kVms, now);
  EXPECT_TRUE(ok.admitted()) << ok.text;
  EXPECT_EQ(ok.vm, 2u);
}

TEST(VsockAdmission, OnlyPrivilegedSourcePortsUnlessAnyPort) {
  vsock_admission strict({});
  const auto now = steady::now();
  for (uint32_t port : {1024u, 1025u, 40000u, 0xffffffffu}) {
    auto v = strict.screen({3, port}, kVms, now);
    EXPECT_EQ(v.why, refusal::port) << port;
    EXPECT_EQ(v.vm, 1u) << "the VM is known, for its log line and counter";
    EXPECT_NE(v.text.find("not below 1024"), std::string::npos) << v.text;
  }
  for (uint32_t port : {1023u, 665u, 1u})
    EXPECT_TRUE(strict.screen({3, port}, kVms, now).admitted()) << port;
  vsock_admission relaxed({.any_port = true});
  EXPECT_TRUE(relaxed.screen({3, 40000}, kVms, now).admitted());
}

// An unprivileged guest user's attempts come before the rate: they do not
// use up the tokens of the VM's root (its agent).
TEST(VsockAdmission, RefusedPortsDoNotSpendTheVmsAcceptRate) {
  vsock_admission a({.accepts_per_s = 10, .accept_burst = 20});
  const auto now = steady::now();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.screen({3, 50000}, kVms, now).why, refusal::port);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(a.screen({3, 1023}, kVms, now).admitted()) << i;
}

TEST(VsockAdmission, AcceptRateIsPerVmWithABurst) {
  vsock_admission a({.accepts_per_s = 10, .accept_burst = 20});
  const auto t0 = steady::now();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(a.screen({3, 1023}, kVms, t0).admitted()) << i;
  auto v = a.screen({3, 1023}, kVms, t0);
  EXPECT_EQ(v.why, refusal::rate);
  EXPECT_EQ(v.vm, 1u);
  EXPECT_TRUE(a.screen({4, 1023}, kVms, t0).admitted()) << "another VM's bucket is its own";
  // 10 per second: one more after 100 ms, not two.
  EXPECT_TRUE(a.screen({3, 1023}, kVms, t0 + 100ms).admitted());
  EXPECT_EQ(a.screen({3, 1023}, kVms, t0 + 100ms).why, refusal::rate);
  EXPECT_TRUE(a.screen({3, 1023}, kVms, t0 + 1100ms).admitted());
  // A VM that stopped starts over with a full burst when it runs again.
  a.keep_only({2});
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(a.screen({3, 1023}, kVms, t0 + 1100ms).admitted()) << i;
}

TEST(VsockAdmission, TheRegistrysFreshAnswerDecides) {
  const vsock_peer p{3, 1023};
  EXPECT_TRUE(vsock_admission::confirm(p, 1, result<uint32_t>(1u)).admitted());
  auto other = vsock_admission::confirm(p, 1, result<uint32_t>(2u));
  EXPECT_EQ(other.why, refusal::moved);
  EXPECT_EQ(other.text, "CID 3 belongs to another VM now") << "no other VM's name or id";
  auto none = vsock_admission::confirm(p, 1, result<uint32_t>(0u));
  EXPECT_EQ(none.why, refusal::moved);
  EXPECT_EQ(none.text, "CID 3 belongs to no running VM now");
  auto unknown = vsock_admission::confirm(p, 1, result<uint32_t>(error{"not connected to libvirt"}));
  EXPECT_EQ(unknown.why, refusal::unconfirmed);
  EXPECT_NE(unknown.text.find("not connected to libvirt"), std::string::npos);
}

// At the cap, the oldest connection that has not subscribed makes room;
// when every one has subscribed, the new one is refused.
TEST(VsockAdmission, TheCapReplacesTheOldestUnsubscribedConnection) {
  vsock_admission a({.max_conns_per_vm = 4});
  const auto t = steady::now();
  std::vector<open_conn> open = {{true, t}, {false, t + 3s}, {false, t + 1s}};
  auto under = a.place(open);
  EXPECT_EQ(under.why, refusal::none);
  EXPECT_FALSE(under.evict);
  open.push_back({false, t + 2s});
  auto at = a.place(open);
  EXPECT_EQ(at.why, refusal::none);
  ASSERT_TRUE(at.evict);
  EXPECT_EQ(*at.evict, 2u) << "the oldest unsubscribed (opened at t+1s), not the first listed";
  EXPECT_NE(at.text.find("had not subscribed"), std::string::npos) << at.text;
  for (auto& c : open) c.subscribed = true;
  auto full = a.place(open);
  EXPECT_EQ(full.why, refusal::full);
  EXPECT_FALSE(full.evict);
}

TEST(VsockAdmission, CountsPerVmAndReason) {
  vsock_admission a({});
  a.count(1, refusal::port);
  a.count(1, refusal::port);
  a.count(0, refusal::unknown_cid);
  a.count_accepted(1, true);
  a.count_accepted(1, false);
  const auto& c = a.counts();
  EXPECT_EQ(c.at(1).refused[static_cast<size_t>(refusal::port)], 2u);
  EXPECT_EQ(c.at(1).refused_total(), 2u);
  EXPECT_EQ(c.at(1).accepted, 2u);
  EXPECT_EQ(c.at(1).replaced, 1u);
  EXPECT_EQ(c.at(0).refused[static_cast<size_t>(refusal::unknown_cid)], 1u);
  for (size_t r = 0; r < kRefusals; ++r)
    EXPECT_NE(refusal_name(static_cast<refusal>(r)), "?") << "every reason has a stable name";
}

// ------------------------------------------------------- reserved ports ---

TEST(ReservedPort, TriesFromTheStartDownSkippingPortsInUse) {
  std::vector<uint32_t> tried;
  auto p = bind_reserved_port(
      [&](uint32_t port) {
        tried.push_back(port);
        return port > 1000 ? -EADDRINUSE : 0;
      },
      1023);
  ASSERT_TRUE(p) << p.err().message;
  EXPECT_EQ(*p, 1000u);
  ASSERT_EQ(tried.size(), 24u);
  EXPECT_EQ(tried.front(), 1023u);
}

TEST(ReservedPort, BelowTheRangeTheSearchWrapsToTheTop) {
  std::vector<uint32_t> tried;
  auto p = bind_reserved_port(
      [&](uint32_t port) {
        tried.push_back(port);
        return port < 1020 ? -EADDRINUSE : 0;
      },
      600);
  ASSERT_TRUE(p) << p.err().message;
  EXPECT_EQ(*p, 1023u) << "after 600 down to 512, from 1023 on";
  ASSERT_EQ(tried.size(), 600u - kReservedPortLow + 2);
  EXPECT_EQ(tried[tried.size() - 2], kReservedPortLow);
}

TEST(ReservedPort, NotRootEndsTheSearchWithItsError) {
  int calls = 0;
  auto p = bind_reserved_port(
      [&](uint32_t) {
        ++calls;
        return -EACCES;
      },
      1023);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.err().code, EACCES);
  EXPECT_NE(p.err().message.find("1023"), std::string::npos) << p.err().message;
  EXPECT_EQ(calls, 1);
}

TEST(ReservedPort, EveryPortInUseIsAnErrorAfterTheRange) {
  std::set<uint32_t> tried;
  int calls = 0;
  auto p = bind_reserved_port([&](uint32_t port) {
    ++calls;
    tried.insert(port);
    return -EADDRINUSE;
  });
  ASSERT_FALSE(p);
  EXPECT_EQ(p.err().code, EADDRINUSE);
  EXPECT_EQ(calls, 512);
  EXPECT_EQ(tried.size(), 512u) << "each port once";
  EXPECT_EQ(*tried.begin(), kReservedPortLow);
  EXPECT_EQ(*tried.rbegin(), kReservedPortHigh);
}

// A process's successive connections come from different ports, the next
// just below the last (a reconnect never reuses the port just closed).
TEST(ReservedPort, SuccessiveBindsOfAProcessUseDifferentPorts) {
  auto any = [](uint32_t) { return 0; };
  std::vector<uint32_t> got;
  for (int i = 0; i < 600; ++i) {
    auto p = bind_reserved_port(any);
    ASSERT_TRUE(p) << p.err().message;
    got.push_back(*p);
  }
  for (size_t i = 1; i < got.size(); ++i) {
    const uint32_t want = got[i - 1] == kReservedPortLow ? kReservedPortHigh : got[i - 1] - 1;
    ASSERT_EQ(got[i], want) << i;
  }
}

}  // namespace
}  // namespace magnet::host
