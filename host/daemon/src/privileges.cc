#include "magnet/daemon/privileges.h"

#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace magnet::host {

namespace {

// Kernels before 5.19 refuse every bpf() command, lookups and updates on
// map fds already open included, to a process without CAP_BPF when
// kernel.unprivileged_bpf_disabled is set (Debian's default); 5.19 ("bpf:
// refine kernel.unprivileged_bpf_disabled behaviour") keeps that refusal
// for creating maps and loading programs only.
bool map_access_needs_cap_bpf() {
  utsname u{};
  int major = 0, minor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return true;
  if (major > 5 || (major == 5 && minor >= 19)) return false;
  std::FILE* f = std::fopen("/proc/sys/kernel/unprivileged_bpf_disabled", "r");
  int disabled = 1;
  if (f) {
    if (std::fscanf(f, "%d", &disabled) != 1) disabled = 1;
    std::fclose(f);
  }
  return disabled != 0;
}

}  // namespace

std::vector<kept_capability> daemon_capabilities(bool serial) {
  std::vector<kept_capability> k = {
      // setns(CLONE_NEWNET): the registry looks a VM's taps up in QEMU's
      // network namespace, --link NETNS reads tc there, netfilter links
      // are made in each namespace.
      {CAP_SYS_ADMIN, "setns() into QEMU's and --link network namespaces"},
      // /proc/PID/ns/net of QEMU (which libvirt runs as its own user) and of
      // other users' processes passes the ptrace access check only with it.
      {CAP_SYS_PTRACE, "/proc/PID/ns/net of QEMU and other users' processes"},
  };
  if (map_access_needs_cap_bpf())
    k.push_back({CAP_BPF, "bpf() on the loaded maps: VM tagging, in-kernel counters"});
  // Not CAP_NET_ADMIN, though netfilter probes attach in namespaces that
  // appear later: BPF_LINK_CREATE asks nothing more of a loaded netfilter
  // program (Privileges.WhatTheKeptCapabilitiesAreForStillWorksAfterTheDrop),
  // nor CAP_PERFMON: perf-event links are made at start only.
  if (serial)
    k.push_back({CAP_DAC_OVERRIDE,
                 "connecting to the view channels QEMU creates as its own user (mode 0755 or "
                 "stricter, under libvirt's 0750 directories)"});
  return k;
}

std::vector<kept_capability> daemon_setup_capabilities() {
  return {
      {CAP_BPF, "creating the maps and loading the programs"},
      {CAP_PERFMON, "attaching tracing programs (tracepoints, raw_tp, tp_btf, kprobes)"},
      {CAP_NET_ADMIN, "attaching tc, cgroup_skb and netfilter programs"},
      {CAP_CHOWN, "giving the query socket its --socket-group"},
      {CAP_SETPCAP, "dropping the rest from the bounding set (keep_only_capabilities)"},
  };
}

uint64_t daemon_capability_bound() {
  uint64_t mask = uint64_t{1} << CAP_BPF;  // kept on kernels before 5.19
  for (const auto& c : daemon_setup_capabilities()) mask |= uint64_t{1} << c.cap;
  for (const auto& c : daemon_capabilities(true)) mask |= uint64_t{1} << c.cap;
  return mask;
}

std::string capability_names(uint64_t mask) {
  std::string out;
  for (int c = 0; c < 64; ++c) {
    if (!((mask >> c) & 1)) continue;
    std::unique_ptr<char, decltype(&cap_free)> n(cap_to_name(static_cast<cap_value_t>(c)), cap_free);
    std::string s = n ? n.get() : "cap_" + std::to_string(c);
    for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    out += (out.empty() ? "" : ",") + s;
  }
  return out;
}

result<std::string> keep_only_capabilities(const std::vector<kept_capability>& keep) {
  std::unique_ptr<std::remove_pointer_t<cap_t>, decltype(&cap_free)> cur(cap_get_proc(), cap_free);
  if (!cur) return error::from_errno("reading this process's capabilities");
  std::vector<cap_value_t> have;
  uint64_t mask = 0;
  for (const auto& k : keep) {
    cap_flag_value_t v = CAP_CLEAR;
    if (cap_get_flag(cur.get(), static_cast<cap_value_t>(k.cap), CAP_PERMITTED, &v) == 0 &&
        v == CAP_SET) {
      have.push_back(static_cast<cap_value_t>(k.cap));
      mask |= uint64_t{1} << k.cap;
    }
  }
  // Nothing regains a capability through exec: no ambient ones, a bounding
  // set of what is kept (this needs CAP_SETPCAP, so it comes first), and no
  // new privileges from set-user-ID or file capabilities.
  if (cap_reset_ambient() != 0) return error::from_errno("clearing the ambient capabilities");
  int bound_err = 0;
  for (int c = 0; c <= CAP_LAST_CAP; ++c) {
    if (((mask >> c) & 1) || !CAP_IS_SUPPORTED(c)) continue;
    if (cap_drop_bound(static_cast<cap_value_t>(c)) != 0 && !bound_err) bound_err = errno;
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return error::from_errno("setting no_new_privs");
  std::unique_ptr<std::remove_pointer_t<cap_t>, decltype(&cap_free)> want(cap_init(), cap_free);
  if (!want) return error::from_errno("cap_init");
  if (!have.empty() &&
      (cap_set_flag(want.get(), CAP_EFFECTIVE, static_cast<int>(have.size()), have.data(), CAP_SET) ||
       cap_set_flag(want.get(), CAP_PERMITTED, static_cast<int>(have.size()), have.data(), CAP_SET)))
    return error::from_errno("building the capability set");
  if (cap_set_proc(want.get()) != 0) return error::from_errno("dropping capabilities");
  std::string kept = mask ? capability_names(mask) : "none";
  if (bound_err)
    kept += std::string(" (the bounding set stays as it was: ") + std::strerror(bound_err) + ")";
  return kept;
}

}  // namespace magnet::host
