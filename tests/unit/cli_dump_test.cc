// `magnet dump` on good, damaged and foreign input: an error names the
// problem and nothing else is printed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "magnet/record.h"
#include "magnet/trace_file.h"
#include "proc.h"

namespace magnet {
namespace {

using test::run;

struct trace_fixture {
  std::string path = "/tmp/magnet-dump-" + std::to_string(getpid()) + ".mtr";
  trace_fixture() {
    auto w = trace_writer::create(path, local_sysinfo(), {MAGNET_EV_NET_SOCK_SEND});
    magnet_hdr h{};
    h.type = MAGNET_EV_NET_SOCK_SEND;
    h.size = 1400;
    h.tgid = 77;
    for (int i = 0; i < 3; ++i) {
      h.ts_ns = 100 + i;
      auto r = make_record(h, magnet_sock{.family = 2, .protocol = 17, .sport = 1, .dport = 2});
      (void)w->append(r);
    }
    (void)w->close();
  }
  ~trace_fixture() { unlink(path.c_str()); }
};

TEST(CliDump, FormatsAreComplete) {
  trace_fixture t;
  auto csv = run({MAGNET_BIN, "dump", t.path, "--format", "csv"});
  ASSERT_EQ(csv.status, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("ts_ns,cpu,event,vm,tgid,tid,abstract_id,size", 0), 0u);
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 4) << "header + 3 records";
  auto json = run({MAGNET_BIN, "dump", t.path, "--format", "json"});
  ASSERT_EQ(json.status, 0);
  EXPECT_NE(json.out.find("\"event\":\"stream.sysinfo\""), std::string::npos);
  EXPECT_EQ(std::count(json.out.begin(), json.out.end(), '\n'), 4) << "sysinfo + 3 records";
  auto text = run({MAGNET_BIN, "dump", t.path});
  ASSERT_EQ(text.status, 0);
  EXPECT_NE(text.out.find("net.sock.send vm=0 tgid=77"), std::string::npos) << text.out;
}

TEST(CliDump, JsonIsFormatJson) {
  trace_fixture t;
  auto json = run({MAGNET_BIN, "dump", t.path, "--json"});
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(json.out, run({MAGNET_BIN, "dump", t.path, "--format", "json"}).out);
  std::istringstream in(json.out);
  int n = 0;
  for (std::string l; std::getline(in, l); ++n)
    EXPECT_TRUE(nlohmann::json::parse(l, nullptr, false).is_object()) << l;
  EXPECT_EQ(n, 4) << "sysinfo + 3 records";
  EXPECT_EQ(run({MAGNET_BIN, "dump", t.path, "--json", "--format", "json"}).status, 0);
  auto clash = run({MAGNET_BIN, "dump", t.path, "--json", "-F", "csv"});
  EXPECT_EQ(clash.status, 2);
  EXPECT_NE(clash.err.find("--json and --format csv disagree"), std::string::npos) << clash.err;
  EXPECT_TRUE(clash.out.empty());
}

TEST(CliDump, TruncatedTracePrintsNothingButTheError) {
  trace_fixture t;
  truncate(t.path.c_str(), static_cast<off_t>(std::ifstream(t.path, std::ios::ate).tellg()) - 5);
  auto r = run({MAGNET_BIN, "dump", t.path, "--format", "csv"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty()) << "no partial output: " << r.out;
  EXPECT_NE(r.err.find("truncated record"), std::string::npos) << r.err;
}

TEST(CliDump, BadInputs) {
  auto missing = run({MAGNET_BIN, "dump", "/nonexistent.mtr"});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("cannot open trace file /nonexistent.mtr"), std::string::npos);
  auto notrace = run({MAGNET_BIN, "dump", "/etc/hostname"});
  EXPECT_EQ(notrace.status, 1);
  EXPECT_NE(notrace.err.find("not a magnet trace file"), std::string::npos) << notrace.err;
  auto dir = run({MAGNET_BIN, "dump", "/tmp"});
  EXPECT_EQ(dir.status, 1);
  auto fmt = run({MAGNET_BIN, "dump", "/etc/hostname", "--format", "xml"});
  EXPECT_EQ(fmt.status, 2);
  EXPECT_NE(fmt.err.find("'xml' is not one of text, csv, json"), std::string::npos);
  auto none = run({MAGNET_BIN, "dump"});
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("missing trace FILE"), std::string::npos) << none.err;
}

// A packet record with @cap captured bytes 0xa0, 0xa1, ... (cap_len says
// @says), padded to 8.
std::string snap_trace(uint16_t cap, uint16_t says) {
  std::string path = "/tmp/magnet-dump-snap-" + std::to_string(getpid()) + ".mtr";
  auto w = trace_writer::create(path, local_sysinfo(), {MAGNET_EV_NET_PKT_RECV});
  std::vector<uint8_t> pl(sizeof(magnet_pkt_snap) + cap);
  magnet_pkt_snap ps{.ifindex = 3, .wire_len = 1442, .cap_len = says, .l3proto = 0x0800, .mac_len = 14};
  std::memcpy(pl.data(), &ps, sizeof ps);
  for (uint16_t i = 0; i < cap; ++i) pl[sizeof ps + i] = static_cast<uint8_t>(0xa0 + i);
  magnet_hdr h{};
  h.type = MAGNET_EV_NET_PKT_RECV;
  h.size = 1428;
  (void)w->append(make_record(h, pl.data(), pl.size()));
  (void)w->close();
  return path;
}

TEST(CliDump, PacketRecordsShowTheirBytes) {
  auto path = snap_trace(5, 5);
  auto text = run({MAGNET_BIN, "dump", path});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("net.pkt.recv vm=0"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ifindex=3 wire_len=1442 cap_len=5 l3proto=2048 mac_len=14 data=a0a1a2a3a4\n"),
            std::string::npos)
      << "the 5 bytes and not the 3 of padding: " << text.out;
  auto json = run({MAGNET_BIN, "dump", path, "--json"});
  ASSERT_EQ(json.status, 0);
  EXPECT_NE(json.out.find("\"data\":\"a0a1a2a3a4\""), std::string::npos) << json.out;
  auto csv = run({MAGNET_BIN, "dump", path, "-F", "csv"});
  ASSERT_EQ(csv.status, 0);
  EXPECT_NE(csv.out.find(",data\n"), std::string::npos) << "a data column, last";
  EXPECT_NE(csv.out.find(",a0a1a2a3a4\n"), std::string::npos) << csv.out;
  unlink(path.c_str());
}

TEST(CliDump, PacketRecordClaimingMoreBytesThanItHoldsIsCorrupt) {
  auto path = snap_trace(5, 9);  // 8 bytes of room after the fixed part
  auto r = run({MAGNET_BIN, "dump", path});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("net.pkt.recv says 9 captured bytes"), std::string::npos) << r.err;
  unlink(path.c_str());
}

TEST(CliDump, HelpOnEveryCommand) {
  for (const char* cmd : {"probes", "record", "dump", "stat"}) {
    auto r = run({MAGNET_BIN, cmd, "--help"});
    EXPECT_EQ(r.status, 0) << cmd;
    EXPECT_NE(r.out.find("Usage: magnet"), std::string::npos) << cmd;
  }
}

}  // namespace
}  // namespace magnet
