// Loads empty.bpf.c and attaches its empty programs on the hooks magnet's
// network probes use, then waits for SIGINT/SIGTERM.  With
// kernel.bpf_stats_enabled=1 their run_time_ns/run_cnt is the cost of the
// hook alone; overhead.sh --cost runs this next to `magnet record` so both
// see the same packets.
//
//   empty_probes [--cgroup DIR] [--netns PATH]... [--priority N] [--send-only]
//
// tp_btf: sock_send_length, sock_recv_length, net_dev_queue, netif_receive_skb
// cgroup_skb ingress/egress: on DIR (default: the cgroup2 mount, as magnet)
// netfilter LOCAL_OUT / PRE_ROUTING (IPv4): in this netns and each --netns.
// --send-only: the send path's four hooks only (sock_send_length, LOCAL_OUT,
// cgroup egress, net_dev_queue), as `magnet record --probes` stream4 uses.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_empty.skel.h"
#include "magnet/capture/capture.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

std::string cgroup2_mount() {
  std::ifstream m("/proc/mounts");
  std::string line;
  while (std::getline(m, line)) {
    std::istringstream s(line);
    std::string dev, dir, type;
    s >> dev >> dir >> type;
    if (type == "cgroup2") return dir;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::string cg;
  std::vector<std::string> netns;
  int prio = -127;  // magnet uses -128: run right after it
  bool send_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cgroup" && i + 1 < argc) cg = argv[++i];
    else if (a == "--netns" && i + 1 < argc) netns.push_back(argv[++i]);
    else if (a == "--priority" && i + 1 < argc) prio = std::atoi(argv[++i]);
    else if (a == "--send-only") send_only = true;
    else {
      std::fprintf(stderr,
                   "usage: empty_probes [--cgroup DIR] [--netns PATH]... [--priority N] "
                   "[--send-only]\n");
      return 2;
    }
  }
  if (cg.empty()) cg = cgroup2_mount();
  if (cg.empty()) {
    std::fprintf(stderr, "empty_probes: no cgroup2 mount (pass --cgroup)\n");
    return 1;
  }
  // This libbpf may predate SEC("netfilter"): register it, as capture.cc does.
  libbpf_register_prog_handler("netfilter", static_cast<bpf_prog_type>(32 /* NETFILTER */),
                               static_cast<bpf_attach_type>(45 /* BPF_NETFILTER */), nullptr);
  auto* skel = bench_empty_bpf__open_and_load();
  if (!skel) {
    std::fprintf(stderr, "empty_probes: loading: %s\n", std::strerror(errno));
    return 1;
  }
  std::vector<bpf_link*> links;
  std::vector<int> nf_fds;
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "empty_probes: attaching %s: %s\n", what, std::strerror(errno));
    return 1;
  };
  for (auto* p : {skel->progs.empty_sock_send, skel->progs.empty_sock_recv,
                  skel->progs.empty_dev_xmit, skel->progs.empty_dev_recv}) {
    if (send_only && (p == skel->progs.empty_sock_recv || p == skel->progs.empty_dev_recv))
      continue;
    auto* l = bpf_program__attach(p);
    if (!l) return fail(bpf_program__name(p));
    links.push_back(l);
  }
  int cgfd = open(cg.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cgfd < 0) return fail(cg.c_str());
  for (auto* p : {skel->progs.empty_ip_send, skel->progs.empty_l4_recv}) {
    if (send_only && p == skel->progs.empty_l4_recv) continue;
    auto* l = bpf_program__attach_cgroup(p, cgfd);
    if (!l) return fail(bpf_program__name(p));
    links.push_back(l);
  }
  int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  netns.insert(netns.begin(), "");  // "" = our own
  for (const auto& ns : netns) {
    if (!ns.empty()) {
      int fd = open(ns.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return fail(ns.c_str());
      close(fd);
    }
    struct {
      bpf_program* p;
      int hook;
    } nf[] = {{skel->progs.empty_l4_send, 3 /* LOCAL_OUT */},
              {skel->progs.empty_ip_recv, 0 /* PRE_ROUTING */}};
    for (auto& h : nf) {
      if (send_only && h.p == skel->progs.empty_ip_recv) continue;
      int fd = magnet::netfilter_link_create(bpf_program__fd(h.p), 2 /* NFPROTO_IPV4 */, h.hook, prio);
      if (fd < 0) {
        errno = -fd;
        return fail(bpf_program__name(h.p));
      }
      nf_fds.push_back(fd);
    }
    setns(self, CLONE_NEWNET);
  }
  signal(SIGINT, on_stop);
  signal(SIGTERM, on_stop);
  std::fprintf(stderr, "empty_probes: ready (pid %d, %zu links, %zu netfilter links)\n", getpid(),
               links.size(), nf_fds.size());
  while (!g_stop) pause();
  for (int fd : nf_fds) close(fd);
  for (auto* l : links) bpf_link__destroy(l);
  bench_empty_bpf__destroy(skel);
  return 0;
}
