// libFuzzer target: request lines of the daemon's query socket
// (host/admin/include/magnet/admin/request.h; the socket hands the daemon one line of at
// most 4096 bytes, without its newline).  Oracles besides the sanitizers:
// the canonical line parses back to the same request; words hold no white
// space; a mark value is finite and only there; the error texts build.
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "magnet/admin/request.h"

using namespace magnet::host;

namespace {
bool has_space(const std::string& w) {
  for (unsigned char c : w)
    if (std::isspace(c)) return true;
  return false;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  std::string_view line(reinterpret_cast<const char*>(data), size);
  if (line.find('\n') != std::string_view::npos) return 0;  // the socket splits lines
  const admin_request r = parse_admin_request(line);
  if (has_space(r.cmd) || has_space(r.vm) || has_space(r.value_text)) abort();
  if (r.cmd.empty() && (!r.vm.empty() || r.k != admin_request::kind::unknown)) abort();
  if (r.value && (r.k != admin_request::kind::mark || !std::isfinite(*r.value))) abort();
  if (r.k != admin_request::kind::mark && !r.value_text.empty()) abort();
  if (parse_admin_request(format_admin_request(r)) != r) abort();
  if (admin_unknown_request_error(r).empty() || admin_bad_mark_value_error(r).empty()) abort();
  return 0;
}
