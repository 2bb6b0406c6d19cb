// Application marks (issue 24, item 2): MAGNET_ADD in a program, recorded
// with magnet record --usdt, shown by magnet dump as app.add records.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "proc.h"

namespace magnet {
namespace {

using test::run;

bool has_uprobes() {
  struct stat st {};
  return ::stat("/sys/bus/event_source/devices/uprobe/type", &st) == 0;
}

// The app.add lines of `magnet dump`, with the lines naming other events left out.
std::vector<std::string> app_add_lines(const std::string& trace) {
  auto r = run({MAGNET_BIN, "dump", trace});
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<std::string> out;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);)
    if (l.find("app.add") != std::string::npos) out.push_back(l);
  return out;
}

TEST(UsdtMarks, RecordedWithTheirValuesAndPid) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  if (!has_uprobes()) GTEST_SKIP() << "kernel without uprobes";
  const std::string tag = std::to_string(getpid());
  const std::string trace = "/tmp/magnet-usdt-" + tag + ".mtr", go = "/tmp/magnet-usdt-go-" + tag;
  std::remove(go.c_str());
  constexpr int kMarks = 5;
  pid_t app = fork();
  ASSERT_GE(app, 0);
  if (app == 0) {
    execl(MAGNET_USDT_APP_BIN, MAGNET_USDT_APP_BIN, std::to_string(kMarks).c_str(), go.c_str(),
          nullptr);
    _exit(127);
  }
  test::child rec({MAGNET_BIN, "record", "-o", trace, "-p", "proc.exit", "--usdt",
                   std::string(MAGNET_USDT_APP_BIN) + ":" + std::to_string(app)});
  ASSERT_TRUE(rec.wait_for_stderr("magnet: recording")) << rec.stderr_text();
  std::ofstream(go).put('\n');
  int ws = 0;
  ASSERT_EQ(waitpid(app, &ws, 0), app);
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << ws;
  EXPECT_EQ(rec.stop(SIGINT), 0) << rec.stderr_text();
  std::remove(go.c_str());

  auto lines = app_add_lines(trace);
  ASSERT_EQ(lines.size(), size_t{kMarks}) << rec.stderr_text();
  for (int i = 0; i < kMarks; ++i) {
    SCOPED_TRACE(lines[i]);
    EXPECT_NE(lines[i].find("tgid=" + std::to_string(app)), std::string::npos);
    EXPECT_NE(lines[i].find("event_id=" + std::to_string(1000 + i)), std::string::npos);
    EXPECT_NE(lines[i].find("app_abstract_id=7"), std::string::npos);
    EXPECT_TRUE(lines[i].ends_with(" value=" + std::to_string(i * 3)));
  }
  std::remove(trace.c_str());
}

TEST(UsdtMarks, BadBinaryIsAnErrorNamingIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  if (!has_uprobes()) GTEST_SKIP() << "kernel without uprobes";
  auto r = run({MAGNET_BIN, "record", "-o", "/tmp/magnet-usdt-bad.mtr", "-p", "proc.exit",
                "--usdt", "/nonexistent/app", "-d", "1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("--usdt /nonexistent/app: No such file or directory"), std::string::npos)
      << r.err;
  // A binary without magnet:add marks: the error says what it lacks.
  r = run({MAGNET_BIN, "record", "-o", "/tmp/magnet-usdt-bad.mtr", "-p", "proc.exit", "--usdt",
           "/bin/true", "-d", "1"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("--usdt /bin/true: attaching magnet:add"), std::string::npos) << r.err;
}

// `magnet probes` lists app.add as every other probe: how it attaches, or
// why it cannot.
nlohmann::json app_add_probe(const std::vector<std::string>& argv) {
  auto r = run(argv);
  EXPECT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_array())
    for (const auto& p : j)
      if (p.value("probe", "") == "app.add") return p;
  ADD_FAILURE() << "no app.add in " << r.out;
  return {};
}

TEST(UsdtMarks, ProbesListAppAddWithTheReasonWhenUnavailable) {
  if (!has_uprobes()) GTEST_SKIP() << "kernel without uprobes";
  auto p = app_add_probe({MAGNET_BIN, "probes", "--json"});
  EXPECT_EQ(p.value("attach", ""), "uprobe") << p;
  p = app_add_probe({"/usr/bin/env", "MAGNET_DENY_METHODS=uprobe", MAGNET_BIN, "probes", "--json"});
  EXPECT_TRUE(p["attach"].is_null()) << p;
  EXPECT_EQ(p["methods"][0].value("why", ""), "disabled by MAGNET_DENY_METHODS") << p;
}

}  // namespace
}  // namespace magnet
