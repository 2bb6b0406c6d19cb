// `magnet host`: the host daemon.  A controller (options, view definitions,
// SIGHUP reload, SIGTERM drain) around the worker parts: the VM registry
// (its own thread, libvirt's event loop), and on one Boost.Asio thread the
// capture core, the synthesis engine, the per-VM metrics, the delivery of
// each VM's view into it (deliver.h) and the local query socket (admin.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "magnet/daemon/sampling.h"
#include "magnet/deliver/deliver.h"
#include "magnet/export/openmetrics.h"
#include "magnet/http/dashboard.h"
#include "magnet/http/server.h"
#include "magnet/power/model.h"

namespace magnet::host {

// A shared host link whose capacity the available-bandwidth model uses:
// DEV in network namespace NETNS (a name under /run/netns, or empty for the
// daemon's own), capacity RATE in bit/s (0: read from the device's root
// qdisc, tbf or htb).
struct link_spec {
  std::string dev, netns;
  double rate_bps = 0;
};
// "DEV[@NETNS][=RATE]", RATE like 20mbit, 1.5gbit, 800kbit or 1000000.
result<link_spec> parse_link_spec(const std::string& s);

struct daemon_options {
  std::string uri = "qemu:///system";
  std::string views_path;  // empty: the embedded default views
  std::string socket_path = "/run/magnet/host.sock";
  std::string socket_group;  // read-only group of the query socket; empty: root only
  std::string probes = "net.dev,net.drop,vmnet.queue,sched,kvm.exit,kvm.entry,kvm.wakeup,blk";
  size_t ring_bytes = 16u << 20;
  // Per-VM stream quota: events/s per VM and CPU, bursts of 0.1 s (0: none).
  double vm_quota = 200000;
  // --sample: probes whose streamed records the kernel keeps 1 in N
  // (sampling.h); checked against probes by sampled_types().
  std::vector<sample_spec> sample;
  uint64_t duration_ns = 0;  // 0 = until SIGTERM/SIGINT
  bool deliver = true;       // views into the VMs (vsock, virtio-serial)
  deliver_options delivery;
  std::vector<link_spec> links;
  std::optional<http_endpoint> http;  // --http: serve /metrics and the dashboard there
  token_table http_tokens;            // --http-tokens: empty: loopback only, no tokens asked
  std::string http_tokens_path;       // --http-tokens' file, read again on SIGHUP
  std::vector<http_host_name> http_hosts;  // --http-host: more names a request's Host may carry
  uint64_t http_stream_ns = 500'000'000;  // --http-stream-interval: between stream events
  histogram_detail metrics_detail = histogram_detail::full;  // --metrics-detail: /metrics' histograms
  bool seccomp = true;  // the syscall filter after setup (seccomp.h); --no-seccomp: none
  // The host's power (docs/placement.md): RAPL's package zones under
  // --powercap-root, else --power-model, else none.  An empty root is
  // /sys/class/powercap, where an unreadable zone only means no RAPL; one
  // given is the operator's, and a zone there that cannot be read stops the
  // daemon at start.
  std::string powercap_root;
  std::optional<power::power_model> power_model;
  std::string power_model_path;  // the file it came from, for the log
};

// /sys/class/powercap: the kernel's powercap tree.
inline constexpr const char* kPowercapRoot = "/sys/class/powercap";

// Why @o cannot serve HTTP as given (a non-loopback --http without
// --http-tokens), or "".
std::string http_access_problem(const daemon_options& o);

int run_daemon(const daemon_options& o);

extern const char* kDefaultViews;

}  // namespace magnet::host
