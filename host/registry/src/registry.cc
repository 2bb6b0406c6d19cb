#include "magnet/registry/registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <net/if.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <memory>
#include <optional>

#include "magnet/log.h"
#include "magnet/registry/libvirt_ref.h"
#include "magnet/control.h"

namespace magnet::host {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string cgroup2_mount() {
  std::ifstream m("/proc/self/mounts");
  std::string dev, dir, type, rest;
  while (m >> dev >> dir >> type && std::getline(m, rest))
    if (type == "cgroup2") return dir;
  return {};
}

// The cgroups of a task: "controllers:path" per hierarchy (v1 and v2);
// @v2 receives the unified-hierarchy path ("0::/machine/...").
std::vector<std::string> cgroups_of(pid_t tid, std::string& v2) {
  std::ifstream f("/proc/" + std::to_string(tid) + "/cgroup");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.rfind("0::", 0) == 0) v2 = path;
    if (path != "/") out.push_back((ctl.empty() ? std::string("unified") : ctl) + ":" + path);
  }
  return out;
}

// Resolves interface names inside the network namespace of @pid (QEMU's:
// libvirtd may run in another namespace than the daemon), and names that
// namespace, since an ifindex means a device only within its namespace.
std::vector<vm_tap> resolve_taps(pid_t pid, const std::vector<std::string>& names) {
  std::vector<vm_tap> out;
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  int target = open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC);
  bool switched = self >= 0 && target >= 0 && setns(target, CLONE_NEWNET) == 0;
  // The namespace the names were looked up in: QEMU's, or ours if we could
  // not enter it.
  struct stat st;
  int where = switched ? target : self;
  uint32_t ino = where >= 0 && fstat(where, &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0;
  for (const auto& n : names) out.push_back({n, static_cast<int>(if_nametoindex(n.c_str())), ino});
  if (switched) setns(self, CLONE_NEWNET);
  if (self >= 0) close(self);
  if (target >= 0) close(target);
  return out;
}

// A decimal process or thread id, 0 when @s is anything else.
pid_t pid_of(std::string_view s) {
  pid_t p = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), p);
  return ec == std::errc{} && end == s.data() + s.size() && p > 0 ? p : 0;
}

// QEMU names vCPU threads "CPU <n>/<accelerator>".
std::optional<int> vcpu_index(std::string_view comm) {
  if (!comm.starts_with("CPU ")) return {};
  comm.remove_prefix(4);
  auto slash = comm.find('/');
  if (slash == std::string_view::npos || slash == 0) return {};
  std::string_view num = comm.substr(0, slash), acc = comm.substr(slash + 1);
  if (acc != "KVM" && acc != "TCG" && acc != "HVF" && acc != "WHPX") return {};
  if (num.front() < '0' || num.front() > '9') return {};
  int n = 0;
  auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), n);
  if (ec != std::errc{} || end != num.data() + num.size()) return {};
  return n;
}

void quiet_libvirt(void*, virErrorPtr) {}  // errors are reported by our messages

// What libvirt says of one running domain.  Without a usable description
// (@no_xml: libvirt gave none; @xml_error: this reader refused it) the
// facts of the XML and of the process are missing from @vm.
struct description {
  vm_info vm;
  bool no_xml = false;
  std::string xml_error;
  bool usable() const { return !no_xml && xml_error.empty(); }
};

// What a pass reads of the host once for all its VMs, at the first VM
// that needs it: the vhost workers (one walk of /proc) and where cgroup v2
// is mounted.
class host_scan {
 public:
  const vhost_workers& workers() {
    if (!workers_) workers_ = scan_vhost_workers();
    return *workers_;
  }
  const std::string& cgroup2_root() {
    if (!root_) root_ = cgroup2_mount();
    return *root_;
  }

 private:
  std::optional<vhost_workers> workers_;
  std::optional<std::string> root_;
};

// The QEMU process's threads by role and their cgroups.
void describe_process(vm_info& vm, host_scan& scan) {
  vm.threads = qemu_threads(vm.qemu_pid, scan.workers());
  // Every hierarchy's path is reported; the unified (v2) ones are what the
  // kernel's cgroup ids refer to, so only they are tagged.
  const std::string& root = scan.cgroup2_root();
  std::set<std::string> all, v2s;
  for (const auto& t : vm.threads) {
    std::string v2;
    for (auto& c : cgroups_of(t.tid, v2)) all.insert(c);
    if (!v2.empty() && v2 != "/") v2s.insert(v2);  // never tag the root cgroup
  }
  vm.cgroups.assign(all.begin(), all.end());
  for (const auto& p : v2s) {
    struct stat st;
    if (!root.empty() && stat((root + p).c_str(), &st) == 0) vm.cgroup_ids.insert(st.st_ino);
  }
}

description describe(virDomainPtr d, host_scan& scan) {
  description r;
  vm_info& vm = r.vm;
  char uuid[VIR_UUID_STRING_BUFLEN] = {};
  virDomainGetUUIDString(d, uuid);
  vm.uuid = uuid;
  const char* name = virDomainGetName(d);
  vm.name = name ? name : "";
  vm.libvirt_id = static_cast<int>(virDomainGetID(d));
  vm.qemu_pid = vm.name.empty() ? 0 : pid_of(read_line("/run/libvirt/qemu/" + vm.name + ".pid"));
  char* xml = virDomainGetXMLDesc(d, 0);
  if (!xml) {
    r.no_xml = true;
    return r;
  }
  auto facts = parse_domain_xml(xml);
  free(xml);
  if (!facts) {
    r.xml_error = facts.err().message;
    return r;
  }
  vm.vsock_cid = facts->vsock_cid;
  vm.view_channel = facts->view_channel;
  vm.allowance_tx_bps = facts->allowance_tx_bps;
  vm.allowance_rx_bps = facts->allowance_rx_bps;
  if (vm.qemu_pid) {
    vm.taps = resolve_taps(vm.qemu_pid, facts->taps);
    describe_process(vm, scan);
  }
  return r;
}

// libvirt calls these on the registry thread, inside virEventRunDefaultImpl:
// they only record what to do, which run() does once the call returns.
int on_lifecycle(virConnectPtr, virDomainPtr, int, int, void* self) {
  static_cast<std::atomic<bool>*>(self)->store(true);
  return 0;
}

template <bool added>
void on_device(virConnectPtr, virDomainPtr d, const char* alias, void* self) {
  char uuid[VIR_UUID_STRING_BUFLEN] = {};
  if (virDomainGetUUIDString(d, uuid) != 0) return;
  if (log_verbosity() >= 2) {
    const char* name = virDomainGetName(d);
    log_info(std::string("magnet-host: [registry.device] domain ") + (name ? name : uuid) +
                    ": device " + (alias ? alias : "?") + (added ? " added" : " removed") +
                    "; describing it again");
  }
  static_cast<registry*>(self)->devices_changed(uuid);
}

}  // namespace

vm_thread classify_thread(pid_t tid, const std::string& comm, pid_t qemu_pid) {
  vm_thread t{tid, "emulator", -1, comm};
  if (auto n = vcpu_index(comm)) {
    t.role = "vcpu";
    t.vcpu = *n;
  } else if (comm.rfind("IO ", 0) == 0 || comm.rfind("iothread", 0) == 0) {
    t.role = "iothread";
  } else if (comm == "vhost-" + std::to_string(qemu_pid)) {
    t.role = "vhost";
  }
  return t;
}

vhost_workers scan_vhost_workers() {
  vhost_workers out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (auto* e = readdir(d)) {
    if (!pid_of(e->d_name)) continue;
    std::string comm = read_line(std::string("/proc/") + e->d_name + "/comm");
    if (!comm.starts_with("vhost-")) continue;
    if (pid_t owner = pid_of(std::string_view(comm).substr(6)))
      out[owner].push_back(pid_of(e->d_name));
  }
  closedir(d);
  return out;
}

std::vector<vm_thread> qemu_threads(pid_t qemu_pid, const vhost_workers& workers) {
  std::vector<vm_thread> out;
  std::string task = "/proc/" + std::to_string(qemu_pid) + "/task";
  if (DIR* d = opendir(task.c_str())) {
    while (auto* e = readdir(d)) {
      pid_t tid = pid_of(e->d_name);
      if (tid) out.push_back(classify_thread(tid, read_line(task + "/" + e->d_name + "/comm"), qemu_pid));
    }
    closedir(d);
  }
  // Before 6.4 vhost workers are kernel threads of their own, named after
  // the owner: "vhost-<qemu pid>".
  if (auto it = workers.find(qemu_pid); it != workers.end()) {
    const std::string name = "vhost-" + std::to_string(qemu_pid);
    for (pid_t pid : it->second)
      if (pid != qemu_pid) out.push_back({pid, "vhost", -1, name});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.tid < b.tid; });
  return out;
}

std::vector<vm_thread> qemu_threads(pid_t qemu_pid) { return qemu_threads(qemu_pid, scan_vhost_workers()); }

registry::registry(std::string uri, vm_tagger& tagger, std::chrono::milliseconds period)
    : uri_(std::move(uri)),
      tagger_(tagger),
      period_(period),
      // Without it the thread still runs, and wakes at the period.
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  static std::once_flag once;
  std::call_once(once, [] {
    virInitialize();
    virEventRegisterDefaultImpl();
    virSetErrorFunc(nullptr, quiet_libvirt);
  });
}

registry::~registry() {
  stop();
  disconnect();
  if (wake_fd_ >= 0) close(wake_fd_);
}

status registry::connect() {
  if (conn_) return {};
  virConnectPtr c = virConnectOpen(uri_.c_str());
  if (!c) return error{"libvirt at " + uri_ + " unavailable: " + libvirt_message()};
  {
    std::lock_guard lk(conn_mu_);
    conn_ = c;
  }
  virConnectSetKeepAlive(c, 5, 3);
  callbacks_.push_back(virConnectDomainEventRegisterAny(
      c, nullptr, VIR_DOMAIN_EVENT_ID_LIFECYCLE, VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), &lifecycle_,
      nullptr));
  // A hot-(un)plugged device, a vsock device above all, changes what the
  // VM is at once: waiting for the next pass would leave an unplugged CID
  // with its old VM that long.
  int removed = virConnectDomainEventRegisterAny(c, nullptr, VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED,
                                                 VIR_DOMAIN_EVENT_CALLBACK(on_device<false>), this, nullptr);
  int added = virConnectDomainEventRegisterAny(c, nullptr, VIR_DOMAIN_EVENT_ID_DEVICE_ADDED,
                                               VIR_DOMAIN_EVENT_CALLBACK(on_device<true>), this, nullptr);
  if (removed < 0 || added < 0)
    log_warning("magnet-host: [registry.events] libvirt at " + uri_ +
                    " gives no device events; hot-plugged devices are seen within " +
                    std::to_string(period_.count()) + " ms");
  callbacks_.push_back(removed);
  callbacks_.push_back(added);
  virConnectRegisterCloseCallback(
      c,
      [](virConnectPtr, int, void* self) {
        static_cast<registry*>(self)->connected_ = false;
      },
      this, nullptr);
  connected_ = true;
  return {};
}

void registry::disconnect() {
  virConnectPtr c;
  {
    std::lock_guard lk(conn_mu_);
    c = static_cast<virConnectPtr>(conn_);
    conn_ = nullptr;
  }
  if (!c) return;
  for (int id : callbacks_)
    if (id >= 0) virConnectDomainEventDeregisterAny(c, id);
  callbacks_.clear();
  virConnectUnregisterCloseCallback(c, nullptr);
  virConnectClose(c);
  connected_ = false;
}

void* registry::connection_ref() const {
  std::lock_guard lk(conn_mu_);
  if (!conn_ || virConnectRef(static_cast<virConnectPtr>(conn_)) != 0) return nullptr;
  return conn_;
}

// An id for the domain @uuid of the pass @now: the one it had, else the
// lowest free one.  Ids stay with their domains while the daemon runs (a
// VM stopped and started again keeps its id); when all are taken, those of
// domains neither in this pass nor in the last one are given up.  An id is
// never given to two domains of a pass or of the one before: events and
// views are per id.  0: none left (the VM stays untagged, commit()).
uint32_t registry::id_for(const std::string& uuid, const std::map<std::string, vm_info>& now) {
  if (auto it = ids_.find(uuid); it != ids_.end()) return it->second;
  auto lowest_free = [&]() -> uint32_t {
    std::vector<bool> used(MAGNET_MAX_VM_ID + 1, false);
    for (const auto& [u, id] : ids_) used[id] = true;
    for (uint32_t id = 1; id <= MAGNET_MAX_VM_ID; ++id)
      if (!used[id]) return id;
    return 0;
  };
  uint32_t id = lowest_free();
  if (!id) {
    std::erase_if(ids_, [&](const auto& kv) { return !now.count(kv.first) && !by_uuid_.count(kv.first); });
    id = lowest_free();
  }
  if (id) ids_[uuid] = id;
  return id;
}

// A description this reader refuses is logged once per domain until its
// error changes; what was known of the domain stays (as when libvirt gives
// none), since libvirt writes well-formed descriptions and a refusal is a
// bug to see, not a reason to drop the VM.
void registry::note_xml_error(const vm_info& vm, const std::string& why) {
  auto& last = xml_errors_[vm.uuid];
  if (last != why)
    log_warning("magnet-host: [registry.xml] domain " + vm.name + " (" + vm.uuid + "): " + why +
                    "; what the registry knew of it stays (nothing, if it is new)");
  last = why;
}

status registry::reconcile() {
  if (conn_ && !connected_) {
    log_warning("magnet-host: [registry.lost] connection to " + uri_ + " lost; reconnecting");
    disconnect();
  }
  if (!conn_) {
    auto s = connect();
    if (!s) {
      if (s.err().message != last_error_)
        log_warning("magnet-host: [registry.down] " + s.err().message + "; retrying every " +
                        std::to_string(period_.count()) + " ms");
      last_error_ = s.err().message;
      return s;
    }
    // Back after an outage is news; the first connection is only -v's.
    log_line(last_error_.empty() ? severity::info : severity::notice,
             "magnet-host: [registry.up] connected to " + uri_);
    last_error_.clear();
  }
  auto c = static_cast<virConnectPtr>(conn_);
  virDomainPtr* doms = nullptr;
  int n = virConnectListAllDomains(c, &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
  if (n < 0) {
    connected_ = false;
    return error{"listing domains at " + uri_ + " failed"};
  }
  std::map<std::string, vm_info> now;
  host_scan scan;  // one walk of /proc for the pass, not one per VM
  for (int i = 0; i < n; ++i) {
    domain_ref d(doms[i]);
    auto dsc = describe(d.get(), scan);
    if (dsc.usable()) {
      xml_errors_.erase(dsc.vm.uuid);
      now.emplace(dsc.vm.uuid, std::move(dsc.vm));
      continue;
    }
    // No usable description, so no CID, channel or taps: not a change of
    // the domain but of libvirt (a libvirtd going away answers the list
    // and then fails this; the domain may also have just stopped).  What
    // was known stays as it was this round; a domain not known yet waits
    // for the next.  Taking the empty facts as the domain's would close
    // its guest's sessions ("no longer has CID N") for nothing.
    if (!dsc.xml_error.empty()) note_xml_error(dsc.vm, dsc.xml_error);
    std::lock_guard lk(mu_);
    if (auto it = by_uuid_.find(dsc.vm.uuid); it != by_uuid_.end()) now.emplace(dsc.vm.uuid, it->second);
  }
  free(doms);
  std::erase_if(xml_errors_, [&](auto& kv) { return !now.count(kv.first); });
  commit(std::move(now));
  return {};
}

// One domain described again: the others stay as the last pass left them.
status registry::refresh(const std::string& uuid) {
  if (!conn_ || !connected_) return reconcile();
  auto c = static_cast<virConnectPtr>(conn_);
  std::map<std::string, vm_info> now;
  {
    std::lock_guard lk(mu_);
    now = by_uuid_;
  }
  domain_ref d(virDomainLookupByUUIDString(c, uuid.c_str()));
  if (!d) {
    virErrorPtr e = virGetLastError();
    if (!e || e->code != VIR_ERR_NO_DOMAIN)
      return error{"looking up domain " + uuid + " at " + uri_ + " failed: " + libvirt_message()};
    now.erase(uuid);  // undefined since the event
  } else {
    int active = virDomainIsActive(d.get());
    if (active < 0) return error{"domain " + uuid + " at " + uri_ + ": " + libvirt_message()};
    if (active == 0) {
      now.erase(uuid);
    } else {
      host_scan scan;
      auto dsc = describe(d.get(), scan);
      if (dsc.usable()) {
        xml_errors_.erase(uuid);
        now[uuid] = std::move(dsc.vm);
      } else if (!dsc.xml_error.empty()) {
        note_xml_error(dsc.vm, dsc.xml_error);  // what was known stays, as in reconcile()
      }
    }
  }
  commit(std::move(now));
  return {};
}

// @now: every running VM as described now.  Tells the tagger what differs
// from what it was told, or everything after a pass that threw (the tagger
// may have missed some of what that pass found).
void registry::commit(std::map<std::string, vm_info> now) {
  std::vector<vm_info> changed;
  std::vector<uint32_t> gone;
  const bool all = resync_;
  {
    std::lock_guard lk(mu_);
    for (auto& [uuid, vm] : now) {
      vm.vm_id = id_for(uuid, now);
      if (vm.vm_id == 0) {
        // Every id is held by a running VM: this one is not tagged, and
        // the tagger never hears of it (an id 0 shared by several VMs
        // would mix their events and views).
        if (untagged_.insert(uuid).second)
          log_warning("magnet-host: [registry] VM " + vm.name + " (" + uuid + ") is not tagged: all " +
                      std::to_string(MAGNET_MAX_VM_ID) +
                      " VM ids are held by running VMs; its events count for no VM and its guest gets no view");
        continue;
      }
      untagged_.erase(uuid);
      auto it = by_uuid_.find(uuid);
      if (it == by_uuid_.end() || all) {
        changed.push_back(vm);
      } else if (!(it->second == vm)) {
        // A restart is a new process: the old one is gone with its state.
        // New threads or taps of the same process are only a change.
        if (it->second.qemu_pid != vm.qemu_pid && it->second.vm_id) gone.push_back(vm.vm_id);
        changed.push_back(vm);
      }
    }
    for (auto& [uuid, vm] : by_uuid_)
      if (vm.vm_id && (!now.count(uuid) || !now.at(uuid).vm_id)) gone.push_back(vm.vm_id);
    std::erase_if(untagged_, [&](const std::string& u) { return !now.count(u); });
    by_uuid_ = std::move(now);
  }
  for (uint32_t id : gone) tagger_.vm_gone(id);
  for (const auto& vm : changed) tagger_.vm_changed(vm);
  resync_ = false;
}

std::vector<vm_info> registry::vms() const {
  std::lock_guard lk(mu_);
  std::vector<vm_info> v;
  for (auto& [u, vm] : by_uuid_) v.push_back(vm);
  return v;
}

result<uint32_t> registry::cid_owner(uint32_t cid) const {
  std::string uuid, name;
  uint32_t id = 0;
  int n = 0;
  {
    std::lock_guard lk(mu_);
    for (const auto& [u, vm] : by_uuid_)
      if (vm.vsock_cid == cid) uuid = u, name = vm.name, id = vm.vm_id, ++n;
  }
  if (n == 0 || cid == 0) return 0u;
  if (n > 1) return error{"CID " + std::to_string(cid) + " is known for " + std::to_string(n) + " domains"};
  conn_ref c(static_cast<virConnectPtr>(connection_ref()));
  if (!c) return error{"not connected to libvirt at " + uri_};
  domain_ref d(virDomainLookupByUUIDString(c.get(), uuid.c_str()));
  if (!d) {
    virErrorPtr e = virGetLastError();
    if (e && e->code == VIR_ERR_NO_DOMAIN) return 0u;
    return error{"looking up domain " + name + " failed: " + libvirt_message()};
  }
  int active = virDomainIsActive(d.get());
  if (active < 0) return error{"domain " + name + ": " + libvirt_message()};
  if (active == 0) return 0u;
  char* xml = virDomainGetXMLDesc(d.get(), 0);
  if (!xml) return error{"domain " + name + " has no description: " + libvirt_message()};
  auto f = parse_domain_xml(xml);
  free(xml);
  if (!f) return error{"domain " + name + ": " + f.err().message};
  return f->vsock_cid == cid ? id : 0u;
}

void registry::devices_changed(const std::string& uuid) {
  {
    std::lock_guard lk(pending_mu_);
    pending_.insert(uuid);
  }
  wake();
}

// Ends the registry thread's wait in virEventRunDefaultImpl now.  An
// eventfd, not a libvirt timer armed from here: libvirt's event loop (GLib)
// would then allocate on this thread what the registry thread frees, under
// GLib's own locks, which ThreadSanitizer cannot see.
void registry::wake() {
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
}

// What one turn of the loop does: every domain when the period is over, a
// domain started or stopped, or the connection is down; else only the
// domains whose devices changed.
void registry::pass(std::chrono::steady_clock::time_point& due) {
  std::set<std::string> devices;
  {
    std::lock_guard lk(pending_mu_);
    devices.swap(pending_);
  }
  auto now = std::chrono::steady_clock::now();
  if (lifecycle_.exchange(false) || now >= due || !connected_) {
    due = now + period_;
    (void)reconcile();  // describes the domains in @devices too
    return;
  }
  for (const auto& uuid : devices)
    if (auto s = refresh(uuid); !s) log_info("magnet-host: [registry.refresh] " + s.err().message);
}

void registry::failed(const std::string& what) {
  if (pass_error_ != what)
    log_error("magnet-host: [registry.error] a pass failed: " + what + "; the next one tells every VM again");
  pass_error_ = what;
  resync_ = true;
}

void registry::run() {
  // libvirt's event loop runs here.  The period's timer bounds every wait;
  // wake() (devices_changed() and stop(), from any thread) ends one early.
  int watch = wake_fd_ < 0 ? -1
                           : virEventAddHandle(
                                 wake_fd_, VIR_EVENT_HANDLE_READABLE,
                                 [](int, int fd, int, void*) {
                                   uint64_t n;
                                   (void)!::read(fd, &n, sizeof n);
                                 },
                                 nullptr, nullptr);
  const int period_ms = static_cast<int>(period_.count());
  int timer = virEventAddTimeout(period_ms, [](int, void*) {}, nullptr, nullptr);
  auto due = std::chrono::steady_clock::now();  // the thread's first pass is whole
  while (!stop_) {
    // Nothing thrown here may end the thread: std::terminate would take the
    // daemon with it.  A pass that throws (a bug, memory running out, a
    // tagger that throws) is logged, and the next one tells the tagger
    // every VM again.
    try {
      pass(due);
      pass_error_.clear();
    } catch (const std::exception& e) {
      failed(e.what());
    } catch (...) {
      failed("an exception that is not a std::exception");
    }
    // The timer ends the wait when the next whole pass is due.
    auto left = std::chrono::ceil<std::chrono::milliseconds>(due - std::chrono::steady_clock::now());
    virEventUpdateTimeout(timer, static_cast<int>(std::clamp<int64_t>(left.count(), 1, period_ms)));
    if (virEventRunDefaultImpl() < 0) usleep(100000);
  }
  virEventRemoveTimeout(timer);
  if (watch >= 0) virEventRemoveHandle(watch);
}

void registry::start() {
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void registry::stop() {
  stop_ = true;
  wake();
  if (thread_.joinable()) thread_.join();
}

}  // namespace magnet::host
