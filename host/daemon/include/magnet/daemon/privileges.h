// Least privilege for `magnet host`: once its probes are loaded and
// attached, its sockets bound and its listeners open, the daemon keeps only
// the capabilities its running work still uses (daemon_capabilities) and
// gives up every other one for good: effective, permitted, inheritable,
// ambient and bounding sets, and no new privileges through exec.  It stays
// uid 0 (docs/reliability.md, "Least privilege", says why).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "magnet/result.h"

namespace magnet::host {

// One capability the daemon keeps, and what for.
struct kept_capability {
  int cap;           // CAP_*
  std::string why;
};

// What the daemon needs after loading; @serial: it dials the VMs'
// virtio-serial view channels, which QEMU creates as its own user.
std::vector<kept_capability> daemon_capabilities(bool serial);

// What setup needs on top of what is kept, before the drop: loading and
// attaching the probes, giving the query socket its group, shrinking the
// bounding set.
std::vector<kept_capability> daemon_setup_capabilities();

// Every capability the daemon may use, at setup or after, in any
// configuration (bit N = CAP N).  A service manager's bounding set for the
// daemon (packaging/systemd/magnet.service.in: CapabilityBoundingSet) is
// this set; tests/package holds the two together.
uint64_t daemon_capability_bound();

// Keeps @keep (those of them the process has) and drops every other
// capability from all five sets; sets no_new_privs.  Capabilities are per
// thread: call it while the process has one thread.  Returns what is kept,
// "CAP_BPF,CAP_SYS_ADMIN" ("none" if nothing); without CAP_SETPCAP the
// bounding set cannot shrink, and the text adds that it stayed as it was.
result<std::string> keep_only_capabilities(const std::vector<kept_capability>& keep);

// "CAP_BPF,CAP_NET_ADMIN" for a mask of capability bits (bit N = cap N).
std::string capability_names(uint64_t mask);

}  // namespace magnet::host
