// `magnet dump --format ulm`: NetLogger ULM lines, exact for known records,
// and every line of a larger trace parses back as KEY=VALUE pairs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <sstream>

#include "export_fixture.h"
#include "proc.h"

namespace magnet {
namespace {

using test::run;

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// ULM as a reader parses it: KEY=VALUE separated by single spaces, a value
// either bare or in double quotes with \" and \\ escapes.  Empty on a
// malformed line.
std::vector<std::pair<std::string, std::string>> parse_ulm(const std::string& line) {
  std::vector<std::pair<std::string, std::string>> kv;
  size_t i = 0;
  while (i < line.size()) {
    size_t eq = line.find('=', i);
    if (eq == std::string::npos || eq == i) return {};
    std::string key = line.substr(i, eq - i);
    if (key.find_first_of(" \"") != std::string::npos) return {};
    std::string val;
    i = eq + 1;
    if (i < line.size() && line[i] == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) return {};
        if (line[i] == '\\' && i + 1 < line.size()) val += line[++i];
        else if (line[i] == '"') break;
        else val += line[i];
      }
      ++i;
    } else {
      size_t sp = line.find(' ', i);
      if (sp == std::string::npos) sp = line.size();
      val = line.substr(i, sp - i);
      if (val.empty() || val.find('"') != std::string::npos) return {};
      i = sp;
    }
    kv.emplace_back(key, val);
    if (i < line.size()) {
      if (line[i] != ' ' || i + 1 == line.size()) return {};
      ++i;
    }
  }
  return kv;
}

TEST(ExportUlm, ExactLines) {
  // A context switch whose task names need quoting, and a socket send.
  std::vector<std::vector<uint8_t>> recs;
  recs.push_back(test::sched_switch(10, 0, 1, 0, "swapper/0", 1001, "CPU 0/KVM"));
  recs.push_back(test::sched_switch(12, 3, 0, 7, "say \"hi\"", 8, "a\\b"));
  recs.push_back(test::datagram(200, 0x0101)[0]);
  recs.push_back(test::kvm_exit(50, 0, 1, 1000, 1001, 2, 12));
  magnet_lost l{};
  l.count = 5;
  l.probe_type = MAGNET_EV_NET_DEV_XMIT;
  l.reason = MAGNET_LOST_RINGBUF_FULL;
  recs.push_back(make_record(test::hdr(MAGNET_EV_LOST, 1'500'000, 1, 0, 0, 0), l));
  test::fixture_trace t(recs, "ulm");
  auto r = run({MAGNET_BIN, "dump", t.path, "--format", "ulm"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> want = {
      "DATE=20231114221321.000010 HOST=labhost PROG=magnet NL.EVNT=sched.switch LVL=Usage "
      "VM=1 TGID=0 TID=0 CPU=0 SIZE=0 PREV_TID=0 NEXT_TID=1001 PREV_STATE=0 PREV_PRIO=0 "
      "NEXT_PRIO=120 PREV_COMM=swapper/0 NEXT_COMM=\"CPU 0/KVM\"",
      "DATE=20231114221321.000012 HOST=labhost PROG=magnet NL.EVNT=sched.switch LVL=Usage "
      "VM=0 TGID=0 TID=0 CPU=3 SIZE=0 PREV_TID=7 NEXT_TID=8 PREV_STATE=0 PREV_PRIO=0 "
      "NEXT_PRIO=120 PREV_COMM=\"say \\\"hi\\\"\" NEXT_COMM=\"a\\\\b\"",
      "DATE=20231114221321.000200 HOST=labhost PROG=magnet NL.EVNT=net.sock.send LVL=Usage "
      "VM=0 TGID=500 TID=501 CPU=2 FLOW=0x5eedf10e0000abcd SIZE=1472 FLAGS=4 FAMILY=2 "
      "PROTOCOL=17 SPORT=5000 DPORT=6000 SADDR=10.0.0.1 DADDR=10.0.1.2 CALL_NS=0",
      "DATE=20231114221321.000050 HOST=labhost PROG=magnet NL.EVNT=kvm.exit LVL=Usage "
      "VM=1 TGID=1000 TID=1001 CPU=0 ID=0x2 SIZE=0 VCPU_ID=2 EXIT_REASON=12 ISA=1 "
      "GUEST_RIP=0x0 INFO1=0x0 INFO2=0x0",
      "DATE=20231114221322.500000 HOST=labhost PROG=magnet NL.EVNT=stream.lost LVL=Warning "
      "VM=0 TGID=0 TID=0 CPU=1 SIZE=0 COUNT=5 FIRST_TS_NS=0 LAST_TS_NS=0 PROBE_TYPE=262 "
      "LOST_CPU=0 REASON=1",
  };
  EXPECT_EQ(lines_of(r.out), want);
  // -o writes the same lines to a file.
  std::string out = "/tmp/magnet-export-ulm-" + std::to_string(getpid()) + ".log";
  auto o = run({MAGNET_BIN, "dump", t.path, "--format", "ulm", "-o", out});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(o.out.empty());
  auto cat = run({"/bin/cat", out});
  EXPECT_EQ(cat.out, r.out);
  unlink(out.c_str());
}

TEST(ExportUlm, EveryLineParsesBack) {
  test::fixture_trace t;
  auto r = run({MAGNET_BIN, "dump", t.path, "--format", "ulm"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = lines_of(r.out);
  EXPECT_EQ(lines.size(), test::fixture_records().size()) << "one line per event record";
  const std::regex date(R"(\d{14}\.\d{6})");
  for (const auto& l : lines) {
    auto kv = parse_ulm(l);
    ASSERT_GE(kv.size(), 11u) << l;
    const std::vector<std::string> head = {"DATE", "HOST", "PROG", "NL.EVNT", "LVL",
                                           "VM",   "TGID", "TID",  "CPU"};
    for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(kv[i].first, head[i]) << l;
    EXPECT_TRUE(std::regex_match(kv[0].second, date)) << kv[0].second;
    EXPECT_EQ(kv[0].second.substr(0, 8), "20231114");
    EXPECT_EQ(kv[1].second, "labhost");
    EXPECT_EQ(kv[2].second, "magnet");
    std::map<std::string, int> seen;
    for (const auto& [k, v] : kv) EXPECT_EQ(++seen[k], 1) << "key twice: " << k << " in " << l;
    EXPECT_TRUE(seen.count("SIZE")) << l;
  }
  // The quoted comm reads back as it was.
  bool found = false;
  for (const auto& l : lines)
    for (const auto& [k, v] : parse_ulm(l)) found |= k == "NEXT_COMM" && v == "CPU 1/KVM";
  EXPECT_TRUE(found);
}

TEST(ExportUlm, CorruptTraceIsAnError) {
  test::fixture_trace t;
  truncate(t.path.c_str(), 100);
  auto r = run({MAGNET_BIN, "dump", t.path, "--format", "ulm"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("magnet dump: "), std::string::npos) << r.err;
}

}  // namespace
}  // namespace magnet
