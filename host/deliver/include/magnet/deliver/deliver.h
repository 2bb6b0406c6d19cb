// Delivery of each VM's own view into that VM (proto/magnet/view.h).
//
// The hub runs on the daemon's io_context.  Connections reach it three ways:
//   * AF_VSOCK, any CID, one port: the VM is the peer CID the kernel reports,
//     mapped to exactly one running domain (CIDs 0-2, i.e. the hypervisor,
//     local loopback and the host itself, and CIDs of no running domain are
//     refused), confirmed by the registry at accept (deliver_options::
//     cid_owner); only from a source port below 1024 (the guest's root),
//     at a bounded rate per VM, and a session that has not subscribed within
//     5 s is closed (admission.h has the whole decision);
//   * a per-VM virtio-serial channel (domain XML, target name
//     org.magnet.view.0) for guests without vsock: the hub connects to the
//     unix socket QEMU listens on and checks with SO_PEERCRED that the
//     listener is that domain's QEMU; the VM is the channel's;
//   * adopt(): an already connected socket with its VM (tests, benches).
// Nothing a guest sends names or changes its VM, and every connection is a
// guest's: its event records go through the guest schema (docs/guest.md,
// "What a guest may see").  When the registry changes, every connection is
// checked again: a stopped VM's close, and a CID reused by another VM
// belongs to the new VM only.
//
// Bounded per connection: the newest stats frame replaces an unsent older
// one (a slow reader never grows a queue); event batches are bounded in
// bytes and in records per second, with a lost count; read, frame and write
// deadlines; per-VM caps on connections and on subscriptions per second.
// A virtio-serial channel that floods is not read for a backoff
// (view::flood_limits), so it costs the io thread a bounded share.
// Every refusal or drop is logged with the VM and a stable message id
// ([deliver.*], rate-limited per VM).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>

#include "magnet/deliver/admission.h"
#include "magnet/result.h"
#include "magnet/view_codec.h"
#include "magnet/view_server.h"

namespace magnet::host {

struct deliver_options {
  enum class vsock_mode { automatic, on, off };
  // automatic: listen when this host runs vsock guests (/dev/vhost-vsock
  // exists); a host that is itself a guest would otherwise listen on its
  // own hypervisor's vsock.
  vsock_mode vsock = vsock_mode::automatic;
  uint32_t vsock_port = MAGNET_VIEW_VSOCK_PORT;
  bool serial = true;  // connect to the VMs' view channels
  // vsock peers from any source port (--vsock-any-port); by default only
  // below 1024, which only a guest's root can bind, so that its other users
  // cannot take the VM's connection slots or subscriptions.
  bool vsock_any_port = false;
  double vsock_accepts_per_s = 10, vsock_accept_burst = 20;  // per VM (admission.h says why)
  unsigned max_conns_per_vm = 4;        // vsock connections at once
  unsigned max_subscribes_per_s = 5;    // per VM, burst of the same size
  unsigned max_msgs_per_s = 50;         // per connection, burst twice that
  std::chrono::milliseconds hello_deadline{5000};  // vsock: hello after accept
  std::chrono::milliseconds subscribe_deadline{5000};  // vsock: subscribe after accept
  std::chrono::milliseconds frame_deadline{1000};  // a frame's bytes, first to last
  std::chrono::milliseconds write_deadline{5000};  // one write in flight
  size_t max_event_bytes = 256u << 10;  // queued event batches per connection
  uint32_t max_events_per_s = 20000;    // event records per connection
  view::flood_limits serial_flood;      // a virtio-serial channel's misbehaviour
  // Which running VM has vsock CID @cid now (0: none), asked afresh at
  // every accept that passed the other checks, so that a CID that moved
  // since the last set_vms() is not trusted (the daemon asks the registry:
  // registry::cid_owner).  It may block: the hub calls it on a thread of
  // its own, never on the io thread.  An error refuses the connection.
  // Empty: the hub's own list is trusted (tests, benches).
  std::function<result<uint32_t>(uint32_t cid)> cid_owner;
};

// What the hub knows of a running VM (from the registry).
struct vm_ident {
  uint32_t vm_id = 0;
  std::string name;          // for logs
  uint32_t cid = 0;          // vsock CID, 0 = none
  pid_t qemu_pid = 0;
  std::string channel;       // view channel socket path, empty = none
  uint64_t session_id = 0;   // changes with the VM's identity (new process)
  // Host tids of its vCPU threads: the only tasks a guest may see in
  // sched.* records (lib/magnet/guest_schema.h).
  std::set<uint32_t> vcpu_tids;
};

enum class transport { vsock, serial, test };
std::string_view transport_name(transport t);

class delivery_hub {
 public:
  delivery_hub(boost::asio::io_context& io, deliver_options o);
  ~delivery_hub();
  delivery_hub(const delivery_hub&) = delete;

  // Opens the vsock listener (per options).  A failure to listen is an
  // error only in vsock_mode::on.
  status start();
  // Closes every connection (telling each peer the server stops).
  void stop();

  // The running VMs, after every registry change.
  void set_vms(const std::vector<vm_ident>& vms);
  // A VM's stats as of @at_ns (the daemon's tick); pushed to subscribers
  // whose period or change says so.
  void publish(uint32_t vm, uint64_t at_ns, const std::vector<view::stat_value>& stats);
  // Streamed records of every VM, routed by hdr.vm_id to the connections
  // of that VM that asked for events of their type.
  void publish_events(std::span<const uint8_t> records);
  // host.marker of a VM: pushed at once to its on-change subscribers.
  void set_marker(uint32_t vm, double value, uint64_t at_ns);

  // An already connected stream socket (AF_UNIX), as VM @vm's connection
  // over @kind (tests and benches stand in for vsock or virtio-serial).
  void adopt(uint32_t vm, int fd, transport kind = transport::test);
  // An already connected stream socket (AF_UNIX) as if the vsock listener
  // had accepted it from @peer: the VM is found and the connection
  // admitted or refused exactly as for a real one (tests: no AF_VSOCK).
  void accept_vsock(int fd, vsock_peer peer);

  std::vector<view::session_info> sessions() const;
  // vsock connections accepted, replaced and refused (by reason), per VM
  // (0: CIDs of no VM).
  std::map<uint32_t, accept_counts> vsock_counts() const;
  bool listening_vsock() const;

  struct impl;

 private:
  std::shared_ptr<impl> p_;
};

}  // namespace magnet::host
