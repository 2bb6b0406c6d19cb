#include "daemon.h"

#include <sys/stat.h>
#include <unistd.h>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>

#include "capture.h"
#include "consumer.h"
#include "log.h"
#include "magnet/events.h"
#include "magnet/filters/config.h"
#include "magnet/filters/engine.h"
#include "magnet/trace_file.h"
#include "registry.h"
#include "vcpu_sched.h"

namespace magnet::host {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

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
  - name: drops               # packets dropped on the VM's taps
    filter: "event == net.drop"
    per_vm: true
    windows: [{ms: 1000}]
)";

namespace {

std::string jstr(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

struct exit_row {
  std::string reason;
  uint32_t code = 0, isa = 0;
  double per_s = 0, mean_us = 0, p99_us = 0, time_frac = 0;  // of one vCPU
  uint64_t userspace = 0;
};

struct vm_rates {
  double exits_per_s = 0, rx_mbps = 0, tx_mbps = 0, drops_per_s = 0;
  double run = 0, wait = 0, halt = 0;  // fractions of one vCPU, summed over vCPUs
  double exit_time = 0;                // exit handling but halts, same unit
  std::map<int, std::array<double, 3>> per_vcpu;
  std::vector<exit_row> exits;         // by time, largest first
  // Host queueing delay (vmnet.queue): [0] guest -> wire, [1] wire -> guest.
  std::array<double, 2> queue_mean_us{}, queue_p99_us{}, queue_per_s{};
};

class host_daemon : public vm_tagger {
 public:
  host_daemon(const daemon_options& o) : opt_(o), reg_(o.uri, *this) {}

  int run();

  // vm_tagger: called from the registry thread.
  void vm_changed(const vm_info& vm) override {
    (void)cap_->untag_vm(vm.vm_id);  // threads or taps may have gone
    if (vm.qemu_pid) (void)cap_->tag_vm_tgid(static_cast<uint32_t>(vm.qemu_pid), vm.vm_id);
    for (const auto& t : vm.threads)  // vhost kernel workers have their own tgid
      if (t.role == "vhost") (void)cap_->tag_vm_tgid(static_cast<uint32_t>(t.tid), vm.vm_id);
    for (const auto& tap : vm.taps)
      if (tap.ifindex > 0) (void)cap_->tag_vm_ifindex(static_cast<uint32_t>(tap.ifindex), vm.vm_id);
    for (uint64_t cg : vm.cgroup_ids) (void)cap_->tag_vm_cgroup(cg, vm.vm_id);
    asio::post(io_, [this, vm] {
      log_line(2, "magnet-host: [vm.up] " + vm.name + " id " + std::to_string(vm.vm_id) +
                      " qemu pid " + std::to_string(vm.qemu_pid));
      vms_[vm.vm_id] = vm;
      eng_.add_vm(vm.vm_id);
      vcpus_.remove_vm(vm.vm_id);
      for (const auto& t : vm.threads)
        if (t.role == "vcpu") vcpus_.add_thread(t.tid, vm.vm_id, t.vcpu);
    });
  }
  void vm_gone(uint32_t vm_id) override {
    (void)cap_->untag_vm(vm_id);
    asio::post(io_, [this, vm_id] {
      if (!vms_.count(vm_id)) return;
      log_line(2, "magnet-host: [vm.down] id " + std::to_string(vm_id));
      vms_.erase(vm_id);
      rates_.erase(vm_id);
      eng_.remove_vm(vm_id);
      vcpus_.remove_vm(vm_id);
    });
  }

 private:
  status load_views();
  status setup_capture();
  void arm_ring();
  void tick();
  void accept();
  std::string handle(const std::string& req);
  std::string top_json();
  std::string vms_json();
  const vm_info* find_vm(const std::string& key) const;

  daemon_options opt_;
  asio::io_context io_;
  std::unique_ptr<capture> cap_;
  std::unique_ptr<ring_consumer> cons_;
  std::unique_ptr<asio::posix::stream_descriptor> ring_fd_;
  std::unique_ptr<local::acceptor> acceptor_;
  asio::steady_timer timer_{io_};
  filters::engine eng_;
  vcpu_sched vcpus_;
  registry reg_;
  std::map<uint32_t, vm_info> vms_;
  std::map<uint32_t, vm_rates> rates_;
  std::map<std::pair<uint16_t, uint32_t>, magnet_agg> prev_agg_;
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, lat_stat> prev_kvm_;  // vm isa reason
  std::map<std::pair<uint32_t, uint32_t>, lat_stat> prev_queue_;         // vm dir
  void kernel_stats(double secs, std::map<uint32_t, vm_rates>& r);
  std::string kvm_json(uint32_t vm);
  std::map<pid_t, vcpu_times> prev_vcpu_;
  uint64_t prev_tick_ns_ = 0, start_ns_ = 0;
  int ticks_ = 0;
  std::set<uint16_t> probes_;
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
  for (uint16_t t : *types) {
    const probe_plan* p = cap_->plan_for(t);
    if (!p || p->chosen < 0) {
      log_line(1, "magnet-host: [probe.unavailable] " + event_name(t) + " cannot attach here");
      continue;
    }
    // Everything is VM-only: the host daemon serves per-VM figures.  Every
    // event is counted in kernel; events are streamed for the engine and for
    // the vCPU accounting (sched).
    uint32_t mode = MAGNET_MODE_AGGREGATE | MAGNET_MODE_VM_ONLY | MAGNET_MODE_STREAM;
    // KVM figures come from in-kernel statistics: exits are too many to stream.
    if (event_name(t).rfind("kvm.", 0) == 0) mode &= ~MAGNET_MODE_STREAM;
    if (auto s = cap_->set_mode(t, mode); !s) return s;
    probes_.insert(t);
  }
  auto k = ring_consumer::create(cap_->ringbuf_fd(), *cap_, [this](std::span<const uint8_t> b) {
    eng_.feed(b);
    vcpus_.feed(b);
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

void host_daemon::tick() {
  timer_.expires_after(std::chrono::milliseconds(100));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    (void)cons_->drain();  // below the watermark nothing wakes us: bound the delay
    uint64_t now = monotonic_ns();
    if (opt_.duration_ns && now - start_ns_ >= opt_.duration_ns) {
      io_.stop();
      return;
    }
    if (++ticks_ % 10 == 0) {
      double secs = static_cast<double>(now - prev_tick_ns_) / 1e9;
      prev_tick_ns_ = now;
      cap_->rescan_netns();
      std::map<uint32_t, vm_rates> r;
      for (uint16_t t : probes_) {
        auto agg = cap_->aggregate(find_probe(t)->slot);
        for (auto& [vm, cur] : agg) {
          auto& p = prev_agg_[{t, vm}];
          double ev = static_cast<double>(cur.events - p.events) / secs;
          double mbps = static_cast<double>(cur.bytes - p.bytes) * 8 / secs / 1e6;
          if (t == MAGNET_EV_KVM_EXIT) r[vm].exits_per_s = ev;
          if (t == MAGNET_EV_NET_DEV_RECV) r[vm].tx_mbps = mbps;  // from the guest
          if (t == MAGNET_EV_NET_DEV_XMIT) r[vm].rx_mbps = mbps;  // to the guest
          if (t == MAGNET_EV_NET_DROP) r[vm].drops_per_s = ev;
          p = cur;
        }
      }
      kernel_stats(secs, r);
      auto tot = vcpus_.totals(now);
      for (auto& [tid, cur] : tot) {
        auto& p = prev_vcpu_[tid];
        std::array<double, 3> f = {
            static_cast<double>(cur.run_ns - p.run_ns) / 1e9 / secs,
            static_cast<double>(cur.wait_ns - p.wait_ns) / 1e9 / secs,
            static_cast<double>(cur.halt_ns - p.halt_ns) / 1e9 / secs};
        auto& vr = r[cur.vm];
        vr.per_vcpu[cur.vcpu] = f;
        vr.run += f[0];
        vr.wait += f[1];
        vr.halt += f[2];
        p = cur;
      }
      std::erase_if(r, [this](auto& kv) { return !vms_.count(kv.first); });
      rates_ = std::move(r);
    }
    tick();
  });
}

// Exit -> entry times per reason (kvm.entry) and host queueing delay
// (vmnet.queue) over the last second, from the in-kernel statistics.
void host_daemon::kernel_stats(double secs, std::map<uint32_t, vm_rates>& r) {
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, lat_stat> kvm;
  for (const auto& [k, s] : cap_->kvm_exit_stats())
    if (k.vm_id) kvm[{k.vm_id, k.isa, k.reason}].merge(s);
  for (const auto& [k, c] : kvm) {
    auto [vm, isa, reason] = k;
    lat_stat d = c.since(prev_kvm_[k]);
    prev_kvm_[k] = c;
    if (!d.count) continue;
    exit_row e{kvm_exit_reason_name(isa, reason), reason, isa,
               static_cast<double>(d.count) / secs, d.mean_ns() / 1e3, d.quantile_ns(0.99) / 1e3,
               static_cast<double>(d.total_ns) / 1e9 / secs, d.aux};
    bool halt = e.reason == "hlt" || e.reason.rfind("halt(", 0) == 0;
    if (!halt) r[vm].exit_time += e.time_frac;
    r[vm].exits.push_back(std::move(e));
  }
  for (auto& [vm, vr] : r)
    std::sort(vr.exits.begin(), vr.exits.end(),
              [](const exit_row& a, const exit_row& b) { return a.time_frac > b.time_frac; });
  std::map<std::pair<uint32_t, uint32_t>, lat_stat> q;
  for (const auto& [k, s] : cap_->vmnet_queue_stats()) q[{k.vm_id, k.dir}].merge(s);
  for (const auto& [k, c] : q) {
    lat_stat d = c.since(prev_queue_[k]);
    prev_queue_[k] = c;
    if (!d.count || k.second > 1) continue;
    auto& vr = r[k.first];
    vr.queue_mean_us[k.second] = d.mean_ns() / 1e3;
    vr.queue_p99_us[k.second] = d.quantile_ns(0.99) / 1e3;
    vr.queue_per_s[k.second] = static_cast<double>(d.count) / secs;
  }
}

std::string host_daemon::kvm_json(uint32_t vm) {
  std::string s = "{\"vm\":" + std::to_string(vm) + ",\"exits\":[";
  char buf[384];
  const vm_rates r = rates_.count(vm) ? rates_.at(vm) : vm_rates{};
  for (size_t i = 0; i < r.exits.size(); ++i) {
    const auto& e = r.exits[i];
    std::snprintf(buf, sizeof buf,
                  "%s{\"reason\":%s,\"code\":%u,\"isa\":%u,\"exits_per_s\":%.1f,"
                  "\"mean_us\":%.3f,\"p99_us\":%.3f,\"time_frac\":%.5f,\"userspace\":%llu}",
                  i ? "," : "", jstr(e.reason).c_str(), e.code, e.isa, e.per_s, e.mean_us,
                  e.p99_us, e.time_frac, static_cast<unsigned long long>(e.userspace));
    s += buf;
  }
  return s + "]}";
}

const vm_info* host_daemon::find_vm(const std::string& key) const {
  for (const auto& [id, vm] : vms_)
    if (vm.name == key || vm.uuid == key || std::to_string(id) == key) return &vm;
  return nullptr;
}

std::string host_daemon::vms_json() {
  std::string s = "[";
  for (const auto& [id, vm] : vms_) {
    if (s.size() > 1) s += ',';
    s += "{\"vm\":" + std::to_string(id) + ",\"name\":" + jstr(vm.name) +
         ",\"uuid\":" + jstr(vm.uuid) + ",\"libvirt_id\":" + std::to_string(vm.libvirt_id) +
         ",\"qemu_pid\":" + std::to_string(vm.qemu_pid) +
         ",\"vsock_cid\":" + std::to_string(vm.vsock_cid) + ",\"threads\":[";
    for (size_t i = 0; i < vm.threads.size(); ++i)
      s += std::string(i ? "," : "") + "{\"tid\":" + std::to_string(vm.threads[i].tid) +
           ",\"role\":" + jstr(vm.threads[i].role) +
           ",\"vcpu\":" + std::to_string(vm.threads[i].vcpu) + "}";
    s += "],\"taps\":[";
    for (size_t i = 0; i < vm.taps.size(); ++i)
      s += std::string(i ? "," : "") + "{\"name\":" + jstr(vm.taps[i].name) +
           ",\"ifindex\":" + std::to_string(vm.taps[i].ifindex) + "}";
    s += "],\"cgroups\":[";
    for (size_t i = 0; i < vm.cgroups.size(); ++i)
      s += std::string(i ? "," : "") + jstr(vm.cgroups[i]);
    s += "]}";
  }
  return s + "]";
}

std::string host_daemon::top_json() {
  char buf[1024];
  std::string s = "{\"lost\":" + std::to_string(cons_->lost()) +
                  ",\"libvirt\":" + (reg_.connected() ? "true" : "false") + ",\"vms\":[";
  bool first = true;
  for (const auto& [id, vm] : vms_) {
    vm_rates r = rates_.count(id) ? rates_.at(id) : vm_rates{};
    int nvcpu = 0;
    for (const auto& t : vm.threads) nvcpu += t.role == "vcpu";
    std::snprintf(buf, sizeof buf,
                  "%s{\"vm\":%u,\"name\":%s,\"vcpus\":%d,\"vcpu_run\":%.4f,\"vcpu_wait\":%.4f,"
                  "\"vcpu_halt\":%.4f,\"exits_per_s\":%.1f,\"exit_time\":%.5f,"
                  "\"rx_mbps\":%.3f,\"tx_mbps\":%.3f,\"drops_per_s\":%.1f,"
                  "\"queue_tx_us\":%.3f,\"queue_tx_p99_us\":%.3f,\"queue_tx_per_s\":%.1f,"
                  "\"queue_rx_us\":%.3f,\"queue_rx_p99_us\":%.3f,\"queue_rx_per_s\":%.1f,"
                  "\"per_vcpu\":[",
                  first ? "" : ",", id, jstr(vm.name).c_str(), nvcpu, r.run, r.wait, r.halt,
                  r.exits_per_s, r.exit_time, r.rx_mbps, r.tx_mbps, r.drops_per_s,
                  r.queue_mean_us[0], r.queue_p99_us[0], r.queue_per_s[0], r.queue_mean_us[1],
                  r.queue_p99_us[1], r.queue_per_s[1]);
    s += buf;
    bool f2 = true;
    for (const auto& [v, f] : r.per_vcpu) {
      std::snprintf(buf, sizeof buf, "%s{\"vcpu\":%d,\"run\":%.4f,\"wait\":%.4f,\"halt\":%.4f}",
                    f2 ? "" : ",", v, f[0], f[1], f[2]);
      s += buf;
      f2 = false;
    }
    s += "]}";
    first = false;
  }
  return s + "]}";
}

std::string host_daemon::handle(const std::string& req) {
  std::istringstream in(req);
  std::string cmd, arg;
  in >> cmd >> arg;
  if (cmd == "top") return "ok " + top_json();
  if (cmd == "vms") return "ok " + vms_json();
  if (cmd == "kvm") {
    const vm_info* vm = find_vm(arg);
    if (!vm) return "error no running VM named '" + arg + "' (by name, UUID or magnet id)";
    return "ok " + kvm_json(vm->vm_id);
  }
  if (cmd == "views") {
    if (arg.empty()) return "ok " + filters::to_json(eng_.snapshot());
    const vm_info* vm = find_vm(arg);
    if (!vm) return "error no running VM named '" + arg + "' (by name, UUID or magnet id)";
    // Only that VM's instances: the same data the VM itself would receive.
    return "ok " + filters::to_json(eng_.snapshot_vm(vm->vm_id));
  }
  return "error unknown request '" + cmd + "' (top, vms, kvm VM, views [VM])";
}

void host_daemon::accept() {
  acceptor_->async_accept([this](boost::system::error_code ec, local::socket sock) {
    if (ec) return;
    auto s = std::make_shared<local::socket>(std::move(sock));
    auto buf = std::make_shared<asio::streambuf>(4096);
    asio::async_read_until(*s, *buf, '\n', [this, s, buf](boost::system::error_code ec, size_t) {
      if (ec) return;  // a client that sends nothing or too much is dropped
      std::istream is(buf.get());
      std::string line;
      std::getline(is, line);
      auto reply = std::make_shared<std::string>(handle(line) + "\n");
      asio::async_write(*s, asio::buffer(*reply), [s, reply](boost::system::error_code, size_t) {});
    });
    accept();
  });
}

int host_daemon::run() {
  if (auto s = load_views(); !s) {
    std::fprintf(stderr, "magnet host: views: %s\n", s.err().message.c_str());
    return 2;
  }
  if (auto s = setup_capture(); !s) {
    std::fprintf(stderr, "magnet host: %s\n", s.err().message.c_str());
    return 1;
  }
  ::mkdir("/run/magnet", 0755);
  ::unlink(opt_.socket_path.c_str());
  try {
    acceptor_ = std::make_unique<local::acceptor>(io_, local::endpoint(opt_.socket_path));
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "magnet host: cannot listen on %s: %s\n", opt_.socket_path.c_str(),
                 e.what());
    return 1;
  }
  ::chmod(opt_.socket_path.c_str(), 0600);  // host figures of every VM: root only
  ring_fd_ = std::make_unique<asio::posix::stream_descriptor>(io_, ::dup(cons_->epoll_fd()));

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

  start_ns_ = prev_tick_ns_ = monotonic_ns();
  reg_.start();
  arm_ring();
  accept();
  tick();
  log_line(1, "magnet-host: [started] probes " + cap_->attach_summary() + "; libvirt " +
                  opt_.uri + "; socket " + opt_.socket_path);
  io_.run();

  reg_.stop();
  for (uint16_t t : probes_) (void)cap_->set_mode(t, 0);
  (void)cons_->drain();
  acceptor_.reset();
  ::unlink(opt_.socket_path.c_str());
  log_line(1, "magnet-host: [stopped] " + std::to_string(cons_->records()) + " records, " +
                  std::to_string(cons_->lost()) + " lost");
  return 0;
}

}  // namespace

int run_daemon(const daemon_options& o) {
  host_daemon d(o);
  return d.run();
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
