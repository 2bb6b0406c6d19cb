// The one duration syntax of every program (magnet/cli.h): units, bare
// numbers as seconds or refused, and errors that quote the value.
#include <gtest/gtest.h>

#include <string>

#include "magnet/cli.h"
#include "magnet/cli_c.h"

namespace magnet::cli {
namespace {

TEST(Duration, EveryUnit) {
  EXPECT_EQ(*parse_duration_ns("250ns"), 250u);
  EXPECT_EQ(*parse_duration_ns("100us"), 100'000u);
  EXPECT_EQ(*parse_duration_ns("500ms"), 500'000'000u);
  EXPECT_EQ(*parse_duration_ns("2.5s"), 2'500'000'000u);
  EXPECT_EQ(*parse_duration_ns("1min"), 60'000'000'000u);
  EXPECT_EQ(*parse_duration_ns("2m"), 120'000'000'000u);
}

TEST(Duration, ABareNumberIsSecondsOrRefusedWhereTheOptionTookMilliseconds) {
  EXPECT_EQ(*parse_duration_ns("10"), 10'000'000'000u);
  EXPECT_EQ(*parse_duration_ns("10", bare_number::seconds), 10'000'000'000u);
  auto r = parse_duration_ns("100", bare_number::refused);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("'100' needs a unit"), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find("100ms"), std::string::npos) << r.err().message;
  EXPECT_EQ(*parse_duration_ns("100ms", bare_number::refused), 100'000'000u);
}

TEST(Duration, EveryErrorQuotesTheValue) {
  for (const char* bad : {"", "soon", "5 parsecs", "5h", "0", "0ms", "-1", "-2s", "nan", "inf",
                          "1e30s", "0.1ns"}) {
    auto r = parse_duration_ns(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.err().message.find("'" + std::string(bad) + "'"), std::string::npos)
        << bad << ": " << r.err().message;
  }
}

TEST(Duration, NeedNamesTheOption) {
  try {
    (void)need(parse_duration_ns("later"), "--interval");
    FAIL() << "no usage error";
  } catch (const usage_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--interval: 'later' is not a duration", 0), 0u) << e.what();
  }
}

TEST(Duration, TheCProgramsParseTheSameWay) {
  unsigned long long ns = 0;
  char why[160] = "";
  EXPECT_EQ(magnet_cli_duration_ns("250ms", 0, &ns, why, sizeof why), 0);
  EXPECT_EQ(ns, 250'000'000u);
  EXPECT_EQ(magnet_cli_duration_ns("3", 1, &ns, why, sizeof why), 0);
  EXPECT_EQ(ns, 3'000'000'000u);
  EXPECT_EQ(magnet_cli_duration_ns("1000", 0, &ns, why, sizeof why), -1);
  EXPECT_EQ(std::string(why), parse_duration_ns("1000", bare_number::refused).err().message);
  EXPECT_EQ(magnet_cli_duration_ns("x", 1, &ns, why, 8), -1);
  EXPECT_EQ(std::string(why).size(), 7u) << "truncated to the buffer";
}

}  // namespace
}  // namespace magnet::cli
