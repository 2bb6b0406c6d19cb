// magnet host: the daemon's options, from its settings file and the
// command line, parsed and handed to it.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "magnet/config_file.h"
#include "magnet/daemon/daemon.h"
#include "magnet/daemon/seccomp.h"
#include "magnet/events.h"
#include "magnet/export/openmetrics.h"
#include "magnet/filters/config.h"

// The settings file read when --config names none (CMake sets it from the
// install prefix: /etc/magnet/magnet.conf for /usr).
#ifndef MAGNET_CONFIG_FILE
#define MAGNET_CONFIG_FILE "/etc/magnet/magnet.conf"
#endif

namespace magnet::host {

static const char* kHostHelp =
    "Usage: magnet host [options]\n"
    "\n"
    "The host daemon, in the foreground: follows the VMs libvirt runs, tags\n"
    "their events with a VM id in the kernel, and turns the stream into\n"
    "per-VM views (docs/engine.md).  SIGHUP reloads the view definitions and\n"
    "the --http-tokens file (a bad file is refused and the old ones stay);\n"
    "SIGTERM/SIGINT drain and stop.\n"
    "\n"
    "      --config FILE      settings file (default " MAGNET_CONFIG_FILE ",\n"
    "                         read when it exists; /dev/null: none): 'key = value'\n"
    "                         lines and '#' comments; the keys are the options\n"
    "                         below by their long names, but those that print\n"
    "                         and exit (flags: yes or no; link and http-host on\n"
    "                         several lines); options given here override it\n"
    "      --uri URI          libvirt connection (default qemu:///system)\n"
    "      --views FILE       YAML view definitions (default: built in,\n"
    "                         see --print-default-views)\n"
    "      --socket PATH      query socket (default /run/magnet/host.sock)\n"
    "      --socket-group GRP group that may read the query socket (default:\n"
    "                         root only)\n"
    "  -p, --probes LIST      probes (default net.dev,net.drop,vmnet.queue,sched,\n"
    "                         kvm.exit,kvm.entry,kvm.wakeup,blk)\n"
    "  -b, --buffer SIZE      ring buffer size (default 16M)\n"
    "      --vm-quota N       at most N events/s of one VM per CPU onto the\n"
    "                         stream, in bursts of 0.1 s worth (default 200000;\n"
    "                         0: none); the rest is that VM's lost events\n"
    "      --sample PROBE=N[,PROBE=N...]\n"
    "                         stream 1 in N of a probe's records, per CPU (e.g.\n"
    "                         vmnet.queue=16,net.dev=8; not sched or kvm.*):\n"
    "                         less work per packet; the in-kernel counts stay\n"
    "                         exact, counted figures count a sampled record N\n"
    "                         times, views and quantiles see 1 in N\n"
    "                         (docs/operations.md, \"Cost and sizing\")\n"
    "  -d, --duration T       stop after T\n"
    "      --no-seccomp       no syscall filter after setup (for debugging: by\n"
    "                         default the daemon may make only the calls its work\n"
    "                         needs, and dies of SIGSYS on any other, naming it)\n"
    "\n"
    "Delivery of each VM's own view into it (docs/guest.md), on by default:\n"
    "      --no-deliver       none\n"
    "      --vsock MODE       auto (listen when this host runs vsock guests,\n"
    "                         i.e. /dev/vhost-vsock exists), on, off\n"
    "      --vsock-port N     vsock port (default 5300, any CID)\n"
    "      --vsock-any-port   accept vsock guests' connections from any source\n"
    "                         port (default: below 1024 only, which only a\n"
    "                         guest's root can bind)\n"
    "      --no-serial        do not use the VMs' virtio-serial view channels\n"
    "      --link DEV[@NETNS][=RATE]\n"
    "                         a shared host link VMs' traffic crosses (repeat\n"
    "                         for more): its capacity RATE (e.g. 20mbit), or\n"
    "                         read from its root qdisc; gives each VM its\n"
    "                         available bandwidth there\n"
    "\n"
    "Prometheus metrics and the live dashboard (docs/metrics.md, docs/dashboard.md):\n"
    "      --http [ADDR:PORT] serve /metrics and the live dashboard (/) over\n"
    "                         HTTP there (default 127.0.0.1:9477; PORT 0: any\n"
    "                         free port); an address other than loopback needs\n"
    "                         --http-tokens (docs/dashboard.md)\n"
    "      --http-tokens FILE tokens every HTTP request must carry, one a line:\n"
    "                         'TOKEN all' (operator) or 'TOKEN DOMAIN-or-UUID'\n"
    "                         (a tenant: that VM's page, stream and views only);\n"
    "                         the file must be mode 0600 or 0400\n"
    "      --http-host NAME   a name (NAME or NAME:PORT) the Host header of a\n"
    "                         request may carry besides localhost, 127.0.0.1,\n"
    "                         [::1] and the --http address; others get 421\n"
    "                         (repeat for more; e.g. the name of a reverse proxy)\n"
    "      --http-stream-interval T\n"
    "                         one dashboard stream event every T (default 500ms)\n"
    "      --metrics-detail full|coarse\n"
    "                         /metrics' histograms: every log2 bound (default),\n"
    "                         or one in four (a factor of 16 between bounds; a\n"
    "                         page about a third the size)\n"
    "      --list-metrics     print the series /metrics has and exit\n"
    "      --json             with --list-metrics: one JSON array of the names\n"
    "\n"
    "The host's power and each VM's share of it on /metrics (docs/placement.md):\n"
    "from RAPL where the host has it, else from a power model, else none (no\n"
    "power figures at all; the log says which at start).\n"
    "      --powercap-root DIR\n"
    "                         the powercap tree whose package zones (intel-rapl:N)\n"
    "                         count the host's energy (default /sys/class/powercap;\n"
    "                         a tree given that cannot be read stops the daemon)\n"
    "      --power-model FILE the host's power as a function of its CPU use,\n"
    "                         SPECpower-style, when it has no RAPL: 'idle = W',\n"
    "                         'full = W' and 'point = UTIL% W' lines\n"
    "\n"
    "      --check-views FILE validate a view file and exit\n"
    "      --print-default-views\n"
    "                         print the built-in view definitions (YAML) and exit\n"
    "\n" MAGNET_HELP_DURATIONS;

namespace {

// Every setting of the daemon, from the command line or, one at a time,
// from the settings file; cross-checks come after both (cmd_host).
// @replace: a repeatable option given replaces the values before it (the
// file's) instead of adding to them.
void parse_settings(cli::args& a, daemon_options& o, bool replace) {
  if (auto v = a.optional_value("--http"))  // "--http" alone: loopback, the default port
    o.http = cli::need(parse_http_endpoint(v->empty() ? "127.0.0.1:" + std::to_string(kDefaultHttpPort) : *v),
                       "--http");
  if (auto v = a.value("--http-tokens")) {
    o.http_tokens = cli::need(load_tokens(*v), "--http-tokens");
    o.http_tokens_path = *v;
  }
  if (auto hosts = a.values("--http-host"); !hosts.empty()) {
    if (replace) o.http_hosts.clear();
    for (const auto& h : hosts) o.http_hosts.push_back(cli::need(parse_http_host_name(h), "--http-host"));
  }
  if (auto v = a.value("--http-stream-interval")) {
    uint64_t ns = cli::need(cli::parse_duration_ns(*v), "--http-stream-interval");
    if (ns < 100'000'000 || ns > 60'000'000'000ull)
      throw cli::usage_error("--http-stream-interval: " + *v + " is not between 100ms and 60s");
    o.http_stream_ns = ns;
  }
  if (auto v = a.value("--metrics-detail")) {
    if (*v == "full") o.metrics_detail = histogram_detail::full;
    else if (*v == "coarse") o.metrics_detail = histogram_detail::coarse;
    else throw cli::usage_error("--metrics-detail: '" + *v + "' is not full or coarse");
  }
  if (auto v = a.value("--powercap-root")) {
    if (v->empty()) throw cli::usage_error("--powercap-root: empty");
    o.powercap_root = *v;
  }
  if (auto v = a.value("--power-model")) {
    o.power_model = cli::need(power::load_power_model(*v), "--power-model");
    o.power_model_path = *v;
  }
  if (auto v = a.value("--uri")) o.uri = *v;
  if (auto v = a.value("--views")) o.views_path = *v;
  if (auto v = a.value("--socket")) o.socket_path = *v;
  if (auto v = a.value("--socket-group")) o.socket_group = *v;
  if (a.flag("--no-deliver")) o.deliver = false;
  if (a.flag("--no-seccomp")) o.seccomp = false;
  if (a.flag("--no-serial")) o.delivery.serial = false;
  if (a.flag("--vsock-any-port")) o.delivery.vsock_any_port = true;
  if (auto v = a.value("--vsock")) {
    using m = deliver_options::vsock_mode;
    if (*v == "auto") o.delivery.vsock = m::automatic;
    else if (*v == "on") o.delivery.vsock = m::on;
    else if (*v == "off") o.delivery.vsock = m::off;
    else throw cli::usage_error("--vsock: '" + *v + "' is not auto, on or off");
  }
  if (auto v = a.value("--vsock-port")) {
    uint64_t p = cli::need(cli::parse_count(*v), "--vsock-port");
    if (p > 0xffffffffu) throw cli::usage_error("--vsock-port: " + *v + " is not a 32-bit port");
    o.delivery.vsock_port = static_cast<uint32_t>(p);
  }
  if (auto links = a.values("--link"); !links.empty()) {
    if (replace) o.links.clear();
    for (const auto& l : links) o.links.push_back(cli::need(parse_link_spec(l), "--link"));
  }
  if (auto v = a.value("--probes", "-p")) {
    o.probes = *v;
    (void)cli::need(select_events(o.probes), "--probes");
  }
  if (auto v = a.value("--buffer", "-b")) {
    o.ring_bytes = cli::need(cli::parse_size(*v), "--buffer");
    if (o.ring_bytes < 4096 || (o.ring_bytes & (o.ring_bytes - 1)))
      throw cli::usage_error("--buffer: " + *v + " is not a power of two of at least 4K");
  }
  if (auto v = a.value("--vm-quota")) {
    uint64_t q = *v == "0" ? 0 : cli::need(cli::parse_count(*v), "--vm-quota");
    if (q > 1000000000) throw cli::usage_error("--vm-quota: " + *v + " is above 10^9 events/s");
    o.vm_quota = static_cast<double>(q);
  }
  if (auto v = a.value("--sample")) o.sample = cli::need(parse_sample_list(*v), "--sample");
  if (auto v = a.value("--duration", "-d")) o.duration_ns = cli::need(cli::parse_duration_ns(*v), "--duration");
}

// The settings file's keys: the daemon's options by their long names.
struct setting {
  const char* key;
  bool flag = false;    // "yes" or "no"
  bool repeat = false;  // may be given on several lines
};
const setting kSettings[] = {
    {"uri"},          {"views"},        {"socket"},      {"socket-group"},   {"probes"},
    {"buffer"},       {"vm-quota"},     {"sample"},      {"duration"},
    {"no-seccomp", true}, {"no-deliver", true},
    {"vsock"},        {"vsock-port"},   {"vsock-any-port", true}, {"no-serial", true},
    {"link", false, true}, {"http"},    {"http-tokens"}, {"http-host", false, true},
    {"http-stream-interval"}, {"metrics-detail"}, {"powercap-root"}, {"power-model"},
};

// The settings file @path into @o, each line as its option would be on the
// command line; every error names the file, the line and the key.  A
// missing file is no error unless @given (--config).
void apply_settings_file(const std::string& path, bool given, daemon_options& o) {
  if (!given && ::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return;
  auto entries = load_config(path);
  if (!entries) throw cli::usage_error("--config: " + entries.err().message);
  std::map<std::string, int> first_line;
  for (const auto& e : *entries) {
    const std::string at = path + ":" + std::to_string(e.line) + ": ";
    const setting* s = nullptr;
    for (const auto& k : kSettings)
      if (e.key == k.key) s = &k;
    if (!s)
      throw cli::usage_error(at + "unknown key '" + e.key +
                             "' (the keys are magnet host's options without their dashes)");
    if (auto [it, fresh] = first_line.emplace(e.key, e.line); !fresh && !s->repeat)
      throw cli::usage_error(at + "'" + e.key + "' set again (first on line " +
                             std::to_string(it->second) + ")");
    std::vector<std::string> argv;
    if (s->flag && (e.value == "yes" || e.value == "true")) argv = {"--" + e.key};
    else if (s->flag && e.value != "no" && e.value != "false")
      throw cli::usage_error(at + e.key + ": '" + e.value + "' is not yes or no");
    else if (!s->flag) argv = {"--" + e.key + "=" + e.value};
    cli::args one("host", argv);
    try {
      parse_settings(one, o, false);
      one.finish(0, 0);
    } catch (const cli::usage_error& x) {
      throw cli::usage_error(at + e.key + " = " + e.value + ": " + x.what());
    }
  }
}

}  // namespace

int cmd_host(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kHostHelp, stdout);
    return 0;
  }
  if (a.flag("--print-default-views")) {
    a.finish(0, 0);
    std::fputs(kDefaultViews, stdout);
    return 0;
  }
  if (a.flag("--list-metrics")) {
    const bool json = a.flag("--json");
    a.finish(0, 0);
    if (json)
      std::printf("%s\n", nlohmann::json(metric_series_names()).dump().c_str());
    else
      for (const auto& n : metric_series_names()) std::printf("%s\n", n.c_str());
    return 0;
  }
  if (a.flag("--json")) throw cli::usage_error("--json: only with --list-metrics");
  daemon_options o;
  auto config = a.value("--config");
  apply_settings_file(config ? *config : MAGNET_CONFIG_FILE, config.has_value(), o);
  parse_settings(a, o, true);
  if (!o.http_tokens.empty() && !o.http) throw cli::usage_error("--http-tokens: only with --http");
  if (!o.http_hosts.empty() && !o.http) throw cli::usage_error("--http-host: only with --http");
  if (std::string why = http_access_problem(o); !why.empty()) throw cli::usage_error(why);
  if (std::string why = o.seccomp ? seccomp_uri_problem(o.uri) : ""; !why.empty())
    throw cli::usage_error(why);
  auto check = a.value("--check-views");
  a.finish(0, 0);
  (void)cli::need(select_events(o.probes), "--probes");
  // After both sources: the file may sample what the command line's
  // --probes leaves out.
  (void)cli::need(sampled_types(o.sample, o.probes), "--sample");
  if (check) {
    auto specs = filters::load_views(*check);
    if (!specs) {
      std::fprintf(stderr, "magnet host: %s\n", specs.err().message.c_str());
      return 1;
    }
    filters::engine e;
    if (auto s = filters::add_views(e, *specs); !s) {
      std::fprintf(stderr, "magnet host: %s\n", s.err().message.c_str());
      return 1;
    }
    std::printf("%s: %zu views ok\n", check->c_str(), specs->size());
    return 0;
  }
  return run_daemon(o);
}

}  // namespace magnet::host
