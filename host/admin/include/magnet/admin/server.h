// The daemon's local query socket (magnet top, views, vms, kvm, sessions,
// mark): one request line, one reply line.
//
// Access is checked on the peer's credentials, not only on the socket
// file's mode: root may do everything; members of the read-only group
// (--socket-group), by their primary or any supplementary group, may read.
// The credentials are the kernel's record of the peer at connect():
// SO_PEERCRED (uid, gid, pid) and SO_PEERGROUPS (supplementary groups), so
// a peer can neither forge them nor race them by changing its groups, or
// exiting so its pid is reused, after connecting.  The socket of a daemon
// that still answers is never unlinked: a second daemon refuses to start.
// Accept errors (out of fds, ...) are logged and accepting goes on.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>

#include "magnet/result.h"

namespace magnet::host {

struct admin_peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;                // its effective group
  std::vector<gid_t> groups;    // its supplementary groups
  bool may_write = false;       // root: requests that change state
  // root: what only the host's administrator sees (PIDs, thread ids,
  // cgroups, vsock CIDs: replies.cc says per field)
  bool host_internals = false;
};

enum class admin_access { none, read, all };
// Root: all; a member of @group (-1: no read-only group), by @gid or one of
// @groups: read; anyone else: none.
admin_access access_for(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, gid_t group);

// The supplementary groups the kernel recorded for the peer of the
// connected unix socket @fd when it connected (SO_PEERGROUPS, Linux 4.13).
result<std::vector<gid_t>> peer_groups(int fd);

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
