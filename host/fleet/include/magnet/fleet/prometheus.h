// The fleet's Prometheus, read through its HTTP API: instant queries
// (/api/v1/query), their result vectors as plain data.  The client is
// synchronous and speaks plain HTTP (Boost.Beast); a TLS Prometheus sits
// behind a local proxy, as the daemon's own /metrics does (docs/metrics.md).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/result.h"

namespace magnet::fleet {

// One series of an instant vector: its labels and its value at the
// query's time.
struct sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

// http://HOST[:PORT][/PREFIX] (a Prometheus behind a path prefix, as
// --web.route-prefix sets it); the port defaults to 80.
struct prometheus_url {
  std::string host;    // a name, an IPv4 address, or an IPv6 one without brackets
  std::string port;
  std::string prefix;  // "" or "/prefix", no trailing slash
  std::string text;    // as given, for messages
};
result<prometheus_url> parse_prometheus_url(std::string_view url);

// The result vector of an instant query's reply: @http_status and @body as
// Prometheus sent them, @where ("Prometheus at URL") and @query for the
// messages.  Errors: a reply with "status":"error" (its errorType and
// error, whatever the HTTP status), another status than 200, JSON that does
// not parse or has no data.result, a result that is not a vector, a sample
// whose value is not [time, "number"].
result<std::vector<sample>> parse_query_reply(int http_status, std::string_view body,
                                              const std::string& where, const std::string& query);

// An instant query at the server's current time: the result vector.  The
// seam between the fleet's inputs and the network: tests pass canned
// vectors (fleet/assemble.h).
using query_fn = std::function<result<std::vector<sample>>(const std::string& promql)>;

// A client of one Prometheus.  Each query is bounded by @timeout from the
// name lookup to the last byte of the reply; errors name the URL: one that
// cannot be reached (with the system's reason), one that does not answer in
// time, and all of parse_query_reply's.
class prometheus_client {
 public:
  prometheus_client(prometheus_url url, std::chrono::milliseconds timeout)
      : url_(std::move(url)), timeout_(timeout) {}
  result<std::vector<sample>> query(const std::string& promql) const;
  query_fn as_query_fn() const {
    return [this](const std::string& q) { return query(q); };
  }

 private:
  prometheus_url url_;
  std::chrono::milliseconds timeout_;
};

// @s for a URL's query string (RFC 3986 unreserved characters kept).
std::string url_encode(std::string_view s);

}  // namespace magnet::fleet
