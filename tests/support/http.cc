#include "http.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>

namespace magnet::test {

std::string http_exchange(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    for (size_t off = 0; off < request.size();) {
      ssize_t n = ::send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    char b[65536];
    for (ssize_t n; (n = ::recv(fd, b, sizeof b, 0)) > 0;) out.append(b, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

std::pair<int, std::string> http_get(int port, const std::string& target, const std::string& accept) {
  const std::string out =
      http_exchange(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                              (accept.empty() ? "" : "Accept: " + accept + "\r\n") + "\r\n");
  int status = 0;
  if (out.rfind("HTTP/1.", 0) == 0 && out.size() > 12) status = std::atoi(out.c_str() + 9);
  size_t at = out.find("\r\n\r\n");
  return {status, at == std::string::npos ? "" : out.substr(at + 4)};
}

int metrics_port(const std::string& daemon_log) {
  static const std::regex line(R"(\[http\] serving /metrics on http://127\.0\.0\.1:(\d+)/metrics\n)");
  std::smatch m;
  return std::regex_search(daemon_log, m, line) ? std::stoi(m[1]) : 0;
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

}  // namespace magnet::test
