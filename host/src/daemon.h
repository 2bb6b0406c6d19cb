// `magnet host`: the host daemon.  A controller (options, view definitions,
// SIGHUP reload, SIGTERM drain) around the worker parts: the VM registry,
// the capture core, the synthesis engine and a local query socket.
// Boost.Asio runs everything but the registry's libvirt loop on one thread.
#pragma once

#include <cstdint>
#include <string>

namespace magnet::host {

struct daemon_options {
  std::string uri = "qemu:///system";
  std::string views_path;  // empty: the embedded default views
  std::string socket_path = "/run/magnet/host.sock";
  std::string probes = "net.dev,net.drop,vmnet.queue,sched,kvm.exit,kvm.entry,kvm.wakeup,blk";
  size_t ring_bytes = 16u << 20;
  uint64_t duration_ns = 0;  // 0 = until SIGTERM/SIGINT
};

int run_daemon(const daemon_options& o);

// Client side of the query socket: sends one request line, returns the reply.
struct query_reply {
  bool ok = false;
  std::string body;  // JSON, or the error
};
query_reply query_daemon(const std::string& socket_path, const std::string& request);

extern const char* kDefaultViews;

}  // namespace magnet::host
