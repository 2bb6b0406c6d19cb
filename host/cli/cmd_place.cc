// magnet place: a power-aware placement plan for a fleet, from its
// Prometheus and each host's libvirt (host/fleet), made by the planners
// (host/place); printed, and with --apply performed by live migration.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "magnet/fleet/apply.h"
#include "magnet/fleet/assemble.h"
#include "magnet/fleet/libvirt.h"
#include "magnet/fleet/prometheus.h"
#include "magnet/fleet/report.h"
#include "magnet/place/planner.h"
#include "magnet/power/model.h"

namespace magnet::host {

static const char* kPlaceHelp =
    "Usage: magnet place --prometheus URL --host NAME=URI... [options]\n"
    "\n"
    "A power-aware placement plan for a fleet of hosts (docs/placement.md):\n"
    "which VMs move where, which hosts empty, the watts saved, the CPU, memory\n"
    "and link headroom left on each host, and the SLA risk.  Each VM's demand\n"
    "over --window (vCPU run time, traffic at its taps) and each host's power\n"
    "come from the fleet's Prometheus, which scrapes every host's 'magnet host\n"
    "--http' (magnet fleet-config writes its configuration); which VM runs\n"
    "where, its memory and vCPUs, whether it can move, and each host's CPUs and\n"
    "memory come from the hosts' libvirt.  With --apply the plan is performed\n"
    "by live migration, and rolled back if a step fails.\n"
    "\n"
    "      --prometheus URL   the fleet's Prometheus: http://HOST:PORT[/PREFIX]\n"
    "      --host NAME=URI    a host: NAME is its Prometheus instance label (as\n"
    "                         magnet fleet-config sets it), URI its libvirt\n"
    "                         (e.g. qemu+ssh://host-1/system); repeat for each\n"
    "                         host.  With --apply, URI is also the destination\n"
    "                         the source host's libvirtd migrates to\n"
    "      --host-label NAME=INSTANCE\n"
    "                         host NAME's instance label in Prometheus, when it is\n"
    "                         not NAME (e.g. the target's address)\n"
    "      --window T         the demand's window (default 10min; at least 10s):\n"
    "                         mean vCPU run time and traffic, and the peak CPU\n"
    "                         (the p95 of the rate over a tenth of the window)\n"
    "      --power-model [NAME=]FILE\n"
    "                         a host's power model (magnet host --power-model's\n"
    "                         format), or every host's without NAME=; each host\n"
    "                         needs one: it predicts the watts of a new load\n"
    "      --link-bps [NAME=]RATE\n"
    "                         the capacity of a host's link (every host's\n"
    "                         without NAME=), e.g. 10gbit; default: not checked\n"
    "      --algorithm NAME   magnet (default), first-fit, round-robin, pabfd,\n"
    "                         watcher\n"
    "      --cpu-upper F      a target's CPU use with the VMs' mean demand at most\n"
    "                         this fraction of its CPUs (default 0.8)\n"
    "      --peak-upper F     ... with their peaks (default 1.0)\n"
    "      --mem-upper F      its memory use at most this fraction (default 0.95)\n"
    "      --link-upper F     its link use at most this fraction (default 0.9)\n"
    "      --max-moves N      at most N moves (default: no limit)\n"
    "      --query-timeout T  the longest one Prometheus query may take (default\n"
    "                         30s)\n"
    "      --json             the plan as JSON (docs/cli.md has its schema)\n"
    "      --apply            perform the plan: live, peer-to-peer migrations in\n"
    "                         order, their progress on stderr; a failed step\n"
    "                         migrates back what this run moved, newest first\n"
    "      --timeout T        the longest one migration may take (default 10min);\n"
    "                         past it, it is aborted and the plan rolled back\n"
    "\n"
    "Exit status: 0 the plan printed (and, with --apply, performed), 1 a\n"
    "failure (Prometheus or a host unreachable, a host missing from Prometheus,\n"
    "a failed migration: named on stderr), 2 a usage error.\n"
    "\n" MAGNET_HELP_DURATIONS;

namespace {

struct place_args {
  std::string prometheus;
  std::vector<fleet::host_input> hosts;  // facts not yet read
  uint64_t window_ms = 600'000;
  place::algorithm algo = place::algorithm::magnet;
  place::plan_options opts;
  std::chrono::milliseconds query_timeout{30'000};
  std::chrono::milliseconds migration_timeout{600'000};
  bool json = false, apply = false;
};

std::chrono::milliseconds millis(const std::optional<std::string>& v, const char* option, uint64_t dflt_ms) {
  return std::chrono::milliseconds(v ? cli::need(cli::parse_duration_ns(*v), option) / 1'000'000 : dflt_ms);
}

// A fraction in (0, 1].
double fraction(const std::optional<std::string>& v, const char* option, double dflt) {
  if (!v) return dflt;
  char* end = nullptr;
  const double f = std::strtod(v->c_str(), &end);
  if (v->empty() || *end || !(f > 0 && f <= 1))
    throw cli::usage_error(std::string(option) + ": '" + *v + "' is not a fraction in (0, 1]");
  return f;
}

// "NAME=VALUE" where NAME is a --host's; anything else is a VALUE for every
// host (a file name may hold '=').
std::pair<std::string, std::string> split_named(const std::string& s, const std::set<std::string>& hosts) {
  const size_t eq = s.find('=');
  if (eq != std::string::npos && hosts.count(s.substr(0, eq))) return {s.substr(0, eq), s.substr(eq + 1)};
  return {"", s};
}

// --host NAME=URI (repeated) and --host-label NAME=INSTANCE.
std::vector<fleet::host_input> parse_hosts(cli::args& a) {
  std::vector<fleet::host_input> hosts;
  std::set<std::string> names;
  for (const auto& h : a.values("--host")) {
    const size_t eq = h.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == h.size())
      throw cli::usage_error("--host: '" + h + "' is not NAME=URI (e.g. host-1=qemu+ssh://host-1/system)");
    fleet::host_input in;
    in.name = in.instance = h.substr(0, eq);
    in.uri = h.substr(eq + 1);
    if (!names.insert(in.name).second) throw cli::usage_error("--host: " + in.name + " is given twice");
    hosts.push_back(std::move(in));
  }
  if (hosts.empty()) throw cli::usage_error("no --host NAME=URI: name each host of the fleet");
  for (const auto& l : a.values("--host-label")) {
    const size_t eq = l.find('=');
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](auto& h) { return h.name == l.substr(0, eq); });
    if (eq == std::string::npos || eq + 1 == l.size() || it == hosts.end())
      throw cli::usage_error("--host-label: '" + l + "' is not NAME=INSTANCE for a NAME given with --host");
    it->instance = l.substr(eq + 1);
  }
  return hosts;
}

// --power-model and --link-bps, per host or for all; every host needs a model.
void parse_capacities(cli::args& a, std::vector<fleet::host_input>& hosts) {
  std::set<std::string> names;
  for (const auto& h : hosts) names.insert(h.name);
  std::map<std::string, power::power_model> models;
  for (const auto& v : a.values("--power-model")) {
    auto [name, file] = split_named(v, names);
    auto m = power::load_power_model(file);
    if (!m) throw cli::usage_error("--power-model: " + m.err().message);
    models[name] = std::move(m).value();
  }
  std::map<std::string, double> links;
  for (const auto& v : a.values("--link-bps")) {
    auto [name, rate] = split_named(v, names);
    links[name] = cli::need(cli::parse_rate_bps(rate), "--link-bps");
  }
  for (auto& h : hosts) {
    auto m = models.count(h.name) ? models.find(h.name) : models.find("");
    if (m == models.end())
      throw cli::usage_error("host " + h.name + " has no power model: --power-model " + h.name +
                             "=FILE, or --power-model FILE for every host");
    h.model = m->second;
    auto l = links.count(h.name) ? links.find(h.name) : links.find("");
    if (l != links.end()) h.link_bps = l->second;
  }
}

place_args parse_place_args(cli::args& a) {
  place_args p;
  auto prom = a.value("--prometheus");
  p.hosts = parse_hosts(a);
  parse_capacities(a, p.hosts);
  const auto window = millis(a.value("--window"), "--window", p.window_ms);
  if (auto v = a.value("--algorithm")) {
    auto al = place::parse_algorithm(*v);
    if (!al) throw cli::usage_error("--algorithm: " + al.err().message);
    p.algo = *al;
  }
  p.opts.cpu_upper = fraction(a.value("--cpu-upper"), "--cpu-upper", p.opts.cpu_upper);
  p.opts.peak_upper = fraction(a.value("--peak-upper"), "--peak-upper", p.opts.peak_upper);
  p.opts.mem_upper = fraction(a.value("--mem-upper"), "--mem-upper", p.opts.mem_upper);
  p.opts.link_upper = fraction(a.value("--link-upper"), "--link-upper", p.opts.link_upper);
  p.opts.peak_quantile = fleet::kPeakQuantile;
  if (auto v = a.value("--max-moves"); v && *v != "0")
    p.opts.max_moves = static_cast<int>(std::min<uint64_t>(cli::need(cli::parse_count(*v), "--max-moves"), 1 << 30));
  p.query_timeout = millis(a.value("--query-timeout"), "--query-timeout", 30'000);
  p.migration_timeout = millis(a.value("--timeout"), "--timeout", 600'000);
  p.json = a.flag("--json");
  p.apply = a.flag("--apply");
  a.finish(0, 0);
  if (!prom) throw cli::usage_error("no --prometheus URL: the fleet's Prometheus (http://HOST:PORT)");
  auto u = fleet::parse_prometheus_url(*prom);
  if (!u) throw cli::usage_error("--prometheus: " + u.err().message);
  p.prometheus = *prom;
  if (window.count() < 10'000) throw cli::usage_error("--window: at least 10s (the peak is a rate over a tenth of it)");
  p.window_ms = static_cast<uint64_t>(window.count());
  if (p.query_timeout.count() < 1 || p.migration_timeout.count() < 1)
    throw cli::usage_error("--query-timeout and --timeout: at least 1ms");
  return p;
}

// The fleet: Prometheus first (is it there at all?), then each host's
// libvirt, then the two together.
fleet::assembled read_fleet(place_args& p) {
  fleet::prometheus_client prom(fleet::parse_prometheus_url(p.prometheus).value(), p.query_timeout);
  auto in = fleet::gather(prom.as_query_fn(), fleet::make_queries(p.window_ms));
  if (!in) throw fatal(in.err().message);
  for (auto& h : p.hosts) {
    auto f = fleet::read_host_facts(h.uri);
    if (!f) throw fatal("host " + h.name + ": " + f.err().message);
    h.facts = std::move(f).value();
  }
  auto a = fleet::assemble_fleet(p.hosts, *in);
  if (!a) throw fatal(a.err().message);
  return std::move(a).value();
}

// --apply: the moves, their progress on stderr; the report.
fleet::apply_report apply_plan(const place_args& p, const place::plan& plan) {
  std::map<std::string, std::string> uris;
  for (const auto& h : p.hosts) uris[h.name] = h.uri;
  auto m = fleet::libvirt_migrator(uris);
  return fleet::apply_moves(plan.moves, *m, p.migration_timeout,
                            [](const std::string& line) { std::fprintf(stderr, "magnet place: %s\n", line.c_str()); });
}

// Exit status 1 with the failure and where each VM is, on stderr.
int report_failure(const fleet::apply_report& r) {
  std::fprintf(stderr, "magnet place: --apply failed at %s\n", r.failure.c_str());
  for (const auto& s : r.steps)
    if (s.rollback)
      std::fprintf(stderr, "magnet place: rollback of %s (%s -> %s): %s\n", s.vm.c_str(), s.from.c_str(),
                   s.to.c_str(), s.ok ? "done" : (s.error + "; " + s.vm + " is " + s.where).c_str());
  for (const auto& u : r.unsafe)
    std::fprintf(stderr, "magnet place: LOOK AT THIS VM: %s\n", u.c_str());
  return 1;
}

}  // namespace

int cmd_place(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kPlaceHelp, stdout);
    return 0;
  }
  place_args p = parse_place_args(a);
  const fleet::assembled fl = read_fleet(p);
  auto plan = place::make_plan(fl.fleet, p.algo, p.opts);
  if (!plan) throw fatal("planning: " + plan.err().message);
  const fleet::plan_context ctx{&fl.fleet, p.algo, p.opts, static_cast<double>(p.window_ms) / 1000, fl.notes};
  if (!p.json) std::fputs(fleet::plan_table(ctx, *plan).c_str(), stdout);
  std::fflush(stdout);
  fleet::apply_report applied;
  if (p.apply) applied = apply_plan(p, *plan);
  if (p.json) {
    auto j = fleet::plan_json(ctx, *plan);
    if (p.apply) j["applied"] = fleet::apply_json(applied);
    std::printf("%s\n", j.dump().c_str());
  } else if (p.apply && applied.ok) {
    std::printf("\napplied: %zu move(s)\n", plan->moves.size());
  }
  return p.apply && !applied.ok ? report_failure(applied) : 0;
}

}  // namespace magnet::host
