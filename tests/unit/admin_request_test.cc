// The query socket's request lines (admin_request.h), parsed without a daemon.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "magnet/admin/request.h"

namespace magnet::host {
namespace {

using kind = admin_request::kind;

TEST(AdminRequest, EveryRequestByItsFirstWord) {
  for (auto [line, k] : {std::pair{"top", kind::top}, {"vms", kind::vms},
                         {"sessions", kind::sessions}, {"kvm g1", kind::kvm},
                         {"stats g1", kind::stats}, {"views", kind::views},
                         {"views g1", kind::views}, {"mark g1 2", kind::mark},
                         {"frobnicate", kind::unknown}, {"", kind::unknown},
                         {"TOP", kind::unknown}}) {
    SCOPED_TRACE(line);
    EXPECT_EQ(parse_admin_request(line).k, k);
  }
}

TEST(AdminRequest, WordsAreSplitOnAnyWhiteSpaceAndExtraWordsIgnored) {
  auto r = parse_admin_request("  kvm\t g1 \r");
  EXPECT_EQ(r.k, kind::kvm);
  EXPECT_EQ(r.vm, "g1");
  r = parse_admin_request("views 3 and more");
  EXPECT_EQ(r.vm, "3");
  EXPECT_EQ(format_admin_request(r), "views 3");
  r = parse_admin_request("top g1");
  EXPECT_EQ(r.k, kind::top);
  EXPECT_EQ(r.vm, "") << "top takes no VM";
  r = parse_admin_request("stats");
  EXPECT_EQ(r.k, kind::stats);
  EXPECT_EQ(r.vm, "") << "the daemon answers: no running VM named ''";
}

TEST(AdminRequest, MarkValueIsAFiniteNumberAsAWhole) {
  auto r = parse_admin_request("mark g1 2.5");
  EXPECT_EQ(r.vm, "g1");
  ASSERT_TRUE(r.value);
  EXPECT_EQ(*r.value, 2.5);
  EXPECT_EQ(*parse_admin_request("mark g1 -1e3").value, -1000);
  const std::vector<std::string> bads = {"mark g1",       "mark g1 2x",    "mark g1 nan",
                                         "mark g1 inf",   "mark g1 1e999", "mark g1 ,5",
                                         std::string("mark g1 1\0x", 11)};
  for (const auto& bad : bads) {
    SCOPED_TRACE(bad);
    auto b = parse_admin_request(bad);
    EXPECT_EQ(b.k, kind::mark);
    EXPECT_FALSE(b.value) << b.value_text;
  }
  EXPECT_EQ(admin_bad_mark_value_error(parse_admin_request("mark g1 2x")),
            "error mark VM VALUE: '2x' is not a number");
}

TEST(AdminRequest, UnknownRequestErrorListsTheRequests) {
  EXPECT_EQ(admin_unknown_request_error(parse_admin_request("frob g1")),
            "error unknown request 'frob' (top, vms, sessions, kvm VM, stats VM, views [VM], "
            "mark VM VALUE)");
}

TEST(AdminRequest, CanonicalLineParsesBackToTheSameRequest) {
  for (const char* line : {"", "top", "vms x", "kvm  g1", "mark g1 7 8", "mark g1", "x y z"}) {
    SCOPED_TRACE(line);
    auto r = parse_admin_request(line);
    EXPECT_EQ(parse_admin_request(format_admin_request(r)), r);
  }
}

// The admin_request fuzzer's seeds: "ok-" ones are requests the daemon
// answers (a mark with its value), "bad-" ones are refused.
TEST(AdminRequest, FuzzSeedsParseAsNamed) {
  namespace fs = std::filesystem;
  int n = 0;
  for (const auto& ent : fs::directory_iterator(MAGNET_SOURCE_DIR "/fuzz/corpus/admin_request")) {
    const std::string name = ent.path().filename();
    SCOPED_TRACE(name);
    std::ifstream f(ent.path(), std::ios::binary);
    std::string line((std::istreambuf_iterator<char>(f)), {});
    auto r = parse_admin_request(line);
    const bool ok = r.k != kind::unknown && (r.k != kind::mark || r.value);
    EXPECT_EQ(ok, name.rfind("ok-", 0) == 0) << "'" << line << "'";
    ++n;
  }
  EXPECT_GE(n, 10);
}

}  // namespace
}  // namespace magnet::host
