// One request line of the daemon's query socket (admin.h), parsed without
// the daemon: the words of the line, what is asked for and its arguments.
// The grammar is host_daemon::handle's (daemon.cc): words separated by
// white space; the first names the request, the second is its VM (by name,
// UUID or magnet id), `mark` takes a third, a finite number.  Words after
// those are ignored.  Whether the VM exists and whether the peer may ask
// are the daemon's to decide.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace magnet::host {

struct admin_request {
  enum class kind { top, vms, sessions, kvm, stats, views, mark, unknown };
  kind k = kind::unknown;
  std::string cmd;         // the first word ("" for a blank line)
  std::string vm;          // the second word ("" when absent): kvm, stats, views, mark
  std::string value_text;  // mark: the third word ("" when absent)
  std::optional<double> value;  // mark: value_text when it is a finite number as a whole

  bool operator==(const admin_request&) const = default;
};

admin_request parse_admin_request(std::string_view line);

// The request as one canonical line (single spaces); parses back to itself.
std::string format_admin_request(const admin_request& r);

// The replies' error texts for a request that does not parse, as the
// daemon words them.
std::string admin_unknown_request_error(const admin_request& r);
std::string admin_bad_mark_value_error(const admin_request& r);

}  // namespace magnet::host
