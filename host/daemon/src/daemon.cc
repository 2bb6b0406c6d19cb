// `magnet host`: the daemon's run, from setup to drain.  The class and the
// map of its files: host_daemon.h.
#include "magnet/daemon/daemon.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

#include "host_daemon.h"
#include "magnet/daemon/privileges.h"
#include "magnet/daemon/seccomp.h"
#include "magnet/log.h"
#include "magnet/trace_file.h"

namespace magnet::host {

namespace asio = boost::asio;

// The query socket (its read-only group @group, or -1) and, with --http,
// the HTTP server: 0, or the exit status.
int host_daemon::open_endpoints(gid_t group) {
  ::mkdir("/run/magnet", 0755);
  auto adm = admin_server::open(io_, opt_.socket_path, group,
                                [this](const std::string& l, const admin_peer& p) { return handle(l, p); });
  if (!adm) {
    log_error("magnet host: " + adm.err().message);
    return 1;
  }
  admin_ = std::move(*adm);
  if (opt_.http && !serve_http()) return 1;
  return 0;
}

// Probes loaded and attached, the socket bound and given its group: keep
// only the capabilities the running daemon uses (privileges.h), before any
// thread starts (libvirt's included), as capabilities are per thread.
int host_daemon::drop_privileges() {
  const auto keep = daemon_capabilities(opt_.deliver && opt_.delivery.serial);
  auto kept = keep_only_capabilities(keep);
  if (!kept) {
    log_error("magnet host: " + kept.err().message);
    return 1;
  }
  log_notice("magnet-host: [privileges] capabilities kept: " + *kept);
  for (const auto& c : keep)
    log_info("magnet-host: [privileges] " + capability_names(uint64_t{1} << c.cap) + ": " + c.why);
  return 0;
}

// Setup is done: from here on only the calls the running daemon makes
// (seccomp.h), on every thread, the registry's included (it starts next).
int host_daemon::filter_syscalls() {
  if (!opt_.seccomp) {
    log_warning("magnet-host: [seccomp] syscall filter off (--no-seccomp)");
    return 0;
  }
  auto f = install_syscall_filter();
  if (!f) {
    log_error("magnet host: " + f.err().message + " (--no-seccomp runs without the filter)");
    return 1;
  }
  log_notice("magnet-host: [seccomp] syscall filter on: " + *f);
  for (const auto& g : daemon_syscalls()) {
    std::string names;
    for (const auto& n : g.names) names += (names.empty() ? "" : ",") + n;
    log_info("magnet-host: [seccomp] " + names + ": " + g.why);
  }
  log_debug("magnet-host: [seccomp] " + daemon_syscall_rules());
  return 0;
}

// SIGHUP reloads the views and the HTTP tokens (a bad file keeps the old
// ones); SIGINT and SIGTERM stop the loop, and run() drains.
void host_daemon::serve_signals(asio::signal_set& signals) {
  signals.async_wait([this, &signals](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (sig != SIGHUP) {
      io_.stop();
      return;
    }
    auto s = load_views();
    if (s)
      log_notice("magnet-host: [views.reloaded] " +
                 (opt_.views_path.empty() ? std::string("default views") : opt_.views_path));
    else
      log_error("magnet-host: [views.rejected] keeping the old views: " + s.err().message);
    reload_tokens();
    serve_signals(signals);
  });
}

void host_daemon::drain() {
  tell_service_manager("STOPPING=1");
  hub_.stop();
  io_.restart();
  io_.poll();  // the peers' goodbyes
  reg_.stop();
  cap_->stop(probes_);
  (void)cons_->drain();
  admin_.reset();
  streams_.clear();
  http_.reset();
  log_notice("magnet-host: [stopped] " + std::to_string(cons_->records()) + " records, " +
             std::to_string(cons_->lost()) + " lost");
}

int host_daemon::run() {
  // Before the views, which take the kernel's rates (cmd_host checked it).
  auto sampling = sampled_types(opt_.sample, opt_.probes);
  if (!sampling) {
    log_error("magnet host: --sample: " + sampling.err().message);
    return 2;
  }
  sampling_ = std::move(*sampling);
  if (auto s = load_views(); !s) {
    log_error("magnet host: views: " + s.err().message);
    return 2;
  }
  gid_t group = static_cast<gid_t>(-1);
  if (!opt_.socket_group.empty()) {
    auto g = group_id(opt_.socket_group);
    if (!g) {
      log_error("magnet host: --socket-group: " + g.err().message);
      return 2;
    }
    group = *g;
  }
  if (auto s = setup_capture(); !s) {
    log_error("magnet host: " + s.err().message);
    return 1;
  }
  if (int rc = open_power()) return rc;
  if (int rc = open_endpoints(group)) return rc;
  if (int rc = drop_privileges()) return rc;
  // Know the running VMs before the first guest connects: a guest that
  // reconnects as soon as the daemon is back would otherwise be refused
  // ("no running domain has this CID") and wait out its backoff.  (Its
  // handlers run first: they are queued before any accept completes.)
  (void)reg_.reconcile();  // a libvirt that is down: the registry thread says so
  if (opt_.deliver) {
    if (auto s = hub_.start(); !s) {
      log_error("magnet host: delivery: " + s.err().message);
      return 1;
    }
  }
  ring_fd_ = std::make_unique<asio::posix::stream_descriptor>(io_, ::dup(cons_->epoll_fd()));
  resolve_links();
  asio::signal_set signals(io_, SIGINT, SIGTERM, SIGHUP);
  serve_signals(signals);
  if (int rc = filter_syscalls()) return rc;
  arm_forbidden_syscall_test_hook();
  start_ns_ = monotonic_ns();
  next_tick_ = asio::steady_timer::clock_type::now();
  reg_.start();
  arm_ring();
  tick();
  log_notice("magnet-host: [started] probes " + cap_->attach_summary() +
             (opt_.sample.empty() ? "" : "; sampled " + sample_list_text(opt_.sample)) + "; libvirt " + opt_.uri +
                 "; socket " + opt_.socket_path +
                 (opt_.deliver ? std::string("; delivery ") +
                                     (hub_.listening_vsock()
                                          ? "vsock port " + std::to_string(opt_.delivery.vsock_port)
                                          : std::string("without vsock")) +
                                     (opt_.delivery.serial ? ", virtio-serial channels" : "")
                               : std::string("; delivery off")));
  // systemd's Type=notify: ready once the loop that answers runs.
  asio::post(io_, [] { tell_service_manager("READY=1"); });
  io_.run();
  drain();
  return 0;
}

int run_daemon(const daemon_options& o) {
  // A peer that goes away must never end the daemon: libvirt's client
  // library writes to its socket without MSG_NOSIGNAL, so a libvirtd that
  // restarts would otherwise kill us with SIGPIPE (seen: exit 141).  Every
  // write reports EPIPE instead.
  ::signal(SIGPIPE, SIG_IGN);
  host_daemon d(o);
  if (std::string why = http_access_problem(o); !why.empty()) {
    log_error("magnet host: " + why);
    return 2;
  }
  return d.run();
}

std::string http_access_problem(const daemon_options& o) {
  if (o.http && !o.http->loopback && o.http_tokens.empty())
    return "--http " + o.http->text() +
           ": not a loopback address, and no --http-tokens: without tokens the dashboard and "
           "/metrics are served on loopback only (127.0.0.1 or ::1)";
  return {};
}

}  // namespace magnet::host
