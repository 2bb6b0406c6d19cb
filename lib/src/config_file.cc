#include "magnet/config_file.h"
#include "magnet/text.h"

#include <cerrno>
#include <fstream>
#include <sstream>

namespace magnet {

namespace {

bool key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

}  // namespace

result<std::vector<config_entry>> parse_config(std::string_view text, const std::string& name) {
  std::vector<config_entry> out;
  int n = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++n;
    const std::string_view line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    const std::string at = name + ":" + std::to_string(n) + ": ";
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos)
      return error{at + "'" + std::string(line) + "' is not 'key = value'"};
    config_entry e{std::string(trim(line.substr(0, eq))), std::string(trim(line.substr(eq + 1))), n};
    if (e.key.empty()) return error{at + "no key before '='"};
    for (char c : e.key)
      if (!key_char(c)) return error{at + "'" + e.key + "' is not a key (letters, digits, '-', '_', '.')"};
    if (e.value.empty()) return error{at + e.key + ": no value after '=' (leave the line out for the default)"};
    out.push_back(std::move(e));
  }
  return out;
}

result<std::vector<config_entry>> load_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) return error::from_errno(path);
  std::stringstream s;
  s << f.rdbuf();
  if (f.bad()) return error::from_errno(path);
  return parse_config(s.str(), path);
}

}  // namespace magnet
