// magnet: one binary, bpftool/virsh-style subcommands.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "magnet/log.h"
#include "magnet/version.h"

namespace {

const char* kHelp =
    "Usage: magnet [-v...] COMMAND [options]   (magnet COMMAND --help for details)\n"
    "\n"
    "Commands:\n"
    "  probes   list probes and how each attaches on this kernel\n"
    "  record   record events into a trace file\n"
    "  dump     print a trace file as text, CSV, JSON, NetLogger ULM or a\n"
    "           Perfetto trace\n"
    "  stat     live per-layer counts from in-kernel aggregation\n"
    "  kvm      KVM exits and exit->entry time per reason, per VM\n"
    "  host     the host daemon: VM registry, probes, per-VM views\n"
    "  top      live per-VM table from the host daemon\n"
    "  views    the host daemon's views, per VM\n"
    "  sessions the daemon's connections into VMs (their views' delivery)\n"
    "  mark     set a VM's host.marker (delivery latency probes)\n"
    "  stats    what the daemon delivers into one VM (JSON)\n"
    "  place    a power-aware placement plan for a fleet, from its Prometheus\n"
    "           and libvirt; --apply performs it by live migration\n"
    "  fleet-config  a prometheus.yml for the fleet's Prometheus: each host's\n"
    "           daemon, labelled with the host's name\n"
    "  reconstruct  application message sequences from the TCP segments of a\n"
    "           pcap file or a trace\n"
    "\n"
    "Global options, before or after COMMAND:\n"
    "  -v, --verbose   more log: -v info and libbpf's warnings (the verifier\n"
    "                  log), -vv debug, -vvv libbpf's debug output too (-v -v\n"
    "                  is -vv)\n"
    "      --version   the version\n"
    "  -h, --help      this text\n"
    "\n"
    "Durations, in every command (and the guest tools): a number and a unit\n"
    "(ns, us, ms, s, min), e.g. 500ms, 2.5s, 1min; a bare number is seconds.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace magnet;
  std::vector<std::string> args(argv + 1, argv + argc);
  const int verbosity = cli::take_verbosity(args);
  if (!args.empty() && args[0].size() > 1 && args[0][0] == '-') {
    const auto& a = args[0];
    if (a == "--help" || a == "-h") {
      std::fputs(kHelp, stdout);
      return 0;
    }
    if (a == "--version") {
      std::printf("magnet %s\n", kVersion);
      return 0;
    }
    std::fprintf(stderr, "magnet: unknown option '%s'\nTry 'magnet --help'.\n", a.c_str());
    return 2;
  }
  if (args.empty()) {
    std::fputs(kHelp, stderr);
    return 2;
  }
  set_log_verbosity(verbosity);
  std::string cmd = args[0];
  cli::args rest(cmd, std::vector<std::string>(args.begin() + 1, args.end()));
  try {
    if (cmd == "probes") return host::cmd_probes(rest);
    if (cmd == "record") return host::cmd_record(rest);
    if (cmd == "dump") return host::cmd_dump(rest);
    if (cmd == "stat") return host::cmd_stat(rest);
    if (cmd == "kvm") return host::cmd_kvm(rest);
    if (cmd == "host") return host::cmd_host(rest);
    if (cmd == "top") return host::cmd_top(rest);
    if (cmd == "views") return host::cmd_views(rest);
    if (cmd == "sessions") return host::cmd_sessions(rest);
    if (cmd == "mark") return host::cmd_mark(rest);
    if (cmd == "stats") return host::cmd_stats(rest);
    if (cmd == "place") return host::cmd_place(rest);
    if (cmd == "fleet-config") return host::cmd_fleet_config(rest);
    if (cmd == "reconstruct") return host::cmd_reconstruct(rest);
    std::fprintf(stderr, "magnet: unknown command '%s'\nTry 'magnet --help'.\n", cmd.c_str());
    return 2;
  } catch (const cli::usage_error& e) {
    std::fprintf(stderr, "magnet %s: %s\nTry 'magnet %s --help'.\n", cmd.c_str(), e.what(),
                 cmd.c_str());
    return 2;
  } catch (const fatal& e) {
    std::fprintf(stderr, "magnet %s: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const nlohmann::json::exception& e) {
    // A reply of the daemon (or a file) that is JSON of another shape.
    std::fprintf(stderr, "magnet %s: unexpected JSON: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "magnet %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
