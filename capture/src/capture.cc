#include "magnet/capture/capture.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_map>

#include "magnet/log.h"
#include "magnet/events.h"
#include "magnet/event.h"
// The skeleton names proto/ structs: include them first.
#include "capture.skel.h"

namespace magnet {
namespace {

// Not in Debian 12's uapi headers (6.1); stable kernel ABI values since 6.4.
constexpr int kProgTypeNetfilter = 32;
constexpr int kAttachNetfilter = 45;
constexpr int kNfInetPreRouting = 0;
constexpr int kNfInetLocalOut = 3;
constexpr int kNfprotoIpv4 = 2;
constexpr int kNfprotoIpv6 = 10;

using M = method;

const std::vector<probe_spec> kProbes = {
    {MAGNET_P_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_SEND, "socket",
     "bytes an application hands to a socket (sendmsg return)",
     {{M::tp_btf, {"sock_send_btf"}, "sock/sock_send_length"},
      {M::raw_tp, {"sock_send_raw"}, "sock/sock_send_length"},
      {M::fentry, {"sock_send_fentry", "sock_send_fexit", "sock_send6_fentry", "sock_send6_fexit"},
       "inet_sendmsg"},
      {M::kprobe, {"sock_send_kprobe", "sock_send_kretprobe", "sock_send6_kprobe", "sock_send6_kretprobe"},
       "inet_sendmsg"}}},
    {MAGNET_P_NET_SOCK_RECV, MAGNET_EV_NET_SOCK_RECV, "socket",
     "bytes an application takes from a socket (recvmsg return)",
     {{M::tp_btf, {"sock_recv_btf"}, "sock/sock_recv_length"},
      {M::raw_tp, {"sock_recv_raw"}, "sock/sock_recv_length"},
      {M::fentry, {"sock_recv_fentry", "sock_recv_fexit", "sock_recv6_fentry", "sock_recv6_fexit"},
       "inet_recvmsg"},
      {M::kprobe, {"sock_recv_kprobe", "sock_recv_kretprobe", "sock_recv6_kprobe", "sock_recv6_kretprobe"},
       "inet_recvmsg"}}},
    {MAGNET_P_NET_L4_SEND, MAGNET_EV_NET_L4_SEND, "transport",
     "TCP segment / UDP datagram handed from the transport to IP",
     {{M::netfilter, {"l4_send_nf"}, "LOCAL_OUT", kNfInetLocalOut},
      {M::fentry, {"l4_send_fentry"}, "ip_local_out"},
      {M::kprobe, {"l4_send_kprobe"}, "ip_local_out"}}},
    {MAGNET_P_NET_L4_RECV, MAGNET_EV_NET_L4_RECV, "transport",
     "TCP segment / UDP datagram delivered to its socket",
     {{M::cgroup_skb, {"l4_recv_cgskb"}, "ingress", 0}}},
    {MAGNET_P_NET_IP_SEND, MAGNET_EV_NET_IP_SEND, "ip", "IP output (ip_finish_output)",
     {{M::cgroup_skb, {"ip_send_cgskb"}, "egress", 1}}},
    {MAGNET_P_NET_IP_RECV, MAGNET_EV_NET_IP_RECV, "ip", "IP input (ip_rcv)",
     {{M::netfilter, {"ip_recv_nf"}, "PRE_ROUTING", kNfInetPreRouting},
      {M::fentry, {"ip_recv_fentry"}, "ip_rcv"},
      {M::kprobe, {"ip_recv_kprobe"}, "ip_rcv"}}},
    {MAGNET_P_NET_DEV_XMIT, MAGNET_EV_NET_DEV_XMIT, "device", "packet queued to a device",
     {{M::tp_btf, {"dev_xmit_btf"}, "net/net_dev_queue"},
      {M::raw_tp, {"dev_xmit_raw"}, "net/net_dev_queue"}}},
    {MAGNET_P_NET_DEV_RECV, MAGNET_EV_NET_DEV_RECV, "device", "packet received from a device",
     {{M::tp_btf, {"dev_recv_btf"}, "net/netif_receive_skb"},
      {M::raw_tp, {"dev_recv_raw"}, "net/netif_receive_skb"}}},
    // Packet capture: the net.dev hooks again, with the frame's first bytes
    // (capture_options::snap_bytes); selected only by name (select_events).
    {MAGNET_P_NET_PKT_XMIT, MAGNET_EV_NET_PKT_XMIT, "device",
     "packet queued to a device, with its first bytes (a packet capture)",
     {{M::tp_btf, {"pkt_xmit_btf"}, "net/net_dev_queue"},
      {M::raw_tp, {"pkt_xmit_raw"}, "net/net_dev_queue"}}},
    {MAGNET_P_NET_PKT_RECV, MAGNET_EV_NET_PKT_RECV, "device",
     "packet received from a device, with its first bytes (a packet capture)",
     {{M::tp_btf, {"pkt_recv_btf"}, "net/netif_receive_skb"},
      {M::raw_tp, {"pkt_recv_raw"}, "net/netif_receive_skb"}}},
    {MAGNET_P_NET_TCP_STATE, MAGNET_EV_NET_TCP_STATE, "transport",
     "TCP state snapshot on each received segment",
     {{M::tp_btf, {"tcp_state_btf"}, "tcp/tcp_probe"},
      {M::raw_tp, {"tcp_state_raw"}, "tcp/tcp_probe"}}},
    {MAGNET_P_SCHED_SWITCH, MAGNET_EV_SCHED_SWITCH, "scheduler", "context switch",
     {{M::tp_btf, {"sched_switch_btf"}, "sched/sched_switch"},
      {M::raw_tp, {"sched_switch_raw"}, "sched/sched_switch"}}},
    {MAGNET_P_SCHED_WAKEUP, MAGNET_EV_SCHED_WAKEUP, "scheduler", "task wakeup",
     {{M::tp_btf, {"sched_wakeup_btf"}, "sched/sched_wakeup"},
      {M::raw_tp, {"sched_wakeup_raw"}, "sched/sched_wakeup"}}},
    {MAGNET_P_PROC_FORK, MAGNET_EV_PROC_FORK, "process", "fork/clone",
     {{M::tp_btf, {"proc_fork_btf"}, "sched/sched_process_fork"},
      {M::raw_tp, {"proc_fork_raw"}, "sched/sched_process_fork"}}},
    {MAGNET_P_PROC_EXIT, MAGNET_EV_PROC_EXIT, "process", "task exit",
     {{M::tp_btf, {"proc_exit_btf"}, "sched/sched_process_exit"},
      {M::raw_tp, {"proc_exit_raw"}, "sched/sched_process_exit"}}},
    {MAGNET_P_BLK_ISSUE, MAGNET_EV_BLK_ISSUE, "block", "block request issued to the driver",
     // block_getrq: the submitter, in its own context; block_bio_*merge:
     // a merged bio drops what an earlier bio at its address left;
     // block_rq_requeue: a request issued again keeps it (capture.bpf.c)
     {{M::tp_btf,
       {"blk_issue_btf", "blk_getrq_btf", "blk_backmerge_btf", "blk_frontmerge_btf", "blk_requeue_btf"},
       "block/block_rq_issue"},
      {M::raw_tp,
       {"blk_issue_raw", "blk_getrq_raw", "blk_backmerge_raw", "blk_frontmerge_raw", "blk_requeue_raw"},
       "block/block_rq_issue"}}},
    // The submitter and the issue time of a completed request are kept by
    // the blk.issue programs: "needs".
    {MAGNET_P_BLK_COMPLETE, MAGNET_EV_BLK_COMPLETE, "block", "block request completed",
     {{M::tp_btf, {"blk_complete_btf"}, "block/block_rq_complete"},
      {M::raw_tp, {"blk_complete_raw"}, "block/block_rq_complete"}},
     {MAGNET_EV_BLK_ISSUE}},
    {MAGNET_P_KVM_EXIT, MAGNET_EV_KVM_EXIT, "hypervisor", "KVM VM exit with its reason",
     {{M::tracepoint, {"kvm_exit_tp"}, "kvm/kvm_exit"}}},
    // The vCPU state of kvm.entry, kvm.userspace_exit and kvm.wakeup is
    // kept by the kvm.exit and kvm.userspace_exit programs: "needs".
    {MAGNET_P_KVM_ENTRY, MAGNET_EV_KVM_ENTRY, "hypervisor",
     "KVM VM entry, with the exit->entry time of the exit it ends",
     {{M::tracepoint, {"kvm_entry_tp"}, "kvm/kvm_entry"}},
     {MAGNET_EV_KVM_EXIT, MAGNET_EV_KVM_USERSPACE_EXIT}},
    {MAGNET_P_KVM_USERSPACE_EXIT, MAGNET_EV_KVM_USERSPACE_EXIT, "hypervisor",
     "KVM_RUN returns to the VMM (I/O, MMIO, ... handled in QEMU)",
     {{M::tracepoint, {"kvm_uexit_tp"}, "kvm/kvm_userspace_exit"}},
     {MAGNET_EV_KVM_EXIT}},
    {MAGNET_P_KVM_WAKEUP, MAGNET_EV_KVM_WAKEUP, "hypervisor",
     "halted vCPU resumes: halt time, polled or slept",
     {{M::tracepoint, {"kvm_wakeup_tp"}, "kvm/kvm_vcpu_wakeup"}},
     {MAGNET_EV_KVM_EXIT}},
    {MAGNET_P_KVM_HALT_POLL, MAGNET_EV_KVM_HALT_POLL, "hypervisor",
     "halt-polling window of a vCPU grown or shrunk",
     {{M::tracepoint, {"kvm_halt_poll_tp"}, "kvm/kvm_halt_poll_ns"}}},
    {MAGNET_P_NET_DROP, MAGNET_EV_NET_DROP, "device",
     "packet dropped (kfree_skb with a reason); a VM's when on its tap",
     {{M::tp_btf, {"drop_btf"}, "skb/kfree_skb"},
      {M::raw_tp, {"drop_raw"}, "skb/kfree_skb"}}},
    {MAGNET_P_VMNET_QUEUE_TX, MAGNET_EV_VMNET_QUEUE_TX, "vmnet",
     "host queueing of a guest's packet: its tap -> transmitting device",
     {{M::tp_btf, {"queue_tx_in_btf", "queue_tx_out_btf"}, "net/net_dev_start_xmit"},
      {M::raw_tp, {"queue_tx_in_raw", "queue_tx_out_raw"}, "net/net_dev_start_xmit"}}},
    {MAGNET_P_VMNET_QUEUE_RX, MAGNET_EV_VMNET_QUEUE_RX, "vmnet",
     "host queueing of a packet to a guest: receiving device -> its tap",
     {{M::tp_btf, {"queue_rx_in_btf", "queue_rx_out_btf"}, "net/net_dev_start_xmit"},
      {M::raw_tp, {"queue_rx_in_raw", "queue_rx_out_raw"}, "net/net_dev_start_xmit"}}},
    {MAGNET_P_VMNET_VHOST_TX, MAGNET_EV_VMNET_VHOST_TX, "vmnet",
     "vhost-net handle_tx run (guest TX work) in the VM's vhost worker",
     {{M::fentry, {"vhost_tx_fentry", "vhost_tx_fexit"}, "handle_tx"},
      {M::kprobe, {"vhost_tx_kprobe", "vhost_tx_kretprobe"}, "handle_tx"}}},
    {MAGNET_P_VMNET_VHOST_RX, MAGNET_EV_VMNET_VHOST_RX, "vmnet",
     "vhost-net handle_rx run (guest RX work) in the VM's vhost worker",
     {{M::fentry, {"vhost_rx_fentry", "vhost_rx_fexit"}, "handle_rx"},
      {M::kprobe, {"vhost_rx_kprobe", "vhost_rx_kretprobe"}, "handle_rx"}}},
};

std::string tp_name(const char* target) {
  std::string t = target;
  auto slash = t.find('/');
  return slash == std::string::npos ? t : t.substr(slash + 1);
}

std::string find_mount(const char* fstype) {
  std::ifstream m("/proc/self/mounts");
  std::string dev, dir, type, rest;
  while (m >> dev >> dir >> type && std::getline(m, rest))
    if (type == fstype) return dir;
  return {};
}

std::string ensure_tracefs() {
  std::string t = find_mount("tracefs");
  if (!t.empty()) return t;
  // Tracepoint existence is read from tracefs; mounting it is harmless.
  if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0)
    return "/sys/kernel/tracing";
  return {};
}

std::string ensure_cgroup2() {
  std::string c = find_mount("cgroup2");
  if (!c.empty()) return c;
  mkdir("/run/magnet", 0755);
  mkdir("/run/magnet/cgroup2", 0755);
  if (mount("none", "/run/magnet/cgroup2", "cgroup2", 0, nullptr) == 0)
    return "/run/magnet/cgroup2";
  return {};
}

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

// Tries to load a do-nothing program of the given kind returning @ret (fentry
// must return 0, netfilter a verdict); returns errno or 0.
int try_load(bpf_prog_type type, bpf_attach_type attach, int btf_id, int ret) {
  struct bpf_insn insns[] = {
      {.code = 0xb7, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = ret},  // r0 = ret
      {.code = 0x95, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = 0},  // exit
  };
  LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = attach,
              .attach_btf_id = static_cast<__u32>(btf_id));
  int fd = bpf_prog_load(type, "magnet_probe", "GPL", insns, 2, &o);
  if (fd >= 0) {
    close(fd);
    return 0;
  }
  return -fd;
}

// Kernel symbols -> defining module ("" for vmlinux), read once: the file
// is large and slow to read in a TCG guest.
const std::unordered_map<std::string, std::string>& kallsyms() {
  static const std::unordered_map<std::string, std::string> syms = [] {
    std::unordered_map<std::string, std::string> m;
    std::ifstream ks("/proc/kallsyms");
    std::string line;
    while (std::getline(ks, line)) {
      auto a = line.find(' '), b = line.find(' ', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      auto tab = line.find('\t', b + 1);
      std::string sym = line.substr(b + 1, tab == std::string::npos ? tab : tab - b - 1);
      std::string mod;
      if (tab != std::string::npos && line.size() > tab + 2)
        mod = line.substr(tab + 2, line.size() - tab - 3);  // "\t[mod]"
      m.emplace(std::move(sym), std::move(mod));
    }
    return m;
  }();
  return syms;
}

std::string module_of(const char* fn) {
  auto it = kallsyms().find(fn);
  return it == kallsyms().end() ? std::string() : it->second;
}

// Whether the BTF of the module defining @fn (/sys/kernel/btf/MODULE) has it:
// fentry can attach to module functions (vhost_net's handle_tx, ...).
bool in_module_btf(btf* vmlinux, const char* fn) {
  std::string mod = module_of(fn);
  if (mod.empty()) return false;
  btf* m = btf__load_module_btf(mod.c_str(), vmlinux);
  if (!m) return false;
  bool found = btf__find_by_name_kind(m, fn, BTF_KIND_FUNC) > 0;
  btf__free(m);
  return found;
}

// Whether bpf_rdonly_cast (kernel BTF id @kfunc) accepts type id 0 and
// returns memory that may be read: r0 = bpf_rdonly_cast(0, 0); r0 = *(u64 *)r0.
bool rdonly_mem_loads(int kfunc) {
  struct bpf_insn insns[] = {
      {.code = 0xb7, .dst_reg = 1, .src_reg = 0, .off = 0, .imm = 0},  // r1 = 0
      {.code = 0xb7, .dst_reg = 2, .src_reg = 0, .off = 0, .imm = 0},  // r2 = 0
      {.code = 0x85, .dst_reg = 0, .src_reg = BPF_PSEUDO_KFUNC_CALL, .off = 0, .imm = kfunc},
      {.code = 0x79, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = 0},  // r0 = *(u64 *)(r0 + 0)
      {.code = 0xb7, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = 0},  // r0 = 0
      {.code = 0x95, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = 0},  // exit
  };
  int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "magnet_rdonly", "GPL", insns,
                         sizeof insns / sizeof insns[0], nullptr);
  if (fd < 0) return false;
  close(fd);
  return true;
}

int netns_fd_self() { return open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC); }

uint64_t ino_of(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Every network namespace we can reach: named ones and those of processes.
std::map<uint64_t, std::string> list_netns() {
  std::map<uint64_t, std::string> out;
  if (DIR* d = opendir("/run/netns")) {
    while (auto* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string p = std::string("/run/netns/") + e->d_name;
      if (uint64_t i = ino_of(p)) out.emplace(i, p);
    }
    closedir(d);
  }
  if (DIR* d = opendir("/proc")) {
    while (auto* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::string p = std::string("/proc/") + e->d_name + "/ns/net";
      if (uint64_t i = ino_of(p)) out.emplace(i, p);
    }
    closedir(d);
  }
  return out;
}

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list ap) {
  // libbpf warnings (incl. verifier logs) only with -v: the caller reports
  // the failure itself in one line.
  const int lvl = level == LIBBPF_WARN ? 2 : level == LIBBPF_INFO ? 3 : 4;
  const severity sev = level == LIBBPF_WARN ? severity::warning
                       : level == LIBBPF_INFO ? severity::info
                                              : severity::debug;
  if (lvl > log_verbosity()) return 0;
  std::vector<char> buf(1 << 16);
  vsnprintf(buf.data(), buf.size(), fmt, ap);
  std::string s = buf.data();
  while (!s.empty() && s.back() == '\n') s.pop_back();
  log_line_from(lvl, sev, s);
  return 0;
}

}  // namespace

// BPF_LINK_CREATE for netfilter, absent from libbpf 1.1's bpf_link_create().
int netfilter_link_create(int prog_fd, int pf, int hook, int priority) {
  union bpf_attr attr;
  std::memset(&attr, 0, sizeof attr);
  struct nf_attr {
    __u32 prog_fd, target_fd, attach_type, flags;
    __u32 pf, hooknum;
    __s32 priority;
    __u32 nf_flags;
  };
  static_assert(sizeof(nf_attr) <= sizeof(attr));
  auto* a = reinterpret_cast<nf_attr*>(&attr);
  a->prog_fd = prog_fd;
  a->attach_type = kAttachNetfilter;
  a->pf = pf;
  a->hooknum = hook;
  a->priority = priority;
  int fd = static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof attr));
  return fd < 0 ? -errno : fd;
}

std::string_view method_name(method m) {
  switch (m) {
    case M::tp_btf: return "tp_btf";
    case M::raw_tp: return "raw_tp";
    case M::tracepoint: return "tracepoint";
    case M::netfilter: return "netfilter";
    case M::cgroup_skb: return "cgroup_skb";
    case M::fentry: return "fentry";
    case M::kprobe: return "kprobe";
  }
  return "?";
}

const std::vector<probe_spec>& probe_table() { return kProbes; }

const probe_spec* find_probe(uint16_t type) {
  for (const auto& p : kProbes)
    if (p.type == type) return &p;
  return nullptr;
}

std::string missing_capabilities() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return "capabilities unreadable";
  auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1; };
  if (has(CAP_SYS_ADMIN)) return {};
  std::string miss;
  for (auto [cap, name] : {std::pair{CAP_BPF, "CAP_BPF"}, {CAP_PERFMON, "CAP_PERFMON"},
                           {CAP_NET_ADMIN, "CAP_NET_ADMIN"}})
    if (!has(cap)) miss += (miss.empty() ? "" : ", ") + std::string(name);
  return miss.empty() ? miss : miss + " (or CAP_SYS_ADMIN)";
}

kernel_features kernel_features::probe() {
  kernel_features k;
  libbpf_set_print(libbpf_print);
  if (const char* d = getenv("MAGNET_DENY_METHODS")) {
    std::stringstream ss(d);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) k.deny_.insert(item);
  }
  k.tracefs_ = ensure_tracefs();
  k.cgroup2_ = ensure_cgroup2();
  btf* vm = btf__load_vmlinux_btf();
  if (vm) {
    k.has_btf_ = true;
    k.btf_ = std::shared_ptr<void>(vm, [](void* p) { btf__free(static_cast<btf*>(p)); });
    int id = btf__find_by_name_kind(vm, "sock_sendmsg", BTF_KIND_FUNC);
    if (id < 0) id = btf__find_by_name_kind(vm, "ip_rcv", BTF_KIND_FUNC);
    int err = id > 0 ? try_load(BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, id, 0) : ENOENT;
    k.fentry_ok_ = err == 0;
    if (err == EPERM)
      k.fentry_why_ = "kernel refuses fentry/fexit programs (EPERM on load)";
    else if (err)
      k.fentry_why_ = std::string("fentry program load failed: ") + std::strerror(err);
    if (btf__find_by_name_kind(vm, "bpf_nf_ctx", BTF_KIND_STRUCT) < 0) {
      k.netfilter_why_ = "kernel has no BPF netfilter hooks (needs 6.4+ with "
                         "CONFIG_NETFILTER_BPF_LINK)";
    } else {
      int e = try_load(static_cast<bpf_prog_type>(kProgTypeNetfilter),
                       static_cast<bpf_attach_type>(kAttachNetfilter), 0, 1);
      k.netfilter_ok_ = e == 0;
      if (e) k.netfilter_why_ = std::string("netfilter program load failed: ") + std::strerror(e);
    }
    int rc = btf__find_by_name_kind(vm, "bpf_rdonly_cast", BTF_KIND_FUNC);
    k.rdonly_mem_ = rc > 0 && !k.deny_.count("rdonly_mem") && rdonly_mem_loads(rc);
  } else {
    k.fentry_why_ = k.netfilter_why_ = "kernel has no BTF (/sys/kernel/btf/vmlinux)";
  }
  k.kprobe_pmu_ = exists("/sys/bus/event_source/devices/kprobe/type");
  return k;
}

method_check kernel_features::check(const method_spec& m) const {
  method_check c{m.kind, false, {}};
  std::string name(method_name(m.kind));
  if (deny_.count(name)) {
    c.why = "disabled by MAGNET_DENY_METHODS";
    return c;
  }
  auto* vm = static_cast<btf*>(btf_.get());
  switch (m.kind) {
    case M::tp_btf: {
      if (!vm) {
        c.why = "kernel has no BTF";
        return c;
      }
      std::string t = "btf_trace_" + tp_name(m.target);
      if (btf__find_by_name_kind(vm, t.c_str(), BTF_KIND_TYPEDEF) < 0) {
        c.why = "no tracepoint " + std::string(m.target) + " in kernel BTF";
        return c;
      }
      break;
    }
    case M::raw_tp:
    case M::tracepoint: {
      if (tracefs_.empty()) {
        c.why = "tracefs not available";
        return c;
      }
      if (!exists(tracefs_ + "/events/" + m.target)) {
        c.why = "no tracepoint " + std::string(m.target) + " in this kernel";
        return c;
      }
      break;
    }
    case M::fentry:
      if (!fentry_ok_) {
        c.why = fentry_why_;
        return c;
      }
      if (btf__find_by_name_kind(vm, m.target, BTF_KIND_FUNC) < 0 &&
          !in_module_btf(vm, m.target)) {
        c.why = std::string("no function ") + m.target + " in kernel or module BTF";
        return c;
      }
      break;
    case M::kprobe: {
      if (!kprobe_pmu_) {
        c.why = "kernel built without kprobes (no kprobe PMU; CONFIG_KPROBES off)";
        return c;
      }
      if (!kallsyms().count(m.target)) {
        c.why = std::string("no kernel symbol ") + m.target;
        return c;
      }
      break;
    }
    case M::netfilter:
      if (!netfilter_ok_) {
        c.why = netfilter_why_;
        return c;
      }
      break;
    case M::cgroup_skb:
      if (cgroup2_.empty()) {
        c.why = "no cgroup v2 hierarchy mounted and mounting one failed";
        return c;
      }
      break;
  }
  c.ok = true;
  return c;
}

std::vector<probe_plan> plan_probes(const kernel_features& kf) {
  std::vector<probe_plan> plans;
  for (const auto& spec : kProbes) {
    probe_plan p{&spec, -1, {}};
    for (size_t i = 0; i < spec.methods.size(); ++i) {
      auto c = kf.check(spec.methods[i]);
      if (c.ok && p.chosen < 0) p.chosen = static_cast<int>(i);
      p.checks.push_back(std::move(c));
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

// ---------------------------------------------------------------- capture

result<std::unique_ptr<capture>> capture::open(const capture_options& opt) {
  if (auto miss = missing_capabilities(); !miss.empty())
    return error{"loading probes needs capabilities that this process lacks: " + miss, EPERM};
  size_t rb = opt.ring_bytes;
  if (opt.snap_bytes < 1 || opt.snap_bytes > MAGNET_SNAP_MAX)
    return error{"packet capture length must be 1 to " + std::to_string(MAGNET_SNAP_MAX) +
                 " bytes (got " + std::to_string(opt.snap_bytes) + ")"};
  if (rb < 4096 || (rb & (rb - 1)))
    return error{"ring buffer size must be a power of two of at least 4096 bytes (got " +
                 std::to_string(rb) + ")"};

  std::unique_ptr<capture> c(new capture());
  c->kf_ = kernel_features::probe();
  c->plans_ = plan_probes(c->kf_);
  c->ring_bytes_ = rb;
  c->ncpus_ = libbpf_num_possible_cpus();
  if (c->ncpus_ > MAGNET_MAX_CPUS)
    return error{"this machine has " + std::to_string(c->ncpus_) + " CPUs; magnet supports " +
                 std::to_string(MAGNET_MAX_CPUS)};

  static int nf_handler = libbpf_register_prog_handler(
      "netfilter", static_cast<bpf_prog_type>(kProgTypeNetfilter),
      static_cast<bpf_attach_type>(kAttachNetfilter), nullptr);
  (void)nf_handler;

  c->skel_ = capture_bpf__open();
  if (!c->skel_) return error::from_errno("opening the BPF object");

  // Load the chosen method of the requested probes; nothing else, so a
  // program this kernel rejects only affects the probe that needs it.
  bpf_program* prog;
  bpf_object__for_each_program(prog, c->skel_->obj) bpf_program__set_autoload(prog, false);
  std::set<uint16_t> load = opt.probes;
  for (const auto& p : c->plans_)
    if (opt.probes.empty() || opt.probes.count(p.spec->type)) {
      load.insert(p.spec->type);
      load.insert(p.spec->needs.begin(), p.spec->needs.end());
    }
  for (const auto& p : c->plans_) {
    if (p.chosen < 0 || !load.count(p.spec->type)) continue;
    for (const char* name : p.spec->methods[p.chosen].progs) {
      auto* pr = bpf_object__find_program_by_name(c->skel_->obj, name);
      if (!pr) return error{std::string("BPF object lacks program ") + name};
      bpf_program__set_autoload(pr, true);
    }
  }
  bpf_map__set_max_entries(c->skel_->maps.events, static_cast<__u32>(rb));
  std::random_device rd;
  c->skel_->rodata->id_key = (static_cast<uint64_t>(rd()) << 32) | rd();
  c->skel_->rodata->self_tgid = static_cast<__u32>(getpid());
  // cgroup_skb programs may not ask for the current task on 6.1; 6.18 allows it.
  c->skel_->rodata->cgskb_has_task =
      libbpf_probe_bpf_helper(BPF_PROG_TYPE_CGROUP_SKB, BPF_FUNC_get_current_pid_tgid, nullptr) > 0;
  c->skel_->rodata->has_rdonly_mem = c->kf_.rdonly_mem();
  c->skel_->rodata->snap_len = static_cast<__u32>(opt.snap_bytes);
  c->skel_->rodata->snap_ifindex = opt.snap_ifindex;
  c->skel_->rodata->snap_netns = opt.snap_netns_ino;
  uint64_t wm = opt.wakeup_watermark ? opt.wakeup_watermark : rb / 8;
  c->skel_->bss->filter_ctl.wakeup_watermark = wm;
  // mg_submit checks the watermark on one record in N per probe and CPU, so
  // up to N records of every probe on every CPU can go by unchecked: keep
  // that under an eighth of the room above the watermark (records are at
  // most 256 bytes), and N at most 16.  Small rings check every record.
  uint64_t room = rb > wm ? rb - wm : 0;
  uint64_t per_check = uint64_t{MAGNET_NPROBES} * static_cast<uint64_t>(c->ncpus_) * 256;
  uint32_t every = 1;
  while (every < 16 && 2 * every * per_check <= room / 8) every *= 2;
  c->skel_->rodata->wakeup_check_mask = every - 1;

  if (int err = capture_bpf__load(c->skel_); err)
    return error{std::string("loading BPF programs failed: ") + std::strerror(-err) +
                     " (run with -v for the verifier log)",
                 -err};
  if (!c->kf_.cgroup2_path().empty()) {
    c->cgroup_fd_ = ::open(c->kf_.cgroup2_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->cgroup_fd_ < 0) return error::from_errno("opening " + c->kf_.cgroup2_path());
  }
  // Our own network namespace names the devices tag_vm_ifindex(ifindex, vm)
  // tags: the nsfs inode is the kernel's net->ns.inum, which the probes read.
  c->netns_ino_ = static_cast<uint32_t>(ino_of("/proc/self/ns/net"));
  if (!c->netns_ino_) return error::from_errno("reading /proc/self/ns/net");
  return c;
}

capture::~capture() {
  for (auto& [slot, ls] : links_)
    for (auto* l : ls) bpf_link__destroy(l);
  for (auto& n : nf_links_) close(n.fd);
  if (cgroup_fd_ >= 0) close(cgroup_fd_);
  if (skel_) capture_bpf__destroy(skel_);
}

const probe_plan* capture::plan_for(uint16_t type) const {
  for (const auto& p : plans_)
    if (p.spec->type == type) return &p;
  return nullptr;
}

// Netfilter BPF links on one hook need distinct priorities; a second magnet
// on the same hooks (bench/capture/ab.sh compares two builds that way) sets
// MAGNET_NF_PRIORITY.
static int netfilter_priority() {
  const char* e = getenv("MAGNET_NF_PRIORITY");
  return e && *e ? std::atoi(e) : -128;
}

status capture::attach_netfilter_all(const probe_plan& p) {
  const auto& m = p.spec->methods[p.chosen];
  auto* prog = bpf_object__find_program_by_name(skel_->obj, m.progs[0]);
  int pfd = bpf_program__fd(prog);
  int self = netns_fd_self();
  if (self < 0) return error::from_errno("opening own network namespace");
  uint64_t self_ino = ino_of("/proc/self/ns/net");
  status st;
  for (const auto& [ino, path] : list_netns()) {
    bool have = false;
    for (const auto& n : nf_links_)
      if (n.slot == p.spec->slot && n.netns_ino == ino) have = true;
    if (have) continue;
    int nsfd = -1;
    if (ino != self_ino) {
      nsfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (nsfd < 0) continue;  // the process went away
      if (setns(nsfd, CLONE_NEWNET) != 0) {
        close(nsfd);
        continue;
      }
    }
    for (int pf : {kNfprotoIpv4, kNfprotoIpv6}) {
      int fd = netfilter_link_create(pfd, pf, m.hook, netfilter_priority());
      if (fd < 0) {
        st = error{"attaching " + std::string(m.progs[0]) + " to netfilter " + m.target +
                       " in netns " + path + ": " + std::strerror(-fd),
                   -fd};
        continue;
      }
      nf_links_.push_back({p.spec->slot, ino, fd});
    }
    if (nsfd >= 0) {
      setns(self, CLONE_NEWNET);
      close(nsfd);
    }
  }
  close(self);
  return st;
}

status capture::attach(const probe_plan& p) {
  if (p.chosen < 0) {
    std::string why;
    for (const auto& c : p.checks)
      why += std::string(why.empty() ? "" : "; ") + std::string(method_name(c.kind)) + ": " + c.why;
    return error{"probe " + event_name(p.spec->type) + " cannot attach on this kernel (" + why +
                 ")"};
  }
  int slot = p.spec->slot;
  if (links_.count(slot) || std::any_of(nf_links_.begin(), nf_links_.end(),
                                        [&](const nf_link& n) { return n.slot == slot; }))
    return {};
  const auto& m = p.spec->methods[p.chosen];
  if (m.kind == M::netfilter) return attach_netfilter_all(p);
  std::vector<bpf_link*> ls;
  for (const char* name : m.progs) {
    auto* prog = bpf_object__find_program_by_name(skel_->obj, name);
    bpf_link* l = m.kind == M::cgroup_skb ? bpf_program__attach_cgroup(prog, cgroup_fd_)
                                          : bpf_program__attach(prog);
    if (!l) {
      int err = errno;
      for (auto* x : ls) bpf_link__destroy(x);
      return error{"attaching " + std::string(name) + " (" + std::string(method_name(m.kind)) +
                       " " + m.target + "): " + std::strerror(err),
                   err};
    }
    ls.push_back(l);
  }
  links_[slot] = std::move(ls);
  return {};
}

void capture::detach(int slot) {
  if (auto it = links_.find(slot); it != links_.end()) {
    for (auto* l : it->second) bpf_link__destroy(l);
    links_.erase(it);
  }
  std::erase_if(nf_links_, [&](const nf_link& n) {
    if (n.slot != slot) return false;
    close(n.fd);
    return true;
  });
}

void capture::rescan_netns() {
  for (const auto& p : plans_)
    if (p.chosen >= 0 && p.spec->methods[p.chosen].kind == M::netfilter &&
        skel_->bss->probe_ctl[p.spec->slot].mode)
      (void)attach_netfilter_all(p);
}

status capture::set_mode(uint16_t type, uint32_t mode) {
  const probe_plan* p = plan_for(type);
  if (!p) return error{"no probe produces " + event_name(type)};
  int slot = p->spec->slot;
  if (mode) {
    // Mode first, so no event fires into a half-configured probe after attach.
    skel_->bss->probe_ctl[slot].mode = mode;
    auto s = attach(*p);
    for (uint16_t n : p->spec->needs) {
      const probe_plan* q = plan_for(n);
      if (s && q && q->chosen >= 0) s = attach(*q);
    }
    if (!s) {
      skel_->bss->probe_ctl[slot].mode = 0;
      release(slot);
      for (uint16_t n : p->spec->needs) release(probe_slot(n));
      return s;
    }
  } else {
    skel_->bss->probe_ctl[slot].mode = 0;
    release(slot);
    for (uint16_t n : p->spec->needs) release(probe_slot(n));
  }
  return {};
}

void capture::stop(const std::set<uint16_t>& types) {
  for (bool dependents : {true, false})
    for (uint16_t t : types)
      if (const probe_plan* p = plan_for(t); p && p->spec->needs.empty() != dependents)
        skel_->bss->probe_ctl[p->spec->slot].mode = 0;
  for (uint16_t t : types) (void)set_mode(t, 0);
}

// Detaches a probe unless it is enabled or an enabled probe needs it.
void capture::release(int slot) {
  if (slot < 0 || skel_->bss->probe_ctl[slot].mode) return;
  for (const auto& q : plans_)
    if (skel_->bss->probe_ctl[q.spec->slot].mode &&
        std::find(q.spec->needs.begin(), q.spec->needs.end(), probe_type(slot)) !=
            q.spec->needs.end())
      return;
  detach(slot);
}

void capture::arm(uint16_t type, uint32_t mode) {
  int slot = probe_slot(type);
  if (slot >= 0) skel_->bss->probe_ctl[slot].mode = mode;
}

int capture::program_fd(const char* name) const {
  auto* p = bpf_object__find_program_by_name(skel_->obj, name);
  return p ? bpf_program__fd(p) : -1;
}

void capture::set_sampling(uint16_t type, uint32_t every, uint64_t interval_ns) {
  int slot = probe_slot(type);
  if (slot < 0) return;
  skel_->bss->probe_ctl[slot].sample_every = every;
  skel_->bss->probe_ctl[slot].sample_ns = interval_ns;
}

template <class K>
static status fill_set(bpf_map* map, const std::set<K>& vals, const char* what) {
  // Clear, then insert: a filter change is rare and the set small.
  int fd = bpf_map__fd(map);
  K key{}, next{};
  std::vector<K> old;
  void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    old.push_back(next);
    key = next;
    prev = &key;
  }
  for (auto& k : old) bpf_map_delete_elem(fd, &k);
  uint8_t one = 1;
  for (const K& v : vals)
    if (bpf_map_update_elem(fd, &v, &one, BPF_ANY) != 0)
      return error::from_errno(std::string("writing ") + what + " filter");
  return {};
}

status capture::set_filter_sets(uint32_t active, const std::set<uint32_t>& cpus,
                                const std::set<uint32_t>& tgids,
                                const std::set<uint64_t>& cgroups, const std::set<uint32_t>& vms,
                                const std::set<uint64_t>& ids) {
  auto& fc = skel_->bss->filter_ctl;
  fc.active = 0;  // off while the sets change
  for (auto& w : fc.cpu_mask) w = 0;
  for (uint32_t c : cpus)
    if (c < MAGNET_MAX_CPUS) fc.cpu_mask[c / 64] |= 1ull << (c % 64);
  if (auto s = fill_set(skel_->maps.filter_tgid, tgids, "tgid"); !s) return s;
  if (auto s = fill_set(skel_->maps.filter_cgroup, cgroups, "cgroup"); !s) return s;
  if (auto s = fill_set(skel_->maps.filter_vm, vms, "vm"); !s) return s;
  if (auto s = fill_set(skel_->maps.filter_abstract, ids, "abstract id"); !s) return s;
  fc.active = active;
  return {};
}

status capture::tag_vm_tgid(uint32_t tgid, uint32_t vm) {
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.vm_by_tgid), &tgid, &vm, BPF_ANY))
    return error::from_errno("tagging tgid " + std::to_string(tgid));
  skel_->bss->filter_ctl.vm_tagging = 1;
  return {};
}

status capture::tag_vm_ifindex(uint32_t ifindex, uint32_t vm) {
  return tag_vm_ifindex(netns_ino_, ifindex, vm);
}

status capture::tag_vm_ifindex(uint32_t netns_ino, uint32_t ifindex, uint32_t vm) {
  const std::string what =
      "tagging ifindex " + std::to_string(ifindex) + " in netns " + std::to_string(netns_ino);
  // The probes never look a device up with namespace 0 (they pass 0 when
  // they cannot learn it): such an entry would only ever be dead.
  if (!netns_ino) return error{what + ": no network namespace", EINVAL};
  magnet_vm_netdev_key k{};
  k.netns_ino = netns_ino;
  k.ifindex = ifindex;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.vm_by_netdev), &k, &vm, BPF_ANY))
    return error::from_errno(what);
  skel_->bss->filter_ctl.vm_tagging = 1;
  return {};
}

status capture::tag_vm_cgroup(uint64_t cgroup_id, uint32_t vm) {
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.vm_by_cgroup), &cgroup_id, &vm, BPF_ANY))
    return error::from_errno("tagging cgroup " + std::to_string(cgroup_id));
  skel_->bss->filter_ctl.vm_tagging = 1;
  return {};
}

template <class K>
static void delete_where_value(bpf_map* m, uint32_t vm) {
  int fd = bpf_map__fd(m);
  K key{}, next{};
  uint32_t val;
  void* prev = nullptr;
  std::vector<K> del;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    if (bpf_map_lookup_elem(fd, &next, &val) == 0 && val == vm) del.push_back(next);
    key = next;
    prev = &key;
  }
  for (auto& k : del) bpf_map_delete_elem(fd, &k);
}

status capture::untag_vm(uint32_t vm) {
  delete_where_value<uint32_t>(skel_->maps.vm_by_tgid, vm);
  delete_where_value<magnet_vm_netdev_key>(skel_->maps.vm_by_netdev, vm);
  delete_where_value<uint64_t>(skel_->maps.vm_by_cgroup, vm);
  return {};
}

int capture::ringbuf_fd() const { return bpf_map__fd(skel_->maps.events); }

uint64_t capture::total_dropped() const {
  return __atomic_load_n(&skel_->bss->total_dropped, __ATOMIC_RELAXED);
}

std::vector<magnet_probe_pcpu> capture::probe_state(int slot) const {
  std::vector<magnet_probe_pcpu> v(ncpus_);
  __u32 key = slot;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.probe_pcpu), &key, v.data()) != 0) v.clear();
  return v;
}

uint64_t capture::drop_ack(int slot, int cpu) const {
  return __atomic_load_n(&skel_->bss->drop_ack[slot][cpu], __ATOMIC_RELAXED);
}

void capture::set_drop_ack(int slot, int cpu, uint64_t v) {
  __atomic_store_n(&skel_->bss->drop_ack[slot][cpu], v, __ATOMIC_RELAXED);
}

std::map<uint32_t, magnet_agg> capture::aggregate(int slot) const {
  std::vector<uint32_t> all(MAGNET_MAX_VM_ID + 1);
  for (uint32_t vm = 0; vm <= MAGNET_MAX_VM_ID; ++vm) all[vm] = vm;
  return aggregate(slot, all);
}

std::map<uint32_t, magnet_agg> capture::aggregate(int slot, const std::vector<uint32_t>& vms) const {
  std::map<uint32_t, magnet_agg> out;
  std::vector<magnet_agg> v(ncpus_);
  int fd = bpf_map__fd(skel_->maps.agg);
  for (uint32_t vm : vms) {
    if (vm > MAGNET_MAX_VM_ID) continue;
    __u32 key = slot * (MAGNET_MAX_VM_ID + 1) + vm;
    if (bpf_map_lookup_elem(fd, &key, v.data()) != 0) continue;
    magnet_agg sum{};
    for (const auto& a : v) {
      sum.events += a.events;
      sum.bytes += a.bytes;
    }
    if (sum.events) out[vm] = sum;
  }
  return out;
}

void capture::set_vm_quota(double per_second, double burst_s) {
  auto& fc = skel_->bss->filter_ctl;
  if (!(per_second > 0)) {
    __atomic_store_n(&fc.vm_cost_ns, 0, __ATOMIC_RELAXED);
    return;
  }
  uint64_t cost = std::max<uint64_t>(1, static_cast<uint64_t>(1e9 / per_second));
  uint64_t burst = std::max<uint64_t>(cost, static_cast<uint64_t>(burst_s * 1e9));
  __atomic_store_n(&fc.vm_burst_ns, burst, __ATOMIC_RELAXED);
  __atomic_store_n(&fc.vm_cost_ns, cost, __ATOMIC_RELAXED);
}

std::map<uint32_t, std::pair<uint64_t, uint64_t>> capture::vm_losses(
    const std::vector<uint32_t>& vms) const {
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> out;
  std::vector<magnet_vm_pcpu> v(ncpus_);
  int fd = bpf_map__fd(skel_->maps.vm_pcpu);
  for (uint32_t vm : vms) {
    __u32 key = vm;
    if (vm > MAGNET_MAX_VM_ID || bpf_map_lookup_elem(fd, &key, v.data()) != 0) continue;
    std::pair<uint64_t, uint64_t> sum{};
    for (const auto& q : v) {
      sum.first += q.quota_lost;
      sum.second += q.ring_lost;
    }
    if (sum.first || sum.second) out[vm] = sum;
  }
  return out;
}

std::map<uint32_t, uint64_t> capture::vm_quota_lost() const {
  if (!__atomic_load_n(&skel_->bss->filter_ctl.vm_cost_ns, __ATOMIC_RELAXED)) return {};
  std::vector<uint32_t> all(MAGNET_MAX_VM_ID);
  for (uint32_t vm = 1; vm <= MAGNET_MAX_VM_ID; ++vm) all[vm - 1] = vm;
  std::map<uint32_t, uint64_t> out;
  for (const auto& [vm, l] : vm_losses(all))
    if (l.first) out[vm] = l.first;
  return out;
}

template <class K>
static std::vector<std::pair<K, lat_stat>> read_lat_map(bpf_map* map, int ncpus) {
  std::vector<std::pair<K, lat_stat>> out;
  std::vector<magnet_lat_stat> v(static_cast<size_t>(ncpus));
  int fd = bpf_map__fd(map);
  K key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    key = next;
    prev = &key;
    if (bpf_map_lookup_elem(fd, &key, v.data()) != 0) continue;  // gone meanwhile
    lat_stat sum;
    for (const auto& c : v) sum.add(c);
    out.emplace_back(key, sum);
  }
  return out;
}

std::vector<std::pair<magnet_kvm_exit_key, lat_stat>> capture::kvm_exit_stats() const {
  return read_lat_map<magnet_kvm_exit_key>(skel_->maps.kvm_exit_stats, ncpus_);
}

std::vector<std::pair<magnet_vmnet_queue_key, lat_stat>> capture::vmnet_queue_stats() const {
  return read_lat_map<magnet_vmnet_queue_key>(skel_->maps.vmnet_queue_stats, ncpus_);
}

bool capture::attached(uint16_t type) const {
  int slot = probe_slot(type);
  return links_.count(slot) || std::any_of(nf_links_.begin(), nf_links_.end(),
                                           [&](const nf_link& n) { return n.slot == slot; });
}

std::string capture::attach_summary() const {
  std::string s;
  for (const auto& p : plans_) {
    if (!skel_->bss->probe_ctl[p.spec->slot].mode) continue;
    s += (s.empty() ? "" : ", ") + event_name(p.spec->type) + "=" +
         std::string(method_name(p.spec->methods[p.chosen].kind));
  }
  return s;
}

}  // namespace magnet
