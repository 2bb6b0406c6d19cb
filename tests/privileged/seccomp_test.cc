// The daemon's syscall filter (host/daemon/src/seccomp.cc; docs/reliability.md,
// "Least privilege"): every thread runs under it once setup is done; a call
// outside the allowlist, made on any thread, ends the daemon with SIGSYS
// and a line naming the call; the daemon's real work (libvirt, a VM's view
// channel, queries, HTTP and its event stream, --link, netfilter links in a
// namespace made later, SIGHUP, the SIGTERM drain) runs under it to the end.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "http.h"
#include "proc.h"

namespace magnet {
namespace {

using test::child;
using test::admin_query;
using test::netfilter_links;
using test::run;

// "Seccomp:" of each thread of @pid (0 none, 2 filter), by thread id.
std::map<pid_t, std::string> seccomp_modes(pid_t pid) {
  std::map<pid_t, std::string> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = opendir(dir.c_str())) {
    while (auto* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(dir + "/" + e->d_name + "/status");
      std::string line;
      while (std::getline(f, line))
        if (line.rfind("Seccomp:\t", 0) == 0) out[std::atoi(e->d_name)] = line.substr(9);
    }
    closedir(d);
  }
  return out;
}


// Reads the dashboard's event stream on 127.0.0.1:@port until @events
// events came (or 10 s passed), then goes; returns how many came.
int read_stream(int port, int events) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int seen = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    const std::string req = "GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    std::string got;
    char buf[4096];
    ssize_t n;
    while (seen < events && (n = read(fd, buf, sizeof buf)) > 0) {
      got.append(buf, static_cast<size_t>(n));
      seen = 0;
      for (size_t at = 0; (at = got.find("event: sample", at)) != std::string::npos; ++at) ++seen;
    }
  }
  close(fd);
  return seen;
}

int tgkill(pid_t pid, pid_t tid, int sig) { return static_cast<int>(syscall(SYS_tgkill, pid, tid, sig)); }

std::vector<std::string> hooked_daemon(const std::string& sock, const std::string& uri) {
  return {MAGNET_TEST_HOOKS_BIN, "-v", "host", "--uri", uri, "--socket", sock, "--probes",
          "net.dev",             "--no-deliver", "--duration", "60"};
}

// The test build's hook (MAGNET_TEST_HOOKS): SIGUSR2 makes the thread that
// receives it call syslog(2), which the allowlist lacks.  On the io thread
// (the main one) and on the registry's (started after the filter went in,
// inheriting it), the daemon dies of SIGSYS and says which call; with
// --no-seccomp the same call returns and the daemon goes on (so it is the
// filter that kills, not the hook).
TEST(Seccomp, AForbiddenCallOnAnyThreadKillsTheDaemonWithSigsysAndSaysWhich) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string sock = "/tmp/magnet-seccomp-" + std::to_string(getpid()) + ".sock";
  {  // The io thread.
    child d(hooked_daemon(sock, "qemu+unix:///system?socket=/nonexistent/libvirt-sock"));
    ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
    EXPECT_NE(d.stderr_text().find("[seccomp] syscall filter on: "), std::string::npos) << d.stderr_text();
    ASSERT_EQ(tgkill(d.pid(), d.pid(), SIGUSR2), 0);
    EXPECT_TRUE(d.wait_for_stderr("[seccomp.violation] syscall syslog (" + std::to_string(SYS_syslog) +
                                  ") is not in the daemon's allowlist (thread " +
                                  std::to_string(d.pid()) + ")"))
        << d.stderr_text();
    EXPECT_EQ(d.stop(0), 128 + SIGSYS) << d.stderr_text();
    EXPECT_EQ(d.stderr_text().find("syslog(2) returned"), std::string::npos) << d.stderr_text();
  }
  {  // The registry's thread, following libvirt's test driver.
    child d(hooked_daemon(sock, "test:///default"));
    ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
    ASSERT_TRUE(d.wait_for_stderr("[registry.up]")) << d.stderr_text();
    auto modes = seccomp_modes(d.pid());
    pid_t other = 0;
    for (const auto& [tid, mode] : modes)
      if (tid != d.pid()) other = tid;
    ASSERT_NE(other, 0) << "the registry's thread";
    ASSERT_EQ(tgkill(d.pid(), other, SIGUSR2), 0);
    EXPECT_TRUE(d.wait_for_stderr("[seccomp.violation] syscall syslog (" + std::to_string(SYS_syslog) +
                                  ") is not in the daemon's allowlist (thread " +
                                  std::to_string(other) + ")"))
        << d.stderr_text();
    EXPECT_EQ(d.stop(0), 128 + SIGSYS) << d.stderr_text();
  }
  {  // No filter: the same call returns.
    auto args = hooked_daemon(sock, "test:///default");
    args.push_back("--no-seccomp");
    child d(args);
    ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
    EXPECT_NE(d.stderr_text().find("[seccomp] syscall filter off (--no-seccomp)"), std::string::npos)
        << d.stderr_text();
    for (const auto& [tid, mode] : seccomp_modes(d.pid())) EXPECT_EQ(mode, "0") << "thread " << tid;
    ASSERT_EQ(tgkill(d.pid(), d.pid(), SIGUSR2), 0);
    EXPECT_TRUE(d.wait_for_stderr("[test.forbidden_syscall] syslog(2) returned")) << d.stderr_text();
    EXPECT_EQ(admin_query(sock, "top").rfind("ok {", 0), 0u) << "still serving";
    EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
  }
}

// The `magnet` program (no test hooks) at its real work under the filter:
// libvirt's test driver with a VM whose "QEMU" (a process of this test, as
// libvirt's pid file says) listens on its view channel, so the delivery
// connects to it and checks who listens; every query; /metrics in both
// formats, the dashboard, its API and event stream; --link on lo and in a
// namespace made after the start, where the netfilter probe links too;
// SIGHUP twice; SIGTERM and the drain.  Every thread is under the filter
// throughout, and the daemon ends with status 0 and no violation.
TEST(Seccomp, TheDaemonsWorkRunsUnderTheFilterToItsDrain) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string id = std::to_string(getpid());
  const std::string dir = "/tmp/magnet-seccomp-" + id, node = dir + "/node.xml",
                    chan = dir + "/view.sock", sock = dir + "/host.sock", name = "mgsc" + id,
                    ns = "mgsc" + id, pidf = "/run/libvirt/qemu/" + name + ".pid";
  struct cleanup {
    std::string dir, ns, pidf;
    ~cleanup() {
      test::run({"ip", "netns", "del", ns});
      unlink(pidf.c_str());
      test::run({"rm", "-rf", dir});
    }
  } c{dir, ns, pidf};
  test::run({"ip", "netns", "del", ns});
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  child qemu({"/usr/bin/python3", "-c",
              "import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\n"
              "s.listen(4)\nprint('listening',file=sys.stderr,flush=True)\nc=[]\n"
              "while True:\n  a,_=s.accept()\n  c.append(a)\n  print('accepted',file=sys.stderr,flush=True)\n",
              chan});
  ASSERT_TRUE(qemu.wait_for_stderr("listening")) << qemu.stderr_text();
  ASSERT_EQ(run({"mkdir", "-p", "/run/libvirt/qemu"}).status, 0);
  std::ofstream(pidf) << qemu.pid() << "\n";
  std::ofstream(node) << "<node><domain type='test'><name>" << name
                      << "</name><memory>1048576</memory><vcpu>1</vcpu><os><type>hvm</type></os>"
                         "<devices><interface type='ethernet'><target dev='lo'/></interface>"
                         "<channel type='unix'><source mode='bind' path='"
                      << chan
                      << "'/><target type='virtio' name='org.magnet.view.0'/></channel>"
                         "<vsock model='virtio'><cid auto='no' address='42'/></vsock>"
                         "</devices></domain></node>\n";
  child d({MAGNET_BIN, "-vv", "host", "--uri", "test://" + node, "--socket", sock, "--probes",
           "net.dev,net.drop,sched,net.l4.send", "--vsock", "off", "--http", "127.0.0.1:0",
           "--link", "lo", "--link", "mgsc0@" + ns, "--duration", "120"});
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("[seccomp] syscall filter on: "), std::string::npos) << d.stderr_text();
  ASSERT_TRUE(d.wait_for_stderr("[vm.up] " + name)) << d.stderr_text();
  EXPECT_TRUE(d.wait_for_stderr("connected to view channel " + chan)) << d.stderr_text();
  EXPECT_TRUE(qemu.wait_for_stderr("accepted")) << qemu.stderr_text();
  const bool netfilter = d.stderr_text().find("[probe.unavailable] net.l4.send") == std::string::npos;

  const std::string log = d.stderr_text();
  const int port = test::metrics_port(log);
  ASSERT_NE(port, 0) << log;
  for (const std::string& req : std::vector<std::string>{"top", "vms", "views", "views " + name, "stats " + name, "kvm 1",
                                "sessions", "mark " + name + " 3"}) {
    auto a = admin_query(sock, req);
    EXPECT_EQ(a.rfind("ok ", 0), 0u) << req << ": " << a;
  }
  EXPECT_EQ(admin_query(sock, "nonsense").rfind("error unknown request", 0), 0u);
  for (const std::string& target : std::vector<std::string>{"/metrics", "/", "/api/vms", "/api/vm/" + name + "/views"}) {
    auto [status, body] = test::http_get(port, target);
    EXPECT_EQ(status, 200) << target << ": " << body.substr(0, 300);
  }
  auto [om, om_body] = test::http_get(port, "/metrics", "application/openmetrics-text;version=1.0.0");
  EXPECT_EQ(om, 200) << om_body.substr(0, 300);
  EXPECT_EQ(read_stream(port, 2), 2) << "two events of the dashboard's stream, then the client goes";
  ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
  EXPECT_TRUE(d.wait_for_stderr("[views.reloaded]")) << d.stderr_text();
  // A namespace made after the start: --link reads its qdisc there, and
  // the netfilter probe gets its links in it (BPF_LINK_CREATE, setns).
  ASSERT_EQ(run({"ip", "netns", "add", ns}).status, 0);
  ASSERT_EQ(run({"ip", "-n", ns, "link", "add", "mgsc0", "type", "veth", "peer", "name", "mgsc1"}).status, 0);
  ASSERT_EQ(run({"tc", "-n", ns, "qdisc", "add", "dev", "mgsc0", "root", "tbf", "rate", "20mbit",
                 "burst", "32kbit", "limit", "125000"}).status, 0);
  EXPECT_TRUE(d.wait_for_stderr("[link] mgsc0@" + ns + ": capacity 2e+07 bit/s (tbf)")) << d.stderr_text();
  if (netfilter) {
    int links = 0;
    for (int i = 0; i < 50 && links < 4; ++i, usleep(100000)) links = netfilter_links(d.pid());
    EXPECT_GE(links, 4) << "two links in the daemon's namespace, two in " << ns;
  }
  auto modes = seccomp_modes(d.pid());
  EXPECT_GE(modes.size(), 2u) << "the io thread and the registry's";
  for (const auto& [tid, mode] : modes) EXPECT_EQ(mode, "2") << "thread " << tid << " filtered";
  ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
  EXPECT_EQ(admin_query(sock, "top").rfind("ok {", 0), 0u);
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("[stopped]"), std::string::npos) << d.stderr_text();
  EXPECT_EQ(d.stderr_text().find("[seccomp.violation] syscall"), std::string::npos) << d.stderr_text();
  qemu.stop(SIGKILL);
}

}  // namespace
}  // namespace magnet
