#include "magnet/metrics/tc.h"

#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

namespace magnet::host {
namespace {

// Calls @each for every attribute in [@p, @p + @len).
void for_attrs(const uint8_t* p, size_t len, const std::function<void(const rtattr*)>& each) {
  while (len >= sizeof(rtattr)) {
    auto* a = reinterpret_cast<const rtattr*>(p);
    if (a->rta_len < sizeof(rtattr) || a->rta_len > len) return;
    each(a);
    size_t step = RTA_ALIGN(a->rta_len);
    if (step >= len) return;
    p += step;
    len -= step;
  }
}

const uint8_t* payload(const rtattr* a) { return reinterpret_cast<const uint8_t*>(RTA_DATA(a)); }
size_t payload_len(const rtattr* a) { return RTA_PAYLOAD(a); }

struct tc_object {
  uint32_t handle = 0, parent = 0;
  std::string kind;
  std::vector<uint8_t> options;  // TCA_OPTIONS, nested attributes
};

// One RTM_GET{QDISC,TCLASS} dump, keeping @ifindex's objects.
result<std::vector<tc_object>> dump(int type, int ifindex) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return error::from_errno("rtnetlink socket");
  struct {
    nlmsghdr nh;
    tcmsg tc;
  } req{};
  req.nh.nlmsg_len = sizeof req;
  req.nh.nlmsg_type = static_cast<uint16_t>(type);
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.nh.nlmsg_seq = 1;
  req.tc.tcm_family = AF_UNSPEC;
  req.tc.tcm_ifindex = ifindex;
  if (send(fd, &req, sizeof req, 0) != static_cast<ssize_t>(sizeof req)) {
    auto e = error::from_errno("rtnetlink request");
    close(fd);
    return e;
  }
  std::vector<tc_object> out;
  std::vector<uint8_t> buf(64 << 10);
  for (;;) {
    ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      auto e = error::from_errno("rtnetlink reply");
      close(fd);
      return e;
    }
    size_t left = static_cast<size_t>(n);
    for (auto* nh = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(nh, left);
         nh = NLMSG_NEXT(nh, left)) {
      if (nh->nlmsg_type == NLMSG_DONE) {
        close(fd);
        return out;
      }
      if (nh->nlmsg_type == NLMSG_ERROR) {
        auto* e = reinterpret_cast<nlmsgerr*>(NLMSG_DATA(nh));
        close(fd);
        return error::from_errno("rtnetlink dump", -e->error);
      }
      if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(tcmsg))) continue;
      auto* t = reinterpret_cast<tcmsg*>(NLMSG_DATA(nh));
      if (t->tcm_ifindex != ifindex) continue;
      tc_object o{t->tcm_handle, t->tcm_parent, {}, {}};
      auto* attrs = reinterpret_cast<const uint8_t*>(t) + NLMSG_ALIGN(sizeof(tcmsg));
      for_attrs(attrs, nh->nlmsg_len - NLMSG_LENGTH(sizeof(tcmsg)), [&](const rtattr* a) {
        if (a->rta_type == TCA_KIND)
          o.kind.assign(reinterpret_cast<const char*>(payload(a)),
                        strnlen(reinterpret_cast<const char*>(payload(a)), payload_len(a)));
        else if (a->rta_type == TCA_OPTIONS)
          o.options.assign(payload(a), payload(a) + payload_len(a));
      });
      out.push_back(std::move(o));
    }
  }
}

// A fixed-size struct attribute, or a 64-bit override of one of its rates.
template <class T>
bool read_attr(const rtattr* a, T& v) {
  if (payload_len(a) < sizeof v) return false;
  std::memcpy(&v, payload(a), sizeof v);
  return true;
}

}  // namespace

result<tc_shaping> read_tc_shaping(int ifindex) {
  const std::string dev = "device " + std::to_string(ifindex);
  auto qdiscs = dump(RTM_GETQDISC, ifindex);
  if (!qdiscs) return error{dev + ": " + qdiscs.err().message, qdiscs.err().code};
  auto root = std::find_if(qdiscs->begin(), qdiscs->end(),
                           [](const tc_object& o) { return o.parent == TC_H_ROOT; });
  if (root == qdiscs->end()) return error{dev + ": not shaped by tbf or htb (no root qdisc)"};
  tc_shaping s;
  s.kind = root->kind;
  if (root->kind == "tbf") {
    tc_tbf_qopt q{};
    uint64_t rate64 = 0;
    bool have = false;
    for_attrs(root->options.data(), root->options.size(), [&](const rtattr* a) {
      if (a->rta_type == TCA_TBF_PARMS) have = read_attr(a, q);
      if (a->rta_type == TCA_TBF_RATE64) read_attr(a, rate64);
    });
    if (!have) return error{dev + ": tbf without parameters"};
    double bytes_per_s = rate64 ? static_cast<double>(rate64) : q.rate.rate;
    s.rate_bps = bytes_per_s * 8;
    if (bytes_per_s > 0) s.queue_limit_s = q.limit / bytes_per_s;
  } else if (root->kind == "htb") {
    auto classes = dump(RTM_GETTCLASS, ifindex);
    if (!classes) return error{dev + ": " + classes.err().message, classes.err().code};
    double best = 0;
    for (const auto& c : *classes) {
      // htb reports a top-level class with parent TC_H_ROOT.
      if (c.kind != "htb" || c.parent != TC_H_ROOT) continue;
      tc_htb_opt o{};
      uint64_t ceil64 = 0;
      bool have = false;
      for_attrs(c.options.data(), c.options.size(), [&](const rtattr* a) {
        if (a->rta_type == TCA_HTB_PARMS) have = read_attr(a, o);
        if (a->rta_type == TCA_HTB_CEIL64) read_attr(a, ceil64);
      });
      if (have) best = std::max(best, 8.0 * (ceil64 ? static_cast<double>(ceil64) : o.ceil.rate));
    }
    if (best <= 0) return error{dev + ": htb without classes"};
    s.rate_bps = best;
  } else {
    return error{dev + ": not shaped by tbf or htb (root qdisc " + root->kind + ")"};
  }
  if (s.rate_bps <= 0) return error{dev + ": " + s.kind + " with a zero rate"};
  return s;
}

}  // namespace magnet::host
