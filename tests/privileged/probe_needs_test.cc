// Probes that read state other probes' programs keep ("needs"): kvm.entry
// needs kvm.exit (the exit being handled) and kvm.userspace_exit (whether it
// went to the VMM).  Enabling it attaches them; they stay while anything
// needs them or they are enabled themselves, and go when nothing does.
#include <gtest/gtest.h>
#include <unistd.h>

#include "magnet/capture/capture.h"
#include "magnet/events.h"

namespace magnet::host {
namespace {

TEST(ProbeNeeds, KvmEntryAttachesWhatItNeedsAndReleasesIt) {
  ASSERT_EQ(geteuid(), 0u) << "privileged tier: run as root";
  capture_options o;
  o.probes = {MAGNET_EV_KVM_ENTRY, MAGNET_EV_KVM_EXIT};
  o.ring_bytes = 4096;
  auto c = capture::open(o);
  ASSERT_TRUE(c) << c.err().message;
  auto& cap = **c;
  for (uint16_t t : {MAGNET_EV_KVM_ENTRY, MAGNET_EV_KVM_EXIT, MAGNET_EV_KVM_USERSPACE_EXIT}) {
    const probe_plan* p = cap.plan_for(t);
    ASSERT_NE(p, nullptr);
    if (p->chosen < 0)
      GTEST_SKIP() << "this kernel has no KVM tracepoints (kvm module not loaded): "
                   << p->checks.front().why;
  }
  EXPECT_FALSE(cap.attached(MAGNET_EV_KVM_EXIT));
  ASSERT_TRUE(cap.set_mode(MAGNET_EV_KVM_ENTRY, MAGNET_MODE_AGGREGATE));
  EXPECT_TRUE(cap.attached(MAGNET_EV_KVM_ENTRY));
  EXPECT_TRUE(cap.attached(MAGNET_EV_KVM_EXIT)) << "needed by kvm.entry, though not enabled";
  EXPECT_TRUE(cap.attached(MAGNET_EV_KVM_USERSPACE_EXIT));

  // kvm.exit enabled on its own, then kvm.entry off: kvm.exit stays.
  ASSERT_TRUE(cap.set_mode(MAGNET_EV_KVM_EXIT, MAGNET_MODE_STREAM));
  ASSERT_TRUE(cap.set_mode(MAGNET_EV_KVM_ENTRY, 0));
  EXPECT_FALSE(cap.attached(MAGNET_EV_KVM_ENTRY));
  EXPECT_TRUE(cap.attached(MAGNET_EV_KVM_EXIT)) << "enabled itself";
  EXPECT_FALSE(cap.attached(MAGNET_EV_KVM_USERSPACE_EXIT)) << "nothing needs it any more";

  ASSERT_TRUE(cap.set_mode(MAGNET_EV_KVM_EXIT, 0));
  EXPECT_FALSE(cap.attached(MAGNET_EV_KVM_EXIT));

  // stop: every probe of the set off and detached, needed ones included.
  ASSERT_TRUE(cap.set_mode(MAGNET_EV_KVM_EXIT, MAGNET_MODE_STREAM));
  ASSERT_TRUE(cap.set_mode(MAGNET_EV_KVM_ENTRY, MAGNET_MODE_STREAM));
  cap.stop({MAGNET_EV_KVM_EXIT, MAGNET_EV_KVM_ENTRY});
  for (uint16_t t : {MAGNET_EV_KVM_EXIT, MAGNET_EV_KVM_ENTRY, MAGNET_EV_KVM_USERSPACE_EXIT})
    EXPECT_FALSE(cap.attached(t)) << event_name(t);
}

}  // namespace
}  // namespace magnet::host
