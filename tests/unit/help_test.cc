// Every program's --help: exit 0 with its usage on standard output (a
// pipe to a pager or grep sees it); a wrong option still exits 2 with the
// usage on standard error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proc.h"

namespace {

using magnet::test::run;

struct guest_tool {
  std::string name, path;
};

const std::vector<guest_tool> kGuestTools = {
    {"magnet-agent", MAGNET_AGENT_BIN},   {"magnet-watch", MAGNET_WATCH_BIN},
    {"magnet-poll", MAGNET_POLL_BIN},     {"magnet-adapt", MAGNET_ADAPT_BIN},
    {"magnet-adversary", MAGNET_ADVERSARY_BIN}, {"magnet-marker-echo", MAGNET_MARKER_ECHO_BIN},
};

bool starts_with_usage(const std::string& s) {
  return s.rfind("usage: ", 0) == 0 || s.rfind("Usage: ", 0) == 0;
}

TEST(GuestHelp, HelpExitsZeroWithTheUsageOnStandardOutput) {
  for (const auto& t : kGuestTools)
    for (const char* opt : {"--help", "-h"}) {
      auto r = run({t.path, opt}, 10);
      const std::string what = t.name + " " + opt + ": status " + std::to_string(r.status) +
                               ", stdout: " + r.out + ", stderr: " + r.err;
      EXPECT_EQ(r.status, 0) << what;
      EXPECT_TRUE(starts_with_usage(r.out)) << what;
      EXPECT_NE(r.out.find(t.name), std::string::npos) << what;
      EXPECT_TRUE(r.err.empty()) << what;
    }
}

TEST(GuestHelp, AWrongOptionIsStillAUsageError) {
  for (const auto& t : kGuestTools) {
    auto r = run({t.path, "--no-such-option"}, 10);
    const std::string what = t.name + ": status " + std::to_string(r.status) + ", stdout: " +
                             r.out + ", stderr: " + r.err;
    EXPECT_EQ(r.status, 2) << what;
    EXPECT_TRUE(r.out.empty()) << what;
    EXPECT_NE(r.err.find(t.name), std::string::npos) << what;
  }
}

}  // namespace
