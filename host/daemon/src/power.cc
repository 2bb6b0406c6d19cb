// The host's power (host/power, docs/placement.md): the source chosen once
// at start and said once in the log, then at each tick the interval's
// energy split between the VMs, the host's idle power and its own work;
// each VM's share on /metrics, in magnet top and into the VM.
#include "host_daemon.h"
#include "magnet/log.h"
#include "magnet/metrics/power_stats.h"

namespace magnet::host {

// RAPL under the powercap root, else the model, else none: 0, or the exit
// status when a --powercap-root given cannot be read.
int host_daemon::open_power() {
  const bool given = !opt_.powercap_root.empty();
  const std::string root = given ? opt_.powercap_root : kPowercapRoot;
  auto rapl = power::powercap_reader::open(root);
  if (!rapl && given) {
    log_error("magnet host: --powercap-root: " + rapl.err().message);
    return 1;
  }
  std::string no_rapl = "no RAPL package zone under " + root;
  if (!rapl) no_rapl = "no RAPL (" + rapl.err().message + ")";
  if (rapl && !rapl->zones().empty()) {
    log_notice("magnet-host: [power] source rapl: " + power::describe(*rapl, root) +
               (opt_.power_model ? "; --power-model " + opt_.power_model_path + " not used" : std::string()));
    power_.emplace(std::move(*rapl));
  } else if (opt_.power_model) {
    log_notice("magnet-host: [power] source model " + opt_.power_model_path + ": " +
               power::describe(*opt_.power_model) + " (" + no_rapl + ")");
    power_.emplace(*opt_.power_model);
  } else {
    log_notice("magnet-host: [power] no power source: " + no_rapl +
               " and no --power-model: no power figures");
  }
  return 0;
}

void host_daemon::power_threads(const vm_info& vm) {
  std::vector<power::helper_thread> h;
  for (const auto& t : vm.threads) {
    // Role "emulator" is every other QEMU thread: the main loop (device
    // emulation, timers, its own virtio queues), the RCU thread, the block
    // layer's pool of workers.
    if (t.role == "vhost")
      h.push_back({t.tid, power::helper_role::vhost});
    else if (t.role == "iothread" || t.role == "emulator")
      h.push_back({t.tid, power::helper_role::io});
  }
  helpers_.set_threads(vm.vm_id, h);
}

// One tick: the host's CPU times and each VM's work so far: its vCPU run
// time (the sched probe), and the CPU time of its vhost workers and QEMU's
// other threads (/proc/TID/schedstat, read here: one pread a thread).
void host_daemon::sample_power(uint64_t now, const std::map<uint32_t, vm_counters>& c) {
  if (!power_) return;
  const auto& helpers = helpers_.read();
  std::map<uint32_t, power::vm_work> work;
  for (const auto& [id, v] : c) {
    auto& w = work[id];
    for (const auto& [vcpu, ns] : v.vcpu_ns) w.vcpu_run_ns += ns[0];
    if (auto h = helpers.find(id); h != helpers.end()) {
      w.vhost_ns = h->second.vhost_ns;
      w.io_threads_ns = h->second.io_ns;
    }
  }
  auto cpu = power::read_proc_stat();
  status s = cpu ? power_->sample(now, *cpu, work) : status(cpu.err());
  if (!s) {
    if (s.err().message != power_note_)
      log_warning("magnet-host: [power] " + s.err().message + " (the energy since the last reading is counted at the next)");
    power_note_ = s.err().message;
  } else if (!power_note_.empty()) {
    log_notice("magnet-host: [power] reading again");
    power_note_.clear();
  }
}

void host_daemon::power_figures(exposition_input& in) const {
  if (!power_) return;
  const auto& t = power_->totals();
  in.power = host_power_figures{power_->source(), power_->host_watts(), t.host_j, t.idle_j, t.own_j, t.gone_j};
  for (auto& vm : in.vms)
    if (auto it = t.vms.find(vm.vm_id); it != t.vms.end())
      vm.power = vm_power_figures{power_->vm_watts(vm.vm_id), it->second};
}

std::vector<view::stat_value> host_daemon::vm_stats(uint32_t vm) const {
  std::vector<view::stat_value> s = metrics_.stats(vm);
  if (power_) append_power_stats(*power_, vm, s);
  return s;
}

std::optional<double> host_daemon::vm_watts(uint32_t vm) const {
  if (!power_ || !power_->totals().vms.count(vm)) return std::nullopt;
  return power_->vm_watts(vm);
}

std::optional<double> host_daemon::vm_joules(uint32_t vm) const {
  if (!power_) return std::nullopt;
  auto it = power_->totals().vms.find(vm);
  if (it == power_->totals().vms.end()) return std::nullopt;
  return it->second;
}

ojson host_daemon::host_power_json() const {
  if (!power_) return nullptr;
  return ojson{{"source", power_->source()},
               {"watts", power_->host_watts()},
               {"energy_joules", power_->totals().host_j}};
}

}  // namespace magnet::host
