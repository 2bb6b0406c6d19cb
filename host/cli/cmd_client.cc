// The daemon's clients over its query socket: magnet top, views, sessions,
// stats and mark.
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "magnet/admin/client.h"

namespace magnet::host {

static const char* kTopHelp =
    "Usage: magnet top [--socket PATH] [--interval T] [--count N] [--timeout T] [--json]\n"
    "\n"
    "Live per-VM table from the host daemon: vCPU run / wait (runnable, not\n"
    "running: the host side of steal) / halt as fractions of one CPU summed over\n"
    "the VM's vCPUs, KVM exits/s and EXIT% (time in exit handling other than\n"
    "halts, same unit), guest rx/tx Mbit/s on its taps, host queueing delay\n"
    "(mean, microseconds) guest -> wire (QTX) and wire -> guest (QRX), and\n"
    "packets dropped on its taps per second, LOST: its events lost since\n"
    "the daemon started (over its --vm-quota, or the ring buffer full), and W:\n"
    "its share of the host's power in watts over the last second, by its vCPUs'\n"
    "run time (docs/placement.md); '-' when the host has no power source (no\n"
    "RAPL and no 'magnet host --power-model'), and null in the JSON.\n"
    "\n"
    "      --socket PATH  the daemon's query socket (default /run/magnet/host.sock)\n"
    "  -i, --interval T   time between tables (default 1s)\n"
    "  -c, --count N      stop after N tables (default: at SIGINT/SIGTERM)\n"
    "      --timeout T    the longest one query to the daemon may take (connect,\n"
    "                     request, reply; default 5s); past it: exit 1\n"
    "      --json         the daemon's JSON, one line per interval (docs/cli.md\n"
    "                     lists its fields)\n"
    "\n" MAGNET_HELP_DURATIONS;

static const char* kViewsHelp =
    "Usage: magnet views [--vm NAME|UUID|ID] [--view NAME] [--socket PATH] [--rows N]\n"
    "                    [--timeout T] [--json]\n"
    "\n"
    "The host daemon's views.  With --vm, only that VM's per-VM view instances:\n"
    "exactly what is meant for that VM and nothing of any other.\n"
    "Prints each view instance's windows, value statistics and busiest groups\n"
    "(--rows N, default 5); --json prints the daemon's snapshots as they are.\n"
    "\n"
    "      --vm VM        only that VM's view instances (name, UUID or magnet id)\n"
    "      --view NAME    only the instances of that view (none: an error)\n"
    "      --socket PATH  the daemon's query socket (default /run/magnet/host.sock)\n"
    "  -n, --rows N       group rows shown per view instance (text output;\n"
    "                     default 5)\n"
    "      --timeout T    the longest one query to the daemon may take (connect,\n"
    "                     request, reply; default 5s); past it: exit 1\n"
    "      --json         the snapshots as JSON (docs/engine.md, \"Snapshot JSON\")\n"
    "\n" MAGNET_HELP_DURATIONS;

namespace {

// --timeout T: the bound of each query to the daemon (default 5s).
std::chrono::nanoseconds query_timeout(cli::args& a) {
  auto v = a.value("--timeout");
  return v ? std::chrono::nanoseconds(cli::need(cli::parse_duration_ns(*v), "--timeout"))
           : kQueryTimeout;
}

double num(const nlohmann::json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string window_name(const nlohmann::json& w) {
  char b[64];
  if (w.value("kind", "") == "count")
    std::snprintf(b, sizeof b, "last %.0f events", num(w, "length_events"));
  else
    std::snprintf(b, sizeof b, "last %.0f ms", num(w, "length_ns") / 1e6);
  return b;
}

// Text rendering of the daemon's view snapshots (docs/engine.md, "Snapshot
// JSON"): per instance, its windows, the value statistics and the busiest
// groups.  The snapshots' bandwidth_bps is in bytes per second.
void print_views(const nlohmann::json& snaps, size_t rows,
                 const std::map<int, std::string>& names) {
  for (const auto& v : snaps) {
    const int vm = v.value("vm", 0);
    std::string who = "vm " + std::to_string(vm);
    if (auto n = names.find(vm); n != names.end()) who = n->second + " (" + who + ")";
    std::printf("%s  %s  matched %.0f%s\n", v.value("view", "?").c_str(), who.c_str(),
                num(v, "matched"), num(v, "sample_every") > 1 ? "  (sampled)" : "");
    if (auto w = v.find("windows"); w != v.end() && !w->empty()) {
      std::printf("  %-18s %10s %14s %12s %12s\n", "WINDOW", "EVENTS", "BYTES", "EVENTS/S",
                  "MBIT/S");
      for (const auto& x : *w)
        std::printf("  %-18s %10.0f %14.0f %12.1f %12.3f\n", window_name(x).c_str(),
                    num(x, "events"), num(x, "bytes"), num(x, "rate_eps"),
                    num(x, "bandwidth_bps") * 8 / 1e6);
    }
    if (auto val = v.find("value"); val != v.end() && val->is_object() && num(*val, "count") > 0)
      std::printf("  %s: n %.0f  mean %.4g  p50 %.4g  p90 %.4g  p99 %.4g  max %.4g\n",
                  val->value("of", "value").c_str(), num(*val, "count"), num(*val, "mean"),
                  num(*val, "p50"), num(*val, "p90"), num(*val, "p99"), num(*val, "max"));
    if (auto gs = v.find("groups"); gs != v.end())
      for (const auto& g : *gs) {
        const auto& r = g.value("rows", nlohmann::json::array());
        if (r.empty()) continue;
        std::printf("  %-46s %10s %14s %12s\n", ("BY " + g.value("by", "?")).c_str(), "EVENTS",
                    "BYTES", "MBIT/S");
        for (size_t i = 0; i < r.size() && i < rows; ++i)
          std::printf("  %-46s %10.0f %14.0f %12.3f\n", r[i].value("label", "").c_str(),
                      num(r[i], "events"), num(r[i], "bytes"), num(r[i], "bandwidth_bps") * 8 / 1e6);
        if (r.size() > rows) std::printf("  (%zu more)\n", r.size() - rows);
      }
    std::printf("\n");
  }
}

}  // namespace

int cmd_views(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kViewsHelp, stdout);
    return 0;
  }
  auto vm = a.value("--vm");
  auto sock = a.value("--socket").value_or("/run/magnet/host.sock");
  auto nrows = a.value("--rows", "-n");
  auto view = a.value("--view");
  bool json = a.flag("--json");
  const auto timeout = query_timeout(a);
  a.finish(0, 0);
  uint64_t rows = nrows ? cli::need(cli::parse_count(*nrows), "--rows") : 5;
  auto r = query_daemon(sock, vm ? "views " + *vm : "views", timeout);
  if (!r.ok) {
    std::fprintf(stderr, "magnet views: %s\n", r.body.c_str());
    return 1;
  }
  if (json && !view) {
    std::printf("%s\n", r.body.c_str());
    return 0;
  }
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    std::fprintf(stderr, "magnet views: malformed reply from the daemon\n");
    return 1;
  }
  if (view) {
    auto all = std::move(j);
    j = nlohmann::json::array();
    for (auto& v : all)
      if (v.value("view", "") == *view) j.push_back(std::move(v));
    if (j.empty()) {
      std::set<std::string> names;
      for (const auto& v : all) names.insert(v.value("view", ""));
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      std::fprintf(stderr, "magnet views: no instance of a view named '%s' in the reply%s%s\n",
                   view->c_str(), list.empty() ? "" : " (views: ", list.empty() ? "" : (list + ")").c_str());
      return 1;
    }
  }
  if (json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  // VM names, from the daemon's registry (the snapshots carry ids).
  std::map<int, std::string> names;
  if (auto t = query_daemon(sock, "top", timeout); t.ok) {
    auto tj = nlohmann::json::parse(t.body, nullptr, false);
    if (!tj.is_discarded() && tj.contains("vms") && tj["vms"].is_array())
      for (const auto& x : tj["vms"])
        if (x.is_object()) names[x.value("vm", 0)] = x.value("name", "");
  }
  print_views(j, rows, names);
  return 0;
}

static const char* kSessionsHelp =
    "Usage: magnet sessions [--socket PATH] [--timeout T] [--json]\n"
    "\n"
    "The daemon's connections into VMs: per connection its VM, transport\n"
    "(vsock with the peer CID, virtio-serial), whether it said hello and\n"
    "subscribed, its period, frames and bytes sent, stats frames replaced\n"
    "before a slow reader took them, event records lost for it.\n"
    "\n"
    "      --socket PATH  the daemon's query socket (default /run/magnet/host.sock)\n"
    "      --timeout T    the longest one query to the daemon may take (connect,\n"
    "                     request, reply; default 5s); past it: exit 1\n"
    "      --json         the daemon's JSON reply\n"
    "\n" MAGNET_HELP_DURATIONS;

int cmd_sessions(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kSessionsHelp, stdout);
    return 0;
  }
  auto sock = a.value("--socket").value_or("/run/magnet/host.sock");
  bool json = a.flag("--json");
  const auto timeout = query_timeout(a);
  a.finish(0, 0);
  auto r = query_daemon(sock, "sessions", timeout);
  if (!r.ok) {
    std::fprintf(stderr, "magnet sessions: %s\n", r.body.c_str());
    return 1;
  }
  if (json) {
    std::printf("%s\n", r.body.c_str());
    return 0;
  }
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("sessions")) {
    std::fprintf(stderr, "magnet sessions: malformed reply from the daemon\n");
    return 1;
  }
  std::printf("vsock listener: %s\n", j.value("vsock", false) ? "on" : "off");
  std::printf("%-16s %-14s %6s %-9s %7s %10s %12s %9s %8s  %s\n", "VM", "TRANSPORT", "CID",
              "STATE", "PERIOD", "FRAMES", "BYTES", "REPLACED", "EV.LOST", "PEER");
  for (const auto& x : j["sessions"]) {
    const char* state = x.value("subscribed", false) ? "subscribed"
                        : x.value("hello", false)    ? "hello"
                                                     : "waiting";
    std::printf("%-16.16s %-14s %6u %-9s %5ums %10llu %12llu %9llu %8llu  %s\n",
                x.value("name", std::string("?")).c_str(),
                x.value("transport", std::string("?")).c_str(), x.value("cid", 0u), state,
                x.value("period_ms", 0u), x.value("frames", 0ull), x.value("bytes", 0ull),
                x.value("stats_replaced", 0ull), x.value("events_lost", 0ull),
                x.value("label", std::string()).c_str());
  }
  return 0;
}

static const char* kStatsHelp =
    "Usage: magnet stats VM [--socket PATH] [--timeout T] [--json]\n"
    "\n"
    "What the daemon delivers into VM (by name, UUID or magnet id), as the\n"
    "guest receives it: each stat by name with its index, value, validity\n"
    "and window, from the daemon's last 100 ms tick (JSON).  Not to be\n"
    "confused with 'magnet stat', the capture core's per-layer counts.\n"
    "\n"
    "      --socket PATH  the daemon's query socket (default /run/magnet/host.sock)\n"
    "      --timeout T    the longest one query to the daemon may take (connect,\n"
    "                     request, reply; default 5s); past it: exit 1\n"
    "      --json         accepted (JSON is the only output)\n"
    "\n" MAGNET_HELP_DURATIONS;

int cmd_stats(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kStatsHelp, stdout);
    return 0;
  }
  auto sock = a.value("--socket").value_or("/run/magnet/host.sock");
  a.flag("--json");  // JSON is the only output; accepted for symmetry
  const auto timeout = query_timeout(a);
  auto pos = a.finish(1, 1, "VM");
  auto r = query_daemon(sock, "stats " + pos[0], timeout);
  if (!r.ok) {
    std::fprintf(stderr, "magnet stats: %s\n", r.body.c_str());
    return 1;
  }
  if (!nlohmann::json::accept(r.body)) {
    std::fprintf(stderr, "magnet stats: malformed reply from the daemon\n");
    return 1;
  }
  std::printf("%s\n", r.body.c_str());
  return 0;
}

static const char* kMarkHelp =
    "Usage: magnet mark VM VALUE [--socket PATH] [--timeout T]\n"
    "\n"
    "Sets host.marker of a VM (by name, UUID or magnet id): the daemon pushes\n"
    "it at once to the VM's on-change subscribers.  A latency probe: a guest\n"
    "application that echoes it shows the delivery time (bench/deliver).\n"
    "Root only.\n"
    "\n"
    "      --socket PATH  the daemon's query socket (default /run/magnet/host.sock)\n"
    "      --timeout T    the longest one query to the daemon may take (connect,\n"
    "                     request, reply; default 5s); past it: exit 1\n"
    "\n" MAGNET_HELP_DURATIONS;

int cmd_mark(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kMarkHelp, stdout);
    return 0;
  }
  auto sock = a.value("--socket").value_or("/run/magnet/host.sock");
  const auto timeout = query_timeout(a);
  auto pos = a.finish(2, 2, "VM and VALUE");
  auto r = query_daemon(sock, "mark " + pos[0] + " " + pos[1], timeout);
  if (!r.ok) {
    std::fprintf(stderr, "magnet mark: %s\n", r.body.c_str());
    return 1;
  }
  return 0;
}

namespace {

// top's W: the VM's power_watts, '-' when null or absent (no power source);
// any other type is a reply of the wrong shape (a json exception).
std::string watts_cell(const nlohmann::json& vm) {
  auto it = vm.find("power_watts");
  if (it == vm.end() || it->is_null()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", it->get<double>());
  return b;
}

}  // namespace

int cmd_top(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kTopHelp, stdout);
    return 0;
  }
  auto sock = a.value("--socket").value_or("/run/magnet/host.sock");
  auto iv = a.value("--interval", "-i");
  auto cnt = a.value("--count", "-c");
  bool json = a.flag("--json");
  const auto timeout = query_timeout(a);
  a.finish(0, 0);
  uint64_t interval = iv ? cli::need(cli::parse_duration_ns(*iv), "--interval") : 1'000'000'000ull;
  uint64_t count = cnt ? cli::need(cli::parse_count(*cnt), "--count") : 0;
  install_stop_handlers();
  for (uint64_t n = 0; !stop_requested() && (!count || n < count); ++n) {
    if (n) ::poll(nullptr, 0, static_cast<int>(interval / 1'000'000));
    auto r = query_daemon(sock, "top", timeout);
    if (!r.ok) {
      std::fprintf(stderr, "magnet top: %s\n", r.body.c_str());
      return 1;
    }
    if (json) {
      std::printf("%s\n", r.body.c_str());
    } else {
      // One row per VM.
      auto j = nlohmann::json::parse(r.body, nullptr, false);
      if (j.is_discarded() || !j.contains("vms")) {
        std::fprintf(stderr, "magnet top: malformed reply from the daemon\n");
        return 1;
      }
      std::printf("%-4s %-16s %5s %7s %7s %7s %9s %7s %9s %9s %9s %9s %8s %10s %7s\n", "VM", "NAME",
                  "VCPUS", "RUN", "WAIT", "HALT", "EXITS/S", "EXIT%", "RX MBIT/S", "TX MBIT/S",
                  "QTX US", "QRX US", "DROPS/S", "LOST", "W");
      for (const auto& v : j["vms"])
        std::printf("%-4u %-16.16s %5d %6.1f%% %6.1f%% %6.1f%% %9.0f %6.2f%% %9.3f %9.3f %9.1f %9.1f "
                    "%8.1f %10llu %7s\n",
                    v.value("vm", 0u), v.value("name", std::string("?")).c_str(),
                    v.value("vcpus", 0), v.value("vcpu_run", 0.0) * 100,
                    v.value("vcpu_wait", 0.0) * 100, v.value("vcpu_halt", 0.0) * 100,
                    v.value("exits_per_s", 0.0), v.value("exit_time", 0.0) * 100,
                    v.value("rx_mbps", 0.0), v.value("tx_mbps", 0.0),
                    v.value("queue_tx_us", 0.0), v.value("queue_rx_us", 0.0),
                    v.value("drops_per_s", 0.0),
                    static_cast<unsigned long long>(v.value("lost_quota", 0ull) +
                                                    v.value("lost_ring", 0ull)),
                    watts_cell(v).c_str());
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace magnet::host
