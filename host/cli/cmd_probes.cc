#include <cstdio>

#include "magnet/capture/capture.h"
#include "commands.h"
#include "magnet/events.h"

namespace magnet::host {

static const char* kProbesHelp =
    "Usage: magnet probes [--json]\n"
    "\n"
    "Lists every probe, the layer it observes, whether it can attach on this\n"
    "kernel and by which method, and why each other method cannot.\n"
    "Methods are tried in order of preference: tp_btf, raw_tp, tracepoint,\n"
    "netfilter/cgroup_skb (the stable hooks of some layers), fentry, kprobe.\n"
    "MAGNET_DENY_METHODS=m1,m2 removes methods (to test fallbacks).\n";

static std::string json_str(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

int cmd_probes(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kProbesHelp, stdout);
    return 0;
  }
  bool json = a.flag("--json");
  a.finish(0, 0);
  auto kf = kernel_features::probe();
  auto plans = plan_probes(kf);
  if (json) {
    std::printf("[");
    bool first = true;
    for (const auto& p : plans) {
      std::printf("%s{\"probe\":%s,\"id\":%u,\"layer\":%s,\"description\":%s,\"attach\":%s,"
                  "\"methods\":[",
                  first ? "" : ",", json_str(event_name(p.spec->type)).c_str(), p.spec->type,
                  json_str(p.spec->layer).c_str(), json_str(p.spec->description).c_str(),
                  p.chosen < 0
                      ? "null"
                      : json_str(method_name(p.spec->methods[p.chosen].kind)).c_str());
      for (size_t i = 0; i < p.checks.size(); ++i)
        std::printf("%s{\"method\":%s,\"target\":%s,\"ok\":%s,\"why\":%s}", i ? "," : "",
                    json_str(method_name(p.checks[i].kind)).c_str(),
                    json_str(p.spec->methods[i].target).c_str(),
                    p.checks[i].ok ? "true" : "false", json_str(p.checks[i].why).c_str());
      std::printf("]}");
      first = false;
    }
    std::printf("]\n");
    return 0;
  }
  std::printf("%-18s %-10s %-11s %s\n", "PROBE", "LAYER", "ATTACH", "OTHER METHODS");
  for (const auto& p : plans) {
    std::string chosen =
        p.chosen < 0 ? "unavailable" : std::string(method_name(p.spec->methods[p.chosen].kind));
    std::string others;
    for (size_t i = 0; i < p.checks.size(); ++i) {
      if (static_cast<int>(i) == p.chosen) continue;
      others += (others.empty() ? "" : "; ") + std::string(method_name(p.checks[i].kind)) + " " +
                p.spec->methods[i].target + ": " +
                (p.checks[i].ok ? std::string("available") : p.checks[i].why);
    }
    std::printf("%-18s %-10s %-11s %s\n", event_name(p.spec->type).c_str(), p.spec->layer,
                chosen.c_str(), others.c_str());
  }
  return 0;
}

}  // namespace magnet::host
