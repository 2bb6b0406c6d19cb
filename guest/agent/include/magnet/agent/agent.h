// magnet-agent: the guest side of the per-VM view.
//
// It keeps one session with the host daemon (vsock CID 2, else the
// virtio-serial port org.magnet.view.0), reconnecting with a capped backoff;
// runs the capture core's probes on the guest kernel (its socket and device
// layers) and follows packets from the guest's socket to the host's wire
// (journey.h); and serves the VM's view (host part, guest part, each value
// with its age) to local applications over a unix socket, with the same
// protocol the host speaks (lib/magnet/view_server.h).  Without a host it
// says so and keeps serving the guest's own data.
#pragma once

#include <cstdint>
#include <string>

#include "magnet/view.h"

namespace magnet::guest {

struct agent_options {
  std::string socket = MAGNET_VIEW_AGENT_SOCKET;
  std::string group;  // group that may use the socket; empty: root only
  enum class host_mode { automatic, vsock, serial, none };
  host_mode host = host_mode::automatic;
  uint32_t vsock_port = MAGNET_VIEW_VSOCK_PORT;
  std::string channel = MAGNET_VIEW_CHANNEL_NAME;
  uint32_t period_ms = 100;  // the subscription towards the host
  bool probes = true;        // guest-side probes
  bool journey = true;       // packets' journey (needs probes and host events)
  uint64_t duration_ns = 0;  // 0: until SIGTERM/SIGINT
};

int run_agent(const agent_options& o);

}  // namespace magnet::guest
