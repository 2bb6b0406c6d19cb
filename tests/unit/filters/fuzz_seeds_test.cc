// The seed corpora of the filter_expr and view_yaml fuzzers stay meaningful
// as the language and the view format evolve: "ok-" seeds are accepted,
// "bad-" ones refused with a message.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "magnet/filters/config.h"
#include "magnet/filters/engine.h"
#include "magnet/filters/predicate.h"

namespace magnet::filters {
namespace {
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

TEST(FuzzSeeds, FilterExpressionsParseAsNamed) {
  int n = 0;
  for (const auto& ent : fs::directory_iterator(MAGNET_SOURCE_DIR "/fuzz/corpus/filter_expr")) {
    const std::string name = ent.path().filename();
    SCOPED_TRACE(name);
    std::string s = slurp(ent.path());
    const std::string expr = s.substr(0, s.find('\0'));  // then record material
    auto p = predicate::parse(expr);
    if (name.rfind("ok-", 0) == 0) {
      EXPECT_TRUE(p) << expr << ": " << p.err().message;
    } else {
      EXPECT_FALSE(p) << expr;
    }
    ++n;
  }
  EXPECT_GE(n, 20);
}

TEST(FuzzSeeds, ViewFilesLoadAsNamed) {
  int n = 0;
  for (const auto& ent : fs::directory_iterator(MAGNET_SOURCE_DIR "/fuzz/corpus/view_yaml")) {
    const std::string name = ent.path().filename();
    SCOPED_TRACE(name);
    auto v = parse_views(slurp(ent.path()));
    std::string err = v ? "" : v.err().message;
    if (v) {
      engine e;
      if (auto s = add_views(e, *v); !s) err = s.err().message;
    }
    if (name.rfind("ok-", 0) == 0) {
      EXPECT_EQ(err, "");
    } else {
      EXPECT_NE(err, "") << "a bad view file was accepted";
    }
    ++n;
  }
  EXPECT_GE(n, 15);
}

}  // namespace
}  // namespace magnet::filters
