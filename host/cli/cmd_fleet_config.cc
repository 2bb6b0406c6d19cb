// magnet fleet-config: the prometheus.yml of a fleet's Prometheus, one
// target per host's daemon, labelled with the host's name (host/fleet).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "commands.h"
#include "magnet/fleet/prometheus_config.h"

namespace magnet::host {

static const char* kFleetConfigHelp =
    "Usage: magnet fleet-config --target NAME=HOST:PORT... [-o FILE] [options]\n"
    "\n"
    "A prometheus.yml for the fleet's Prometheus: it scrapes each host's\n"
    "'magnet host --http' (/metrics), with the instance label set to the\n"
    "host's name, the NAME 'magnet place --host NAME=URI' is given\n"
    "(docs/placement.md, \"The fleet\").  A daemon scraped by a DNS name needs\n"
    "'magnet host --http-host NAME' (docs/metrics.md).\n"
    "\n"
    "      --target NAME=HOST:PORT\n"
    "                         a host's name and its daemon's --http address\n"
    "                         (repeat for each host)\n"
    "  -o, --output FILE      write it there (default: standard output)\n"
    "      --scrape-interval T\n"
    "                         how often each daemon is scraped (default 5s)\n"
    "      --job NAME         the scrape job's name (default magnet)\n"
    "      --token-file FILE  an operator token for daemons with --http-tokens,\n"
    "                         read by Prometheus from FILE (as Bearer)\n"
    "\n" MAGNET_HELP_DURATIONS;

int cmd_fleet_config(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kFleetConfigHelp, stdout);
    return 0;
  }
  std::vector<fleet::scrape_target> targets;
  for (const auto& t : a.values("--target"))
    targets.push_back(cli::need(fleet::parse_scrape_target(t), "--target"));
  auto out = a.value("--output", "-o");
  fleet::scrape_settings s;
  if (auto v = a.value("--scrape-interval")) {
    const uint64_t ns = cli::need(cli::parse_duration_ns(*v), "--scrape-interval");
    if (ns < 1'000'000'000) throw cli::usage_error("--scrape-interval: '" + *v + "' is below 1s");
    s.interval_ms = ns / 1'000'000;
  }
  if (auto v = a.value("--job")) s.job = *v;
  if (auto v = a.value("--token-file")) s.token_file = *v;
  a.finish(0, 0);
  if (s.job.empty()) throw cli::usage_error("--job: empty");
  auto yml = fleet::prometheus_config(targets, s);
  if (!yml) throw cli::usage_error(yml.err().message);
  if (!out) {
    std::fputs(yml->c_str(), stdout);
    return 0;
  }
  std::ofstream f(*out, std::ios::trunc);
  f << *yml;
  f.close();
  if (!f) throw fatal(error::from_errno("cannot write " + *out).message);
  return 0;
}

}  // namespace magnet::host
