// magnet kvm: exit counts and exit -> entry time per exit reason, per VM
// (QEMU process) and optionally per vCPU, from in-kernel statistics, in the
// spirit of `perf kvm stat live`.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <tuple>
#include <vector>

#include "magnet/capture/capture.h"
#include "commands.h"
#include "magnet/capture/latency.h"
#include "magnet/events.h"

namespace magnet::host {

static const char* kKvmHelp =
    "Usage: magnet kvm [--interval T] [--count N] [--duration T] [--per-vcpu] [--json]\n"
    "\n"
    "KVM exits per exit reason with their exit -> entry time (the time the host\n"
    "spends handling the exit, including QEMU for userspace exits) and halt\n"
    "times (halt(polled): the wakeup came while KVM polled; halt(slept): the\n"
    "vCPU thread slept), per QEMU process, from in-kernel statistics: no event\n"
    "is copied to user space.  Times are from log2 histograms (quantiles within\n"
    "a factor of 2); MAX is the maximum since the start.\n"
    "\n"
    "  -i, --interval T    reporting interval (default 1s)\n"
    "  -c, --count N       stop after N intervals\n"
    "  -d, --duration T    stop after T\n"
    "      --per-vcpu      one row per vCPU and reason (default: per VM)\n"
    "      --json          JSON Lines output\n";

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

  std::map<row_key, lat_stat> prev;
  std::map<uint32_t, std::string> names;
  every_interval(iv, max_n, dur_ns, [&](double elapsed, double secs) {
    std::map<row_key, lat_stat> cur;
    for (const auto& [k, s] : (*cap)->kvm_exit_stats()) {
      row_key rk{k.vm_id, k.tgid, per_vcpu ? int64_t{k.vcpu_id} : -1, k.isa, k.reason};
      cur[rk].merge(s);
    }
    struct row {
      row_key k;
      lat_stat d;
    };
    std::vector<row> rows;
    for (const auto& [k, c] : cur) {
      auto it = prev.find(k);
      lat_stat d = it == prev.end() ? c : c.since(it->second);
      if (d.count) rows.push_back({k, d});
    }
    prev = std::move(cur);
    std::sort(rows.begin(), rows.end(), [](const row& x, const row& y) {
      auto px = std::make_tuple(std::get<0>(x.k), std::get<1>(x.k), std::get<2>(x.k));
      auto py = std::make_tuple(std::get<0>(y.k), std::get<1>(y.k), std::get<2>(y.k));
      if (px != py) return px < py;
      return x.d.total_ns > y.d.total_ns;
    });
    if (json)
      std::printf("{\"elapsed_s\":%.3f,\"interval_s\":%.3f,\"rows\":[", elapsed, secs);
    else
      std::printf("%3s %7s %-12s %4s %-22s %9s %9s %6s %9s %9s %9s %9s %7s\n", "VM", "QEMU",
                  "GUEST", "VCPU", "REASON", "EXITS", "EXITS/S", "TIME%", "MEAN_US", "P50_US",
                  "P99_US", "MAX_US", "USER");
    bool first = true;
    for (const auto& [k, d] : rows) {
      auto [vm, tgid, vcpu, isa, reason] = k;
      if (!names.count(tgid)) names[tgid] = guest_name(tgid);
      std::string rn = kvm_exit_reason_name(isa, reason);
      double pct = static_cast<double>(d.total_ns) / (secs * 1e9) * 100;
      if (json) {
        std::printf("%s{\"vm\":%u,\"tgid\":%u,\"guest\":\"%s\",\"vcpu\":%lld,\"reason\":\"%s\","
                    "\"code\":%u,\"isa\":%u,\"exits\":%llu,\"exits_per_s\":%.1f,\"time_pct\":%.3f,"
                    "\"mean_us\":%.3f,\"p50_us\":%.3f,\"p99_us\":%.3f,\"max_us\":%.3f,"
                    "\"userspace\":%llu}",
                    first ? "" : ",", vm, tgid, names[tgid].c_str(), static_cast<long long>(vcpu),
                    rn.c_str(), reason, isa, static_cast<unsigned long long>(d.count),
                    static_cast<double>(d.count) / secs, pct, d.mean_ns() / 1e3,
                    d.quantile_ns(0.5) / 1e3, d.quantile_ns(0.99) / 1e3,
                    static_cast<double>(d.max_ns) / 1e3, static_cast<unsigned long long>(d.aux));
      } else {
        std::string vc = vcpu < 0 ? "all" : vcpu == 0xffffffff ? "?" : std::to_string(vcpu);
        std::printf("%3u %7u %-12.12s %4s %-22.22s %9llu %9.1f %6.2f %9.2f %9.2f %9.2f %9.2f %7llu\n",
                    vm, tgid, names[tgid].c_str(), vc.c_str(), rn.c_str(),
                    static_cast<unsigned long long>(d.count), static_cast<double>(d.count) / secs,
                    pct, d.mean_ns() / 1e3, d.quantile_ns(0.5) / 1e3, d.quantile_ns(0.99) / 1e3,
                    static_cast<double>(d.max_ns) / 1e3, static_cast<unsigned long long>(d.aux));
      }
      first = false;
    }
    std::printf(json ? "]}\n" : "\n");
    std::fflush(stdout);
  });
  return 0;
}

}  // namespace magnet::host
