// The daemon as a service: what it tells its service manager, and the
// HTTP tokens read again on SIGHUP (host_daemon.h).
#include "host_daemon.h"
#include "magnet/log.h"
#include "magnet/service.h"

namespace magnet::host {

void tell_service_manager(std::string_view state) {
  if (auto s = notify_service_manager(state); !s)
    log_warning("magnet-host: [notify] " + s.err().message);
}

// A bad file (unreadable, wrong mode, a malformed line, no tokens) keeps
// the old tokens.  Open event streams end: they were let in by the old
// file, and a browser's EventSource comes back with its token, checked
// against the new one.
void host_daemon::reload_tokens() {
  if (opt_.http_tokens_path.empty()) return;
  auto t = load_tokens(opt_.http_tokens_path);
  if (!t) {
    log_error("magnet-host: [tokens.rejected] keeping the old tokens: " + t.err().message);
    return;
  }
  opt_.http_tokens = std::move(*t);
  for (auto& p : streams_) p.s->end();
  const size_t ended = streams_.size();
  streams_.clear();
  log_notice("magnet-host: [tokens.reloaded] " + opt_.http_tokens_path + ": " +
             std::to_string(opt_.http_tokens.tokens.size()) + " tokens; " + std::to_string(ended) +
             " event streams ended");
}

}  // namespace magnet::host
