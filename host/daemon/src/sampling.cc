// `magnet host --sample`: parsed apart from the daemon, and checked against
// its probes and what its consumers need (sampling.h).
#include "magnet/daemon/sampling.h"

#include <charconv>
#include <set>
#include <string_view>

#include "magnet/cli.h"
#include "magnet/events.h"
#include "magnet/text.h"

namespace magnet::host {
namespace {

// One "PROBE=N" (@part, already trimmed).
result<sample_spec> parse_one(std::string_view part) {
  const std::string q = "'" + std::string(part) + "'";
  const size_t eq = part.find('=');
  if (eq == std::string_view::npos)
    return error{q + " is not PROBE=N (keep 1 in N of the probe's records; e.g. vmnet.queue=16)"};
  const std::string probe(trim(part.substr(0, eq)));
  const std::string_view n = trim(part.substr(eq + 1));
  if (probe.empty()) return error{q + ": no probe before '='"};
  if (auto t = select_events(probe); !t) return error{q + ": " + t.err().message};
  uint64_t every = 0;
  auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), every);
  if (ec == std::errc() && end == n.data() + n.size()) {
    if (every < 1) return error{q + ": N must be at least 1 (1 keeps every record)"};
    if (every > UINT32_MAX) return error{q + ": N is above 4294967295"};
    return sample_spec{probe, static_cast<uint32_t>(every)};
  }
  if (ec == std::errc::result_out_of_range) return error{q + ": N is above 4294967295"};
  if (cli::parse_duration_ns(n, cli::bare_number::refused))
    return error{q + ": the daemon samples by count only (1 in N): a record kept once per " +
                 std::string(n) +
                 " stands for an unknown number of events, so the counts and rates built from "
                 "them (the views', drops, link use, block latency) could not be scaled back; "
                 "give a count (magnet record has --sample-time)"};
  return error{q + ": '" + std::string(n) + "' is not a whole number N (1 in N)"};
}

}  // namespace

result<std::vector<sample_spec>> parse_sample_list(const std::string& text) {
  std::vector<sample_spec> out;
  if (trim(text).empty()) return error{"empty (PROBE=N[,PROBE=N...], e.g. vmnet.queue=16)"};
  std::map<uint16_t, std::string> owner;  // event type -> the part that samples it
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view part = trim(rest.substr(0, comma));
    if (part.empty()) return error{"empty part in '" + text + "' (PROBE=N[,PROBE=N...])"};
    auto s = parse_one(part);
    if (!s) return s.err();
    auto types = select_events(s->probe);
    if (!types) return types.err();
    for (uint16_t t : *types) {
      auto [it, fresh] = owner.emplace(t, std::string(part));
      if (!fresh)
        return error{"'" + std::string(part) + "': " + event_name(t) + " is sampled already by '" +
                     it->second + "'"};
    }
    out.push_back(std::move(*s));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

bool streamed_by_daemon(uint16_t type) { return event_name(type).rfind("kvm.", 0) != 0; }

result<std::map<uint16_t, uint32_t>> sampled_types(const std::vector<sample_spec>& samples,
                                                   const std::string& probes) {
  auto running = select_events(probes);
  if (!running) return running.err();
  std::map<uint16_t, uint32_t> out;
  for (const auto& s : samples) {
    const std::string what = "'" + s.probe + "=" + std::to_string(s.every) + "'";
    auto types = select_events(s.probe);
    if (!types) return error{what + ": " + types.err().message};
    std::set<uint16_t> here;
    for (uint16_t t : *types)
      if (running->count(t)) here.insert(t);
    if (here.empty())
      return error{what + ": " + s.probe + " is not among the daemon's probes (" + probes + ")"};
    if (s.every <= 1) continue;  // 1 in 1: every record, as without it
    for (uint16_t t : here) {
      const std::string name = event_name(t);
      if (name.rfind("sched.", 0) == 0)
        return error{what + ": " + name +
                     " cannot be sampled: the vCPU run, wait and halt times follow every "
                     "sched.switch and sched.wakeup of the vCPU threads, and would be wrong, "
                     "not coarser; to save its cost, leave sched out with --probes (and "
                     "those figures with it)"};
      if (!streamed_by_daemon(t))
        return error{what + ": " + name +
                     " is not streamed by the daemon (its figures are counted in the kernel): "
                     "there is nothing to sample"};
      out[t] = s.every;
    }
  }
  return out;
}

std::string sample_list_text(const std::vector<sample_spec>& samples) {
  std::string s;
  for (const auto& p : samples) s += (s.empty() ? "" : ",") + p.probe + "=" + std::to_string(p.every);
  return s;
}

}  // namespace magnet::host
