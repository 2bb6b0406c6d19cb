#include "report.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../summary.h"

namespace magnet::bench::place {

namespace {

constexpr double kPlanTargetMs = 1000;  // a plan for 10,000 VMs in at most 1 s on one core
constexpr int kPlanTargetVms = 10000;

const sim_result* find(const std::vector<sim_result>& rs, const std::string& name) {
  for (const auto& r : rs)
    if (r.algorithm == name) return &r;
  return nullptr;
}

struct verdict {
  bool applies = false, met = false;
  std::string text;
};

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

// Energy at most PABFD's at an SLAV no higher than PABFD's.
verdict energy_target(const std::vector<sim_result>& rs) {
  const sim_result *m = find(rs, "magnet"), *p = find(rs, "pabfd");
  if (!m || !p) return {false, false, "needs magnet and pabfd in --algorithms"};
  verdict v{true, m->energy_kwh <= p->energy_kwh && m->slav <= p->slav, ""};
  v.text = fmt(m->energy_kwh < 10 ? "magnet %.3f kWh against PABFD's %.3f (%+.1f %%)"
                                   : "magnet %.1f kWh against PABFD's %.1f (%+.1f %%)",
               m->energy_kwh, p->energy_kwh, 100 * (m->energy_kwh / p->energy_kwh - 1)) +
           fmt(", SLAV %.3f against %.3f (x1e-5)", 1e5 * m->slav, 1e5 * p->slav);
  return v;
}

// A plan for 10,000 VMs in at most 1 s of one core's time.
verdict time_target(const run_info& info, const std::vector<sim_result>& rs) {
  const sim_result* m = find(rs, "magnet");
  if (!m || m->plan_cpu_ms.empty()) return {false, false, "needs magnet in --algorithms"};
  const summary s = summarize(m->plan_cpu_ms);
  verdict v{info.vms >= kPlanTargetVms, s.max <= kPlanTargetMs, ""};
  v.text = fmt("magnet's plans for %.0f VMs on %.0f hosts: CPU time median %.1f ms, max %.1f ms", info.vms, info.hosts,
               s.med, s.max);
  if (!v.applies) v.text += " (the target is for 10,000 VMs)";
  return v;
}

void print_verdict(const char* what, const verdict& v) {
  const char* tag = !v.applies ? "N/A   " : v.met ? "MET   " : "MISSED";
  std::printf("%s %s: %s\n", tag, what, v.text.c_str());
}

nlohmann::json stats(const std::vector<double>& v) {
  const summary s = summarize(v);
  return {{"median", s.med}, {"min", s.min}, {"max", s.max}};
}

}  // namespace

void print_table(const run_info& info, const std::vector<sim_result>& rs) {
  std::printf("bench/place: %s\n", info.trace.c_str());
  std::printf("%d hosts (%s)\ncpu_upper %.2f, peak_upper %.2f, mem_upper %.2f, link_upper %.2f, "
              "consolidation_margin %.3f, max_moves %d, peak_quantile %.3f; migration at %.0f %% of the link\n\n",
              info.hosts, info.host_models.c_str(), info.options.cpu_upper, info.options.peak_upper,
              info.options.mem_upper, info.options.link_upper, info.options.consolidation_margin,
              info.options.max_moves, info.options.peak_quantile, 100 * info.migration_link_share);
  std::printf("%-12s %10s %8s %8s %8s %9s %7s %8s %17s %7s %7s %7s %21s %21s\n", "algorithm", "energy", "vs",
              "SLATAH", "PDM", "SLAV", "migr.", "moved", "hosts on", "CPU", "link", "risk", "plan CPU ms",
              "plan wall ms");
  std::printf("%-12s %10s %8s %8s %8s %9s %7s %8s %17s %7s %7s %7s %21s %21s\n", "", "kWh", "pabfd", "%", "%",
              "x1e-5", "", "GiB", "mean (min-max)", "short%", "over%", "pred.%", "median (max)", "median (max)");
  const sim_result* pab = find(rs, "pabfd");
  for (const auto& r : rs) {
    const summary cpu = summarize(r.plan_cpu_ms), wall = summarize(r.plan_wall_ms);
    const std::string vs = pab ? fmt("%+.1f%%", 100 * (r.energy_kwh / pab->energy_kwh - 1)) : "-";
    const std::string on = fmt("%.1f (%.0f-%.0f)", r.hosts_on_mean, r.hosts_on_min, r.hosts_on_max);
    std::printf("%-12s %10.*f %8s %8.3f %8.4f %9.3f %7ld %8.0f %17s %7.3f %7.2f %7.3f %21s %21s\n",
                r.algorithm.c_str(), r.energy_kwh < 10 ? 3 : 1, r.energy_kwh, vs.c_str(), 100 * r.slatah,
                100 * r.pdm, 1e5 * r.slav, r.migrations, r.migrated_gib, on.c_str(),
                100 * r.cpu_short, 100 * r.link_over, 100 * r.risk_mean,
                fmt("%.1f (%.1f)", cpu.med, cpu.max).c_str(), fmt("%.1f (%.1f)", wall.med, wall.max).c_str());
    for (const auto& e : r.errors) std::printf("  error: %s\n", e.c_str());
  }
  std::printf("\n");
  print_verdict("energy <= PABFD's at SLAV <= PABFD's", energy_target(rs));
  print_verdict("a plan for 10,000 VMs in <= 1 s of one core", time_target(info, rs));
}

void print_json(const run_info& info, const std::vector<sim_result>& rs) {
  nlohmann::json j;
  j["trace"] = info.trace;
  j["hosts"] = info.hosts;
  j["vms"] = info.vms;
  j["steps"] = info.steps;
  j["step_seconds"] = info.step_s;
  j["host_models"] = info.host_models;
  j["options"] = {{"cpu_upper", info.options.cpu_upper}, {"peak_upper", info.options.peak_upper},
                  {"mem_upper", info.options.mem_upper}, {"link_upper", info.options.link_upper},
                  {"max_moves", info.options.max_moves},
                  {"consolidation_margin", info.options.consolidation_margin},
                  {"peak_quantile", info.options.peak_quantile},
                  {"migration_link_share", info.migration_link_share}};
  for (const auto& r : rs) {
    j["results"].push_back({{"algorithm", r.algorithm}, {"energy_kwh", r.energy_kwh}, {"slatah", r.slatah},
                            {"pdm", r.pdm}, {"slav", r.slav}, {"migrations", r.migrations},
                            {"migrated_gib", r.migrated_gib},
                            {"hosts_on", {{"mean", r.hosts_on_mean}, {"min", r.hosts_on_min}, {"max", r.hosts_on_max}}},
                            {"cpu_short", r.cpu_short}, {"link_over", r.link_over}, {"sla_risk_mean", r.risk_mean},
                            {"plan_cpu_ms", stats(r.plan_cpu_ms)}, {"plan_wall_ms", stats(r.plan_wall_ms)},
                            {"errors", r.errors}});
  }
  for (auto [key, v] : {std::pair{"energy", energy_target(rs)}, {"plan_time", time_target(info, rs)}})
    j["targets"][key] = {{"applies", v.applies}, {"met", v.met}, {"text", v.text}};
  std::printf("%s\n", j.dump(2).c_str());
}

status plot(const std::vector<sim_result>& rs, double step_s, const std::string& png) {
  const std::string dat = png + ".dat";
  {
    std::ofstream out(dat);
    if (!out) return error::from_errno(dat);
    out << "# hour";
    for (const auto& r : rs) out << " " << r.algorithm << "_kW " << r.algorithm << "_hosts";
    out << "\n";
    const size_t steps = rs.empty() ? 0 : rs[0].fleet_kw.size();
    for (size_t s = 0; s < steps; ++s) {
      out << (s + 0.5) * step_s / 3600;
      for (const auto& r : rs) out << " " << r.fleet_kw[s] << " " << r.hosts_on[s];
      out << "\n";
    }
    if (!out) return error::from_errno(dat);
  }
  FILE* gp = popen("gnuplot", "w");
  if (!gp) return error::from_errno("gnuplot");
  std::fprintf(gp, "set terminal pngcairo size 1000,700\nset output '%s'\nset multiplot layout 2,1\n", png.c_str());
  std::fprintf(gp, "set key outside right\nset grid\nset xlabel 'hour'\n");
  for (int panel = 0; panel < 2; ++panel) {
    std::fprintf(gp, "set ylabel '%s'\nplot ", panel == 0 ? "fleet power (kW)" : "hosts on");
    for (size_t i = 0; i < rs.size(); ++i)
      std::fprintf(gp, "%s'%s' using 1:%zu with lines title '%s'", i ? ", " : "", dat.c_str(), 2 + 2 * i + panel,
                   rs[i].algorithm.c_str());
    std::fprintf(gp, "\n");
  }
  std::fprintf(gp, "unset multiplot\n");
  const int rc = pclose(gp);
  if (rc != 0) return error{"gnuplot failed (status " + std::to_string(rc) + ") drawing " + png};
  return {};
}

status write_diag(const std::vector<sim_result>& rs, double step_s, const std::string& file) {
  std::ofstream out(file);
  if (!out) return error::from_errno(file);
  out << "# hour algorithm hosts_on util_on hosts_below_half kW moves\n";
  const size_t steps = rs.empty() ? 0 : rs[0].fleet_kw.size();
  for (size_t s = 0; s < steps; ++s)
    for (const auto& r : rs)
      out << (s + 0.5) * step_s / 3600 << " " << r.algorithm << " " << r.hosts_on[s] << " " << r.util_on[s] << " "
          << r.hosts_light[s] << " " << r.fleet_kw[s] << " " << (s < r.step_moves.size() ? r.step_moves[s] : 0)
          << "\n";
  if (!out) return error::from_errno(file);
  return {};
}

}  // namespace magnet::bench::place
