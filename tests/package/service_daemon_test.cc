// The daemon as systemd runs it (root): READY=1 on $NOTIFY_SOCKET only once
// the query socket answers, STOPPING=1 when it drains, from the daemon's
// own pid (systemd's NotifyAccess=main); and the daemon started with no
// more than the unit's CapabilityBoundingSet attaches every probe it
// attaches with all capabilities, keeps what it keeps and shrinks the
// bounding set itself.  And its settings file (--config): the file's
// settings in force, the command line's over them, the HTTP tokens read
// again on SIGHUP (revoked ones refused, their streams ended; a bad file
// keeps the old ones).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "http.h"
#include "proc.h"

namespace magnet {
namespace {

using test::child;

// An abstract datagram socket, as systemd's notify socket, that reads the
// sender's credentials with each datagram.
struct notify_socket {
  int fd = -1;
  std::string name;
  notify_socket() : name("@magnet-notify-" + std::to_string(getpid())) {
    fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    name.copy(a.sun_path + 1, sizeof a.sun_path - 2, 1);
    const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) ADD_FAILURE() << "bind " << name;
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
    timeval tv{30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~notify_socket() { ::close(fd); }
  // The next datagram and its sender's pid ("" on a timeout).
  std::string receive(pid_t* from) {
    char b[512];
    alignas(cmsghdr) char c[CMSG_SPACE(sizeof(ucred))];
    iovec io{b, sizeof b};
    msghdr m{};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = c;
    m.msg_controllen = sizeof c;
    ssize_t n = ::recvmsg(fd, &m, 0);
    if (n < 0) return "";
    *from = 0;
    for (cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_CREDENTIALS)
        *from = reinterpret_cast<ucred*>(CMSG_DATA(h))->pid;
    return std::string(b, static_cast<size_t>(n));
  }
};

TEST(ServiceDaemon, ReadyOnceTheQuerySocketAnswersAndStoppingWhenItDrains) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  notify_socket ns;
  const std::string sock = "/tmp/magnet-notify-host-" + std::to_string(getpid()) + ".sock";
  child d({"/usr/bin/env", "NOTIFY_SOCKET=" + ns.name, MAGNET_BIN, "host", "--uri", "test:///default",
           "--no-deliver", "--probes", "net.dev", "--socket", sock, "--duration", "60"});
  pid_t from = 0;
  const std::string ready = ns.receive(&from);
  ASSERT_EQ(ready, "READY=1") << d.stderr_text();
  EXPECT_EQ(from, d.pid()) << "systemd takes it from the main process only";
  // Ready means answering: the first query right after it is served.
  const std::string reply = test::admin_query(sock, "top");
  EXPECT_EQ(reply.rfind("ok {", 0), 0u) << reply;
  EXPECT_NE(d.stderr_text().find("[started]"), std::string::npos) << d.stderr_text();

  // One SIGTERM, as systemd sends it; then the daemon's own exit is awaited
  // (stop(0) signals nothing).  A second SIGTERM here raced the daemon's
  // end: once its drain had put the default action back, it killed the
  // daemon (status 143, a fresh machine's CI, 2026-11-27).
  ASSERT_EQ(kill(d.pid(), SIGTERM), 0);
  EXPECT_EQ(ns.receive(&from), "STOPPING=1") << d.stderr_text();
  EXPECT_EQ(d.stop(0), 0) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("[stopped]"), std::string::npos) << d.stderr_text();
}

// CapabilityBoundingSet= of the unit @name, as setpriv writes it:
// "-all,+bpf,...".
std::string unit_bounding_set_for_setpriv(const std::string& name = "magnet.service") {
  std::ifstream f(std::string(MAGNET_SOURCE_DIR) + "/packaging/systemd/" + name + ".in");
  std::string line, out = "-all";
  while (std::getline(f, line)) {
    if (line.rfind("CapabilityBoundingSet=", 0) != 0) continue;
    std::stringstream in(line.substr(line.find('=') + 1));
    for (std::string cap; in >> cap;) {
      std::transform(cap.begin(), cap.end(), cap.begin(), [](unsigned char ch) { return std::tolower(ch); });
      out += ",+" + cap.substr(4);  // cap_
    }
  }
  return out;
}

// The daemon's "[started] probes ..." summary, and its kept capabilities.
struct started {
  std::string probes, kept, log;
};
started run_daemon(const std::vector<std::string>& prefix) {
  const std::string sock = "/tmp/magnet-bound-host-" + std::to_string(getpid()) + ".sock";
  std::vector<std::string> argv = prefix;
  for (const char* a : {MAGNET_BIN, "host", "--uri", "test:///default", "--vsock", "off", "--socket"})
    argv.push_back(a);
  argv.push_back(sock);
  child d(argv);
  started s;
  bool up = d.wait_for_stderr("[started]", 60);
  s.log = d.stderr_text();
  EXPECT_TRUE(up) << s.log;
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
  std::smatch m;
  if (std::regex_search(s.log, m, std::regex(R"(\[started\] probes ([^;]*);)"))) s.probes = m[1];
  if (std::regex_search(s.log, m, std::regex(R"(\[privileges\] capabilities kept: ([^\n]*))"))) s.kept = m[1];
  return s;
}

TEST(ServiceDaemon, WithOnlyTheUnitsBoundingSetItAttachesWhatItAttachesWithAll) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string bound = unit_bounding_set_for_setpriv();
  ASSERT_NE(bound, "-all") << "no CapabilityBoundingSet in the unit";
  const started all = run_daemon({});
  const started unit = run_daemon({"setpriv", "--bounding-set", bound});
  ASSERT_FALSE(all.probes.empty()) << all.log;
  EXPECT_EQ(unit.probes, all.probes) << "setpriv --bounding-set " << bound << "\n" << unit.log;
  EXPECT_EQ(unit.kept, all.kept) << unit.log;
  EXPECT_EQ(unit.kept.find("bounding set stays"), std::string::npos) << unit.log;
}


// A GET of /api/vms with @token: the HTTP status (0: no reply).
int api_status(int port, const std::string& token) {
  const std::string out = test::http_exchange(
      port, "GET /api/vms HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token +
                "\r\nConnection: close\r\n\r\n");
  return out.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(out.c_str() + 9) : 0;
}

// An event stream opened with @token; ended() waits for the server to close it.
struct event_stream {
  int fd = -1;
  std::string head;
  event_stream(int port, const std::string& token) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    const std::string req = "GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token + "\r\n\r\n";
    (void)!::write(fd, req.data(), req.size());
    char b[4096];
    while (head.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::read(fd, b, sizeof b);
      if (n <= 0) break;
      head.append(b, static_cast<size_t>(n));
    }
  }
  ~event_stream() { ::close(fd); }
  bool ended() {
    char b[4096];
    for (;;) {
      ssize_t n = ::read(fd, b, sizeof b);
      if (n == 0) return true;
      if (n < 0) return false;  // the 10 s timeout: still open
    }
  }
};

void write_file(const std::string& p, const std::string& text, mode_t mode) {
  std::ofstream(p, std::ios::trunc) << text;
  ::chmod(p.c_str(), mode);
}

TEST(ServiceDaemon, SettingsFromTheFileTheCommandLineOverThemTokensReadAgainOnSighup) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string dir = "/tmp/magnet-config-daemon-" + std::to_string(getpid());
  ::mkdir(dir.c_str(), 0700);
  const std::string tokens = dir + "/tokens", conf = dir + "/magnet.conf";
  const std::string file_sock = dir + "/file.sock", cli_sock = dir + "/cli.sock";
  const std::string one = "tok-one-0123456789abcdef", two = "tok-two-0123456789abcdef";
  write_file(tokens, one + " all\n", 0600);
  write_file(conf,
             "# as an operator would\nuri = test:///default\nno-deliver = yes\nprobes = net.dev\n"
             "socket = " + file_sock + "\nhttp = 127.0.0.1:0\nhttp-tokens = " + tokens + "\nduration = 60\n",
             0644);
  child d({MAGNET_BIN, "host", "--config", conf, "--socket", cli_sock});
  ASSERT_TRUE(d.wait_for_stderr("[started]", 60)) << d.stderr_text();
  std::smatch m;
  const std::string log = d.stderr_text();
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"(\[http\] dashboard on http://127\.0\.0\.1:(\d+)/)"))) << log;
  const int port = std::stoi(m[1]);
  EXPECT_NE(log.find("probes net.dev"), std::string::npos) << "the file's probes: " << log;
  EXPECT_EQ(test::admin_query(cli_sock, "top").rfind("ok {", 0), 0u) << "the command line's socket";
  EXPECT_NE(::access(file_sock.c_str(), F_OK), 0) << "the file's socket, overridden";
  EXPECT_EQ(api_status(port, one), 200);
  EXPECT_EQ(api_status(port, two), 401);

  event_stream s(port, one);
  ASSERT_EQ(s.head.rfind("HTTP/1.1 200", 0), 0u) << s.head;
  write_file(tokens, two + " all\n", 0600);
  ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(d.wait_for_stderr("[tokens.reloaded]")) << d.stderr_text();
  EXPECT_TRUE(s.ended()) << "a stream the old token opened goes on";
  EXPECT_EQ(api_status(port, one), 401) << "revoked";
  EXPECT_EQ(api_status(port, two), 200) << "added";

  write_file(tokens, one + " all\n", 0644);  // others may read it: refused
  ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(d.wait_for_stderr("[tokens.rejected]")) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("lets others read"), std::string::npos) << d.stderr_text();
  EXPECT_EQ(api_status(port, two), 200) << "the old tokens stay";
  EXPECT_EQ(api_status(port, one), 401);
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
  for (const auto& f : {tokens, conf}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}


// What the agent attaches (its "[agent.probes] attached ..." line), run
// without a host (no vsock: never on this machine) for a moment.
std::string agent_probes(const std::vector<std::string>& prefix) {
  const std::string sock = "/tmp/magnet-bound-agent-" + std::to_string(getpid()) + ".sock";
  std::vector<std::string> argv = prefix;
  for (const char* a : {MAGNET_AGENT_BIN, "run", "--host", "none", "--no-journey", "--duration", "30s", "--socket"})
    argv.push_back(a);
  argv.push_back(sock);
  child d(argv);
  const bool up = d.wait_for_stderr("[agent.probes]", 30);
  const std::string log = d.stderr_text();
  EXPECT_TRUE(up) << log;
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
  std::smatch m;
  return std::regex_search(log, m, std::regex(R"(\[agent\.probes\] ([^\n]*))")) ? std::string(m[1]) : "";
}

TEST(ServiceAgent, WithOnlyTheUnitsBoundingSetItAttachesWhatItAttachesWithAll) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string bound = unit_bounding_set_for_setpriv("magnet-agent.service");
  ASSERT_NE(bound, "-all") << "no CapabilityBoundingSet in the agent's unit";
  const std::string all = agent_probes({});
  ASSERT_EQ(all.rfind("attached ", 0), 0u) << all;
  EXPECT_EQ(agent_probes({"setpriv", "--bounding-set", bound}), all) << "setpriv --bounding-set " << bound;
}

}  // namespace
}  // namespace magnet
