// magnet_test_hooks [-v]... host [options]: `magnet host` built with the
// daemon's test hooks (seccomp.h), for the tests that need them.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "magnet/log.h"

int main(int argc, char** argv) {
  using namespace magnet;
  std::vector<std::string> args(argv + 1, argv + argc);
  int verbosity = 1;
  size_t i = 0;
  for (; i < args.size() && args[i] == "-v"; ++i) ++verbosity;
  if (i == args.size() || args[i] != "host") {
    std::fprintf(stderr, "usage: magnet_test_hooks [-v]... host [options]\n");
    return 2;
  }
  set_log_verbosity(verbosity);
  cli::args rest("host", std::vector<std::string>(args.begin() + static_cast<long>(i) + 1, args.end()));
  try {
    return host::cmd_host(rest);
  } catch (const cli::usage_error& e) {
    std::fprintf(stderr, "magnet_test_hooks host: %s\n", e.what());
    return 2;
  } catch (const fatal& e) {
    std::fprintf(stderr, "magnet_test_hooks host: %s\n", e.what());
    return 1;
  }
}
