// Each VM's own view, delivered into that VM, end to end: the host daemon
// (this machine in direct mode, the lab host in nested mode), the guest
// agent started at boot in every lab guest, the client library, and
// hostile guests.  Direct mode: TCG guests over the virtio-serial view
// channel.  Nested mode: KVM guests over vhost-vsock.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <cmath>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "guest_leaks.h"
#include "lab_fixture.h"

#define REQUIRE_LAB()                              \
  do {                                             \
    ASSERT_NE(lab(), nullptr);                     \
    ASSERT_TRUE(up_error().empty()) << up_error(); \
  } while (0)

namespace magnet::e2e {
namespace {

using json = nlohmann::json;
using clk = std::chrono::steady_clock;

double Secs(clk::time_point a, clk::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Where the daemon runs: this machine (direct) or the lab host (nested).
class HostSide {
 public:
  HostSide(Lab* lab, bool nested) : lab_(lab), nested_(nested) {}
  // @timeout_s 0: a quick step (LabBounds().Quick()).
  ProcResult Sh(const std::string& cmd, int timeout_s = 0) const {
    if (timeout_s <= 0) timeout_s = LabBounds().Quick();
    if (nested_) return lab_->Run("labhost", cmd, timeout_s);
    return RunProcess({"sh", "-c", cmd}, timeout_s);
  }
  // MAGNET_E2E_MAGNET: another build's daemon against this build's guests,
  // to show a new test failing on older code first (nested mode: its path
  // in the lab host, e.g. under /mnt/magnetbuild).
  std::string Magnet() const {
    if (const char* m = getenv("MAGNET_E2E_MAGNET"); m && *m) return m;
    return nested_ ? "/mnt/magnetbuild/host/magnet" : BuildDir() + "/host/magnet";
  }
  bool nested() const { return nested_; }

 private:
  Lab* lab_;
  bool nested_;
};

// magnet host in the background, ended by its PID (SIGTERM, or SIGKILL to
// test a crash); always ended when the test ends.
class Daemon {
 public:
  Daemon(const HostSide& h, std::string args, std::string tag)
      : h_(h), args_(std::move(args)), tag_(std::move(tag)) {
    sock_ = "/tmp/magnet-gv-" + tag_ + ".sock";
    log_ = "/tmp/magnet-gv-" + tag_ + ".log";
    pidf_ = "/tmp/magnet-gv-" + tag_ + ".pid";
  }
  ~Daemon() { Stop("TERM"); }
  // The test stops it; its own --duration only ends one a dead test left behind.
  std::string Command() const {
    return h_.Magnet() + " -v host --socket " + sock_ + " --duration " +
           std::to_string(LabBounds().Test()) + " " + args_ + " >>" + log_ + " 2>&1 & echo $! >" + pidf_;
  }
  // Starts it and waits (on the host side, in tenths of a second) for its [started] line.
  void Start() {
    const Bounds& b = LabBounds();
    auto r = h_.Sh("n=$(grep -c 'magnet-host: \\[started\\]' " + log_ + " 2>/dev/null); " +
                       Command() + "; i=0; while [ $i -lt " + std::to_string(10 * b.Ready()) + " ]; do " +
                       "[ $(grep -c 'magnet-host: \\[started\\]' " + log_ +
                       ") -gt ${n:-0} ] && break; sleep 0.1; i=$((i+1)); done; cat " + pidf_,
                   b.Work(b.Ready()));
    running_ = r.status == 0;
    EXPECT_EQ(r.status, 0) << r.Describe();
  }
  void Stop(const std::string& sig) {
    if (!running_) return;
    const Bounds& b = LabBounds();
    h_.Sh("p=$(cat " + pidf_ + "); kill -" + sig + " $p; for i in $(seq " + std::to_string(10 * b.Quick()) +
              "); do kill -0 $p 2>/dev/null || break; sleep 0.1; done",
          b.Work(b.Quick()));
    running_ = false;
  }
  // Stops it with @sig, waits 3 s, starts it again, and measures on the
  // host side (its uptime clock, in seconds): when it was gone, when its
  // [started] line came, when @n agents had subscribed again.
  struct times {
    double stopped = 0, started = 0, back = 0;
    bool ok = false;
  };
  times Restart(const std::string& sig, int n) {
    const std::string up = "cut -d' ' -f1 /proc/uptime";
    // The shell's loops count twentieths of a second.
    const Bounds& b = LabBounds();
    const std::string quick = std::to_string(20 * b.Quick()), ready = std::to_string(20 * b.Ready());
    auto r = h_.Sh(
        "p=$(cat " + pidf_ + "); kill -" + sig + " $p; "
        "i=0; while kill -0 $p 2>/dev/null && [ $i -lt " + quick + " ]; do sleep 0.05; i=$((i+1)); done; "
        "if kill -0 $p 2>/dev/null; then echo \"the daemon (pid $p) still runs " + std::to_string(b.Quick()) +
            " s after SIG" + sig + "\"; exit 3; fi; "
        "t0=$(" + up + "); sleep 3; "
        "n=$(grep -c 'magnet-host: \\[started\\]' " + log_ + "); " + Command() + "; "
        "i=0; while [ $(grep -c 'magnet-host: \\[started\\]' " + log_ + ") -le $n ] && [ $i -lt " + ready +
            " ]; do sleep 0.05; i=$((i+1)); done; "
        "t1=$(" + up + "); "
        "i=0; while [ $(" + h_.Magnet() + " sessions --json --socket " + sock_ +
            " 2>/dev/null | grep -o '\"subscribed\":true' | wc -l) -lt " + std::to_string(n) +
            " ] && [ $i -lt " + ready + " ]; do sleep 0.05; i=$((i+1)); done; "
        "t2=$(" + up + "); echo $t0 $t1 $t2",
        b.Work(3 + b.Quick() + 2 * b.Ready()));
    times t;
    std::istringstream in(r.out);
    t.ok = static_cast<bool>(in >> t.stopped >> t.started >> t.back);
    EXPECT_TRUE(t.ok) << r.Describe();
    return t;
  }
  std::string Log() const { return h_.Sh("cat " + log_).out; }
  json Query(const std::string& what) const {
    auto r = h_.Sh(h_.Magnet() + " " + what + " --socket " + sock_ + " --json");
    return json::parse(r.out, nullptr, false);
  }
  // Waits (a readiness bound) until every VM in @names has a subscribed session over @transport.
  bool WaitSessions(const std::vector<std::string>& names, const std::string& transport) {
    auto end = clk::now() + std::chrono::seconds(LabBounds().Ready());
    while (clk::now() < end) {
      auto j = Query("sessions");
      size_t ok = 0;
      if (j.is_object())
        for (const auto& n : names)
          for (const auto& s : j["sessions"])
            if (s.value("name", "") == n && s.value("transport", "") == transport &&
                s.value("subscribed", false)) {
              ++ok;
              break;
            }
      if (ok == names.size()) return true;
      usleep(200000);
    }
    return false;
  }
  const std::string& sock() const { return sock_; }

 private:
  const HostSide& h_;
  std::string args_, tag_, sock_, log_, pidf_;
  bool running_ = false;
};

// The VM's own view as its agent prints it (magnet-agent view --json).
struct GuestView {
  json j;
  std::string text;
  bool ok() const { return j.is_object() && j.contains("values"); }
  const json* find(const std::string& name, unsigned index = 0) const {
    if (!ok()) return nullptr;
    for (const auto& v : j["values"])
      if (v.value("name", "") == name && v.value("index", 0u) == index) return &v;
    return nullptr;
  }
  // The value, or NaN when absent or not valid.
  double get(const std::string& name, unsigned index = 0) const {
    const json* v = find(name, index);
    return v && v->value("valid", false) ? v->value("value", 0.0) : NAN;
  }
};

GuestView View(Lab* lab, const std::string& g) {
  const Bounds& b = lab->bounds();
  auto r = lab->Run(g, "magnet-agent view --json --wait " + std::to_string(b.Quick()), b.Work(b.Quick()));
  GuestView v;
  v.text = r.out;
  v.j = json::parse(r.out, nullptr, false);
  return v;
}

// Every value of each stat in a magnet-watch output, in order.
std::map<std::string, std::vector<double>> WatchSamples(const std::string& out) {
  std::map<std::string, std::vector<double>> all;
  static const std::regex line(R"((^|\n)([a-z_.]+)\s+([0-9.]+) \S+\s+window)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it)
    all[(*it)[2]].push_back(std::stod((*it)[3]));
  return all;
}

// The central value of each stat over the frames a client-library program
// printed (magnet-watch lines: "NAME  VALUE UNIT  window W s  age A ms"),
// and how many frames of each it saw.  Not a plain mean: a TCG guest that
// stalls for a second or two misses frames, and the windows it does get
// around the stall (a dip, then the burst) no longer tile the time.  Not
// the median either: in the nested lab the overloaded lab host runs a
// guest in bursts, its per-second rates swing by +-50 %, and the median
// of ten of them was 20 % off the rate (the median of iperf3's seconds
// likewise).  The interquartile mean leaves out the stalls and bursts
// and averages the rest, on both sides of a comparison.
std::map<std::string, std::pair<double, int>> WatchCentral(const std::string& out) {
  std::map<std::string, std::pair<double, int>> m;
  for (auto& [k, v] : WatchSamples(out)) m[k] = {InterquartileMean(v), static_cast<int>(v.size())};
  return m;
}

// libvirt's vCPU counters of some guests, read on the host once a second
// while it lives: per-second run and wait fractions, with their times.
// vcpu.0.time is the vCPU thread's CPU time; vcpu.0.delay the time it was
// runnable but waited for a CPU (the scheduler's run_delay; vcpu.N.wait
// needs schedstats, off by default).
class VcpuSampler {
 public:
  VcpuSampler(const HostSide& h, std::vector<std::string> guests) : h_(h), guests_(std::move(guests)) {
    th_ = std::thread([this] {
      std::string names;
      for (const auto& g : guests_) names += " " + g;
      while (!stop_) {
        // One call for all guests (in the nested lab each call is a round
        // trip into the lab host); its time is the call's midpoint.
        // Fractions divide by the sampling host's own clock (its uptime,
        // printed with the counters): the nested lab host's clock and the
        // time a command takes to get there are not this machine's.
        auto a = clk::now();
        auto r = h_.Sh("cut -d' ' -f1 /proc/uptime; virsh -q -c qemu:///system domstats --vcpu" + names);
        auto at = a + (clk::now() - a) / 2;
        const double up = std::atof(r.out.c_str());
        for (const auto& g : guests_) {
          auto sec = r.out.find("Domain: '" + g + "'");
          if (sec == std::string::npos) continue;
          auto end = r.out.find("Domain: '", sec + 1);
          std::string part = r.out.substr(sec, end == std::string::npos ? std::string::npos : end - sec);
          std::smatch m;
          double t = NAN, w = NAN;
          if (std::regex_search(part, m, std::regex(R"(vcpu\.0\.time=(\d+))"))) t = std::stod(m[1]);
          if (std::regex_search(part, m, std::regex(R"(vcpu\.0\.delay=(\d+))"))) w = std::stod(m[1]);
          std::lock_guard<std::mutex> l(mu_);
          samples_[g].push_back({at, up, t, w});
        }
        for (int i = 0; i < 10 && !stop_; ++i) usleep(100000);
      }
    });
  }
  ~VcpuSampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (th_.joinable()) th_.join();
  }
  // Interquartile means of the run and wait fractions between consecutive samples
  // within [a, b] (about one a second; a few more in the nested lab).
  // Run and wait over [a, b]: interquartile means of the per-second
  // fractions, each with its standard error (from its own spread; 0 when
  // only the two samples around the span are there).
  struct central {
    double run = -1, wait = -1, run_se = 0, wait_se = 0;
  };
  central Central(const std::string& g, clk::time_point a, clk::time_point b) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<double> run, wait;
    const auto& s = samples_[g];
    for (size_t i = 1; i < s.size(); ++i) {
      if (s[i - 1].at < a || s[i].at > b || std::isnan(s[i].run) || std::isnan(s[i - 1].run)) continue;
      double secs = s[i].up - s[i - 1].up;
      if (secs <= 0.05) continue;
      run.push_back((s[i].run - s[i - 1].run) / 1e9 / secs);
      wait.push_back((s[i].wait - s[i - 1].wait) / 1e9 / secs);
    }
    if (run.empty()) {
      // Too few samples inside (in the nested lab this thread's commands
      // wait behind the test's own): the two that bracket the span.
      const sample *x = nullptr, *y = nullptr;
      for (const auto& e : s) {
        if (std::isnan(e.run)) continue;
        if (e.at <= a + std::chrono::seconds(1)) x = &e;
        if (!y && e.at >= b - std::chrono::seconds(1)) y = &e;
      }
      if (x && y && y->up - x->up > 0.5)
        return {(y->run - x->run) / 1e9 / (y->up - x->up), (y->wait - x->wait) / 1e9 / (y->up - x->up)};
    }
    return {InterquartileMean(run), InterquartileMean(wait), InterquartileStandardError(run),
            InterquartileStandardError(wait)};
  }

 private:
  struct sample {
    clk::time_point at;  // this machine's clock: which frames it goes with
    double up;           // the sampling host's uptime, s
    double run, wait;
  };
  const HostSide& h_;
  std::vector<std::string> guests_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, std::vector<sample>> samples_;
  std::thread th_;
};

// The checks shared by both modes: each guest's view holds its own rate
// (within 5% of iperf3), its vCPU's run and wait (within 0.05 of a CPU of
// libvirt's own counters over the same time), values with their ages, and
// nothing of the other VM.
//
// Rates and fractions are compared as interquartile means (WatchCentral)
// of one-second values over the same ~10 s: a client-library program (magnet-watch) in each guest
// takes one frame a second while the traffic runs; iperf3's server reports
// each second; libvirt's counters are read on the host each second.
void OwnViewChecks(Lab* lab, const HostSide& h, Daemon& d, const std::string& dst,
                   const std::map<std::string, int>& rate_mbit, const std::string& server_ns,
                   bool forwarded) {
  std::map<std::string, std::string> uuid, ip = {{"g1", "10.77.0.11"}, {"g2", "10.77.0.12"}};
  for (const auto& [g, r] : rate_mbit)
    uuid[g] = Trim(h.Sh("virsh -q -c qemu:///system domuuid " + g).out);
  // Servers, then clients (and a CPU burner in g1, direct lab).  Long enough
  // for the frames below to fall inside the traffic even when each command
  // in a nested guest takes seconds to start.
  const int kSeconds = h.nested() ? 45 : 25;
  int port = 5721;
  std::map<std::string, std::string> files;
  for (const auto& [g, r] : rate_mbit) {
    files[g] = "/tmp/magnet-gv-iperf-" + g + ".json";
    ASSERT_EQ(h.Sh("rm -f " + files[g] + "; (" + server_ns + " timeout " +
                   std::to_string(lab->bounds().Linger(kSeconds)) + " iperf3 -s -1 -p " +
                   std::to_string(port) + " -J >" + files[g] + " 2>&1 &)")
                  .status,
              0);
    ++port;
  }
  sleep(1);
  port = 5721;
  std::map<std::string, clk::time_point> started;
  for (const auto& [g, r] : rate_mbit) {
    started[g] = clk::now();
    ASSERT_EQ(lab->Run(g, "(iperf3 -c " + dst + " -p " + std::to_string(port++) + " -u -b " +
                              std::to_string(r) + "M -l 1400 -t " + std::to_string(kSeconds) + " >/tmp/magnet-iperf.out 2>&1 &)")
                  .status,
              0);
  }
  // In the direct lab g1 also burns its vCPU (niced: the sender keeps its
  // pace).  Not in the nested lab: its two emulated CPUs run both KVM
  // guests, the daemon, vhost and iperf3's servers, and a guest that never
  // halts takes one of them whole; the other guest then ran in bursts (its
  // vCPU waited 70 % of the time) and its one-second rates swung too wide
  // to compare.  There the guests' loads differ by their traffic only.
  if (!h.nested()) {
    ASSERT_EQ(lab->Run("g1", "(timeout " + std::to_string(kSeconds + 4) +
                                 " nice -n 19 sh -c 'while :; do :; done' &)").status, 0);
  }
  sleep(3);
  // The library programs: 10 frames, one a second, of three stats; the
  // first comes at once (the second before it).
  // (20 in the nested lab, where a starved guest sends in bursts: twice
  // the seconds to average them.)
  const int kFrames = h.nested() ? 20 : 10;
  std::vector<std::string> names;
  for (const auto& [g, r] : rate_mbit) names.push_back(g);
  VcpuSampler sampler(h, names);
  std::map<std::string, VcpuSampler::central> dom_run_wait;
  std::map<std::string, clk::time_point> c0;
  for (const auto& [g, r] : rate_mbit) {
    auto before = clk::now();
    ASSERT_EQ(lab->Run(g, "(magnet-watch --period 1s --count " + std::to_string(5 * kFrames) +
                              " tap.tx_bps vcpu.run vcpu.wait guest.sock_tx_bps guest.dev_tx_bps"
                              " >/tmp/magnet-watch.out 2>&1 &)")
                  .status,
              0);
    c0[g] = before + (clk::now() - before) / 2;  // when it started, within half a round trip
  }
  // Meanwhile the agent's own view (isolation, ages) of each guest.
  std::map<std::string, GuestView> view;
  for (const auto& [g, r] : rate_mbit) view[g] = View(lab, g);
  std::map<std::string, std::string> watch;
  for (const auto& [g, r] : rate_mbit) {
    WaitFor(
        [&] {
          watch[g] = lab->Run(g, "cat /tmp/magnet-watch.out").out;
          return WatchCentral(watch[g])["guest.dev_tx_bps"].second >= kFrames;
        },
        lab->bounds().Work(5 * kFrames), 250);  // until the program has taken all its frames
  }
  sampler.Stop();
  for (const auto& [g, r] : rate_mbit)
    dom_run_wait[g] = sampler.Central(g, c0[g] - std::chrono::milliseconds(1500),
                                      c0[g] + std::chrono::milliseconds(kFrames * 1000 + 500));
  for (const auto& [g, rate] : rate_mbit) {
    SCOPED_TRACE(g);
    const GuestView& v = view[g];
    ASSERT_TRUE(v.ok()) << v.text;
    std::string other = g == "g1" ? "g2" : "g1";
    auto means = WatchCentral(watch[g]);
    ASSERT_GE(means["tap.tx_bps"].second, kFrames) << watch[g];
    // Rates: iperf3's payload against the tap's packets (IP + UDP headers).
    std::string ij;
    double iperf_bps = -1;
    WaitFor(
        [&] {
          ij = h.Sh("cat " + files[g]).out;
          return (iperf_bps = IperfReceivedBitsPerSecond(ij)) >= 0;
        },
        lab->bounds().Work(kSeconds), 500);
    ASSERT_GT(iperf_bps, 1e5) << ij.substr(0, 1000) << lab->Run(g, "cat /tmp/magnet-iperf.out").out;
    ASSERT_LT(Secs(started[g], c0[g]) + kFrames, kSeconds) << "the frames came after the traffic";
    // iperf3's seconds that the frames covered (each frame: the second
    // before it; the first came about when the program started).
    const double from = Secs(started[g], c0[g]) - 1, to = from + kFrames;
    const double iperf_span = IperfCentralBitsPerSecond(ij, std::floor(from), std::ceil(to));
    std::printf("[e2e] %s: iperf3 %.3f Mbit/s over the run, %.3f (interquartile mean) over its seconds %.0f-%.0f\n",
                g.c_str(), iperf_bps / 1e6, iperf_span / 1e6, std::floor(from), std::ceil(to));
    if (iperf_span > 0) iperf_bps = iperf_span;
    const double tap = means["tap.tx_bps"].first * 1400.0 / 1428.0;
    // Within 5 %, plus what two series of one-second rates can resolve:
    // twice the standard error of the difference of their central values,
    // from their own spread.  A steady sender (the direct lab: +-0.1 %)
    // keeps the bound at about 5 %; in the nested lab the emulated lab host
    // runs the guests in bursts (their vCPUs wait ~70 % of the time) and
    // the tap's seconds and iperf3's seconds, never the same seconds, swing
    // by +-50 %: there the bound widens by what the data cannot tell apart,
    // and says so.  (Either way it is far below the 2:1 of the two guests'
    // rates.)
    const auto w = WatchSamples(watch[g]);
    const double iperf_re = InterquartileRelativeError(IperfSeconds(ij, std::floor(from), std::ceil(to)));
    const double se = std::hypot(InterquartileRelativeError(w.at("tap.tx_bps")), iperf_re);
    const double tol = 0.05 + 2 * se;
    std::printf("[e2e] %s: tap/iperf3 %.3f, bound 1 +- %.3f (5 %% + 2 x %.3f standard error)\n", g.c_str(),
                tap / iperf_bps, tol, se);
    EXPECT_NEAR(tap / iperf_bps, 1.0, tol)
        << "tap.tx_bps in the guest " << tap / 1e6 << " Mbit/s, iperf3 " << iperf_bps / 1e6 << "\n"
        << watch[g];
    // vCPU fractions against libvirt's counters: within 0.05 of a CPU, plus
    // what the two series can resolve (twice the standard error of the
    // difference of their central values, from their own spread), the
    // rule the rates follow above.  Steady guests keep it near 0.05; the
    // nested lab host's bursts widen it, and it says by how much.  (There
    // libvirt's own run + wait of a guest that never halts read 0.93 to
    // 1.05 of a CPU, where they add up to 1: its seconds and the frames'
    // windows are never the same seconds.)
    const auto& dom = dom_run_wait[g];
    const double run = means["vcpu.run"].first, wait = means["vcpu.wait"].first;
    const double run_tol = 0.05 + 2 * std::hypot(InterquartileStandardError(w.at("vcpu.run")), dom.run_se);
    const double wait_tol = 0.05 + 2 * std::hypot(InterquartileStandardError(w.at("vcpu.wait")), dom.wait_se);
    std::printf("[e2e] %s: vcpu.run %.3f vs virsh %.3f (bound +-%.3f), vcpu.wait %.3f vs virsh %.3f (bound +-%.3f)\n",
                g.c_str(), run, dom.run, run_tol, wait, dom.wait, wait_tol);
    EXPECT_NEAR(run, dom.run, run_tol) << "vcpu.run vs virsh domstats vcpu.0.time";
    EXPECT_NEAR(wait, dom.wait, wait_tol) << "vcpu.wait vs virsh domstats vcpu.0.delay";
    // The guest's own part, from the agent's probes in the guest kernel:
    // what its sockets took (UDP payload, as iperf3 counts it) and what its
    // device sent (frames with their Ethernet header: 1442 bytes where the
    // tap counts 1428), by the same rule as the tap's rate above.
    ASSERT_GE(means["guest.sock_tx_bps"].second, kFrames) << watch[g];
    ASSERT_GE(means["guest.dev_tx_bps"].second, kFrames) << watch[g];
    const double sock = means["guest.sock_tx_bps"].first;
    const double sock_tol = 0.05 + 2 * std::hypot(InterquartileRelativeError(w.at("guest.sock_tx_bps")), iperf_re);
    EXPECT_NEAR(sock / iperf_bps, 1.0, sock_tol)
        << "guest.sock_tx_bps " << sock / 1e6 << " Mbit/s, iperf3 " << iperf_bps / 1e6 << "\n" << watch[g];
    const double dev = means["guest.dev_tx_bps"].first * 1428.0 / 1442.0, tap_ip = means["tap.tx_bps"].first;
    const double dev_tol = 0.05 + 2 * std::hypot(InterquartileRelativeError(w.at("guest.dev_tx_bps")),
                                                 InterquartileRelativeError(w.at("tap.tx_bps")));
    EXPECT_NEAR(dev / tap_ip, 1.0, dev_tol)
        << "guest.dev_tx_bps " << dev / 1e6 << " Mbit/s (IP), tap.tx_bps " << tap_ip / 1e6 << "\n" << watch[g];
    std::printf("[e2e] %s: guest.sock_tx %.3f Mbit/s (iperf3 %.3f, bound 1 +- %.3f), guest.dev_tx %.3f (tap %.3f, bound 1 +- %.3f)\n",
                g.c_str(), sock / 1e6, iperf_bps / 1e6, sock_tol, dev / 1e6, tap_ip / 1e6, dev_tol);
    // The journey of its packets (docs/guest.md), where they cross the host
    // to a wire (dst behind one: direct mode; the nested lab's traffic ends
    // at the lab host's own address, where no packet is forwarded): the
    // guest's own transmits found again in the host's vmnet.queue.tx
    // records, every segment measured.  (guest device -> host tap crosses
    // the two clocks: only that it is there, its p50 below 100 ms and its
    // p99 below 1 s: a TCG guest's packets wait for QEMU's emulation on a
    // busy two-core machine, 173 ms at p99 in one run.)  The host's
    // tap -> wire of the matched packets against the host's own p50 of all
    // of them, which comes from log2 buckets: within a factor of 2.
    if (forwarded) {
      const double matched = v.get("journey.matched_pps"), queued = v.get("queue.tx_pps");
      EXPECT_GT(matched, 0.8 * queued) << "journey.matched_pps vs queue.tx_pps\n" << v.text;
      for (const char* seg : {"journey.sock_dev_us", "journey.dev_tap_us", "journey.tap_wire_us"})
        for (unsigned pct : {50u, 99u}) {
          EXPECT_GE(v.get(seg, pct), 0) << seg << "[" << pct << "] measured\n" << v.text;
          EXPECT_LT(v.get(seg, pct), pct == 50 ? 100'000 : 1'000'000) << seg << "[" << pct << "]";
        }
      EXPECT_GT(v.get("journey.sock_dev_us", 50), 0) << v.text;
      const double tw = v.get("journey.tap_wire_us", 50), q50 = v.get("queue.tx_p50_us");
      EXPECT_TRUE(tw >= q50 / 2 && tw <= q50 * 2) << "tap -> wire p50 " << tw << " us, the host's " << q50;
      std::printf("[e2e] %s: journey %.0f of %.0f packet/s matched; p50 sock->dev %.1f us, dev->tap %.1f us "
                  "(clock error %.1f us), tap->wire %.1f us (host p50 %.1f)\n",
                  g.c_str(), matched, queued, v.get("journey.sock_dev_us", 50), v.get("journey.dev_tap_us", 50),
                  v.get("clock.error_us"), tw, q50);
    }
    // The agent's view: host values of the last tick, delivered at once.
    const json* a = v.find("tap.tx_bps");
    ASSERT_NE(a, nullptr);
    EXPECT_LT(a->value("age_s", 9.0), 1.0);
    EXPECT_NEAR(a->value("window_s", 0.0), 1.0, 0.15);
    EXPECT_GT(v.get("tap.tx_bps"), 0) << v.text;
    EXPECT_TRUE(v.j.value("host_connected", false));
    // Nothing of the other VM: its name, UUID, address, or its rate.
    for (const std::string& s : {other, uuid[other], ip[other]})
      EXPECT_EQ(v.text.find("\"" + s), std::string::npos) << "the other VM's " << s << " in " << v.text;
    EXPECT_EQ(v.text.find(uuid[other]), std::string::npos);
    EXPECT_EQ(v.text.find(ip[other]), std::string::npos);
    EXPECT_EQ(watch[g].find(uuid[other]), std::string::npos);
    std::printf("[e2e] %s: tap.tx %.3f Mbit/s (iperf3 %.3f), vcpu.run %.3f (virsh %.3f), "
                "vcpu.wait %.3f (virsh %.3f)\n",
                g.c_str(), tap / 1e6, iperf_bps / 1e6, run, dom.run, wait, dom.wait);
  }
  // Neither VM lost a record of its own (the per-VM quota is far above what
  // a VM makes; its scheduler records feed the vCPU figures compared above).
  auto top = d.Query("top --count 1");
  ASSERT_TRUE(top.is_object()) << "magnet top";
  for (const auto& vm : top["vms"])
    EXPECT_EQ(vm.value("lost_quota", 1ull) + vm.value("lost_ring", 1ull), 0ull)
        << vm.value("name", "") << " lost records: " << vm.dump();
  // (g1's burner keeps its vCPU from halting, but how much of the time its
  // vCPU thread then runs or waits, rather than sleeps on QEMU's big lock,
  // depends on this machine's load: 0.65 to 1.0 of a CPU in TCG here, the
  // same as g2's in the starved nested lab; the checks above compare each
  // guest's values with libvirt's, whatever they are.)
}

// Stops the daemon (SIGTERM, then SIGKILL) and starts it again: the agents
// come back within 2 s of its return, and report the gap.
void ReconnectChecks(Lab* lab, Daemon& d) {
  for (std::string sig : {"TERM", "KILL"}) {
    SCOPED_TRACE(sig);
    const double gaps = View(lab, "g1").get("host.gaps");
    auto t = d.Restart(sig, 2);
    ASSERT_TRUE(t.ok);
    const double took = t.back - t.started;
    EXPECT_LE(took, 2.0) << "agents reconnect within 2 s of the daemon's return\n" << d.Log();
    std::printf("[e2e] daemon SIG%s: down %.2f s (incl. its start), agents back %.2f s after its "
                "[started]\n",
                sig.c_str(), t.started - t.stopped, took);
    auto after = View(lab, "g1");
    EXPECT_EQ(after.get("host.gaps"), gaps + 1) << after.text;
    // The agent's gap runs from losing the host to its next welcome.
    EXPECT_GE(after.get("host.last_gap_ms"), (t.started - t.stopped) * 1000 - 500) << after.text;
    // ... which may be noticed a little before the process is gone, and the
    // welcome may come a period after the host listed the session.
    EXPECT_LE(after.get("host.last_gap_ms"), (t.back - t.stopped) * 1000 + 2500) << after.text;
    EXPECT_TRUE(after.j.value("host_connected", false));
  }
}

// ==========================================================================================
// A guest root that speaks the view protocol itself (magnet-adversary
// events, in g2) while g1 sends UDP from a fixed port: everything g2
// receives, for every type, is checked against what the host side knows
// (guest_leaks.h): no host task name or tid, no kernel address, nothing of
// g1, every header's VM/task/CPU zero; its subscription naming host-only
// types is refused by name and the session goes on.  @target: where g1's
// and g2's traffic goes; @g2_cmd: how g2 runs the adversary.
void RawProtocolGuestChecks(Lab* lab, const HostSide& h, const std::string& target, const std::string& g2_cmd,
                            double secs) {
  const Bounds& b = LabBounds();
  const std::string procs = "cat /proc/[0-9]*/task/[0-9]*/comm 2>/dev/null; true";
  HostTruth t;
  const int ncpus = std::stoi("0" + Trim(h.Sh("nproc").out));
  AddHostNames(t, h.Sh(procs).out, ncpus);
  constexpr uint16_t kCport = 5742, kPort = 5741;
  t.foreign_ipv4 = {"10.77.0.11"};
  t.foreign_flows = {UdpFlowId("10.77.0.11", kCport, target, kPort), UdpFlowId(target, kPort, "10.77.0.11", kCport)};
  ASSERT_EQ(lab->Run("g1", "(iperf3 -c " + target + " -p " + std::to_string(kPort) + " --cport " +
                               std::to_string(kCport) + " -u -b 2M -l 1200 -t " + std::to_string(int(secs) + 6) +
                               " >/dev/null 2>&1 &)").status, 0);
  sleep(2);
  auto r = lab->Run("g2", "(ping -c " + std::to_string(int(secs) + 2) + " " + target + " >/dev/null 2>&1 &); " + g2_cmd,
                    b.Work(secs));
  AddHostNames(t, h.Sh(procs).out, ncpus);
  t.own_vcpus = VcpuTids(h.Sh("grep -H . /proc/$(cat /run/libvirt/qemu/g2.pid)/task/*/comm").out);
  ASSERT_FALSE(t.own_vcpus.empty()) << "g2's vCPU threads";
  auto j = json::parse(Trim(r.out), nullptr, false);
  ASSERT_TRUE(j.is_object() && !j.contains("connect_error")) << r.Describe().substr(0, 4000);
  std::string types;
  for (const auto& [name, v] : j["types"].items())
    types += " " + name + "=" + std::to_string(v.value("records", 0));
  std::printf("[e2e] g2 (%s) got %llu records in %.0f s:%s; %zu host task names known, g2's vCPU tids %zu\n",
              j.value("transport", "?").c_str(), j.value("records_total", 0ull), secs, types.c_str(), t.names.size(),
              t.own_vcpus.size());
  EXPECT_FALSE(j.value("closed", true)) << "the session stays up";
  EXPECT_GT(j.value("records_total", 0), 0) << "records arrive: nothing else to check otherwise";
  const auto leaks = GuestLeaks(j, t);
  std::string shown;
  for (size_t i = 0; i < leaks.size() && i < 40; ++i) shown += "  " + leaks[i].substr(0, 300) + "\n";
  EXPECT_TRUE(leaks.empty()) << leaks.size() << " leaks, the first:\n" << shown;
  // The subscription naming host-only types: an error naming each, and the
  // subscription in force goes on (records and stats after it).
  bool refused = false;
  for (const auto& e : j["errors"]) {
    const std::string text = e.value("text", "");
    refused |= e.value("code", 0) == MAGNET_VERR_BAD_SUBSCRIBE && text.find("proc.fork") != std::string::npos &&
               text.find("net.l4.send") != std::string::npos;
  }
  EXPECT_TRUE(refused) << "a subscribe naming proc.fork and net.l4.send is refused by name: " << j["errors"].dump();
  EXPECT_GT(j.value("records_after_refusal", 0), 0) << "records go on after the refusal";
  EXPECT_GT(j.value("stats_after_refusal", 0), 0) << "stats go on after the refusal";
}

// ==========================================================================================
// Direct mode: two TCG guests, the view over virtio-serial.
class GuestViewDirect : public TwoGuestDirectSuite {};

// The "wire": a namespace behind a veth on the lab bridge, shaped with tbf.
// Its address keeps one MAC from test to test: a guest's ARP cache still
// holds the previous wire's, and frames to a MAC nobody has go nowhere.
constexpr const char* kWireMac = "02:77:00:00:00:fa";
struct Wire {
  std::string ns, va, vb;
  explicit Wire(const std::string& rate) {
    std::string tag = std::to_string(getpid() % 100000);
    ns = "magwire" + tag, va = "mgwa" + tag, vb = "mgwb" + tag;
    auto r = RunProcess({"sh", "-c",
                         "set -e; ip netns add " + ns + "; ip -n magnetlab link add " + va +
                             " type veth peer name " + vb + " netns " + ns + "; ip -n magnetlab link set " +
                             va + " master magbr0 up; ip -n " + ns + " link set " + vb + " address " + kWireMac +
                             "; ip -n " + ns + " addr add 10.77.0.250/24 dev " + vb +
                             "; ip -n " + ns + " link set " + vb + " up; ip -n " + ns +
                             " link set lo up" +
                             (rate.empty() ? std::string()
                                           : "; ip netns exec magnetlab tc qdisc add dev " + va +
                                                 " root tbf rate " + rate + " burst 32kbit limit 50000")},
                        LabBounds().Quick());
    EXPECT_EQ(r.status, 0) << r.Describe();
  }
  ~Wire() {
    RunProcess({"ip", "-n", "magnetlab", "link", "del", va}, LabBounds().Quick());
    RunProcess({"ip", "netns", "del", ns}, LabBounds().Quick());
  }
};

TEST_F(GuestViewDirect, EachGuestGetsItsOwnViewOverVirtioSerial) {
  REQUIRE_LAB();
  HostSide h(lab(), false);
  Wire w("");
  Daemon d(h, "--vsock off", "own");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "virtio-serial"), false) << d.Log();
  OwnViewChecks(lab(), h, d, "10.77.0.250", {{"g1", 5}, {"g2", 2}}, "ip netns exec " + w.ns, true);
}

// No host daemon: the agent says the host is away, marks every host value
// invalid, and goes on serving what it measures in the guest itself.
TEST_F(GuestViewDirect, WithoutTheDaemonTheAgentServesTheGuestsOwnPart) {
  REQUIRE_LAB();
  HostSide h(lab(), false);
  ASSERT_EQ(h.Sh("pidof magnet").out, "") << "a daemon is running";
  Wire w("");
  ASSERT_EQ(h.Sh("(ip netns exec " + w.ns + " timeout " + std::to_string(bounds().Linger(8)) +
                 " iperf3 -s -1 -p 5741 >/dev/null 2>&1 &)").status, 0);
  ASSERT_TRUE(WaitFor([&] { return Listening(w.ns, 5741); }, bounds().Ready())) << "iperf3 server in " << w.ns;
  ASSERT_EQ(lab()->Run("g1", "(iperf3 -c 10.77.0.250 -p 5741 -u -b 3M -l 1400 -t 8 >/dev/null 2>&1 &)").status, 0);
  sleep(4);
  const GuestView v = View(lab(), "g1");
  ASSERT_TRUE(v.ok()) << v.text;
  EXPECT_FALSE(v.j.value("host_connected", true)) << v.text;
  int host_values = 0;
  // (lost.delivery counts what the connection itself dropped: the agent's
  // own count for this one, whatever the host does.)
  for (const auto& x : v.j["values"])
    if (x.value("source", "") == "host" && x.value("name", "") != "lost.delivery") {
      ++host_values;
      EXPECT_FALSE(x.value("valid", true)) << "a host value without a host: " << x.dump();
    }
  std::printf("[e2e] g1 without a daemon: %d host values, all invalid; guest.sock_tx %.3f Mbit/s\n", host_values,
              v.get("guest.sock_tx_bps") / 1e6);
  EXPECT_NEAR(v.get("guest.sock_tx_bps") / 3e6, 1.0, 0.2) << v.text;
  EXPECT_GT(v.get("guest.dev_tx_bps"), 0) << v.text;
}

// The available bandwidth on a link whose capacity the test sets: a tbf of
// 20 Mbit/s on the wire's veth, named to the daemon with --link.
TEST_F(GuestViewDirect, AvailableBandwidthOnALinkWhoseCapacityTheTestSets) {
  REQUIRE_LAB();
  HostSide h(lab(), false);
  Wire w("20mbit");
  Daemon d(h, "--vsock off --link " + w.va + "@magnetlab", "avail");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "virtio-serial"), false) << d.Log();
  sleep(2);
  auto alone = View(lab(), "g1");
  EXPECT_NEAR(alone.get("link.capacity_bps"), 20e6, 1) << "read from the tbf on the link";
  EXPECT_NEAR(alone.get("link.available_bps") / 20e6, 1.0, 0.05) << alone.text;
  // g2 sends 7 Mbit/s of UDP through the link: 1442 bytes on the wire per
  // 1400 of payload (Ethernet, IP and UDP headers).  Each guest's library
  // program takes 6 frames meanwhile; the means are compared.
  ASSERT_EQ(h.Sh("(ip netns exec " + w.ns + " timeout " + std::to_string(bounds().Linger(14)) +
                 " iperf3 -s -1 -p 5731 -J >/tmp/magnet-gv-avail.json 2>&1 &)").status, 0);
  ASSERT_TRUE(WaitFor([&] { return Listening(w.ns, 5731); }, bounds().Ready())) << "iperf3 server in " << w.ns;
  const auto started = clk::now();
  ASSERT_EQ(lab()->Run("g2", "(iperf3 -c 10.77.0.250 -p 5731 -u -b 7M -l 1400 -t 14 >/tmp/magnet-iperf.out 2>&1 &)").status, 0);
  sleep(3);
  const std::string stats = " link.use_bps link.available_bps link.available_err_bps";
  const double from = Secs(started, clk::now()) - 1;
  for (const char* g : {"g1", "g2"})
    ASSERT_EQ(lab()->Run(g, "(magnet-watch --period 1s --count 18" + stats +
                              " >/tmp/magnet-watch.out 2>&1 &)").status, 0);
  std::map<std::string, std::map<std::string, std::pair<double, int>>> m;
  std::map<std::string, std::string> out;
  for (const char* g : {"g1", "g2"})
    WaitFor(
        [&] {
          out[g] = lab()->Run(g, "cat /tmp/magnet-watch.out").out;
          m[g] = WatchCentral(out[g]);
          return m[g]["link.available_err_bps"].second >= 6;
        },
        bounds().Work(18), 250);  // until the program has taken all its frames
  double iperf_bps = -1;
  WaitFor(
      [&] {
        auto ij = h.Sh("cat /tmp/magnet-gv-avail.json").out;
        if (IperfReceivedBitsPerSecond(ij) > 0)
          iperf_bps = IperfCentralBitsPerSecond(ij, std::floor(from), std::ceil(from + 7));
        return iperf_bps >= 0;
      },
      bounds().Work(14), 500);
  ASSERT_GT(iperf_bps, 1e6) << lab()->Run("g2", "cat /tmp/magnet-iperf.out").out;
  // What g2 put on the link, by iperf3's count over the seconds the frames
  // cover (its own pace, not the 7M asked).
  const double use = iperf_bps * 1442 / 1400;
  EXPECT_NEAR(m["g2"]["link.use_bps"].first / use, 1.0, 0.05) << out["g2"];
  EXPECT_NEAR(m["g1"]["link.available_bps"].first / (20e6 - use), 1.0, 0.05) << out["g1"];
  EXPECT_NEAR(m["g2"]["link.available_bps"].first / 20e6, 1.0, 0.05) << "its own use is available to it\n"
                                                                      << out["g2"];
  // Its error bar (the spread of the others' use over the window) covers
  // how far it is from what iperf3 saw, or that is within 5% of C anyway.
  EXPECT_LE(std::fabs(m["g1"]["link.available_bps"].first - (20e6 - use)),
            std::max(m["g1"]["link.available_err_bps"].first, 0.05 * 20e6))
      << out["g1"];
  EXPECT_EQ(m["g1"]["link.use_bps"].first, 0) << "g1 sent nothing: g2's use is not shown to it\n"
                                               << out["g1"];
  std::printf("[e2e] link 20 Mbit/s, g2 UDP %.3f Mbit/s on the wire: g1 available %.3f Mbit/s "
              "(model %.3f), err %.3f; g2 use %.3f\n",
              use / 1e6, m["g1"]["link.available_bps"].first / 1e6, (20e6 - use) / 1e6,
              m["g1"]["link.available_err_bps"].first / 1e6, m["g2"]["link.use_bps"].first / 1e6);
  sleep(10);
  auto after = View(lab(), "g1");
  EXPECT_NEAR(after.get("link.available_bps") / 20e6, 1.0, 0.05) << "alone again: " << after.text;
}

// A guest root stops its own agent and speaks the protocol itself on its
// virtio-serial view channel (issue 18: it used to get host task names,
// tids and kernel addresses by the thousand).  Its agent is started again
// and comes back.
TEST_F(GuestViewDirect, RawProtocolGuestOnItsViewChannelGetsNothingOfTheHostOrTheOtherGuest) {
  REQUIRE_LAB();
  HostSide h(lab(), false);
  Wire w("");
  Daemon d(h, "--vsock off", "raw");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "virtio-serial"), false) << d.Log();
  ASSERT_EQ(h.Sh("(ip netns exec " + w.ns + " timeout " + std::to_string(bounds().Linger(20)) +
                 " iperf3 -s -1 -p 5741 >/dev/null 2>&1 &)").status, 0);
  ASSERT_TRUE(WaitFor([&] { return Listening(w.ns, 5741); }, bounds().Ready())) << "iperf3 server in " << w.ns;
  // The channel takes one opener: g2's agent is stopped for the test, and
  // started again however the test ends.
  auto stop = lab()->Run("g2", "p=$(cat /run/magnet-agent.pid); kill $p; for i in $(seq 50); do "
                               "kill -0 $p 2>/dev/null || break; sleep 0.1; done; ! kill -0 $p 2>/dev/null");
  ASSERT_EQ(stop.status, 0) << stop.Describe();
  struct Restart {
    Lab* lab;
    bool done = false;
    int Now() {
      done = true;
      return lab->Run("g2", "(/usr/bin/magnet-agent >>/run/magnet-agent.log 2>&1 </dev/null & "
                            "echo $! >/run/magnet-agent.pid)").status;
    }
    ~Restart() {
      if (!done) Now();
    }
  } restart{lab()};
  RawProtocolGuestChecks(lab(), h, "10.77.0.250", "magnet-adversary --serial events 8", 8);
  ASSERT_EQ(restart.Now(), 0);
  EXPECT_TRUE(d.WaitSessions({"g1", "g2"}, "virtio-serial")) << "g2's agent is back on its channel\n" << d.Log();
  EXPECT_EQ(d.Log().find("[deliver.refused] vm g1"), std::string::npos) << "g1 did nothing wrong";
}

TEST_F(GuestViewDirect, AgentsReconnectWithinTwoSecondsOfTheDaemonsReturn) {
  REQUIRE_LAB();
  HostSide h(lab(), false);
  Daemon d(h, "--vsock off", "reconnect");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "virtio-serial"), false) << d.Log();
  ReconnectChecks(lab(), d);
}

// ==========================================================================================
// Nested mode: two KVM guests in the lab host, the view over vhost-vsock.
class GuestViewNested : public LabSuite {
 protected:
  static void SetUpTestSuite() { BringUp("nested", 2); }
  static void TearDownTestSuite() { TearDownLab(); }
};

TEST_F(GuestViewNested, EachGuestGetsItsOwnViewOverVsock) {
  REQUIRE_LAB();
  HostSide h(lab(), true);
  Daemon d(h, "", "own");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "vsock"), false) << d.Log();
  auto s = d.Query("sessions");
  for (const auto& x : s["sessions"]) {
    if (x.value("transport", "") == "vsock") {
      EXPECT_EQ(x.value("cid", 0u), x.value("name", "") == "g1" ? 3u : 4u) << s.dump();
    }
  }
  // Rates a CPU-starved nested guest keeps steady (2 and 1 Mbit/s).
  OwnViewChecks(lab(), h, d, "10.77.0.1", {{"g1", 2}, {"g2", 1}}, "", false);
}

// A hostile g2 tries everything it can; each attempt is refused or dropped
// and logged, and g1's frames keep their period meanwhile.
TEST_F(GuestViewNested, HostileGuestIsRefusedAndTheOtherGuestIsNotDelayed) {
  REQUIRE_LAB();
  HostSide h(lab(), true);
  Daemon d(h, "", "hostile");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "vsock"), false) << d.Log();
  const std::string g1_uuid = Trim(h.Sh("virsh -q -c qemu:///system domuuid g1").out);
  auto top = d.Query("top --count 1");
  std::map<std::string, unsigned> id;
  for (const auto& v : top["vms"]) id[v.value("name", "")] = v.value("vm", 0u);
  ASSERT_TRUE(id.count("g1") && id.count("g2")) << top.dump();
  // g1 is busy with traffic, and watches its own session's frames (100 ms).
  ASSERT_EQ(h.Sh("(timeout " + std::to_string(bounds().Linger(75)) + " iperf3 -s -1 -p 5741 >/dev/null 2>&1 &)").status, 0);
  // First 12 s without attacks: g1's own longest gap under its own load in
  // this (emulated, CPU-starved) lab host is the baseline.
  ASSERT_EQ(lab()->Run("g1", "(iperf3 -c 10.77.0.1 -p 5741 -u -b 5M -l 1400 -t 75 >/dev/null 2>&1 &); "
                             "(magnet-adversary watch 12 100ms >/tmp/base.json 2>&1 &)").status, 0);
  json base;
  WaitFor(
      [&] {
        base = json::parse(Trim(lab()->Run("g1", "cat /tmp/base.json").out), nullptr, false);
        return base.is_object();
      },
      bounds().Work(12), 500);
  ASSERT_TRUE(base.is_object()) << lab()->Run("g1", "cat /tmp/base.json").out;
  const double base_gap = base.value("max_gap_ms", 1e9);
  ASSERT_EQ(lab()->Run("g1", "(magnet-adversary watch 45 100ms >/tmp/watch.json 2>&1 &)").status, 0);
  sleep(2);
  // @secs: how long the mode itself takes (its reads, its deadlines).
  auto adv = [&](const std::string& args, double secs) {
    auto r = lab()->Run("g2", "magnet-adversary " + args, bounds().Work(secs));
    auto j = json::parse(Trim(r.out), nullptr, false);
    EXPECT_TRUE(j.is_object()) << args << ": " << r.Describe();
    return j;
  };
  auto has_error = [](const json& j, int code) {
    if (!j.is_object()) return false;
    for (const auto& e : j["errors"])
      if (e.value("code", 0) == code) return true;
    return false;
  };
  // A hello naming g1: the host answers with g2's own session and values.
  auto g2_view = View(lab(), "g2");
  auto forged = adv("forged-hello g1 " + g1_uuid, 3);
  EXPECT_EQ(forged.value("session", ""), g2_view.j.value("session", "?")) << forged.dump();
  const double g2_tx = forged["values"].value("tap.tx_bps", -1.0);
  EXPECT_GE(g2_tx, 0) << forged.dump();
  EXPECT_LT(g2_tx, 2e6) << "g2 is quiet; g1 sends 5 Mbit/s: these are not g1's values";
  // The guest schema zeroes every record's vm_id (nothing in a frame names a
  // VM, since 525f70f): a record naming any VM, g1's or g2's own, leaked one.
  for (const auto& [vm, n] : forged["record_vms"].items())
    EXPECT_EQ(std::stoul(vm), 0u) << "an event record naming a VM: " << forged.dump();
  auto bad = adv("malformed", 2);
  EXPECT_TRUE(bad.value("closed", false) && has_error(bad, 1)) << bad.dump();
  auto big = adv("oversize", 2);
  EXPECT_TRUE(big.value("closed", false) && has_error(big, 1)) << big.dump();
  auto cut = adv("truncated", 4);
  EXPECT_TRUE(cut.value("closed", false) && has_error(cut, 8)) << cut.dump();
  auto slow = adv("byte-at-a-time 150ms", 10);
  EXPECT_TRUE(slow.value("closed", false)) << slow.dump();
  EXPECT_LT(slow.value("bytes_sent", 0), slow.value("frame_bytes", 0)) << "cut off mid-frame";
  auto flood = adv("flood", 3);
  EXPECT_TRUE(flood.value("closed", false) && has_error(flood, 6)) << flood.dump();
  // Connection churn.  1000 connects as fast as the nested g2 could make
  // them reset g2 itself in a CI run, 3 attempts of 4 (a triple fault
  // under the emulated nested SVM, not the daemon: docs/lab.md,
  // "Connection churn"); 1000 at up to 60 a second, its full speed on a
  // loaded machine, it survived in all 11 runs there.  So g2 churns at
  // most 50 a second (bursts of 10, 0.2 s apart), while the lab host
  // churns at full speed from four connectors at once over vsock loopback
  // (CID 1, which the daemon refuses): the daemon answers every connect of
  // each, and g1 keeps its period.
  const int kHostChurners = 4, kHostChurn = 250, kGuestBursts = 20, kGuestBurst = 10;
  ASSERT_EQ(h.Sh("rm -f /tmp/magnet-gv-churn.*; for i in $(seq " + std::to_string(kHostChurners) +
                 "); do (/mnt/magnetbuild/guest/magnet-adversary --cid 1 churn " + std::to_string(kHostChurn) +
                 " >/tmp/magnet-gv-churn.$i 2>&1 &); done")
                .status,
            0);
  auto g2_churn = lab()->Run("g2", "for i in $(seq " + std::to_string(kGuestBursts) + "); do magnet-adversary churn " +
                                       std::to_string(kGuestBurst) + "; sleep 0.2; done",
                             bounds().Work(kGuestBursts * 0.2));
  // Every connect answered (accepted or refused), none left hanging.
  auto answered = [](const std::string& out) {
    long n = 0;
    for (const auto& l : SplitLines(out)) {
      auto j = json::parse(l, nullptr, false);
      if (j.is_object()) n += j.value("connected", 0) + j.value("refused", 0);
    }
    return n;
  };
  EXPECT_EQ(answered(g2_churn.out), kGuestBursts * kGuestBurst) << g2_churn.Describe();
  std::string host_churn;
  EXPECT_TRUE(WaitFor(
      [&] {
        host_churn = h.Sh("cat /tmp/magnet-gv-churn.*").out;
        return SplitLines(host_churn).size() >= static_cast<size_t>(kHostChurners);
      },
      bounds().Work(kGuestBursts * 0.2), 500))
      << host_churn;
  EXPECT_EQ(answered(host_churn), kHostChurners * kHostChurn) << host_churn;
  // A reader that never reads is cut off when a write has waited 5 s (the
  // daemon logs "slow reader").  It connects from a source port the churn
  // did not use: right after the churn, a connection from one of its ports
  // (the first free below 1024, as the churn's) ended after 0.05-3.4 s in 9
  // runs, the daemon logging that the guest closed it, while from port 700
  // it was cut off as a slow reader after 8.2 s (2 of 2, 2026-11-26): a vsock
  // connection reusing the source port of one just closed is torn down
  // (issue 18: the agent's reconnect picks its port the same way).  Since
  // then the churn's ports rotate through all of 512-1023 (lib/magnet/
  // reserved_port.h), so this one is below that range: still privileged,
  // never one the churn used.
  auto deaf = adv("--src-port 500 never-read 12", 12);
  EXPECT_TRUE(deaf.value("closed", false)) << "a reader that never reads is cut off: " << deaf.dump();
  EXPECT_GE(deaf.value("closed_after_s", 0.0), 4.0) << "cut off for not reading (the 5 s write deadline), not at once: "
                                                    << deaf.dump();
  // The host itself over vsock loopback, and this machine's own CID.
  auto loop = h.Sh("echo x | socat -T " + std::to_string(bounds().Quick()) +
                   " - VSOCK-CONNECT:1:5300 | head -c 200 | od -c | head -3; true");
  // g1 kept its period throughout (its watch ends 45 s after it began).
  json w;
  WaitFor(
      [&] {
        w = json::parse(Trim(lab()->Run("g1", "cat /tmp/watch.json").out), nullptr, false);
        return w.is_object();
      },
      bounds().Work(45), 500);
  ASSERT_TRUE(w.is_object()) << lab()->Run("g1", "cat /tmp/watch.json").out;
  EXPECT_FALSE(w.value("closed", true));
  EXPECT_GT(w.value("frames", 0), 350);
  // g1's pace: its 99th percentile gap within two periods, or twice its
  // own without any attack (+50 ms).  The lab host is emulated (TCG): its
  // two vCPUs run every process there, g1 and its agent included, and the
  // attacks' CPU load slows all of them; single stalls of the starved guest
  // reached 355 ms against 134 ms without attacks.  Its longest gap stays
  // under a second: a daemon that waited on g2 (a reader that never reads,
  // a sender a byte at a time) would hold g1's frames for the seconds its
  // deadlines take.
  const double base_p99 = base.value("p99_gap_ms", 1e9);
  EXPECT_LE(w.value("p99_gap_ms", 1e9), std::max(200.0, 2 * base_p99) + 50)
      << "g2's attacks slowed g1's frames; without them its p99 gap was " << base_p99 << " ms";
  EXPECT_LE(w.value("max_gap_ms", 1e9), std::max(1000.0, 2 * base_gap))
      << "g2's attacks held g1's frames back; without them its longest gap was " << base_gap << " ms";
  std::printf("[e2e] g1 during g2's attacks: %d frames, gaps p99 %.1f ms, longest %.1f ms "
              "(without attacks: p99 %.1f ms, longest %.1f ms, %d frames)\n",
              w.value("frames", 0), w.value("p99_gap_ms", 0.0), w.value("max_gap_ms", 0.0), base_p99,
              base_gap, base.value("frames", 0));
  // Every attempt is in the log, with the VM and a stable id.
  std::string log = d.Log(), deliver_lines;
  for (const auto& l : SplitLines(log))  // what the delivery said (the log opens with its setup)
    if (l.find("[deliver.") != std::string::npos) deliver_lines += l + "\n";
  if (deliver_lines.size() > 8000) deliver_lines = deliver_lines.substr(deliver_lines.size() - 8000);
  for (const std::string s :
       {"[deliver.refused] vm g2", "bad magic", "exceeds the maximum", "did not complete within",
        "slow reader", "vsock connection from cid 1 refused"})
    EXPECT_NE(log.find(s), std::string::npos) << "missing from the daemon's log: " << s << "\n" << deliver_lines;
  EXPECT_TRUE(log.find("replies not read") != std::string::npos ||
              log.find("messages per second") != std::string::npos)
      << "the flood is in the log";
  EXPECT_EQ(log.find("[deliver.refused] vm g1"), std::string::npos) << "g1 did nothing wrong";
  (void)loop;
}

// The same over vsock: g2's root speaks the protocol itself beside its
// agent (a VM may hold four vsock connections).
TEST_F(GuestViewNested, RawProtocolGuestOverVsockGetsNothingOfTheHostOrTheOtherGuest) {
  REQUIRE_LAB();
  HostSide h(lab(), true);
  Daemon d(h, "", "raw");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "vsock"), false) << d.Log();
  ASSERT_EQ(h.Sh("(timeout " + std::to_string(bounds().Linger(20)) + " iperf3 -s -1 -p 5741 >/dev/null 2>&1 &)").status, 0);
  sleep(1);
  RawProtocolGuestChecks(lab(), h, "10.77.0.1", "magnet-adversary events 8", 8);
  EXPECT_TRUE(d.WaitSessions({"g1", "g2"}, "vsock")) << "the agents' sessions go on";
}

// The lab host's libvirtd restarted under a running daemon with both
// agents connected over vsock: the daemon logs the loss of libvirt and
// keeps delivering meanwhile (its registry keeps the VMs it knew; delivery
// needs no libvirt call), finds both VMs again with the same ids, and the
// sessions, g1's frames and its host.gaps count go on as before: no gap
// to report, because none happened.
TEST_F(GuestViewNested, LabHostLibvirtdRestartedUnderTheDaemon) {
  REQUIRE_LAB();
  HostSide h(lab(), true);
  Daemon d(h, "", "libvirtd");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "vsock"), false) << d.Log();
  auto ids = [&] {
    std::map<std::string, unsigned> id;
    auto top = d.Query("top --count 1");
    if (top.is_object())
      for (const auto& v : top["vms"]) id[v.value("name", "")] = v.value("vm", 0u);
    return id;
  };
  const auto before = ids();
  ASSERT_TRUE(before.count("g1") && before.count("g2")) << d.Query("top --count 1").dump();
  const double gaps = View(lab(), "g1").get("host.gaps");
  // g1's own session's frames, watched across the restart (100 ms period).
  ASSERT_EQ(lab()->Run("g1", "(magnet-adversary watch 40 100ms >/tmp/lv.json 2>&1 &)").status, 0);
  sleep(3);
  auto r = lab()->Lab_({"restart-libvirtd"}, bounds().Domain() + bounds().Quick());
  ASSERT_EQ(r.status, 0) << r.Describe();
  EXPECT_TRUE(WaitFor(
      [&] {
        auto top = d.Query("top --count 1");
        return top.is_object() && top.value("libvirt", false) && ids() == before;
      },
      bounds().Ready()))
      << d.Query("top --count 1").dump() << d.Log();
  const std::string log = d.Log();
  EXPECT_NE(log.find("[registry.lost]"), std::string::npos) << "the loss of libvirt is logged\n" << log;
  EXPECT_TRUE(d.WaitSessions({"g1", "g2"}, "vsock")) << d.Query("sessions").dump();
  // The watch ends 40 s after it began; what it saw across the restart.
  json w;
  ASSERT_TRUE(WaitFor(
      [&] {
        w = json::parse(Trim(lab()->Run("g1", "cat /tmp/lv.json").out), nullptr, false);
        return w.is_object();
      },
      bounds().Work(40), 500))
      << lab()->Run("g1", "cat /tmp/lv.json").out;
  EXPECT_FALSE(w.value("closed", true)) << w.dump() << "\n" << d.Log();
  EXPECT_GT(w.value("frames", 0), 250) << w.dump();
  // A second at most between two frames: an emulated lab host stalls its
  // guests for hundreds of ms (HostileGuestIsRefused... measures that),
  // a daemon waiting on libvirt would hold them for its whole restart.
  EXPECT_LE(w.value("max_gap_ms", 1e9), 1000) << w.dump();
  auto after = View(lab(), "g1");
  EXPECT_EQ(after.get("host.gaps"), gaps) << "no gap, so none reported: " << after.text;
  EXPECT_TRUE(after.j.value("host_connected", false)) << after.text;
  EXPECT_GT(after.get("vcpu.run", 0), 0) << "vCPU accounting goes on: " << after.text;
  std::printf("[e2e] lab host libvirtd restarted: g1 %d frames, longest gap %.1f ms, host.gaps %.0f\n",
              w.value("frames", 0), w.value("max_gap_ms", 0.0), after.get("host.gaps"));
}

TEST_F(GuestViewNested, AgentsReconnectWithinTwoSecondsOfTheDaemonsReturn) {
  REQUIRE_LAB();
  HostSide h(lab(), true);
  Daemon d(h, "", "reconnect");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "vsock"), false) << d.Log();
  ReconnectChecks(lab(), d);
}

// CID reuse and device removal (issue 18): g1's vsock device unplugged
// while the daemon runs and g1 sends 5 Mbit/s, then its CID given to g2
// (whose own device goes first: a guest has one vsock device).  Whatever
// connects from CID 3 from then on is g2: its agent's session names g2 with
// CID 3, its view is g2's (quiet: none of g1's traffic), a hello naming g1
// from there gets g2's session, and no session of g1 remains over vsock.
// The daemon learns of both changes from libvirt's device events and checks
// each accept's CID with its registry: one that still took CID 3 for g1
// would hand g1's view to g2.
TEST_F(GuestViewNested, ACidGivenToAnotherVmServesThatVmAndNothingOfTheFirst) {
  REQUIRE_LAB();
  HostSide h(lab(), true);
  Daemon d(h, "", "cid");
  d.Start();
  ASSERT_NE(d.WaitSessions({"g1", "g2"}, "vsock"), false) << d.Log();
  const std::string g1_uuid = Trim(h.Sh("virsh -q -c qemu:///system domuuid g1").out);
  auto virsh = [&](const std::string& args) {
    return h.Sh("virsh -q -c qemu:///system " + args, bounds().Domain());
  };
  auto xml = [](int cid) { return "/tmp/magnet-gv-vsock-" + std::to_string(cid) + ".xml"; };
  for (int cid : {3, 4})
    ASSERT_EQ(h.Sh("echo \"<vsock model='virtio'><cid auto='no' address='" + std::to_string(cid) +
                   "'/></vsock>\" >" + xml(cid))
                  .status,
              0);
  // A device is gone once libvirt's live description has none (the guest
  // acknowledged the unplug); then its CID is free.
  std::string live;
  auto cid_of = [&](const std::string& g) {
    live = virsh("dumpxml " + g).out;
    std::smatch m;
    static const std::regex re(R"(<cid auto='no' address='(\d+)'/>)");
    return std::regex_search(live, m, re) ? std::stoi(m[1].str()) : 0;
  };
  auto unplug = [&](const std::string& g, int cid) {
    auto r = virsh("detach-device " + g + " " + xml(cid) + " --live");
    EXPECT_EQ(r.status, 0) << g << ": " << r.Describe();
    return r.status == 0 && WaitFor([&] { return cid_of(g) == 0; }, bounds().Domain(), 500);
  };
  auto plug = [&](const std::string& g, int cid) {
    auto r = virsh("attach-device " + g + " " + xml(cid) + " --live");
    EXPECT_EQ(r.status, 0) << g << ": " << r.Describe();
    return r.status == 0 && cid_of(g) == cid;
  };
  // The lab as it was for the tests after this one: g1 CID 3, g2 CID 4.
  struct restore {
    std::function<int(const std::string&)> cid_of;
    std::function<bool(const std::string&, int)> unplug, plug;
    ~restore() {
      if (const int c = cid_of("g2"); c != 0 && c != 4) unplug("g2", c);
      if (cid_of("g2") == 0) plug("g2", 4);
      if (cid_of("g1") == 0) plug("g1", 3);
    }
  } again{cid_of, unplug, plug};
  ASSERT_EQ(h.Sh("(timeout " + std::to_string(bounds().Linger(60)) + " iperf3 -s -1 -p 5742 >/dev/null 2>&1 &)").status, 0);
  ASSERT_EQ(lab()->Run("g1", "(iperf3 -c 10.77.0.1 -p 5742 -u -b 5M -l 1400 -t 60 >/dev/null 2>&1 &)").status, 0);
  ASSERT_TRUE(unplug("g1", 3)) << "g1's vsock device still there: " << live;
  ASSERT_TRUE(unplug("g2", 4)) << "g2's vsock device still there: " << live;
  ASSERT_TRUE(plug("g2", 3)) << "g2 did not get CID 3: " << live;
  // g2's root speaks the protocol over vsock, from CID 3 now, saying it is
  // g1, until the daemon serves it (a connect the registry does not yet
  // know is refused, never served as g1): every answer holds g2's values.
  // (g2's agent went over to its virtio-serial channel when its vsock
  // device went away, and stays there while that session lasts.)
  json forged;
  std::vector<json> answers;
  const bool served = WaitFor(
      [&] {
        auto r = lab()->Run("g2", "magnet-adversary forged-hello g1 " + g1_uuid, bounds().Work(3));
        forged = json::parse(Trim(r.out), nullptr, false);
        if (!forged.is_object()) return false;
        answers.push_back(forged);
        return forged.contains("values") && !forged["values"].empty();
      },
      bounds().Ready(), 500);
  ASSERT_TRUE(served) << "no view served to g2 over vsock from CID 3: " << forged.dump() << "\n" << d.Log();
  std::printf("[e2e] CID 3 given to g2: served at its connect %zu, tap.tx_bps %.0f (g1 sends 5 Mbit/s)\n",
              answers.size(), forged["values"].value("tap.tx_bps", -1.0));
  for (const auto& f : answers) {
    if (f.contains("values") && !f["values"].empty()) {
      EXPECT_LT(f["values"].value("tap.tx_bps", 1e9), 2e6) << "g1's values reached g2: " << f.dump();
    }
    if (f.contains("record_vms")) {
      for (const auto& [vm, n] : f["record_vms"].items())
        EXPECT_EQ(std::stoul(vm), 0u) << "an event record naming a VM: " << f.dump();
    }
  }
  // While such a session lasts, the daemon names its CID 3 as g2's.
  ASSERT_EQ(lab()->Run("g2", "(magnet-adversary watch 20 100ms >/tmp/magnet-gv-cid.json 2>&1 &)").status, 0);
  json s;
  auto g2_on_3 = [&] {
    s = d.Query("sessions");
    if (!s.is_object()) return false;
    for (const auto& x : s["sessions"])
      if (x.value("transport", "") == "vsock" && x.value("cid", 0u) == 3u && x.value("subscribed", false))
        return true;
    return false;
  };
  ASSERT_TRUE(WaitFor(g2_on_3, bounds().Work(10), 200)) << "no vsock session from CID 3: " << s.dump() << "\n" << d.Log();
  for (const auto& x : s["sessions"]) {
    EXPECT_FALSE(x.value("transport", "") == "vsock" && x.value("name", "") == "g1")
        << "a vsock session of g1, which has no vsock device: " << s.dump();
    if (x.value("cid", 0u) == 3u) {
      EXPECT_EQ(x.value("name", ""), "g2") << s.dump();
    }
  }
  // g2's own view, from its agent: its tap is quiet while g1 sends 5 Mbit/s.
  auto v = View(lab(), "g2");
  ASSERT_TRUE(v.ok()) << v.text;
  EXPECT_LT(v.get("tap.tx_bps"), 2e6) << v.text;
  const std::string log = d.Log();
  EXPECT_EQ(log.find("[deliver.refused] vm g1"), std::string::npos) << "g1 did nothing wrong\n" << log;
}

}  // namespace
}  // namespace magnet::e2e
