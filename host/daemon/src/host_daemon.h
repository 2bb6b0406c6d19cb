// The daemon's one class, private to host/daemon: a controller (options,
// view definitions, SIGHUP reload, SIGTERM drain) around the worker parts.
// The registry calls it from its own thread (vm_tagger); everything else
// runs on one Boost.Asio thread.  Its work is spread over files by
// responsibility:
//   daemon.cc   run: setup, endpoints, privileges, the syscall filter,
//               signals, drain
//   capture.cc  the capture core, the ring, the registry's VMs (tagging)
//   tick.cc     the 100 ms tick: kernel counters -> per-VM metrics -> guests
//   replies.cc  the query socket's replies (magnet top, views, vms, ...)
//   routes.cc   the HTTP routes: /metrics, the dashboard and its streams
//   links.cc    --link: a shared link's device, namespace and capacity
//   power.cc    the host's power: its source, each tick's split per VM
//   service.cc  what systemd is told (Type=notify), tokens read on SIGHUP
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include "magnet/admin/server.h"
#include "magnet/capture/capture.h"
#include "magnet/capture/consumer.h"
#include "magnet/daemon/daemon.h"
#include "magnet/deliver/deliver.h"
#include "magnet/export/openmetrics.h"
#include "magnet/filters/engine.h"
#include "magnet/http/dashboard.h"
#include "magnet/http/server.h"
#include "magnet/metrics/vcpu_sched.h"
#include "magnet/metrics/vm_metrics.h"
#include "magnet/power/meter.h"
#include "magnet/power/thread_clock.h"
#include "magnet/registry/registry.h"

namespace magnet::host {

using ojson = nlohmann::ordered_json;

// JSON text that never throws on bad UTF-8 (a domain name is libvirt's).
std::string dump(const ojson& j);

// The link's device in its namespace: ifindex, the namespace's inode, and
// its capacity (links.cc).  @note says where the capacity came from, or why
// there is none.
link_info resolve_link(const link_spec& s, std::string& note);

// Tells systemd @state ("READY=1", ...) when it started the daemon with
// Type=notify (magnet/service.h); a failure is logged, never fatal.
void tell_service_manager(std::string_view state);

class host_daemon : public vm_tagger {
 public:
  explicit host_daemon(const daemon_options& o);

  int run();

  // vm_tagger: called from the registry thread.
  void vm_changed(const vm_info& vm) override;
  void vm_gone(uint32_t vm_id) override;

 private:
  // daemon.cc
  int open_endpoints(gid_t group);
  int drop_privileges();
  int filter_syscalls();
  void serve_signals(boost::asio::signal_set& signals);
  void drain();
  // service.cc
  void reload_tokens();
  // capture.cc
  status load_views();
  status setup_capture();
  void log_sampling() const;
  void arm_ring();
  void vms_changed();
  // tick.cc
  void tick();
  void sample(uint64_t now);
  void resolve_links();
  // power.cc
  int open_power();
  void sample_power(uint64_t now, const std::map<uint32_t, vm_counters>& c);
  // The VM's vhost workers and QEMU threads, whose CPU time is its work
  // too: given to helpers_ as the registry lists them.
  void power_threads(const vm_info& vm);
  void power_figures(exposition_input& in) const;
  // What is delivered into the VM (and `magnet stats` shows): its metrics'
  // stats and its share of the host's power.
  std::vector<view::stat_value> vm_stats(uint32_t vm) const;
  // Its power over the last second, its energy so far; none without a
  // power source.
  std::optional<double> vm_watts(uint32_t vm) const;
  std::optional<double> vm_joules(uint32_t vm) const;
  // The host's {"source", "watts", "energy_joules"} for the dashboard; null
  // without a power source.
  ojson host_power_json() const;
  // replies.cc
  std::string handle(const std::string& req, const admin_peer& peer);
  // The one VM @key names (magnet/admin/vm_key.h), or why there is none;
  // find_vm: that VM, or null when there is none or several.
  result<const vm_info*> lookup_vm(const std::string& key) const;
  const vm_info* find_vm(const std::string& key) const;
  ojson top_json() const;
  ojson vms_json(bool host_internals) const;
  ojson kvm_json(uint32_t vm) const;
  ojson stats_json(uint32_t vm) const;
  ojson sessions_json(bool host_internals) const;
  // routes.cc: /metrics and the dashboard (docs/dashboard.md)
  bool serve_http();
  http_response metrics_page(const http_request& r) const;
  void serve_dashboard();
  ojson dashboard_json() const;
  void push_streams();

  daemon_options opt_;
  boost::asio::io_context io_;
  std::unique_ptr<capture> cap_;
  std::unique_ptr<ring_consumer> cons_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> ring_fd_;
  std::unique_ptr<admin_server> admin_;
  std::unique_ptr<http_server> http_;  // --http: /metrics, the dashboard
  struct stream_peer {
    std::shared_ptr<http_stream> s;
    access who;
  };
  std::vector<stream_peer> streams_;  // the dashboard's open event streams
  uint64_t stream_seq_ = 1;           // event ids: 1 and up
  boost::asio::steady_timer timer_{io_};
  boost::asio::steady_timer::time_point next_tick_;
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
  std::map<uint16_t, uint32_t> sampling_;  // --sample: event type -> 1 in N (sampled_types)
  std::vector<std::string> link_notes_;  // per --link, the last one logged
  std::optional<power::power_meter> power_;  // none: the host has no power source
  std::string power_note_;                   // the last reading error logged, "" when reading
  power::helper_clock helpers_;              // each VM's vhost and QEMU threads' CPU time
};

}  // namespace magnet::host
