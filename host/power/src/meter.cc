#include "magnet/power/meter.h"

namespace magnet::power {

namespace {

uint64_t grown(uint64_t before, uint64_t now) { return now >= before ? now - before : 0; }

vm_work growth(const vm_work& before, const vm_work& now) {
  return {grown(before.vcpu_run_ns, now.vcpu_run_ns), grown(before.vhost_ns, now.vhost_ns),
          grown(before.io_threads_ns, now.io_threads_ns)};
}

}  // namespace

status power_meter::sample(uint64_t now_ns, const cpu_times& cpu, const std::map<uint32_t, vm_work>& vms) {
  std::vector<uint64_t> uj;
  if (rapl_) {
    auto r = rapl_->read();
    if (!r) return r.err();
    uj = std::move(*r);
  }
  // VMs gone: their energy stays counted, under gone.
  for (auto it = totals_.vms.begin(); it != totals_.vms.end();)
    if (!vms.count(it->first)) {
      totals_.gone_j += it->second;
      it = totals_.vms.erase(it);
    } else {
      ++it;
    }
  if (have_base_ && now_ns > last_ns_) {
    const cpu_times d{grown(last_cpu_.busy_ns, cpu.busy_ns), grown(last_cpu_.idle_ns, cpu.idle_ns)};
    const double secs = static_cast<double>(now_ns - last_ns_) / 1e9;
    double host_j = 0, idle_j = 0;
    if (rapl_) {
      host_j = rapl_->joules_between(last_uj_, uj);
      idle_j = rapl_idle_joules(host_j, d);
    } else {
      const auto e = model_interval(*model_, d, secs);
      host_j = e.host_j;
      idle_j = e.idle_j;
    }
    std::map<uint32_t, vm_work> work;
    for (const auto& [id, w] : vms) {
      auto before = last_vms_.find(id);
      work[id] = before == last_vms_.end() ? vm_work{} : growth(before->second, w);
    }
    const energy_split s = attribute(host_j, idle_j, d.busy_ns, work);
    totals_.host_j += host_j;
    totals_.idle_j += s.idle_j;
    totals_.own_j += s.own_j;
    interval iv{now_ns - last_ns_, host_j, {}};
    for (const auto& [id, j] : s.vms) {
      totals_.vms[id] += j;
      iv.vms.emplace_back(id, j);
    }
    window_ns_ += iv.ns;
    window_.push_back(std::move(iv));
    while (window_.size() > 1 && window_ns_ - window_.front().ns >= kWindowNs) {
      window_ns_ -= window_.front().ns;
      window_.pop_front();
    }
  }
  for (const auto& [id, w] : vms) totals_.vms.try_emplace(id, 0.0);
  have_base_ = true;
  last_ns_ = now_ns;
  last_cpu_ = cpu;
  last_uj_ = std::move(uj);
  last_vms_ = vms;
  return {};
}

double power_meter::host_watts() const {
  if (!window_ns_) return 0;
  double j = 0;
  for (const auto& iv : window_) j += iv.host_j;
  return j / (static_cast<double>(window_ns_) / 1e9);
}

double power_meter::vm_watts(uint32_t vm) const {
  if (!window_ns_) return 0;
  double j = 0;
  for (const auto& iv : window_)
    for (const auto& [id, vj] : iv.vms)
      if (id == vm) j += vj;
  return j / (static_cast<double>(window_ns_) / 1e9);
}

}  // namespace magnet::power
