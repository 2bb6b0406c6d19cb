#include <gtest/gtest.h>

#include "magnet/cli.h"

namespace magnet::cli {
namespace {

TEST(Cli, Sizes) {
  EXPECT_EQ(*parse_size("4096"), 4096u);
  EXPECT_EQ(*parse_size("64K"), 65536u);
  EXPECT_EQ(*parse_size("16M"), 16u << 20);
  EXPECT_EQ(*parse_size("1G"), 1u << 30);
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("abc"));
  EXPECT_FALSE(parse_size("12Q"));
  EXPECT_FALSE(parse_size("0"));
  EXPECT_FALSE(parse_size("-5"));
  EXPECT_FALSE(parse_size("99999999G"));
}

TEST(Cli, Durations) {
  EXPECT_EQ(*parse_duration_ns("2"), 2'000'000'000u);
  EXPECT_EQ(*parse_duration_ns("2.5s"), 2'500'000'000u);
  EXPECT_EQ(*parse_duration_ns("500ms"), 500'000'000u);
  EXPECT_EQ(*parse_duration_ns("100us"), 100'000u);
  EXPECT_FALSE(parse_duration_ns("0"));
  EXPECT_FALSE(parse_duration_ns("-1"));
  EXPECT_FALSE(parse_duration_ns("5 parsecs"));
  EXPECT_FALSE(parse_duration_ns("nan"));
}

TEST(Cli, Counts) {
  EXPECT_EQ(*parse_count("10"), 10u);
  EXPECT_FALSE(parse_count("0"));
  EXPECT_FALSE(parse_count("1.5"));
  EXPECT_FALSE(parse_count("ten"));
  EXPECT_FALSE(parse_count("-3"));
}

TEST(Cli, ArgsConsumeOptionsAndRejectUnknownOnes) {
  args a("record", {"-o", "f.mtr", "--probes=net", "--quiet", "pos"});
  EXPECT_EQ(a.value("--output", "-o"), "f.mtr");
  EXPECT_EQ(a.value("--probes", "-p"), "net");
  EXPECT_TRUE(a.flag("--quiet", "-q"));
  EXPECT_EQ(a.finish(1, 1), std::vector<std::string>{"pos"});

  args b("record", {"--bogus"});
  EXPECT_THROW(b.finish(0, 0), usage_error);
  args c("record", {"-o"});
  EXPECT_THROW(c.value("--output", "-o"), usage_error);
  args d("dump", {});
  EXPECT_THROW(d.finish(1, 1, "trace FILE"), usage_error);
  args e("dump", {"a", "b"});
  EXPECT_THROW(e.finish(1, 1), usage_error);
}

TEST(Cli, OptionalValueAloneOrWithItsValue) {
  args a("host", {"--http", "--socket", "s"});
  EXPECT_EQ(a.optional_value("--http"), "");
  EXPECT_EQ(a.value("--socket"), "s");
  EXPECT_TRUE(a.finish(0, 0).empty());
  args b("host", {"--socket", "s", "--http"});
  EXPECT_EQ(b.optional_value("--http"), "");
  args c("host", {"--http", "0.0.0.0:9000", "-v"});
  EXPECT_EQ(c.optional_value("--http"), "0.0.0.0:9000");
  EXPECT_TRUE(c.flag("-v"));
  args d("host", {"--http=127.0.0.1:1"});
  EXPECT_EQ(d.optional_value("--http"), "127.0.0.1:1");
  args e("host", {"--http-tokens", "f"});
  EXPECT_EQ(e.optional_value("--http"), std::nullopt) << "another option that starts alike";
  EXPECT_EQ(e.value("--http-tokens"), "f");
  args f("host", {"--", "--http"});
  EXPECT_EQ(f.optional_value("--http"), std::nullopt) << "after --";
}

TEST(Cli, VerbosityAnywhereOnTheCommandLine) {
  struct verbosity_case {
    std::vector<std::string> in;
    int level;
    std::vector<std::string> left;
  };
  const std::vector<verbosity_case> cases = {
      {{"host"}, 1, {"host"}},
      {{"-v", "host"}, 2, {"host"}},
      {{"host", "-v"}, 2, {"host"}},
      {{"host", "--socket", "s", "-vv"}, 3, {"host", "--socket", "s"}},
      {{"--verbose", "top"}, 2, {"top"}},
      {{"-vvv", "stat"}, 4, {"stat"}},
      {{"-v", "stat", "-v", "-v"}, 4, {"stat"}},
      {{"-vvvvvv", "stat", "-v"}, 4, {"stat"}},  // more than the most: the most
      {{"host", "--vsock", "on", "--vm-quota", "5", "-vx"},
       1, {"host", "--vsock", "on", "--vm-quota", "5", "-vx"}},  // options that only start alike
      {{"dump", "--", "-v"}, 1, {"dump", "--", "-v"}},           // after --: a positional
      {{"record", "--filter=-v"}, 1, {"record", "--filter=-v"}},
  };
  for (auto c : cases) {
    std::string what;
    for (const auto& a : c.in) what += a + " ";
    EXPECT_EQ(take_verbosity(c.in), c.level) << what;
    EXPECT_EQ(c.in, c.left) << what;
  }
}

}  // namespace
}  // namespace magnet::cli
