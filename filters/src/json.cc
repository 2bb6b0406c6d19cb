// Snapshot serialisation: the format views are delivered in (docs/engine.md).
#include <nlohmann/json.hpp>

#include "magnet/filters/engine.h"

namespace magnet::filters {

namespace {

using nlohmann::json;

json dist_json(const dist_stats& d) {
  return {{"count", d.count}, {"sum", d.sum},   {"mean", d.mean}, {"min", d.min},
          {"max", d.max},     {"p50", d.p50},   {"p90", d.p90},   {"p99", d.p99},
          {"relative_accuracy", d.relative_accuracy}};
}

json window_json(const window_stats& w) {
  json j = {{"kind", w.k == window_stats::kind::count ? "count" : "time"},
            {"events", w.events},
            {"bytes", w.bytes},
            {"errors", w.errors},
            {"first_ts_ns", w.first_ts},
            {"last_ts_ns", w.last_ts},
            {"rate_eps", w.rate_eps},
            {"bandwidth_bps", w.bandwidth_bps},
            {"truncated", w.truncated}};
  if (w.k == window_stats::kind::count) j["length_events"] = w.length;
  else j["length_ns"] = w.length;
  return j;
}

json snapshot_json(const view_snapshot& s) {
  json j = {{"view", s.view},
            {"per_vm", s.per_vm},
            {"vm", s.vm},
            {"ts_ns", s.ts_ns},
            {"matched", s.matched},
            {"sampled", s.sampled},
            {"sample_every", s.sample_every},
            {"memory_bytes", s.memory_bytes}};
  json ws = json::array();
  for (const auto& w : s.windows) ws.push_back(window_json(w));
  j["windows"] = std::move(ws);
  if (s.value_of != value_kind::none) {
    j["value"] = dist_json(s.value);
    j["value"]["of"] = std::string(name_of(s.value_of));
  }
  json gs = json::array();
  for (const auto& g : s.groups) {
    json rows = json::array();
    for (const auto& r : g.rows)
      rows.push_back({{"key", r.key},
                      {"key2", r.key2},
                      {"label", r.label},
                      {"events", r.events},
                      {"bytes", r.bytes},
                      {"errors", r.errors},
                      {"first_ts_ns", r.first_ts},
                      {"last_ts_ns", r.last_ts},
                      {"bandwidth_bps", r.bandwidth_bps}});
    gs.push_back({{"by", std::string(name_of(g.by))},
                  {"rows", std::move(rows)},
                  {"other_events", g.other_events},
                  {"other_bytes", g.other_bytes}});
  }
  j["groups"] = std::move(gs);
  json cs = json::array();
  for (const auto& c : s.correlations)
    cs.push_back({{"name", c.name},
                  {"matched", c.matched},
                  {"unmatched", c.unmatched},
                  {"expired", c.expired},
                  {"evicted", c.evicted},
                  {"reordered", c.reordered},
                  {"pending", c.pending},
                  {"latency_ns", dist_json(c.latency_ns)}});
  j["correlations"] = std::move(cs);
  return j;
}

}  // namespace

std::string to_json(const view_snapshot& s) { return snapshot_json(s).dump(); }

std::string to_json(std::span<const view_snapshot> s) {
  json a = json::array();
  for (const auto& v : s) a.push_back(snapshot_json(v));
  return a.dump();
}

}  // namespace magnet::filters
