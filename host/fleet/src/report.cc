#include "magnet/fleet/report.h"

#include <cstdio>
#include <map>

namespace magnet::fleet {

using json = nlohmann::json;

namespace {

std::string fmt(const char* f, double a, double b = 0) {
  char s[64];
  std::snprintf(s, sizeof s, f, a, b);
  return s;
}

// VMs on each host before and after the plan.
std::map<std::string, std::pair<int, int>> vm_counts(const place::fleet& f, const place::plan& p) {
  std::map<std::string, std::pair<int, int>> n;
  for (const auto& v : f.vms) {
    ++n[v.host].first;
    ++n[v.host].second;
  }
  for (const auto& m : p.moves) {
    --n[m.from].second;
    ++n[m.to].second;
  }
  return n;
}

std::vector<std::string> all_notes(const plan_context& c, const place::plan& p) {
  std::vector<std::string> out = c.notes;
  out.insert(out.end(), p.notes.begin(), p.notes.end());
  return out;
}

std::string host_row(const place::host_spec& h, const place::host_outcome& o, std::pair<int, int> vms) {
  constexpr double gib = 1024.0 * 1024 * 1024;
  char row[256];
  const std::string link = h.link_bps > 0 ? fmt("%.0f/%.0f", (h.link_bps - o.net_used_bps) / 1e6, h.link_bps / 1e6) : "-";
  const std::string moved = std::to_string(vms.first) + " -> " + std::to_string(vms.second);
  std::snprintf(row, sizeof row, "%-14s %-10s %11s %11s %13s %16s %8.1f %8.1f  %s\n", h.name.c_str(), moved.c_str(),
                fmt("%.2f/%.0f", h.cpus - o.cpu_used, h.cpus).c_str(),
                fmt("%.2f/%.0f", h.cpus - o.cpu_peak_used, h.cpus).c_str(),
                fmt("%.1f/%.1f", (h.mem_bytes - o.mem_used) / gib, h.mem_bytes / gib).c_str(), link.c_str(),
                o.watts_before, o.watts_after, o.emptied ? "yes" : "no");
  return row;
}

}  // namespace

std::string plan_table(const plan_context& c, const place::plan& p) {
  const auto& f = *c.fleet;
  int emptied = 0;
  for (const auto& h : p.hosts) emptied += h.emptied;
  const double saved = p.watts_before - p.watts_after;
  std::string out = "magnet place: algorithm " + std::string(place::name_of(c.algorithm)) + ", demand over the last " +
                    fmt("%.0f", c.window_s) + " s: " + std::to_string(p.moves.size()) + " move(s), " +
                    std::to_string(emptied) + " host(s) emptied\n";
  out += "predicted: " + fmt("%.1f W now, %.1f W after the plan", p.watts_before, p.watts_after) + ", " +
         fmt("%.1f W saved (%.1f %%)", saved, p.watts_before > 0 ? 100 * saved / p.watts_before : 0) +
         "; SLA risk " + fmt("%.3f", p.sla_risk) + "\n\n";
  if (p.moves.empty()) {
    out += "no move\n";
  } else {
    char line[256];
    std::snprintf(line, sizeof line, "%-4s %-24s %-14s %-14s %8s\n", "#", "VM", "FROM", "TO", "SAVES W");
    out += line;
    for (size_t i = 0; i < p.moves.size(); ++i) {
      const auto& m = p.moves[i];
      std::snprintf(line, sizeof line, "%-4zu %-24s %-14s %-14s %8.1f\n", i + 1, m.vm.c_str(), m.from.c_str(),
                    m.to.c_str(), m.watts_saved);
      out += line;
    }
  }
  char head[256];
  std::snprintf(head, sizeof head, "\n%-14s %-10s %11s %11s %13s %16s %8s %8s  %s\n", "HOST", "VMS", "CPU FREE",
                "PEAK FREE", "MEM FREE GiB", "LINK FREE Mbit/s", "W NOW", "W AFTER", "EMPTIED");
  out += head;
  const auto counts = vm_counts(f, p);
  for (size_t i = 0; i < f.hosts.size() && i < p.hosts.size(); ++i) {
    auto it = counts.find(f.hosts[i].name);
    out += host_row(f.hosts[i], p.hosts[i], it == counts.end() ? std::pair{0, 0} : it->second);
  }
  const auto notes = all_notes(c, p);
  if (!notes.empty()) out += "\n";
  for (const auto& n : notes) out += "note: " + n + "\n";
  return out;
}

namespace {

json or_null(double v, bool known) { return known ? json(v) : json(nullptr); }

json hosts_json(const place::fleet& f, const place::plan& p) {
  json hosts = json::array();
  const auto counts = vm_counts(f, p);
  for (size_t i = 0; i < f.hosts.size() && i < p.hosts.size(); ++i) {
    const auto& h = f.hosts[i];
    const auto& o = p.hosts[i];
    auto n = counts.count(h.name) ? counts.at(h.name) : std::pair{0, 0};
    hosts.push_back({{"name", h.name},
                     {"cpus", h.cpus},
                     {"mem_bytes", h.mem_bytes},
                     {"link_bps", or_null(h.link_bps, h.link_bps > 0)},
                     {"watts_measured", or_null(h.watts_now, h.watts_now >= 0)},
                     {"vms_before", n.first},
                     {"vms_after", n.second},
                     {"cpu_used", o.cpu_used},
                     {"cpu_peak_used", o.cpu_peak_used},
                     {"mem_used_bytes", o.mem_used},
                     {"net_used_bps", o.net_used_bps},
                     {"cpu_free", h.cpus - o.cpu_used},
                     {"cpu_peak_free", h.cpus - o.cpu_peak_used},
                     {"mem_free_bytes", h.mem_bytes - o.mem_used},
                     {"link_free_bps", or_null(h.link_bps - o.net_used_bps, h.link_bps > 0)},
                     {"watts_before", o.watts_before},
                     {"watts_after", o.watts_after},
                     {"emptied", o.emptied}});
  }
  return hosts;
}

json vms_json(const place::fleet& f) {
  json vms = json::array();
  for (const auto& v : f.vms)
    vms.push_back({{"name", v.name},
                   {"uuid", v.uuid},
                   {"host", v.host},
                   {"cpu_cores", v.cpu_cores},
                   {"cpu_peak_cores", v.cpu_peak_cores},
                   {"vcpus", v.vcpus},
                   {"mem_bytes", v.mem_bytes},
                   {"net_bps", v.net_bps},
                   {"watts", or_null(v.watts_now, v.watts_now >= 0)},
                   {"migratable", v.migratable}});
  return vms;
}

}  // namespace

json plan_json(const plan_context& c, const place::plan& p) {
  json moves = json::array();
  for (const auto& m : p.moves)
    moves.push_back({{"vm", m.vm}, {"uuid", m.uuid}, {"from", m.from}, {"to", m.to}, {"watts_saved", m.watts_saved}});
  const auto& o = c.options;
  return {{"algorithm", std::string(place::name_of(c.algorithm))},
          {"window_s", c.window_s},
          {"options",
           {{"cpu_upper", o.cpu_upper},
            {"peak_upper", o.peak_upper},
            {"mem_upper", o.mem_upper},
            {"link_upper", o.link_upper},
            {"max_moves", o.max_moves}}},
          {"watts_before", p.watts_before},
          {"watts_after", p.watts_after},
          {"watts_saved", p.watts_before - p.watts_after},
          {"sla_risk", p.sla_risk},
          {"moves", moves},
          {"hosts", hosts_json(*c.fleet, p)},
          {"vms", vms_json(*c.fleet)},
          {"notes", all_notes(c, p)}};
}

json apply_json(const apply_report& r) {
  json steps = json::array();
  for (const auto& s : r.steps)
    steps.push_back({{"vm", s.vm},
                     {"from", s.from},
                     {"to", s.to},
                     {"rollback", s.rollback},
                     {"ok", s.ok},
                     {"seconds", s.seconds},
                     {"error", s.ok ? json(nullptr) : json(s.error)},
                     {"where", s.ok ? json(nullptr) : json(s.where)}});
  return {{"ok", r.ok},
          {"failure", r.ok ? json(nullptr) : json(r.failure)},
          {"steps", steps},
          {"unsafe", r.unsafe}};
}

}  // namespace magnet::fleet
