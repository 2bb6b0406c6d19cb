// magnet end-to-end tests on real VMs (ctest label e2e). See docs/lab.md.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "lab_fixture.h"

#define REQUIRE_LAB()                                  \
  do {                                                 \
    ASSERT_NE(lab(), nullptr);                         \
    ASSERT_TRUE(up_error().empty()) << up_error();     \
  } while (0)

extern char** environ;

namespace magnet::e2e {
namespace {
namespace fs = std::filesystem;

// Shell snippet (busybox ash) that prints the /dev path of the virtio-serial port named $1.
const char* kFindPort =
    "port_of() { for n in /sys/class/virtio-ports/*/name; do "
    "[ \"$(cat $n)\" = \"$1\" ] && echo /dev/$(basename $(dirname $n)); done; }; ";

// ==========================================================================================
// Direct mode: libvirt on this machine, one TCG guest, guest network in a namespace.
class DirectLab : public LabSuite {
 protected:
  static void SetUpTestSuite() { BringUp("direct", 1); }
  static void TearDownTestSuite() { TearDownLab(); }
};

TEST_F(DirectLab, GuestIsRunningUnderLibvirtWithTcg) {
  REQUIRE_LAB();
  std::string pid = Trim(ReadFileText("/run/libvirt/qemu/g1.pid"));
  ASSERT_FALSE(pid.empty()) << "no /run/libvirt/qemu/g1.pid";
  std::string cmdline = ReadFileText("/proc/" + pid + "/cmdline");
  EXPECT_NE(cmdline.find("qemu-system-x86_64"), std::string::npos);
  bool tcg_vcpu = false;
  for (auto& t : fs::directory_iterator("/proc/" + pid + "/task"))
    if (ReadFileText(t.path().string() + "/comm").find("/TCG") != std::string::npos) tcg_vcpu = true;
  EXPECT_TRUE(tcg_vcpu) << "no 'CPU n/TCG' thread in QEMU pid " << pid;
  EXPECT_NE(lab()->Console("g1").find("MAGNET-READY name=g1"), std::string::npos);
}

TEST_F(DirectLab, ControlChannelReturnsOutputAndExitStatus) {
  REQUIRE_LAB();
  auto r = lab()->Run("g1", "echo out-$((6*7)); hostname; echo err >&2; exit 9");
  EXPECT_EQ(r.status, 9) << r.Describe();
  EXPECT_EQ(r.out, "out-42\ng1\nerr\n") << r.Describe();
}

// A guest that stops answering (paused here) costs a run its own timeout
// plus tools/lab's 10 s, and the run says so; once the guest goes on, the
// channel serves the next run (the late answer to the first, which the
// guest still gives, is told apart by its request id).
TEST_F(DirectLab, ControlChannelGivesUpOnAGuestThatStopsAnswering) {
  REQUIRE_LAB();
  auto virsh = [](const char* verb) {
    return RunProcess({"virsh", "-q", "-c", "qemu:///system", verb, "g1"}, bounds().Domain());
  };
  auto p = virsh("suspend");
  ASSERT_EQ(p.status, 0) << p.Describe();
  auto r = lab()->Run("g1", "echo late", 3);
  auto q = virsh("resume");
  ASSERT_EQ(q.status, 0) << q.Describe();
  EXPECT_EQ(r.status, 124) << r.Describe();
  EXPECT_NE(r.err.find("no answer on control channel"), std::string::npos) << r.Describe();
  EXPECT_FALSE(r.timed_out) << "tools/lab ended by itself: " << r.Describe();
  EXPECT_LT(r.seconds, 3 + 10 + 10) << r.Describe();
  auto n = lab()->Run("g1", "echo next");
  EXPECT_EQ(n.status, 0) << n.Describe();
  EXPECT_EQ(n.out, "next\n") << n.Describe();
}

// One request in the control channel's own protocol (vm-images/common/magnet-ctl), as a raw
// client on the guest's ctl.sock: the answer's base64 output and status ("" and -1 when none
// came within @timeout_s).
struct ctl_answer {
  std::string out_b64;
  int rc = -1;
};
ctl_answer CtlRequest(const std::string& sock, const std::string& id, const std::string& line, int timeout_s) {
  ctl_answer a;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return a;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    close(fd);
    return a;
  }
  std::string got;
  const std::string rc_line = "@@MAGNET-RC " + id + " ";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (got.find(rc_line) == std::string::npos || got.find('\n', got.find(rc_line)) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    char buf[512];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  std::smatch m;
  if (std::regex_search(got, m, std::regex("@@MAGNET-OUT " + id + "\n([A-Za-z0-9+/=\n]*)@@MAGNET-RC " + id + " (\\d+)")))
    a = {m[1].str(), std::stoi(m[2].str())};
  return a;
}

// A request runs only when it arrived whole: one that ends with its base64's length runs when
// the base64 has that length and is refused (253, not run) when it has not, without a process
// to check it (each one costs 12-15 ms in the nested lab); one without the length (cut short
// before it) is checked as a script, and a cut one refused.
TEST_F(DirectLab, ControlChannelRunsOnlyARequestThatArrivedWhole) {
  REQUIRE_LAB();
  const std::string sock = lab()->state_dir() + "/guests/g1/ctl.sock";
  const std::string echo_whole = "ZWNobyB3aG9sZQ==";  // "echo whole"
  auto whole = CtlRequest(sock, "w1", "RUN w1 10 " + echo_whole + " 16\n", bounds().Quick());
  EXPECT_EQ(whole.rc, 0);
  EXPECT_EQ(whole.out_b64, "d2hvbGUK\n");  // "whole\n"
  auto short_len = CtlRequest(sock, "w2", "RUN w2 10 " + echo_whole + " 17\n", bounds().Quick());
  EXPECT_EQ(short_len.rc, 253) << "a base64 shorter than its stated length must not run";
  // "if true; then echo whole; fi" cut after 16 base64 characters, its length lost with the rest.
  auto cut = CtlRequest(sock, "w3", "RUN w3 10 aWYgdHJ1ZTsgdGhl\n", bounds().Quick());
  EXPECT_EQ(cut.rc, 253) << "a cut script must not run";
  auto n = lab()->Run("g1", "echo next");
  EXPECT_EQ(n.status, 0) << n.Describe();
  EXPECT_EQ(n.out, "next\n") << n.Describe();
}

TEST_F(DirectLab, VirtioSerialMessageRoundTrip) {
  REQUIRE_LAB();
  // Guest side: wait (bounded) for one line on org.magnet.test.0 and answer "echo:<line>".
  std::string guest_cmd = std::string(kFindPort) +
                          "p=$(port_of org.magnet.test.0); [ -n \"$p\" ] || exit 3; "
                          "timeout " + std::to_string(bounds().Linger(1)) +
                          " sh -c 'exec 4<>'$p'; while ! read -r l <&4; do sleep 0.1; done; "
                          "echo \"echo:$l\" >&4; sleep 1' >/dev/null 2>&1 & echo started";
  auto g = lab()->Run("g1", guest_cmd);
  ASSERT_EQ(g.status, 0) << g.Describe();
  // Host side: plain AF_UNIX client on the channel's socket.
  std::string path = lab()->state_dir() + "/guests/g1/test.sock";
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << path << ": " << strerror(errno);
  std::string msg = "ping-" + std::to_string(getpid()) + "\n";
  ASSERT_EQ(write(fd, msg.data(), msg.size()), static_cast<ssize_t>(msg.size()));
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(bounds().Quick());
  while (got.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 500) <= 0) continue;
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  EXPECT_EQ(got, "echo:" + msg) << "no/incorrect answer from the guest over virtio-serial";
}

// ==========================================================================================
// Bad situations (direct mode, each with its own lab state): clear message, non-zero exit,
// clean teardown.
class LabFailures : public ::testing::Test {
 protected:
  static void ExpectTornDown(const Lab& lab) {
    EXPECT_FALSE(fs::exists(lab.state_dir())) << "state dir left behind: " << lab.state_dir();
    auto ns = RunProcess({"ip", "netns", "list"}, LabBounds().Quick());
    EXPECT_EQ(ns.out.find("magnetlab"), std::string::npos) << "netns left behind: " << ns.out;
    auto virsh = RunProcess({"pgrep", "-x", "libvirtd"}, LabBounds().Quick());
    EXPECT_NE(virsh.status, 0) << "a libvirtd is still running: " << virsh.out;
    EXPECT_FALSE(fs::exists("/run/libvirt/qemu/g1.pid"));
    // libvirt keeps a persistent definition across its own restarts and the machine's.
    EXPECT_FALSE(fs::exists("/etc/libvirt/qemu/g1.xml")) << "domain g1 left defined";
  }
};

TEST_F(LabFailures, MissingImageInputIsNamed) {
  Lab lab("direct", "/run/magnet-lab-e2e-missing",
          {{"MAGNET_LAB_NO_BUILD", "1"}, {"MAGNET_LAB_GUEST_KERNEL", "/nonexistent/magnet-vmlinuz"}});
  RegisterForEmergencyTeardown(lab);
  lab.Down();
  auto r = lab.Up(1);
  EXPECT_NE(r.status, 0) << r.Describe();
  EXPECT_NE(r.err.find("missing image input"), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find("/nonexistent/magnet-vmlinuz"), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find("torn down"), std::string::npos) << r.Describe();
  ExpectTornDown(lab);
  UnregisterEmergencyTeardown(lab);
}

TEST_F(LabFailures, GuestThatNeverBecomesReadyFailsWithItsConsoleLog) {
  // A bogus initrd: the kernel boots but never reaches the lab's /init.
  std::string bogus = ArtifactDir("LabFailures.bogus") + "/bogus-initrd.img";
  {
    std::ofstream f(bogus, std::ios::binary);
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>((i * 131 + 7) & 0xff));
  }
  std::string logs = ArtifactDir("LabFailures.GuestNeverReady-logs");
  Lab lab("direct", "/run/magnet-lab-e2e-notready",
          {{"MAGNET_LAB_GUEST_INITRD", bogus}, {"MAGNET_LAB_READY_TIMEOUT", "20"},
           {"MAGNET_LAB_FAIL_LOGS", logs}});
  RegisterForEmergencyTeardown(lab);
  lab.Down();
  auto r = lab.Up(1);
  EXPECT_NE(r.status, 0) << r.Describe();
  EXPECT_TRUE(std::regex_search(r.err, std::regex("g1( did not become ready within 20 s|: its QEMU process .* exited before becoming ready)")))
      << r.Describe();
  EXPECT_NE(r.err.find("console log: "), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find("logs: " + logs), std::string::npos) << r.Describe();
  EXPECT_TRUE(fs::exists(logs + "/g1/console.log")) << "console log not collected into " << logs;
  EXPECT_TRUE(fs::exists(logs + "/libvirtd.log")) << "libvirtd log not collected into " << logs;
  ExpectTornDown(lab);
  UnregisterEmergencyTeardown(lab);
}

TEST_F(LabFailures, LibvirtdThatFailsToStartIsNamedWithItsLog) {
  std::string logs = ArtifactDir("LabFailures.LibvirtdFails-logs");
  Lab lab("direct", "/run/magnet-lab-e2e-nolibvirtd",
          {{"MAGNET_LAB_LIBVIRTD", "/bin/false"}, {"MAGNET_LAB_FAIL_LOGS", logs}});
  RegisterForEmergencyTeardown(lab);
  lab.Down();
  auto r = lab.Up(1);
  EXPECT_NE(r.status, 0) << r.Describe();
  EXPECT_NE(r.err.find("libvirtd (/bin/false) failed to start; log: /run/magnet-lab-e2e-nolibvirtd/logs/libvirtd.log"),
            std::string::npos)
      << r.Describe();
  EXPECT_NE(r.err.find("torn down"), std::string::npos) << r.Describe();
  EXPECT_TRUE(fs::exists(logs + "/libvirtd.log")) << "libvirtd log not collected into " << logs;
  ExpectTornDown(lab);
  auto vl = RunProcess({"pgrep", "-x", "virtlogd"}, LabBounds().Quick());
  EXPECT_NE(vl.status, 0) << "virtlogd left running: " << vl.out;
  UnregisterEmergencyTeardown(lab);
}

// Two labs at once: the second is refused with a clear message, tears down only what it created
// (not the first lab's namespace or libvirtd), and the first keeps working.
TEST_F(LabFailures, SecondDirectLabIsRefusedAndTheFirstSurvives) {
  Lab first("direct", "/run/magnet-lab-e2e-first");
  Lab second("direct", "/run/magnet-lab-e2e-second",
             {{"MAGNET_LAB_FAIL_LOGS", ArtifactDir("LabFailures.second-up-logs")}});
  RegisterForEmergencyTeardown(first);
  RegisterForEmergencyTeardown(second);
  struct Guard {
    const Lab& a;
    const Lab& b;
    ~Guard() {
      b.Down();
      a.Down();
      UnregisterEmergencyTeardown(a);
      UnregisterEmergencyTeardown(b);
    }
  } guard{first, second};
  first.Down();
  second.Down();
  auto up1 = first.Up(1);
  ASSERT_EQ(up1.status, 0) << up1.Describe();
  auto up2 = second.Up(1);
  EXPECT_NE(up2.status, 0) << up2.Describe();
  EXPECT_NE(up2.err.find("network namespace magnetlab already exists"), std::string::npos) << up2.Describe();
  EXPECT_NE(up2.err.find("torn down"), std::string::npos) << up2.Describe();
  EXPECT_FALSE(fs::exists(second.state_dir()));
  auto alive = first.Run("g1", "echo alive; ping -c1 -W" + std::to_string(first.bounds().Quick()) +
                                    " 10.77.0.1 >/dev/null && echo net-ok");
  EXPECT_EQ(alive.out, "alive\nnet-ok\n") << alive.Describe();
  auto down = first.Down();
  EXPECT_EQ(down.status, 0) << down.Describe();
  ExpectTornDown(first);
}

// Ctrl-C during 'tools/lab up' (after the guest was started) tears everything down.
TEST_F(LabFailures, InterruptDuringUpTearsDown) {
  Lab lab("direct", "/run/magnet-lab-e2e-interrupt");
  RegisterForEmergencyTeardown(lab);
  lab.Down();
  std::vector<std::string> envs;
  auto env = lab.Env();
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    if (!env.count(kv.substr(0, kv.find('=')))) envs.push_back(kv);
  }
  for (auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string bash = "/bin/bash", script = SourceDir() + "/tools/lab", up = "up";
  char* argv[] = {bash.data(), script.data(), up.data(), nullptr};
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execve(argv[0], argv, envp.data());
    _exit(127);
  }
  // Wait (bounded by up's own bound) until the guest domain has been defined and started.
  const bool started = WaitFor(
      [&] { return fs::exists(lab.state_dir() + "/guests/g1/defined") && fs::exists("/run/libvirt/qemu/g1.pid"); },
      UpBound("direct", 1), 100);
  EXPECT_TRUE(started) << "guest g1 was never started";
  kill(pid, SIGINT);
  int st = 0;
  const bool exited = WaitFor([&] { return waitpid(pid, &st, WNOHANG) == pid; }, lab.bounds().Down(), 100);
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  ASSERT_TRUE(exited) << "'tools/lab up' did not exit within " << lab.bounds().Down() << " s of SIGINT";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 130) << "status " << st;
  ExpectTornDown(lab);
  lab.Down();
  UnregisterEmergencyTeardown(lab);
}

// A lab that ended without its teardown (killed by a timeout, or the machine restarted under
// it) leaves its domains defined: libvirt keeps them under /etc/libvirt/qemu.  The next 'up'
// removes such a domain, saying so, when its metadata names a lab that is not up; a domain of
// the same name that is not the lab's is refused and left alone.
TEST_F(LabFailures, ADomainLeftByAKilledLabIsRemovedAndAForeignOneRefused) {
  Lab killed("direct", "/run/magnet-lab-e2e-killed");
  Lab next("direct", "/run/magnet-lab-e2e-next",
           {{"MAGNET_LAB_FAIL_LOGS", ArtifactDir("LabFailures.next-up-logs")}});
  const std::string foreign = "/etc/libvirt/qemu/g1.xml";
  RegisterForEmergencyTeardown(killed);
  RegisterForEmergencyTeardown(next);
  struct Guard {
    const Lab& a;
    const Lab& b;
    ~Guard() {
      b.Down();
      a.Down();
      UnregisterEmergencyTeardown(a);
      UnregisterEmergencyTeardown(b);
    }
  } guard{killed, next};
  killed.Down();
  next.Down();
  auto up = killed.Up(1);
  ASSERT_EQ(up.status, 0) << up.Describe();
  // As after a restart of the machine: g1 not running, and its lab's teardown never ran (here
  // it runs without knowing of g1, which stays defined).
  auto destroy = RunProcess({"virsh", "-q", "-c", "qemu:///system", "destroy", "g1"}, killed.bounds().Domain());
  ASSERT_EQ(destroy.status, 0) << destroy.Describe();
  ASSERT_EQ(::unlink((killed.state_dir() + "/guests/g1/defined").c_str()), 0);
  ASSERT_EQ(killed.Down().status, 0);
  ASSERT_TRUE(fs::exists(foreign)) << "the killed lab's g1 should still be defined";

  up = next.Up(1);
  ASSERT_EQ(up.status, 0) << up.Describe();
  EXPECT_NE(up.err.find("removing domain g1, left behind by a lab that ended without its teardown "
                        "(state: /run/magnet-lab-e2e-killed, gone)"),
            std::string::npos)
      << up.Describe();
  auto alive = next.Run("g1", "echo alive");
  EXPECT_EQ(alive.out, "alive\n") << alive.Describe();

  // The same, with the lab that left g1 behind coming up again on the same state directory (a CI
  // run killed at its time limit, then the next run): its own 'mode' is written by then, and g1
  // is still its leftover, not a lab that is up.  The lab that just removed the first leftover
  // leaves its own g1 so.
  destroy = RunProcess({"virsh", "-q", "-c", "qemu:///system", "destroy", "g1"}, next.bounds().Domain());
  ASSERT_EQ(destroy.status, 0) << destroy.Describe();
  ASSERT_EQ(::unlink((next.state_dir() + "/guests/g1/defined").c_str()), 0);
  ASSERT_EQ(next.Down().status, 0);
  ASSERT_TRUE(fs::exists(foreign)) << "the lab's g1 should still be defined";
  up = next.Up(1);
  ASSERT_EQ(up.status, 0) << up.Describe();
  EXPECT_NE(up.err.find("removing domain g1, left behind by a lab that ended without its teardown "
                        "(state: /run/magnet-lab-e2e-next, this lab's own, reused)"),
            std::string::npos)
      << up.Describe();
  alive = next.Run("g1", "echo alive");
  EXPECT_EQ(alive.out, "alive\n") << alive.Describe();
  ASSERT_EQ(next.Down().status, 0);
  ExpectTornDown(next);

  // A domain g1 that no lab defined (no lab metadata): refused, and kept.
  {
    std::ofstream f(foreign);
    f << "<domain type='qemu'><name>g1</name><memory unit='MiB'>64</memory>"
         "<os><type arch='x86_64' machine='pc'>hvm</type></os></domain>\n";
  }
  up = next.Up(1);
  EXPECT_NE(up.status, 0) << up.Describe();
  EXPECT_NE(up.err.find("a libvirt domain named g1 already exists and is not the lab's"), std::string::npos)
      << up.Describe();
  EXPECT_NE(up.err.find("torn down"), std::string::npos) << up.Describe();
  EXPECT_TRUE(fs::exists(foreign)) << "the lab removed a domain that was not its own";
  ::unlink(foreign.c_str());
  ExpectTornDown(next);
}

// ==========================================================================================
// Nested mode: lab host VM under TCG on this machine, two KVM guests inside it.
class NestedLab : public LabSuite {
 protected:
  static void SetUpTestSuite() { BringUp("nested", 2); }
  static void TearDownTestSuite() { TearDownLab(); }
  static std::string QemuPid(const std::string& g) {
    return Trim(lab()->Run("labhost", "cat /run/libvirt/qemu/" + g + ".pid").out);
  }
};

TEST_F(NestedLab, GuestsRunUnderKvmWithVhostNetAndVhostVsock) {
  REQUIRE_LAB();
  for (std::string g : {"g1", "g2"}) {
    std::string pid = QemuPid(g);
    ASSERT_FALSE(pid.empty()) << "no QEMU pid for " << g;
    auto r = lab()->Run("labhost",
                        "p=" + pid + "; for t in /proc/$p/task/*; do cat $t/comm; done | grep -c '/KVM'; "
                        "ls -l /proc/$p/fd | grep -c /dev/vhost-net; ls -l /proc/$p/fd | grep -c /dev/vhost-vsock; "
                        "ps -o comm | grep -c \"^vhost-$p\\$\"");
    auto l = SplitLines(r.out);
    ASSERT_EQ(l.size(), 4u) << r.Describe();
    EXPECT_GE(std::stoi(l[0]), 1) << g << ": no 'CPU n/KVM' vCPU thread";
    EXPECT_GE(std::stoi(l[1]), 1) << g << ": QEMU has no /dev/vhost-net open";
    EXPECT_GE(std::stoi(l[2]), 1) << g << ": QEMU has no /dev/vhost-vsock open";
    EXPECT_GE(std::stoi(l[3]), 1) << g << ": no vhost-" << pid << " worker thread";
  }
}

TEST_F(NestedLab, Iperf3BetweenEachGuestAndTheLabHostOverVhostNet) {
  REQUIRE_LAB();
  int port = 5301;
  for (std::string g : {"g1", "g2"}) {
    std::string pid = QemuPid(g);
    // vhost worker CPU time before/after proves the traffic went through vhost-net.
    std::string vhost_time =
        "for t in $(ps -o pid,comm | awk '$2==\"vhost-" + pid + "\"{print $1}'); do "
        "awk '{s+=$14+$15} END{print s}' /proc/$t/stat; done | awk '{s+=$1} END{print s+0}'";
    auto before = lab()->Run("labhost", vhost_time);
    ASSERT_EQ(before.status, 0) << before.Describe();
    auto srv = lab()->Run("labhost", "iperf3 -s -1 -D -p " + std::to_string(port) + " >/dev/null 2>&1; sleep 0.3");
    ASSERT_EQ(srv.status, 0) << srv.Describe();
    auto c = lab()->Run(g, "iperf3 -c 10.77.0.1 -p " + std::to_string(port) + " -t 3 -f m", bounds().Work(3));
    ASSERT_EQ(c.status, 0) << c.Describe();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(c.out, m, std::regex(R"(([0-9.]+) Mbits/sec\s+receiver)"))) << c.out;
    double mbps = std::stod(m[1]);
    std::cout << "[e2e] iperf3 " << g << " -> labhost: " << mbps << " Mbit/s\n";
    EXPECT_GT(mbps, 5.0) << c.out;
    auto after = lab()->Run("labhost", vhost_time);
    EXPECT_GT(std::stol(Trim(after.out)), std::stol(Trim(before.out)))
        << g << ": vhost-" << pid << " threads used no CPU during iperf3";
    ++port;
  }
}

TEST_F(NestedLab, VsockRoundTripGuestToLabHostAndBack) {
  REQUIRE_LAB();
  const int port = 5500;
  // Lab host (CID 2) answers each connection with "pong-<what it received>".
  const std::string quick = std::to_string(bounds().Quick()), linger = std::to_string(bounds().Linger(0));
  auto srv = lab()->Run("labhost",
                        "printf '#!/bin/sh\\nread l; echo \"pong-$l\"\\n' >/tmp/vs-reply.sh; chmod +x /tmp/vs-reply.sh; "
                        "(timeout " + linger + " socat VSOCK-LISTEN:" + std::to_string(port) +
                            ",reuseaddr,fork EXEC:/tmp/vs-reply.sh >/tmp/vs-listen.log 2>&1 &); sleep 0.5");
  ASSERT_EQ(srv.status, 0) << srv.Describe();
  for (std::string g : {"g1", "g2"}) {
    auto r = lab()->Run(g, "echo ping-" + g + " | socat -T " + quick + " - VSOCK-CONNECT:2:" + std::to_string(port));
    EXPECT_EQ(r.status, 0) << r.Describe();
    EXPECT_EQ(r.out, "pong-ping-" + g + "\n") << r.Describe();
  }
  // And the other way: the lab host connects to g1's CID (3).
  auto gl = lab()->Run("g1",
                       "printf '#!/bin/sh\\nread l; echo \"guest-got-$l\"\\n' >/tmp/r.sh; chmod +x /tmp/r.sh; "
                       "(timeout " + linger + " socat VSOCK-LISTEN:5501,reuseaddr EXEC:/tmp/r.sh >/dev/null 2>&1 &); sleep 0.3");
  ASSERT_EQ(gl.status, 0) << gl.Describe();
  auto r = lab()->Run("labhost", "echo hello | socat -T " + quick + " - VSOCK-CONNECT:3:5501");
  EXPECT_EQ(r.status, 0) << r.Describe();
  EXPECT_EQ(r.out, "guest-got-hello\n") << r.Describe();
}

// kvm_exit attribution: g1 is kept busy (iperf3), g2 idles. Exits are counted per vCPU thread and
// attributed to a guest through the QEMU pid libvirt reports (/run/libvirt/qemu/NAME.pid).
struct ExitCounts {
  std::map<std::string, long> by_tgid;               // tgid -> exits
  std::map<std::string, std::set<std::string>> tids;  // tgid -> thread ids seen
  std::map<std::string, std::string> vm_of_tgid;       // tgid -> vm column (magnet only)
};

void CheckAttribution(const ExitCounts& c, const std::string& pid1, const std::string& pid2, const std::string& method) {
  ASSERT_TRUE(c.by_tgid.count(pid1)) << method << ": no kvm exit attributed to g1 (QEMU pid " << pid1 << ")";
  ASSERT_TRUE(c.by_tgid.count(pid2)) << method << ": no kvm exit attributed to g2 (QEMU pid " << pid2 << ")";
  long n1 = c.by_tgid.at(pid1), n2 = c.by_tgid.at(pid2);
  std::cout << "[e2e] " << method << ": kvm exits g1(busy)=" << n1 << " g2(idle)=" << n2 << "\n";
  EXPECT_GT(n1, n2) << method << ": the busy guest g1 should exit more often than idle g2";
  for (auto& [tgid, n] : c.by_tgid)
    EXPECT_TRUE(tgid == pid1 || tgid == pid2) << method << ": " << n << " exits from unexpected process " << tgid;
}

TEST_F(NestedLab, KvmExitsAreAttributedToTheRightGuestWithTracefs) {
  REQUIRE_LAB();
  std::string pid1 = QemuPid("g1"), pid2 = QemuPid("g2");
  ASSERT_FALSE(pid1.empty());
  ASSERT_FALSE(pid2.empty());
  ASSERT_EQ(lab()->Run("labhost", "iperf3 -s -1 -D -p 5401 >/dev/null 2>&1").status, 0);
  // Trace kvm_exit for ~4 s while g1 pushes traffic; then count per thread and map thread -> tgid.
  std::string trace =
      "T=/sys/kernel/tracing; echo 0 >$T/tracing_on; echo >$T/trace; echo 8192 >$T/buffer_size_kb; "
      "echo 1 >$T/events/kvm/kvm_exit/enable; echo 1 >$T/tracing_on; "
      "sleep 4; echo 0 >$T/tracing_on; echo 0 >$T/events/kvm/kvm_exit/enable; "
      "grep kvm_exit $T/trace | sed -n 's/^ *.*-\\([0-9][0-9]*\\) *\\[[0-9]*\\].*/\\1/p' | sort | uniq -c | "
      "while read n tid; do echo \"$(awk '/^Tgid:/{print $2}' /proc/$tid/status) $tid $n\"; done; echo >$T/trace";
  std::string load = "(sleep 0.5; iperf3 -c 10.77.0.1 -p 5401 -t 3 >/dev/null 2>&1) &";
  ASSERT_EQ(lab()->Run("g1", load).status, 0);
  auto r = lab()->Run("labhost", trace, bounds().Crunch());
  ASSERT_EQ(r.status, 0) << r.Describe();
  ExitCounts c;
  for (auto& line : SplitLines(r.out)) {
    std::istringstream in(line);
    std::string tgid, tid;
    long n = 0;
    if (in >> tgid >> tid >> n) {
      c.by_tgid[tgid] += n;
      c.tids[tgid].insert(tid);
    }
  }
  CheckAttribution(c, pid1, pid2, "tracefs");
  // Each counted thread is a vCPU thread ("CPU n/KVM") of its QEMU.
  for (auto& [tgid, tids] : c.tids)
    for (auto& tid : tids) {
      auto comm = lab()->Run("labhost", "cat /proc/" + tgid + "/task/" + tid + "/comm");
      EXPECT_NE(comm.out.find("/KVM"), std::string::npos) << "thread " << tid << " of " << tgid << ": " << comm.out;
    }
}

TEST_F(NestedLab, KvmExitsAreAttributedToTheRightGuestWithMagnetRecord) {
  REQUIRE_LAB();
  // The project's CLI, built on this machine, reached in the lab host through the 9p share.
  const std::string magnet = "/mnt/magnetbuild/host/magnet";
#ifndef MAGNET_E2E_REQUIRE_HOST_CLI
  if (!fs::exists(BuildDir() + "/host/magnet")) GTEST_SKIP() << "magnet CLI not built (no CMake target 'magnet')";
#endif
  ASSERT_TRUE(fs::exists(BuildDir() + "/host/magnet")) << "build the 'magnet' target first: " << BuildDir() << "/host/magnet";
  std::string pid1 = QemuPid("g1"), pid2 = QemuPid("g2");
  // g1's traffic starts once the recorder records (attaching takes seconds
  // on the emulated lab host), so that its whole 4 s are in the trace: a
  // load that started earlier left only its tail there, and a guest booted
  // a minute before (a lab brought up again) then out-exited it.
  ASSERT_EQ(lab()->Run("labhost", "rm -f /tmp/e2e-kvm.trace; (" + magnet +
                                      " record -o /tmp/e2e-kvm.trace --probes kvm.exit --duration 7 "
                                      ">/tmp/e2e-kvm.log 2>&1 &); iperf3 -s -1 -D -p 5402 >/dev/null 2>&1").status,
            0);
  ASSERT_TRUE(WaitFor([&] { return lab()->Run("labhost", "grep -c recording /tmp/e2e-kvm.log").out.find('1') == 0; },
                      bounds().Crunch(), 250))
      << lab()->Run("labhost", "cat /tmp/e2e-kvm.log").out;
  auto load = lab()->Run("g1", "iperf3 -c 10.77.0.1 -p 5402 -t 4 >/dev/null 2>&1; echo rc=$?", bounds().Work(4));
  EXPECT_NE(load.out.find("rc=0"), std::string::npos) << load.Describe();
  ASSERT_TRUE(WaitFor([&] { return lab()->Run("labhost", "grep -c 'written to' /tmp/e2e-kvm.log").out.find('1') == 0; },
                      bounds().Crunch(), 250))
      << lab()->Run("labhost", "cat /tmp/e2e-kvm.log").out;
  // Aggregate in the lab host (the CSV can be large): header, then "tgid tid vm count" lines.
  auto dump = lab()->Run("labhost",
                         magnet + " dump /tmp/e2e-kvm.trace --format csv > /tmp/e2e-kvm.csv; rc=$?; head -n1 /tmp/e2e-kvm.csv; "
                         "awk -F, 'NR>1 && $3 ~ /kvm/ {c[$5\" \"$6\" \"($4==\"\"?\"-\":$4)]++} END{for(k in c) print k, c[k]}' /tmp/e2e-kvm.csv; exit $rc",
                         bounds().Crunch());
  ASSERT_EQ(dump.status, 0) << dump.Describe();
  auto lines = SplitLines(dump.out);
  ASSERT_FALSE(lines.empty()) << dump.Describe();
  EXPECT_EQ(lines[0].rfind("ts_ns,cpu,event,vm,tgid,tid,abstract_id,size", 0), 0u) << "CSV header: " << lines[0];
  ExitCounts c;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::istringstream in(lines[i]);
    std::string tgid, tid, vm;
    long n = 0;
    if (in >> tgid >> tid >> vm >> n) {
      c.by_tgid[tgid] += n;
      c.tids[tgid].insert(tid);
      c.vm_of_tgid[tgid] = vm;
    }
  }
  CheckAttribution(c, pid1, pid2, "magnet record");
  std::cout << "[e2e] magnet vm column: g1 pid " << pid1 << " -> '" << c.vm_of_tgid[pid1] << "', g2 pid " << pid2
            << " -> '" << c.vm_of_tgid[pid2] << "'\n";
}

// The hypervisor probes on the lab host's kernel: every kvm.entry's
// exit->entry time is exactly the distance to its vCPU thread's kvm.exit
// with the same reason; serial-port writes in g1 are userspace I/O exits of
// g1's QEMU; vhost-net work runs in g1's vhost worker; and `magnet kvm`
// shows the idle guest's vCPU halted while the busy one is not.
TEST_F(NestedLab, KvmExitTimesUserspaceExitsAndVhostWorkPerGuest) {
  REQUIRE_LAB();
  const std::string magnet = "/mnt/magnetbuild/host/magnet";
  std::string pid1 = QemuPid("g1"), pid2 = QemuPid("g2");
  ASSERT_FALSE(pid1.empty() || pid2.empty());
  ASSERT_EQ(lab()->Run("labhost", "rm -f /tmp/k.trace; (" + magnet + " record -o /tmp/k.trace "
                                      "--probes kvm.exit,kvm.entry,kvm.userspace_exit,vmnet.vhost "
                                      "--duration 25 >/tmp/k.log 2>&1 &); iperf3 -s -1 -D -p 5403 "
                                      ">/dev/null 2>&1").status,
            0);
  // Wait until the recorder runs (it prints its first status line then).
  WaitFor([&] { return lab()->Run("labhost", "grep -c recording /tmp/k.log").out.find('1') == 0; },
          bounds().Crunch(), 250);
  auto g1 = lab()->Run("g1", "iperf3 -c 10.77.0.1 -p 5403 -t 2 >/dev/null 2>&1; echo rc=$?; "
                             "for i in $(seq 50); do echo hello > /dev/ttyS0; done", bounds().Work(2));
  ASSERT_NE(g1.out.find("rc=0"), std::string::npos) << g1.Describe();
  // The recorder stops by itself (25 s after it started); wait for its final line.
  WaitFor([&] { return lab()->Run("labhost", "grep -c 'written to' /tmp/k.log").out.find('1') == 0; },
          bounds().Work(25) + bounds().Crunch(), 500);
  // Every kvm.entry that ends an exit (exit_ns > 0) must carry the time and
  // reason of its thread's last kvm.exit.  A thread's entries before its
  // first recorded exit are left out: the probes attach one after the
  // other, so kvm.entry may see exits that kvm.exit was not yet there for.
  // (A fresh-clone run failed with 13 of 21 438 pairs unmatched, no record
  // lost; the trace was not kept, so that this was the cause is likely,
  // not shown.)  At the end the recorder turns kvm.entry off before
  // kvm.exit (capture::stop): the other way round, one entry of 23 326 in a
  // later run carried the time of an exit that kvm.exit no longer recorded.
  const std::string awk =
      "NR==1 { for (i = 1; i <= NF; i++) c[$i] = i; next } "
      "{ ev = $c[\"event\"]; tid = $c[\"tid\"]; ts = $c[\"ts_ns\"]; tg = $c[\"tgid\"] } "
      "ev == \"kvm.exit\" { last[tid] = ts; lr[tid] = $c[\"exit_reason\"]; seen[tid] = 1; next } "
      "ev == \"kvm.entry\" && $c[\"exit_ns\"] > 0 && (tid in seen) { n++; "
      "  if ((tid in last) && ts - $c[\"exit_ns\"] == last[tid] && lr[tid] == $c[\"exit_reason\"]) ok++; "
      "  else bad++; delete last[tid] } "
      "ev == \"kvm.entry\" && $c[\"kvm_flags\"] == 1 && (($c[\"exit_isa\"] == 2 && $c[\"exit_reason\"] == 123) || "
      "  ($c[\"exit_isa\"] == 1 && $c[\"exit_reason\"] == 30)) { uio[tg]++ } "
      "ev == \"kvm.userspace_exit\" && $c[\"userspace_reason\"] == 2 { ue[tg]++ } "
      "ev == \"vmnet.vhost.tx\" { vt[tg]++; if ($c[\"duration_ns\"] > 0) vtp[tg]++ } "
      "ev == \"vmnet.vhost.rx\" { vr[tg]++ } "
      "END { print \"pairs\", n + 0, ok + 0, bad + 0; for (t in ue) print \"ue\", t, ue[t]; "
      "  for (t in uio) print \"uio\", t, uio[t]; for (t in vt) print \"vt\", t, vt[t], vtp[t] + 0; "
      "  for (t in vr) print \"vr\", t, vr[t] }";
  auto r = lab()->Run("labhost", "cat /tmp/k.log | tail -n 2; " + magnet +
                                     " dump /tmp/k.trace --format csv > /tmp/k.csv && awk -F, '" + awk +
                                     "' /tmp/k.csv",
                      bounds().Crunch());
  ASSERT_EQ(r.status, 0) << r.Describe();
  std::map<std::string, std::map<std::string, long>> m;  // kind -> tgid -> count
  long pairs = 0, ok = 0, bad = 0;
  std::map<std::string, long> vt_positive;
  for (const auto& l : SplitLines(r.out)) {
    std::istringstream in(l);
    std::string kind, t;
    long n = 0, extra = 0;
    in >> kind;
    if (kind == "pairs") in >> pairs >> ok >> bad;
    else if (in >> t >> n) {
      m[kind][t] = n;
      if (kind == "vt" && in >> extra) vt_positive[t] = extra;
    }
  }
  EXPECT_GE(pairs, 100) << r.out;
  EXPECT_EQ(bad, 0) << "kvm.entry exit_ns/exit_reason not matching the thread's last kvm.exit. " << r.out;
  EXPECT_GE(m["ue"][pid1], 50) << "serial writes in g1 are KVM_EXIT_IO to g1's QEMU. " << r.out;
  EXPECT_GE(m["uio"][pid1], 50) << "kvm.entry after an I/O exit handled in userspace. " << r.out;
  EXPECT_EQ(m["ue"][pid2], 0) << "g2 wrote nothing to its serial port. " << r.out;
  // vhost-net: the worker of g1's QEMU ("vhost-<pid>", a kernel thread on 6.1).
  std::string worker;
  for (const auto& [t, n] : m["vt"])
    if (Trim(lab()->Run("labhost", "cat /proc/" + t + "/comm").out) == "vhost-" + pid1) worker = t;
  ASSERT_FALSE(worker.empty()) << "no vmnet.vhost.tx from g1's vhost worker. " << r.out;
  EXPECT_GE(m["vt"][worker], 10) << r.out;
  EXPECT_EQ(vt_positive[worker], m["vt"][worker]) << "every handle_tx run takes time. " << r.out;
  EXPECT_GE(m["vr"][worker], 10) << r.out;

  // magnet kvm while g2 burns its vCPU and g1 idles.
  ASSERT_EQ(lab()->Run("g2", "(timeout 12 sh -c 'while :; do :; done' &) ").status, 0);
  sleep(2);
  // Beside it, one that follows libvirt and keeps g2 only (--vm).
  auto k = lab()->Run("labhost", "(" + magnet + " kvm --json --count 1 --interval 3 --vm g2 >/tmp/kvm-g2.json "
                                 "2>/tmp/kvm-g2.err; echo $? >/tmp/kvm-g2.rc) & " +
                                     magnet + " kvm --json --count 1 --interval 3; wait",
                      bounds().Crunch());
  ASSERT_EQ(k.status, 0) << k.Describe();
  {
    SCOPED_TRACE("magnet kvm --vm g2");
    auto g = lab()->Run("labhost", "cat /tmp/kvm-g2.rc /tmp/kvm-g2.err /tmp/kvm-g2.json");
    ASSERT_EQ(g.status, 0) << g.Describe();
    auto lines = SplitLines(g.out);
    ASSERT_GE(lines.size(), 3u) << g.out;
    EXPECT_EQ(lines.front(), "0") << g.out;
    auto jg = nlohmann::json::parse(lines.back(), nullptr, false);
    ASSERT_TRUE(jg.is_object()) << g.out;
    std::set<long> vm_ids;
    for (const auto& row : jg.at("rows")) {
      EXPECT_EQ(row.at("guest"), "g2") << row.dump();
      EXPECT_EQ(std::to_string(row.at("tgid").get<long>()), pid2) << "only g2's QEMU: " << row.dump();
      vm_ids.insert(row.at("vm").get<long>());
    }
    EXPECT_FALSE(jg.at("rows").empty()) << g.out;
    ASSERT_EQ(vm_ids.size(), 1u) << g.out;
    EXPECT_GT(*vm_ids.begin(), 0) << "the registry's id of g2, not 0: " << g.out;
  }
  auto j = nlohmann::json::parse(Trim(k.out), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << k.out;
  std::map<std::string, double> halt_pct;
  std::set<std::string> guests;
  for (const auto& row : j.at("rows")) {
    std::string t = std::to_string(row.at("tgid").get<long>());
    guests.insert(row.at("guest").get<std::string>());
    double p50 = row.at("p50_us"), p99 = row.at("p99_us"), mx = row.at("max_us"), mean = row.at("mean_us");
    EXPECT_LE(p50, p99 + 1e-9) << row.dump();
    EXPECT_LE(p99, mx + 1e-9) << row.dump();
    EXPECT_LE(mean, mx + 1e-9) << row.dump();
    EXPECT_GT(row.at("exits").get<long>(), 0) << row.dump();
    if (row.at("reason") == "hlt") halt_pct[t] += row.at("time_pct").get<double>();
  }
  EXPECT_TRUE(guests.count("g1") && guests.count("g2")) << k.out;
  EXPECT_GT(halt_pct[pid1], halt_pct[pid2] + 30) << "g1 idles (hlt), g2 burns its vCPU. " << k.out;
  std::printf("[e2e] hlt exit time: g1 %.1f%%, g2 %.1f%% of a vCPU; %ld exit->entry pairs checked\n",
              halt_pct[pid1], halt_pct[pid2], pairs);
}

TEST_F(NestedLab, VsockCidAlreadyTakenIsReportedClearly) {
  REQUIRE_LAB();
  // A third domain asking for g1's CID (3) must fail to start with a clear message and leave
  // nothing behind.
  auto r = lab()->Run("labhost",
                      "MAGNET_LAB_CID_BASE=3 bash -c 'source /mnt/magnetsrc/tools/lab.d/lab-lib.sh; "
                      "lab_guest_start gdup 1' 2>&1; rc=$?; "
                      "virsh -q undefine gdup >/dev/null 2>&1; rm -rf /run/magnet-lab/guests/gdup; exit $rc",
                      bounds().Domain());
  EXPECT_NE(r.status, 0) << r.Describe();
  EXPECT_NE(r.out.find("virsh start gdup failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Address already in use"), std::string::npos) << r.out;
  // g1 is unaffected.
  auto ok = lab()->Run("g1", "echo still-here");
  EXPECT_EQ(ok.out, "still-here\n") << ok.Describe();
}

// ---- capture core on a kernel with fentry and kprobes (the lab host's 6.1) ----

// Counts, per event, the records of UDP traffic to @port in a trace in the lab host.
std::map<std::string, long> CountLayerEvents(const Lab& lab, const std::string& magnet,
                                             const std::string& trace, int port) {
  auto r = lab.Run("labhost",
                   magnet + " dump " + trace + " --format csv | awk -F, -v p=" +
                       std::to_string(port) +
                       " 'NR==1{for(i=1;i<=NF;i++) c[$i]=i; next} $c[\"dport\"]==p || "
                       "$c[\"sport\"]==p {n[$3]++} END{for(e in n) print e, n[e]}'",
                   lab.bounds().Crunch());
  std::map<std::string, long> out;
  for (auto& line : SplitLines(r.out)) {
    std::istringstream in(line);
    std::string e;
    long n = 0;
    if (in >> e >> n) out[e] = n;
  }
  return out;
}

TEST_F(NestedLab, CaptureAttachesThroughFentryAndKprobeOnTheLabHostKernel) {
  REQUIRE_LAB();
  const std::string magnet = "/mnt/magnetbuild/host/magnet";
  auto probes = lab()->Run("labhost", magnet + " probes --json", bounds().Crunch());
  ASSERT_EQ(probes.status, 0) << probes.Describe();
  // 6.1 has no sock_send_length tracepoint and no BPF netfilter hooks.
  EXPECT_NE(probes.out.find("\"probe\":\"net.sock.send\",\"id\":256,\"layer\":\"socket\""),
            std::string::npos);
  EXPECT_NE(probes.out.find("\"attach\":\"fentry\""), std::string::npos) << probes.out;
  for (std::string deny : {"", "fentry"}) {
    SCOPED_TRACE("MAGNET_DENY_METHODS=" + deny);
    const int port = deny.empty() ? 5403 : 5404;
    auto listed = lab()->Run("labhost", "MAGNET_DENY_METHODS=" + deny + " " + magnet + " probes", bounds().Crunch());
    std::regex l4(R"(net\.l4\.send\s+\S+\s+(\S+))");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(listed.out, m, l4)) << listed.out;
    EXPECT_EQ(m[1].str(), deny.empty() ? "fentry" : "kprobe") << listed.out;
    ASSERT_EQ(lab()->Run("labhost", "iperf3 -s -1 -D -p " + std::to_string(port) + " >/dev/null 2>&1").status, 0);
    // The traffic starts once the recorder runs: loading the probes on
    // the TCG-emulated lab host takes seconds, more with fentry.
    ASSERT_EQ(lab()->Run("labhost", "rm -f /tmp/fb.trace; (MAGNET_DENY_METHODS=" + deny + " " +
                                        magnet + " record -o /tmp/fb.trace --probes net --duration " +
                                        std::to_string(bounds().Crunch() + bounds().Linger(2)) +
                                        " >/tmp/fb.log 2>&1 & echo $! >/tmp/fb.pid)").status,
              0);
    const auto t0 = std::chrono::steady_clock::now();
    const bool recording = WaitFor(
        [&] { return lab()->Run("labhost", "grep -c recording /tmp/fb.log").out.find('1') == 0; },
        bounds().Crunch(), 250);
    ASSERT_TRUE(recording) << lab()->Run("labhost", "cat /tmp/fb.log").out;
    std::printf("[e2e] deny=%s: recorder running after %.1f s\n", deny.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    auto client = lab()->Run("g1", "iperf3 -c 10.77.0.1 -p " + std::to_string(port) +
                                       " -u -b 2M -l 1000 -t 2 >/dev/null 2>&1; echo rc=$?", bounds().Work(2));
    ASSERT_NE(client.out.find("rc=0"), std::string::npos) << client.Describe();
    ASSERT_EQ(lab()->Run("labhost", "kill -INT $(cat /tmp/fb.pid)").status, 0);
    const bool done = WaitFor(
        [&] { return lab()->Run("labhost", "grep -c 'written to' /tmp/fb.log").out.find('1') == 0; },
        bounds().Crunch(), 250);
    ASSERT_TRUE(done) << lab()->Run("labhost", "cat /tmp/fb.log").out;
    auto n = CountLayerEvents(*lab(), magnet, "/tmp/fb.trace", port);
    // Guest -> lab host: received at every layer of the lab host's stack.
    for (const char* e : {"net.dev.recv", "net.ip.recv", "net.l4.recv", "net.sock.recv"})
      EXPECT_GT(n[e], 100) << e << " (fentry/kprobe programs passed the 6.1 verifier and fire)";
  }
}


// ---- VM awareness: two KVM guests, two rates, two CPU loads ----

TEST_F(NestedLab, PerVmViewsMatchIperf3AndKeepEachVmToItself) {
  REQUIRE_LAB();
  const std::string magnet = "/mnt/magnetbuild/host/magnet";
  // Ended however the test ends: on a lab shared with the next suite, a daemon left running
  // would hold the view channels its daemons need.
  struct stop_daemon {
    ~stop_daemon() { lab()->Run("labhost", "kill $(cat /tmp/h.pid) 2>/dev/null; true"); }
  } stop;
  ASSERT_EQ(lab()->Run("labhost", "(" + magnet + " host --socket /tmp/h.sock --duration " +
                                      std::to_string(bounds().Linger(21)) +
                                      " >/tmp/host.log 2>&1 & echo $! >/tmp/h.pid)").status,
            0);
  std::string top;
  WaitFor(
      [&] {
        top = lab()->Run("labhost", magnet + " top --socket /tmp/h.sock --json --count 1").out;
        return top.find("\"name\":\"g2\"") != std::string::npos;
      },
      bounds().Ready(), 250);
  ASSERT_NE(top.find("\"name\":\"g1\""), std::string::npos) << top << lab()->Run("labhost", "cat /tmp/host.log").out;
  ASSERT_NE(top.find("\"name\":\"g2\""), std::string::npos) << top;
  // Phase 1: only g2 burns CPU, g1 idles.  The daemon's figures cover the
  // last full second, so sample well inside the phase.
  ASSERT_EQ(lab()->Run("g2", "(timeout 5 sh -c 'while :; do :; done' &) ").status, 0);
  sleep(3);
  auto mid = lab()->Run("labhost", magnet + " top --socket /tmp/h.sock --json --count 1");
  sleep(3);
  // Phase 2: different rates from the two guests.  (Each start is a
  // quick step: a CPU-starved lab host once took more than 20 s for one.)
  ASSERT_EQ(lab()->Run("labhost", "iperf3 -s -1 -D -p 5501 -J --logfile /tmp/i1.json; "
                                  "iperf3 -s -1 -D -p 5502 -J --logfile /tmp/i2.json").status, 0);
  ASSERT_EQ(lab()->Run("g1", "(sleep 1; iperf3 -c 10.77.0.1 -p 5501 -u -b 10M -l 1400 -t 5 >/dev/null 2>&1) &").status, 0);
  ASSERT_EQ(lab()->Run("g2", "(sleep 1; iperf3 -c 10.77.0.1 -p 5502 -u -b 25M -l 1400 -t 5 >/dev/null 2>&1) &").status, 0);
  std::map<std::string, std::string> vmid;
  for (std::string g : {"g1", "g2"}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(top, m, std::regex("\\{\"vm\":(\\d+),\"name\":\"" + g + "\"")));
    vmid[g] = m[1];
  }
  for (auto [g, port, file] : {std::tuple{"g1", 5501, "/tmp/i1.json"}, {"g2", 5502, "/tmp/i2.json"}}) {
    SCOPED_TRACE(g);
    // The server writes its summary when the test ends (1 + 5 s after its
    // client started); nested guests start late under load.
    std::string ij;
    double iperf_bps = -1;
    WaitFor(
        [&] {
          ij = lab()->Run("labhost", std::string("cat ") + file).out;
          return (iperf_bps = IperfReceivedBitsPerSecond(ij)) >= 0;
        },
        bounds().Work(6), 500);
    ASSERT_GT(iperf_bps, 1e5) << ij.substr(0, 1500);
    auto v = lab()->Run("labhost", magnet + " views --json --vm " + g + " --socket /tmp/h.sock").out;
    double flow = FlowBytesPerSecond(v, "guest-tx", std::stoi(vmid[g]));
    ASSERT_GT(flow, 0) << v.substr(0, 1500);
    double view_bps = flow * 8 * 1400.0 / 1428.0;
    EXPECT_NEAR(view_bps / iperf_bps, 1.0, 0.05)
        << g << ": view " << view_bps / 1e6 << " Mbit/s, iperf3 " << iperf_bps / 1e6 << " Mbit/s";
    std::printf("[e2e] %s guest-tx flow: view %.3f Mbit/s, iperf3 %.3f Mbit/s\n", g, view_bps / 1e6,
                iperf_bps / 1e6);
    RecordProperty(std::string(g) + "_iperf3_mbps", std::to_string(iperf_bps / 1e6));
    RecordProperty(std::string(g) + "_view_mbps", std::to_string(view_bps / 1e6));
  }
  // Exits and vCPU time are each VM's own: the busy g2 never halts, the idle
  // g1 mostly does; every vCPU's run + wait + halt covers the second.
  auto top_j = nlohmann::json::parse(mid.out);
  std::map<std::string, nlohmann::json> row;
  for (const auto& vm : top_j.at("vms")) row[vm.at("name")] = vm;
  ASSERT_TRUE(row.count("g1") && row.count("g2")) << mid.out;
  for (const auto& [g, r] : row) {
    EXPECT_EQ(r.at("vcpus").get<int>(), 1) << g;
    EXPECT_GT(r.at("exits_per_s").get<double>(), 0) << g << " " << mid.out;
    double sum = r.at("vcpu_run").get<double>() + r.at("vcpu_wait").get<double>() +
                 r.at("vcpu_halt").get<double>();
    EXPECT_NEAR(sum, 1.0, 0.2) << g << ": run+wait+halt of one vCPU over one second. " << mid.out;
  }
  // How much g1 halts depends on the lab host's load: g2's burner holds one
  // of its two vCPUs, so g1's vCPU, runnable, waits for the other about half
  // the time (its halt read 0.30 to 0.33 of the second here).
  EXPECT_LT(row["g2"].at("vcpu_halt").get<double>(), 0.05) << "g2 burns CPU. " << mid.out;
  EXPECT_GT(row["g1"].at("vcpu_halt").get<double>(), 0.15) << "g1 idles. " << mid.out;
  std::printf("[e2e] vCPU while only g2 burns: %s\n", mid.out.c_str());
}

}  // namespace
}  // namespace magnet::e2e
