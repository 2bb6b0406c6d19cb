// Every program this kernel can run passes the verifier, for each attach
// method the kernel offers (forcing the fallbacks with MAGNET_DENY_METHODS).
#include <gtest/gtest.h>
#include <stdlib.h>

#include "magnet/capture/capture.h"
#include "magnet/events.h"

namespace magnet::host {
namespace {

struct deny_env {
  explicit deny_env(const char* v) { setenv("MAGNET_DENY_METHODS", v, 1); }
  ~deny_env() { unsetenv("MAGNET_DENY_METHODS"); }
};

void expect_loads(const char* deny) {
  deny_env env(deny);
  auto c = capture::open({});
  if (!c && c.err().code == EPERM) GTEST_SKIP() << c.err().message;
  ASSERT_TRUE(c) << c.err().message;
  int loaded = 0;
  for (const auto& p : (*c)->plans()) {
    if (p.chosen < 0) continue;
    for (const char* prog : p.spec->methods[p.chosen].progs) {
      EXPECT_GE((*c)->program_fd(prog), 0) << prog;
      ++loaded;
    }
  }
  EXPECT_GT(loaded, 0);
}

TEST(Verifier, PreferredMethodsLoad) { expect_loads(""); }
TEST(Verifier, RawTracepointFallbacksLoad) { expect_loads("tp_btf"); }
// Header copies through bpf_probe_read_kernel, as on kernels before 6.17.
TEST(Verifier, ProbeReadHeaderCopyLoads) { expect_loads("rdonly_mem"); }
TEST(Verifier, RawTracepointsWithProbeReadLoad) { expect_loads("tp_btf,rdonly_mem"); }

TEST(Verifier, EveryNetworkLayerHasAMethodOnThisKernel) {
  // The development kernel has no kprobes and refuses fentry: the stable
  // hooks must still carry all four layers, both directions.
  auto kf = kernel_features::probe();
  for (const auto& p : plan_probes(kf)) {
    if (!event_name(p.spec->type).starts_with("net.")) continue;
    std::string why;
    for (const auto& c : p.checks) why += c.why + "; ";
    EXPECT_GE(p.chosen, 0) << event_name(p.spec->type) << ": " << why;
  }
}

TEST(Verifier, DenyingEveryMethodIsReportedPerProbe) {
  deny_env env("tp_btf,raw_tp,tracepoint,netfilter,cgroup_skb,fentry,kprobe");
  auto kf = kernel_features::probe();
  for (const auto& p : plan_probes(kf)) {
    EXPECT_EQ(p.chosen, -1);
    for (const auto& c : p.checks) EXPECT_EQ(c.why, "disabled by MAGNET_DENY_METHODS");
  }
}

}  // namespace
}  // namespace magnet::host
