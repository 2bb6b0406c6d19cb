// A client socket bound to a privileged ("reserved") source port before it
// connects, as NFS's reserved-port clients do: only root (CAP_NET_BIND_SERVICE)
// can bind a port below 1024, so the server knows the peer's root made the
// connection.  The host daemon accepts vsock connections only from such
// ports (docs/guest.md); the guest agent and magnet-adversary bind one.
// (The kernel's own choice, VMADDR_PORT_ANY, is always 1024 or above.)
#pragma once

#include <linux/vm_sockets.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "magnet/result.h"

namespace magnet {

// From the top down, as sunrpc's xprt_max_resvport..xprt_min_resvport:
// 512 ports is more than one guest's root ever holds at once, and ports
// below 512 stay free for anything else that wants a fixed one.
inline constexpr uint32_t kReservedPortHigh = 1023, kReservedPortLow = 512;

// Calls @bind(port) (0, or -errno) from kReservedPortHigh down to
// kReservedPortLow until one succeeds: the port bound.  A port in use is
// skipped (an earlier connection may hold it until its peer has closed);
// any other error ends the search (EACCES: not root) and is returned.
template <class Bind>
result<uint32_t> bind_reserved_port(Bind&& bind) {
  for (uint32_t p = kReservedPortHigh; p >= kReservedPortLow; --p) {
    const int rc = bind(p);
    if (rc == 0) return p;
    if (rc != -EADDRINUSE) return error::from_errno("binding source port " + std::to_string(p), -rc);
  }
  return error{"every source port from " + std::to_string(kReservedPortLow) + " to " +
                   std::to_string(kReservedPortHigh) + " is in use",
               EADDRINUSE};
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
