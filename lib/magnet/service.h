// Telling the service manager how a daemon is doing: systemd's
// sd_notify(3) protocol, written here (a datagram of "KEY=VALUE" lines to
// the unix socket $NOTIFY_SOCKET names) rather than taken from libsystemd,
// so that neither the daemon nor the guest-only build depends on it, and
// the daemon's syscall allowlist (host/daemon/src/seccomp.cc) covers what
// it does: socket(AF_UNIX), sendto, close.
#pragma once

#include <string_view>

#include "magnet/result.h"

namespace magnet {

// Sends @state (e.g. "READY=1", "STOPPING=1") to the socket $NOTIFY_SOCKET
// names: a path, or "@name" for an abstract socket.  Without $NOTIFY_SOCKET
// (not started by systemd with Type=notify) it does nothing and succeeds.
// Another kind of address (systemd 253's "vsock:CID:PORT") is refused: this
// program never opens AF_VSOCK sockets towards its host.
status notify_service_manager(std::string_view state);

// The same with the socket named by @notify_socket (null: none), for tests.
status notify_service_manager(std::string_view state, const char* notify_socket);

}  // namespace magnet
