#include "magnet/power/powercap.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

namespace magnet::power {

uint64_t counter_delta_uj(uint64_t before, uint64_t after, uint64_t max_range_uj) {
  if (after >= before) return after - before;
  if (before > max_range_uj) return after;  // not a wrap of this range: count from 0
  return (max_range_uj - before) + after;
}

namespace {

// The file's first line, or an error naming it.
result<std::string> read_line(int fd, const std::string& path) {
  char buf[128];
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n < 0) return error::from_errno(path);
  std::string s(buf, static_cast<size_t>(n));
  s.erase(std::find(s.begin(), s.end(), '\n'), s.end());
  return s;
}

result<uint64_t> parse_uj(const std::string& text, const std::string& path) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
    return error{path + ": '" + text + "' is not a count of microjoules"};
  return v;
}

result<int> open_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error::from_errno(path);
  return fd;
}

// One file read whole through a temporary descriptor.
result<std::string> read_file_line(const std::string& path) {
  auto fd = open_file(path);
  if (!fd) return fd.err();
  auto s = read_line(*fd, path);
  ::close(*fd);
  return s;
}

// "intel-rapl:N" with N digits: a package-level zone (not intel-rapl:N:M).
bool top_level_zone(const std::string& d) {
  const std::string prefix = "intel-rapl:";
  if (d.rfind(prefix, 0) != 0 || d.size() == prefix.size()) return false;
  return std::all_of(d.begin() + static_cast<long>(prefix.size()), d.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

result<powercap_reader> powercap_reader::open(const std::string& root) {
  powercap_reader r;
  DIR* d = ::opendir(root.c_str());
  if (!d) {
    if (errno == ENOENT) return r;
    return error::from_errno(root);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (top_level_zone(e->d_name)) names.emplace_back(e->d_name);
  ::closedir(d);
  // intel-rapl:2 before intel-rapl:10.
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  for (const auto& n : names) {
    rapl_zone z{root + "/" + n, {}, 0};
    auto name = read_file_line(z.dir + "/name");
    if (!name) return name.err();
    if (name->rfind("package", 0) != 0) continue;
    z.name = *name;
    auto max_text = read_file_line(z.dir + "/max_energy_range_uj");
    if (!max_text) return max_text.err();
    auto max = parse_uj(*max_text, z.dir + "/max_energy_range_uj");
    if (!max) return max.err();
    if (*max == 0) return error{z.dir + "/max_energy_range_uj: 0 is not a counter's range"};
    z.max_range_uj = *max;
    // Readable now, or the daemon would only find out at its first tick.
    auto first = read_file_line(z.dir + "/energy_uj");
    if (!first) return first.err();
    if (auto v = parse_uj(*first, z.dir + "/energy_uj"); !v) return v.err();
    r.zones_.push_back(std::move(z));
  }
  return r;
}

result<std::vector<uint64_t>> powercap_reader::read() const {
  std::vector<uint64_t> out;
  out.reserve(zones_.size());
  for (size_t i = 0; i < zones_.size(); ++i) {
    const std::string path = zones_[i].dir + "/energy_uj";
    auto s = read_file_line(path);
    if (!s) return s.err();
    auto v = parse_uj(*s, path);
    if (!v) return v.err();
    out.push_back(*v);
  }
  return out;
}

double powercap_reader::joules_between(const std::vector<uint64_t>& before,
                                       const std::vector<uint64_t>& after) const {
  uint64_t uj = 0;
  for (size_t i = 0; i < zones_.size() && i < before.size() && i < after.size(); ++i)
    uj += counter_delta_uj(before[i], after[i], zones_[i].max_range_uj);
  return static_cast<double>(uj) / 1e6;
}

std::string describe(const powercap_reader& r, const std::string& root) {
  std::string s;
  for (const auto& z : r.zones()) {
    if (!s.empty()) s += ", ";
    s += z.name + " (" + z.dir.substr(z.dir.rfind('/') + 1) + ")";
  }
  return s + " under " + root;
}

}  // namespace magnet::power
