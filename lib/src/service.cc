#include "magnet/service.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <string>

namespace magnet {

status notify_service_manager(std::string_view state) {
  return notify_service_manager(state, std::getenv("NOTIFY_SOCKET"));
}

status notify_service_manager(std::string_view state, const char* notify_socket) {
  if (!notify_socket || !*notify_socket) return {};
  const std::string name = notify_socket;
  if (name[0] != '/' && name[0] != '@')
    return error{"NOTIFY_SOCKET=" + name + ": not a unix socket path or @abstract name"};
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() >= sizeof a.sun_path)
    return error{"NOTIFY_SOCKET=" + name + ": longer than a unix socket address"};
  name.copy(a.sun_path, name.size());
  if (name[0] == '@') a.sun_path[0] = '\0';  // abstract: the name's bytes, no NUL after
  const socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (name[0] == '/' ? 1 : 0));
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return error::from_errno("NOTIFY_SOCKET: socket");
  const ssize_t n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&a), len);
  const int err = errno;
  ::close(fd);
  if (n < 0) return error::from_errno("NOTIFY_SOCKET=" + name + ": sending " + std::string(state), err);
  if (static_cast<size_t>(n) != state.size())
    return error{"NOTIFY_SOCKET=" + name + ": " + std::string(state) + " sent in part"};
  return {};
}

}  // namespace magnet
