// The VMs a capturing command follows (record, stat): --vm NAME and --uri
// URI.  With either, the command runs the registry (libvirt) beside its
// capture, as the daemon does, so the probes tag events with each VM's id
// in the kernel; --vm also keeps only those VMs' events (the kernel's vm
// filter).  Without, nothing is tagged: every event is vm 0.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "magnet/capture/capture.h"
#include "magnet/cli.h"
#include "magnet/registry/registry.h"
#include "magnet/result.h"

namespace magnet::host {

struct vm_select {
  std::string uri;                 // "": no VM tagging
  std::vector<std::string> names;  // --vm: only these (empty: every VM)
  bool on() const { return !uri.empty(); }
};

// Takes --vm (repeated, or a comma list) and --uri from @a; --vm alone
// follows qemu:///system.
vm_select parse_vm_select(cli::args& a);

// Help lines for both options.
#define MAGNET_HELP_VM_SELECT                                                     \
  "      --vm NAME          tag events with the VMs' ids (libvirt) and keep\n"    \
  "                         only this VM's (repeat, or a comma list)\n"           \
  "      --uri URI          libvirt to follow (default with --vm:\n"              \
  "                         qemu:///system); alone: tag every VM, keep all\n"

class vm_follower final : public vm_tagger {
 public:
  // Describes the running domains once (an error when libvirt cannot be
  // reached or a --vm names none of them), tags them in @cap, then follows
  // libvirt on the registry's thread until destroyed.
  static result<std::unique_ptr<vm_follower>> start(capture& cap, const vm_select& s);
  ~vm_follower() override;
  // The ids of --vm's VMs (empty without --vm).
  const std::set<uint32_t>& selected() const { return selected_; }
  // Name -> id of every VM seen since the start (a VM started later too).
  std::map<std::string, uint32_t> ids() const;
  std::string describe() const;  // "g1 = vm 1, g2 = vm 2"

 private:
  vm_follower(capture& cap, const std::string& uri);
  void vm_changed(const vm_info& vm) override;
  void vm_gone(uint32_t vm_id) override;
  capture& cap_;
  registry reg_;
  std::set<uint32_t> selected_;
  mutable std::mutex mu_;  // ids_: written on the registry's thread
  std::map<std::string, uint32_t> ids_;
};

}  // namespace magnet::host
