// libvirt's side of the fleet: each host's capacity and running domains
// (read-only), and the migrator that performs a plan's moves (live,
// peer-to-peer: the source's libvirtd connects to the destination's).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "magnet/fleet/apply.h"
#include "magnet/fleet/assemble.h"
#include "magnet/result.h"

namespace magnet::fleet {

// The host at @uri: its CPUs and memory (virNodeGetInfo) and its active
// domains (memory, vCPUs, persistent, running).  An error names the URI.
result<host_facts> read_host_facts(const std::string& uri);

// Migrations between hosts by fleet name (@uris: name -> libvirt URI, the
// same URI the destination is given to the source's libvirtd: it must
// reach the destination from the source host, e.g. qemu+ssh://b/system).
// Flags: VIR_MIGRATE_LIVE | PEER2PEER | PERSIST_DEST | UNDEFINE_SOURCE.
// Progress from virDomainGetJobStats every second while the migration
// runs in a thread of its own; past the timeout, virDomainAbortJob.
std::unique_ptr<migrator> libvirt_migrator(std::map<std::string, std::string> uris);

}  // namespace magnet::fleet
