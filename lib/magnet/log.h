// Minimal logger: verbosity-filtered lines on stderr.  libbpf's own log is
// routed here (capture.cc) so -v shows verifier output and nothing else does.
#pragma once

#include <string>

namespace magnet {

int log_verbosity();  // 0 errors, 1 warnings (default), 2 info, 3 debug
void set_log_verbosity(int v);
void log_line(int level, const std::string& msg);

}  // namespace magnet
