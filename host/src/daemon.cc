#include "daemon.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "admin.h"
#include "admin_request.h"
#include "capture.h"
#include "cli.h"
#include "consumer.h"
#include "dashboard.h"
#include "http_server.h"
#include "log.h"
#include "magnet/events.h"
#include "magnet/filters/config.h"
#include "magnet/filters/engine.h"
#include "magnet/trace_file.h"
#include "openmetrics.h"
#include "privileges.h"
#include "registry.h"
#include "tc.h"
#include "vcpu_sched.h"
#include "vm_metrics.h"

namespace magnet::host {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using ojson = nlohmann::ordered_json;

const char* kDefaultViews = R"(# magnet host: default per-VM views
views:
  - name: guest-tx            # what the guest sends: received from its tap
    filter: "event == net.dev.recv"
    per_vm: true
    windows: [{events: 1000}, {ms: 1000}]
    group_by: [connection]    # per flow: bytes and average bandwidth
  - name: guest-rx            # what the guest receives: sent to its tap
    filter: "event == net.dev.xmit"
    per_vm: true
    windows: [{events: 1000}, {ms: 1000}]
    group_by: [connection]
  - name: block-io            # the VM's requests to the host's disks
    filter: "event == blk.complete"
    per_vm: true
    windows: [{ms: 1000}]
    group_by: [process]
  - name: host-queue          # guest packets forwarded by the host (vmnet.queue)
    filter: "event == vmnet.queue.tx or event == vmnet.queue.rx"
    per_vm: true
    windows: [{ms: 1000}]
    group_by: [connection]
  - name: drops               # the VM's packets dropped on the host (its taps and past them)
    filter: "event == net.drop"
    per_vm: true
    windows: [{ms: 1000}]
)";

result<link_spec> parse_link_spec(const std::string& s) {
  link_spec l;
  std::string rest = s;
  if (auto eq = rest.find('='); eq != std::string::npos) {
    std::string r = rest.substr(eq + 1);
    rest = rest.substr(0, eq);
    auto v = cli::parse_rate_bps(r);
    if (!v) return error{v.err().message};
    l.rate_bps = *v;
  }
  if (auto at = rest.find('@'); at != std::string::npos) {
    l.netns = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (l.netns.empty() || l.netns.find('/') != std::string::npos)
      return error{"'" + s + "': a network namespace name (as in ip netns) after '@'"};
  }
  if (rest.empty() || rest.size() >= IFNAMSIZ || rest.find('/') != std::string::npos)
    return error{"'" + s + "': expected DEV[@NETNS][=RATE]"};
  l.dev = rest;
  return l;
}

namespace {

uint64_t random64() {
  uint64_t v = 0;
  while (getrandom(&v, sizeof v, 0) != sizeof v) {
  }
  return v;
}

// The link's device in its namespace: ifindex, the namespace's inode, and
// its capacity: the rate given with --link, else what tc shapes it to.  The
// queue's length comes from tc (tbf) either way.  @note says where the
// capacity came from, or why there is none.
link_info resolve_link(const link_spec& s, std::string& note) {
  link_info l;
  l.name = s.dev + (s.netns.empty() ? "" : "@" + s.netns);
  l.capacity_bps = s.rate_bps;
  const std::string path = s.netns.empty() ? "/proc/self/ns/net" : "/run/netns/" + s.netns;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    note = "no network namespace " + s.netns;
    return l;
  }
  l.netns_ino = static_cast<uint32_t>(st.st_ino);
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  int target = s.netns.empty() ? -1 : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool switched = target >= 0 && self >= 0 && setns(target, CLONE_NEWNET) == 0;
  result<tc_shaping> shaping = error{"not looked up"};
  if (s.netns.empty() || switched) {
    l.ifindex = if_nametoindex(s.dev.c_str());
    if (l.ifindex) shaping = read_tc_shaping(static_cast<int>(l.ifindex));
  }
  if (switched) setns(self, CLONE_NEWNET);
  if (self >= 0) close(self);
  if (target >= 0) close(target);
  char rate[64];
  if (!l.ifindex) {
    note = "no device " + s.dev + (s.netns.empty() ? "" : " in " + s.netns);
  } else if (shaping) {
    l.queue_limit_s = shaping->queue_limit_s;
    if (l.capacity_bps <= 0) l.capacity_bps = shaping->rate_bps;
    std::snprintf(rate, sizeof rate, "%.6g bit/s", l.capacity_bps);
    note = std::string("capacity ") + rate + (s.rate_bps > 0 ? " (given)" : " (" + shaping->kind + ")");
  } else if (l.capacity_bps > 0) {
    std::snprintf(rate, sizeof rate, "%.6g bit/s", l.capacity_bps);
    note = std::string("capacity ") + rate + " (given; tc: " + shaping.err().message + ")";
  } else {
    note = "capacity unknown (tc: " + shaping.err().message + "); give it as DEV=RATE";
  }
  return l;
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

class host_daemon : public vm_tagger {
 public:
  explicit host_daemon(const daemon_options& o)
      : opt_(o), reg_(o.uri, *this), hub_(io_, o.delivery) {}

  int run();

  // vm_tagger: called from the registry thread.
  void vm_changed(const vm_info& vm) override {
    (void)cap_->untag_vm(vm.vm_id);  // threads or taps may have gone
    if (vm.qemu_pid) (void)cap_->tag_vm_tgid(static_cast<uint32_t>(vm.qemu_pid), vm.vm_id);
    for (const auto& t : vm.threads)  // vhost kernel workers have their own tgid
      if (t.role == "vhost") (void)cap_->tag_vm_tgid(static_cast<uint32_t>(t.tid), vm.vm_id);
    for (const auto& tap : vm.taps)
      if (tap.ifindex > 0)  // in QEMU's namespace, which need not be ours
        (void)cap_->tag_vm_ifindex(tap.netns_ino, static_cast<uint32_t>(tap.ifindex), vm.vm_id);
    for (uint64_t cg : vm.cgroup_ids) (void)cap_->tag_vm_cgroup(cg, vm.vm_id);
    asio::post(io_, [this, vm] {
      auto old = vms_.find(vm.vm_id);
      if (old == vms_.end() || old->second.qemu_pid != vm.qemu_pid) {
        log_line(2, "magnet-host: [vm.up] " + vm.name + " id " + std::to_string(vm.vm_id) +
                        " qemu pid " + std::to_string(vm.qemu_pid));
        // A new process is a new identity: a new session for its guest.
        sessions_[vm.vm_id] = random64();
      }
      vms_[vm.vm_id] = vm;
      eng_.add_vm(vm.vm_id);
      vcpus_.remove_vm(vm.vm_id);
      for (const auto& t : vm.threads)
        if (t.role == "vcpu") vcpus_.add_thread(t.tid, vm.vm_id, t.vcpu);
      vms_changed();
    });
  }
  void vm_gone(uint32_t vm_id) override {
    (void)cap_->untag_vm(vm_id);
    asio::post(io_, [this, vm_id] {
      if (!vms_.count(vm_id)) return;
      log_line(2, "magnet-host: [vm.down] id " + std::to_string(vm_id));
      vms_.erase(vm_id);
      sessions_.erase(vm_id);
      eng_.remove_vm(vm_id);
      vcpus_.remove_vm(vm_id);
      vms_changed();
    });
  }

 private:
  status load_views();
  status setup_capture();
  void arm_ring();
  void tick();
  void sample(uint64_t now);
  void vms_changed();
  void resolve_links();
  std::string handle(const std::string& req, const admin_peer& peer);
  ojson top_json() const;
  ojson vms_json() const;
  ojson kvm_json(uint32_t vm) const;
  ojson stats_json(uint32_t vm) const;
  ojson sessions_json() const;
  http_response metrics_page(const http_request& r) const;
  // The dashboard (docs/dashboard.md): its routes, its JSON, its streams.
  void serve_dashboard();
  ojson dashboard_json() const;
  void push_streams();
  const vm_info* find_vm(const std::string& key) const;

  daemon_options opt_;
  asio::io_context io_;
  std::unique_ptr<capture> cap_;
  std::unique_ptr<ring_consumer> cons_;
  std::unique_ptr<asio::posix::stream_descriptor> ring_fd_;
  std::unique_ptr<admin_server> admin_;
  std::unique_ptr<http_server> http_;  // --http: /metrics, the dashboard
  struct stream_peer {
    std::shared_ptr<http_stream> s;
    access who;
  };
  std::vector<stream_peer> streams_;  // the dashboard's open event streams
  uint64_t stream_seq_ = 1;  // event ids: 1 and up
  asio::steady_timer timer_{io_};
  asio::steady_timer::time_point next_tick_;
  filters::engine eng_;
  vcpu_sched vcpus_;
  vm_metrics metrics_;
  std::map<uint32_t, vm_counters> counters_;  // the last tick's, for /metrics
  record_totals totals_;                      // drops, block latency, for /metrics
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> losses_;  // VM -> lost {quota, ring}
  registry reg_;
  delivery_hub hub_;
  std::map<uint32_t, vm_info> vms_;
  std::map<uint32_t, uint64_t> sessions_;  // vm -> session id of its current process
  uint64_t start_ns_ = 0;
  int ticks_ = 0;
  std::set<uint16_t> probes_;
  std::vector<std::string> link_notes_;  // per --link, the last one logged
};

status host_daemon::load_views() {
  result<std::vector<filters::view_spec>> specs =
      opt_.views_path.empty() ? filters::parse_views(kDefaultViews)
                              : filters::load_views(opt_.views_path);
  if (!specs) return specs.err();
  filters::engine fresh;
  if (auto s = filters::add_views(fresh, *specs); !s) return s;
  for (const auto& [id, vm] : vms_) fresh.add_vm(id);
  eng_ = std::move(fresh);
  return {};
}

status host_daemon::setup_capture() {
  auto types = select_events(opt_.probes);
  if (!types) return types.err();
  capture_options co;
  co.probes = *types;
  co.ring_bytes = opt_.ring_bytes;
  auto c = capture::open(co);
  if (!c) return c.err();
  cap_ = std::move(*c);
  cap_->set_vm_quota(opt_.vm_quota, 0.1);
  for (uint16_t t : *types) {
    const probe_plan* p = cap_->plan_for(t);
    if (!p || p->chosen < 0) {
      log_line(1, "magnet-host: [probe.unavailable] " + event_name(t) + " cannot attach here");
      continue;
    }
    // Everything is VM-only: the host daemon serves per-VM figures.  Every
    // event is counted in kernel; events are streamed for the engine, the
    // vCPU accounting (sched), the per-VM metrics and the guests' events.
    uint32_t mode = MAGNET_MODE_AGGREGATE | MAGNET_MODE_VM_ONLY | MAGNET_MODE_STREAM;
    // KVM figures come from in-kernel statistics: exits are too many to stream.
    if (event_name(t).rfind("kvm.", 0) == 0) mode &= ~MAGNET_MODE_STREAM;
    if (auto s = cap_->set_mode(t, mode); !s) return s;
    probes_.insert(t);
  }
  auto k = ring_consumer::create(cap_->ringbuf_fd(), *cap_, [this](std::span<const uint8_t> b) {
    eng_.feed(b);
    vcpus_.feed(b);
    metrics_.feed(b);
    totals_.feed(b, metrics_.links());
    hub_.publish_events(b);
  });
  if (!k) return k.err();
  cons_ = std::move(*k);
  return {};
}

void host_daemon::arm_ring() {
  ring_fd_->async_wait(asio::posix::descriptor_base::wait_read, [this](boost::system::error_code ec) {
    if (ec) return;
    if (auto r = cons_->drain(); !r) log_line(0, "magnet-host: " + r.err().message);
    arm_ring();
  });
}

void host_daemon::vms_changed() {
  std::vector<vm_ident> ids;
  for (const auto& [id, vm] : vms_) {
    vm_ident v;
    v.vm_id = id;
    v.name = vm.name;
    v.cid = vm.vsock_cid;
    v.qemu_pid = vm.qemu_pid;
    v.session_id = sessions_[id];
    v.channel = vm.view_channel;
    ids.push_back(std::move(v));
    metrics_.set_allowance(id, vm.allowance_tx_bps, vm.allowance_rx_bps);
  }
  hub_.set_vms(ids);
}

// The shared links of --link, resolved again each second: a namespace or a
// qdisc may come and go.  Each change of what is known is logged once.
void host_daemon::resolve_links() {
  std::vector<link_info> links;
  link_notes_.resize(opt_.links.size());
  for (size_t i = 0; i < opt_.links.size(); ++i) {
    std::string note;
    links.push_back(resolve_link(opt_.links[i], note));
    if (note != link_notes_[i])
      log_line(1, "magnet-host: [link] " + links.back().name + ": " + note);
    link_notes_[i] = std::move(note);
  }
  metrics_.set_links(std::move(links));
}

// The cumulative per-VM counters the kernel keeps, at @now.
void host_daemon::sample(uint64_t now) {
  std::map<uint32_t, vm_counters> c;
  std::vector<uint32_t> ids;
  for (const auto& [id, vm] : vms_) {
    c[id];
    ids.push_back(id);
  }
  auto agg = [&](uint16_t type, auto&& fn) {
    if (!probes_.count(type)) return;
    for (const auto& [vm, a] : cap_->aggregate(probe_slot(type), ids))
      if (auto it = c.find(vm); it != c.end()) fn(it->second, a);
  };
  agg(MAGNET_EV_NET_DEV_RECV, [](vm_counters& v, const magnet_agg& a) {
    v.tap_tx_bytes = a.bytes;
    v.tap_tx_pkts = a.events;
  });
  agg(MAGNET_EV_NET_DEV_XMIT, [](vm_counters& v, const magnet_agg& a) {
    v.tap_rx_bytes = a.bytes;
    v.tap_rx_pkts = a.events;
  });
  agg(MAGNET_EV_BLK_COMPLETE, [](vm_counters& v, const magnet_agg& a) {
    v.blk_bytes = a.bytes;
    v.blk_reqs = a.events;
  });
  agg(MAGNET_EV_KVM_EXIT, [](vm_counters& v, const magnet_agg& a) { v.exits = a.events; });
  for (const auto& [k, s] : cap_->kvm_exit_stats()) {
    auto it = c.find(k.vm_id);
    if (it == c.end()) continue;
    uint32_t idx = k.reason == MAGNET_KVM_REASON_HALT_POLLED   ? MAGNET_VIEW_REASON_HALT_POLLED
                   : k.reason == MAGNET_KVM_REASON_HALT_WAITED ? MAGNET_VIEW_REASON_HALT_SLEPT
                                                               : MAGNET_VIEW_REASON_INDEX(k.isa, k.reason);
    it->second.reasons[idx].merge(s);
  }
  for (const auto& [k, s] : cap_->vmnet_queue_stats())
    if (auto it = c.find(k.vm_id); it != c.end() && k.dir < 2) it->second.queue[k.dir].merge(s);
  for (const auto& [tid, t] : vcpus_.totals(now))
    if (auto it = c.find(t.vm); it != c.end())
      it->second.vcpu_ns[t.vcpu] = {t.run_ns, t.wait_ns, t.halt_ns};
  losses_ = cap_->vm_losses(ids);
  for (const auto& [vm, l] : losses_)
    if (auto it = c.find(vm); it != c.end()) it->second.lost = l.first + l.second;
  metrics_.sample(now, c);
  totals_.retain(ids);
  counters_ = std::move(c);
  for (const auto& [id, vm] : vms_) hub_.publish(id, now, metrics_.stats(id));
}

void host_daemon::tick() {
  next_tick_ += std::chrono::milliseconds(100);
  timer_.expires_at(next_tick_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    (void)cons_->drain();  // below the watermark nothing wakes us: bound the delay
    uint64_t now = monotonic_ns();
    if (opt_.duration_ns && now - start_ns_ >= opt_.duration_ns) {
      io_.stop();
      return;
    }
    if (++ticks_ % 10 == 0) {
      cap_->rescan_netns();
      resolve_links();
    }
    sample(now);
    if (!streams_.empty() && ticks_ % std::max<uint64_t>(1, opt_.http_stream_ns / 100'000'000) == 0)
      push_streams();
    // A tick that ran late does not make the next ones bunch up.
    if (asio::steady_timer::clock_type::now() > next_tick_ + std::chrono::milliseconds(100))
      next_tick_ = asio::steady_timer::clock_type::now();
    tick();
  });
}

ojson host_daemon::kvm_json(uint32_t vm) const {
  ojson exits = ojson::array();
  // From the stats delivered to the VM (the last second).
  std::map<uint32_t, std::array<double, 3>> by;
  for (const auto& v : metrics_.stats(vm)) {
    if (!v.valid()) continue;
    if (v.id == MAGNET_STAT_KVM_REASON_EXITS) by[v.index][0] = v.value;
    if (v.id == MAGNET_STAT_KVM_REASON_TIME) by[v.index][1] = v.value;
    if (v.id == MAGNET_STAT_KVM_REASON_MEAN) by[v.index][2] = v.value;
  }
  std::vector<std::pair<uint32_t, std::array<double, 3>>> rows(by.begin(), by.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second[1] > b.second[1]; });
  for (const auto& [idx, f] : rows) {
    uint32_t isa = idx >> 24, code = idx & 0xffffff;
    std::string name = idx == MAGNET_VIEW_REASON_HALT_POLLED  ? "halt(polled)"
                       : idx == MAGNET_VIEW_REASON_HALT_SLEPT ? "halt(slept)"
                                                              : kvm_exit_reason_name(isa, code);
    exits.push_back(ojson{{"reason", name},
                          {"code", idx >= MAGNET_VIEW_REASON_HALT_POLLED ? 0 : code},
                          {"isa", idx >= MAGNET_VIEW_REASON_HALT_POLLED ? 0 : isa},
                          {"exits_per_s", f[0]},
                          {"mean_us", f[2]},
                          {"time_frac", f[1]}});
  }
  return ojson{{"vm", vm}, {"exits", exits}};
}

const vm_info* host_daemon::find_vm(const std::string& key) const {
  for (const auto& [id, vm] : vms_)
    if (vm.name == key || vm.uuid == key || std::to_string(id) == key) return &vm;
  return nullptr;
}

ojson host_daemon::vms_json() const {
  ojson a = ojson::array();
  for (const auto& [id, vm] : vms_) {
    ojson threads = ojson::array(), taps = ojson::array();
    for (const auto& t : vm.threads)
      threads.push_back(ojson{{"tid", t.tid}, {"role", t.role}, {"vcpu", t.vcpu}});
    for (const auto& t : vm.taps) taps.push_back(ojson{{"name", t.name}, {"ifindex", t.ifindex}});
    a.push_back(ojson{{"vm", id},
                      {"name", vm.name},
                      {"uuid", vm.uuid},
                      {"libvirt_id", vm.libvirt_id},
                      {"qemu_pid", vm.qemu_pid},
                      {"vsock_cid", vm.vsock_cid},
                      {"threads", threads},
                      {"taps", taps},
                      {"cgroups", vm.cgroups}});
  }
  return a;
}

ojson host_daemon::top_json() const {
  ojson vms = ojson::array();
  for (const auto& [id, vm] : vms_) {
    int nvcpu = 0;
    for (const auto& t : vm.threads) nvcpu += t.role == "vcpu";
    auto v = [&](uint16_t sid, uint32_t index = 0) { return metrics_.value(id, sid, index); };
    ojson per = ojson::array();
    for (const auto& s : metrics_.stats(id))
      if (s.id == MAGNET_STAT_VCPU_RUN)
        per.push_back(ojson{{"vcpu", s.index},
                            {"run", v(MAGNET_STAT_VCPU_RUN, s.index)},
                            {"wait", v(MAGNET_STAT_VCPU_WAIT, s.index)},
                            {"halt", v(MAGNET_STAT_VCPU_HALT, s.index)}});
    vms.push_back(ojson{{"vm", id},
                        {"name", vm.name},
                        {"vcpus", nvcpu},
                        {"vcpu_run", v(MAGNET_STAT_VCPU_RUN_SUM)},
                        {"vcpu_wait", v(MAGNET_STAT_VCPU_WAIT_SUM)},
                        {"vcpu_halt", v(MAGNET_STAT_VCPU_HALT_SUM)},
                        {"exits_per_s", v(MAGNET_STAT_KVM_EXITS)},
                        {"exit_time", v(MAGNET_STAT_KVM_EXIT_TIME)},
                        {"rx_mbps", v(MAGNET_STAT_TAP_RX_BPS) / 1e6},
                        {"tx_mbps", v(MAGNET_STAT_TAP_TX_BPS) / 1e6},
                        {"drops_per_s", v(MAGNET_STAT_DROPS_TAP)},
                        {"queue_tx_us", v(MAGNET_STAT_QUEUE_TX_MEAN)},
                        {"queue_tx_p99_us", v(MAGNET_STAT_QUEUE_TX_P99)},
                        {"queue_tx_per_s", v(MAGNET_STAT_QUEUE_TX_PPS)},
                        {"queue_rx_us", v(MAGNET_STAT_QUEUE_RX_MEAN)},
                        {"queue_rx_p99_us", v(MAGNET_STAT_QUEUE_RX_P99)},
                        {"queue_rx_per_s", v(MAGNET_STAT_QUEUE_RX_PPS)},
                        {"lost_quota", losses_.count(id) ? losses_.at(id).first : 0},
                        {"lost_ring", losses_.count(id) ? losses_.at(id).second : 0},
                        {"per_vcpu", per}});
  }
  return ojson{{"lost", cons_->lost()}, {"libvirt", reg_.connected()}, {"vms", vms}};
}

// What is delivered to the VM, by name (no per-connection values).
ojson host_daemon::stats_json(uint32_t vm) const {
  ojson a = ojson::array();
  for (const auto& s : metrics_.stats(vm)) {
    const auto* info = view::find_stat(s.id);
    a.push_back(ojson{{"name", info ? std::string(info->name) : std::to_string(s.id)},
                      {"index", s.index},
                      {"value", s.value},
                      {"valid", s.valid()},
                      {"window_us", s.window_us}});
  }
  return ojson{{"vm", vm}, {"at_ns", metrics_.sampled_at()}, {"stats", a}};
}

ojson host_daemon::sessions_json() const {
  ojson a = ojson::array();
  for (const auto& s : hub_.sessions()) {
    auto it = vms_.find(s.subject);
    a.push_back(ojson{{"vm", s.subject},
                      {"name", it != vms_.end() ? it->second.name : ""},
                      {"transport", s.kind_name},
                      {"cid", s.peer},
                      {"hello", s.hello},
                      {"subscribed", s.subscribed},
                      {"period_ms", s.period_ms},
                      {"mode", s.mode},
                      {"frames", s.frames},
                      {"bytes", s.bytes},
                      {"stats_replaced", s.stats_replaced},
                      {"events_lost", s.events_lost},
                      {"label", s.label}});
  }
  return ojson{{"vsock", hub_.listening_vsock()}, {"sessions", a}};
}

// From what the daemon holds (the last tick's counters, the registry's last
// pass): no libvirt call, no kernel map read.
http_response host_daemon::metrics_page(const http_request& r) const {
  exposition_input in;
  in.vms.reserve(vms_.size());
  for (const auto& [id, vm] : vms_) {
    auto c = counters_.find(id);
    in.vms.push_back({vm.name, vm.uuid, id, c == counters_.end() ? nullptr : &c->second, totals_.find(id)});
  }
  in.records = cons_->records();
  in.lost = cons_->lost();
  in.resident_bytes = resident_memory_bytes();
  in.libvirt_connected = reg_.connected();
  const exposition f = negotiate_exposition(r.header("Accept"));
  return {200, std::string(content_type(f)), render_metrics(in, f)};
}

// What `magnet top` shows (top_json, the same vm_metrics values), per VM
// with its UUID, the median queueing delays and the exits by reason.
ojson host_daemon::dashboard_json() const {
  ojson top = top_json();
  ojson vms = ojson::array();
  for (auto row : top["vms"]) {
    const uint32_t id = row["vm"].get<uint32_t>();
    auto it = vms_.find(id);
    row["uuid"] = it != vms_.end() ? it->second.uuid : "";
    row["queue_tx_p50_us"] = metrics_.value(id, MAGNET_STAT_QUEUE_TX_P50);
    row["queue_rx_p50_us"] = metrics_.value(id, MAGNET_STAT_QUEUE_RX_P50);
    ojson exits = ojson::array();
    const ojson kvm = kvm_json(id);  // kept: a range-for over kvm_json(id)["exits"] would outlive it
    for (const auto& e : kvm["exits"])
      exits.push_back(ojson{{"reason", e["reason"]}, {"per_s", e["exits_per_s"]}});
    row["exits_by_reason"] = std::move(exits);
    vms.push_back(std::move(row));
  }
  timespec wall{};
  clock_gettime(CLOCK_REALTIME, &wall);
  return ojson{{"at_ms", metrics_.sampled_at() / 1000000},  // the sample's time (monotonic)
               {"wall_ms", uint64_t(wall.tv_sec) * 1000 + uint64_t(wall.tv_nsec) / 1000000},  // for charts
               {"lost", top["lost"]},
               {"libvirt", top["libvirt"]},
               {"vms", std::move(vms)}};
}

// Each open stream gets the sample its token may see; the JSON is made
// once per distinct access, not per browser.
void host_daemon::push_streams() {
  std::erase_if(streams_, [](const stream_peer& p) { return !p.s->open(); });
  if (streams_.empty()) return;
  const ojson all = dashboard_json();
  std::map<std::pair<bool, std::string>, std::string> cut;
  const uint64_t id = ++stream_seq_;
  for (auto& p : streams_) {
    auto [it, fresh] = cut.try_emplace({p.who.all, p.who.vm});
    if (fresh) it->second = dump(for_access(all, p.who));
    p.s->push(sse_event{id, "sample", it->second});
  }
}

void host_daemon::serve_dashboard() {
  const auto json_reply = [](const ojson& j, const auth_result& a) {
    http_response r{200, "application/json", dump(j) + "\n", {{"Cache-Control", "no-store"}}};
    if (!a.set_cookie.empty()) r.headers.emplace_back("Set-Cookie", a.set_cookie);
    return r;
  };
  // The page and its files: no VM data in them, but behind the token too.
  const auto asset = [this](const http_request& r) {
    auto a = authorize(opt_.http_tokens, r);
    if (!a.who) return a.refusal;
    const embedded_asset* f = find_dashboard_asset(r.path);
    if (!f) return http_response{404, "text/plain; charset=utf-8", "no such path: " + r.path + "\n"};
    http_response res{200, f->content_type, std::string(reinterpret_cast<const char*>(f->data), f->size)};
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.headers.emplace_back("X-Content-Type-Options", "nosniff");
    if (r.path == "/")
      res.headers.emplace_back("Content-Security-Policy",
                               "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'");
    // The token leaves the address bar's history once it is a cookie.
    if (!a.set_cookie.empty()) res.headers.emplace_back("Set-Cookie", a.set_cookie);
    return res;
  };
  http_->route("/", asset);
  http_->route_prefix("/assets/", asset);
  http_->route("/api/vms", [this, json_reply](const http_request& r) {
    auto a = authorize(opt_.http_tokens, r);
    if (!a.who) return a.refusal;
    ojson j = for_access(dashboard_json(), *a.who);
    j["scope"] = a.who->all ? "all" : "vm";
    return json_reply(j, a);
  });
  // /api/vm/NAME/views: that VM's view instances (`magnet views --vm NAME`).
  http_->route_prefix("/api/vm/", [this](const http_request& r) {
    auto a = authorize(opt_.http_tokens, r);
    if (!a.who) return a.refusal;
    std::string rest = r.path.substr(std::string("/api/vm/").size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos || rest.substr(slash) != "/views")
      return http_response{404, "text/plain; charset=utf-8", "no such path: " + r.path + "\n"};
    const std::string key = url_decode(rest.substr(0, slash));
    const vm_info* vm = find_vm(key);
    // A tenant learns nothing of other VMs, not even whether they run.
    if (!vm || !a.who->may_see(vm->name, vm->uuid)) {
      if (!a.who->all) return forbidden("VM '" + key + "'");
      return http_response{404, "text/plain; charset=utf-8", "no running VM named '" + key + "'\n"};
    }
    http_response res{200, "application/json", filters::to_json(eng_.snapshot_vm(vm->vm_id)) + "\n",
                      {{"Cache-Control", "no-store"}}};
    if (!a.set_cookie.empty()) res.headers.emplace_back("Set-Cookie", a.set_cookie);
    return res;
  });
  http_->route_stream("/api/stream", [this](const http_request& r) {
    stream_reply rep;
    auto a = authorize(opt_.http_tokens, r);
    if (!a.who) {
      rep.refuse = a.refusal;
      return rep;
    }
    rep.on_open = [this, who = *a.who](std::shared_ptr<http_stream> s) {
      // The newest sample at once, then one every --http-stream-interval.
      s->push(sse_event{stream_seq_, "sample", dump(for_access(dashboard_json(), who))});
      streams_.push_back({std::move(s), who});
    };
    return rep;
  });
}

std::string host_daemon::handle(const std::string& req, const admin_peer& peer) {
  // The grammar lives in admin_request.cc, the parser the fuzz target
  // `admin_request` runs; here only what the daemon knows: VMs and rights.
  const admin_request r = parse_admin_request(req);
  using k = admin_request::kind;
  const std::string no_vm = "error no running VM named '" + r.vm + "' (by name, UUID or magnet id)";
  switch (r.k) {
    case k::top: return "ok " + dump(top_json());
    case k::vms: return "ok " + dump(vms_json());
    case k::sessions: return "ok " + dump(sessions_json());
    case k::kvm:
    case k::stats: {
      const vm_info* vm = find_vm(r.vm);
      if (!vm) return no_vm;
      return "ok " + dump(r.k == k::kvm ? kvm_json(vm->vm_id) : stats_json(vm->vm_id));
    }
    case k::views: {
      if (r.vm.empty()) return "ok " + filters::to_json(eng_.snapshot());
      const vm_info* vm = find_vm(r.vm);
      if (!vm) return no_vm;
      // Only that VM's instances: the same data the VM itself would receive.
      return "ok " + filters::to_json(eng_.snapshot_vm(vm->vm_id));
    }
    case k::mark: {
      if (!peer.may_write) return "error mark changes what a VM receives: root only";
      const vm_info* vm = find_vm(r.vm);
      if (!vm) return no_vm;
      if (!r.value) return admin_bad_mark_value_error(r);
      // The change's own moment (CLOCK_MONOTONIC), for a latency probe on this host's clock.
      const uint64_t at = monotonic_ns();
      hub_.set_marker(vm->vm_id, *r.value, at);
      return "ok {\"changed_ns\":" + std::to_string(at) + "}";
    }
    case k::unknown: break;
  }
  return admin_unknown_request_error(r);
}

int host_daemon::run() {
  if (auto s = load_views(); !s) {
    std::fprintf(stderr, "magnet host: views: %s\n", s.err().message.c_str());
    return 2;
  }
  gid_t group = static_cast<gid_t>(-1);
  if (!opt_.socket_group.empty()) {
    auto g = group_id(opt_.socket_group);
    if (!g) {
      std::fprintf(stderr, "magnet host: --socket-group: %s\n", g.err().message.c_str());
      return 2;
    }
    group = *g;
  }
  if (auto s = setup_capture(); !s) {
    std::fprintf(stderr, "magnet host: %s\n", s.err().message.c_str());
    return 1;
  }
  ::mkdir("/run/magnet", 0755);
  auto adm = admin_server::open(io_, opt_.socket_path, group,
                                [this](const std::string& l, const admin_peer& p) { return handle(l, p); });
  if (!adm) {
    std::fprintf(stderr, "magnet host: %s\n", adm.err().message.c_str());
    return 1;
  }
  admin_ = std::move(*adm);
  if (opt_.http) {
    auto h = http_server::open(io_, *opt_.http);
    if (!h) {
      std::fprintf(stderr, "magnet host: %s\n", h.err().message.c_str());
      return 1;
    }
    http_ = std::move(*h);
    http_->route("/metrics", [this](const http_request& r) {
      auto a = authorize(opt_.http_tokens, r);
      if (!a.who) return a.refusal;
      // A tenant's scrape would carry host-wide series too: /metrics is the
      // operator's (docs/dashboard.md).
      if (!a.who->all) return forbidden("/metrics (the host's metrics are for operator tokens)");
      return metrics_page(r);
    });
    serve_dashboard();
    const http_endpoint at = http_->local_endpoint();
    log_line(1, "magnet-host: [http] serving /metrics on http://" + at.text() + "/metrics" +
                    (at.loopback ? "" : " (not loopback: only with a token of --http-tokens)"));
    log_line(1, "magnet-host: [http] dashboard on http://" + at.text() + "/" +
                    (opt_.http_tokens.empty() ? std::string(" (no tokens: loopback only)")
                                              : " (" + std::to_string(opt_.http_tokens.tokens.size()) +
                                                    " tokens of --http-tokens)"));
  }
  // Probes loaded and attached, the socket bound and given its group: keep
  // only the capabilities the running daemon uses (privileges.h), before
  // any thread starts (libvirt's included), as capabilities are per thread.
  const auto keep = daemon_capabilities(opt_.deliver && opt_.delivery.serial);
  auto kept = keep_only_capabilities(keep);
  if (!kept) {
    std::fprintf(stderr, "magnet host: %s\n", kept.err().message.c_str());
    return 1;
  }
  log_line(1, "magnet-host: [privileges] capabilities kept: " + *kept);
  for (const auto& c : keep)
    log_line(2, "magnet-host: [privileges] " + capability_names(uint64_t{1} << c.cap) + ": " + c.why);
  // Know the running VMs before the first guest connects: a guest that
  // reconnects as soon as the daemon is back would otherwise be refused
  // ("no running domain has this CID") and wait out its backoff.  (Its
  // handlers run first: they are queued before any accept completes.)
  (void)reg_.reconcile();  // a libvirt that is down: the registry thread says so
  if (opt_.deliver) {
    if (auto s = hub_.start(); !s) {
      std::fprintf(stderr, "magnet host: delivery: %s\n", s.err().message.c_str());
      return 1;
    }
  }
  ring_fd_ = std::make_unique<asio::posix::stream_descriptor>(io_, ::dup(cons_->epoll_fd()));
  resolve_links();

  asio::signal_set signals(io_, SIGINT, SIGTERM, SIGHUP);
  std::function<void(boost::system::error_code, int)> on_signal =
      [&](boost::system::error_code ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          auto s = load_views();
          log_line(1, s ? "magnet-host: [views.reloaded] " +
                              (opt_.views_path.empty() ? std::string("default views")
                                                       : opt_.views_path)
                        : "magnet-host: [views.rejected] keeping the old views: " +
                              s.err().message);
          signals.async_wait(on_signal);
          return;
        }
        io_.stop();  // SIGINT/SIGTERM: drain below, then exit
      };
  signals.async_wait(on_signal);

  start_ns_ = monotonic_ns();
  next_tick_ = asio::steady_timer::clock_type::now();
  reg_.start();
  arm_ring();
  tick();
  log_line(1, "magnet-host: [started] probes " + cap_->attach_summary() + "; libvirt " +
                  opt_.uri + "; socket " + opt_.socket_path +
                  (opt_.deliver ? std::string("; delivery ") +
                                      (hub_.listening_vsock()
                                           ? "vsock port " + std::to_string(opt_.delivery.vsock_port)
                                           : std::string("without vsock")) +
                                      (opt_.delivery.serial ? ", virtio-serial channels" : "")
                                : std::string("; delivery off")));
  io_.run();

  hub_.stop();
  io_.restart();
  io_.poll();  // the peers' goodbyes
  reg_.stop();
  for (uint16_t t : probes_) (void)cap_->set_mode(t, 0);
  (void)cons_->drain();
  admin_.reset();
  streams_.clear();
  http_.reset();
  log_line(1, "magnet-host: [stopped] " + std::to_string(cons_->records()) + " records, " +
                  std::to_string(cons_->lost()) + " lost");
  return 0;
}

}  // namespace

int run_daemon(const daemon_options& o) {
  // A peer that goes away must never end the daemon: libvirt's client
  // library writes to its socket without MSG_NOSIGNAL, so a libvirtd that
  // restarts would otherwise kill us with SIGPIPE (seen: exit 141).  Every
  // write reports EPIPE instead.
  ::signal(SIGPIPE, SIG_IGN);
  host_daemon d(o);
  if (std::string why = http_access_problem(o); !why.empty()) {
    std::fprintf(stderr, "magnet host: %s\n", why.c_str());
    return 2;
  }
  return d.run();
}

std::string http_access_problem(const daemon_options& o) {
  if (o.http && !o.http->loopback && o.http_tokens.empty())
    return "--http " + o.http->text() +
           ": not a loopback address, and no --http-tokens: without tokens the dashboard and "
           "/metrics are served on loopback only (127.0.0.1 or ::1)";
  return {};
}

query_reply query_daemon(const std::string& socket_path, const std::string& request) {
  query_reply r;
  try {
    asio::io_context io;
    local::socket s(io);
    s.connect(local::endpoint(socket_path));
    asio::write(s, asio::buffer(request + "\n"));
    asio::streambuf buf;
    boost::system::error_code ec;
    asio::read_until(s, buf, '\n', ec);
    std::string line((std::istreambuf_iterator<char>(&buf)), {});
    while (!line.empty() && line.back() == '\n') line.pop_back();
    if (line.rfind("ok ", 0) == 0) {
      r.ok = true;
      r.body = line.substr(3);
    } else {
      r.body = line.rfind("error ", 0) == 0 ? line.substr(6) : "malformed reply from the daemon";
    }
  } catch (const boost::system::system_error& e) {
    r.body = "cannot reach the host daemon at " + socket_path + " (" + e.what() +
             "): is 'magnet host' running?";
  }
  return r;
}

}  // namespace magnet::host
