// Every query to the daemon is bounded: a stuck daemon (its socket accepts
// and never answers) makes query_daemon and each command that queries it
// fail with an error naming the socket and the bound, never hang.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "magnet/admin/client.h"
#include "proc.h"

namespace {

using magnet::test::run;
using namespace std::chrono_literals;

// A unix socket that accepts every connection and never reads or writes;
// connections stay open until it is destroyed.
class silent_daemon {
 public:
  silent_daemon() {
    path_ = "/tmp/magnet-silent-daemon-" + std::to_string(getpid()) + ".sock";
    fd_ = magnet::test::listen_unix(path_);
    if (fd_ < 0) ADD_FAILURE() << "cannot listen on " << path_;
    thread_ = std::thread([this] {
      for (int c; (c = ::accept(fd_, nullptr, nullptr)) >= 0;) {
        ++accepted_;
        held_.push_back(c);
      }
    });
  }
  ~silent_daemon() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    for (int c : held_) ::close(c);
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }
  int accepted() const { return accepted_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::atomic<int> accepted_{0};
  std::vector<int> held_;
  std::thread thread_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(AdminClient, AQueryToADaemonThatNeverAnswersEndsAtItsBound) {
  silent_daemon d;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = magnet::host::query_daemon(d.path(), "top", 300ms);
  const double took = seconds_since(t0);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.body.find(d.path()), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("within 300ms"), std::string::npos) << r.body;
  EXPECT_GE(took, 0.29);
  EXPECT_LT(took, 2.0);
  EXPECT_EQ(d.accepted(), 1) << "the daemon took the connection: the wait was for its reply";
}

TEST(AdminClient, NoDaemonIsStillCannotReach) {
  auto r = magnet::host::query_daemon("/nonexistent/magnet-admin.sock", "top", 300ms);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.body.find("cannot reach the host daemon at /nonexistent/magnet-admin.sock"),
            std::string::npos) << r.body;
}

TEST(AdminClient, DurationText) {
  EXPECT_EQ(magnet::host::duration_text(5s), "5s");
  EXPECT_EQ(magnet::host::duration_text(500ms), "500ms");
  EXPECT_EQ(magnet::host::duration_text(1500ms), "1500ms");
  EXPECT_EQ(magnet::host::duration_text(250us), "250us");
  EXPECT_EQ(magnet::host::duration_text(7ns), "7ns");
}

// Each command that queries the daemon: --timeout bounds it, exit 1 with
// the command's name, the socket and the bound.
TEST(AdminClient, EveryCommandThatQueriesTheDaemonHasATimeout) {
  const std::vector<std::vector<std::string>> commands = {
      {"top", "--count", "1"}, {"views"}, {"sessions"}, {"stats", "g1"}, {"mark", "g1", "7"}};
  for (const auto& c : commands) {
    silent_daemon d;
    std::vector<std::string> argv = {MAGNET_BIN};
    argv.insert(argv.end(), c.begin(), c.end());
    argv.insert(argv.end(), {"--socket", d.path(), "--timeout", "400ms"});
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run(argv, 20);
    const double took = seconds_since(t0);
    const std::string what = c[0] + ": status " + std::to_string(r.status) + " after " +
                             std::to_string(took) + " s, stderr: " + r.err;
    EXPECT_EQ(r.status, 1) << what;
    EXPECT_EQ(r.err.rfind("magnet " + c[0] + ": the host daemon at " + d.path() +
                              " did not answer within 400ms", 0),
              0u) << what;
    EXPECT_LT(took, 5.0) << what;
  }
}

TEST(AdminClient, TheDefaultBoundIsFiveSeconds) {
  silent_daemon d;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run({MAGNET_BIN, "sessions", "--socket", d.path()}, 30);
  const double took = seconds_since(t0);
  EXPECT_EQ(r.status, 1) << "after " << took << " s: " << r.err;
  EXPECT_NE(r.err.find("did not answer within 5s"), std::string::npos) << r.err;
  EXPECT_GE(took, 4.9);
  EXPECT_LT(took, 15.0);
}

TEST(AdminClient, ABadTimeoutIsAUsageError) {
  for (const char* bad : {"0", "soon", "-1s", "5 parsecs"}) {
    auto r = run({MAGNET_BIN, "top", "--socket", "/nonexistent/x.sock", "--timeout", bad}, 10);
    EXPECT_EQ(r.status, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("--timeout"), std::string::npos) << bad << ": " << r.err;
  }
}

}  // namespace
