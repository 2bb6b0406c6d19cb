// Test support: run programs, run code inside a network namespace, and
// build two namespaces joined by a veth pair.  Everything started here is
// ended by PID; everything created is removed in destructors.
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace magnet::test {

struct run_result {
  int status = -1;  // exit code, or 128+signal
  std::string out, err;
};

// Runs argv to completion (bounded by timeout_s), capturing its output.
run_result run(const std::vector<std::string>& argv, int timeout_s = 60);
// Shell convenience for setup commands; throws on failure.
void sh(const std::string& cmd);

// One request line to the daemon's admin socket @sock, one reply line
// back ("connect: <why>" when it cannot connect).
std::string admin_query(const std::string& sock, const std::string& line);

// A listening unix stream socket at @path (an old file there removed
// first), for a test's fake daemon; -1 when it cannot bind or listen.
int listen_unix(const std::string& path, int backlog = 8);

// A background process with stderr to a file.
class child {
 public:
  child(const std::vector<std::string>& argv);
  ~child();
  child(const child&) = delete;
  pid_t pid() const { return pid_; }
  // Waits until stderr contains @text (bounded); false on timeout or exit.
  bool wait_for_stderr(const std::string& text, int timeout_s = 20);
  int stop(int sig, int timeout_s = 30);  // signal, then wait; returns exit code
  std::string stderr_text() const;

 private:
  pid_t pid_ = -1;
  std::string err_path_;
};

// fork(); the child enters /run/netns/@ns (@ns empty: stays in the caller's
// namespace) and runs @fn; its return value is the exit code.  @ready
// (optional) lets the child tell the parent it is set up (call it once).
class ns_task {
 public:
  ns_task(const std::string& ns, std::function<int(const std::function<void()>& ready)> fn);
  ~ns_task();
  pid_t pid() const { return pid_; }
  bool wait_ready(int timeout_s = 10);
  int join(int timeout_s = 60);

 private:
  pid_t pid_ = -1;
  int ready_fd_ = -1;
};

// How many netfilter BPF links process @pid holds (its fdinfo): the daemon
// keeps two (IPv4, IPv6) per network namespace.
int netfilter_links(pid_t pid);

// The inode of /run/netns/@ns (what the kernel calls net->ns.inum), 0 if
// there is no such namespace.
uint32_t netns_ino(const std::string& ns);

class veth_pair {
 public:
  // Namespaces magnet-t{a,b}-PID, 10.199.0.1/24 <-> 10.199.0.2/24, IPv6
  // off (no neighbour discovery traffic), and interface indexes derived
  // from the PID, so no device of another namespace shares them.
  veth_pair();
  ~veth_pair();
  std::string ns_a, ns_b;
  std::string addr_a = "10.199.0.1", addr_b = "10.199.0.2";
  int ifindex_a = 0, ifindex_b = 0;
  uint32_t netns_ino_a = 0, netns_ino_b = 0;  // of ns_a, ns_b
};

// @n UDP datagrams of @size bytes from ns_a:@sport to ns_b:@dport, both
// sockets connected (as iperf3's are: the receiving socket then knows its
// peer); @pace sleeps 1 ms every 50 datagrams to stay below the receiver's
// buffer.  The exit codes are 0 when the sender sent and the receiver got
// every datagram.  @before_send (optional) is called with the sender's pid
// once the sender is set up and before it sends anything.
struct udp_exchange_result {
  pid_t tx = -1, rx = -1;
  int tx_rc = -1, rx_rc = -1;
};
udp_exchange_result udp_exchange(const veth_pair& v, int n, int size, uint16_t sport,
                                 uint16_t dport, bool pace,
                                 const std::function<void(pid_t)>& before_send = {});
// The same between any two namespaces (empty: the caller's) and addresses.
udp_exchange_result udp_flow(const std::string& ns_tx, const std::string& addr_tx,
                             const std::string& ns_rx, const std::string& addr_rx, int n,
                             int size, uint16_t sport, uint16_t dport, bool pace,
                             const std::function<void(pid_t)>& before_send = {});

// One TCP connection ns_a:@sport -> ns_b:@dport carrying @total bytes, then
// closed.  The exit codes are 0 when the server received every byte.
struct tcp_transfer_result {
  int client_rc = -1, server_rc = -1;
};
tcp_transfer_result tcp_transfer(const veth_pair& v, size_t total, uint16_t sport,
                                 uint16_t dport);

}  // namespace magnet::test
