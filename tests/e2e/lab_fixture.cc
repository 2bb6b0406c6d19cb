#include "lab_fixture.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <regex>
#include <sstream>

#ifndef MAGNET_E2E_SOURCE_DIR
#error "MAGNET_E2E_SOURCE_DIR must be defined by tests/e2e/CMakeLists.txt"
#endif
#ifndef MAGNET_E2E_BUILD_DIR
#error "MAGNET_E2E_BUILD_DIR must be defined by tests/e2e/CMakeLists.txt"
#endif

extern char** environ;

namespace magnet::e2e {
namespace fs = std::filesystem;

// Children must not inherit a blocked/ignored SIGTERM/SIGINT (e.g. when forked from a signal
// handler): the lab scripts end their own helpers with SIGTERM. Async-signal-safe.
static void ResetSignalsForChild() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
}

std::string ProcResult::Describe() const {
  std::ostringstream o;
  o << "exit status " << status << (timed_out ? " (timed out)" : "") << " after " << seconds
    << " s\n--- stderr ---\n" << err << "\n--- stdout ---\n" << out;
  return o.str();
}

ProcResult RunProcess(const std::vector<std::string>& argv, int timeout_s,
                      const std::map<std::string, std::string>& env, int grace_s) {
  ProcResult r;
  auto t0 = std::chrono::steady_clock::now();
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    r.err = std::string("pipe: ") + strerror(errno);
    return r;
  }
  // Everything the child needs is prepared before fork.
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto name = kv.substr(0, kv.find('='));
    if (!env.count(name)) envs.push_back(kv);
  }
  for (auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) {
    r.err = std::string("fork: ") + strerror(errno);
    return r;
  }
  if (pid == 0) {
    setpgid(0, 0);
    ResetSignalsForChild();
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    execvpe(cargv[0], cargv.data(), cenv.data());
    dprintf(2, "exec %s: %s\n", cargv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_pipe[1]);
  auto deadline = t0 + std::chrono::seconds(timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline && !killed) {
      r.timed_out = true;
      killed = true;
      kill(-pid, SIGTERM);
      deadline = now + std::chrono::seconds(grace_s);
    } else if (now >= deadline && killed) {
      kill(-pid, SIGKILL);
      break;
    }
    int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count());
    int n = poll(fds, 2, std::max(ms, 1));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int st = 0;
  if (killed) {
    // Bounded wait for the child itself.
    for (int i = 0; i < 20 && waitpid(pid, &st, WNOHANG) == 0; ++i) usleep(100000);
    if (waitpid(pid, &st, WNOHANG) == 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, &st, 0);
    }
  } else {
    waitpid(pid, &st, 0);
  }
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string SourceDir() { return MAGNET_E2E_SOURCE_DIR; }
std::string BuildDir() {
  const char* b = getenv("MAGNET_BUILD_DIR");
  return b && *b ? b : MAGNET_E2E_BUILD_DIR;
}

std::string ArtifactDir(const std::string& name) {
  const char* base = getenv("MAGNET_E2E_ARTIFACTS");
  fs::path p = fs::path(base && *base ? base : BuildDir() + "/e2e-artifacts") / name;
  fs::create_directories(p);
  return p.string();
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

std::string Trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// ------------------------------------------------------------------------------------------
Bounds::Bounds(bool nested, double factor) : nested_(nested), factor_(std::clamp(factor, 1.0, 4.0)) {}

int Bounds::Scale(double direct_s, double nested_s) const {
  return static_cast<int>(std::ceil((nested_ ? nested_s : direct_s) * factor_));
}

// The seconds of work themselves do not stretch on a slow lab (iperf3 -t and sleep keep the
// wall clock); what comes around them does.
int Bounds::Work(double secs) const { return static_cast<int>(std::ceil(secs)) + Quick(); }

std::string Bounds::Describe() const {
  std::ostringstream o;
  o << (nested_ ? "nested" : "direct") << " lab, speed factor " << factor_ << ": quick " << Quick()
    << " s, work N s + " << Quick() << " s, ready " << Ready() << " s, crunch " << Crunch()
    << " s, domain " << Domain() << " s, linger N s + " << Linger(0) << " s, logs " << Logs()
    << " s, down " << Down() << " s";
  return o.str();
}

std::string Bounds::Table() const {
  std::ostringstream o;
  o << "quick " << Quick() << "\nready " << Ready() << "\ncrunch " << Crunch() << "\ndomain " << Domain()
    << "\ntest " << Test() << "\nlogs " << Logs() << "\ndown " << Down() << "\nwork0 " << Work(0)
    << "\nlinger0 " << Linger(0) << "\n";
  return o.str();
}

int UpBound(const std::string& mode, int guests) {
  // tools/lab's defaults (docs/lab.md): libvirtd 60 s, each guest's readiness 60 s (direct) or
  // up to 4 x 90 s + 30 s (nested, one after the other, scaled by the lab host's own readiness),
  // the lab host 120 s, 2 retries of a nested up; and 120 s for the images and the teardown of a
  // failed attempt.
  if (mode == "nested") return 3 * (120 + 60 + 60 + guests * (4 * 90 + 30)) + 120;
  return 60 + guests * 60 + 120;
}

// ------------------------------------------------------------------------------------------
Lab::Lab(std::string mode, std::string state_dir, std::map<std::string, std::string> env)
    : mode_(std::move(mode)), state_dir_(std::move(state_dir)), env_(std::move(env)) {}

std::map<std::string, std::string> Lab::Env() const {
  std::map<std::string, std::string> e = env_;
  e["MAGNET_LAB_MODE"] = mode_;
  e["MAGNET_LAB_STATE"] = state_dir_;
  e["MAGNET_BUILD_DIR"] = BuildDir();
  if (!e.count("MAGNET_LAB_FAIL_LOGS")) e["MAGNET_LAB_FAIL_LOGS"] = ArtifactDir("lab-up-failed-" + mode_);
  return e;
}

ProcResult Lab::Lab_(const std::vector<std::string>& args, int timeout_s) const {
  std::vector<std::string> argv = {"bash", SourceDir() + "/tools/lab"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, timeout_s, Env());
}

ProcResult Lab::Up(int guests) {
  // Generous grace: on timeout 'tools/lab up' gets SIGTERM and tears the lab down itself.
  std::vector<std::string> argv = {"bash", SourceDir() + "/tools/lab", "up", std::to_string(guests)};
  bounds_ = Bounds(mode_ == "nested", 1);
  auto r = RunProcess(argv, UpBound(mode_, guests), Env(), bounds_.Down());
  if (r.status != 0) return r;
  const std::string why = ReadBounds();
  if (!why.empty()) {
    r.status = 1;
    r.err += why;
  }
  return r;
}

std::string Lab::ReadBounds() {
  // "factor=F roundtrip_ms=..." (tools/lab.d/lab-lib.sh, lab_speed_measure).
  const std::string speed = ReadFileText(state_dir_ + "/speed");
  std::smatch m;
  if (!std::regex_search(speed, m, std::regex(R"(factor=([0-9.]+))")))
    return "[e2e] no speed factor in " + state_dir_ + "/speed ('" + speed + "')\n";
  bounds_ = Bounds(mode_ == "nested", std::stod(m[1]));
  std::printf("[e2e] bounds: %s (%s)\n", bounds_.Describe().c_str(), Trim(speed).c_str());
  // The shell tests' bounds are the same table (one set of bounds, two languages).
  auto shell = Lab_({"bounds"}, bounds_.Quick());
  if (shell.out != bounds_.Table())
    return "[e2e] `tools/lab bounds` differs from lab_fixture's Bounds (keep the two tables equal):\n" +
           shell.out + "--- lab_fixture ---\n" + bounds_.Table();
  return "";
}

std::string Lab::Attach(int guests) {
  if (Trim(ReadFileText(state_dir_ + "/mode")) != mode_ || Trim(ReadFileText(state_dir_ + "/up")) != "1")
    return "no " + mode_ + " lab is up in " + state_dir_;
  std::string why = ReadBounds();
  if (!why.empty()) return why;
  for (int i = 1; i <= guests; ++i) {
    const std::string g = "g" + std::to_string(i);
    // A domain bound: the suite before may have just started it again (its own guest's boot).
    auto r = Run(g, "true", bounds_.Domain());
    if (r.status != 0) return g + " of the lab in " + state_dir_ + " does not answer: " + r.Describe();
  }
  return "";
}

ProcResult Lab::Down() const { return Lab_({"down"}, bounds_.Down()); }

ProcResult Lab::Run(const std::string& guest, const std::string& cmd, int timeout_s) const {
  if (timeout_s <= 0) timeout_s = bounds_.Quick();
  // tools/lab ends a run itself within timeout_s + 27 s (docs/lab.md: its
  // deadline of timeout_s + 10 s, in nested mode behind the lab host's +15 s,
  // and socat's +2 s): a quick step past that means the client hung, which
  // no caller expects; say where.
  auto r = Lab_({"run-timeout", guest, std::to_string(timeout_s), cmd}, timeout_s + 27 + bounds_.Quick());
  // So does a failure of the control channel itself ("[lab] ERROR"), which
  // callers that only check the command's status would not show.
  if (r.timed_out || r.err.find("[lab] ERROR") != std::string::npos)
    std::fprintf(stderr, "[lab] 'tools/lab run-timeout %s %d'%s: %s\n", guest.c_str(), timeout_s,
                 r.timed_out ? " was killed" : "", r.Describe().c_str());
  return r;
}

std::string Lab::CollectLogs(const std::string& dest) const {
  Lab_({"logs", dest}, bounds_.Logs());
  return dest;
}

std::string Lab::Console(const std::string& guest) const {
  if (guest == "labhost") {
    std::ifstream f(state_dir_ + "/labhost/console.log");
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  if (mode_ == "nested") {
    return Run("labhost", "cat /run/magnet-lab/guests/" + guest + "/console.log").out;
  }
  std::ifstream f(state_dir_ + "/guests/" + guest + "/console.log");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// ------------------------------------------------------------------------------------------
// Emergency teardown: argv/envp prepared in advance so the signal handler only forks/execs.
namespace {
struct Prepared {
  std::string state;
  std::vector<std::string> args, envs;
  std::vector<char*> argv, envp;
};
std::mutex g_mu;
std::vector<Prepared*> g_labs;
bool g_handlers_installed = false;

void TeardownAll() {
  for (Prepared* p : g_labs) {
    pid_t pid = fork();
    if (pid == 0) {
      ResetSignalsForChild();
      int devnull = open("/dev/null", O_RDONLY);
      dup2(devnull, 0);
      execve("/bin/bash", p->argv.data(), p->envp.data());
      _exit(127);
    }
    if (pid > 0) {
      int st;
      waitpid(pid, &st, 0);
    }
  }
}

void OnSignal(int sig) {
  const char msg[] = "\n[e2e] interrupted: tearing the lab down\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  TeardownAll();
  _exit(128 + sig);
}

void AtExit() {
  std::lock_guard<std::mutex> l(g_mu);
  TeardownAll();
}
}  // namespace

void RegisterForEmergencyTeardown(const Lab& lab) {
  std::lock_guard<std::mutex> l(g_mu);
  auto* p = new Prepared;
  p->state = lab.state_dir();
  p->args = {"bash", SourceDir() + "/tools/lab", "down"};
  auto env = lab.Env();
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    if (!env.count(kv.substr(0, kv.find('=')))) p->envs.push_back(kv);
  }
  for (auto& [k, v] : env) p->envs.push_back(k + "=" + v);
  for (auto& a : p->args) p->argv.push_back(const_cast<char*>(a.c_str()));
  p->argv.push_back(nullptr);
  for (auto& e : p->envs) p->envp.push_back(const_cast<char*>(e.c_str()));
  p->envp.push_back(nullptr);
  g_labs.push_back(p);
  if (!g_handlers_installed) {
    g_handlers_installed = true;
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
    std::atexit(AtExit);
  }
}

void UnregisterEmergencyTeardown(const Lab& lab) {
  std::lock_guard<std::mutex> l(g_mu);
  g_labs.erase(std::remove_if(g_labs.begin(), g_labs.end(),
                              [&](Prepared* p) {
                                if (p->state != lab.state_dir()) return false;
                                delete p;
                                return true;
                              }),
               g_labs.end());
}

// ------------------------------------------------------------------------------------------
Lab* LabSuite::lab_ = nullptr;
std::string LabSuite::up_error_;
std::vector<std::string> LabSuite::guests_;
bool LabSuite::shared_ = false;

const Bounds& LabBounds() {
  static const Bounds none;
  return LabSuite::lab_ ? LabSuite::lab_->bounds() : none;
}

void LabSuite::BringUp(const std::string& mode, int guests) {
  up_error_.clear();
  guests_.clear();
  for (int i = 1; i <= guests; ++i) guests_.push_back("g" + std::to_string(i));
  // tools/test's one lab of this mode for its suites (docs/lab.md): used as it is, left up.
  const char* shared = getenv(mode == "nested" ? "MAGNET_E2E_SHARED_NESTED_LAB" : "MAGNET_E2E_SHARED_LAB");
  shared_ = shared && *shared;
  if (shared_) {
    lab_ = new Lab(mode, shared);
    const std::string why = lab_->Attach(guests);
    std::cout << "[e2e] the shared " << mode << " lab in " << shared << ": "
              << (why.empty() ? "every guest answers" : why) << "\n"
              << std::flush;
    if (why.empty()) return;
    // A direct lab is never brought up again; a nested one can die between two suites as under
    // a test, and is brought up again as before a test (SetUp).
    if (mode == "direct") {
      up_error_ = "the shared direct lab (tools/test) is not usable: " + why;
      return;
    }
    BringUpAgain(std::string(::testing::UnitTest::GetInstance()->current_test_suite()->name()) +
                     ".lab-died-before-the-suite",
                 why);
    return;
  }
  lab_ = new Lab(mode, "/run/magnet-lab-e2e-" + mode);
  RegisterForEmergencyTeardown(*lab_);
  lab_->Down();  // leftovers of a killed run
  auto r = lab_->Up(guests);
  std::cout << "[e2e] lab up (" << mode << ", " << guests << " guests): exit " << r.status
            << " in " << r.seconds << " s\n"
            << r.err << std::flush;
  if (r.status != 0) up_error_ = "tools/lab up failed in " + mode + " mode: " + r.Describe();
}

void LabSuite::TearDownLab() {
  if (!lab_) return;
  if (shared_) {  // its owner, tools/test, tears it down
    delete lab_;
    lab_ = nullptr;
    return;
  }
  auto r = lab_->Down();
  std::cout << "[e2e] lab down: exit " << r.status << " in " << r.seconds << " s\n" << std::flush;
  UnregisterEmergencyTeardown(*lab_);
  delete lab_;
  lab_ = nullptr;
}

std::string LabSuite::NestedLabGone() {
  auto host = lab_->Run("labhost", "true");
  if (host.status != 0) {
    // A lab host whose vCPUs spin with interrupts off says nothing itself: tools/lab looks (its
    // QEMU's monitor) and writes it to the console log.
    lab_->Lab_({"labhost-lockup"}, lab_->bounds().Quick());
    // How it ended, as the lab host's console (or the lab's watcher of its QEMU) says.
    static const std::regex death(
        R"(Kernel panic|BUG:|stack guard page|magnet-lab: the lab host QEMU ended without being stopped|)"
        R"(magnet-lab: the lab host locked up)");
    std::string why = "the lab host does not answer (" + host.Describe() + ")";
    for (const auto& line : SplitLines(ReadFileText(lab_->state_dir() + "/labhost/console.log")))
      if (std::regex_search(line, death)) return why + ": " + Trim(line);
    return why;
  }
  for (const auto& g : guests_) {
    auto r = lab_->Run(g, "true");
    if (r.status == 0) continue;
    // A guest the emulated nested SVM reset: its QEMU's SHUTDOWN event in the lab host; or one
    // wedged there (tools/lab guest-lockup says which, and writes it to the console log).
    auto ev = lab_->Run("labhost",
                        "grep -a \"for domain '" + g + "'\" /run/magnet-lab/logs/qemu-events.log | tail -n 1");
    auto wedged = lab_->Lab_({"guest-lockup", g}, 2 * lab_->bounds().Quick());
    return g + " does not answer (" + Trim(r.Describe()) + ")" +
           (Trim(ev.out).empty() ? "" : "; its last QEMU event: " + Trim(ev.out)) + "; " + Trim(wedged.out);
  }
  return "";
}

void LabSuite::SetUp() {
  if (!lab_ || lab_->mode() != "nested" || !up_error_.empty()) return;
  const std::string why = NestedLabGone();
  if (why.empty()) return;
  auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  BringUpAgain(std::string(info->test_suite_name()) + ".lab-died-before-" + info->name(), why);
}

void LabSuite::BringUpAgain(const std::string& what, const std::string& why) {
  const std::string dest = ArtifactDir(what);
  lab_->CollectLogs(dest);
  std::cout << "[e2e] RECOVER: " << what << ": the nested lab died: " << why << "; its logs: " << dest
            << "; bringing it up again\n"
            << std::flush;
  lab_->Down();
  auto r = lab_->Up(static_cast<int>(guests_.size()));
  std::cout << "[e2e] lab up again (nested, " << guests_.size() << " guests): exit " << r.status << " in "
            << r.seconds << " s\n"
            << r.err << std::flush;
  if (r.status != 0) up_error_ = "tools/lab up failed in nested mode (again, after the lab died): " + r.Describe();
}

void LabSuite::TearDown() {
  if (!HasFailure() || !lab_) return;
  if (!up_error_.empty()) {
    // 'tools/lab up' already collected the logs and tore the lab down.
    std::cout << "[e2e] lab did not come up; its logs: " << lab_->Env()["MAGNET_LAB_FAIL_LOGS"] << "\n";
    return;
  }
  // A nested lab host that locked up, or a KVM guest in it wedged (it does not answer its
  // control channel and its vCPU stays halted or at one kernel instruction: tools/lab
  // guest-lockup), is written to the lab host's console log before the logs are kept, where
  // tools/test looks for a death under this test.
  if (lab_->mode() == "nested") {
    if (lab_->Run("labhost", "true").status != 0) {
      lab_->Lab_({"labhost-lockup"}, lab_->bounds().Quick());
    } else {
      for (const auto& g : guests_) {
        auto r = lab_->Lab_({"guest-lockup", g}, 2 * lab_->bounds().Quick());
        if (r.out.find("answers its control channel") == std::string::npos)
          std::cout << "[e2e] " << g << ": " << Trim(r.out) << "\n";
      }
    }
  }
  auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dest = ArtifactDir(std::string(info->test_suite_name()) + "." + info->name());
  lab_->CollectLogs(dest);
  std::vector<std::string> who = guests_;
  if (lab_->mode() == "nested") who.insert(who.begin(), "labhost");
  for (auto& g : who) {
    auto lines = SplitLines(lab_->Console(g));
    size_t from = lines.size() > 40 ? lines.size() - 40 : 0;
    std::cout << "----- console of " << g << " (last " << lines.size() - from << " lines) -----\n";
    for (size_t i = from; i < lines.size(); ++i) std::cout << lines[i] << "\n";
  }
  std::cout << "[e2e] logs of the failed test: " << dest << "\n" << std::flush;
}

// The largest flow of a view in a `magnet views --vm` reply: its average
// bandwidth (bytes/s at the tap) over the flow's lifetime.  Also checks that
// every instance in the reply is VM @vm's.
double FlowBytesPerSecond(const std::string& reply, const std::string& view, int vm) {
  auto a = nlohmann::json::parse(reply);
  double bps = -1;
  for (const auto& v : a) {
    EXPECT_EQ(v.at("vm").get<int>(), vm) << "an instance of another VM in this VM's views";
    if (v.at("view") != view) continue;
    for (const auto& g : v.at("groups"))
      if (g.at("by") == "connection" && !g.at("rows").empty())
        bps = g.at("rows")[0].at("bandwidth_bps").get<double>();
  }
  return bps;
}

std::map<std::string, long> ConnectionEvents(const std::string& reply, const std::string& view,
                                             int vm) {
  // Keyed by the flow id: a view of records that carry addresses labels a
  // flow by its ends, one of records that do not (vmnet.queue) by the id.
  std::map<std::string, long> out;
  auto a = nlohmann::json::parse(reply);
  for (const auto& v : a) {
    EXPECT_EQ(v.at("vm").get<int>(), vm) << "an instance of another VM in this VM's views";
    if (v.at("view") != view) continue;
    for (const auto& g : v.at("groups"))
      if (g.at("by") == "connection")
        for (const auto& r : g.at("rows"))
          out[std::to_string(r.at("key").get<uint64_t>())] += r.at("events").get<long>();
  }
  return out;
}

// iperf3 -s -J: what the server received over the whole test (UDP).
double IperfReceivedBitsPerSecond(const std::string& json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.contains("end")) return -1;
  return j["end"]["sum_received"]["bits_per_second"].get<double>();  // 3.12: UDP receiver side
}

long IperfSentDatagrams(const std::string& json) {
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.contains("end") || !j["end"].contains("sum_received")) return -1;
  return j["end"]["sum_received"].value("packets", -1L);
}

double InterquartileMean(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t cut = v.size() / 4;
  double sum = 0;
  for (size_t i = cut; i < v.size() - cut; ++i) sum += v[i];
  return sum / static_cast<double>(v.size() - 2 * cut);
}

double InterquartileStandardError(std::vector<double> v) {
  if (v.size() < 2) return 0;
  std::sort(v.begin(), v.end());
  const size_t cut = v.size() / 4, n = v.size() - 2 * cut;
  if (n < 2) return 0;
  double sum = 0, sq = 0;
  for (size_t i = cut; i < v.size() - cut; ++i) sum += v[i];
  const double mean = sum / static_cast<double>(n);
  for (size_t i = cut; i < v.size() - cut; ++i) sq += (v[i] - mean) * (v[i] - mean);
  return std::sqrt(sq / static_cast<double>(n - 1)) / std::sqrt(static_cast<double>(n));
}

double InterquartileRelativeError(std::vector<double> v) {
  const double mean = InterquartileMean(v);
  return mean > 0 ? InterquartileStandardError(std::move(v)) / mean : 0;
}

std::vector<double> IperfSeconds(const std::string& json, double from_s, double to_s) {
  std::vector<double> v;
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.contains("intervals")) return v;
  for (const auto& i : j["intervals"]) {
    const auto& s = i["sum"];
    double a = s.value("start", 0.0), b = s.value("end", 0.0);
    if (a < from_s - 0.01 || b > to_s + 0.01 || b <= a) continue;
    v.push_back(s.value("bits_per_second", 0.0));
  }
  return v;
}

double IperfCentralBitsPerSecond(const std::string& json, double from_s, double to_s) {
  return InterquartileMean(IperfSeconds(json, from_s, to_s));
}

std::string ReadFileText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool WaitFor(const std::function<bool()>& cond, double timeout_s, int step_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    usleep(static_cast<useconds_t>(step_ms) * 1000);
  }
}

bool Listening(const std::string& ns, int port) {
  auto r = RunProcess({"ip", "netns", "exec", ns, "ss", "-Hltn", "sport = :" + std::to_string(port)},
                      LabBounds().Quick());
  return r.status == 0 && !Trim(r.out).empty();
}

Background::Background(const std::string& cmd, const std::string& out) {
  auto r = RunProcess({"sh", "-c", cmd + " >" + out + " 2>&1 </dev/null & echo $!"}, LabBounds().Quick());
  EXPECT_EQ(r.status, 0) << r.Describe();
  pid_ = std::atoi(Trim(r.out).c_str());
  EXPECT_GT(pid_, 0) << r.Describe();
}

bool Background::Running() const { return pid_ > 0 && ::kill(pid_, 0) == 0; }

void Background::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  if (!WaitFor([&] { return !Running(); }, LabBounds().Quick(), 50)) ::kill(pid_, SIGKILL);
  pid_ = -1;
}

void Background::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  WaitFor([&] { return !Running(); }, LabBounds().Quick(), 50);
  pid_ = -1;
}

}  // namespace magnet::e2e
