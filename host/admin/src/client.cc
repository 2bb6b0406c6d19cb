#include "magnet/admin/client.h"

#include <string_view>
#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>

namespace magnet::host {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

std::string duration_text(std::chrono::nanoseconds d) {
  const auto ns = d.count();
  if (ns % 1'000'000'000 == 0) return std::to_string(ns / 1'000'000'000) + "s";
  if (ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + "ms";
  if (ns % 1'000 == 0) return std::to_string(ns / 1'000) + "us";
  return std::to_string(ns) + "ns";
}

query_reply query_daemon(const std::string& socket_path, const std::string& request,
                         std::chrono::nanoseconds timeout) {
  query_reply r;
  asio::io_context io;
  local::socket s(io);
  asio::streambuf buf;
  const std::string line_out = request + "\n";
  boost::system::error_code ec;
  const char* step = "connect";
  bool done = false;
  // Connect, write, read one line: asynchronous, so that the whole exchange
  // has one bound (a stuck daemon that accepts and never answers would
  // block a synchronous read for ever, and `magnet top` with it).
  s.async_connect(local::endpoint(socket_path), [&](boost::system::error_code e) {
    if (e) {
      ec = e, done = true;
      return;
    }
    step = "write";
    asio::async_write(s, asio::buffer(line_out), [&](boost::system::error_code e, size_t) {
      if (e) {
        ec = e, done = true;
        return;
      }
      step = "read";
      asio::async_read_until(s, buf, '\n', [&](boost::system::error_code e, size_t) {
        ec = e, done = true;
      });
    });
  });
  io.run_for(timeout);
  if (!done) {
    r.body = "the host daemon at " + socket_path + " did not answer within " +
             duration_text(timeout) + " (--timeout sets this bound)";
    return r;
  }
  // A read that failed leaves what came (or nothing): a malformed reply.
  if (ec && std::string_view(step) != "read") {
    r.body = "cannot reach the host daemon at " + socket_path + " (" + step + ": " +
             ec.message() + "): is 'magnet host' running?";
    return r;
  }
  std::string line((std::istreambuf_iterator<char>(&buf)), {});
  while (!line.empty() && line.back() == '\n') line.pop_back();
  if (line.rfind("ok ", 0) == 0) {
    r.ok = true;
    r.body = line.substr(3);
  } else {
    r.body = line.rfind("error ", 0) == 0 ? line.substr(6) : "malformed reply from the daemon";
  }
  return r;
}

}  // namespace magnet::host
