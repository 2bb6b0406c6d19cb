// dashboards/grafana/magnet.json asks only for series the daemon exports:
// every metric name in every PromQL expression (panels' targets, template
// variables) is one of metric_series_names(), the list /metrics is built
// from; the panels the issues ask for are there (power: issue 21).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "magnet/export/openmetrics.h"

namespace magnet::host {
namespace {

// The metric names of a PromQL expression: identifiers outside label
// matchers, quoted strings, ranges and grouping clauses, that are neither a
// function nor a keyword; Grafana's $variables and label_values' label
// argument are not names either.
std::set<std::string> metric_names(std::string e) {
  static const std::regex strip[] = {
      std::regex(R"("([^"\\]|\\.)*")"),  // strings
      std::regex(R"(\{[^}]*\})"),         // label matchers
      std::regex(R"(\[[^\]]*\])"),        // ranges
      std::regex(R"(\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\))"),
      std::regex(R"(\$\w+)"),
  };
  // label_values(METRIC, LABEL): the label is not a metric.
  e = std::regex_replace(e, std::regex(R"(label_values\(([^,()]*),[^)]*\))"), "$1");
  for (const auto& r : strip) e = std::regex_replace(e, r, " ");
  static const std::set<std::string> words = {
      "sum", "avg", "min", "max", "count", "rate", "irate", "increase", "histogram_quantile",
      "label_values", "and", "or", "unless", "topk", "bottomk", "offset", "bool", "abs", "delta",
      "deriv", "clamp_min", "clamp_max", "quantile", "stddev", "time", "vector", "scalar",
      // a vector matching's modifiers without their parentheses ("on (instance)
      // group_left magnet_host_power_watts")
      "group_left", "group_right"};
  std::set<std::string> out;
  static const std::regex ident(R"([a-zA-Z_:][a-zA-Z0-9_:]*)");
  for (auto it = std::sregex_iterator(e.begin(), e.end(), ident); it != std::sregex_iterator(); ++it) {
    const std::string w = it->str();
    // A word right after a digit is a number's exponent or unit (1e3, 5m).
    if (it->position() > 0 && std::isdigit(static_cast<unsigned char>(e[static_cast<size_t>(it->position()) - 1])))
      continue;
    if (!words.count(w)) out.insert(w);
  }
  return out;
}

// Every PromQL string in the dashboard, with where it is.
void collect(const nlohmann::json& j, const std::string& at, std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if ((k == "expr" || k == "definition" || k == "query") && v.is_string()) {
        if (v.get<std::string>() != "prometheus") out.emplace_back(at + "." + k, v.get<std::string>());
      } else {
        collect(v, at + "." + k, out);
      }
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) collect(j[i], at + "[" + std::to_string(i) + "]", out);
  }
}

TEST(GrafanaDashboard, PromQlUsesOnlyExportedSeries) {
  std::ifstream f(std::string(MAGNET_SOURCE_DIR) + "/dashboards/grafana/magnet.json");
  ASSERT_TRUE(f) << "no dashboards/grafana/magnet.json";
  auto dash = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(dash.is_discarded()) << "the dashboard is not JSON";
  std::vector<std::pair<std::string, std::string>> exprs;
  collect(dash, "", exprs);
  ASSERT_GE(exprs.size(), 10u);
  const auto list = metric_series_names();
  const std::set<std::string> exported(list.begin(), list.end());
  std::set<std::string> used;
  for (const auto& [where, e] : exprs) {
    auto names = metric_names(e);
    EXPECT_FALSE(names.empty()) << where << ": no metric in '" << e << "'";
    for (const auto& n : names) {
      EXPECT_TRUE(exported.count(n)) << where << ": '" << n << "' is not a series /metrics has ('" << e << "')";
      used.insert(n);
    }
  }
  // The panels the issue asks for.
  for (const char* n : {"magnet_vm_info", "magnet_vm_network_transmit_bytes_total",
                        "magnet_vm_host_queue_seconds_bucket", "magnet_vm_vcpu_seconds_total",
                        "magnet_vm_kvm_exits_total", "magnet_vm_network_drops_total"})
    EXPECT_TRUE(used.count(n)) << n << " has no panel";
  // The power panels (docs/placement.md): the host's by source, each VM's,
  // each VM's energy over the range, each VM's share of its host's.
  for (const char* n : {"magnet_host_power_watts", "magnet_vm_power_watts", "magnet_vm_energy_joules_total"})
    EXPECT_TRUE(used.count(n)) << n << " has no panel";
  std::set<std::string> exprs_seen;
  for (const auto& [where, e] : exprs) exprs_seen.insert(e);
  EXPECT_TRUE(exprs_seen.count("increase(magnet_vm_energy_joules_total{domain=~\"$domain\"}[$__range])"))
      << "no energy per VM over the dashboard's range";
  EXPECT_TRUE(exprs_seen.count(
      "magnet_vm_power_watts{domain=~\"$domain\"} / on (instance) group_left magnet_host_power_watts"))
      << "no VM share of its host's power";
  // Per-VM rows: one per value of the domain variable, from magnet_vm_info.
  bool repeated = false;
  for (const auto& p : dash.at("panels")) repeated |= p.value("repeat", "") == "domain";
  EXPECT_TRUE(repeated) << "no row repeated by $domain";
  bool var = false;
  for (const auto& v : dash.at("templating").at("list"))
    var |= v.value("name", "") == "domain" && v.value("definition", "") == "label_values(magnet_vm_info, domain)";
  EXPECT_TRUE(var) << "no domain variable from label_values(magnet_vm_info, domain)";
}

TEST(GrafanaDashboard, TheExtractorFindsMetricNames) {
  EXPECT_EQ(metric_names("histogram_quantile(0.99, sum by (le, direction) "
                         "(rate(magnet_vm_host_queue_seconds_bucket{domain=\"$domain\"}[$__rate_interval])))"),
            std::set<std::string>{"magnet_vm_host_queue_seconds_bucket"});
  EXPECT_EQ(metric_names("process_resident_memory_bytes and on (instance, job) magnet_vms"),
            (std::set<std::string>{"magnet_vms", "process_resident_memory_bytes"}));
  EXPECT_EQ(metric_names("rate(mgnet_vm_typo_total[5m]) * 8 + 1e3"), std::set<std::string>{"mgnet_vm_typo_total"});
  EXPECT_EQ(metric_names("magnet_vm_power_watts{domain=~\"$domain\"} / on (instance) group_left magnet_host_power_watts"),
            (std::set<std::string>{"magnet_vm_power_watts", "magnet_host_power_watts"}))
      << "a vector matching's modifiers are not metrics";
  EXPECT_EQ(metric_names("increase(magnet_vm_energy_joules_total[$__range])"),
            std::set<std::string>{"magnet_vm_energy_joules_total"});
  EXPECT_EQ(metric_names("label_values(magnet_vm_info, domain)"),
            std::set<std::string>{"magnet_vm_info"})
      << "label_values' label argument is not a metric";
}

}  // namespace
}  // namespace magnet::host
