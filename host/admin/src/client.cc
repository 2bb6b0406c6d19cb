#include "magnet/admin/client.h"

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>

namespace magnet::host {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

query_reply query_daemon(const std::string& socket_path, const std::string& request) {
  query_reply r;
  try {
    asio::io_context io;
    local::socket s(io);
    s.connect(local::endpoint(socket_path));
    asio::write(s, asio::buffer(request + "\n"));
    asio::streambuf buf;
    boost::system::error_code ec;
    asio::read_until(s, buf, '\n', ec);
    std::string line((std::istreambuf_iterator<char>(&buf)), {});
    while (!line.empty() && line.back() == '\n') line.pop_back();
    if (line.rfind("ok ", 0) == 0) {
      r.ok = true;
      r.body = line.substr(3);
    } else {
      r.body = line.rfind("error ", 0) == 0 ? line.substr(6) : "malformed reply from the daemon";
    }
  } catch (const boost::system::system_error& e) {
    r.body = "cannot reach the host daemon at " + socket_path + " (" + e.what() +
             "): is 'magnet host' running?";
  }
  return r;
}

}  // namespace magnet::host
