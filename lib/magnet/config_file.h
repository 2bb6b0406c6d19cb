// Settings files of the form every magnet daemon reads (magnet host's
// /etc/magnet/magnet.conf): one "key = value" a line; blank lines and lines
// whose first non-blank character is '#' are skipped (a '#' elsewhere is
// part of the value: a path or URI may hold one); the key and the value are
// trimmed, the value is everything after the first '=' (it may hold more).
// What the keys mean is the reader's: it checks them against its options.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "magnet/result.h"

namespace magnet {

struct config_entry {
  std::string key, value;
  int line = 0;  // 1-based, for messages: "FILE:LINE: ..."
};

// The entries of @text, in order; refused with "NAME:LINE: why" for a line
// that is not "key = value" or has an empty key or value.  @name names the
// file in messages.
result<std::vector<config_entry>> parse_config(std::string_view text, const std::string& name);

// The file at @path, parsed; "PATH: why" when it cannot be read.
result<std::vector<config_entry>> load_config(const std::string& path);

}  // namespace magnet
