// The daemon's query socket: peer credentials checked by the daemon itself
// (not only the file's mode), a live daemon's socket never taken over, and
// accepting that goes on after accept errors.
#include <gtest/gtest.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "magnet/admin/request.h"
#include "proc.h"

namespace magnet {
namespace {

using test::child;
using test::run;
using host::admin_unknown_request_error;
using host::parse_admin_request;

constexpr uid_t kNobody = 65534;
constexpr gid_t kReaders = 54321;  // a gid no account of this machine has

// One request as @uid/@gid (a forked child drops its privileges first);
// returns the reply line, or "connect: ERR".
std::string query_as(uid_t uid, gid_t gid, const std::string& sock, const std::string& line) {
  int p[2];
  if (pipe(p) != 0) return "pipe";
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::string out;
    if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
      out = "setuid failed";
    } else {
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un sa{};
      sa.sun_family = AF_UNIX;
      std::strncpy(sa.sun_path, sock.c_str(), sizeof sa.sun_path - 1);
      if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
        out = std::string("connect: ") + std::strerror(errno);
      } else {
        std::string req = line + "\n";
        (void)!write(fd, req.data(), req.size());
        char buf[4096];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0) {
          out.append(buf, static_cast<size_t>(n));
          if (out.find('\n') != std::string::npos) break;
        }
      }
    }
    (void)!write(p[1], out.data(), out.size());
    _exit(0);
  }
  close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(p[0]);
  waitpid(pid, nullptr, 0);
  return out;
}

std::vector<std::string> daemon_args(const std::string& sock) {
  return {MAGNET_BIN, "host", "--uri", "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
          "--socket", sock, "--probes", "net.dev", "--no-deliver", "--duration", "60"};
}

TEST(AdminSocket, OnlyRootOrTheReadOnlyGroupGetAnswersWhateverTheFileMode) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads probes, switches users)";
  const std::string sock = "/tmp/magnet-admin-" + std::to_string(getpid()) + ".sock";
  auto args = daemon_args(sock);
  args.insert(args.end(), {"--socket-group", std::to_string(kReaders)});
  child d(args);
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  struct stat st;
  ASSERT_EQ(stat(sock.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, kReaders);
  // The file's mode keeps strangers out...
  EXPECT_EQ(query_as(kNobody, kNobody, sock, "top").rfind("connect: Permission denied", 0), 0u);
  // ...and if it were wrong, the daemon itself still checks who asks.
  ASSERT_EQ(chmod(sock.c_str(), 0666), 0);
  auto stranger = query_as(kNobody, kNobody, sock, "top");
  EXPECT_EQ(stranger.rfind("error permission denied", 0), 0u) << stranger;
  EXPECT_TRUE(d.wait_for_stderr("[admin.denied] uid 65534")) << d.stderr_text();
  // The read-only group reads, and cannot change what VMs receive.
  auto reader = query_as(kNobody, kReaders, sock, "top");
  EXPECT_EQ(reader.rfind("ok {", 0), 0u) << reader;
  auto mark = query_as(kNobody, kReaders, sock, "mark g1 1");
  EXPECT_EQ(mark.rfind("error mark changes what a VM receives: root only", 0), 0u) << mark;
  auto root = query_as(0, 0, sock, "mark nosuch 1");
  EXPECT_EQ(root.rfind("error no running VM named 'nosuch'", 0), 0u) << root;
  // The daemon reads requests with parse_admin_request (the fuzzed parser)
  // and answers in its words: any white space between words, extra words
  // after a request without a VM ignored, an unknown request named.
  auto spaced = query_as(0, 0, sock, "\t top\t extra");
  EXPECT_EQ(spaced.rfind("ok {", 0), 0u) << spaced;
  auto frob = query_as(0, 0, sock, "frob g1");
  EXPECT_EQ(frob, admin_unknown_request_error(parse_admin_request("frob g1")) + "\n") << frob;
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
}

TEST(AdminSocket, ALiveDaemonsSocketIsNeverTakenOverButAStaleOneIs) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string sock = "/tmp/magnet-admin2-" + std::to_string(getpid()) + ".sock";
  {  // A stale socket file: bound by a process that is gone.
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, sock.c_str(), sizeof sa.sun_path - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    close(fd);
  }
  child first(daemon_args(sock));
  ASSERT_TRUE(first.wait_for_stderr("[started]")) << first.stderr_text();
  auto second = run(daemon_args(sock), 30);
  EXPECT_EQ(second.status, 1);
  EXPECT_NE(second.err.find("another magnet host (pid " + std::to_string(first.pid()) + ") serves " + sock),
            std::string::npos)
      << second.err;
  auto top = run({MAGNET_BIN, "top", "--socket", sock, "--json", "--count", "1"});
  EXPECT_EQ(top.status, 0) << "the first daemon still answers: " << top.err;
  EXPECT_EQ(first.stop(SIGTERM), 0) << first.stderr_text();
}

TEST(AdminSocket, AcceptingGoesOnAfterAcceptErrors) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string sock = "/tmp/magnet-admin3-" + std::to_string(getpid()) + ".sock";
  child d(daemon_args(sock));
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  // Few fds left to the daemon: idle clients use them up, so accept fails.
  auto lim = run({"prlimit", "--pid", std::to_string(d.pid()), "--nofile=64:64"});
  ASSERT_EQ(lim.status, 0) << lim.err;
  struct fds {  // closed however the test ends
    std::vector<int> v;
    ~fds() { close_all(); }
    void close_all() {
      for (int fd : v) close(fd);
      v.clear();
    }
  } idle;
  for (int i = 0; i < 80; ++i) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, sock.c_str(), sizeof sa.sun_path - 1);
    ASSERT_GE(fd, 0);
    idle.v.push_back(fd);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  }
  EXPECT_TRUE(d.wait_for_stderr("[admin.accept_error]")) << d.stderr_text();
  idle.close_all();
  // Idle clients are dropped after the deadline; then answers come again.
  bool answered = false;
  for (int i = 0; i < 40 && !answered; ++i) {
    auto top = run({MAGNET_BIN, "top", "--socket", sock, "--json", "--count", "1"}, 10);
    answered = top.status == 0;
    if (!answered) usleep(250000);
  }
  EXPECT_TRUE(answered) << d.stderr_text();
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
}

}  // namespace
}  // namespace magnet
