// The client side of the daemon's query socket (magnet top, views, vms,
// sessions, mark, stats): one request line, one reply line.
#pragma once

#include <chrono>
#include <string>

namespace magnet::host {

struct query_reply {
  bool ok = false;
  std::string body;  // JSON, or the error
};
// The bound of one query when the command line sets none (--timeout).
inline constexpr std::chrono::nanoseconds kQueryTimeout = std::chrono::seconds(5);

// Sends @request to the daemon listening at @socket_path and returns its
// reply; a daemon that is not there, or does not answer within @timeout
// (connect, request and reply together), is an error that says so, naming
// the socket (and the bound).
query_reply query_daemon(const std::string& socket_path, const std::string& request,
                         std::chrono::nanoseconds timeout = kQueryTimeout);

// "5s", "500ms", "250us", "7ns": @d in the largest unit that divides it, as
// the CLI's durations are written.
std::string duration_text(std::chrono::nanoseconds d);

}  // namespace magnet::host
