// The VM registry: what libvirt runs, mapped to what the kernel sees.
//
// It connects to libvirt (qemu:///system by default), lists domains,
// subscribes to lifecycle events and, for each running domain, finds the
// QEMU process and its threads by role (vCPU n, I/O threads, vhost workers),
// its taps (name, ifindex), its vsock CID and its cgroups.  A tagger (the
// capture core) receives each VM as it appears, changes and disappears, so
// events are tagged with the VM id in the kernel.  A libvirt that is down or
// restarts does not stop the registry: it says so and reconnects.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "magnet/result.h"

namespace magnet::host {

struct vm_thread {
  pid_t tid = 0;
  std::string role;  // "vcpu", "iothread", "vhost", "emulator"
  int vcpu = -1;     // vCPU index for role "vcpu"
  std::string comm;
  bool operator==(const vm_thread&) const = default;
};

struct vm_tap {
  std::string name;
  int ifindex = 0;         // in QEMU's network namespace
  uint32_t netns_ino = 0;  // that namespace: inode of /proc/QEMU_PID/ns/net (0: unknown)
  bool operator==(const vm_tap&) const = default;
};

struct vm_info {
  uint32_t vm_id = 0;  // magnet's id: 1..255, stable per UUID while the daemon runs
  std::string uuid, name;
  int libvirt_id = -1;
  pid_t qemu_pid = 0;
  std::vector<vm_thread> threads;
  std::vector<vm_tap> taps;
  uint32_t vsock_cid = 0;
  std::string view_channel;  // host end of the org.magnet.view.0 channel, "" = none
  // libvirt <bandwidth> on its interfaces, bits/s (0 = none): outbound is
  // what the guest sends (TX), inbound what it receives (RX).
  double allowance_tx_bps = 0, allowance_rx_bps = 0;
  std::vector<std::string> cgroups;  // cgroup v2 paths of the VM's threads
  std::set<uint64_t> cgroup_ids;
  bool operator==(const vm_info&) const = default;
};

// Receives the mapping; called from the registry thread.
class vm_tagger {
 public:
  virtual ~vm_tagger() = default;
  // New, or changed (threads, taps): the tagger replaces the VM's mapping.
  virtual void vm_changed(const vm_info& vm) = 0;
  // Stopped, or restarted (a new QEMU process follows with vm_changed).
  virtual void vm_gone(uint32_t vm_id) = 0;
};

// Pure helpers, exposed for tests.
inline constexpr const char* kViewChannelName = "org.magnet.view.0";
struct domain_xml_facts {
  std::vector<std::string> taps;
  uint32_t vsock_cid = 0;
  std::string view_channel;  // unix socket path of the view channel
  double allowance_tx_bps = 0, allowance_rx_bps = 0;  // summed over interfaces
};
domain_xml_facts parse_domain_xml(const std::string& xml);
// Threads of a QEMU process by role, from /proc/PID/task/*/comm; vhost
// kernel workers ("vhost-PID", separate processes before 6.4) included.
std::vector<vm_thread> qemu_threads(pid_t qemu_pid);
vm_thread classify_thread(pid_t tid, const std::string& comm, pid_t qemu_pid);

class registry {
 public:
  registry(std::string uri, vm_tagger& tagger);
  ~registry();
  registry(const registry&) = delete;

  void start();  // runs the event loop and a 1 s reconcile in its own thread
  void stop();
  // One synchronous pass (connect if needed, list, diff, tag).  Used by
  // start()'s thread and by tests.
  status reconcile();

  std::vector<vm_info> vms() const;
  bool connected() const { return connected_.load(); }
  const std::string& uri() const { return uri_; }

 private:
  status connect();
  void disconnect();
  void run();
  uint32_t id_for(const std::string& uuid);

  std::string uri_;
  vm_tagger& tagger_;
  void* conn_ = nullptr;  // virConnectPtr
  int lifecycle_cb_ = -1;
  std::atomic<bool> connected_{false}, stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<std::string, vm_info> by_uuid_;  // running VMs
  std::map<std::string, uint32_t> ids_;     // uuid -> id, kept while the daemon runs
  std::string last_error_;
};

}  // namespace magnet::host
