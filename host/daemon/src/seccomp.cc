// The daemon's syscall allowlist (seccomp.h).  How the list was found: the
// daemon's real work traced (strace -f) from the point the filter goes in
// to its exit: libvirt's test driver and a VM with a view channel, vsock
// CID and tap, HTTP (/metrics, the dashboard, its stream), --link in a
// namespace that appears later, every query, SIGHUP, SIGTERM and the
// drain; then the privileged tier run under it.  Beyond what the runs
// showed, the code paths were read for what they may still call (a libvirt
// reconnect to libvirtd, glibc's fallbacks when the vDSO cannot serve the
// clock, libbpf's detach of perf-event links): those are in the list too.
// The e2e suites (real guests, virtio-serial, vsock, libvirtd restarts)
// are what shows the rest.
#include "magnet/daemon/seccomp.h"

#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/netlink.h>
#include <linux/sockios.h>
#include <termios.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

// A sanitizer's runtime makes calls of its own (LeakSanitizer stops the
// world at exit with clone and ptrace, a report's symbolizer is a program
// it forks): in such a build (tools/test's asan and tsan tiers) calls
// outside the list are logged and allowed, and only syslog(2), the test
// hook's call, still ends the daemon.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MAGNET_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MAGNET_SANITIZED 1
#endif
#endif
#ifndef MAGNET_SANITIZED
#define MAGNET_SANITIZED 0
#endif

namespace magnet::host {

namespace {

// Allowed whatever their arguments.
const std::vector<syscall_group> kGroups = {
    {"memory: malloc, thread stacks, libbpf's and glibc's mappings (freed stacks are madvise'd)",
     {"brk", "mmap", "munmap", "mremap", "mprotect", "madvise"}},
    {"threads: locks and condition variables (futex), a new thread's setup (set_robust_list, "
     "rseq), yielding, and a thread's end; glibc's raise()/abort() and the SIGSYS handler below "
     "ask who they are (getpid, gettid)",
     {"futex", "set_robust_list", "rseq", "sched_yield", "gettid", "getpid", "exit", "exit_group"}},
    {"signals: Asio's signal_set (SIGINT, SIGTERM, SIGHUP), masks around thread creation, "
     "returning from handlers, calls restarted after one",
     {"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "restart_syscall", "sigaltstack"}},
    {"files: /proc (the registry's QEMU threads, cgroups and namespaces; each VM's vhost and "
     "QEMU threads' schedstat for its power; /proc/self/statm for /metrics), /run/netns, "
     "libvirt's own configuration when it reconnects, the dashboard's assets, tracefs when a "
     "legacy kprobe link is removed; the query socket's file is unlinked at exit",
     {"openat", "open", "close", "read", "write", "readv", "writev", "pread64", "lseek", "fstat",
      "newfstatat", "stat", "lstat", "statx", "getdents64", "fcntl", "dup", "access", "faccessat",
      "faccessat2", "readlink", "readlinkat", "unlink", "unlinkat"}},
    {"the event loops: Asio's epoll and timerfd, libvirt's GLib loop (poll, its wakeup "
     "eventfd and pipe, made again when libvirt reconnects), usleep between registry retries",
     {"epoll_wait", "epoll_pwait", "epoll_ctl", "timerfd_settime", "timerfd_gettime", "eventfd2",
      "pipe2", "poll", "ppoll", "nanosleep", "clock_nanosleep"}},
    {"clocks: served by the vDSO, except on a clock source it cannot read (a VM's without a "
     "stable TSC, e.g. the nested lab host under TCG), where glibc makes the call",
     {"clock_gettime", "clock_getres", "gettimeofday", "time"}},
    {"sockets once made: clients of the query socket, HTTP and vsock accepted; the view "
     "channels and libvirt's socket connected; peers' credentials (SO_PEERCRED, SO_PEERGROUPS); "
     "rtnetlink dumps for --link's qdisc",
     {"accept", "accept4", "connect", "getsockopt", "setsockopt", "getsockname", "getpeername",
      "sendto", "recvfrom", "sendmsg", "recvmsg", "shutdown"}},
    {"identity and limits: libvirt asks who it runs as when it (re)connects, glibc's "
     "sysconf() reads limits; the session ids of the VMs' views are random",
     {"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getrlimit",
      "getrandom"}},
};

// Allowed only with the arguments add_conditional() checks.
const char* const kChecked[] = {"clone",  "clone3", "socket", "ioctl",    "bpf",
                                "setns",  "kill",   "tgkill", "prlimit64"};

// The calls that code paths read may reach but no run has shown: allowed,
// and logged by the kernel, so a run that makes one says so in the kernel
// log instead of dying (docs/reliability.md says how to look).
const std::vector<std::string> kLogged = {
    "uname",         // libvirt's and GLib's host facts
    "sysinfo",       // glibc's get_phys_pages()
    "sched_getaffinity",  // std::thread::hardware_concurrency, GLib's thread pools
    "getcwd", "statfs", "fstatfs", "getppid", "socketpair", "dup3", "pipe",
    "epoll_create1", "timerfd_create",  // a second io_context
    "bind",  // glibc's getifaddrs binds its netlink socket (HTTP's names, at start today)
};
// And prctl, for a thread naming itself (PR_SET_NAME, PR_GET_NAME) only.

// The socket families the running daemon may open: AF_UNIX (libvirt, the
// view channels, glibc's if_nametoindex), AF_INET/AF_INET6 (libvirt over
// tcp or tls), AF_VSOCK (the delivery's own transport), AF_NETLINK for
// NETLINK_ROUTE only (--link's qdisc).  No AF_PACKET, AF_ALG, ....
const int kFamilies[] = {AF_UNIX, AF_INET, AF_INET6, AF_VSOCK};

// ioctl requests: FIONBIO/FIONREAD (Asio's non-blocking sockets, bytes
// available), SIOCGIFINDEX/SIOCGIFNAME (glibc's if_nametoindex and back:
// the registry's taps, --link), TCGETS (isatty before stdio buffers),
// PERF_EVENT_IOC_DISABLE/ENABLE (libbpf detaching a perf-event link at
// exit).  No TIOCSTI or any other.
const unsigned long kIoctls[] = {FIONBIO,      FIONREAD, SIOCGIFINDEX, SIOCGIFNAME,
                                 TCGETS,       PERF_EVENT_IOC_DISABLE,
                                 PERF_EVENT_IOC_ENABLE};

// bpf() commands on what setup loaded: map lookups, updates, deletes and
// walks (VM tagging, counters, statistics), object info, and
// BPF_LINK_CREATE for the netfilter links of namespaces that appear
// later.  No BPF_PROG_LOAD, BPF_MAP_CREATE, pinning or attaching anew.
const int kBpfCmds[] = {BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM,     BPF_MAP_DELETE_ELEM,
                        BPF_MAP_GET_NEXT_KEY, BPF_OBJ_GET_INFO_BY_FD, BPF_LINK_CREATE};

// Syscall names by number for the SIGSYS handler, which may not allocate.
constexpr int kNames = 512;
std::array<const char*, kNames> g_names{};

// Async-signal-safe text for the handler.
struct line_buf {
  char b[256];
  size_t n = 0;
  void add(const char* s) {
    while (*s && n < sizeof b - 1) b[n++] = *s++;
  }
  void add(long v) {
    char t[24];
    int i = 0;
    bool neg = v < 0;
    unsigned long u = neg ? 0ul - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
    do t[i++] = static_cast<char>('0' + u % 10); while ((u /= 10) && i < 23);
    if (neg) add("-");
    while (i && n < sizeof b - 1) b[n++] = t[--i];
  }
  void out() { (void)!::write(STDERR_FILENO, b, n); }
};

// A refused call: say which, then die of SIGSYS.  Raw system calls only,
// past any sanitizer's interceptors: SIGSYS's action back to the default
// (SA_RESETHAND did so already, unless an interceptor stood between),
// unblocked, and sent to this thread.
void on_sigsys(int, siginfo_t* si, void*) {
  line_buf l;
  const int nr = si->si_syscall;
  l.add("magnet-host: [seccomp.violation] syscall ");
  l.add(nr >= 0 && nr < kNames && g_names[nr] ? g_names[nr] : "?");
  l.add(" (");
  l.add(static_cast<long>(nr));
  l.add(") is not in the daemon's allowlist (thread ");
  l.add(static_cast<long>(::syscall(SYS_gettid)));
  l.add("); dying of SIGSYS (docs/reliability.md, \"Least privilege\"; --no-seccomp turns the "
        "filter off)\n");
  l.out();
  struct {
    void* handler;  // SIG_DFL
    unsigned long flags;
    void* restorer;
    uint64_t mask;
  } dfl{};
  ::syscall(SYS_rt_sigaction, SIGSYS, &dfl, nullptr, sizeof dfl.mask);
  uint64_t sys = uint64_t{1} << (SIGSYS - 1);
  ::syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &sys, nullptr, sizeof sys);
  ::syscall(SYS_tgkill, ::syscall(SYS_getpid), ::syscall(SYS_gettid), SIGSYS);
}

struct ctx_free {
  void operator()(scmp_filter_ctx c) const { seccomp_release(c); }
};
using filter = std::unique_ptr<void, ctx_free>;

// What a call no rule names gets: in a sanitizer build, logged and allowed.
constexpr uint32_t kDefaultAction = MAGNET_SANITIZED ? SCMP_ACT_LOG : SCMP_ACT_TRAP;

// One rule by name; a name this architecture lacks (open, stat, ... on
// arm64) is skipped, and so is a rule whose action is the default's
// (libseccomp refuses it with EACCES: the sanitizer build's logged calls).
int add(scmp_filter_ctx c, uint32_t action, const std::string& name,
        std::initializer_list<scmp_arg_cmp> args = {}) {
  const int nr = seccomp_syscall_resolve_name(name.c_str());
  if (nr == __NR_SCMP_ERROR || action == kDefaultAction) return 0;
  return seccomp_rule_add_array(c, action, nr, static_cast<unsigned>(args.size()),
                                args.size() ? args.begin() : nullptr);
}

// The rules with arguments, and the ENOSYS for clone3.
int add_conditional(scmp_filter_ctx c) {
  int rc = 0;
  auto rule = [&](uint32_t action, const char* name, std::initializer_list<scmp_arg_cmp> a) {
    if (!rc) rc = add(c, action, name, a);
  };
  // Threads only (the registry's, libvirt's): no fork, no posix_spawn.
  rule(SCMP_ACT_ALLOW, "clone", {SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD)});
  // clone3 passes its flags in memory, out of a filter's reach: ENOSYS
  // makes glibc (2.34 and later) fall back to clone, checked above.
  rule(SCMP_ACT_ERRNO(ENOSYS), "clone3", {});
  for (int f : kFamilies) rule(SCMP_ACT_ALLOW, "socket", {SCMP_A0_32(SCMP_CMP_EQ, f)});
  rule(SCMP_ACT_ALLOW, "socket",
       {SCMP_A0_32(SCMP_CMP_EQ, AF_NETLINK), SCMP_A2_32(SCMP_CMP_EQ, NETLINK_ROUTE)});
  // The kernel reads an ioctl's request as 32 bits, so does the rule.
  for (unsigned long r : kIoctls)
    rule(SCMP_ACT_ALLOW, "ioctl", {SCMP_A1_32(SCMP_CMP_EQ, static_cast<uint32_t>(r))});
  for (int cmd : kBpfCmds) rule(SCMP_ACT_ALLOW, "bpf", {SCMP_A0_32(SCMP_CMP_EQ, cmd)});
  // Network namespaces only: QEMU's (the registry's taps), --link's, new
  // ones for netfilter links.
  rule(SCMP_ACT_ALLOW, "setns", {SCMP_A1_32(SCMP_CMP_EQ, CLONE_NEWNET)});
  // Signal 0 only: is the VM's QEMU still there (the delivery's check).
  rule(SCMP_ACT_ALLOW, "kill", {SCMP_A1_32(SCMP_CMP_EQ, 0)});
  // Its own threads only (raise, abort, the SIGSYS handler).
  rule(SCMP_ACT_ALLOW, "tgkill", {SCMP_A0_32(SCMP_CMP_EQ, static_cast<uint32_t>(::getpid()))});
  // Reading its own limits (glibc's sysconf): never setting any.
  rule(SCMP_ACT_ALLOW, "prlimit64", {SCMP_A0_32(SCMP_CMP_EQ, 0), SCMP_A2_64(SCMP_CMP_EQ, 0)});
  for (int op : {PR_SET_NAME, PR_GET_NAME}) rule(SCMP_ACT_LOG, "prctl", {SCMP_A0_32(SCMP_CMP_EQ, op)});
  return rc;
}

}  // namespace

const std::vector<syscall_group>& daemon_syscalls() { return kGroups; }

std::string daemon_syscall_rules() {
  std::string s =
      "clone with CLONE_THREAD only; clone3: ENOSYS (glibc falls back to clone); socket: "
      "AF_UNIX, AF_INET, AF_INET6, AF_VSOCK, AF_NETLINK with NETLINK_ROUTE; ioctl: FIONBIO, "
      "FIONREAD, SIOCGIFINDEX, SIOCGIFNAME, TCGETS, PERF_EVENT_IOC_DISABLE/ENABLE; bpf: map "
      "lookup, update, delete, next key, object info, link create; setns: CLONE_NEWNET; kill: "
      "signal 0; tgkill: this process; prlimit64: reading its own; logged and allowed:";
  for (const auto& n : kLogged) s += " " + n;
  return s + " prctl (PR_SET_NAME, PR_GET_NAME)";
}

std::string seccomp_uri_problem(const std::string& uri) {
  // driver[+transport]://...
  const size_t plus = uri.find('+'), colon = uri.find("://");
  if (plus == std::string::npos || colon == std::string::npos || plus > colon) return {};
  const std::string transport = uri.substr(plus + 1, colon - plus - 1);
  if (transport != "ssh" && transport != "ext") return {};
  return "--uri " + uri + ": libvirt's " + transport +
         " transport runs a program each time it connects, and the syscall filter allows no "
         "fork or exec: use a local URI (qemu:///system), or --no-seccomp";
}

result<std::string> install_syscall_filter() {
  for (int nr = 0; nr < kNames; ++nr)
    if (!g_names[nr]) g_names[nr] = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
  // Anything else: SIGSYS to the calling thread, whose handler names it.
  filter f(seccomp_init(kDefaultAction));
  if (!f) return error{"seccomp_init failed"};
  scmp_filter_ctx c = f.get();
  // Every thread, those running now (libvirt may have started its own)
  // and those to come; a call of another ABI (int 0x80) ends the process.
  if (int rc = seccomp_attr_set(c, SCMP_FLTATR_CTL_TSYNC, 1); rc < 0)
    return error::from_errno("seccomp: synchronising threads", -rc);
  if (int rc = seccomp_attr_set(c, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc < 0)
    return error::from_errno("seccomp: other architectures", -rc);
  size_t allowed = 0;
  for (const auto& g : kGroups)
    for (const auto& n : g.names) {
      if (int rc = add(c, SCMP_ACT_ALLOW, n); rc < 0)
        return error::from_errno("seccomp: allowing " + n, -rc);
      ++allowed;
    }
  for (const auto& n : kLogged)
    if (int rc = add(c, SCMP_ACT_LOG, n); rc < 0)
      return error::from_errno("seccomp: logging " + n, -rc);
  if (int rc = add_conditional(c); rc < 0)
    return error::from_errno("seccomp: a rule with arguments", -rc);
  if (MAGNET_SANITIZED)
    if (int rc = add(c, SCMP_ACT_TRAP, "syslog"); rc < 0)
      return error::from_errno("seccomp: refusing syslog", -rc);

  struct sigaction sa {};
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSYS, &sa, nullptr) != 0) return error::from_errno("seccomp: SIGSYS handler");
  if (int rc = seccomp_load(c); rc < 0) return error::from_errno("seccomp: loading the filter", -rc);
  return std::to_string(allowed) + " calls allowed, " + std::to_string(std::size(kChecked)) +
         " with their arguments checked, " + std::to_string(kLogged.size() + 1) +
         " allowed and logged; " +
         (MAGNET_SANITIZED ? "a sanitizer build: any other logged by the kernel and allowed, "
                             "but syslog(2), a violation"
                           : "any other is logged as a violation, then SIGSYS");
}

#ifdef MAGNET_TEST_HOOKS
namespace {
void on_sigusr2(int) {
  const int saved = errno;
  line_buf l;
  l.add("magnet-host: [test.forbidden_syscall] thread ");
  l.add(static_cast<long>(::syscall(SYS_gettid)));
  l.add(" calls syslog(2)\n");
  l.out();
  // SYSLOG_ACTION_SIZE_BUFFER: reads a size, changes nothing, should the
  // filter be off.
  const long r = ::syscall(SYS_syslog, 10, nullptr, 0);
  line_buf d;
  d.add("magnet-host: [test.forbidden_syscall] syslog(2) returned ");
  d.add(r);
  d.add(": no filter stopped it\n");
  d.out();
  errno = saved;
}
}  // namespace

void arm_forbidden_syscall_test_hook() {
  struct sigaction sa {};
  sa.sa_handler = on_sigusr2;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, nullptr);
}
#else
void arm_forbidden_syscall_test_hook() {}
#endif

}  // namespace magnet::host
