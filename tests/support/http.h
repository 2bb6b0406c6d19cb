// Test support: one HTTP exchange over loopback TCP, raw, so that tests can
// send what no client library would (malformed, oversized requests).
#pragma once

#include <string>
#include <utility>

namespace magnet::test {

// Sends @request to 127.0.0.1:@port on a connection of its own and returns
// everything the server sends until it closes (10 s receive timeout; ""
// when nothing listens).
std::string http_exchange(int port, const std::string& request);
// A GET of @target (with an Accept header when @accept is not empty):
// the status (0 when there was no HTTP reply) and the body.
std::pair<int, std::string> http_get(int port, const std::string& target, const std::string& accept = "");
// The port of `magnet host --http 127.0.0.1:0` from its log ("[http] serving
// /metrics on http://127.0.0.1:PORT/metrics"); 0 when the log has no such line.
int metrics_port(const std::string& daemon_log);
// A loopback TCP port nothing listens on now (the kernel's pick), for a
// server the test starts (Prometheus); -1 when none could be had.
int free_port();

}  // namespace magnet::test
