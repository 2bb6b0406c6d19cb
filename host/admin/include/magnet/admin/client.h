// The client side of the daemon's query socket (magnet top, views, vms,
// sessions, mark, stats): one request line, one reply line.
#pragma once

#include <string>

namespace magnet::host {

struct query_reply {
  bool ok = false;
  std::string body;  // JSON, or the error
};
// Sends @request to the daemon listening at @socket_path and returns its
// reply; a daemon that is not there is an error that says so.
query_reply query_daemon(const std::string& socket_path, const std::string& request);

}  // namespace magnet::host
