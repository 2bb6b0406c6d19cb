// The daemon's local query socket (magnet top, views, vms, kvm, sessions,
// mark): one request line, one reply line.
//
// Access is checked on the peer's credentials (SO_PEERCRED), not only on the
// socket file's mode: root may do everything; members of the read-only
// group (--socket-group), by their primary group, may read.  The socket of a
// daemon that still answers is never unlinked: a second daemon refuses to
// start.  Accept errors (out of fds, ...) are logged and accepting goes on.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>

#include "magnet/result.h"

namespace magnet::host {

struct admin_peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool may_write = false;  // root: requests that change state
};

class admin_server {
 public:
  using handler = std::function<std::string(const std::string& line, const admin_peer& peer)>;
  // @group: the read-only group's gid, or -1 for root only.
  static result<std::unique_ptr<admin_server>> open(boost::asio::io_context& io,
                                                    const std::string& path, gid_t group,
                                                    handler h);
  ~admin_server();
  void close();

  struct impl;

 private:
  explicit admin_server(std::shared_ptr<impl> p) : p_(std::move(p)) {}
  std::shared_ptr<impl> p_;
};

// Resolves a group name or number; error if there is none.
result<gid_t> group_id(const std::string& name);

}  // namespace magnet::host
