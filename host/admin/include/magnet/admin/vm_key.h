// Which VM a request means (kvm VM, stats VM, views VM, mark VM; the CLI's
// --vm): the rule, apart from the daemon so it is tested on its own.
//
// A key is a VM's magnet id (decimal, as `vms` and `top` print it), its
// UUID, or its libvirt domain name.  libvirt lets a domain be named
// anything, "3" or another domain's UUID included, so these can collide: a
// name never shadows an id or a UUID, nor the other way round.  A key that
// matches more than one VM is an error that says so and names each
// candidate and what it matched, never a silent pick.  To name one of them,
// a key can say which field it is: `id:N`, `uuid:UUID` or `name:NAME` match
// that field only, and each is unique (libvirt keeps names and UUIDs
// unique, the daemon its ids), so every VM has a key that means it alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "magnet/result.h"

namespace magnet::host {

struct vm_ref {
  uint32_t id = 0;  // magnet's VM id
  std::string name, uuid;
};

// The index in @vms of the one VM @key names, or the error text (without
// the reply's "error " prefix): none ("no running VM named ..."), or
// several ("... names N VMs: ...").
result<size_t> find_vm_by_key(const std::vector<vm_ref>& vms, const std::string& key);

}  // namespace magnet::host
