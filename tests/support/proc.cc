#include "proc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace magnet::test {
namespace {

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

[[noreturn]] void exec_argv(const std::vector<std::string>& argv) {
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  execvp(a[0], a.data());
  std::fprintf(stderr, "exec %s failed\n", a[0]);
  _exit(127);
}

int decode(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

int wait_bounded(pid_t pid, int timeout_s) {
  double end = now_s() + timeout_s;
  int st = 0;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return decode(st);
    if (now_s() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(10000);
  }
}

std::string read_file(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

run_result run(const std::vector<std::string>& argv, int timeout_s) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) throw std::runtime_error("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    exec_argv(argv);
  }
  close(out[1]);
  close(err[1]);
  run_result r;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  double end = now_s() + timeout_s;
  char buf[65536];
  while (open_fds && now_s() < end) {
    if (poll(fds, 2, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i ? r.err : r.out).append(buf, static_cast<size_t>(n));
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  r.status = wait_bounded(pid, std::max(1, static_cast<int>(end - now_s())));
  return r;
}

void sh(const std::string& cmd) {
  if (int rc = std::system(cmd.c_str()); rc != 0)
    throw std::runtime_error("command failed (" + std::to_string(rc) + "): " + cmd);
}

child::child(const std::vector<std::string>& argv) {
  char tmpl[] = "/tmp/magnet-child-XXXXXX";
  int fd = mkstemp(tmpl);
  err_path_ = tmpl;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fd, 2);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    exec_argv(argv);
  }
  close(fd);
}

child::~child() {
  if (pid_ > 0) stop(SIGKILL, 5);
  unlink(err_path_.c_str());
}

bool child::wait_for_stderr(const std::string& text, int timeout_s) {
  double end = now_s() + timeout_s;
  while (now_s() < end) {
    if (stderr_text().find(text) != std::string::npos) return true;
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    usleep(20000);
  }
  return false;
}

int child::stop(int sig, int timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int rc = wait_bounded(pid_, timeout_s);
  pid_ = -1;
  return rc;
}

std::string child::stderr_text() const { return read_file(err_path_); }

ns_task::ns_task(const std::string& ns, std::function<int(const std::function<void()>&)> fn) {
  int p[2];
  if (pipe2(p, O_CLOEXEC)) throw std::runtime_error("pipe");
  pid_ = fork();
  if (pid_ == 0) {
    close(p[0]);
    if (!ns.empty()) {
      int fd = open(("/run/netns/" + ns).c_str(), O_RDONLY);
      if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(120);
    }
    int w = p[1];
    int rc = fn([w] {
      char c = 1;
      (void)!write(w, &c, 1);
    });
    _exit(rc);
  }
  close(p[1]);
  ready_fd_ = p[0];
}

ns_task::~ns_task() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (ready_fd_ >= 0) close(ready_fd_);
}

bool ns_task::wait_ready(int timeout_s) {
  pollfd f{ready_fd_, POLLIN, 0};
  if (poll(&f, 1, timeout_s * 1000) != 1) return false;
  char c;
  return read(ready_fd_, &c, 1) == 1;
}

int ns_task::join(int timeout_s) {
  int rc = wait_bounded(pid_, timeout_s);
  pid_ = -1;
  return rc;
}

int netfilter_links(pid_t pid) {
  int n = 0;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  if (DIR* d = opendir(dir.c_str())) {
    while (auto* e = readdir(d)) {
      std::ifstream f(dir + "/" + e->d_name);
      std::string line;
      while (std::getline(f, line)) n += line == "link_type:\tnetfilter";
    }
    closedir(d);
  }
  return n;
}

uint32_t netns_ino(const std::string& ns) {
  struct stat st;
  return stat(("/run/netns/" + ns).c_str(), &st) == 0 ? static_cast<uint32_t>(st.st_ino) : 0;
}

veth_pair::veth_pair() {
  std::string id = std::to_string(getpid());
  ns_a = "magnet-ta-" + id;
  ns_b = "magnet-tb-" + id;
  std::string va = "mgta" + id, vb = "mgtb" + id;
  va.resize(std::min<size_t>(va.size(), 15));
  vb.resize(std::min<size_t>(vb.size(), 15));
  sh("ip netns add " + ns_a);
  sh("ip netns add " + ns_b);
  netns_ino_a = netns_ino(ns_a);
  netns_ino_b = netns_ino(ns_b);
  for (const auto& ns : {ns_a, ns_b})
    sh("ip netns exec " + ns +
       " sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1");
  ifindex_a = 1000000 + static_cast<int>(getpid() % 1000000) * 2;
  ifindex_b = ifindex_a + 1;
  sh("ip link add " + va + " index " + std::to_string(ifindex_a) + " netns " + ns_a +
     " type veth peer name " + vb + " index " + std::to_string(ifindex_b) + " netns " + ns_b);
  sh("ip -n " + ns_a + " addr add " + addr_a + "/24 dev " + va);
  sh("ip -n " + ns_b + " addr add " + addr_b + "/24 dev " + vb);
  for (const auto& [ns, dev] : {std::pair{ns_a, va}, {ns_b, vb}}) {
    sh("ip -n " + ns + " link set lo up");
    sh("ip -n " + ns + " link set " + dev + " up");
  }
  // Static neighbours: no ARP exchange in the middle of a measurement.
  sh("ip -n " + ns_a + " neigh replace " + addr_b + " dev " + va + " lladdr $(ip -n " + ns_b +
     " -o link show " + vb + " | sed -n 's/.*link\\/ether \\([0-9a-f:]*\\).*/\\1/p') nud permanent");
  sh("ip -n " + ns_b + " neigh replace " + addr_a + " dev " + vb + " lladdr $(ip -n " + ns_a +
     " -o link show " + va + " | sed -n 's/.*link\\/ether \\([0-9a-f:]*\\).*/\\1/p') nud permanent");
}

veth_pair::~veth_pair() {
  std::system(("ip netns del " + ns_a + " 2>/dev/null").c_str());
  std::system(("ip netns del " + ns_b + " 2>/dev/null").c_str());
}

namespace {

sockaddr_in inet_addr_of(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

}  // namespace

udp_exchange_result udp_exchange(const veth_pair& v, int n, int size, uint16_t sport,
                                 uint16_t dport, bool pace,
                                 const std::function<void(pid_t)>& before_send) {
  return udp_flow(v.ns_a, v.addr_a, v.ns_b, v.addr_b, n, size, sport, dport, pace, before_send);
}

udp_exchange_result udp_flow(const std::string& ns_tx, const std::string& addr_tx,
                             const std::string& ns_rx, const std::string& addr_rx, int n,
                             int size, uint16_t sport, uint16_t dport, bool pace,
                             const std::function<void(pid_t)>& before_send) {
  udp_exchange_result res;
  auto src = inet_addr_of(addr_tx, sport), dst = inet_addr_of(addr_rx, dport);
  // The sender is set up first and waits for a byte on @go before sending,
  // so that before_send knows its pid.
  int go[2];
  if (pipe2(go, O_CLOEXEC)) return res;
  ns_task tx(ns_tx, [&](const std::function<void()>&) {
    close(go[1]);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (bind(s, reinterpret_cast<const sockaddr*>(&src), sizeof src)) return 2;
    if (connect(s, reinterpret_cast<const sockaddr*>(&dst), sizeof dst)) return 3;
    char c;
    if (read(go[0], &c, 1) != 1) return 5;
    std::vector<char> buf(static_cast<size_t>(size), 'm');
    for (int i = 0; i < n; ++i) {
      if (send(s, buf.data(), buf.size(), 0) != size) return 4;
      if (pace && i % 50 == 49) usleep(1000);
    }
    return 0;
  });
  close(go[0]);
  if (before_send) before_send(tx.pid());
  ns_task rx(ns_rx, [&](const std::function<void()>& ready) {
    close(go[1]);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    int big = 8 << 20;
    setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    if (bind(s, reinterpret_cast<const sockaddr*>(&dst), sizeof dst)) return 2;
    if (connect(s, reinterpret_cast<const sockaddr*>(&src), sizeof src)) return 4;
    timeval tv{5, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ready();
    std::vector<char> buf(65536);
    for (int i = 0; i < n; ++i)
      if (recv(s, buf.data(), buf.size(), 0) != size) return 3;
    return 0;
  });
  const bool rx_ready = rx.wait_ready();
  // Without a ready receiver the sender gets EOF instead of the byte and ends.
  if (rx_ready) (void)!write(go[1], "g", 1);
  close(go[1]);
  res.tx = tx.pid();
  res.rx = rx.pid();
  res.tx_rc = tx.join();
  res.rx_rc = rx_ready ? rx.join() : -1;
  return res;
}

tcp_transfer_result tcp_transfer(const veth_pair& v, size_t total, uint16_t sport,
                                 uint16_t dport) {
  tcp_transfer_result res;
  auto src = inet_addr_of(v.addr_a, sport), dst = inet_addr_of(v.addr_b, dport);
  ns_task server(v.ns_b, [&](const std::function<void()>& ready) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) || listen(s, 1)) return 2;
    ready();
    int c = accept(s, nullptr, nullptr);
    std::vector<char> buf(1 << 16);
    size_t got = 0;
    for (ssize_t k; (k = recv(c, buf.data(), buf.size(), 0)) > 0;) got += static_cast<size_t>(k);
    return got == total ? 0 : 3;
  });
  if (!server.wait_ready()) return res;
  ns_task client(v.ns_a, [&](const std::function<void()>&) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(s, reinterpret_cast<const sockaddr*>(&src), sizeof src)) return 2;
    if (connect(s, reinterpret_cast<const sockaddr*>(&dst), sizeof dst)) return 3;
    std::vector<char> buf(total, 't');
    for (size_t off = 0; off < total;) {
      ssize_t k = send(s, buf.data() + off, std::min<size_t>(total - off, 100000), 0);
      if (k <= 0) return 4;
      off += static_cast<size_t>(k);
    }
    close(s);
    return 0;
  });
  res.client_rc = client.join();
  res.server_rc = server.join();
  return res;
}

std::string admin_query(const std::string& sock, const std::string& line) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, sock.c_str(), sizeof sa.sun_path - 1);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    out = std::string("connect: ") + std::strerror(errno);
  } else {
    std::string req = line + "\n";
    (void)!write(fd, req.data(), req.size());
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      out.append(buf, static_cast<size_t>(n));
      if (out.back() == '\n') break;
    }
  }
  close(fd);
  return out;
}

int listen_unix(const std::string& path, int backlog) {
  ::unlink(path.c_str());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  path.copy(sa.sun_path, sizeof sa.sun_path - 1);
  if (fd >= 0 && (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, backlog) != 0)) {
    close(fd);
    fd = -1;
  }
  return fd;
}

}  // namespace magnet::test
