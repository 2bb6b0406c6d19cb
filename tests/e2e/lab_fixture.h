// magnet e2e lab fixture: drives tools/lab (tools/lab.d/lab-lib.sh) from GoogleTest.
// A lab (direct: libvirt + TCG guests in a network namespace on this machine; nested: a TCG lab
// host VM running libvirt + KVM guests) is brought up once per test suite and always torn down:
// after the suite, at exit, on SIGINT/SIGTERM, and before bring-up (leftovers of a killed run).
#pragma once

#include <gtest/gtest.h>

#include <sys/types.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace magnet::e2e {

struct ProcResult {
  int status = -1;         // exit status, 128+signal when killed, -1 when it could not start
  bool timed_out = false;  // killed because the timeout passed
  std::string out;         // stdout
  std::string err;         // stderr
  double seconds = 0;      // wall time
  std::string Describe() const;  // status + stderr, for assertion messages
};

// Runs argv (argv[0] looked up in PATH) with extra environment variables, stdin from /dev/null,
// capturing stdout/stderr; kills its process group after timeout_s seconds.
// On timeout the group gets SIGTERM, then SIGKILL after grace_s seconds.
ProcResult RunProcess(const std::vector<std::string>& argv, int timeout_s,
                      const std::map<std::string, std::string>& env = {}, int grace_s = 5);

std::string SourceDir();  // repository root
std::string BuildDir();   // CMake binary dir (images under BuildDir()/vm-images)
std::string ArtifactDir(const std::string& name);  // per-test output dir, created

// How long a lab operation may take (docs/lab.md, "Bounds"): one bound per kind of step, never a
// number picked per call.  Each is what the step takes on an idle two-core machine, with
// headroom, in the lab's mode (a nested lab answers through its emulated lab host, several times
// slower), times the lab's speed factor: `tools/lab up` times control-channel round trips to g1
// against its mode's reference and writes the ratio, clamped to [1, 4], to the lab's state.  A
// bound only ends a wait that went wrong; it never decides a result.  What a test asserts about
// time (frames within 100 ms, a paused guest's run ending after its timeout) is its subject and
// stays a number in the test.
class Bounds {
 public:
  Bounds() = default;
  Bounds(bool nested, double factor);
  bool nested() const { return nested_; }
  double factor() const { return factor_; }
  // A short command, over a guest's control channel or on the host side (this machine, or the
  // nested lab host): cat a file, start a background job, kill, a magnet or virsh query.
  int Quick() const { return Scale(15, 45); }
  // A command that works for @secs (iperf3 -t, a sleep in it) and then answers.
  int Work(double secs) const;
  // Something just started becoming ready: a daemon's [started] line and first registry pass,
  // agents subscribing, a server listening, a recorder's probes attached.
  int Ready() const { return Scale(30, 90); }
  // CPU-bound work in the lab: loading probes, turning a trace into CSV, a guest writing a disk.
  int Crunch() const { return Scale(60, 180); }
  // A libvirt domain operation (define, start, destroy, attach a disk) with the guest's boot.
  int Domain() const { return Scale(60, 120); }
  // The lifetime of a helper a test starts (an iperf3 server, a listener, a daemon, a recorder)
  // that must outlive @secs of its use and the test's steps around it; the test ends it (or its
  // use does) earlier: this only keeps a test that died from leaving it behind.
  int Linger(double secs) const { return static_cast<int>(std::ceil(secs)) + 4 * Ready(); }
  // The longest one test may take: the lifetime of a helper that lives through a whole test
  // (a daemon), which the test ends; it only keeps a test that died from leaving it behind.
  int Test() const { return Scale(300, 900); }
  // tools/lab's own commands: copying the logs, tearing down.
  int Logs() const { return Scale(60, 120); }
  int Down() const { return Scale(120, 180); }
  std::string Describe() const;
  // Every kind as `tools/lab bounds` prints it (its shell equivalent, tools/lab.d/lab-lib.sh).
  std::string Table() const;

 private:
  int Scale(double direct_s, double nested_s) const;
  bool nested_ = false;
  double factor_ = 1;
};

// `tools/lab up` of @guests in @mode: the sum of the lab's own bounds on its steps (it ends
// itself on each; this only catches a hang between them), so not scaled.
int UpBound(const std::string& mode, int guests);

// One lab instance, addressed through tools/lab with its own state directory.
class Lab {
 public:
  Lab(std::string mode, std::string state_dir, std::map<std::string, std::string> env = {});
  const std::string& mode() const { return mode_; }
  const std::string& state_dir() const { return state_dir_; }
  std::map<std::string, std::string> Env() const;
  // This lab's bounds: its speed factor as `up` measured it (1 before it is up).
  const Bounds& bounds() const { return bounds_; }

  ProcResult Lab_(const std::vector<std::string>& args, int timeout_s) const;  // tools/lab ARGS
  // Brings the lab up (bounded by UpBound) and reads its speed factor.
  ProcResult Up(int guests);
  ProcResult Down() const;
  // Runs CMD (a /bin/sh command line) in GUEST ("g1", "g2", or "labhost" in nested mode); in the
  // guest it is killed after @timeout_s; 0 means bounds().Quick().
  ProcResult Run(const std::string& guest, const std::string& cmd, int timeout_s = 0) const;
  // Uses a lab that is already up (with at least @guests guests): reads its bounds and checks
  // that every guest answers; "" or what is wrong.
  std::string Attach(int guests);
  // Copies consoles and libvirt/QEMU logs into dest; returns the directory.
  std::string CollectLogs(const std::string& dest) const;
  // Console log of a guest: direct mode reads the file, nested mode asks the lab host.
  std::string Console(const std::string& guest) const;

 private:
  std::string mode_;
  std::string state_dir_;
  std::map<std::string, std::string> env_;
  // Reads the speed factor `up` measured and checks the shell's table; "" or what is wrong.
  std::string ReadBounds();
  Bounds bounds_;
};

// Registers a lab for teardown at exit and on SIGINT/SIGTERM.
void RegisterForEmergencyTeardown(const Lab& lab);
void UnregisterEmergencyTeardown(const Lab& lab);

// The bounds of the suite's lab (LabSuite), for helpers that have no lab at hand; direct mode
// with factor 1 when no lab is up.
const Bounds& LabBounds();

// Base fixture: one lab per suite, or (MAGNET_E2E_SHARED_LAB, MAGNET_E2E_SHARED_NESTED_LAB set)
// tools/test's one lab of the suite's mode for all its suites, used as it is and left up (a
// nested one that died is brought up again, a direct one never).  Derived suites call BringUp
// in their SetUpTestSuite (see e2e_test.cc).  On a failed test the logs and the guest consoles
// are copied to ArtifactDir(<suite>.<test>) and the console tails printed.
//
// A nested lab can die under a test: its lab host's kernel (emulated nested SVM), or a KVM
// guest reset by its CPU (docs/lab.md). Before each test of a nested suite, SetUp() checks
// that the lab host and every guest answer; when one does not, it keeps the lab's logs
// (ArtifactDir(<suite>.lab-died-before-<test>)), says why on a "[e2e] RECOVER:" line, and
// brings the lab up again, so that one death fails the test it happened in (which tools/test
// then runs again on its own) and not every test after it.
class LabSuite : public ::testing::Test {
 protected:
  static void BringUp(const std::string& mode, int guests);
  static void TearDownLab();
  void SetUp() override;
  void TearDown() override;
  static Lab* lab() { return lab_; }
  static const Bounds& bounds() { return LabBounds(); }
  static const std::string& up_error() { return up_error_; }
  // Why the nested lab can not run a test (the lab host or a guest does not answer), or "".
  static std::string NestedLabGone();

  static Lab* lab_;
  static std::string up_error_;
  static std::vector<std::string> guests_;
  // tools/test's shared lab of the suite's mode (MAGNET_E2E_SHARED_LAB, direct;
  // MAGNET_E2E_SHARED_NESTED_LAB, nested): left up.
  static bool shared_;
  // A nested lab that died (@why): keeps its logs in ArtifactDir(@what), says so ("[e2e]
  // RECOVER:") and brings it up again; up_error_ when that fails.
  static void BringUpAgain(const std::string& what, const std::string& why);
  friend const Bounds& LabBounds();
};

// A suite on a direct lab with two guests (g1, g2), its own or tools/test's
// shared one; each test starts only when the lab is up.
class TwoGuestDirectSuite : public LabSuite {
 protected:
  static void SetUpTestSuite() { BringUp("direct", 2); }
  static void TearDownTestSuite() { TearDownLab(); }
  void SetUp() override {
    ASSERT_NE(lab(), nullptr);
    ASSERT_TRUE(up_error().empty()) << up_error();
  }
};

// Small helpers for test bodies.
std::vector<std::string> SplitLines(const std::string& s);
std::string Trim(const std::string& s);
std::string ReadFileText(const std::string& path);  // "" when unreadable
// Polls @cond every @step_ms until it holds (true) or @timeout_s pass (false).
bool WaitFor(const std::function<bool()>& cond, double timeout_s, int step_ms = 100);
// A TCP port listening in network namespace @ns.
bool Listening(const std::string& ns, int port);

// A process in the background (a simple command: $! is its own pid), its
// output to @out; ended by PID (SIGTERM, SIGKILL after LabBounds().Quick())
// when it goes out of scope, however the test ends.
class Background {
 public:
  Background(const std::string& cmd, const std::string& out);
  ~Background() { Stop(); }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  bool Running() const;
  pid_t pid() const { return pid_; }
  void Stop();
  // SIGKILL, and waits until it is gone.
  void Kill();

 private:
  pid_t pid_ = -1;
};


// The largest flow of a view in a `magnet views --vm` reply: its average
// bandwidth (bytes/s at the tap) over the flow's lifetime; -1 if absent.
// Also checks (EXPECT) that every instance in the reply is VM @vm's.
double FlowBytesPerSecond(const std::string& reply, const std::string& view, int vm);
// Events per connection row (by flow id) of a view in a per-VM views reply.
std::map<std::string, long> ConnectionEvents(const std::string& reply, const std::string& view,
                                             int vm);
// iperf3 -s -J: what the server received over the whole UDP test; -1 if absent.
double IperfReceivedBitsPerSecond(const std::string& json);
// iperf3 -s -J, UDP: the datagrams the client sent up to the last one the
// server received (received + lost, by sequence number); -1 if absent.
long IperfSentDatagrams(const std::string& json);
// The interquartile mean (the mean of the middle half, the lowest and
// highest quarter left out) of @v, or -1 when empty: a rate's central value
// over bursty per-second samples, steadier than their median and not moved
// by a stalled second and the burst after it.
double InterquartileMean(std::vector<double> v);
// The standard error of InterquartileMean(@v): the standard deviation of
// the middle half over the square root of its size (0 for fewer than two
// values); and that over the mean.
double InterquartileStandardError(std::vector<double> v);
double InterquartileRelativeError(std::vector<double> v);
// The server's per-second rates (bit/s) of the intervals within [from, to].
std::vector<double> IperfSeconds(const std::string& json, double from_s, double to_s);
// InterquartileMean of the server's per-second intervals lying within
// [from, to] (seconds since the test started), or -1.
double IperfCentralBitsPerSecond(const std::string& json, double from_s, double to_s);

}  // namespace magnet::e2e
