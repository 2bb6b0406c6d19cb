// The daemon's clients (magnet top, views, sessions, stats) against a
// stand-in daemon that answers with JSON of the wrong shape: each command
// names itself and the problem and exits 1, never dies of an exception.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "proc.h"

namespace {

using magnet::test::run;

// A unix socket answering every request line with @reply, until destroyed.
class fake_daemon {
 public:
  explicit fake_daemon(std::string reply) : reply_(std::move(reply)) {
    path_ = "/tmp/magnet-fake-daemon-" + std::to_string(getpid()) + ".sock";
    fd_ = magnet::test::listen_unix(path_);
    if (fd_ < 0) ADD_FAILURE() << "cannot listen on " << path_;
    thread_ = std::thread([this] { serve(); });
  }
  ~fake_daemon() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  void serve() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) break;
      char b[512];
      std::string line;
      ssize_t n;
      while (line.find('\n') == std::string::npos && (n = ::read(c, b, sizeof b)) > 0) line.append(b, n);
      const std::string out = reply_ + "\n";
      (void)!::write(c, out.data(), out.size());
      ::close(c);
    }
  }
  std::string reply_, path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct reply_case {
  std::vector<std::string> args;  // the command and its arguments
  std::string reply;              // what the stand-in daemon answers
};

}  // namespace

TEST(CliReplies, AReplyOfTheWrongShapeIsAnErrorNamingTheCommand) {
  const std::vector<reply_case> cases = {
      {{"top", "--count", "1"}, R"(ok {"vms":[{"vm":"x","name":5}]})"},
      {{"top", "--count", "1"}, R"(ok {"vms":7})"},
      {{"top", "--count", "1"}, "ok this is not JSON"},
      {{"top", "--count", "1"}, R"(ok {"vms":[{"vm":1,"name":"g1","power_watts":"lots"}]})"},
      {{"views"}, R"(ok {"views":"none"})"},
      {{"views"}, R"(ok [{"vm":"one","windows":3}])"},
      {{"sessions"}, R"(ok {"sessions":[{"vm":"a","frames":"b"}]})"},
      {{"sessions"}, R"(ok [1,2,3])"},
      {{"stats", "g1"}, R"(ok {"stats":[{"name":1,)"},
  };
  for (const auto& c : cases) {
    fake_daemon d(c.reply);
    std::vector<std::string> argv = {MAGNET_BIN};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), {"--socket", d.path()});
    auto r = run(argv, 20);
    const std::string what = c.args[0] + " answered " + c.reply + ": status " +
                             std::to_string(r.status) + ", stderr: " + r.err;
    EXPECT_EQ(r.status, 1) << what;
    EXPECT_EQ(r.err.rfind("magnet " + c.args[0] + ": ", 0), 0u) << what;
  }
}

// top's W: each VM's power_watts to a tenth of a watt, '-' where the daemon
// says null (no power source) or says nothing (an older daemon).
TEST(CliReplies, TopShowsEachVmsWattsOrADash) {
  fake_daemon d(R"(ok {"vms":[{"vm":1,"name":"g1","power_watts":12.34},)"
                R"({"vm":2,"name":"g2","power_watts":null},{"vm":3,"name":"g3"}]})");
  auto r = run({MAGNET_BIN, "top", "--count", "1", "--socket", d.path()}, 20);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(r.out.substr(at, nl - at));
  ASSERT_GE(lines.size(), 4u) << r.out;
  auto last = [](const std::string& l) { return l.substr(l.find_last_of(' ') + 1); };
  EXPECT_EQ(last(lines[0]), "W") << lines[0];
  EXPECT_EQ(lines[0].size(), lines[1].size()) << "the column under its header";
  EXPECT_EQ(last(lines[1]), "12.3") << lines[1];
  EXPECT_EQ(last(lines[2]), "-") << lines[2];
  EXPECT_EQ(last(lines[3]), "-") << lines[3];
}
