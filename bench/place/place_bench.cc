// Placement at fleet scale, by simulation (issue 21 item 5; README.md):
// per-VM demand traces replayed step by step over a fleet of hosts with
// SPECpower-style power curves, each algorithm of magnet_place planning at
// every step; energy, SLATAH, PDM, SLAV, migrations and the planner's own
// time.  No root, no VMs, no libvirt.
//
//   place_bench [--hosts N] [--vms N] [--hours H] [--step S] [--samples N]
//               [--seed N] [--trace FILE.csv] [--host-model FILE] [--cpus N]
//               [--mem-gib N] [--link-gbps X] [--algorithms LIST]
//               [--cpu-upper X] [--peak-upper X] [--margin X] [--max-moves N]
//               [--migration-share X] [--json] [--plot FILE.png] [--diag FILE]
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "magnet/cli.h"
#include "magnet/power/model.h"
#include "report.h"
#include "simulate.h"
#include "trace.h"

using namespace magnet;
using namespace magnet::bench::place;
namespace mp = magnet::place;

namespace {

const char* kUsage =
    "usage: place_bench [--hosts N] [--vms N] [--hours H] [--step S] [--samples N] [--seed N]\n"
    "                   [--trace FILE.csv] [--host-model FILE] [--cpus N] [--mem-gib N] [--link-gbps X]\n"
    "                   [--algorithms magnet,pabfd,watcher,first-fit,round-robin]\n"
    "                   [--cpu-upper X] [--peak-upper X] [--margin X] [--max-moves N]\n"
    "                   [--migration-share X]\n"
    "                   [--json] [--plot FILE.png] [--diag FILE]\n"
    "defaults: 1000 hosts, 10000 VMs, 24 hours of 300 s steps of 10 samples, seed 1; hosts of 24 CPUs,\n"
    "256 GiB, 10 Gbit/s links, half with each of two SPECpower curves (bench/place/README.md)\n";

// SPECpower_ssj2008 results at 0 %, 10 %, ... 100 % load, as CloudSim
// ships them (PowerModelSpecPowerIbmX3550XeonX5670 and ...X5675).
const char* kX5670 =
    "idle = 66\nfull = 247\npoint = 10% 107\npoint = 20% 120\npoint = 30% 131\npoint = 40% 143\n"
    "point = 50% 156\npoint = 60% 173\npoint = 70% 191\npoint = 80% 211\npoint = 90% 229\n";
const char* kX5675 =
    "idle = 58.4\nfull = 222\npoint = 10% 98\npoint = 20% 109\npoint = 30% 118\npoint = 40% 128\n"
    "point = 50% 140\npoint = 60% 153\npoint = 70% 170\npoint = 80% 189\npoint = 90% 205\n";

struct settings {
  int hosts = 1000;
  synthetic_options syn;
  std::string trace_file, host_model;
  double cpus = 24, mem_gib = 256, link_gbps = 10, hours = 24, migration_share = 0.5;
  std::vector<mp::algorithm> algorithms{mp::algorithm::magnet, mp::algorithm::pabfd, mp::algorithm::watcher,
                                        mp::algorithm::first_fit, mp::algorithm::round_robin};
  mp::plan_options options;
  bool json = false;
  std::string plot, diag;
};

double number(const std::string& s, std::string_view option, bool zero_ok) {
  size_t end = 0;
  double v = 0;
  try {
    v = std::stod(s, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  if (end != s.size() || !std::isfinite(v) || v < 0 || (v == 0 && !zero_ok))
    throw cli::usage_error(std::string(option) + ": '" + s + "' is not a number " + (zero_ok ? ">= 0" : "above 0"));
  return v;
}

double positive(const std::string& s, std::string_view option) { return number(s, option, false); }
double non_negative(const std::string& s, std::string_view option) { return number(s, option, true); }

int count(const std::string& s, std::string_view option) {
  const uint64_t v = cli::need(cli::parse_count(s), option);
  if (v > 1000000) throw cli::usage_error(std::string(option) + ": " + s + " is more than 1000000");
  return int(v);
}

std::vector<mp::algorithm> algorithm_list(const std::string& s) {
  std::vector<mp::algorithm> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    out.push_back(cli::need(mp::parse_algorithm(s.substr(start, comma - start)), "--algorithms"));
    start = comma + 1;
  }
  return out;
}

settings parse(int argc, char** argv) {
  cli::args a("place_bench", std::vector<std::string>(argv + 1, argv + argc));
  settings s;
  if (auto v = a.value("--hosts")) s.hosts = count(*v, "--hosts");
  if (auto v = a.value("--vms")) s.syn.vms = count(*v, "--vms");
  if (auto v = a.value("--hours")) s.hours = positive(*v, "--hours");
  if (auto v = a.value("--step")) s.syn.step_s = positive(*v, "--step");
  if (auto v = a.value("--samples")) s.syn.samples = count(*v, "--samples");
  if (auto v = a.value("--seed")) s.syn.seed = count(*v, "--seed");
  if (auto v = a.value("--trace")) s.trace_file = *v;
  if (auto v = a.value("--host-model")) s.host_model = *v;
  if (auto v = a.value("--cpus")) s.cpus = positive(*v, "--cpus");
  if (auto v = a.value("--mem-gib")) s.mem_gib = positive(*v, "--mem-gib");
  if (auto v = a.value("--link-gbps")) s.link_gbps = positive(*v, "--link-gbps");
  if (auto v = a.value("--algorithms")) s.algorithms = algorithm_list(*v);
  if (auto v = a.value("--cpu-upper")) s.options.cpu_upper = positive(*v, "--cpu-upper");
  if (auto v = a.value("--peak-upper")) s.options.peak_upper = positive(*v, "--peak-upper");
  if (auto v = a.value("--margin")) s.options.consolidation_margin = non_negative(*v, "--margin");
  if (auto v = a.value("--max-moves")) s.options.max_moves = count(*v, "--max-moves");
  if (auto v = a.value("--migration-share")) s.migration_share = positive(*v, "--migration-share");
  if (auto v = a.value("--plot")) s.plot = *v;
  if (auto v = a.value("--diag")) s.diag = *v;
  s.json = a.flag("--json");
  a.finish(0, 0);
  s.syn.steps = int(std::lround(s.hours * 3600 / s.syn.step_s));
  if (s.syn.steps < 2) throw cli::usage_error("--hours and --step: fewer than 2 steps");
  return s;
}

// The fleet's hosts: all with --host-model's curve, or alternately the two
// built-in ones.
result<std::vector<mp::host_spec>> make_hosts(const settings& s, std::string& models) {
  std::vector<power::power_model> curves;
  if (!s.host_model.empty()) {
    auto m = power::load_power_model(s.host_model);
    if (!m) return m.err();
    curves.push_back(*m);
    models = s.host_model + ": " + power::describe(*m);
  } else {
    curves.push_back(power::parse_power_model(kX5670, "x5670").value());
    curves.push_back(power::parse_power_model(kX5675, "x5675").value());
    models = "IBM x3550 M3 X5670 and X5675 SPECpower curves, alternately";
  }
  std::vector<mp::host_spec> hosts;
  for (int h = 0; h < s.hosts; ++h) {
    mp::host_spec hs;
    char name[16];
    std::snprintf(name, sizeof name, "h%04d", h);
    hs.name = name;
    hs.cpus = s.cpus;
    hs.mem_bytes = s.mem_gib * 1024 * 1024 * 1024;
    hs.link_bps = s.link_gbps * 1e9;
    hs.model = curves[h % curves.size()];
    hosts.push_back(hs);
  }
  return hosts;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
  settings s;
  try {
    s = parse(argc, argv);
  } catch (const cli::usage_error& e) {
    std::fprintf(stderr, "place_bench: %s\n%s", e.what(), kUsage);
    return 2;
  }
  std::unique_ptr<trace> tr;
  if (s.trace_file.empty()) {
    tr = synthetic_trace(s.syn);
  } else {
    auto t = csv_trace(s.trace_file, s.syn.step_s);
    if (!t) {
      std::fprintf(stderr, "place_bench: %s\n", t.err().message.c_str());
      return 1;
    }
    tr = std::move(*t);
  }
  run_info info;
  auto hosts = make_hosts(s, info.host_models);
  if (!hosts) {
    std::fprintf(stderr, "place_bench: %s\n", hosts.err().message.c_str());
    return 1;
  }
  sim_config c;
  c.hosts = std::move(*hosts);
  c.options = s.options;
  c.migration_link_share = s.migration_share;
  // A step's peak is the largest of its samples: on average their
  // n/(n+1) quantile.
  const int n = tr->samples_per_step();
  c.options.peak_quantile = n > 1 ? double(n) / (n + 1) : 0.95;
  info.trace = tr->describe();
  info.hosts = s.hosts;
  info.vms = int(tr->vms().size());
  info.steps = tr->steps();
  info.step_s = tr->step_seconds();
  info.options = c.options;
  info.migration_link_share = s.migration_share;
  std::vector<sim_result> rs;
  for (mp::algorithm a : s.algorithms) {
    if (!s.json) std::fprintf(stderr, "place_bench: %s ...\n", std::string(mp::name_of(a)).c_str());
    rs.push_back(simulate(*tr, c, a));
  }
  s.json ? print_json(info, rs) : print_table(info, rs);
  if (!s.diag.empty())
    if (auto st = write_diag(rs, info.step_s, s.diag); !st) {
      std::fprintf(stderr, "place_bench: %s\n", st.err().message.c_str());
      return 1;
    }
  if (!s.plot.empty()) {
    if (auto st = plot(rs, info.step_s, s.plot); !st) {
      std::fprintf(stderr, "place_bench: %s\n", st.err().message.c_str());
      return 1;
    }
    if (!s.json) std::printf("plot: %s (data: %s.dat)\n", s.plot.c_str(), s.plot.c_str());
  }
  return 0;
}
