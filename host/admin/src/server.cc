#include "magnet/admin/server.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "magnet/log.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59  // Linux 4.13; older C library headers lack it
#endif

namespace magnet::host {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

namespace {
constexpr size_t kMaxLine = 4096;
constexpr unsigned kMaxClients = 32;
constexpr auto kDeadline = std::chrono::seconds(5);
}  // namespace

struct admin_server::impl : std::enable_shared_from_this<impl> {
  asio::io_context& io;
  local::acceptor acceptor;
  std::string path;
  gid_t group;
  handler h;
  unsigned clients = 0;
  bool closed = false;
  bool said_no_groups = false;  // [admin.groups] logged once

  impl(asio::io_context& i, std::string p, gid_t g, handler fn)
      : io(i), acceptor(i), path(std::move(p)), group(g), h(std::move(fn)) {}

  void accept();
  void serve(std::shared_ptr<local::socket> s);
};

admin_access access_for(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, gid_t group) {
  if (uid == 0) return admin_access::all;
  if (group == static_cast<gid_t>(-1)) return admin_access::none;
  if (gid == group || std::find(groups.begin(), groups.end(), group) != groups.end())
    return admin_access::read;
  return admin_access::none;
}

result<std::vector<gid_t>> peer_groups(int fd) {
  // Not getgrouplist(uid): that is what the group database says now, not
  // the groups the peer held, and NSS may ask the network for it.
  std::vector<gid_t> g(64);
  // Too small a buffer: ERANGE with the size needed.  The peer's
  // credentials were fixed at connect(), so the second call fits.
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t len = static_cast<socklen_t>(g.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g.data(), &len) == 0) {
      g.resize(len / sizeof(gid_t));
      return g;
    }
    if (errno != ERANGE) return error::from_errno("SO_PEERGROUPS");
    g.resize(len / sizeof(gid_t) + 1);
  }
  return error{"SO_PEERGROUPS: the peer's groups kept growing", ERANGE};
}

result<gid_t> group_id(const std::string& name) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos)
    return static_cast<gid_t>(std::stoul(name));
  if (const group* g = getgrnam(name.c_str())) return g->gr_gid;
  return error{"no group named '" + name + "'"};
}

result<std::unique_ptr<admin_server>> admin_server::open(asio::io_context& io,
                                                         const std::string& path, gid_t group,
                                                         handler h) {
  auto p = std::make_shared<impl>(io, path, group, std::move(h));
  // A socket file that answers belongs to a running daemon: leave it alone.
  {
    local::socket probe(io);
    boost::system::error_code ec;
    probe.connect(local::endpoint(path), ec);
    if (!ec) {
      ucred cr{};
      socklen_t len = sizeof cr;
      getsockopt(probe.native_handle(), SOL_SOCKET, SO_PEERCRED, &cr, &len);
      return error{"another magnet host (pid " + std::to_string(cr.pid) + ") serves " + path +
                   "; stop it first or use --socket"};
    }
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) return error{path + " exists and is not a socket"};
      ::unlink(path.c_str());  // stale: nobody answers there
    }
  }
  try {
    p->acceptor.open(local::endpoint(path).protocol());
    p->acceptor.bind(local::endpoint(path));
    p->acceptor.listen(16);
  } catch (const boost::system::system_error& e) {
    return error{"cannot listen on " + path + ": " + e.what()};
  }
  // Root reads and writes; the read-only group may connect.
  if (group != static_cast<gid_t>(-1)) {
    if (::chown(path.c_str(), 0, group) != 0 || ::chmod(path.c_str(), 0660) != 0)
      return error::from_errno("setting the group of " + path);
  } else if (::chmod(path.c_str(), 0600) != 0) {
    return error::from_errno("chmod " + path);
  }
  p->accept();
  return std::unique_ptr<admin_server>(new admin_server(p));
}

admin_server::~admin_server() { close(); }

void admin_server::close() {
  if (!p_ || p_->closed) return;
  p_->closed = true;
  boost::system::error_code ec;
  p_->acceptor.close(ec);
  ::unlink(p_->path.c_str());
}

void admin_server::impl::accept() {
  acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec, local::socket s) {
    if (self->closed) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      log_warning("magnet-host: [admin.accept_error] " + ec.message() + "; still accepting");
      auto t = std::make_shared<asio::steady_timer>(self->io, std::chrono::milliseconds(100));
      t->async_wait([self, t](boost::system::error_code) {
        if (!self->closed) self->accept();
      });
      return;
    }
    if (self->clients >= kMaxClients) {
      log_warning("magnet-host: [admin.busy] more than " + std::to_string(kMaxClients) +
                      " clients at once; one refused");
    } else {
      self->serve(std::make_shared<local::socket>(std::move(s)));
    }
    self->accept();
  });
}

void admin_server::impl::serve(std::shared_ptr<local::socket> s) {
  ucred cr{};
  socklen_t len = sizeof cr;
  if (getsockopt(s->native_handle(), SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) return;
  admin_peer peer{cr.pid, cr.uid, cr.gid, {}, false, false};
  if (auto g = peer_groups(s->native_handle())) {
    peer.groups = std::move(*g);
  } else if (!said_no_groups) {
    // A kernel before 4.13: only the primary group counts, as before.
    said_no_groups = true;
    log_warning("magnet-host: [admin.groups] " + g.err().message +
                    ": peers' supplementary groups are not known; only their primary group counts");
  }
  const admin_access access = access_for(cr.uid, cr.gid, peer.groups, group);
  peer.may_write = peer.host_internals = access == admin_access::all;
  const bool allowed = access != admin_access::none;
  ++clients;
  auto buf = std::make_shared<asio::streambuf>(kMaxLine);
  auto reply = std::make_shared<std::string>();
  auto timer = std::make_shared<asio::steady_timer>(io, kDeadline);
  auto self = shared_from_this();
  auto done = std::make_shared<bool>(false);
  auto finish = [self, done, timer] {
    if (*done) return;
    *done = true;
    timer->cancel();
    --self->clients;
  };
  timer->async_wait([s, done](boost::system::error_code ec) {
    if (ec || *done) return;
    boost::system::error_code ig;
    s->close(ig);  // a client that sends nothing, or reads nothing, is dropped
  });
  // The request is read before any answer, even a refusal: closing on
  // unread data would reset the connection and lose the answer.
  asio::async_read_until(
      *s, *buf, '\n',
      [self, s, buf, reply, peer, allowed, finish](boost::system::error_code ec, size_t) {
        if (ec || self->closed) return finish();
        std::istream is(buf.get());
        std::string line;
        std::getline(is, line);
        if (allowed) {
          *reply = self->h(line, peer) + "\n";
        } else {
          log_warning("magnet-host: [admin.denied] uid " + std::to_string(peer.uid) + " (pid " +
                          std::to_string(peer.pid) + ") is neither root nor in the socket's group");
          *reply = "error permission denied: uid " + std::to_string(peer.uid) +
                   " is neither root nor in the daemon's read-only group\n";
        }
        asio::async_write(*s, asio::buffer(*reply),
                          [s, reply, finish](boost::system::error_code, size_t) { finish(); });
      });
}

}  // namespace magnet::host
