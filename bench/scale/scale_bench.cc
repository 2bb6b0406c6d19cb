// The host daemon's parts at 100 and 1,000 VMs, without VMs, root or
// vsock (bench/scale/README.md says what each figure is):
//   * the registry's pass (host/registry, reconcile()) over libvirt's test
//     driver with N running domains, and its reading of /proc for N VMs'
//     threads, with /proc as it is and with --procs more processes: one
//     walk of /proc per VM grows as VMs x processes, one per pass does not;
//   * the metrics tick (host/metrics vm_metrics::sample, every VM's stats
//     copied for publishing) and the feed of the tick's streamed records;
//   * the /metrics render (host/export, OpenMetrics, both details);
//   * delivery (host/deliver): every VM's guest subscribed as the agent is,
//     over AF_UNIX socket pairs, the daemon's 100 ms tick in real time;
//   * memory per VM: the C++ heap's live bytes (operator new counted) of
//     each part after it is set up; the registry's RSS too.
// Rounds interleave the Ns (order rotated each round); medians (min-max)
// over rounds.  Targets (issue 23, item 3) are reported, never asserted.
//
//   scale_bench [--vms 100,1000] [--rounds 5] [--procs 1000] [--json] ...
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../summary.h"
#include "deliver_stage.h"
#include "magnet/log.h"
#include "stages.h"

using namespace magnet::bench;
using ojson = nlohmann::ordered_json;

namespace {

constexpr double kTickTargetPct = 5.0;     // of one core, at 1,000 VMs
constexpr double kScrapeTargetMs = 20.0;   // median wall, at 1,000 VMs
constexpr unsigned kTargetVms = 1000;
constexpr double kTickMs = 100;  // the daemon's tick (host/daemon/src/tick.cc)

// CPU ms spent at every tick, as % of one core.
double core_pct(double ms_per_tick) { return 100.0 * ms_per_tick / kTickMs; }

struct options {
  std::vector<unsigned> vms{100, 1000};
  unsigned rounds = 5, ticks = 10, passes = 3, renders = 10, deliver_ticks = 20, procs = 1000;
  bool json = false, deliver = true;
};

// One N: its parts, set up once, and what every round measured.
struct point {
  unsigned n = 0;
  std::unique_ptr<registry_stage> reg;
  std::unique_ptr<tick_stage> tick;
  std::unique_ptr<deliver_stage> del;
  magnet::host::exposition_input page;
  size_t bytes_full = 0, bytes_coarse = 0;
  std::vector<double> reg_cpu, reg_wall, reg_told, tick_cpu, tick0_cpu, feed_cpu, full_wall, full_cpu, coarse_wall,
      coarse_cpu;
  std::vector<double> del_ms, del_pct, del_fps;
  std::vector<double> proc_vm[2], proc_pass[2];  // [0] /proc as it is, [1] with --procs more
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "scale_bench: %s\nusage: scale_bench [--vms 100,1000] [--rounds N] [--ticks N] [--passes N]\n"
               "       [--renders N] [--deliver-ticks N] [--procs N] [--no-deliver] [--json]\n",
               why.c_str());
  std::exit(2);
}

unsigned count(const char* flag, const std::string& s, unsigned lo, unsigned hi) {
  char* end = nullptr;
  unsigned long v = std::strtoul(s.c_str(), &end, 10);
  if (s.empty() || *end || v < lo || v > hi)
    usage(std::string(flag) + ": '" + s + "' is not a count from " + std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<unsigned>(v);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--vms") {
      o.vms.clear();
      std::string list = value();
      for (size_t at = 0; at <= list.size();) {
        size_t comma = std::min(list.find(',', at), list.size());
        o.vms.push_back(count("--vms", list.substr(at, comma - at), 1, 10000));
        at = comma + 1;
      }
    } else if (a == "--rounds") o.rounds = count("--rounds", value(), 1, 1000);
    else if (a == "--ticks") o.ticks = count("--ticks", value(), 1, 100000);
    else if (a == "--passes") o.passes = count("--passes", value(), 1, 1000);
    else if (a == "--renders") o.renders = count("--renders", value(), 1, 10000);
    else if (a == "--deliver-ticks") o.deliver_ticks = count("--deliver-ticks", value(), 1, 10000);
    else if (a == "--procs") o.procs = count("--procs", value(), 0, 5000);
    else if (a == "--no-deliver") o.deliver = false;
    else if (a == "--json") o.json = true;
    else if (a == "--help" || a == "-h") {
      std::printf("usage: scale_bench [--vms 100,1000] [--rounds 5] [--ticks 10] [--passes 3] [--renders 10]\n"
                  "       [--deliver-ticks 20] [--procs 1000] [--no-deliver] [--json]\n"
                  "bench/scale/README.md says what each figure is.\n");
      std::exit(0);
    } else usage("unknown argument '" + a + "'");
  }
  return o;
}

// Room for N guests' socket pairs and the test driver's connection.
void raise_fd_limit(const options& o) {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  const rlim_t want = 2 * static_cast<rlim_t>(*std::max_element(o.vms.begin(), o.vms.end())) * o.vms.size() + 256;
  if (r.rlim_cur >= want) return;
  r.rlim_cur = std::min(want, r.rlim_max);
  setrlimit(RLIMIT_NOFILE, &r);
  if (r.rlim_cur < want && o.deliver)
    throw std::runtime_error("the open-file limit " + std::to_string(r.rlim_max) + " is below the " +
                             std::to_string(want) + " the guests' socket pairs need (or --no-deliver)");
}

void set_up(point& p, const std::string& dir, const options& o) {
  p.reg = std::make_unique<registry_stage>(write_node_file(dir, p.n), p.n);
  p.tick = std::make_unique<tick_stage>(p.n);
  p.page = p.tick->world().exposition();
  p.bytes_full = render_once(p.page, magnet::host::histogram_detail::full).bytes;
  p.bytes_coarse = render_once(p.page, magnet::host::histogram_detail::coarse).bytes;
  if (o.deliver) {
    auto* t = p.tick.get();
    p.del = std::make_unique<deliver_stage>(p.n, [t](uint32_t vm) -> const auto& { return t->stats(vm); });
  }
}

// One round of everything but /proc for @p.
void measure(point& p, const options& o) {
  for (unsigned i = 0; i < o.passes; ++i) {
    auto r = p.reg->run();
    p.reg_cpu.push_back(r.cpu_ms);
    p.reg_wall.push_back(r.wall_ms);
    p.reg_told.push_back(static_cast<double>(r.told));
  }
  auto t = p.tick->run(o.ticks);
  p.tick_cpu.push_back(t.cpu_ms);
  p.feed_cpu.push_back(t.feed_cpu_ms);
  p.tick0_cpu.push_back(p.tick->run_without_link(o.ticks).cpu_ms);
  for (unsigned i = 0; i < o.renders; ++i) {
    auto f = render_once(p.page, magnet::host::histogram_detail::full);
    auto c = render_once(p.page, magnet::host::histogram_detail::coarse);
    p.full_wall.push_back(f.wall_ms);
    p.full_cpu.push_back(f.cpu_ms);
    p.coarse_wall.push_back(c.wall_ms);
    p.coarse_cpu.push_back(c.cpu_ms);
  }
  if (p.del) {
    auto w = p.del->run(o.deliver_ticks);
    p.del_ms.push_back(w.cpu_ms_per_tick);
    p.del_pct.push_back(w.core_pct);
    p.del_fps.push_back(w.frames_per_s);
  }
}

// The /proc reading of one round: /proc as it is and with --procs more
// processes (the order alternates by round); the entries /proc had.
void measure_proc(std::vector<point*>& order, unsigned round, const options& o, std::vector<double> (&entries)[2]) {
  for (int k = 0; k < 2; ++k) {
    const int cond = round % 2 ? 1 - k : k;
    if (cond == 1 && o.procs == 0) continue;
    std::optional<extra_processes> more;
    if (cond == 1) more.emplace(o.procs);
    entries[cond].push_back(proc_entries());
    for (point* p : order) {
      p->proc_vm[cond].push_back(proc_pass_ms(p->n, true));
      p->proc_pass[cond].push_back(proc_pass_ms(p->n, false));
    }
  }
}

ojson stat(const std::vector<double>& v) {
  if (v.empty()) return nullptr;
  summary s = summarize(v);
  return ojson{{"median", s.med}, {"min", s.min}, {"max", s.max}};
}

std::string cell(const std::vector<double>& v, const char* fmt = "%.2f") {
  if (v.empty()) return "-";
  summary s = summarize(v);
  char a[32], b[32], c[32], out[112];
  std::snprintf(a, sizeof a, fmt, s.med);
  std::snprintf(b, sizeof b, fmt, s.min);
  std::snprintf(c, sizeof c, fmt, s.max);
  std::snprintf(out, sizeof out, "%s (%s-%s)", a, b, c);
  return out;
}

double med(const std::vector<double>& v) { return summarize(v).med; }

}  // namespace


namespace {

const point* at(const std::vector<point>& ps, unsigned n) {
  for (const auto& p : ps)
    if (p.n == n) return &p;
  return nullptr;
}

// CPU µs per pass that each added process costs: (with more - as is) / added.
double per_process_us(const std::vector<double> (&v)[2], const std::vector<double> (&entries)[2]) {
  if (v[1].empty() || entries[1].empty()) return 0;
  const double added = med(entries[1]) - med(entries[0]);
  return added > 0 ? 1000.0 * (med(v[1]) - med(v[0])) / added : 0;
}

// What one walk of /proc costs per process in it, µs: the per-VM way's
// cost per added process over its n walks.
double walk_us(const point& p, const std::vector<double> (&entries)[2]) {
  return per_process_us(p.proc_vm, entries) / p.n;
}

// Walks of /proc per pass that the one-walk-per-pass way's cost per added
// process amounts to (about 1; the per-VM way: n).
double walks_per_pass(const point& p, const std::vector<double> (&entries)[2]) {
  const double w = walk_us(p, entries);
  return w > 0 ? per_process_us(p.proc_pass, entries) / w : 0;
}

// Each target: its figure, its bound and MET/MISS (absent when the run has
// no 1,000 VMs, or no --procs for the /proc one).
ojson targets(const std::vector<point>& ps, const std::vector<double> (&entries)[2]) {
  ojson out = ojson::array();
  auto add = [&](const char* name, double value, double bound, const char* unit) {
    out.push_back({{"target", name}, {"value", value}, {"bound", bound}, {"unit", unit}, {"met", value <= bound}});
  };
  if (const point* p = at(ps, kTargetVms)) {
    add("tick <= 5 % of a core at 1,000 VMs (vm_metrics sample + stats copies), one --link",
        core_pct(med(p->tick_cpu)), kTickTargetPct, "% of a core");
    add("tick <= 5 % of a core at 1,000 VMs (vm_metrics sample + stats copies), no --link",
        core_pct(med(p->tick0_cpu)), kTickTargetPct, "% of a core");
    if (!p->del_pct.empty())
      add("tick (no --link) + delivery to 1,000 subscribed guests <= 5 % of a core (informative)",
          core_pct(med(p->tick0_cpu)) + med(p->del_pct), kTickTargetPct, "% of a core");
    add("scrape <= 20 ms at 1,000 VMs (OpenMetrics, full detail, median wall)", med(p->full_wall), kScrapeTargetMs, "ms");
  }
  // Walks of /proc per pass, as the added processes' cost says: the
  // one-walk-per-pass way's cost per added process over what one walk costs
  // per process (the per-VM way's, divided by its N walks).
  if (const point* p = at(ps, kTargetVms); p && walk_us(*p, entries) > 0)
    add("registry's /proc reading does not grow as VMs x processes: walks of /proc per pass at 1,000 VMs "
        "(a walk per VM: 1,000)",
        walks_per_pass(*p, entries), 2.0, "walks");
  return out;
}

ojson to_json(const std::vector<point>& ps, const std::vector<double> (&entries)[2], const options& o) {
  ojson j{{"rounds", o.rounds}, {"ticks", o.ticks}, {"passes", o.passes}, {"renders", o.renders},
          {"deliver_ticks", o.deliver ? o.deliver_ticks : 0}, {"extra_procs", o.procs},
          {"proc_entries", {stat(entries[0]), stat(entries[1])}}, {"points", ojson::array()}};
  for (const auto& p : ps) {
    const double s = p.tick->heap_per_vm, r = p.reg->heap_per_vm, d = p.del ? p.del->heap_per_vm : 0;
    j["points"].push_back(
        {{"vms", p.n},
         {"registry", {{"first_pass_cpu_ms", p.reg->first.cpu_ms}, {"first_pass_wall_ms", p.reg->first.wall_ms},
                       {"pass_cpu_ms", stat(p.reg_cpu)}, {"pass_wall_ms", stat(p.reg_wall)},
                       {"vms_without_id_first_pass", p.reg->without_id},
                       {"distinct_ids_first_pass", p.reg->distinct_ids},
                       {"distinct_ids_now", p.reg->id_census().first}, {"vms_without_id_now", p.reg->id_census().second},
                       {"vms_told_again_per_pass", stat(p.reg_told)}}},
         {"proc", {{"walk_per_vm_ms", {stat(p.proc_vm[0]), stat(p.proc_vm[1])}},
                   {"walk_per_pass_ms", {stat(p.proc_pass[0]), stat(p.proc_pass[1])}},
                   {"per_process_us", {{"walk_per_vm", per_process_us(p.proc_vm, entries)},
                                       {"walk_per_pass", per_process_us(p.proc_pass, entries)}}},
                   {"one_walk_us_per_process", walk_us(p, entries)},
                   {"walks_per_pass", walks_per_pass(p, entries)}}},
         {"tick", {{"cpu_ms", stat(p.tick_cpu)}, {"core_pct", core_pct(med(p.tick_cpu))},
                   {"no_link_cpu_ms", stat(p.tick0_cpu)}, {"no_link_core_pct", core_pct(med(p.tick0_cpu))},
                   {"feed_cpu_ms", stat(p.feed_cpu)},
                   {"records_per_vm", tick_stage::kRecordsPerVm}}},
         {"scrape", {{"full", {{"bytes", p.bytes_full}, {"wall_ms", stat(p.full_wall)}, {"cpu_ms", stat(p.full_cpu)}}},
                     {"coarse", {{"bytes", p.bytes_coarse}, {"wall_ms", stat(p.coarse_wall)}, {"cpu_ms", stat(p.coarse_cpu)}}}}},
         {"deliver", {{"cpu_ms_per_tick", stat(p.del_ms)}, {"core_pct", stat(p.del_pct)}, {"frames_per_s", stat(p.del_fps)}}},
         {"memory_per_vm_bytes", {{"registry_heap", r}, {"metrics_heap", s}, {"deliver_heap", d},
                                  {"total_heap", r + s + d}, {"registry_rss", p.reg->rss_per_vm}}}});
  }
  j["targets"] = targets(ps, entries);
  return j;
}

void print_parts(const std::vector<point>& ps, const std::vector<double> (&entries)[2], const options& o) {
  std::printf("registry pass (reconcile) over libvirt's test driver, %u passes a round; ms\n", o.passes);
  std::printf("%6s %15s %22s %22s %14s %12s %14s\n", "VMs", "first pass CPU", "pass CPU", "pass wall",
              "ids 1st/now", "id 0 now", "told/pass");
  for (const auto& p : ps) {
    auto [ids, zero] = p.reg->id_census();
    char idc[32];
    std::snprintf(idc, sizeof idc, "%zu/%zu", p.reg->distinct_ids, ids);
    std::printf("%6u %15.1f %22s %22s %14s %12zu %14s\n", p.n, p.reg->first.cpu_ms, cell(p.reg_cpu).c_str(),
                cell(p.reg_wall).c_str(), idc, zero, cell(p.reg_told, "%.0f").c_str());
  }
  std::printf("\n/proc read for N VMs' threads, CPU ms a pass; /proc with %s entries, then %s (--procs %u)\n",
              cell(entries[0], "%.0f").c_str(), cell(entries[1], "%.0f").c_str(), o.procs);
  std::printf("%6s %-22s %26s %26s %16s\n", "VMs", "vhost workers from", "as is", "with more", "us/process/pass");
  for (const auto& p : ps) {
    std::printf("%6u %-22s %26s %26s %16.2f\n", p.n, "a /proc walk per VM", cell(p.proc_vm[0]).c_str(),
                cell(p.proc_vm[1]).c_str(), per_process_us(p.proc_vm, entries));
    std::printf("%6u %-22s %26s %26s %16.2f\n", p.n, "one walk per pass", cell(p.proc_pass[0]).c_str(),
                cell(p.proc_pass[1]).c_str(), per_process_us(p.proc_pass, entries));
  }
  for (const auto& p : ps)
    if (walk_us(p, entries) > 0)
      std::printf("%6u VMs: one walk of /proc costs %.2f us per process in it; a pass walking once per pass "
                  "costs as %.2f walks\n", p.n, walk_us(p, entries), walks_per_pass(p, entries));
  std::printf("\nmetrics tick (vm_metrics sample + stats copies), %u ticks a round; feed: %u vmnet.queue records/VM\n",
              o.ticks, tick_stage::kRecordsPerVm);
  std::printf("%6s %-8s %26s %12s %26s\n", "VMs", "--link", "tick CPU ms", "% of a core", "feed CPU ms");
  for (const auto& p : ps) {
    std::printf("%6u %-8s %26s %12.2f %26s\n", p.n, "one", cell(p.tick_cpu, "%.3f").c_str(),
                core_pct(med(p.tick_cpu)), cell(p.feed_cpu, "%.3f").c_str());
    std::printf("%6u %-8s %26s %12.2f %26s\n", p.n, "none", cell(p.tick0_cpu, "%.3f").c_str(),
                core_pct(med(p.tick0_cpu)), "");
  }
}

void print_rest(const std::vector<point>& ps, const options& o) {
  std::printf("\n/metrics render, OpenMetrics, %u a round per detail; ms\n", o.renders);
  std::printf("%6s %-7s %10s %26s %26s\n", "VMs", "detail", "MB", "wall", "CPU");
  for (const auto& p : ps) {
    std::printf("%6u %-7s %10.2f %26s %26s\n", p.n, "full", p.bytes_full / 1e6, cell(p.full_wall).c_str(),
                cell(p.full_cpu).c_str());
    std::printf("%6u %-7s %10.2f %26s %26s\n", p.n, "coarse", p.bytes_coarse / 1e6, cell(p.coarse_wall).c_str(),
                cell(p.coarse_cpu).c_str());
  }
  if (o.deliver) {
    std::printf("\ndelivery: every VM's guest subscribed (periodic 100 ms, every stat), %u real ticks a round\n",
                o.deliver_ticks);
    std::printf("%6s %26s %26s %26s\n", "VMs", "CPU ms per tick", "% of a core", "frames/s");
    for (const auto& p : ps)
      std::printf("%6u %26s %26s %26s\n", p.n, cell(p.del_ms).c_str(), cell(p.del_pct).c_str(),
                  cell(p.del_fps, "%.0f").c_str());
  }
  std::printf("\nmemory per VM, bytes: C++ heap live bytes (operator new counted) of each part; RSS of the registry\n");
  std::printf("%6s %10s %10s %10s %10s %22s\n", "VMs", "registry", "metrics", "delivery", "total", "registry RSS (+libvirt)");
  for (const auto& p : ps) {
    const int64_t d = p.del ? p.del->heap_per_vm : 0;
    std::printf("%6u %10lld %10lld %10lld %10lld %22lld\n", p.n, (long long)p.reg->heap_per_vm,
                (long long)p.tick->heap_per_vm, (long long)d,
                (long long)(p.reg->heap_per_vm + p.tick->heap_per_vm + d), (long long)p.reg->rss_per_vm);
  }
}

void report(const std::vector<point>& ps, const std::vector<double> (&entries)[2], const options& o) {
  if (o.json) {
    std::printf("%s\n", to_json(ps, entries, o).dump().c_str());
    return;
  }
  print_parts(ps, entries, o);
  print_rest(ps, o);
  std::printf("\n");
  for (const auto& t : targets(ps, entries))
    std::printf("%-4s %s: %.2f %s (bound %.1f)\n", t["met"].get<bool>() ? "MET" : "MISS",
                t["target"].get<std::string>().c_str(), t["value"].get<double>(), t["unit"].get<std::string>().c_str(),
                t["bound"].get<double>());
}

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  magnet::set_log_verbosity(0);  // the registry's -v lines are not the figures
  raise_fd_limit(o);
  // The test driver's node files, removed however the run ends.
  struct temp_dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("magnet-scale-" + std::to_string(getpid()));
    temp_dir() { std::filesystem::create_directories(path); }
    ~temp_dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  std::vector<point> points(o.vms.size());
  for (size_t i = 0; i < points.size(); ++i) {
    points[i].n = o.vms[i];
    if (!o.json) std::fprintf(stderr, "scale_bench: setting up %u VMs\n", points[i].n);
    set_up(points[i], dir.path.string(), o);
  }
  std::vector<double> entries[2];
  for (unsigned r = 0; r < o.rounds; ++r) {
    if (!o.json) std::fprintf(stderr, "scale_bench: round %u of %u\n", r + 1, o.rounds);
    std::vector<point*> order;
    for (size_t i = 0; i < points.size(); ++i) order.push_back(&points[(i + r) % points.size()]);
    for (point* p : order) measure(*p, o);
    measure_proc(order, r, o, entries);
  }
  report(points, entries, o);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "scale_bench: %s\n", e.what());
  return 1;
}
