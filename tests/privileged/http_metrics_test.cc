// magnet host --http as a scraper meets it: /metrics in both formats passes
// promtool, content negotiation by Accept, and bad requests (malformed,
// oversized, unknown paths, other methods) get their 4xx without harming
// the daemon.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "magnet/export/openmetrics.h"
#include "http.h"
#include "proc.h"

namespace magnet {
namespace {

using test::child;
using test::run;
using test::http_exchange;

std::string body_of(const std::string& reply) {
  size_t at = reply.find("\r\n\r\n");
  return at == std::string::npos ? "" : reply.substr(at + 4);
}

// promtool check metrics on @page: its exit code and what it said.
test::run_result promtool(const std::string& page, const std::string& name) {
  const std::string path = "/tmp/magnet-metrics-" + std::to_string(getpid()) + "-" + name;
  std::ofstream(path, std::ios::trunc) << page;
  auto r = run({"sh", "-c", "promtool check metrics < " + path});
  unlink(path.c_str());
  return r;
}

TEST(HttpMetrics, BothFormatsPassPromtoolAndBadRequestsAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  ASSERT_EQ(run({"sh", "-c", "command -v promtool"}).status, 0)
      << "promtool is missing: tools/setup.sh installs Debian's prometheus package";
  const std::string sock = "/tmp/magnet-http-" + std::to_string(getpid()) + ".sock";
  child d({MAGNET_BIN, "host", "--uri", "qemu+unix:///system?socket=/nonexistent/libvirt-sock", "--socket",
           sock, "--probes", "net.dev", "--no-deliver", "--http", "127.0.0.1:0", "--duration", "60"});
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  const std::string log = d.stderr_text();
  const int port = test::metrics_port(log);
  ASSERT_NE(port, 0) << log;

  // The text format by default.
  std::string r = http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r.substr(0, 500);
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos) << r.substr(0, 500);
  const std::string text = body_of(r);
  EXPECT_NE(text.find("\nmagnet_libvirt_up 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nmagnet_vms 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n# TYPE magnet_vm_host_queue_seconds histogram\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("# EOF"), std::string::npos);
  std::smatch rss;
  ASSERT_TRUE(std::regex_search(text, rss, std::regex(R"(\nprocess_resident_memory_bytes (\d+)\n)"))) << text;
  EXPECT_GT(std::stod(rss[1]), 1e6) << "the daemon's resident memory";
  auto lint = promtool(text, "text");
  EXPECT_EQ(lint.status, 0) << lint.out << lint.err;

  // OpenMetrics when Prometheus asks for it (its own Accept header).
  r = http_exchange(port,
           "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/openmetrics-text;version=1.0.0,"
           "application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
           "Connection: close\r\n\r\n");
  ASSERT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r.substr(0, 500);
  EXPECT_NE(r.find("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"),
            std::string::npos) << r.substr(0, 500);
  const std::string om = body_of(r);
  EXPECT_TRUE(om.ends_with("\n# EOF\n")) << om.substr(om.size() > 200 ? om.size() - 200 : 0);
  EXPECT_NE(om.find("\n# UNIT magnet_vm_vcpu_seconds seconds\n"), std::string::npos) << om;
  // promtool reads the text format; the OpenMetrics page is checked by the
  // strict parser of a real Prometheus in e2e.MetricsDirect.  Here: the
  // same series as the text page, once the OpenMetrics framing is undone.
  std::string as_text = std::regex_replace(om, std::regex("\n# UNIT [^\n]*"), "");
  as_text = std::regex_replace(as_text, std::regex("# EOF\n$"), "");
  as_text = std::regex_replace(as_text, std::regex("# TYPE magnet_vm info"), "# TYPE magnet_vm_info gauge");
  for (const auto& f : host::metric_families())
    if (f.type == host::metric_type::counter)
      as_text = std::regex_replace(as_text, std::regex("# (HELP|TYPE) " + std::string(f.name) + " "),
                                   "# $1 " + std::string(f.name) + "_total ");
  as_text = std::regex_replace(as_text, std::regex("# (HELP|TYPE) magnet_vm "), "# $1 magnet_vm_info ");
  as_text = std::regex_replace(as_text, std::regex(R"(\\")"), "\"");  // HELP quotes
  auto strip_values = [](const std::string& s) {
    return std::regex_replace(s, std::regex(R"(^([a-z_]+(\{[^}]*\})?) [^\n]*$)", std::regex::multiline), "$1");
  };
  EXPECT_EQ(strip_values(as_text), strip_values(text)) << "the same families, series and HELP";
  lint = promtool(as_text, "om");
  EXPECT_EQ(lint.status, 0) << lint.out << lint.err;

  // HEAD: the headers alone.
  r = http_exchange(port, "HEAD /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_TRUE(r.ends_with("\r\n\r\n")) << r;

  // Requests that cannot be served.
  r = http_exchange(port, "GET /nothing-here HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << r;
  r = http_exchange(port, "DELETE /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << r;
  r = http_exchange(port, "GET /metrics HTTP/9.x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << r;
  r = http_exchange(port, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) + std::string(200, '\0'));
  EXPECT_EQ(r.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << "TLS to a plain HTTP port: " << r;
  r = http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: " + std::string(100000, 'c') + "\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 431 ", 0), 0u) << r.substr(0, 200);
  r = http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n" + std::string(10000, 'x'));
  EXPECT_EQ(r.rfind("HTTP/1.1 413 ", 0), 0u) << r.substr(0, 200);

  // Still serving, and the query socket too.
  r = http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r.substr(0, 300);
  EXPECT_EQ(run({MAGNET_BIN, "top", "--socket", sock, "--json", "--count", "1"}).status, 0);
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
}

TEST(HttpMetrics, BadHttpOptionsAreNamed) {
  auto r = run({MAGNET_BIN, "host", "--http", "localhost:9477", "--check-views", "/dev/null"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--http: 'localhost:9477': localhost is not a numeric IPv4 or IPv6 address"),
            std::string::npos) << r.err;
  r = run({MAGNET_BIN, "host", "--http=1.2.3.4", "--check-views", "/dev/null"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("expected ADDR:PORT"), std::string::npos) << r.err;
  auto list = run({MAGNET_BIN, "host", "--list-metrics"});
  EXPECT_EQ(list.status, 0) << list.err;
  std::string want;
  for (const auto& n : host::metric_series_names()) want += n + "\n";
  EXPECT_EQ(list.out, want);
  auto json = run({MAGNET_BIN, "host", "--list-metrics", "--json"});
  EXPECT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out, nullptr, false), nlohmann::json(host::metric_series_names()))
      << json.out;
  auto alone = run({MAGNET_BIN, "host", "--json", "--check-views", "/dev/null"});
  EXPECT_EQ(alone.status, 2);
  EXPECT_NE(alone.err.find("--json: only with --list-metrics"), std::string::npos) << alone.err;
}

}  // namespace
}  // namespace magnet
