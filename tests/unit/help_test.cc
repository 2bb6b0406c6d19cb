// The command lines of every program: --help exits 0 with the usage on
// standard output (a pipe to a pager or grep sees it), a wrong option still
// exits 2 with the usage on standard error; magnet's -v anywhere.
#include <gtest/gtest.h>
#include <unistd.h>

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

TEST(CliVerbose, AnywhereOnTheCommandLineAndAsManyAsWanted) {
  const std::string missing = "/nonexistent/magnet-verbose-" + std::to_string(getpid()) + ".mtr";
  const std::vector<std::vector<std::string>> lines = {
      {MAGNET_BIN, "dump", missing, "-v"},   {MAGNET_BIN, "-vvv", "dump", missing},
      {MAGNET_BIN, "dump", "-vv", missing},  {MAGNET_BIN, "-v", "dump", missing, "-v", "-v", "-v"},
      {MAGNET_BIN, "--verbose", "dump", missing, "--verbose"},
  };
  for (const auto& argv : lines) {
    auto r = run(argv, 10);
    std::string what;
    for (size_t i = 1; i < argv.size(); ++i) what += argv[i] + " ";
    what += ": status " + std::to_string(r.status) + ", stderr: " + r.err;
    // Exit 1 naming the missing file: the -v's were taken, the command ran.
    EXPECT_EQ(r.status, 1) << what;
    EXPECT_NE(r.err.find(missing), std::string::npos) << what;
    EXPECT_EQ(r.err.find("unknown option"), std::string::npos) << what;
  }
  auto r = run({MAGNET_BIN, "host", "-v", "--help"}, 10);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Usage: magnet host", 0), 0u) << r.out;
}

}  // namespace
