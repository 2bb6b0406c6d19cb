// A VM of the registry written into the capture core's tagging maps, so
// that the probes tag its events with its id in the kernel: its QEMU
// process and vhost workers (by tgid), its taps (by network namespace and
// ifindex) and its cgroups.  What the daemon and every capturing command
// that follows VMs (record, stat, kvm --vm) do with each vm_changed.
#pragma once

#include "magnet/capture/capture.h"
#include "magnet/registry/registry.h"

namespace magnet::host {

// Replaces @vm's entries (threads or taps may have gone) with its current ones.
void tag_vm_in_kernel(capture& cap, const vm_info& vm);

}  // namespace magnet::host
