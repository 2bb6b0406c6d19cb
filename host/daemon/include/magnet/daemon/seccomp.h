// The syscall filter of `magnet host` (seccomp), next to the capabilities it
// keeps (privileges.h): once setup is done (probes attached, sockets bound,
// capabilities dropped), the daemon allows itself only the system calls its
// running work makes, some only with the arguments it uses (seccomp.cc says
// why for each group).  Anything else is a bug or an attacker: the thread
// that made the call logs `[seccomp.violation]` with the call's name and
// the process dies of SIGSYS.  A few calls that code paths reach only
// rarely (error paths, libraries' fallbacks) are allowed and logged by the
// kernel (dmesg: "audit: type=1326 ... comm="magnet" ... syscall=N"), so a
// run shows them without dying of them.  docs/reliability.md, "Least
// privilege", has the list and how it was found and tested.
#pragma once

#include <string>
#include <vector>

#include "magnet/result.h"

namespace magnet::host {

struct syscall_group {
  std::string why;
  std::vector<std::string> names;  // as libseccomp names them (x86-64 and others)
};

// The calls the running daemon makes without conditions, by group.
const std::vector<syscall_group>& daemon_syscalls();
// Those allowed only with some arguments, or answered without running
// (clone3: ENOSYS), or allowed and logged; the text names each.
std::string daemon_syscall_rules();

// Why the daemon cannot follow libvirt at @uri under the filter, or "": a
// transport that runs a program each time libvirt connects (ssh, ext)
// would need fork and exec, which the filter refuses.
std::string seccomp_uri_problem(const std::string& uri);

// Installs the filter on every thread of the process (SECCOMP_FILTER_FLAG_TSYNC)
// and the SIGSYS handler that names a refused call.  Returns a summary for
// the [seccomp] log line.
result<std::string> install_syscall_filter();

// Test builds only (MAGNET_TEST_HOOKS, the magnet_test_hooks program): on
// SIGUSR2, the receiving thread calls syslog(2), which the filter refuses,
// so a test can show the daemon dies of it on any thread.  A no-op in the
// `magnet` program.
void arm_forbidden_syscall_test_hook();

}  // namespace magnet::host
