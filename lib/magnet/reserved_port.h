// A client socket bound to a privileged ("reserved") source port before it
// connects, as NFS's reserved-port clients do: only root (CAP_NET_BIND_SERVICE)
// can bind a port below 1024, so the server knows the peer's root made the
// connection.  The host daemon accepts vsock connections only from such
// ports (docs/guest.md); the guest agent and magnet-adversary bind one.
// (The kernel's own choice, VMADDR_PORT_ANY, is always 1024 or above.)
#pragma once

#include <linux/vm_sockets.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <random>
#include <string>

#include "magnet/result.h"

namespace magnet {

// The range of sunrpc's xprt_min_resvport..xprt_max_resvport: 512 ports is
// more than one guest's root ever holds at once, and ports below 512 stay
// free for anything else that wants a fixed one.
inline constexpr uint32_t kReservedPortHigh = 1023, kReservedPortLow = 512;

// Calls @bind(port) (0, or -errno) from @start down to kReservedPortLow,
// then from kReservedPortHigh down to just above @start, until one
// succeeds: the port bound.  A port in use is skipped (an earlier
// connection may hold it until its peer has closed); any other error ends
// the search (EACCES: not root) and is returned.
template <class Bind>
result<uint32_t> bind_reserved_port(Bind&& bind, uint32_t start) {
  constexpr uint32_t n = kReservedPortHigh - kReservedPortLow + 1;
  if (start < kReservedPortLow || start > kReservedPortHigh) start = kReservedPortHigh;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t p = kReservedPortLow + (start - kReservedPortLow + n - i) % n;
    const int rc = bind(p);
    if (rc == 0) return p;
    if (rc != -EADDRINUSE) return error::from_errno("binding source port " + std::to_string(p), -rc);
  }
  return error{"every source port from " + std::to_string(kReservedPortLow) + " to " +
                   std::to_string(kReservedPortHigh) + " is in use",
               EADDRINUSE};
}

// Where this process's next search starts: just below the port its last
// one bound, so that a reconnect does not come from the port of the
// connection just closed (right after a close, the guest's vsock was seen
// to tear such a connection down within seconds: docs/lab.md, "What resets
// the nested guest"); a process's first search starts at a random port, so
// a new process does not start where the last one did either.
inline std::atomic<uint32_t>& reserved_port_cursor() {
  static std::atomic<uint32_t> cursor{
      kReservedPortLow + std::random_device{}() % (kReservedPortHigh - kReservedPortLow + 1)};
  return cursor;
}

template <class Bind>
result<uint32_t> bind_reserved_port(Bind&& bind) {
  auto r = bind_reserved_port(bind, reserved_port_cursor().load());
  if (r) reserved_port_cursor() = *r == kReservedPortLow ? kReservedPortHigh : *r - 1;
  return r;
}

// @fd: an AF_VSOCK stream socket, not yet bound or connected.
inline result<uint32_t> bind_reserved_vsock_port(int fd) {
  return bind_reserved_port([fd](uint32_t port) {
    sockaddr_vm sa{};
    sa.svm_family = AF_VSOCK;
    sa.svm_cid = VMADDR_CID_ANY;
    sa.svm_port = port;
    return ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0 ? 0 : -errno;
  });
}

}  // namespace magnet
