// magnet-agent: run the guest agent, or print this VM's own view.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "magnet/agent/agent.h"
#include "magnet/cli.h"
#include "magnet/capture/latency.h"
#include "magnet/log.h"
#include "magnet/client.hpp"
#include "magnet/view_codec.h"

namespace {

using namespace magnet;

const char* kHelp =
    "Usage: magnet-agent [run] [options]     the guest agent (foreground)\n"
    "       magnet-agent view [--json] [--socket PATH] [--wait T]\n"
    "\n"
    "run: keeps a session with the host daemon (vsock CID 2, else the\n"
    "virtio-serial port org.magnet.view.0), runs guest-side probes, and serves\n"
    "this VM's own view to local applications (libmagnet-client).\n"
    "      --socket PATH    local socket (default /run/magnet/agent.sock)\n"
    "      --group GRP      group that may use it (default: root only)\n"
    "      --host MODE      auto (vsock when this VM has a vsock device, else\n"
    "                       virtio-serial), vsock, serial, none\n"
    "      --vsock-port N   the host's port (default 5300)\n"
    "      --channel NAME   virtio-serial port name (default org.magnet.view.0)\n"
    "      --period T       how often the host sends the view, 20ms to 60s\n"
    "                       (default 100ms; T needs its unit here)\n"
    "      --no-probes      no guest-side probes\n"
    "      --no-journey     do not follow packets from guest socket to host wire\n"
    "  -d, --duration T     stop after T\n"
    "  -v, --verbose        more log (-vv, -vvv: more still; anywhere on the\n"
    "                       command line, as magnet's)\n"
    "\n"
    "view: prints this VM's view once: what the host measures for it, and what\n"
    "the agent measures in it, each value with its window and age.\n"
    "      --json           one JSON object (docs/guest.md describes its fields)\n"
    "      --socket PATH    the agent's socket (default /run/magnet/agent.sock)\n"
    "      --wait T         how long to wait for the agent (default 5s)\n"
    "\n"
    "      --version        the version\n"
    "  -h, --help           this text\n"
    "\n" MAGNET_HELP_DURATIONS;

// "20.05 Mbit/s", "37.2 us", "45.0 %".
std::string human(double v, std::string_view unit) {
  char b[64];
  if (unit == "bit/s") {
    if (std::fabs(v) >= 1e9) std::snprintf(b, sizeof b, "%.3f Gbit/s", v / 1e9);
    else if (std::fabs(v) >= 1e6) std::snprintf(b, sizeof b, "%.3f Mbit/s", v / 1e6);
    else std::snprintf(b, sizeof b, "%.1f kbit/s", v / 1e3);
  } else if (unit == "cpu") {
    std::snprintf(b, sizeof b, "%.1f %% of a CPU", v * 100);
  } else if (unit == "byte/s") {
    std::snprintf(b, sizeof b, "%.1f KiB/s", v / 1024);
  } else {
    std::snprintf(b, sizeof b, "%.6g %.*s", v, static_cast<int>(unit.size()), unit.data());
  }
  return b;
}

std::string label(const magnet_value& v) {
  std::string n = v.name ? v.name : "stat " + std::to_string(v.id);
  if (v.id == MAGNET_STAT_KVM_REASON_EXITS || v.id == MAGNET_STAT_KVM_REASON_TIME ||
      v.id == MAGNET_STAT_KVM_REASON_MEAN) {
    std::string r = v.index == MAGNET_VIEW_REASON_HALT_POLLED  ? "halt(polled)"
                    : v.index == MAGNET_VIEW_REASON_HALT_SLEPT ? "halt(slept)"
                    : kvm_exit_reason_name(v.index >> 24, v.index & 0xffffff);
    return n + "[" + r + "]";
  }
  if (v.id >= MAGNET_STAT_VCPU_RUN && v.id <= MAGNET_STAT_VCPU_HALT)
    return n + "[vcpu " + std::to_string(v.index) + "]";
  if (v.id >= MAGNET_STAT_JOURNEY_SOCK_DEV && v.id <= MAGNET_STAT_JOURNEY_TAP_WIRE)
    return n + "[p" + std::to_string(v.index) + "]";
  return n;
}

int view_cmd(cli::args& a) {
  const bool json = a.flag("--json");
  std::string sock = a.value("--socket").value_or(MAGNET_VIEW_AGENT_SOCKET);
  uint64_t wait_ns = 5'000'000'000;
  if (auto w = a.value("--wait")) wait_ns = cli::need(cli::parse_duration_ns(*w), "--wait");
  a.finish(0, 0);
  client c(sock);
  if (!c.subscribe({}, 100)) {
    std::fprintf(stderr, "magnet-agent view: %s\n", c.error().c_str());
    return 1;
  }
  std::map<std::pair<uint16_t, uint32_t>, magnet_value> vals;
  c.on_value([&](const magnet_value& v) { vals[{v.id, v.index}] = v; });
  // One whole frame: every stat the agent has (a poll returns after one).
  int64_t left = static_cast<int64_t>(wait_ns / 1'000'000);
  while (vals.empty() && left > 0) {
    (void)c.poll(static_cast<int>(std::min<int64_t>(left, 200)));
    left -= 200;
  }
  if (vals.empty()) {
    std::fprintf(stderr, "magnet-agent view: no view from the agent at %s: %s\n", sock.c_str(),
                 c.error().empty() ? "nothing arrived" : c.error().c_str());
    return 1;
  }
  const auto conn = vals.find({MAGNET_STAT_HOST_LINK, 0});
  const int link = conn != vals.end() ? static_cast<int>(conn->second.value) : 0;
  const char* transport = link == 1 ? "vsock" : link == 2 ? "virtio-serial" : "none";
  if (json) {
    nlohmann::ordered_json j;
    char sid[24];
    std::snprintf(sid, sizeof sid, "%016llx", static_cast<unsigned long long>(c.session()));
    j["session"] = c.session() ? sid : "";
    j["host_connected"] = link != 0;
    j["transport"] = transport;
    auto arr = nlohmann::ordered_json::array();
    for (const auto& [k, v] : vals)
      arr.push_back({{"name", v.name ? v.name : std::to_string(v.id)},
                     {"id", v.id},
                     {"index", v.index},
                     {"source", v.id < 0x800 ? "host" : "guest"},
                     {"value", v.value},
                     {"unit", v.unit},
                     {"valid", v.valid != 0},
                     {"window_s", static_cast<double>(v.window_ns) / 1e9},
                     {"age_s", static_cast<double>(v.age_ns) / 1e9}});
    j["values"] = arr;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("this VM's view: host session %016llx, host %s\n",
              static_cast<unsigned long long>(c.session()),
              link ? (std::string("connected over ") + transport).c_str() : "not connected");
  for (int part = 0; part < 2; ++part) {
    std::printf("%s\n", part == 0 ? "HOST: what the host measures for this VM"
                                  : "GUEST: what the agent measures in this VM");
    for (const auto& [k, v] : vals) {
      if ((v.id < 0x800) != (part == 0)) continue;
      char win[32] = "";
      if (v.window_ns) std::snprintf(win, sizeof win, "over %.1f s", v.window_ns / 1e9);
      std::printf("  %-36s %-24s %-12s age %.0f ms\n", label(v).c_str(),
                  v.valid ? human(v.value, v.unit).c_str() : "-", win, v.age_ns / 1e6);
    }
  }
  return 0;
}

int run_cmd(cli::args& a) {
  guest::agent_options o;
  if (auto v = a.value("--socket")) o.socket = *v;
  if (auto v = a.value("--group")) o.group = *v;
  if (auto v = a.value("--host")) {
    using m = guest::agent_options::host_mode;
    if (*v == "auto") o.host = m::automatic;
    else if (*v == "vsock") o.host = m::vsock;
    else if (*v == "serial") o.host = m::serial;
    else if (*v == "none") o.host = m::none;
    else throw cli::usage_error("--host: '" + *v + "' is not auto, vsock, serial or none");
  }
  if (auto v = a.value("--vsock-port")) o.vsock_port = static_cast<uint32_t>(cli::need(cli::parse_count(*v), "--vsock-port"));
  if (auto v = a.value("--channel")) o.channel = *v;
  if (auto v = a.value("--period")) {
    // It took milliseconds before: a bare number is refused, not read as seconds.
    const uint64_t ns = cli::need(cli::parse_duration_ns(*v, cli::bare_number::refused), "--period");
    const uint64_t p = ns / 1'000'000;
    if (ns % 1'000'000 || p < MAGNET_VIEW_MIN_PERIOD_MS || p > MAGNET_VIEW_MAX_PERIOD_MS)
      throw cli::usage_error("--period: '" + *v + "' is not a whole number of milliseconds from " +
                             std::to_string(MAGNET_VIEW_MIN_PERIOD_MS) + "ms to " +
                             std::to_string(MAGNET_VIEW_MAX_PERIOD_MS / 1000) + "s");
    o.period_ms = static_cast<uint32_t>(p);
  }
  if (a.flag("--no-probes")) o.probes = false;
  if (a.flag("--no-journey")) o.journey = false;
  if (auto v = a.value("--duration", "-d")) o.duration_ns = cli::need(cli::parse_duration_ns(*v), "--duration");
  a.finish(0, 0);
  if (!o.probes) o.journey = false;
  return guest::run_agent(o);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> v(argv + 1, argv + argc);
  set_log_verbosity(cli::take_verbosity(v));
  std::string cmd = "run";
  if (!v.empty() && (v[0] == "run" || v[0] == "view")) {
    cmd = v[0];
    v.erase(v.begin());
  }
  try {
    cli::args a(cmd, v);
    if (a.flag("--help", "-h")) {
      std::fputs(kHelp, stdout);
      return 0;
    }
    if (a.flag("--version")) {
      std::printf("magnet-agent %s\n", MAGNET_AGENT_VERSION);
      return 0;
    }
    return cmd == "view" ? view_cmd(a) : run_cmd(a);
  } catch (const cli::usage_error& e) {
    std::fprintf(stderr, "magnet-agent %s: %s (see magnet-agent --help)\n", cmd.c_str(), e.what());
    return 2;
  } catch (const magnet::fatal& e) {
    std::fprintf(stderr, "magnet-agent: %s\n", e.what());
    return 1;
  }
}
