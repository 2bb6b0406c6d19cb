#include <poll.h>

#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "magnet/capture/capture.h"
#include "commands.h"
#include "vm_follow.h"
#include "magnet/events.h"
#include "magnet/trace_file.h"

namespace magnet::host {

static const char* kStatHelp =
    "Usage: magnet stat [--probes LIST] [--vm NAME]... [--uri URI] [--interval T] [--count N]\n"
    "                   [--duration T] [--json]\n"
    "\n"
    "Live per-layer event and byte counts from the in-kernel aggregation: no\n"
    "event is copied to user space.  One table (or JSON line) per interval,\n"
    "one row per probe and VM (vm 0 = host, or every event without --vm or\n"
    "--uri: nothing is tagged then).\n"
    "\n"
    "  -p, --probes LIST   probes or dotted prefixes (default: net)\n"
    MAGNET_HELP_VM_SELECT
    "  -i, --interval T    reporting interval (default 1s)\n"
    "  -c, --count N       stop after N intervals\n"
    "  -d, --duration T    stop after T\n"
    "      --json          JSON Lines output (a row of a VM the registry named\n"
    "                      has its vm_name)\n"
    "\n" MAGNET_HELP_DURATIONS;

void every_interval(uint64_t iv, uint64_t max_n, uint64_t dur_ns,
                    const std::function<void(double, double)>& report) {
  install_stop_handlers();
  const uint64_t t0 = monotonic_ns();
  uint64_t last = t0;
  for (uint64_t n = 0; !stop_requested();) {
    uint64_t next = last + iv;
    if (dur_ns) next = std::min(next, t0 + dur_ns);
    while (!stop_requested()) {
      uint64_t now = monotonic_ns();
      if (now >= next) break;
      ::poll(nullptr, 0, static_cast<int>(std::min<uint64_t>((next - now) / 1'000'000 + 1, 200)));
    }
    uint64_t now = monotonic_ns();
    double secs = static_cast<double>(now - last) / 1e9;
    last = now;
    report(static_cast<double>(now - t0) / 1e9, secs);
    ++n;
    if ((max_n && n >= max_n) || (dur_ns && now - t0 >= dur_ns)) break;
  }
}

int cmd_stat(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kStatHelp, stdout);
    return 0;
  }
  auto probes = a.value("--probes", "-p");
  auto interval = a.value("--interval", "-i");
  auto count = a.value("--count", "-c");
  auto dur = a.value("--duration", "-d");
  bool json = a.flag("--json");
  const vm_select sel = parse_vm_select(a);
  a.finish(0, 0);
  auto types = cli::need(select_events(probes.value_or("net")), "--probes");
  uint64_t iv = interval ? cli::need(cli::parse_duration_ns(*interval), "--interval")
                         : 1'000'000'000ull;
  uint64_t max_n = count ? cli::need(cli::parse_count(*count), "--count") : 0;
  uint64_t dur_ns = dur ? cli::need(cli::parse_duration_ns(*dur), "--duration") : 0;

  capture_options co;
  co.probes = types;
  co.ring_bytes = 4096;  // aggregation only: the ring stays empty
  auto cap = capture::open(co);
  if (!cap) {
    std::fprintf(stderr, "magnet stat: %s\n", cap.err().message.c_str());
    return 1;
  }
  std::unique_ptr<vm_follower> vms;
  std::map<uint32_t, std::string> names;
  if (sel.on()) {
    auto f = vm_follower::start(**cap, sel);
    if (!f) {
      std::fprintf(stderr, "magnet stat: %s\n", f.err().message.c_str());
      return 1;
    }
    vms = std::move(*f);
    if (!vms->selected().empty())
      if (auto s = (*cap)->set_filter_sets(MAGNET_FK_VM, {}, {}, {}, vms->selected(), {}); !s) {
        std::fprintf(stderr, "magnet stat: %s\n", s.err().message.c_str());
        return 1;
      }
    std::fprintf(stderr, "magnet: VMs of %s: %s\n", sel.uri.c_str(), vms->describe().c_str());
  }
  std::set<uint16_t> on;
  for (uint16_t t : types) {
    const probe_plan* p = (*cap)->plan_for(t);
    if (p && p->chosen < 0 && types.size() > 1) {
      std::fprintf(stderr, "magnet: warning: skipping %s: cannot attach here\n",
                   event_name(t).c_str());
      continue;
    }
    if (auto s = (*cap)->set_mode(t, MAGNET_MODE_AGGREGATE); !s) {
      std::fprintf(stderr, "magnet stat: %s\n", s.err().message.c_str());
      return 1;
    }
    on.insert(t);
  }
  std::map<std::pair<uint16_t, uint32_t>, magnet_agg> prev;
  every_interval(iv, max_n, dur_ns, [&](double elapsed, double secs) {
    (*cap)->rescan_netns();
    if (vms)
      for (const auto& [name, id] : vms->ids()) names[id] = name;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    if (!json)
      std::printf("%-18s %-10s %4s %12s %12s %14s %10s\n", "PROBE", "LAYER", "VM", "EVENTS",
                  "EVENTS/S", "BYTES", "MBIT/S");
    for (uint16_t t : on) {
      const probe_spec* spec = find_probe(t);
      auto agg = (*cap)->aggregate(spec->slot);
      if (agg.empty()) agg[0] = {};
      for (const auto& [vm, cur] : agg) {
        auto& p = prev[{t, vm}];
        double ev_s = static_cast<double>(cur.events - p.events) / secs;
        double mbit = static_cast<double>(cur.bytes - p.bytes) * 8 / secs / 1e6;
        if (json) {
          nlohmann::ordered_json row = {{"probe", event_name(t)}, {"layer", spec->layer}, {"vm", vm}};
          if (auto n = names.find(vm); n != names.end()) row["vm_name"] = n->second;
          row.update({{"events", cur.events}, {"bytes", cur.bytes}, {"events_per_s", ev_s},
                      {"mbit_per_s", mbit}});
          rows.push_back(std::move(row));
        } else
          std::printf("%-18s %-10s %4u %12llu %12.1f %14llu %10.3f\n", event_name(t).c_str(),
                      spec->layer, vm, static_cast<unsigned long long>(cur.events), ev_s,
                      static_cast<unsigned long long>(cur.bytes), mbit);
        p = cur;
      }
    }
    if (json)
      std::printf("%s\n", nlohmann::ordered_json{{"elapsed_s", elapsed}, {"interval_s", secs},
                                                 {"rows", std::move(rows)}}.dump().c_str());
    else
      std::printf("\n");
    std::fflush(stdout);
  });
  return 0;
}

}  // namespace magnet::host
