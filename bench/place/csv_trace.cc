// The CSV trace (README.md, "The CSV trace"): one row per VM and sample,
//   time_s,vm,vcpus,mem_bytes,cpu_cores,net_bps
// read whole, then played in steps.  The samples' period is the smallest
// gap between two rows of one VM; a VM's sample that is missing takes its
// last value (0 before its first).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "trace.h"

namespace magnet::bench::place {

namespace {

struct row {
  double t = 0;
  int vm = 0;
  double cpu = 0, net = 0;
};

result<double> number(std::string_view s, const char* what) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || !std::isfinite(v) || v < 0)
    return error{std::string(what) + " '" + std::string(s) + "' is not a number >= 0"};
  return v;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= line.size(); ++i)
    if (i == line.size() || line[i] == ',') {
      out.push_back(line.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

class csv : public trace {
 public:
  const std::vector<vm_info>& vms() const override { return vms_; }
  int steps() const override { return steps_; }
  double step_seconds() const override { return step_s_; }
  int samples_per_step() const override { return samples_; }
  std::string describe() const override {
    return path_ + ": " + std::to_string(vms_.size()) + " VMs, " + std::to_string(steps_) + " steps of " +
           std::to_string(int(step_s_)) + " s, " + std::to_string(samples_) + " samples each";
  }
  void rewind() override { step_ = 0; }
  void next(step_demand& out) override {
    const size_t n = vms_.size(), per = n * samples_;
    out.samples = samples_;
    out.cpu.assign(cpu_.begin() + step_ * per, cpu_.begin() + (step_ + 1) * per);
    out.net.assign(net_.begin() + step_ * n, net_.begin() + (step_ + 1) * n);
    ++step_;
  }

  std::string path_;
  double step_s_ = 300;
  int samples_ = 1, steps_ = 0, step_ = 0;
  std::vector<vm_info> vms_;
  std::vector<float> cpu_, net_;

  status read(std::istream& in);
  status lay_out(std::vector<row>& rows);
};

status csv::read(std::istream& in) {
  std::map<std::string, int, std::less<>> index;
  std::vector<row> rows;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#' || line.rfind("time_s,", 0) == 0) continue;
    const std::string at = path_ + ":" + std::to_string(no) + ": ";
    auto f = split(line);
    if (f.size() != 6) return error{at + "6 fields expected (time_s,vm,vcpus,mem_bytes,cpu_cores,net_bps), not " +
                                    std::to_string(f.size())};
    if (f[1].empty()) return error{at + "no VM name"};
    double v[6] = {};
    const char* what[6] = {"time_s", "", "vcpus", "mem_bytes", "cpu_cores", "net_bps"};
    for (int i : {0, 2, 3, 4, 5}) {
      auto x = number(f[i], what[i]);
      if (!x) return error{at + x.err().message};
      v[i] = *x;
    }
    auto [it, fresh] = index.try_emplace(std::string(f[1]), int(vms_.size()));
    if (fresh) vms_.push_back(vm_info{std::string(f[1]), v[2], v[3]});
    vm_info& vi = vms_[it->second];
    vi.vcpus = std::max(vi.vcpus, v[2]);
    vi.mem_bytes = std::max(vi.mem_bytes, v[3]);
    // A rate a little above the vCPUs is the jitter of two readings' times.
    rows.push_back(row{v[0], it->second, v[2] > 0 ? std::min(v[4], v[2]) : v[4], v[5]});
  }
  if (rows.empty()) return error{path_ + ": no samples"};
  return lay_out(rows);
}

// The rows into dense per-step arrays.
status csv::lay_out(std::vector<row>& rows) {
  std::stable_sort(rows.begin(), rows.end(),
                   [](const row& a, const row& b) { return a.vm < b.vm || (a.vm == b.vm && a.t < b.t); });
  double period = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    const double gap = rows[i].t - rows[i - 1].t;
    if (rows[i].vm == rows[i - 1].vm && gap > 0 && (period == 0 || gap < period)) period = gap;
  }
  if (period == 0) period = step_s_;
  const double ratio = step_s_ / period;
  samples_ = int(std::lround(ratio));
  if (samples_ < 1 || std::fabs(ratio - samples_) > 0.01)  // within 1 % of a sample
    return error{path_ + ": the samples are " + num(period) + " s apart, which does not divide the step (" +
                 num(step_s_) + " s)"};
  double t0 = rows[0].t, t1 = rows[0].t;
  for (const row& r : rows) t0 = std::min(t0, r.t), t1 = std::max(t1, r.t);
  const long slots_total = std::lround((t1 - t0) / period) + 1;
  steps_ = int((slots_total + samples_ - 1) / samples_);
  if (steps_ < 2)
    return error{path_ + ": " + std::to_string(steps_) + " step of " + num(step_s_) +
                 " s: a plan needs a step after it (at least 2)"};
  const size_t n = vms_.size();
  std::vector<float> slot(size_t(steps_) * samples_ * n, -1), net_sum(size_t(steps_) * n, 0);
  std::vector<int> net_count(size_t(steps_) * n, 0);
  for (const row& r : rows) {
    const long k = std::lround((r.t - t0) / period);
    slot[size_t(k) * n + r.vm] = float(r.cpu);
    net_sum[size_t(k / samples_) * n + r.vm] += float(r.net);
    net_count[size_t(k / samples_) * n + r.vm] += 1;
  }
  cpu_.assign(slot.size(), 0);
  net_.assign(net_sum.size(), 0);
  for (size_t v = 0; v < n; ++v) {
    float last = 0, last_net = 0;
    for (size_t k = 0; k < size_t(steps_) * samples_; ++k)
      cpu_[k * n + v] = last = slot[k * n + v] >= 0 ? slot[k * n + v] : last;
    for (size_t s = 0; s < size_t(steps_); ++s)
      net_[s * n + v] = last_net = net_count[s * n + v] ? net_sum[s * n + v] / net_count[s * n + v] : last_net;
  }
  return {};
}

}  // namespace

result<std::unique_ptr<trace>> csv_trace(const std::string& path, double step_s) {
  std::ifstream in(path);
  if (!in) return error::from_errno(path);
  auto t = std::make_unique<csv>();
  t->path_ = path;
  t->step_s_ = step_s;
  if (auto st = t->read(in); !st) return st.err();
  return std::unique_ptr<trace>(std::move(t));
}

}  // namespace magnet::bench::place
