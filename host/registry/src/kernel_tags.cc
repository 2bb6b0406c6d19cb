#include "magnet/registry/kernel_tags.h"

namespace magnet::host {

void tag_vm_in_kernel(capture& cap, const vm_info& vm) {
  (void)cap.untag_vm(vm.vm_id);
  if (vm.qemu_pid) (void)cap.tag_vm_tgid(static_cast<uint32_t>(vm.qemu_pid), vm.vm_id);
  for (const auto& t : vm.threads)  // vhost kernel workers have their own tgid
    if (t.role == "vhost") (void)cap.tag_vm_tgid(static_cast<uint32_t>(t.tid), vm.vm_id);
  for (const auto& tap : vm.taps)
    if (tap.ifindex > 0)  // in QEMU's namespace, which need not be ours
      (void)cap.tag_vm_ifindex(tap.netns_ino, static_cast<uint32_t>(tap.ifindex), vm.vm_id);
  for (uint64_t cg : vm.cgroup_ids) (void)cap.tag_vm_cgroup(cg, vm.vm_id);
}

}  // namespace magnet::host
