#!/bin/sh
# run_suite.sh PROGRAM SUITE: runs the e2e test program PROGRAM on SUITE's tests, or, when
# MAGNET_E2E_ONLY is set (Suite.Test[:Suite.Test...]), on those tests alone: tools/test runs a
# nested suite's tests again this way when the lab host died under them (docs/lab.md).
prog=$1 suite=$2
exec "$prog" --gtest_filter="${MAGNET_E2E_ONLY:-$suite.*}"
