#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "magnet/capture/capture.h"
#include "magnet/capture/usdt.h"
#include "magnet/events.h"

namespace magnet::host {

static const char* kProbesHelp =
    "Usage: magnet probes [--json]\n"
    "\n"
    "Lists every probe, the layer it observes, whether it can attach on this\n"
    "kernel and by which method, and why each other method cannot.\n"
    "Methods are tried in order of preference: tp_btf, raw_tp, tracepoint,\n"
    "netfilter/cgroup_skb (the stable hooks of some layers), fentry, kprobe.\n"
    "MAGNET_DENY_METHODS=m1,m2 removes methods (to test fallbacks).\n"
    "\n"
    "app.add (application marks, magnet record --usdt) attaches by uprobe, from\n"
    "its own BPF object.\n"
    "\n"
    "      --json   one JSON array: per probe its name, id, layer, description, the\n"
    "               method it attaches with (null: none) and every method's\n"
    "               target, whether it can and why not\n";

namespace {

nlohmann::ordered_json plans_json(const std::vector<probe_plan>& plans) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const auto& p : plans) {
    nlohmann::ordered_json methods = nlohmann::ordered_json::array();
    for (size_t i = 0; i < p.checks.size(); ++i)
      methods.push_back({{"method", std::string(method_name(p.checks[i].kind))},
                         {"target", p.spec->methods[i].target},
                         {"ok", p.checks[i].ok},
                         {"why", p.checks[i].why}});
    a.push_back({{"probe", event_name(p.spec->type)},
                 {"id", p.spec->type},
                 {"layer", p.spec->layer},
                 {"description", p.spec->description},
                 {"attach", p.chosen < 0 ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(std::string(method_name(p.spec->methods[p.chosen].kind)))},
                 {"methods", std::move(methods)}});
  }
  // app.add: not in the probe table (its own object, one method).
  std::string why = usdt_unavailable();
  a.push_back({{"probe", "app.add"},
               {"id", MAGNET_EV_APP_ADD},
               {"layer", "app"},
               {"description", "an application's MAGNET_ADD mark (magnet record --usdt)"},
               {"attach", why.empty() ? nlohmann::ordered_json("uprobe") : nlohmann::ordered_json(nullptr)},
               {"methods", {{{"method", "uprobe"}, {"target", "magnet:add USDT"},
                             {"ok", why.empty()}, {"why", why}}}}});
  return a;
}

}  // namespace

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
    std::printf("%s\n", plans_json(plans).dump(-1, ' ', false,
                                               nlohmann::ordered_json::error_handler_t::replace).c_str());
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
  std::string why = usdt_unavailable();
  std::printf("%-18s %-10s %-11s %s\n", "app.add", "app", why.empty() ? "uprobe" : "unavailable",
              why.empty() ? "" : ("uprobe magnet:add USDT: " + why).c_str());
  return 0;
}

}  // namespace magnet::host
