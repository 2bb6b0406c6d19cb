// magnet host --sample (host/daemon/src/sampling.cc): the list parsed, each
// kind of bad input named, and checked against the daemon's probes and
// what its consumers need; then the command line itself: a refused setting
// exits 2 before the daemon starts, from the command line or the settings
// file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "magnet/daemon/sampling.h"
#include "magnet/event.h"
#include "proc.h"

namespace magnet::host {
namespace {

const std::string kDefaultProbes = "net.dev,net.drop,vmnet.queue,sched,kvm.exit,kvm.entry,kvm.wakeup,blk";

std::string parse_error(const std::string& text) {
  auto r = parse_sample_list(text);
  return r ? "(accepted)" : r.err().message;
}

TEST(SampleList, ProbesAndCountsAsWritten) {
  auto one = parse_sample_list("vmnet.queue=16");
  ASSERT_TRUE(one.ok()) << one.err().message;
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].probe, "vmnet.queue");
  EXPECT_EQ((*one)[0].every, 16u);
  auto two = parse_sample_list(" vmnet.queue.tx = 8 , net.dev=4294967295,blk=1");
  ASSERT_TRUE(two.ok()) << two.err().message;
  ASSERT_EQ(two->size(), 3u);
  EXPECT_EQ((*two)[0].probe, "vmnet.queue.tx");
  EXPECT_EQ((*two)[0].every, 8u);
  EXPECT_EQ((*two)[1].every, 4294967295u);
  EXPECT_EQ((*two)[2].every, 1u) << "1 keeps every record: allowed, and no sampling";
  EXPECT_EQ(sample_list_text(*two), "vmnet.queue.tx=8,net.dev=4294967295,blk=1");
}

TEST(SampleList, EveryKindOfBadInputIsNamed) {
  const std::pair<std::string, std::string> bad[] = {
      {"", "empty (PROBE=N"},
      {"  ", "empty (PROBE=N"},
      {"vmnet.queue=8,", "empty part in 'vmnet.queue=8,'"},
      {"vmnet.queue=8,,net.dev=2", "empty part"},
      {"vmnet.queue", "'vmnet.queue' is not PROBE=N"},
      {"=4", "'=4': no probe before '='"},
      {"vmnet.queu=4", "'vmnet.queu=4': unknown probe 'vmnet.queu' (known: "},
      {"net.dev=", "'net.dev=': '' is not a whole number N"},
      {"net.dev=0", "'net.dev=0': N must be at least 1"},
      {"net.dev=-3", "'net.dev=-3': '-3' is not a whole number N"},
      {"net.dev=1.5", "'1.5' is not a whole number N"},
      {"net.dev=8x", "'8x' is not a whole number N"},
      {"net.dev=4294967296", "'net.dev=4294967296': N is above 4294967295"},
      {"net.dev=99999999999999999999999", "N is above 4294967295"},
      {"net.dev=1ms", "'net.dev=1ms': the daemon samples by count only (1 in N)"},
      {"net.dev=2s", "give a count (magnet record has --sample-time)"},
      {"vmnet.queue=8,vmnet.queue.tx=4", "'vmnet.queue.tx=4': vmnet.queue.tx is sampled already by 'vmnet.queue=8'"},
      {"net.dev=2,net.dev=2", "net.dev.xmit is sampled already by 'net.dev=2'"},
  };
  for (const auto& [text, want] : bad)
    EXPECT_NE(parse_error(text).find(want), std::string::npos) << "'" << text << "': " << parse_error(text);
}

std::string types_error(const std::string& text, const std::string& probes = kDefaultProbes) {
  auto s = parse_sample_list(text);
  if (!s) return "parse: " + s.err().message;
  auto r = sampled_types(*s, probes);
  return r ? "(accepted)" : r.err().message;
}

TEST(SampleList, TypesAmongTheDaemonsProbes) {
  auto s = parse_sample_list("vmnet.queue=16,net=4,blk=1");
  ASSERT_TRUE(s.ok());
  auto t = sampled_types(*s, kDefaultProbes);
  ASSERT_TRUE(t.ok()) << t.err().message;
  const std::map<uint16_t, uint32_t> want = {
      {MAGNET_EV_VMNET_QUEUE_TX, 16}, {MAGNET_EV_VMNET_QUEUE_RX, 16}, {MAGNET_EV_NET_DEV_XMIT, 4},
      {MAGNET_EV_NET_DEV_RECV, 4},    {MAGNET_EV_NET_DROP, 4}};
  EXPECT_EQ(*t, want) << "net: the net.* the daemon runs, not net.sock; blk=1: none";
  auto none = sampled_types({}, kDefaultProbes);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(SampleList, WhatTheDaemonCannotSampleIsRefusedWithTheReason) {
  EXPECT_NE(types_error("blk=4", "net.dev,vmnet.queue").find("'blk=4': blk is not among the daemon's probes (net.dev,vmnet.queue)"),
            std::string::npos)
      << types_error("blk=4", "net.dev,vmnet.queue");
  EXPECT_NE(types_error("net.sock=4").find("net.sock is not among the daemon's probes"), std::string::npos);
  const std::string sched = types_error("sched=4");
  EXPECT_NE(sched.find("'sched=4': sched.switch cannot be sampled: the vCPU run, wait and halt times"), std::string::npos) << sched;
  EXPECT_NE(sched.find("leave sched out with --probes"), std::string::npos) << sched;
  EXPECT_NE(types_error("sched.wakeup=2").find("sched.wakeup cannot be sampled"), std::string::npos);
  EXPECT_NE(types_error("all=2").find("cannot be sampled"), std::string::npos) << "all includes sched";
  EXPECT_NE(types_error("kvm.exit=2").find("'kvm.exit=2': kvm.exit is not streamed by the daemon"), std::string::npos)
      << types_error("kvm.exit=2");
  EXPECT_NE(types_error("kvm=2").find("is not streamed by the daemon"), std::string::npos);
  EXPECT_EQ(types_error("sched=1"), "(accepted)") << "1 in 1 changes nothing";
  EXPECT_FALSE(streamed_by_daemon(MAGNET_EV_KVM_EXIT));
  EXPECT_TRUE(streamed_by_daemon(MAGNET_EV_VMNET_QUEUE_TX));
}

// The program: exit 2 naming the setting, and nothing started (no [started]
// line, no socket), from the command line and from the settings file.
TEST(SampleList, TheDaemonRefusesABadSettingBeforeItStarts) {
  const std::string dir = "/tmp/magnet-sample-test-" + std::to_string(getpid());
  ASSERT_EQ(test::run({"mkdir", "-p", dir}).status, 0);
  const std::string sock = dir + "/host.sock", conf = dir + "/magnet.conf";
  std::ofstream(conf) << "# settings\nsample = vmnet.queue=0\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--sample", "sched=4"}, "magnet host: --sample: 'sched=4': sched.switch cannot be sampled"},
      {{"-p", "net.dev", "--sample", "vmnet.queue=8"}, "--sample: 'vmnet.queue=8': vmnet.queue is not among"},
      {{"--sample", "net.dev=1ms"}, "--sample: 'net.dev=1ms': the daemon samples by count only"},
      {{"--sample=kvm.exit=2"}, "--sample: 'kvm.exit=2': kvm.exit is not streamed"},
      {{"--config", conf}, conf + ":2: sample = vmnet.queue=0: --sample: 'vmnet.queue=0': N must be at least 1"},
  };
  for (const auto& [more, want] : cases) {
    std::vector<std::string> argv = {MAGNET_BIN, "host", "--socket", sock, "--duration", "2", "--uri",
                                     "test:///default"};
    if (more[0] != "--config") argv.insert(argv.end(), {"--config", "/dev/null"});
    argv.insert(argv.end(), more.begin(), more.end());
    auto r = test::run(argv, 20);
    EXPECT_EQ(r.status, 2) << more.back() << ": " << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("[started]"), std::string::npos) << r.err;
    EXPECT_NE(access(sock.c_str(), F_OK), 0) << "no socket: nothing started";
  }
  test::run({"rm", "-rf", dir});
}

}  // namespace
}  // namespace magnet::host
