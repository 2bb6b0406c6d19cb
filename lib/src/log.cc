#include "magnet/log.h"

#include <cstdio>

namespace magnet {
namespace {
int g_verbosity = 1;
}

int log_verbosity() { return g_verbosity; }
void set_log_verbosity(int v) { g_verbosity = v; }

void log_line(int level, const std::string& msg) {
  if (level > g_verbosity) return;
  std::fprintf(stderr, "%s\n", msg.c_str());
}

}  // namespace magnet
