// Bad input and missing privileges for the commands that load probes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "proc.h"

namespace magnet {
namespace {

using test::run;

void expect_usage_error(const std::vector<std::string>& args, const std::string& message) {
  std::vector<std::string> argv = {MAGNET_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run(argv);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << "stderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << "nothing on stdout: " << r.out;
}

TEST(CliRecord, UsageErrorsNameTheProblem) {
  expect_usage_error({"record"}, "missing -o FILE");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--probes", "net.bogus"},
                     "unknown probe 'net.bogus'");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--filter", "tgdi == 1"}, "unknown field");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--filter", "tgid == "}, "--filter:");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--sample", "0"}, "--sample: must be at least 1");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--sample", "ten"}, "not a positive integer");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--buffer", "3000"}, "power of two");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--duration", "-3"}, "--duration");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--frobnicate"}, "unknown option '--frobnicate'");
  expect_usage_error({"stat", "--interval", "soon"}, "not a duration");
  expect_usage_error({"stat", "--probes", ""}, "empty probe list");
  expect_usage_error({"frobnicate"}, "unknown command 'frobnicate'");
  expect_usage_error({"host", "--vm-quota", "lots"}, "--vm-quota");
  expect_usage_error({"host", "--vm-quota", "2000000000"}, "--vm-quota: 2000000000 is above 10^9 events/s");
  expect_usage_error({"host", "--vm-quota", "-5"}, "--vm-quota");
  expect_usage_error({"host", "--metrics-detail", "fine"}, "--metrics-detail: 'fine' is not full or coarse");
  // A power model that cannot be used: its file and line, and why.
  const std::string model = "/tmp/magnet-bad-power-model-" + std::to_string(getpid()) + ".conf";
  std::ofstream(model, std::ios::trunc) << "idle = 86\nfull = 117\npoint = 50% 130\n";
  expect_usage_error({"host", "--power-model", model},
                     "--power-model: " + model + ":3: point: its watts fall outside the curve (above full)");
  std::remove(model.c_str());
  expect_usage_error({"host", "--power-model", model}, "--power-model: " + model + ": No such file");
  expect_usage_error({"host", "--powercap-root="}, "--powercap-root: empty");
  // VM tagging outside the daemon only with --vm or --uri (the registry).
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--filter", "vm == 1"},
                     "--filter: a part on vm needs VM tagging: give --vm or --uri");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--probes", "vmnet.queue"},
                     "vmnet.queue sees only the devices of VMs it knows: give --vm or --uri");
  expect_usage_error({"record", "-o", "/tmp/x.mtr", "--vm", "g1,,g2"}, "--vm: an empty name in 'g1,,g2'");
  expect_usage_error({"stat", "--uri", ""}, "--uri: empty");
}

// --vm and --uri follow libvirt (here its test driver, whose one running
// domain is "test"): a name it does not run is refused naming the ones it
// does; a known one is given its id, which --json reports.
TEST(CliRecord, VmNamesAreResolvedWithLibvirtOrRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  auto r = run({MAGNET_BIN, "record", "-o", "/tmp/magnet-vm-test.mtr", "-p", "net.dev", "--uri",
                "test:///default", "--vm", "nosuch", "-d", "1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("--vm nosuch: no running domain of that name at test:///default (running: test)"),
            std::string::npos)
      << r.err;
  r = run({MAGNET_BIN, "record", "-o", "/tmp/magnet-vm-test.mtr", "-p", "net.dev", "--uri",
           "test:///default", "--vm", "test", "-d", "200ms", "-q", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["vms"], nlohmann::json({{"test", 1}})) << r.out;
  r = run({MAGNET_BIN, "stat", "-p", "net.dev", "--uri", "test:///nosuch-driver", "-c", "1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("cannot follow the VMs of test:///nosuch-driver"), std::string::npos) << r.err;
  // magnet kvm too (this machine's kernel has the kvm tracepoints).
  r = run({MAGNET_BIN, "kvm", "--uri", "test:///default", "--vm", "nosuch", "-c", "1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("--vm nosuch: no running domain of that name at test:///default (running: test)"),
            std::string::npos)
      << r.err;
  r = run({MAGNET_BIN, "kvm", "--uri", "test:///default", "--vm", "test", "-c", "1", "-i", "100ms", "--json"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("magnet: VMs of test:///default: test = vm 1"), std::string::npos) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out, nullptr, false).is_object()) << r.out;
  ::unlink("/tmp/magnet-vm-test.mtr");
}

TEST(CliRecord, UnwritableOutputIsAClearError) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  auto r = run({MAGNET_BIN, "record", "-o", "/nonexistent/dir/t.mtr", "-d", "1"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("cannot create trace file /nonexistent/dir/t.mtr"), std::string::npos)
      << r.err;
}

TEST(CliRecord, MissingCapabilitiesAreNamed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop to an unprivileged user";
  auto r = run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                MAGNET_BIN, "record", "-o", "/tmp/never-written.mtr", "-d", "1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("CAP_BPF"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CAP_PERFMON"), std::string::npos) << r.err;
  EXPECT_NE(access("/tmp/never-written.mtr", F_OK), 0) << "no partial file";
}

TEST(CliRecord, ProbesListsMethodsAndReasonsAsJson) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to probe BPF features";
  auto r = run({MAGNET_BIN, "probes", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"probe\":\"net.sock.send\""), std::string::npos);
  EXPECT_NE(r.out.find("\"attach\":\"tp_btf\""), std::string::npos);
  EXPECT_NE(r.out.find("\"method\":\"kprobe\""), std::string::npos);
}

TEST(CliRecord, StatPrintsPerLayerCountsFromAggregation) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  auto r = run({MAGNET_BIN, "stat", "--probes", "sched", "--interval", "200ms", "--count", "2",
                "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  int lines = 0;
  for (char c : r.out) lines += c == '\n';
  EXPECT_EQ(lines, 2);
  EXPECT_NE(r.out.find("\"probe\":\"sched.switch\""), std::string::npos) << r.out;
}

TEST(CliRecord, JsonSaysWhatWasRecordedAsOneObject) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string out = "/tmp/magnet-record-json-" + std::to_string(getpid()) + ".mtr";
  auto r = run({MAGNET_BIN, "record", "-o", out, "--probes", "sched", "--duration", "500ms", "-q",
                "--json"});
  unlink(out.c_str());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << "-q: " << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j.value("file", ""), out);
  EXPECT_GT(j.value("records", 0ull), 0u) << "a half second of a busy machine's scheduler";
  EXPECT_GT(j.value("bytes", 0ull), 0u);
  EXPECT_TRUE(j["lost"].is_number_unsigned()) << r.out;
  ASSERT_TRUE(j["probes"].is_array()) << r.out;
  EXPECT_NE(std::find(j["probes"].begin(), j["probes"].end(), "sched.switch"), j["probes"].end()) << r.out;
}

}  // namespace
}  // namespace magnet
