// The embedded default views of `magnet host` (docs/engine.md): what the
// daemon computes per VM when no --views file is given.
#include "magnet/daemon/daemon.h"

namespace magnet::host {

const char* kDefaultViews = R"(# magnet host: default per-VM views
views:
  - name: guest-tx            # what the guest sends: received from its tap
    filter: "event == net.dev.recv"
    per_vm: true
    windows: [{events: 1000}, {ms: 1000}]
    group_by: [connection]    # per flow: bytes and average bandwidth
  - name: guest-rx            # what the guest receives: sent to its tap
    filter: "event == net.dev.xmit"
    per_vm: true
    windows: [{events: 1000}, {ms: 1000}]
    group_by: [connection]
  - name: block-io            # the VM's requests to the host's disks
    filter: "event == blk.complete"
    per_vm: true
    windows: [{ms: 1000}]
    group_by: [process]
  - name: host-queue          # guest packets forwarded by the host (vmnet.queue)
    filter: "event == vmnet.queue.tx or event == vmnet.queue.rx"
    per_vm: true
    windows: [{ms: 1000}]
    group_by: [connection]
  - name: drops               # the VM's packets dropped on the host (its taps and past them)
    filter: "event == net.drop"
    per_vm: true
    windows: [{ms: 1000}]
)";

}  // namespace magnet::host
