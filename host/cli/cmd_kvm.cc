// magnet kvm: exit counts and exit -> entry time per exit reason, per VM
// (QEMU process) and optionally per vCPU, from in-kernel statistics, in the
// spirit of `perf kvm stat live`.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "magnet/capture/capture.h"
#include "magnet/capture/latency.h"
#include "magnet/events.h"
#include "vm_follow.h"

namespace magnet::host {

static const char* kKvmHelp =
    "Usage: magnet kvm [--interval T] [--count N] [--duration T] [--per-vcpu]\n"
    "                  [--vm NAME]... [--uri URI] [--json]\n"
    "\n"
    "KVM exits per exit reason with their exit -> entry time (the time the host\n"
    "spends handling the exit, including QEMU for userspace exits) and halt\n"
    "times (halt(polled): the wakeup came while KVM polled; halt(slept): the\n"
    "vCPU thread slept), per QEMU process, from in-kernel statistics: no event\n"
    "is copied to user space.  Times are from log2 histograms (quantiles within\n"
    "a factor of 2); MAX is the maximum since the start.  Without --vm or\n"
    "--uri, VM is 0 and GUEST is taken from QEMU's command line; with them,\n"
    "VM and GUEST are libvirt's (the registry's ids, as in magnet host).\n"
    "\n"
    "  -i, --interval T    reporting interval (default 1s)\n"
    "  -c, --count N       stop after N intervals\n"
    "  -d, --duration T    stop after T\n"
    "      --per-vcpu      one row per vCPU and reason (default: per VM)\n"
    MAGNET_HELP_VM_SELECT
    "      --json          JSON Lines output\n"
    "\n" MAGNET_HELP_DURATIONS;

namespace {

// libvirt starts QEMU with "-name guest=NAME,...": the guest's name.
std::string guest_name(uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
  std::string arg;
  bool next = false;
  while (std::getline(f, arg, '\0')) {
    if (next) {
      if (arg.rfind("guest=", 0) == 0) arg = arg.substr(6);
      return arg.substr(0, arg.find(','));
    }
    next = arg == "-name";
  }
  std::ifstream c("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(c, comm);
  return comm.empty() ? "?" : comm;
}

using row_key = std::tuple<uint32_t, uint32_t, int64_t, uint32_t, uint32_t>;  // vm tgid vcpu isa reason

struct row {
  row_key k;
  lat_stat d;
};

// The interval's rows: what each key gained since @prev, busiest first
// within a VM, QEMU process and vCPU.
std::vector<row> interval_rows(const std::map<row_key, lat_stat>& cur,
                               const std::map<row_key, lat_stat>& prev) {
  std::vector<row> rows;
  for (const auto& [k, c] : cur) {
    auto it = prev.find(k);
    lat_stat d = it == prev.end() ? c : c.since(it->second);
    if (d.count) rows.push_back({k, d});
  }
  std::sort(rows.begin(), rows.end(), [](const row& x, const row& y) {
    auto px = std::make_tuple(std::get<0>(x.k), std::get<1>(x.k), std::get<2>(x.k));
    auto py = std::make_tuple(std::get<0>(y.k), std::get<1>(y.k), std::get<2>(y.k));
    if (px != py) return px < py;
    return x.d.total_ns > y.d.total_ns;
  });
  return rows;
}

nlohmann::ordered_json rows_json(const std::vector<row>& rows,
                                 const std::map<uint32_t, std::string>& names, double elapsed,
                                 double secs) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& [k, d] : rows) {
    auto [vm, tgid, vcpu, isa, reason] = k;
    a.push_back({{"vm", vm},
                 {"tgid", tgid},
                 {"guest", names.at(tgid)},
                 {"vcpu", vcpu},
                 {"reason", kvm_exit_reason_name(isa, reason)},
                 {"code", reason},
                 {"isa", isa},
                 {"exits", d.count},
                 {"exits_per_s", static_cast<double>(d.count) / secs},
                 {"time_pct", static_cast<double>(d.total_ns) / (secs * 1e9) * 100},
                 {"mean_us", d.mean_ns() / 1e3},
                 {"p50_us", d.quantile_ns(0.5) / 1e3},
                 {"p99_us", d.quantile_ns(0.99) / 1e3},
                 {"max_us", static_cast<double>(d.max_ns) / 1e3},
                 {"userspace", d.aux}});
  }
  return {{"elapsed_s", elapsed}, {"interval_s", secs}, {"rows", std::move(a)}};
}

void print_rows(const std::vector<row>& rows, const std::map<uint32_t, std::string>& names,
                double secs) {
  std::printf("%3s %7s %-12s %4s %-22s %9s %9s %6s %9s %9s %9s %9s %7s\n", "VM", "QEMU", "GUEST",
              "VCPU", "REASON", "EXITS", "EXITS/S", "TIME%", "MEAN_US", "P50_US", "P99_US",
              "MAX_US", "USER");
  for (const auto& [k, d] : rows) {
    auto [vm, tgid, vcpu, isa, reason] = k;
    const std::string vc = vcpu < 0 ? "all" : vcpu == 0xffffffff ? "?" : std::to_string(vcpu);
    const double pct = static_cast<double>(d.total_ns) / (secs * 1e9) * 100;
    std::printf("%3u %7u %-12.12s %4s %-22.22s %9llu %9.1f %6.2f %9.2f %9.2f %9.2f %9.2f %7llu\n",
                vm, tgid, names.at(tgid).c_str(), vc.c_str(),
                kvm_exit_reason_name(isa, reason).c_str(), static_cast<unsigned long long>(d.count),
                static_cast<double>(d.count) / secs, pct, d.mean_ns() / 1e3,
                d.quantile_ns(0.5) / 1e3, d.quantile_ns(0.99) / 1e3,
                static_cast<double>(d.max_ns) / 1e3, static_cast<unsigned long long>(d.aux));
  }
  std::printf("\n");
}

}  // namespace

int cmd_kvm(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kKvmHelp, stdout);
    return 0;
  }
  auto interval = a.value("--interval", "-i");
  auto count = a.value("--count", "-c");
  auto dur = a.value("--duration", "-d");
  bool per_vcpu = a.flag("--per-vcpu");
  bool json = a.flag("--json");
  const vm_select sel = parse_vm_select(a);
  a.finish(0, 0);
  uint64_t iv = interval ? cli::need(cli::parse_duration_ns(*interval), "--interval")
                         : 1'000'000'000ull;
  uint64_t max_n = count ? cli::need(cli::parse_count(*count), "--count") : 0;
  uint64_t dur_ns = dur ? cli::need(cli::parse_duration_ns(*dur), "--duration") : 0;

  capture_options co;
  co.probes = {MAGNET_EV_KVM_ENTRY, MAGNET_EV_KVM_WAKEUP};
  co.ring_bytes = 4096;  // statistics only: the ring stays empty
  auto cap = capture::open(co);
  if (!cap) {
    std::fprintf(stderr, "magnet kvm: %s\n", cap.err().message.c_str());
    return 1;
  }
  for (uint16_t t : co.probes) {
    const probe_plan* p = (*cap)->plan_for(t);
    if (!p || p->chosen < 0) {
      std::fprintf(stderr,
                   "magnet kvm: %s cannot attach here: no KVM tracepoints (is the kvm module "
                   "loaded?)\n",
                   event_name(t).c_str());
      return 1;
    }
    if (auto s = (*cap)->set_mode(t, MAGNET_MODE_AGGREGATE); !s) {
      std::fprintf(stderr, "magnet kvm: %s\n", s.err().message.c_str());
      return 1;
    }
  }

  // --vm/--uri: the registry tags each VM's QEMU in the kernel, so that
  // the statistics' keys carry its id; --vm keeps those VMs' rows.
  std::unique_ptr<vm_follower> vms;
  if (sel.on()) {
    auto f = vm_follower::start(**cap, sel);
    if (!f) {
      std::fprintf(stderr, "magnet kvm: %s\n", f.err().message.c_str());
      return 1;
    }
    vms = std::move(*f);
    std::fprintf(stderr, "magnet: VMs of %s: %s\n", sel.uri.c_str(), vms->describe().c_str());
  }

  std::map<row_key, lat_stat> prev;
  std::map<uint32_t, std::string> names;  // tgid -> guest
  every_interval(iv, max_n, dur_ns, [&](double elapsed, double secs) {
    std::map<row_key, lat_stat> cur;
    for (const auto& [k, s] : (*cap)->kvm_exit_stats()) {
      if (vms && !vms->selected().empty() && !vms->selected().count(k.vm_id)) continue;
      row_key rk{k.vm_id, k.tgid, per_vcpu ? int64_t{k.vcpu_id} : -1, k.isa, k.reason};
      cur[rk].merge(s);
    }
    auto rows = interval_rows(cur, prev);
    prev = std::move(cur);
    std::map<uint32_t, std::string> by_id;  // the registry's names
    if (vms)
      for (const auto& [name, id] : vms->ids()) by_id[id] = name;
    for (const auto& r : rows) {
      const uint32_t vm = std::get<0>(r.k), tgid = std::get<1>(r.k);
      if (auto it = by_id.find(vm); vm && it != by_id.end()) names[tgid] = it->second;
      else if (!names.count(tgid)) names[tgid] = guest_name(tgid);
    }
    if (json)
      std::printf("%s\n", rows_json(rows, names, elapsed, secs).dump(-1, ' ', false,
                                                                     nlohmann::ordered_json::error_handler_t::replace).c_str());
    else
      print_rows(rows, names, secs);
    std::fflush(stdout);
  });
  return 0;
}

}  // namespace magnet::host
