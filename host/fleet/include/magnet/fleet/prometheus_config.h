// A prometheus.yml that scrapes a fleet's magnet daemons (`magnet
// fleet-config`): one target per host, its `instance` label set to the
// host's name, so that `magnet place --host NAME=URI` finds it by the same
// name (docs/placement.md, "The fleet").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/result.h"

namespace magnet::fleet {

struct scrape_target {
  std::string name;     // the instance label
  std::string address;  // HOST:PORT of its daemon's /metrics (magnet host --http)
};
// NAME=HOST:PORT; HOST a name, an IPv4 address or [an IPv6 one].
result<scrape_target> parse_scrape_target(std::string_view s);

struct scrape_settings {
  std::string job = "magnet";
  uint64_t interval_ms = 5000;
  std::string token_file;  // an operator token (magnet host --http-tokens); "": none
};

// The YAML text; an error for no target, or two of one name or address.
result<std::string> prometheus_config(const std::vector<scrape_target>& targets, const scrape_settings& s);

}  // namespace magnet::fleet
