// Text helpers shared by magnet's small parsers: settings files, HTTP
// header values, option lists.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace magnet {

// @s without its leading and trailing blanks: spaces, tabs, and the
// carriage return a file with CRLF line ends leaves at a line's end.
inline std::string_view trim(std::string_view s) {
  constexpr std::string_view blanks = " \t\r";
  const size_t b = s.find_first_not_of(blanks);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(blanks) - b + 1);
}

// The parts of @s between its @sep characters, empty ones included ("a,,b"
// is three parts, "" is one): each caller says what an empty part means.
inline std::vector<std::string> split(std::string_view s, char sep = ',') {
  std::vector<std::string> out;
  for (;;) {
    const size_t at = s.find(sep);
    out.emplace_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

}  // namespace magnet
