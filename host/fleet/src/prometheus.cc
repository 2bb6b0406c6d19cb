#include "magnet/fleet/prometheus.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace magnet::fleet {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

result<prometheus_url> parse_prometheus_url(std::string_view url) {
  const std::string want = "'" + std::string(url) + "': expected http://HOST[:PORT][/PREFIX]";
  if (url.starts_with("https://"))
    return error{want + " (plain HTTP only: put a TLS Prometheus behind a local proxy)"};
  if (!url.starts_with("http://")) return error{want};
  std::string_view rest = url.substr(7);
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.find_first_of("?#") != std::string_view::npos) return error{want + " (no query or fragment)"};
  prometheus_url u{"", "80", std::string(path), std::string(url)};
  std::string_view port;
  if (authority.starts_with("[")) {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return error{want};
    u.host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && !after.starts_with(":")) return error{want};
    if (!after.empty()) port = after.substr(1);
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (u.host.empty() || (u.host.find(':') != std::string::npos && !authority.starts_with("[")))
    return error{want};
  if (!port.empty() || authority.ends_with(":")) {
    unsigned p = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc{} || end != port.data() + port.size() || p == 0 || p > 65535)
      return error{want + " (port '" + std::string(port) + "')"};
    u.port = std::string(port);
  }
  return u;
}

std::string url_encode(std::string_view s) {
  std::string o;
  char b[4];
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      o += static_cast<char>(c);
    } else {
      std::snprintf(b, sizeof b, "%%%02X", c);
      o += b;
    }
  }
  return o;
}

namespace {

// A sample's value: Prometheus writes it as a string ("1.5", "NaN",
// "+Inf"), never as a JSON number.
std::optional<double> sample_value(const json& v) {
  if (!v.is_array() || v.size() != 2 || !v[1].is_string()) return std::nullopt;
  const std::string s = v[1].get<std::string>();
  if (s == "NaN") return std::nan("");
  if (s == "+Inf" || s == "-Inf") return s[0] == '+' ? HUGE_VAL : -HUGE_VAL;
  double d = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return d;
}

result<std::vector<sample>> vector_of(const json& data, const std::string& what) {
  if (!data.is_object() || !data.contains("result") || !data["result"].is_array())
    return error{what + ": a reply without data.result"};
  if (data.value("resultType", "") != "vector")
    return error{what + ": a " + data.value("resultType", "reply") + " where an instant vector was expected"};
  std::vector<sample> out;
  for (const auto& s : data["result"]) {
    if (!s.is_object() || !s.contains("metric") || !s["metric"].is_object())
      return error{what + ": a sample without its labels: " + s.dump().substr(0, 200)};
    sample x;
    for (const auto& [k, v] : s["metric"].items()) {
      if (!v.is_string()) return error{what + ": label " + k + " is not a string"};
      x.labels[k] = v.get<std::string>();
    }
    auto v = s.contains("value") ? sample_value(s["value"]) : std::nullopt;
    if (!v) return error{what + ": a sample whose value is not [time, \"number\"]: " + s.dump().substr(0, 200)};
    x.value = *v;
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace

result<std::vector<sample>> parse_query_reply(int http_status, std::string_view body,
                                              const std::string& where, const std::string& query) {
  const std::string what = where + ", query '" + query + "'";
  json j;
  std::string malformed;  // the parser's reason
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    malformed = e.what();
  }
  // Prometheus explains a refused query in the body (HTTP 400, 422, 503):
  // its reason is worth more than the status line.
  if (j.is_object() && j.value("status", "") == "error")
    return error{what + ": " + j.value("errorType", "error") + ": " + j.value("error", "(no reason given)")};
  if (http_status != 200) {
    std::string text(body.substr(0, 200));
    for (char& c : text)
      if (c == '\n' || c == '\r') c = ' ';
    return error{what + ": HTTP status " + std::to_string(http_status) + (text.empty() ? "" : ": " + text)};
  }
  if (!malformed.empty()) return error{what + ": malformed JSON: " + malformed};
  if (!j.is_object() || j.value("status", "") != "success")
    return error{what + ": a reply that is neither success nor error: " + j.dump().substr(0, 200)};
  return vector_of(j.contains("data") ? j["data"] : json(), what);
}

namespace {

std::string duration_text(std::chrono::milliseconds t) {
  return t.count() % 1000 ? std::to_string(t.count()) + "ms" : std::to_string(t.count() / 1000) + "s";
}

struct http_reply {
  int status = 0;
  std::string body;
};

// One GET of @target, bounded by @timeout as a whole; errors name the URL.
result<http_reply> http_get(const prometheus_url& u, const std::string& target,
                            std::chrono::milliseconds timeout) {
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, (u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host) + ":" + u.port);
  req.set(http::field::user_agent, "magnet-place");
  req.set(http::field::accept, "application/json");
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256u << 20);  // a fleet of 10,000 VMs answers a few MB
  beast::error_code failed;
  std::string stage;
  bool done = false;
  auto fail = [&](const char* what, beast::error_code ec) {
    stage = what;
    failed = ec;
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  resolver.async_resolve(u.host, u.port, [&](beast::error_code ec, tcp::resolver::results_type eps) {
    if (ec) return fail("resolve", ec);
    stream.expires_at(deadline);
    stream.async_connect(eps, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return fail("connect", ec);
      http::async_write(stream, req, [&](beast::error_code ec, size_t) {
        if (ec) return fail("send", ec);
        http::async_read(stream, buf, parser, [&](beast::error_code ec, size_t) {
          if (ec) return fail("receive", ec);
          done = true;
        });
      });
    });
  });
  ioc.run_until(deadline);
  const std::string where = "Prometheus at " + u.text;
  if (!done && !failed) {
    // The name lookup has no timer of its own: cancel it and what follows.
    resolver.cancel();
    stream.close();
    ioc.restart();
    ioc.run();
  }
  if (!done && (!failed || failed == beast::error::timeout || failed == asio::error::operation_aborted))
    return error{where + " did not answer within " + duration_text(timeout) +
                 " (--query-timeout sets this bound)"};
  if (!done)
    return error{"cannot reach " + where + ": " + stage + ": " + failed.message(), failed.value()};
  return http_reply{static_cast<int>(parser.get().result_int()), std::move(parser.get().body())};
}

}  // namespace

result<std::vector<sample>> prometheus_client::query(const std::string& promql) const {
  auto r = http_get(url_, url_.prefix + "/api/v1/query?query=" + url_encode(promql), timeout_);
  if (!r) return r.err();
  return parse_query_reply(r->status, r->body, "Prometheus at " + url_.text, promql);
}

}  // namespace magnet::fleet
