// --link: a shared host link whose capacity the available-bandwidth model
// uses, named on the command line and looked up in its namespace.
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "host_daemon.h"
#include "magnet/cli.h"
#include "magnet/metrics/tc.h"

namespace magnet::host {

result<link_spec> parse_link_spec(const std::string& s) {
  link_spec l;
  std::string rest = s;
  if (auto eq = rest.find('='); eq != std::string::npos) {
    std::string r = rest.substr(eq + 1);
    rest = rest.substr(0, eq);
    auto v = cli::parse_rate_bps(r);
    if (!v) return error{v.err().message};
    l.rate_bps = *v;
  }
  if (auto at = rest.find('@'); at != std::string::npos) {
    l.netns = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (l.netns.empty() || l.netns.find('/') != std::string::npos)
      return error{"'" + s + "': a network namespace name (as in ip netns) after '@'"};
  }
  if (rest.empty() || rest.size() >= IFNAMSIZ || rest.find('/') != std::string::npos)
    return error{"'" + s + "': expected DEV[@NETNS][=RATE]"};
  l.dev = rest;
  return l;
}

link_info resolve_link(const link_spec& s, std::string& note) {
  link_info l;
  l.name = s.dev + (s.netns.empty() ? "" : "@" + s.netns);
  l.capacity_bps = s.rate_bps;
  const std::string path = s.netns.empty() ? "/proc/self/ns/net" : "/run/netns/" + s.netns;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    note = "no network namespace " + s.netns;
    return l;
  }
  l.netns_ino = static_cast<uint32_t>(st.st_ino);
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  int target = s.netns.empty() ? -1 : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool switched = target >= 0 && self >= 0 && setns(target, CLONE_NEWNET) == 0;
  result<tc_shaping> shaping = error{"not looked up"};
  if (s.netns.empty() || switched) {
    l.ifindex = if_nametoindex(s.dev.c_str());
    if (l.ifindex) shaping = read_tc_shaping(static_cast<int>(l.ifindex));
  }
  if (switched) setns(self, CLONE_NEWNET);
  if (self >= 0) close(self);
  if (target >= 0) close(target);
  char rate[64];
  if (!l.ifindex) {
    note = "no device " + s.dev + (s.netns.empty() ? "" : " in " + s.netns);
  } else if (shaping) {
    l.queue_limit_s = shaping->queue_limit_s;
    if (l.capacity_bps <= 0) l.capacity_bps = shaping->rate_bps;
    std::snprintf(rate, sizeof rate, "%.6g bit/s", l.capacity_bps);
    note = std::string("capacity ") + rate + (s.rate_bps > 0 ? " (given)" : " (" + shaping->kind + ")");
  } else if (l.capacity_bps > 0) {
    std::snprintf(rate, sizeof rate, "%.6g bit/s", l.capacity_bps);
    note = std::string("capacity ") + rate + " (given; tc: " + shaping.err().message + ")";
  } else {
    note = "capacity unknown (tc: " + shaping.err().message + "); give it as DEV=RATE";
  }
  return l;
}

}  // namespace magnet::host
