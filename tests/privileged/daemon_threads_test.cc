// `magnet host`'s threads at work together: the registry thread follows
// libvirt (its test driver, test:///default, inside the daemon: one running
// domain "test") and hands VMs to the io_context thread, which serves many
// query clients at once and reloads its views on SIGHUP meanwhile.  Every
// answer is whole and right.  tools/test runs it under ThreadSanitizer too.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "proc.h"

namespace magnet {
namespace {

using test::child;
using test::admin_query;


TEST(DaemonThreads, ManyQueriesAndReloadsWhileTheRegistryFollowsLibvirt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string sock = "/tmp/magnet-threads-" + std::to_string(getpid()) + ".sock";
  child d({MAGNET_BIN, "-v", "host", "--uri", "test:///default", "--socket", sock, "--probes",
           "net.dev,sched", "--no-deliver", "--duration", "120"});
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  ASSERT_TRUE(d.wait_for_stderr("[vm.up] test id 1")) << d.stderr_text();

  const std::vector<std::string> requests = {"top",      "vms",        "views",    "views test",
                                             "stats 1",  "kvm test",   "sessions", "mark test 1",
                                             "nonsense", "stats nosuch"};
  constexpr int kClients = 8, kRounds = 25;
  std::atomic<int> ok{0}, bad{0};
  std::vector<std::string> first_bad(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      for (int r = 0; r < kRounds; ++r)
        for (const auto& req : requests) {
          std::string a = admin_query(sock, req);
          bool expect_error = req == "nonsense" || req == "stats nosuch";
          bool good = a.back() == '\n' && a.rfind(expect_error ? "error " : "ok ", 0) == 0 &&
                      (req != "vms" || a.find("\"name\":\"test\"") != std::string::npos);
          if (good) {
            ++ok;
          } else {
            ++bad;
            if (first_bad[c].empty()) first_bad[c] = req + " -> " + a;
          }
        }
    });
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
    usleep(200000);
  }
  for (auto& t : clients) t.join();
  // A mark answers with the moment of its change on this host's clock (bench/deliver times from it).
  timespec before{}, after{};
  clock_gettime(CLOCK_MONOTONIC, &before);
  const std::string mark = admin_query(sock, "mark test 2");
  clock_gettime(CLOCK_MONOTONIC, &after);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(mark, m, std::regex(R"(ok \{"changed_ns":(\d+)\}\n)"))) << mark;
  const auto ns = [](const timespec& t) { return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + t.tv_nsec; };
  const uint64_t changed = std::stoull(m[1]);
  EXPECT_GE(changed, ns(before));
  EXPECT_LE(changed, ns(after));
  std::string why;
  for (const auto& b : first_bad) why += b.empty() ? "" : b + "\n";
  EXPECT_EQ(bad.load(), 0) << why;
  EXPECT_EQ(ok.load(), kClients * kRounds * static_cast<int>(requests.size()));
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
  EXPECT_EQ(d.stderr_text().find("ThreadSanitizer"), std::string::npos) << d.stderr_text();
}

}  // namespace
}  // namespace magnet
