// Command-line plumbing shared by the subcommands: option extraction with
// clear errors, and value parsers (sizes, durations, counts).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/result.h"

namespace magnet::cli {

// A usage problem: main prints it with a hint and exits 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class args {
 public:
  args(std::string cmd, std::vector<std::string> v) : cmd_(std::move(cmd)), v_(std::move(v)) {}
  const std::string& cmd() const { return cmd_; }
  bool flag(std::string_view long_name, std::string_view short_name = {});
  std::optional<std::string> value(std::string_view long_name, std::string_view short_name = {});
  // An option whose value may be left out: absent, "" when given alone (last,
  // or followed by another option), else its value ("--x V" or "--x=V").
  std::optional<std::string> optional_value(std::string_view long_name);
  // Every occurrence of a repeatable option, in order.
  std::vector<std::string> values(std::string_view long_name);
  // Remaining positionals; any unconsumed option is an error.
  std::vector<std::string> finish(size_t min_pos, size_t max_pos, std::string_view what = {});

 private:
  std::string cmd_;
  std::vector<std::string> v_;
};

// The log verbosity the command line asks for (magnet/log.h): 1 (errors,
// warnings and notices), plus one level
// per "v" of every -v, -vv, -vvv... and --verbose wherever it stands (before
// or after the command name; not after "--"), at most 4 (libbpf's debug
// output).  Takes those options out of @v.  An option's value that is
// itself "-v" is written --opt=-v.
int take_verbosity(std::vector<std::string>& v);

result<uint64_t> parse_size(std::string_view s);     // 4096, 64K, 16M, 1G (powers of 1024)
// Durations, in every program (magnet, the agent, the guest tools): a
// number and a unit, ns, us, ms, s, min (or m): 500ms, 2.5s, 1min.  A bare
// number is seconds (--duration 10), except for the options that took
// milliseconds before (the agent's and magnet-watch's --period,
// magnet-adapt's --interval, magnet-adversary's MS and PERIOD): these refuse
// it, so an old "--period 100" is never read as 100 s.
enum class bare_number { seconds, refused };
// The help texts' line on that syntax (a literal: each help stays one).
#define MAGNET_HELP_DURATIONS                                                    \
  "T: a duration, a number and a unit (ns, us, ms, s, min): 500ms, 2.5s, 1min;\n" \
  "a bare number is seconds.\n"
result<uint64_t> parse_duration_ns(std::string_view s, bare_number bare = bare_number::seconds);
result<uint64_t> parse_count(std::string_view s);    // positive integer
result<double> parse_rate_bps(std::string_view s);   // 20mbit, 1.5gbit, 800kbit, 1000000 (bit/s)

// Unwraps a parse result or raises a usage error naming the option.
template <class T>
T need(result<T> r, std::string_view option) {
  if (!r) throw usage_error(std::string(option) + ": " + r.err().message);
  return std::move(r).value();
}

}  // namespace magnet::cli
