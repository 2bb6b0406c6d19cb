// The host's energy from RAPL through the kernel's powercap interface
// (Documentation/power/powercap/powercap.rst): each package zone
// ROOT/intel-rapl:N (N a number; ROOT is /sys/class/powercap, or a tree a
// test writes) counts the package's energy in energy_uj, a counter that
// wraps to 0 after max_energy_range_uj.  The host's energy is the sum of
// its packages'.  Zones whose name is not package-* (psys, a top-level
// dram) are left out: psys already holds the packages, dram is not CPU
// power.  Subzones (intel-rapl:N:M: core, uncore, dram) are parts of their
// package and are not added again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "magnet/result.h"

namespace magnet::power {

struct rapl_zone {
  std::string dir;   // ROOT/intel-rapl:N
  std::string name;  // its name file: package-0, ...
  uint64_t max_range_uj = 0;
};

// The energy between two readings of one zone's counter, microjoules: a
// reading below the one before is a wrap (one at most: the daemon reads far
// more often than any package wraps, every few minutes to hours).  The
// counter runs 0..@max_range_uj, so a wrap adds max_range - before + after,
// as Kepler and Scaphandre count it (the kernel's counter stops one unit,
// ~61 uJ, short of max_range: an error of that much per wrap).
uint64_t counter_delta_uj(uint64_t before, uint64_t after, uint64_t max_range_uj);

class powercap_reader {
 public:
  // The package zones under @root, each one's files opened: none when @root
  // does not exist or holds no package zone (no RAPL: not an error).  A
  // zone whose energy_uj, max_energy_range_uj or name cannot be read or
  // parsed is an error naming the file.
  static result<powercap_reader> open(const std::string& root);

  const std::vector<rapl_zone>& zones() const { return zones_; }
  // Each zone's energy_uj now, in zones() order; an error names the file.
  // Each file is opened again at each reading: a test's tree may replace
  // it (rename) rather than write it in place, and a reader then never
  // sees it half written.
  result<std::vector<uint64_t>> read() const;
  // The energy between two read()s, joules, every zone's wrap handled.
  double joules_between(const std::vector<uint64_t>& before, const std::vector<uint64_t>& after) const;

 private:
  powercap_reader() = default;
  std::vector<rapl_zone> zones_;
};

// "package-0 (intel-rapl:0), package-1 (intel-rapl:1) under ROOT".
std::string describe(const powercap_reader& r, const std::string& root);

}  // namespace magnet::power
