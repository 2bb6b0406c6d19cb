// magnet-poll: reads the newest value of a few stats once a second
// (polling style, C++): the shape of an application that looks its view up
// when it decides something, instead of reacting to every update.
//
//   magnet-poll [--socket PATH] [--count N] [--json]
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/client.hpp"

static const char* kUsage =
    "usage: magnet-poll [--socket PATH] [--count N] [--json]\n"
    "\n"
    "Once a second, prints the newest tap.tx_bps, vcpu.wait_sum and\n"
    "link.available_bps of this VM's view, each with its age.\n"
    "  --socket PATH  the agent's socket (default /run/magnet/agent.sock)\n"
    "  --count N      stop after N lines (default: never)\n"
    "  --json         one JSON object a line: connected, and per stat its value\n"
    "                 (null while not valid) and age_s\n"
    "  -h, --help     this text\n";

using stat_value = std::optional<magnet::client::value>;

static void print_json(bool connected,
                       const std::vector<std::pair<const char*, stat_value>>& stats) {
  nlohmann::ordered_json j = {{"connected", connected}};
  for (const auto& [name, v] : stats) {
    nlohmann::ordered_json s = {{"value", nullptr}, {"age_s", nullptr}};
    if (v && v->valid) s = {{"value", v->value}, {"age_s", static_cast<double>(v->age_ns) / 1e9}};
    j[name] = s;
  }
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  std::string sock;
  long count = 0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!std::strcmp(argv[i], "--socket") && i + 1 < argc) {
      sock = argv[++i];
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else if (!std::strcmp(argv[i], "--count") && i + 1 < argc) {
      count = std::atol(argv[++i]);
    } else {
      std::fprintf(stderr, "magnet-poll: unknown option or missing value: %s\n%s", argv[i], kUsage);
      return 2;
    }
  }
  magnet::client c(sock);
  // On change: nothing travels while nothing changes.
  if (!c.subscribe({"tap.tx_bps", "tap.rx_bps", "vcpu.wait_sum", "link.available_bps"}, 200,
                   magnet::client::mode::on_change)) {
    std::fprintf(stderr, "magnet-poll: %s\n", c.error().c_str());
    return 2;
  }
  for (long n = 0; !count || n < count; ++n) {
    // Keep the connection served for a second, then look the values up.
    for (int i = 0; i < 5; ++i) c.poll(200);
    auto tx = c.get("tap.tx_bps"), wait = c.get("vcpu.wait_sum"), avail = c.get("link.available_bps");
    if (json) {
      print_json(c.connected(), {{"tap.tx_bps", tx}, {"vcpu.wait_sum", wait}, {"link.available_bps", avail}});
      continue;
    }
    auto show = [](const char* what, const std::optional<magnet::client::value>& v, double scale,
                   const char* unit) {
      if (v && v->valid)
        std::printf("%s %.3f %s (age %.0f ms)  ", what, v->value / scale, unit, v->age_ns / 1e6);
      else
        std::printf("%s -  ", what);
    };
    std::printf("%s ", c.connected() ? "connected" : "disconnected");
    show("tx", tx, 1e6, "Mbit/s");
    show("vcpu wait", wait, 0.01, "%");
    show("available", avail, 1e6, "Mbit/s");
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
