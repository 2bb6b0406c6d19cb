#include "magnet/cli.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "magnet/cli_c.h"

namespace magnet::cli {

bool args::flag(std::string_view long_name, std::string_view short_name) {
  bool found = false;
  for (auto it = v_.begin(); it != v_.end();) {
    if (*it == "--") break;
    if (*it == long_name || (!short_name.empty() && *it == short_name)) {
      it = v_.erase(it);
      found = true;
    } else {
      ++it;
    }
  }
  return found;
}

std::optional<std::string> args::value(std::string_view long_name, std::string_view short_name) {
  std::optional<std::string> out;
  for (auto it = v_.begin(); it != v_.end();) {
    if (*it == "--") break;
    std::string_view a = *it;
    if (a.starts_with(long_name) && a.size() > long_name.size() && a[long_name.size()] == '=') {
      out = std::string(a.substr(long_name.size() + 1));
      it = v_.erase(it);
      continue;
    }
    if (a == long_name || (!short_name.empty() && a == short_name)) {
      if (it + 1 == v_.end())
        throw usage_error("option " + std::string(a) + " needs a value");
      out = *(it + 1);
      it = v_.erase(it, it + 2);
      continue;
    }
    ++it;
  }
  return out;
}

std::optional<std::string> args::optional_value(std::string_view long_name) {
  std::optional<std::string> out;
  for (auto it = v_.begin(); it != v_.end();) {
    if (*it == "--") break;
    std::string_view a = *it;
    if (a.starts_with(long_name) && a.size() > long_name.size() && a[long_name.size()] == '=') {
      out = std::string(a.substr(long_name.size() + 1));
      it = v_.erase(it);
    } else if (a == long_name) {
      const bool alone = it + 1 == v_.end() || (it + 1)->starts_with("-");
      out = alone ? std::string() : *(it + 1);
      it = v_.erase(it, alone ? it + 1 : it + 2);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<std::string> args::values(std::string_view long_name) {
  std::vector<std::string> out;
  for (auto it = v_.begin(); it != v_.end();) {
    if (*it == "--") break;
    std::string_view a = *it;
    if (a.starts_with(long_name) && a.size() > long_name.size() && a[long_name.size()] == '=') {
      out.emplace_back(a.substr(long_name.size() + 1));
      it = v_.erase(it);
    } else if (a == long_name) {
      if (it + 1 == v_.end()) throw usage_error("option " + std::string(a) + " needs a value");
      out.push_back(*(it + 1));
      it = v_.erase(it, it + 2);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<std::string> args::finish(size_t min_pos, size_t max_pos, std::string_view what) {
  std::vector<std::string> pos;
  bool rest = false;
  for (const auto& a : v_) {
    if (!rest && a == "--") {
      rest = true;
      continue;
    }
    if (!rest && a.size() > 1 && a[0] == '-')
      throw usage_error("unknown option '" + a + "'");
    pos.push_back(a);
  }
  if (pos.size() < min_pos)
    throw usage_error("missing " + std::string(what.empty() ? "argument" : what));
  if (pos.size() > max_pos) throw usage_error("unexpected argument '" + pos[max_pos] + "'");
  return pos;
}

int take_verbosity(std::vector<std::string>& v) {
  // 0 errors, 1 warnings and notices (the default), 2 info and libbpf's
  // warnings (the verifier log), 3 debug and libbpf's info, 4 libbpf's debug
  // output (magnet/log.h, capture's libbpf_print): more v's mean the same as 4.
  constexpr int kDefault = 1, kMax = 4;
  int level = kDefault;
  for (auto it = v.begin(); it != v.end() && *it != "--";) {
    const std::string& a = *it;
    const bool vs = a.size() > 1 && a[0] == '-' && a.find_first_not_of('v', 1) == std::string::npos;
    if (!vs && a != "--verbose") {
      ++it;
      continue;
    }
    level += vs ? static_cast<int>(a.size() - 1) : 1;
    it = v.erase(it);
  }
  return std::min(level, kMax);
}

result<uint64_t> parse_size(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data())
    return error{"'" + std::string(s) + "' is not a size (examples: 4096, 64K, 16M, 1G)"};
  std::string_view suf(p, s.data() + s.size() - p);
  uint64_t mul = 1;
  if (suf == "" || suf == "B") mul = 1;
  else if (suf == "K" || suf == "k" || suf == "KiB") mul = 1ull << 10;
  else if (suf == "M" || suf == "MiB") mul = 1ull << 20;
  else if (suf == "G" || suf == "GiB") mul = 1ull << 30;
  else return error{"'" + std::string(s) + "' has an unknown unit (use K, M or G)"};
  if (v == 0) return error{"size must be positive"};
  if (v > (1ull << 40) / mul) return error{"'" + std::string(s) + "' is too large"};
  return v * mul;
}

result<uint64_t> parse_duration_ns(std::string_view s, bare_number bare) {
  const std::string q = "'" + std::string(s) + "'";
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data() || !std::isfinite(v))
    return error{q + " is not a duration (examples: 10, 2.5s, 500ms, 100us, 1min)"};
  std::string_view suf(p, s.data() + s.size() - p);
  double mul;
  if (suf == "" && bare == bare_number::refused)
    return error{q + " needs a unit (e.g. " + std::string(s) + "ms or " + std::string(s) +
                 "s; units: ns, us, ms, s, min)"};
  if (suf == "" || suf == "s") mul = 1e9;
  else if (suf == "ms") mul = 1e6;
  else if (suf == "us") mul = 1e3;
  else if (suf == "ns") mul = 1;
  else if (suf == "m" || suf == "min") mul = 60e9;
  else return error{q + " has an unknown unit (use ns, us, ms, s, min)"};
  if (v <= 0) return error{q + ": a duration must be positive"};
  if (v * mul > 1e18) return error{q + " is too long"};
  if (v * mul < 1) return error{q + " is shorter than a nanosecond"};
  return static_cast<uint64_t>(v * mul);
}

result<double> parse_rate_bps(std::string_view s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data() || !std::isfinite(v))
    return error{"'" + std::string(s) + "' is not a rate (examples: 20mbit, 1.5gbit, 800kbit, 1000000)"};
  std::string_view suf(p, s.data() + s.size() - p);
  double mul;
  if (suf == "" || suf == "bit") mul = 1;
  else if (suf == "kbit") mul = 1e3;
  else if (suf == "mbit") mul = 1e6;
  else if (suf == "gbit") mul = 1e9;
  else return error{"'" + std::string(s) + "' has an unknown unit (use bit, kbit, mbit, gbit)"};
  if (v <= 0) return error{"a rate must be positive"};
  if (v * mul > 1e13) return error{"'" + std::string(s) + "' is too large"};
  return v * mul;
}

result<uint64_t> parse_count(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    return error{"'" + std::string(s) + "' is not a positive integer"};
  if (v == 0) return error{"must be at least 1"};
  return v;
}

}  // namespace magnet::cli

extern "C" int magnet_cli_duration_ns(const char* s, int bare_seconds, unsigned long long* ns,
                                      char* why, size_t why_size) {
  using namespace magnet::cli;
  auto r = parse_duration_ns(s ? s : "", bare_seconds ? bare_number::seconds : bare_number::refused);
  if (!r) {
    if (why && why_size) std::snprintf(why, why_size, "%s", r.err().message.c_str());
    return -1;
  }
  *ns = *r;
  return 0;
}
