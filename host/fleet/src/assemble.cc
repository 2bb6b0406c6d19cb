#include "magnet/fleet/assemble.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace magnet::fleet {

namespace {

// A PromQL duration: whole seconds where it can, else milliseconds.
std::string promql_duration(uint64_t ms) {
  ms = std::max<uint64_t>(ms, 1);
  return ms % 1000 ? std::to_string(ms) + "ms" : std::to_string(ms / 1000) + "s";
}

}  // namespace

fleet_queries make_queries(uint64_t window_ms) {
  const std::string w = "[" + promql_duration(window_ms) + "]";
  // The peak: the rate over a tenth of the window, sampled twenty times
  // across it (a subquery), and its kPeakQuantile quantile: a burst of a minute
  // in ten shows, a single scrape's jitter does not.
  const std::string inner = "[" + promql_duration(window_ms / 10) + "]";
  const std::string sub = "[" + promql_duration(window_ms) + ":" + promql_duration(window_ms / 20) + "]";
  char quantile[16];
  std::snprintf(quantile, sizeof quantile, "%g", kPeakQuantile);
  const std::string run = "magnet_vm_vcpu_seconds_total{state=\"run\"}";
  // By uuid alone: a VM that moved within the window has series on both
  // hosts (instances), and their rates over the window add up to its own.
  return {
      "magnet_libvirt_up",
      "magnet_vm_info",
      "avg_over_time(magnet_host_power_watts" + w + ")",
      "sum by (uuid) (avg_over_time(magnet_vm_power_watts" + w + "))",
      "sum by (uuid) (rate(" + run + w + "))",
      "quantile_over_time(" + std::string(quantile) + ", (sum by (uuid) (rate(" + run + inner + ")))" + sub + ")",
      // Two sums: rate() drops the names, so one rate of both would hold
      // two series of one label set.
      "8 * (sum by (uuid) (rate(magnet_vm_network_transmit_bytes_total" + w +
          ")) + sum by (uuid) (rate(magnet_vm_network_receive_bytes_total" + w + ")))",
  };
}

result<prom_inputs> gather(const query_fn& q, const fleet_queries& qs) {
  prom_inputs in;
  const std::pair<const std::string*, std::vector<sample>*> each[] = {
      {&qs.daemons, &in.daemons},   {&qs.vm_info, &in.vm_info},   {&qs.host_watts, &in.host_watts},
      {&qs.vm_watts, &in.vm_watts}, {&qs.cpu_mean, &in.cpu_mean}, {&qs.cpu_peak, &in.cpu_peak},
      {&qs.net_bps, &in.net_bps},
  };
  for (const auto& [query, out] : each) {
    auto r = q(*query);
    if (!r) return r.err();
    *out = std::move(r).value();
  }
  return in;
}

namespace {

std::string label_of(const sample& s, const std::string& k) {
  auto it = s.labels.find(k);
  return it == s.labels.end() ? "" : it->second;
}

// Values by one label; a non-finite value (a NaN from a counter reset in
// an odd place) counts as no value.
std::map<std::string, double> by_label(const std::vector<sample>& v, const std::string& k) {
  std::map<std::string, double> out;
  for (const auto& s : v)
    if (std::isfinite(s.value)) out[label_of(s, k)] += s.value;
  return out;
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// The hosts' names and instance labels are unique, and each instance has a
// daemon in Prometheus.
status check_hosts(const std::vector<host_input>& hosts, const prom_inputs& in) {
  std::set<std::string> names, instances, known;
  for (const auto& s : in.daemons) known.insert(label_of(s, "instance"));
  for (const auto& h : hosts) {
    if (!names.insert(h.name).second) return error{"host " + h.name + " is given twice (--host)"};
    if (!instances.insert(h.instance).second)
      return error{"hosts share the Prometheus instance label '" + h.instance + "' (--host-label)"};
    if (!known.count(h.instance))
      return error{"host " + h.name + " is missing from Prometheus: no magnet_libvirt_up{instance=\"" +
                   h.instance + "\"} (instances with a magnet daemon there: " + joined(known) +
                   "). Is its daemon scraped with instance=\"" + h.instance +
                   "\" (magnet fleet-config), or is its label another (--host-label " + h.name +
                   "=INSTANCE)?"};
  }
  return {};
}

place::host_spec host_of(const host_input& h, const prom_inputs& in, std::vector<std::string>& notes) {
  place::host_spec s;
  s.name = h.name;
  s.cpus = h.facts.cpus;
  s.mem_bytes = h.facts.mem_bytes;
  s.link_bps = h.link_bps;
  s.model = h.model;
  const auto watts = by_label(in.host_watts, "instance");
  if (auto it = watts.find(h.instance); it != watts.end()) {
    s.watts_now = it->second;
  } else {
    notes.push_back("host " + h.name + ": no magnet_host_power_watts in Prometheus (its daemon has no power "
                    "source): its watts now are its model's");
  }
  return s;
}

struct demand_maps {
  std::map<std::string, double> cpu, peak, net, watts;
};

place::vm_demand vm_of(const host_input& h, const domain_facts& d, const demand_maps& m,
                       std::vector<std::string>& notes) {
  place::vm_demand v;
  v.name = d.name;
  v.uuid = d.uuid;
  v.host = h.name;
  v.vcpus = d.vcpus;
  v.mem_bytes = d.mem_bytes;
  if (auto it = m.cpu.find(d.uuid); it != m.cpu.end()) {
    v.cpu_cores = std::clamp(it->second, 0.0, d.vcpus);
    auto p = m.peak.find(d.uuid);
    v.cpu_peak_cores = std::clamp(p != m.peak.end() ? p->second : 0.0, v.cpu_cores, d.vcpus);
  } else {
    notes.push_back("VM " + d.name + " on " + h.name + ": no vCPU run time in Prometheus " +
                    "(magnet_vm_vcpu_seconds_total: its daemon's sched probe off, or no vCPU thread seen): "
                    "its CPU demand is taken as 0");
  }
  if (auto it = m.net.find(d.uuid); it != m.net.end()) v.net_bps = std::max(it->second, 0.0);
  if (auto it = m.watts.find(d.uuid); it != m.watts.end()) v.watts_now = it->second;
  v.migratable = d.persistent && d.running;
  if (!d.persistent)
    notes.push_back("VM " + d.name + " on " + h.name +
                    " stays: it is transient (no persistent definition), and a failed move could leave it "
                    "defined nowhere");
  else if (!d.running)
    notes.push_back("VM " + d.name + " on " + h.name + " stays: it is not running (paused or shutting down)");
  return v;
}

}  // namespace

result<assembled> assemble_fleet(const std::vector<host_input>& hosts, const prom_inputs& in) {
  if (auto st = check_hosts(hosts, in); !st) return st.err();
  assembled out;
  const demand_maps m{by_label(in.cpu_mean, "uuid"), by_label(in.cpu_peak, "uuid"),
                      by_label(in.net_bps, "uuid"), by_label(in.vm_watts, "uuid")};
  std::set<std::pair<std::string, std::string>> followed;  // (instance, uuid)
  for (const auto& s : in.vm_info) followed.emplace(label_of(s, "instance"), label_of(s, "uuid"));
  for (const auto& h : hosts) out.fleet.hosts.push_back(host_of(h, in, out.notes));
  for (const auto& h : hosts) {
    std::vector<const domain_facts*> doms;
    for (const auto& d : h.facts.domains) doms.push_back(&d);
    std::sort(doms.begin(), doms.end(), [](auto* a, auto* b) { return a->name < b->name; });
    for (const auto* d : doms) {
      if (!followed.count({h.instance, d->uuid}))
        return error{"VM " + d->name + " (uuid " + d->uuid + ") runs on host " + h.name + " (" + h.uri +
                     ") but Prometheus has no magnet_vm_info{instance=\"" + h.instance + "\",uuid=\"" +
                     d->uuid + "\"}: its daemon does not follow it, or has not been scraped since it started"};
      out.fleet.vms.push_back(vm_of(h, *d, m, out.notes));
    }
  }
  return out;
}

}  // namespace magnet::fleet
