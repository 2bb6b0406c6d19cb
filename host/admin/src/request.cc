#include "magnet/admin/request.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace magnet::host {

admin_request parse_admin_request(std::string_view line) {
  admin_request r;
  std::istringstream in{std::string(line)};
  in >> r.cmd >> r.vm;
  using k = admin_request::kind;
  if (r.cmd == "top") r.k = k::top;
  else if (r.cmd == "vms") r.k = k::vms;
  else if (r.cmd == "sessions") r.k = k::sessions;
  else if (r.cmd == "kvm") r.k = k::kvm;
  else if (r.cmd == "stats") r.k = k::stats;
  else if (r.cmd == "views") r.k = k::views;
  else if (r.cmd == "mark") r.k = k::mark;
  if (r.k == k::mark) {
    in >> r.value_text;
    char* end = nullptr;
    double v = std::strtod(r.value_text.c_str(), &end);
    // As a whole: a NUL inside the word ends strtod, not the word.
    if (!r.value_text.empty() && end == r.value_text.c_str() + r.value_text.size() &&
        std::isfinite(v))
      r.value = v;
  }
  // Requests without a VM argument ignore the words after them.
  if (r.k == k::top || r.k == k::vms || r.k == k::sessions) r.vm.clear();
  return r;
}

std::string format_admin_request(const admin_request& r) {
  std::string s = r.cmd;
  for (const std::string* w : {&r.vm, &r.value_text}) {
    if (w->empty()) break;
    s += ' ';
    s += *w;
  }
  return s;
}

std::string admin_unknown_request_error(const admin_request& r) {
  return "error unknown request '" + r.cmd +
         "' (top, vms, sessions, kvm VM, stats VM, views [VM], mark VM VALUE)";
}

std::string admin_bad_mark_value_error(const admin_request& r) {
  return "error mark VM VALUE: '" + r.value_text + "' is not a number";
}

}  // namespace magnet::host
