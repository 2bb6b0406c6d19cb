// The host daemon as an operator meets it: it keeps running and answering
// when libvirt is unavailable, SIGHUP reloads view definitions (a bad file
// is refused and the old views stay), SIGTERM stops it cleanly.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

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
