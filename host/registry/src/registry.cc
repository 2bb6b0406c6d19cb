#include "magnet/registry/registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <net/if.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "magnet/log.h"
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

void quiet_libvirt(void*, virErrorPtr) {}  // errors are reported by our messages

}  // namespace

domain_xml_facts parse_domain_xml(const std::string& xml) {
  domain_xml_facts f;
  static const std::regex iface(R"(<interface\b[\s\S]*?</interface>)");
  static const std::regex target(R"(<target\s+dev=['"]([^'"]+)['"])");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), iface); it != std::sregex_iterator();
       ++it) {
    std::smatch m;
    std::string block = it->str();
    if (std::regex_search(block, m, target)) f.taps.push_back(m[1]);
  }
  static const std::regex vsock(R"(<vsock\b[\s\S]*?<cid\b[^>]*address=['"](\d+)['"])");
  std::smatch m;
  if (std::regex_search(xml, m, vsock)) f.vsock_cid = static_cast<uint32_t>(std::stoul(m[1]));
  // The view channel: a unix channel QEMU listens on (mode bind) whose
  // virtio target has magnet's name; the daemon connects to it.
  static const std::regex channel(R"(<channel\b[^>]*type=['"]unix['"][\s\S]*?</channel>)");
  static const std::regex bind_path(R"(<source\b[^>]*mode=['"]bind['"][^>]*path=['"]([^'"]+)['"])");
  static const std::regex path_bind(R"(<source\b[^>]*path=['"]([^'"]+)['"][^>]*mode=['"]bind['"])");
  const std::regex name(std::string(R"(<target\b[^>]*name=['"])") + kViewChannelName + "['\"]");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), channel); it != std::sregex_iterator();
       ++it) {
    std::string block = it->str();
    if (!std::regex_search(block, name)) continue;
    if (std::regex_search(block, m, bind_path) || std::regex_search(block, m, path_bind)) {
      f.view_channel = m[1];
      break;
    }
  }
  // <bandwidth> of each interface: average in kilobytes/s (libvirt hands it
  // to tc as "kbps", 8000 bit/s each).  inbound = to the guest (its RX).
  static const std::regex bw(R"(<bandwidth\b[\s\S]*?</bandwidth>)");
  static const std::regex in(R"(<inbound\b[^>]*average=['"](\d+)['"])");
  static const std::regex out(R"(<outbound\b[^>]*average=['"](\d+)['"])");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), iface); it != std::sregex_iterator();
       ++it) {
    std::string block = it->str();
    std::smatch b;
    if (!std::regex_search(block, b, bw)) continue;
    std::string bws = b.str();
    if (std::regex_search(bws, m, in)) f.allowance_rx_bps += 8000.0 * std::stod(m[1]);
    if (std::regex_search(bws, m, out)) f.allowance_tx_bps += 8000.0 * std::stod(m[1]);
  }
  return f;
}

vm_thread classify_thread(pid_t tid, const std::string& comm, pid_t qemu_pid) {
  vm_thread t{tid, "emulator", -1, comm};
  static const std::regex vcpu(R"(^CPU (\d+)/(KVM|TCG|HVF|WHPX)$)");
  std::smatch m;
  if (std::regex_match(comm, m, vcpu)) {
    t.role = "vcpu";
    t.vcpu = std::stoi(m[1]);
  } else if (comm.rfind("IO ", 0) == 0 || comm.rfind("iothread", 0) == 0) {
    t.role = "iothread";
  } else if (comm == "vhost-" + std::to_string(qemu_pid)) {
    t.role = "vhost";
  }
  return t;
}

std::vector<vm_thread> qemu_threads(pid_t qemu_pid) {
  std::vector<vm_thread> out;
  std::string task = "/proc/" + std::to_string(qemu_pid) + "/task";
  if (DIR* d = opendir(task.c_str())) {
    while (auto* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      pid_t tid = std::atoi(e->d_name);
      out.push_back(classify_thread(tid, read_line(task + "/" + e->d_name + "/comm"), qemu_pid));
    }
    closedir(d);
  }
  // Before 6.4 vhost workers are kernel threads of their own, named after
  // the owner: "vhost-<qemu pid>".
  const std::string want = "vhost-" + std::to_string(qemu_pid);
  if (DIR* d = opendir("/proc")) {
    while (auto* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      pid_t pid = std::atoi(e->d_name);
      if (pid == qemu_pid) continue;
      if (read_line(std::string("/proc/") + e->d_name + "/comm") == want)
        out.push_back({pid, "vhost", -1, want});
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.tid < b.tid; });
  return out;
}

registry::registry(std::string uri, vm_tagger& tagger) : uri_(std::move(uri)), tagger_(tagger) {
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
}

status registry::connect() {
  if (conn_) return {};
  virConnectPtr c = virConnectOpen(uri_.c_str());
  if (!c) {
    virErrorPtr e = virGetLastError();
    return error{"libvirt at " + uri_ + " unavailable: " + (e && e->message ? e->message : "?")};
  }
  conn_ = c;
  virConnectSetKeepAlive(c, 5, 3);
  lifecycle_cb_ = virConnectDomainEventRegisterAny(
      c, nullptr, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
      // Nothing to record: dispatching the event ends virEventRunDefaultImpl,
      // and run() reconciles right after it.
      VIR_DOMAIN_EVENT_CALLBACK(+[](virConnectPtr, virDomainPtr, int, int, void*) { return 0; }),
      nullptr, nullptr);
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
  if (!conn_) return;
  auto c = static_cast<virConnectPtr>(conn_);
  if (lifecycle_cb_ >= 0) virConnectDomainEventDeregisterAny(c, lifecycle_cb_);
  virConnectUnregisterCloseCallback(c, nullptr);
  virConnectClose(c);
  conn_ = nullptr;
  lifecycle_cb_ = -1;
  connected_ = false;
}

uint32_t registry::id_for(const std::string& uuid) {
  if (auto it = ids_.find(uuid); it != ids_.end()) return it->second;
  std::set<uint32_t> used;
  for (auto& [u, id] : ids_) used.insert(id);
  for (uint32_t id = 1; id <= MAGNET_MAX_VM_ID; ++id) {
    if (used.count(id)) continue;
    ids_[uuid] = id;
    return id;
  }
  // All ids taken: forget those of VMs not running, then retry once.
  std::erase_if(ids_, [&](auto& kv) { return !by_uuid_.count(kv.first); });
  for (uint32_t id = 1; id <= MAGNET_MAX_VM_ID; ++id) {
    bool taken = false;
    for (auto& [u, i] : ids_) taken |= i == id;
    if (!taken) return ids_[uuid] = id;
  }
  return 0;
}

status registry::reconcile() {
  if (conn_ && !connected_) {
    log_line(1, "magnet-host: [registry.lost] connection to " + uri_ + " lost; reconnecting");
    disconnect();
  }
  if (!conn_) {
    auto s = connect();
    if (!s) {
      if (s.err().message != last_error_)
        log_line(1, "magnet-host: [registry.down] " + s.err().message + "; retrying every second");
      last_error_ = s.err().message;
      return s;
    }
    if (!last_error_.empty() || log_verbosity() >= 2)
      log_line(1, "magnet-host: [registry.up] connected to " + uri_);
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
  for (int i = 0; i < n; ++i) {
    virDomainPtr d = doms[i];
    char uuid[VIR_UUID_STRING_BUFLEN] = {};
    virDomainGetUUIDString(d, uuid);
    vm_info vm;
    vm.uuid = uuid;
    vm.name = virDomainGetName(d);
    vm.libvirt_id = static_cast<int>(virDomainGetID(d));
    std::string pidf = read_line("/run/libvirt/qemu/" + vm.name + ".pid");
    vm.qemu_pid = pidf.empty() ? 0 : std::atoi(pidf.c_str());
    char* xml = virDomainGetXMLDesc(d, 0);
    if (!xml) {
      // No description, so no CID, channel or taps: not a change of the
      // domain but of libvirt (a libvirtd going away answers the list and
      // then fails this; the domain may also have just stopped).  What was
      // known stays as it was this round; a domain not known yet waits
      // for the next.  Taking the empty facts as the domain's would close
      // its guest's sessions ("no longer has CID N") for nothing.
      {
        std::lock_guard lk(mu_);
        if (auto it = by_uuid_.find(vm.uuid); it != by_uuid_.end()) now.emplace(vm.uuid, it->second);
      }
      virDomainFree(d);
      continue;
    }
    auto facts = parse_domain_xml(xml);
    free(xml);
    vm.vsock_cid = facts.vsock_cid;
    vm.view_channel = facts.view_channel;
    vm.allowance_tx_bps = facts.allowance_tx_bps;
    vm.allowance_rx_bps = facts.allowance_rx_bps;
    if (vm.qemu_pid) vm.taps = resolve_taps(vm.qemu_pid, facts.taps);
    if (vm.qemu_pid) {
      vm.threads = qemu_threads(vm.qemu_pid);
      // Every hierarchy's path is reported; the unified (v2) ones are what
      // the kernel's cgroup ids refer to, so only they are tagged.
      std::string root = cgroup2_mount();
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
    virDomainFree(d);
    now.emplace(vm.uuid, std::move(vm));
  }
  free(doms);

  std::vector<vm_info> changed;
  std::vector<uint32_t> gone;
  {
    std::lock_guard lk(mu_);
    for (auto& [uuid, vm] : now) {
      vm.vm_id = id_for(uuid);
      auto it = by_uuid_.find(uuid);
      if (it == by_uuid_.end()) {
        changed.push_back(vm);
      } else if (!(it->second == vm)) {
        // A restart is a new process: the old one is gone with its state.
        // New threads or taps of the same process are only a change.
        if (it->second.qemu_pid != vm.qemu_pid) gone.push_back(vm.vm_id);
        changed.push_back(vm);
      }
    }
    for (auto& [uuid, vm] : by_uuid_)
      if (!now.count(uuid)) gone.push_back(vm.vm_id);
    by_uuid_ = std::move(now);
  }
  for (uint32_t id : gone) tagger_.vm_gone(id);
  for (const auto& vm : changed) tagger_.vm_changed(vm);
  return {};
}

std::vector<vm_info> registry::vms() const {
  std::lock_guard lk(mu_);
  std::vector<vm_info> v;
  for (auto& [u, vm] : by_uuid_) v.push_back(vm);
  return v;
}

void registry::run() {
  // libvirt's event loop runs here; a 1 s timer bounds every iteration, so
  // lifecycle changes and new threads (vhost workers start late) are picked
  // up within a second, and stop() is honoured within a second.
  int timer = virEventAddTimeout(1000, [](int, void*) {}, nullptr, nullptr);
  while (!stop_) {
    (void)reconcile();
    if (virEventRunDefaultImpl() < 0) usleep(100000);
  }
  virEventRemoveTimeout(timer);
}

void registry::start() {
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void registry::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace magnet::host
