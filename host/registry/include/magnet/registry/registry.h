// The VM registry: what libvirt runs, mapped to what the kernel sees.
//
// It connects to libvirt (qemu:///system by default), lists domains,
// subscribes to lifecycle and device (hot-plug) events and, for each running
// domain, finds the QEMU process and its threads by role (vCPU n, I/O
// threads, vhost workers), its taps (name, ifindex), its vsock CID and its
// cgroups.  A tagger (the capture core) receives each VM as it appears,
// changes and disappears, so events are tagged with the VM id in the
// kernel.  A lifecycle event or the period (1 s) describes every domain
// again; a device added to or removed from a domain describes that domain
// at once, so a hot-unplugged vsock device's CID leaves its VM before the
// next period.  A libvirt that is down or restarts does not stop the
// registry: it says so and reconnects.  Nothing thrown on its thread ends
// it (or the process): a pass that throws is logged and the next one runs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "magnet/registry/domain_xml.h"
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

// Pure helpers, exposed for tests (the domain XML: domain_xml.h).
// vhost kernel workers ("vhost-PID", processes of their own before 6.4) by
// the QEMU pid they serve, from one walk of /proc.  A pass walks /proc once
// for all its VMs: a walk per VM would cost VMs x processes (bench/scale).
using vhost_workers = std::map<pid_t, std::vector<pid_t>>;
vhost_workers scan_vhost_workers();
// Threads of a QEMU process by role, from /proc/PID/task/*/comm, and its
// workers in @workers (or, without it, in a walk of /proc of its own).
std::vector<vm_thread> qemu_threads(pid_t qemu_pid, const vhost_workers& workers);
std::vector<vm_thread> qemu_threads(pid_t qemu_pid);
vm_thread classify_thread(pid_t tid, const std::string& comm, pid_t qemu_pid);

class registry {
 public:
  // @period: how often every domain is described again without an event
  // (new vhost workers, a libvirt that came back); tests make it long.
  registry(std::string uri, vm_tagger& tagger,
           std::chrono::milliseconds period = std::chrono::seconds(1));
  ~registry();
  registry(const registry&) = delete;

  void start();  // runs the event loop and the periodic pass in its own thread
  void stop();
  // One synchronous pass (connect if needed, list, diff, tag).  Used by
  // start()'s thread and by tests.
  status reconcile();

  // What libvirt's device-added and device-removed events call (on the
  // registry thread) for the domain of that UUID: the registry thread
  // describes it again as soon as it runs, not at the next period.  Any
  // thread may call it (tests do: libvirt's test driver cannot hot-plug).
  void devices_changed(const std::string& uuid);

  // Which running VM owns vsock CID @cid, as the domain's live description
  // says now: the VM the registry last saw with @cid, confirmed by reading
  // that domain's XML from libvirt again, so a CID whose device was
  // unplugged since (and perhaps given to another domain) has no owner
  // here even before the registry's own pass has seen the change.
  // 0 = no running VM has it.  An error when it cannot be confirmed
  // (libvirt unreachable, a description that does not parse, several VMs
  // known with @cid): whoever asks must then trust no one with @cid.
  // Thread-safe; three libvirt calls (lookup, active, XML), so it blocks
  // the caller for their round trips: the hub calls it off its io thread.
  result<uint32_t> cid_owner(uint32_t cid) const;

  std::vector<vm_info> vms() const;
  bool connected() const { return connected_.load(); }
  const std::string& uri() const { return uri_; }

 private:
  status connect();
  void disconnect();
  void run();
  void pass(std::chrono::steady_clock::time_point& due);
  void failed(const std::string& what);
  status refresh(const std::string& uuid);
  void commit(std::map<std::string, vm_info> now);
  void note_xml_error(const vm_info& vm, const std::string& why);
  void* connection_ref() const;  // virConnectPtr with a reference of its own, or null
  void wake();
  uint32_t id_for(const std::string& uuid, const std::map<std::string, vm_info>& now);

  std::string uri_;
  vm_tagger& tagger_;
  std::chrono::milliseconds period_;
  mutable std::mutex conn_mu_;  // conn_ itself; libvirt makes the connection thread-safe
  void* conn_ = nullptr;        // virConnectPtr
  std::vector<int> callbacks_;  // libvirt event callback ids on conn_
  std::atomic<bool> connected_{false}, stop_{false}, lifecycle_{false};
  const int wake_fd_;  // eventfd: wake() ends the registry thread's wait
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<std::string, vm_info> by_uuid_;  // running VMs
  std::map<std::string, uint32_t> ids_;     // uuid -> id, kept while the daemon runs
  std::set<std::string> untagged_;          // running VMs left without an id (logged once each)
  std::mutex pending_mu_;
  std::set<std::string> pending_;  // domains whose devices changed, to describe at once
  // Registry thread only: the last error of each domain's description and
  // of the last pass, each logged once until it changes.
  std::map<std::string, std::string> xml_errors_;
  std::string last_error_, pass_error_;
  bool resync_ = false;  // a pass threw: the next one tells the tagger every VM
};

}  // namespace magnet::host
