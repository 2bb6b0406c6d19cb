#include "magnet/power/attribution.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace magnet::power {

result<cpu_times> parse_proc_stat(std::string_view text, long hz) {
  const std::string_view line = text.substr(0, text.find('\n'));
  if (line.rfind("cpu ", 0) != 0) return error{"its first line is not the 'cpu' total"};
  uint64_t f[8] = {};  // user nice system idle iowait irq softirq steal
  std::string_view rest = line.substr(4);
  size_t n = 0;
  for (; n < 8; ++n) {
    const size_t b = rest.find_first_not_of(' ');
    if (b == std::string_view::npos) break;
    rest.remove_prefix(b);
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), f[n]);
    if (ec != std::errc{}) return error{"'cpu' field " + std::to_string(n + 1) + " is not a number"};
    rest.remove_prefix(static_cast<size_t>(end - rest.data()));
  }
  if (n < 7) return error{"the 'cpu' line has " + std::to_string(n) + " fields, not at least 7"};
  if (hz <= 0) return error{"no clock tick rate"};
  const uint64_t tick_ns = 1'000'000'000ull / static_cast<uint64_t>(hz);
  return cpu_times{(f[0] + f[1] + f[2] + f[5] + f[6]) * tick_ns, (f[3] + f[4]) * tick_ns};
}

result<cpu_times> read_proc_stat(const std::string& path) {
  std::ifstream f(path);
  if (!f) return error::from_errno(path);
  std::string first;
  std::getline(f, first);
  auto t = parse_proc_stat(first, ::sysconf(_SC_CLK_TCK));
  if (!t) return error{path + ": " + t.err().message};
  return t;
}

double utilisation(const cpu_times& d) {
  const double all = static_cast<double>(d.busy_ns) + static_cast<double>(d.idle_ns);
  return all > 0 ? static_cast<double>(d.busy_ns) / all : 0;
}

energy_split attribute(double host_j, double idle_j, uint64_t host_busy_ns,
                       const std::map<uint32_t, vm_work>& vms) {
  energy_split s;
  s.idle_j = std::clamp(idle_j, 0.0, std::max(host_j, 0.0));
  const double active = host_j - s.idle_j;
  uint64_t work = 0;
  for (const auto& [id, w] : vms) work += w.total();
  const double whole = static_cast<double>(std::max(work, host_busy_ns));
  if (whole <= 0) {
    s.own_j = active;
    for (const auto& [id, w] : vms) s.vms[id] = 0;
    return s;
  }
  double given = 0;
  for (const auto& [id, w] : vms) {
    const double j = active * (static_cast<double>(w.total()) / whole);
    s.vms[id] = j;
    given += j;
  }
  // The rest, rather than active * (busy - work) / whole: the sum is then
  // the host's energy to the last bit the subtraction allows.
  s.own_j = std::max(0.0, active - given);
  return s;
}

double rapl_idle_joules(double host_j, const cpu_times& d) {
  if (d.busy_ns == 0 && d.idle_ns == 0) return host_j;
  return host_j * (1 - utilisation(d));
}

model_energy model_interval(const power_model& m, const cpu_times& d, double seconds) {
  return {model_watts(m, utilisation(d)) * seconds, m.idle_watts() * seconds};
}

}  // namespace magnet::power
