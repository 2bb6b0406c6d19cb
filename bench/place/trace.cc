#include "trace.h"

#include <algorithm>
#include <cmath>

namespace magnet::bench::place {

namespace {

// splitmix64: small state (one word per VM), good enough statistics for
// demand, and the same numbers on every machine (std::normal_distribution
// is not specified to be).
struct rng {
  uint64_t s = 0;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal() {  // Box-Muller, one of the pair
    const double u1 = 1 - uniform(), u2 = uniform();
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }
};

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr int kAppSize = 8;  // VMs of one application: one phase, bursts together

class synthetic : public trace {
 public:
  explicit synthetic(const synthetic_options& o) : o_(o) {
    rng r{o.seed * 0x2545f4914f6cdd1dull + 1};
    for (int v = 0; v < o.vms; ++v) {
      const double u = r.uniform();
      vm_info vi;
      vi.name = "vm" + std::to_string(v);
      vi.vcpus = u < 0.4 ? 1 : u < 0.7 ? 2 : u < 0.9 ? 4 : 8;
      vi.mem_bytes = vi.vcpus * (r.uniform() < 0.5 ? 2 : 4) * kGiB;
      vms_.push_back(vi);
    }
    rewind();
  }
  const std::vector<vm_info>& vms() const override { return vms_; }
  int steps() const override { return o_.steps; }
  double step_seconds() const override { return o_.step_s; }
  int samples_per_step() const override { return o_.samples; }
  std::string describe() const override {
    return "synthetic, seed " + std::to_string(o_.seed) + ": " + std::to_string(o_.vms) + " VMs, " +
           std::to_string(o_.steps) + " steps of " + std::to_string(int(o_.step_s)) + " s, " +
           std::to_string(o_.samples) + " samples each";
  }
  void rewind() override;
  void next(step_demand& out) override;

 private:
  struct vm_state {
    double base = 0, amp = 0, phase_h = 0, net_peak = 0;  // net_peak > 0: a network-heavy VM
    rng r;
    int burst_left = 0;
    double burst_level = 0;
  };
  struct app_state {
    rng r;
    int burst_left = 0;
  };
  synthetic_options o_;
  std::vector<vm_info> vms_;
  std::vector<vm_state> st_;
  std::vector<app_state> apps_;
  int step_ = 0;
  void start_bursts();
};

void synthetic::rewind() {
  step_ = 0;
  st_.assign(vms_.size(), {});
  apps_.assign((vms_.size() + kAppSize - 1) / kAppSize, {});
  for (size_t a = 0; a < apps_.size(); ++a) apps_[a].r.s = o_.seed * 0x9e3779b97f4a7c15ull + 7919 * (a + 1);
  std::vector<double> app_phase(apps_.size());
  for (size_t a = 0; a < apps_.size(); ++a) app_phase[a] = 14 + 2 * apps_[a].r.normal();
  for (size_t v = 0; v < vms_.size(); ++v) {
    vm_state& s = st_[v];
    s.r.s = o_.seed * 0xd1b54a32d192ed03ull + 104729 * (v + 1);
    s.base = s.r.uniform(0.05, 0.45) * vms_[v].vcpus;
    s.amp = s.r.uniform(0.3, 0.8);
    s.phase_h = app_phase[v / kAppSize] + 0.5 * s.r.normal();
    s.net_peak = s.r.uniform() < 0.05 ? s.r.uniform(1e9, 4e9) : 0;
  }
}

// Each step a VM out of a burst starts one with chance 1 %, of 1 to 6
// steps at 60-100 % of its vCPUs; an application (8 VMs) starts one with
// chance 0.3 %, of 1 to 3 steps, doubling its VMs' demand.
void synthetic::start_bursts() {
  for (auto& a : apps_) {
    if (a.burst_left > 0) {
      --a.burst_left;
    } else if (a.r.uniform() < 0.003) {
      a.burst_left = 1 + int(a.r.uniform() * 3);
    }
  }
  for (size_t v = 0; v < st_.size(); ++v) {
    vm_state& s = st_[v];
    if (s.burst_left > 0) {
      --s.burst_left;
    } else if (s.r.uniform() < 0.01) {
      s.burst_left = 1 + int(s.r.uniform() * 6);
      s.burst_level = s.r.uniform(0.6, 1.0) * vms_[v].vcpus;
    }
  }
}

void synthetic::next(step_demand& out) {
  const size_t n = vms_.size();
  out.samples = o_.samples;
  out.cpu.assign(n * o_.samples, 0);
  out.net.assign(n, 0);
  start_bursts();
  const double dt = o_.step_s / o_.samples;
  for (size_t v = 0; v < n; ++v) {
    vm_state& s = st_[v];
    const bool app_burst = apps_[v / kAppSize].burst_left > 0;
    double sum = 0;
    for (int k = 0; k < o_.samples; ++k) {
      const double hours = (step_ * o_.step_s + (k + 0.5) * dt) / 3600;
      const double day = 1 + s.amp * std::cos(2 * M_PI * (hours - s.phase_h) / 24);
      double d = s.base * day * std::max(0.0, 1 + 0.15 * s.r.normal());
      if (s.burst_left > 0) d = std::max(d, s.burst_level);
      if (app_burst) d *= 2;
      d = std::clamp(d, 0.0, vms_[v].vcpus);
      out.cpu[k * n + v] = float(d);
      sum += d;
    }
    const double hours = (step_ + 0.5) * o_.step_s / 3600;
    const double day = (1 + s.amp * std::cos(2 * M_PI * (hours - s.phase_h) / 24)) / (1 + s.amp);
    out.net[v] = float(s.net_peak > 0 ? s.net_peak * day : 1e7 + 3e7 * sum / o_.samples);
  }
  ++step_;
}

}  // namespace

std::unique_ptr<trace> synthetic_trace(const synthetic_options& o) { return std::make_unique<synthetic>(o); }

}  // namespace magnet::bench::place
