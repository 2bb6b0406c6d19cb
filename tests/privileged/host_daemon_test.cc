// The host daemon as an operator meets it: it keeps running and answering
// when libvirt is unavailable, SIGHUP reloads view definitions (a bad file
// is refused and the old views stay), SIGTERM stops it cleanly; --sample
// thins what it streams and not what the kernel counts.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "http.h"
#include "proc.h"

namespace magnet {
namespace {

using test::child;
using test::run;

void write_file(const std::string& p, const std::string& text) {
  std::ofstream f(p, std::ios::trunc);
  f << text;
}

TEST(HostDaemon, SurvivesMissingLibvirtAndReloadsViewsOnSighup) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string id = std::to_string(getpid());
  const std::string views = "/tmp/magnet-views-" + id + ".yaml";
  const std::string sock = "/tmp/magnet-host-" + id + ".sock";
  write_file(views, "views:\n  - name: a\n    filter: \"event == net.dev.recv\"\n    per_vm: true\n");
  child d({MAGNET_BIN, "host", "--uri", "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
           "--views", views, "--socket", sock, "--probes", "net.dev", "--duration", "60"});
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  ASSERT_TRUE(d.wait_for_stderr("[registry.down]")) << d.stderr_text();
  auto top = run({MAGNET_BIN, "top", "--socket", sock, "--json", "--count", "1"});
  EXPECT_EQ(top.status, 0) << top.err;
  EXPECT_NE(top.out.find("\"libvirt\":false"), std::string::npos) << top.out;

  write_file(views, "views:\n  - name: b\n    filtr: oops\n");
  ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(d.wait_for_stderr("[views.rejected]")) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("unknown key 'filtr'"), std::string::npos) << d.stderr_text();
  EXPECT_EQ(run({MAGNET_BIN, "views", "--socket", sock}).status, 0) << "still serving";

  write_file(views, "views:\n  - name: c\n    filter: \"event == net.dev.xmit\"\n    per_vm: true\n"
                    "  - name: all\n    filter: \"event == net.dev\"\n    windows: [{ms: 1000}]\n");
  ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(d.wait_for_stderr("[views.reloaded]")) << d.stderr_text();
  // The client: text by default, one view by name, bad options named.
  auto txt = run({MAGNET_BIN, "views", "--socket", sock, "--view", "all"});
  EXPECT_EQ(txt.status, 0) << txt.err;
  EXPECT_EQ(txt.out.rfind("all  vm 0  matched ", 0), 0u) << txt.out;
  EXPECT_NE(txt.out.find("last 1000 ms"), std::string::npos) << txt.out;
  auto none = run({MAGNET_BIN, "views", "--socket", sock, "--view", "nosuch"});
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("no instance of a view named 'nosuch' in the reply (views: all)"),
            std::string::npos) << none.err;
  // magnet stats: what a VM receives; no VM here, and the reply names it.
  auto st = run({MAGNET_BIN, "stats", "nosuchvm", "--socket", sock});
  EXPECT_EQ(st.status, 1);
  EXPECT_NE(st.err.find("no running VM named 'nosuchvm'"), std::string::npos) << st.err;
  EXPECT_EQ(run({MAGNET_BIN, "stats", "--socket", sock}).status, 2) << "the VM is required";
  auto rows = run({MAGNET_BIN, "views", "--socket", sock, "--rows", "0"});
  EXPECT_NE(rows.status, 0);
  EXPECT_NE(rows.err.find("--rows"), std::string::npos) << rows.err;

  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("[stopped]"), std::string::npos);
  EXPECT_NE(access(sock.c_str(), F_OK), 0) << "socket removed on exit";
  auto gone = run({MAGNET_BIN, "views", "--socket", sock});
  EXPECT_EQ(gone.status, 1);
  EXPECT_NE(gone.err.find("is 'magnet host' running?"), std::string::npos) << gone.err;
  unlink(views.c_str());
}

// A counter of /metrics' page @page: the value of the first series that
// starts with @series (-1 when there is none).
double metric(const std::string& page, const std::string& series) {
  std::istringstream in(page);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(series, 0) == 0) return std::stod(l.substr(l.rfind(' ') + 1));
  return -1;
}

// magnet host --sample net.dev=8 on a VM of libvirt's test driver whose tap
// is a veth of this test (its "QEMU" a sleep of this test, as libvirt's pid
// file says): the kernel streams 1 in 8 of the tap's records, so the views
// that count them got an eighth of the packets and say sample_every 8,
// while the in-kernel counts on /metrics count every packet.
TEST(HostDaemon, SampleStreamsOneInNAndTheKernelsCountsStayExact) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string id = std::to_string(getpid());
  const std::string dir = "/tmp/magnet-sample-" + id, node = dir + "/node.xml", sock = dir + "/host.sock",
                    name = "mgsmp" + id, ns = "mgsmp" + id, tap = "mgsa" + id, peer = "mgsb" + id,
                    pidf = "/run/libvirt/qemu/" + name + ".pid";
  struct cleanup {
    std::string dir, ns, tap, pidf;
    ~cleanup() {
      test::run({"ip", "link", "del", tap});
      test::run({"ip", "netns", "del", ns});
      unlink(pidf.c_str());
      test::run({"rm", "-rf", dir});
    }
  } c{dir, ns, tap, pidf};
  ASSERT_EQ(run({"mkdir", "-p", dir, "/run/libvirt/qemu"}).status, 0);
  // The wire: the tap in this namespace, its peer in one of its own; no
  // IPv6, so that only the pings and their ARP cross it.
  ASSERT_EQ(run({"ip", "netns", "add", ns}).status, 0);
  ASSERT_EQ(run({"ip", "link", "add", tap, "type", "veth", "peer", "name", peer, "netns", ns}).status, 0);
  for (const auto& argv : std::vector<std::vector<std::string>>{
           {"sysctl", "-qw", "net.ipv6.conf." + tap + ".disable_ipv6=1"},
           {"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf." + peer + ".disable_ipv6=1"},
           {"ip", "addr", "add", "10.79.0.1/30", "dev", tap},
           {"ip", "link", "set", tap, "up"},
           {"ip", "-n", ns, "addr", "add", "10.79.0.2/30", "dev", peer},
           {"ip", "-n", ns, "link", "set", peer, "up"}})
    ASSERT_EQ(run(argv).status, 0) << argv[argv.size() - 2];
  child qemu({"/bin/sleep", "120"});
  std::ofstream(pidf) << qemu.pid() << "\n";
  std::ofstream(node) << "<node><domain type='test'><name>" << name
                      << "</name><memory>1048576</memory><vcpu>1</vcpu><os><type>hvm</type></os>"
                         "<devices><interface type='ethernet'><target dev='"
                      << tap << "'/></interface></devices></domain></node>\n";
  child d({MAGNET_BIN, "-v", "host", "--config", "/dev/null", "--uri", "test://" + node, "--socket", sock,
           "--probes", "net.dev", "--sample", "net.dev=8", "--no-deliver", "--http", "127.0.0.1:0",
           "--duration", "120"});
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("; sampled net.dev=8;"), std::string::npos) << d.stderr_text();
  EXPECT_NE(d.stderr_text().find("[sample] net.dev.xmit, net.dev.recv: 1 in 8 of the streamed records"),
            std::string::npos) << d.stderr_text();
  ASSERT_TRUE(d.wait_for_stderr("[vm.up] " + name)) << d.stderr_text();
  const std::string log = d.stderr_text();
  const int port = test::metrics_port(log);
  ASSERT_NE(port, 0) << log;
  usleep(300000);  // the VM tagged in the kernel, its view instances made

  // 400 UDP datagrams from the "guest" (the namespace), each echoed by this
  // side before the next: 400 packets each way on the tap.
  const int kPings = 400;
  child echo({"/usr/bin/python3", "-c",
              "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
              "s.bind(('10.79.0.1',5799))\nprint('listening',file=sys.stderr,flush=True)\n"
              "while True:\n  b,a=s.recvfrom(2048)\n  s.sendto(b,a)\n"});
  ASSERT_TRUE(echo.wait_for_stderr("listening")) << echo.stderr_text();
  auto ping = run({"ip", "netns", "exec", ns, "/usr/bin/python3", "-c",
                   "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(2)\n"
                   "for i in range(int(sys.argv[1])):\n  s.sendto(b'x'*64,('10.79.0.1',5799))\n  s.recv(2048)\n",
                   std::to_string(kPings)},
                  60);
  ASSERT_EQ(ping.status, 0) << ping.out << ping.err;
  echo.stop(SIGKILL);
  usleep(500000);  // a tick or more: the ring drained, the counters read

  auto [status, page] = test::http_get(port, "/metrics");
  ASSERT_EQ(status, 200) << page.substr(0, 300);
  const double sent = metric(page, "magnet_vm_network_transmit_packets_total{domain=\"" + name + "\"");
  const double received = metric(page, "magnet_vm_network_receive_packets_total{domain=\"" + name + "\"");
  // Every datagram and echo, and an ARP exchange or two: the kernel counted them all.
  EXPECT_GE(sent, kPings) << page;
  EXPECT_LE(sent, kPings + 4) << page;
  EXPECT_GE(received, kPings) << page;
  EXPECT_LE(received, kPings + 4) << page;

  auto views = run({MAGNET_BIN, "views", "--socket", sock, "--vm", name, "--json"});
  ASSERT_EQ(views.status, 0) << views.err;
  std::map<std::string, nlohmann::json> by;
  for (const auto& v : nlohmann::json::parse(views.out)) by[v["view"].get<std::string>()] = v;
  ASSERT_TRUE(by.count("guest-tx") && by.count("guest-rx") && by.count("block-io")) << views.out;
  // Per CPU, the kernel keeps the 8th, 16th, ... record: an eighth, less
  // up to 7 per CPU.
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (const auto& [view, kernel] : {std::pair{"guest-tx", sent}, std::pair{"guest-rx", received}}) {
    const auto& v = by[view];
    EXPECT_EQ(v["sample_every"], 8) << v;
    const double streamed = v["matched"].get<double>();
    EXPECT_LE(streamed * 8, kernel) << view << ": " << v;
    EXPECT_GE(streamed * 8, kernel - 7.0 * cpus) << view << ": " << v;
    std::printf("%s: %.0f packets counted in the kernel, %.0f records streamed (1 in 8)\n", view, kernel,
                streamed);
  }
  EXPECT_EQ(by["block-io"]["sample_every"], 1) << "blk is not sampled";
  auto top = run({MAGNET_BIN, "top", "--socket", sock, "--json", "--count", "1"});
  ASSERT_EQ(top.status, 0) << top.err;
  EXPECT_EQ(nlohmann::json::parse(top.out)["sample_every"],
            nlohmann::json::parse(R"({"net.dev.xmit":8,"net.dev.recv":8})"))
      << top.out;
  // Views read again (SIGHUP) take the kernel's rate as well.
  ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(d.wait_for_stderr("[views.reloaded]")) << d.stderr_text();
  views = run({MAGNET_BIN, "views", "--socket", sock, "--vm", name, "--json", "--view", "guest-tx"});
  ASSERT_EQ(views.status, 0) << views.err;
  EXPECT_EQ(nlohmann::json::parse(views.out)[0]["sample_every"], 8) << views.out;
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
  qemu.stop(SIGKILL);
}

TEST(HostDaemon, BadViewFileIsRefusedAtStart) {
  const std::string views = "/tmp/magnet-badviews-" + std::to_string(getpid()) + ".yaml";
  write_file(views, "views:\n  - name: x\n    per_vm: true\n    filter: \"vm == 3\"\n");
  auto r = run({MAGNET_BIN, "host", "--check-views", views});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("vm"), std::string::npos) << r.err;
  unlink(views.c_str());
}

}  // namespace
}  // namespace magnet
