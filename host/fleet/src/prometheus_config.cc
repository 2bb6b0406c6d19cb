#include "magnet/fleet/prometheus_config.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <yaml-cpp/yaml.h>

namespace magnet::fleet {

result<scrape_target> parse_scrape_target(std::string_view s) {
  const std::string want = "'" + std::string(s) + "': expected NAME=HOST:PORT (e.g. host-1=10.0.0.1:9477)";
  const size_t eq = s.find('=');
  if (eq == std::string_view::npos || eq == 0) return error{want};
  scrape_target t{std::string(s.substr(0, eq)), std::string(s.substr(eq + 1))};
  const size_t colon = t.address.rfind(':');
  if (colon == std::string::npos || colon == 0) return error{want};
  const std::string host = t.address.substr(0, colon);
  const std::string port = t.address.substr(colon + 1);
  const bool v6 = host.front() == '[' && host.back() == ']' && host.size() > 2;
  if (!v6 && host.find_first_of(":[]/ ") != std::string::npos) return error{want};
  unsigned p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc{} || end != port.data() + port.size() || p == 0 || p > 65535)
    return error{want + " (port '" + port + "')"};
  return t;
}

namespace {

std::string duration(uint64_t ms) {
  return ms % 1000 ? std::to_string(ms) + "ms" : std::to_string(ms / 1000) + "s";
}

}  // namespace

result<std::string> prometheus_config(const std::vector<scrape_target>& targets, const scrape_settings& s) {
  if (targets.empty()) return error{"no target: give each host's daemon as --target NAME=HOST:PORT"};
  std::set<std::string> names, addresses;
  for (const auto& t : targets) {
    if (!names.insert(t.name).second) return error{"target name " + t.name + " is given twice"};
    if (!addresses.insert(t.address).second) return error{"address " + t.address + " is given twice"};
  }
  YAML::Emitter y;
  y << YAML::Comment("Written by magnet fleet-config: one target per host, its instance label the host's name "
                     "(docs/placement.md, \"The fleet\")");
  y << YAML::BeginMap << YAML::Key << "global" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "scrape_interval" << YAML::Value << duration(s.interval_ms);
  // Prometheus refuses a timeout above the interval; its default is 10 s.
  y << YAML::Key << "scrape_timeout" << YAML::Value << duration(std::min<uint64_t>(s.interval_ms, 10000));
  y << YAML::EndMap;
  y << YAML::Key << "scrape_configs" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  y << YAML::Key << "job_name" << YAML::Value << s.job;
  if (!s.token_file.empty()) {
    y << YAML::Key << "authorization" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "credentials_file" << YAML::Value << s.token_file << YAML::EndMap;
  }
  y << YAML::Key << "static_configs" << YAML::Value << YAML::BeginSeq;
  for (const auto& t : targets) {
    y << YAML::BeginMap << YAML::Key << "targets" << YAML::Value << YAML::Flow << YAML::BeginSeq << t.address
      << YAML::EndSeq;
    // A target label: Prometheus sets instance to the address only where
    // no label names it already.
    y << YAML::Key << "labels" << YAML::Value << YAML::BeginMap << YAML::Key << "instance" << YAML::Value << t.name
      << YAML::EndMap << YAML::EndMap;
  }
  y << YAML::EndSeq << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
  if (!y.good()) return error{"writing the YAML: " + y.GetLastError()};
  return std::string(y.c_str()) + "\n";
}

}  // namespace magnet::fleet
