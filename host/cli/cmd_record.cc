#include <net/if.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "magnet/capture/capture.h"
#include "commands.h"
#include "vm_follow.h"
#include "magnet/capture/consumer.h"
#include "magnet/capture/usdt.h"
#include "magnet/events.h"
#include "magnet/filters/predicate.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet::host {

namespace {
std::atomic<bool> g_stop{false};
void on_stop(int) { g_stop.store(true); }
}  // namespace

bool stop_requested() { return g_stop.load(); }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a signal ends the poll at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

static const char* kRecordHelp =
    "Usage: magnet record -o FILE [options]\n"
    "\n"
    "Records kernel events into a self-describing trace file until SIGINT,\n"
    "SIGTERM or --duration; everything buffered is flushed on the way out.\n"
    "A status line (events/s, bytes, lost) goes to stderr each second.\n"
    "\n"
    "  -o, --output FILE      trace file to write (required)\n"
    "  -p, --probes LIST      comma-separated probes or dotted prefixes\n"
    "                         (default: net; 'all' = every probe; see 'magnet probes')\n"
    "  -f, --filter EXPR      filter expression (see docs/engine.md); the parts\n"
    "                         on cpu, tgid, cgroup, vm, abstract id/flow and event\n"
    "                         run in the kernel, the rest before writing; a part\n"
    "                         on vm needs --vm or --uri\n"
    MAGNET_HELP_VM_SELECT
    "      --snap N           a packet capture: one net.pkt.xmit/recv record per\n"
    "                         packet with its first N bytes (1-128) from the\n"
    "                         link-layer header on, as tcpdump -s N; alone unless\n"
    "                         --probes names others (--probes net.pkt without\n"
    "                         --snap keeps 96)\n"
    "  -i, --interface DEV    with --snap: the packets of device DEV of this\n"
    "                         network namespace only, as tcpdump -i DEV\n"
    "      --sample N         keep 1 event in N per probe and CPU\n"
    "      --sample-time T    keep at most 1 event per T per probe and CPU (e.g. 1ms)\n"
    "  -d, --duration T       stop after T (e.g. 10, 2.5s, 500ms)\n"
    "  -b, --buffer SIZE      kernel ring buffer size, power of two (default 16M)\n"
    "      --watermark SIZE   wake the reader when this much is waiting (default buffer/8)\n"
    "      --poll-timeout T   longest a record waits in the buffer (default 100ms)\n"
    "      --usdt BIN[:PID]   also record the application marks (MAGNET_ADD of\n"
    "                         <magnet/usdt.h>) of the binary BIN, in every process\n"
    "                         or in PID, as app.add (docs/instrumentation.md)\n"
    "  -q, --quiet            no status line\n"
    "      --json             at the end, what was recorded as one JSON object on\n"
    "                         standard output: file, probes, records, bytes, lost\n"
    "                         (and vms, name -> id, with --vm or --uri)\n"
    "\n" MAGNET_HELP_DURATIONS;

struct record_opts {
  std::string out;
  vm_select vms;
  std::set<uint16_t> types;
  filters::predicate pred;
  uint64_t sample_every = 0, sample_ns = 0, duration_ns = 0, ring = 16u << 20, watermark = 0,
           poll_ns = 100'000'000, snap = 96;
  uint32_t snap_ifindex = 0, snap_netns_ino = 0;
  bool quiet = false, json = false;
  std::string usdt_binary;  // empty: no application marks
  pid_t usdt_pid = -1;      // -1: every process running usdt_binary
};

// BIN[:PID]: a trailing ":digits" is the process, anything else is part of
// the path.
static void parse_usdt(const std::string& v, record_opts& o) {
  auto colon = v.rfind(':');
  bool has_pid = colon != std::string::npos && colon + 1 < v.size() &&
                 v.find_first_not_of("0123456789", colon + 1) == std::string::npos;
  o.usdt_binary = has_pid ? v.substr(0, colon) : v;
  if (o.usdt_binary.empty()) throw cli::usage_error("--usdt: missing binary path");
  if (has_pid) {
    uint64_t pid = cli::need(cli::parse_count(v.substr(colon + 1)), "--usdt");
    if (pid == 0 || pid > INT32_MAX) throw cli::usage_error("--usdt: bad pid in " + v);
    o.usdt_pid = static_cast<pid_t>(pid);
  }
}

// --snap N and --interface DEV: packet capture, its length and its device.
static void parse_snap(record_opts& o, const std::optional<std::string>& snap,
                       const std::optional<std::string>& iface) {
  if (snap) {
    auto n = cli::need(cli::parse_count(*snap), "--snap");
    if (n < 1 || n > MAGNET_SNAP_MAX)
      throw cli::usage_error("--snap: " + *snap + " bytes is outside 1.." + std::to_string(MAGNET_SNAP_MAX));
    o.snap = n;
    // Both directions, unless --probes chose one (net.pkt.recv: a receiver's
    // view, as tcpdump -Q in).
    if (!o.types.count(MAGNET_EV_NET_PKT_XMIT) && !o.types.count(MAGNET_EV_NET_PKT_RECV))
      o.types.insert({MAGNET_EV_NET_PKT_XMIT, MAGNET_EV_NET_PKT_RECV});
  }
  if (iface) {
    if (!o.types.count(MAGNET_EV_NET_PKT_XMIT) && !o.types.count(MAGNET_EV_NET_PKT_RECV))
      throw cli::usage_error("--interface: only packet capture (--snap or --probes net.pkt) "
                             "records by device");
    o.snap_ifindex = if_nametoindex(iface->c_str());
    if (!o.snap_ifindex)
      throw cli::usage_error("--interface: no device '" + *iface + "' in this network namespace");
    struct stat st {};
    if (stat("/proc/self/ns/net", &st) != 0)
      throw cli::usage_error("--interface: cannot read this network namespace (/proc/self/ns/net)");
    o.snap_netns_ino = static_cast<uint32_t>(st.st_ino);
  }
}

static record_opts parse_record(cli::args& a) {
  record_opts o;
  auto out = a.value("--output", "-o");
  auto probes = a.value("--probes", "-p");
  auto filter = a.value("--filter", "-f");
  auto sample = a.value("--sample");
  auto sample_t = a.value("--sample-time");
  auto dur = a.value("--duration", "-d");
  auto buf = a.value("--buffer", "-b");
  auto wm = a.value("--watermark");
  auto pt = a.value("--poll-timeout");
  auto usdt = a.value("--usdt");
  auto snap = a.value("--snap");
  auto iface = a.value("--interface", "-i");
  o.quiet = a.flag("--quiet", "-q");
  o.json = a.flag("--json");
  o.vms = parse_vm_select(a);
  a.finish(0, 0);
  if (!out) throw cli::usage_error("missing -o FILE");
  o.out = *out;
  // --snap alone records the packets and nothing else, as tcpdump would.
  o.types = cli::need(select_events(probes.value_or(snap ? "net.pkt" : "net")), "--probes");
  parse_snap(o, snap, iface);
  auto pred = filters::predicate::parse(filter.value_or(""));
  if (!pred) throw cli::usage_error("--filter: " + pred.err().message);
  o.pred = std::move(*pred);
  if (o.pred.push().vm && !o.vms.on())
    throw cli::usage_error("--filter: a part on vm needs VM tagging: give --vm or --uri");
  if (!o.vms.on() && (o.types.count(MAGNET_EV_VMNET_QUEUE_TX) || o.types.count(MAGNET_EV_VMNET_QUEUE_RX)) &&
      probes && probes->find("vmnet") != std::string::npos)
    throw cli::usage_error("--probes: vmnet.queue sees only the devices of VMs it knows: give --vm or --uri");
  if (o.pred.push().events) {  // the filter names events: attach only those
    std::set<uint16_t> keep;
    for (auto t : o.types)
      if (o.pred.push().events->count(t)) keep.insert(t);
    if (keep.empty())
      throw cli::usage_error("--filter selects no event among the recorded probes");
    o.types = keep;
  }
  if (sample) o.sample_every = cli::need(cli::parse_count(*sample), "--sample");
  if (o.sample_every > UINT32_MAX) throw cli::usage_error("--sample: too large");
  if (sample_t) o.sample_ns = cli::need(cli::parse_duration_ns(*sample_t), "--sample-time");
  if (dur) o.duration_ns = cli::need(cli::parse_duration_ns(*dur), "--duration");
  if (buf) {
    o.ring = cli::need(cli::parse_size(*buf), "--buffer");
    if (o.ring < 4096 || (o.ring & (o.ring - 1)))
      throw cli::usage_error("--buffer: " + *buf + " is not a power of two of at least 4K");
  }
  if (wm) o.watermark = cli::need(cli::parse_size(*wm), "--watermark");
  if (o.watermark >= o.ring) throw cli::usage_error("--watermark must be below --buffer");
  if (pt) o.poll_ns = cli::need(cli::parse_duration_ns(*pt), "--poll-timeout");
  if (usdt) parse_usdt(*usdt, o);
  return o;
}

// Applies probes, sampling and the kernel part of the filter.
// @only_vms: --vm's ids (empty: no such restriction), and-ed with the
// filter's own vm part.
static status configure(capture& c, const record_opts& o, uint32_t mode,
                        const std::set<uint32_t>& only_vms, std::set<uint16_t>& attached) {
  const auto& pd = o.pred.push();
  std::optional<std::set<uint32_t>> vms = pd.vm;
  if (!only_vms.empty()) {
    if (!vms) vms = only_vms;
    else std::erase_if(*vms, [&](uint32_t v) { return !only_vms.count(v); });
    if (vms->empty()) return error{"--filter and --vm together select no VM"};
  }
  uint32_t active = 0;
  if (pd.cpu) active |= MAGNET_FK_CPU;
  if (pd.tgid) active |= MAGNET_FK_TGID;
  if (pd.cgroup) active |= MAGNET_FK_CGROUP;
  if (vms) active |= MAGNET_FK_VM;
  if (pd.abstract_id) active |= MAGNET_FK_ABSTRACT;
  if (auto s = c.set_filter_sets(active, pd.cpu.value_or(std::set<uint32_t>{}),
                                 pd.tgid.value_or(std::set<uint32_t>{}),
                                 pd.cgroup.value_or(std::set<uint64_t>{}),
                                 vms.value_or(std::set<uint32_t>{}),
                                 pd.abstract_id.value_or(std::set<uint64_t>{}));
      !s)
    return s;
  for (uint16_t t : o.types) {
    c.set_sampling(t, static_cast<uint32_t>(o.sample_every), o.sample_ns);
    const probe_plan* p = c.plan_for(t);
    if (p && p->chosen < 0 && o.types.size() > 1) {
      std::string why;
      for (const auto& ck : p->checks) why += (why.empty() ? "" : "; ") + ck.why;
      std::fprintf(stderr, "magnet: warning: skipping %s: cannot attach here (%s)\n",
                   event_name(t).c_str(), why.c_str());
      continue;
    }
    if (auto s = c.set_mode(t, mode); !s) return s;
    attached.insert(t);
  }
  if (attached.empty()) return error{"none of the selected probes can attach on this kernel"};
  return {};
}

// Polls the ring until the duration passes, SIGINT/SIGTERM or a write
// error, with a status line each second: 0, or 1 when polling failed.
int record_until_stopped(const record_opts& o, capture& cap, ring_consumer& cons,
                         const trace_writer& w, const status& write_status) {
  const uint64_t t0 = monotonic_ns();
  uint64_t next_status = t0 + 1'000'000'000ull, last_recs = 0;
  int poll_ms = static_cast<int>(std::max<uint64_t>(1, o.poll_ns / 1'000'000));
  while (!stop_requested() && write_status) {
    uint64_t now = monotonic_ns();
    if (o.duration_ns && now - t0 >= o.duration_ns) break;
    int wait = poll_ms;
    if (o.duration_ns)
      wait = static_cast<int>(std::min<uint64_t>(wait, (t0 + o.duration_ns - now) / 1'000'000 + 1));
    if (auto r = cons.poll(wait); !r) {
      std::fprintf(stderr, "magnet record: %s\n", r.err().message.c_str());
      return 1;
    }
    now = monotonic_ns();
    if (now >= next_status) {
      cap.rescan_netns();
      uint64_t recs = cons.records();
      if (!o.quiet)
        std::fprintf(stderr, "magnet: %llu events/s, %.1f MiB written, lost %llu\n",
                     static_cast<unsigned long long>(recs - last_recs),
                     static_cast<double>(w.bytes()) / (1 << 20),
                     static_cast<unsigned long long>(cons.lost()));
      last_recs = recs;
      next_status = now + 1'000'000'000ull;
    }
  }
  return 0;
}

// The last words: a line on stderr (not with -q), and with --json the same
// as one object on stdout.
static void print_summary(const record_opts& o, const std::set<uint16_t>& attached,
                          const vm_follower* vms, uint64_t records, uint64_t bytes, uint64_t lost) {
  if (!o.quiet)
    std::fprintf(stderr, "magnet: %llu records, %llu bytes, %llu lost, written to %s\n",
                 static_cast<unsigned long long>(records), static_cast<unsigned long long>(bytes),
                 static_cast<unsigned long long>(lost), o.out.c_str());
  if (!o.json) return;
  auto probes = nlohmann::ordered_json::array();
  for (uint16_t t : attached) probes.push_back(event_name(t));
  nlohmann::ordered_json j = {{"file", o.out}, {"probes", probes}, {"records", records},
                              {"bytes", bytes}, {"lost", lost}};
  if (vms) j["vms"] = vms->ids();
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
}

// --usdt: the application marks, into the capture's ring.  Attached after
// the capture probes, so a binary without marks fails before any record.
static result<std::unique_ptr<usdt_marks>> attach_usdt(const record_opts& o, capture& cap) {
  if (o.usdt_binary.empty()) return std::unique_ptr<usdt_marks>{};
  return usdt_marks::attach(cap.ringbuf_fd(), o.usdt_binary, o.usdt_pid);
}

int cmd_record(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kRecordHelp, stdout);
    return 0;
  }
  record_opts o = parse_record(a);

  capture_options co;
  co.probes = o.types;
  co.ring_bytes = o.ring;
  co.wakeup_watermark = o.watermark;
  co.snap_bytes = o.snap;
  co.snap_ifindex = o.snap_ifindex;
  co.snap_netns_ino = o.snap_netns_ino;
  auto cap = capture::open(co);
  if (!cap) {
    std::fprintf(stderr, "magnet record: %s\n", cap.err().message.c_str());
    return 1;
  }
  // The VMs tagged before any probe runs, so that their first events carry their ids.
  std::unique_ptr<vm_follower> vms;
  if (o.vms.on()) {
    auto f = vm_follower::start(**cap, o.vms);
    if (!f) {
      std::fprintf(stderr, "magnet record: %s\n", f.err().message.c_str());
      return 1;
    }
    vms = std::move(*f);
    if (!o.quiet) std::fprintf(stderr, "magnet: VMs of %s: %s\n", o.vms.uri.c_str(), vms->describe().c_str());
  }
  std::set<uint16_t> attached;
  if (auto s = configure(**cap, o, MAGNET_MODE_STREAM, vms ? vms->selected() : std::set<uint32_t>{},
                         attached);
      !s) {
    std::fprintf(stderr, "magnet record: %s\n", s.err().message.c_str());
    return 1;
  }
  auto marks = attach_usdt(o, **cap);
  if (!marks) {
    std::fprintf(stderr, "magnet record: %s\n", marks.err().message.c_str());
    return 1;
  }
  std::set<uint16_t> described = attached;
  described.insert(MAGNET_EV_LOST);
  if (*marks) described.insert(MAGNET_EV_APP_ADD);
  auto w = trace_writer::create(o.out, local_sysinfo(), described);
  if (!w) {
    std::fprintf(stderr, "magnet record: %s\n", w.err().message.c_str());
    return 1;
  }

  // User-space part of the filter: only when the kernel cannot do it all.
  std::vector<uint8_t> kept;
  const bool user_filter = !o.pred.is_true();
  status write_status;
  auto sink = [&](std::span<const uint8_t> recs) {
    if (!write_status) return;
    if (!user_filter) {
      write_status = w->append(recs);
      return;
    }
    kept.clear();
    for (size_t off = 0; off < recs.size();) {
      const uint8_t* r = recs.data() + off;
      uint16_t len = hdr_of(r).len;
      if (hdr_of(r).type == MAGNET_EV_LOST || o.pred.match(r)) kept.insert(kept.end(), r, r + len);
      off += len;
    }
    write_status = w->append(kept);
  };
  auto cons = ring_consumer::create((*cap)->ringbuf_fd(), **cap, sink);
  if (!cons) {
    std::fprintf(stderr, "magnet record: %s\n", cons.err().message.c_str());
    return 1;
  }

  install_stop_handlers();
  if (!o.quiet)
    std::fprintf(stderr, "magnet: recording %s to %s (buffer %llu KiB)\n",
                 (*cap)->attach_summary().c_str(), o.out.c_str(),
                 static_cast<unsigned long long>(o.ring >> 10));
  int rc = record_until_stopped(o, **cap, **cons, *w, write_status);
  // Detach first so the final drain sees everything that will ever come.
  (*cap)->stop(attached);
  if (*marks && (*marks)->dropped())
    std::fprintf(stderr, "magnet: warning: %llu app.add records lost (ring buffer full)\n",
                 static_cast<unsigned long long>((*marks)->dropped()));
  marks->reset();
  if (auto r = (*cons)->drain(); !r) rc = 1;
  if (!write_status) {
    std::fprintf(stderr, "magnet record: %s\n", write_status.err().message.c_str());
    rc = 1;
  }
  if (auto s = w->close(); !s) {
    std::fprintf(stderr, "magnet record: %s\n", s.err().message.c_str());
    rc = 1;
  }
  print_summary(o, attached, vms.get(), (*cons)->records(), w->bytes(), (*cons)->lost());
  return rc;
}

}  // namespace magnet::host
