// The application of UsdtMarks (usdt_test.cc): waits until GOFILE exists
// (the test creates it once magnet record has attached), then marks
// MAGNET_ADD(1000 + i, 7, i * 3) for i < N and exits.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "magnet/usdt.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s N GOFILE\n", argv[0]);
    return 2;
  }
  long n = std::atol(argv[1]);
  // Bounded: a test that never says go must not leave this behind.
  for (int waited = 0; access(argv[2], F_OK) != 0; ++waited) {
    if (waited > 3000) return 3;
    usleep(10'000);
  }
  for (long i = 0; i < n; ++i) MAGNET_ADD(1000 + i, 7, static_cast<uint64_t>(i) * 3);
  return 0;
}
