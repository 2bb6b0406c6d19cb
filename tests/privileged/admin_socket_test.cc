// The daemon's query socket: peer credentials checked by the daemon itself
// (not only the file's mode), the read-only group by primary or
// supplementary group, what of the VMs only root sees, keys that could mean
// two VMs refused, a live daemon's socket never taken over, and accepting
// that goes on after accept errors.
#include <gtest/gtest.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/admin/request.h"
#include "proc.h"

namespace magnet {
namespace {

using test::child;
using test::run;
using host::admin_unknown_request_error;
using host::parse_admin_request;

constexpr uid_t kNobody = 65534;
constexpr gid_t kReaders = 54321;  // a gid no account of this machine has

// One request as @uid/@gid with supplementary @groups (a forked child
// drops its privileges first); returns the reply line, or "connect: ERR".
std::string query_as(uid_t uid, gid_t gid, const std::string& sock, const std::string& line,
                     const std::vector<gid_t>& groups = {}) {
  int p[2];
  if (pipe(p) != 0) return "pipe";
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::string out;
    if (setgroups(groups.size(), groups.data()) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
      out = "setuid failed";
    } else {
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un sa{};
      sa.sun_family = AF_UNIX;
      std::strncpy(sa.sun_path, sock.c_str(), sizeof sa.sun_path - 1);
      if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
        out = std::string("connect: ") + std::strerror(errno);
      } else {
        std::string req = line + "\n";
        (void)!write(fd, req.data(), req.size());
        char buf[4096];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0) {
          out.append(buf, static_cast<size_t>(n));
          if (out.find('\n') != std::string::npos) break;
        }
      }
    }
    (void)!write(p[1], out.data(), out.size());
    _exit(0);
  }
  close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(p[0]);
  waitpid(pid, nullptr, 0);
  return out;
}

std::vector<std::string> daemon_args(const std::string& sock) {
  return {MAGNET_BIN, "host", "--uri", "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
          "--socket", sock, "--probes", "net.dev", "--no-deliver", "--duration", "60"};
}

TEST(AdminSocket, OnlyRootOrTheReadOnlyGroupGetAnswersWhateverTheFileMode) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads probes, switches users)";
  const std::string sock = "/tmp/magnet-admin-" + std::to_string(getpid()) + ".sock";
  auto args = daemon_args(sock);
  args.insert(args.end(), {"--socket-group", std::to_string(kReaders)});
  child d(args);
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  struct stat st;
  ASSERT_EQ(stat(sock.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, kReaders);
  // The file's mode keeps strangers out...
  EXPECT_EQ(query_as(kNobody, kNobody, sock, "top").rfind("connect: Permission denied", 0), 0u);
  // ...and if it were wrong, the daemon itself still checks who asks.
  ASSERT_EQ(chmod(sock.c_str(), 0666), 0);
  auto stranger = query_as(kNobody, kNobody, sock, "top");
  EXPECT_EQ(stranger.rfind("error permission denied", 0), 0u) << stranger;
  EXPECT_TRUE(d.wait_for_stderr("[admin.denied] uid 65534")) << d.stderr_text();
  // The read-only group reads, and cannot change what VMs receive.
  auto reader = query_as(kNobody, kReaders, sock, "top");
  EXPECT_EQ(reader.rfind("ok {", 0), 0u) << reader;
  auto mark = query_as(kNobody, kReaders, sock, "mark g1 1");
  EXPECT_EQ(mark.rfind("error mark changes what a VM receives: root only", 0), 0u) << mark;
  auto root = query_as(0, 0, sock, "mark nosuch 1");
  EXPECT_EQ(root.rfind("error no running VM named 'nosuch'", 0), 0u) << root;
  // The daemon reads requests with parse_admin_request (the fuzzed parser)
  // and answers in its words: any white space between words, extra words
  // after a request without a VM ignored, an unknown request named.
  auto spaced = query_as(0, 0, sock, "\t top\t extra");
  EXPECT_EQ(spaced.rfind("ok {", 0), 0u) << spaced;
  auto frob = query_as(0, 0, sock, "frob g1");
  EXPECT_EQ(frob, admin_unknown_request_error(parse_admin_request("frob g1")) + "\n") << frob;
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
}

TEST(AdminSocket, ALiveDaemonsSocketIsNeverTakenOverButAStaleOneIs) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string sock = "/tmp/magnet-admin2-" + std::to_string(getpid()) + ".sock";
  {  // A stale socket file: bound by a process that is gone.
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, sock.c_str(), sizeof sa.sun_path - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    close(fd);
  }
  child first(daemon_args(sock));
  ASSERT_TRUE(first.wait_for_stderr("[started]")) << first.stderr_text();
  auto second = run(daemon_args(sock), 30);
  EXPECT_EQ(second.status, 1);
  EXPECT_NE(second.err.find("another magnet host (pid " + std::to_string(first.pid()) + ") serves " + sock),
            std::string::npos)
      << second.err;
  auto top = run({MAGNET_BIN, "top", "--socket", sock, "--json", "--count", "1"});
  EXPECT_EQ(top.status, 0) << "the first daemon still answers: " << top.err;
  EXPECT_EQ(first.stop(SIGTERM), 0) << first.stderr_text();
}

TEST(AdminSocket, AcceptingGoesOnAfterAcceptErrors) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string sock = "/tmp/magnet-admin3-" + std::to_string(getpid()) + ".sock";
  child d(daemon_args(sock));
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  // Few fds left to the daemon: idle clients use them up, so accept fails.
  auto lim = run({"prlimit", "--pid", std::to_string(d.pid()), "--nofile=64:64"});
  ASSERT_EQ(lim.status, 0) << lim.err;
  struct fds {  // closed however the test ends
    std::vector<int> v;
    ~fds() { close_all(); }
    void close_all() {
      for (int fd : v) close(fd);
      v.clear();
    }
  } idle;
  for (int i = 0; i < 80; ++i) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, sock.c_str(), sizeof sa.sun_path - 1);
    ASSERT_GE(fd, 0);
    idle.v.push_back(fd);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0)
        << "client " << i << ": " << std::strerror(errno) << "\n" << d.stderr_text();
  }
  EXPECT_TRUE(d.wait_for_stderr("[admin.accept_error]")) << d.stderr_text();
  idle.close_all();
  // Idle clients are dropped after the deadline; then answers come again.
  bool answered = false;
  for (int i = 0; i < 40 && !answered; ++i) {
    auto top = run({MAGNET_BIN, "top", "--socket", sock, "--json", "--count", "1"}, 10);
    answered = top.status == 0;
    if (!answered) usleep(250000);
  }
  EXPECT_TRUE(answered) << d.stderr_text();
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
}

// The read-only group counts however the peer holds it: as a supplementary
// group too (SO_PEERGROUPS), not only as its primary group.  Such a member
// reads and cannot write; a peer whose supplementary groups are others is
// still a stranger.
TEST(AdminSocket, ASupplementaryMemberOfTheGroupReadsAndCannotWrite) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads probes, switches users)";
  const std::string sock = "/tmp/magnet-admin4-" + std::to_string(getpid()) + ".sock";
  auto args = daemon_args(sock);
  args.insert(args.end(), {"--socket-group", std::to_string(kReaders)});
  child d(args);
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  // Primary group nobody's, the readers' among three supplementary ones.
  const std::vector<gid_t> member = {100, kReaders, 4242};
  auto top = query_as(kNobody, kNobody, sock, "top", member);
  EXPECT_EQ(top.rfind("ok {", 0), 0u) << top;
  auto vms = query_as(kNobody, kNobody, sock, "vms", member);
  EXPECT_EQ(vms.rfind("ok [", 0), 0u) << vms;
  auto mark = query_as(kNobody, kNobody, sock, "mark g1 1", member);
  EXPECT_EQ(mark.rfind("error mark changes what a VM receives: root only", 0), 0u) << mark;
  auto other = query_as(kNobody, kNobody, sock, "top", {100, 4242});
  EXPECT_EQ(other.rfind("connect: Permission denied", 0), 0u) << "the file's mode: " << other;
  ASSERT_EQ(chmod(sock.c_str(), 0666), 0);
  other = query_as(kNobody, kNobody, sock, "top", {100, 4242});
  EXPECT_EQ(other.rfind("error permission denied", 0), 0u) << "the daemon's own check: " << other;
  EXPECT_EQ(d.stderr_text().find("[admin.groups]"), std::string::npos)
      << "this kernel has SO_PEERGROUPS: " << d.stderr_text();
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
}

// A libvirt test-driver node file (libvirt's test:// driver, inside the
// daemon) and the files the registry reads beside libvirt, removed however
// the test ends.
struct test_node {
  std::string path;
  std::vector<std::string> pid_files;
  ~test_node() {
    unlink(path.c_str());
    for (const auto& f : pid_files) unlink(f.c_str());
  }
  // @domains: the inner XML of each <domain type='test'>.
  void write(const std::vector<std::string>& domains) {
    std::ofstream f(path);
    f << "<node>";
    for (const auto& d : domains) f << "<domain type='test'>" << d << "</domain>";
    f << "</node>\n";
  }
  // The registry finds a VM's QEMU by libvirt's pid file.
  void pid_file(const std::string& name, pid_t pid) {
    test::run({"mkdir", "-p", "/run/libvirt/qemu"});
    const std::string f = "/run/libvirt/qemu/" + name + ".pid";
    std::ofstream(f) << pid << "\n";
    pid_files.push_back(f);
  }
};

std::string domain_xml(const std::string& name, const std::string& uuid, const std::string& devices = "") {
  return "<name>" + name + "</name><uuid>" + uuid +
         "</uuid><memory>1048576</memory><vcpu>1</vcpu><os><type>hvm</type></os><devices>" +
         devices + "</devices>";
}

nlohmann::json reply_json(const std::string& reply) {
  if (reply.rfind("ok ", 0) != 0) return nullptr;
  return nlohmann::json::parse(reply.substr(3), nullptr, false);
}

// The cgroup v2 mount, "" if none.
std::string cgroup2_mount() {
  std::ifstream m("/proc/self/mounts");
  std::string dev, dir, type, rest;
  while (m >> dev >> dir >> type && std::getline(m, rest))
    if (type == "cgroup2") return dir;
  return {};
}

// `vms` shows QEMU's PID, thread ids, taps' ifindexes, cgroups and the vsock
// CID to root only: a member of the read-only group gets the VM's id, name,
// UUID, libvirt id, its threads' roles and its taps' names; `sessions` its
// peer's CID to root only.  The VM is a test-driver domain with a vsock
// CID, a tap (lo) and a view channel; its "QEMU" a process of this test,
// in a cgroup of its own, named by libvirt's pid file and listening on the
// channel (so the delivery opens a session).
TEST(AdminSocket, VmsShowsHostInternalsToRootOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (loads probes, switches users)";
  const std::string id = std::to_string(getpid());
  const std::string sock = "/tmp/magnet-admin5-" + id + ".sock", name = "mgvms" + id;
  const std::string cg2 = cgroup2_mount();
  ASSERT_FALSE(cg2.empty()) << "no cgroup v2 hierarchy mounted";
  const std::string cg = cg2 + "/magnet-vms-" + id, chan = "/tmp/magnet-admin5-" + id + ".chan";
  child qemu({"/usr/bin/python3", "-c",
              "import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\n"
              "s.listen(4)\nprint('listening',file=sys.stderr,flush=True)\nc=[]\n"
              "while True:\n  c.append(s.accept())\n",
              chan});
  struct cleanup {
    std::string cg;
    child& q;
    std::string chan;
    ~cleanup() {
      q.stop(SIGKILL);
      rmdir(cg.c_str());
      unlink(chan.c_str());
    }
  } c{cg, qemu, chan};
  ASSERT_TRUE(qemu.wait_for_stderr("listening")) << qemu.stderr_text();
  ASSERT_EQ(mkdir(cg.c_str(), 0755), 0) << cg << ": " << std::strerror(errno);
  std::ofstream(cg + "/cgroup.procs") << qemu.pid() << "\n";
  test_node node{"/tmp/magnet-admin5-" + id + ".xml", {}};
  node.write({domain_xml(name, "5eed0000-0000-4000-8000-00000000000a",
                         "<interface type='ethernet'><target dev='lo'/></interface>"
                         "<vsock model='virtio'><cid auto='no' address='42'/></vsock>"
                         "<channel type='unix'><source mode='bind' path='" + chan +
                         "'/><target type='virtio' name='org.magnet.view.0'/></channel>")});
  node.pid_file(name, qemu.pid());
  child d({MAGNET_BIN, "-vv", "host", "--uri", "test://" + node.path, "--socket", sock, "--probes",
           "net.dev", "--vsock", "off", "--socket-group", std::to_string(kReaders), "--duration",
           "60"});
  ASSERT_TRUE(d.wait_for_stderr("[vm.up] " + name + " id 1 qemu pid " + std::to_string(qemu.pid())))
      << d.stderr_text();
  ASSERT_TRUE(d.wait_for_stderr("connected to view channel " + chan)) << d.stderr_text();

  // Root: everything the registry knows.
  auto root = reply_json(query_as(0, 0, sock, "vms"));
  ASSERT_TRUE(root.is_array() && root.size() == 1) << root;
  const auto& r = root[0];
  EXPECT_EQ(r.value("name", ""), name);
  EXPECT_EQ(r.value("qemu_pid", 0), qemu.pid());
  EXPECT_EQ(r.value("vsock_cid", 0u), 42u);
  ASSERT_TRUE(r.contains("threads") && r["threads"].size() == 1) << r;
  EXPECT_EQ(r["threads"][0].value("tid", 0), qemu.pid());
  ASSERT_TRUE(r.contains("taps") && r["taps"].size() == 1) << r;
  EXPECT_EQ(r["taps"][0].value("ifindex", 0), 1) << "lo";
  ASSERT_TRUE(r.contains("cgroups")) << r;
  EXPECT_NE(r["cgroups"].dump().find("/magnet-vms-" + id), std::string::npos) << r["cgroups"];

  // The read-only group: no PIDs, thread ids, ifindexes, cgroups or CID.
  const std::string text = query_as(kNobody, kReaders, sock, "vms");
  auto reader = reply_json(text);
  ASSERT_TRUE(reader.is_array() && reader.size() == 1) << text;
  const auto& v = reader[0];
  EXPECT_EQ(v.value("vm", 0), 1);
  EXPECT_EQ(v.value("name", ""), name);
  EXPECT_EQ(v.value("uuid", ""), "5eed0000-0000-4000-8000-00000000000a");
  EXPECT_TRUE(v.contains("libvirt_id")) << v;
  for (const char* k : {"qemu_pid", "vsock_cid", "cgroups"}) EXPECT_FALSE(v.contains(k)) << k << ": " << v;
  ASSERT_TRUE(v.contains("threads") && v["threads"].size() == 1) << v;
  EXPECT_EQ(v["threads"][0].value("role", ""), "emulator");
  EXPECT_FALSE(v["threads"][0].contains("tid")) << v;
  ASSERT_TRUE(v.contains("taps") && v["taps"].size() == 1) << v;
  EXPECT_EQ(v["taps"][0].value("name", ""), "lo");
  EXPECT_FALSE(v["taps"][0].contains("ifindex")) << v;
  EXPECT_EQ(text.find(std::to_string(qemu.pid())), std::string::npos) << "no PID anywhere: " << text;

  // sessions: the view channel's session, its peer for root only.
  auto rs = reply_json(query_as(0, 0, sock, "sessions"));
  ASSERT_TRUE(rs.is_object() && rs["sessions"].size() == 1) << rs;
  EXPECT_TRUE(rs["sessions"][0].contains("cid")) << rs;
  auto gs = reply_json(query_as(kNobody, kReaders, sock, "sessions"));
  ASSERT_TRUE(gs.is_object() && gs["sessions"].size() == 1) << gs;
  EXPECT_EQ(gs["sessions"][0].value("transport", ""), "virtio-serial") << gs;
  EXPECT_FALSE(gs["sessions"][0].contains("cid")) << gs;
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
}

// find_vm's rule (magnet/admin/vm_key.h): a key that names two VMs is an
// error that says so and names both, never the first one found.  libvirt's
// test driver takes any domain name: three domains named "1", "2" and "3",
// which the daemon numbers 1 to 3 in its own order, and one named like
// another's UUID.  id:, uuid: and name: say which field is meant.
TEST(AdminSocket, AKeyThatNamesTwoVmsIsRefusedAndNamesBoth) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to load probes";
  const std::string id = std::to_string(getpid());
  const std::string sock = "/tmp/magnet-admin6-" + id + ".sock";
  const std::string u1 = "5eed0000-0000-4000-8000-000000000001";
  test_node node{"/tmp/magnet-admin6-" + id + ".xml", {}};
  // UUIDs in the reverse order of the names, so that numbering by either
  // gives some domain named N another's id N.
  node.write({domain_xml("3", u1), domain_xml("2", "5eed0000-0000-4000-8000-000000000002"),
              domain_xml("1", "5eed0000-0000-4000-8000-000000000003"),
              domain_xml(u1, "5eed0000-0000-4000-8000-000000000004")});
  child d({MAGNET_BIN, "-vv", "host", "--uri", "test://" + node.path, "--socket", sock, "--probes",
           "net.dev", "--no-deliver", "--socket-group", std::to_string(kReaders), "--duration",
           "60"});
  ASSERT_TRUE(d.wait_for_stderr("[started]")) << d.stderr_text();
  nlohmann::json all;
  for (int i = 0; i < 100 && !(all.is_array() && all.size() == 4); ++i) {
    usleep(100000);
    all = reply_json(query_as(0, 0, sock, "vms"));
  }
  ASSERT_TRUE(all.is_array() && all.size() == 4) << all << d.stderr_text();
  std::map<std::string, int> id_of;     // name -> magnet id
  std::map<int, std::string> name_of;   // magnet id -> name
  for (const auto& v : all) {
    id_of[v.at("name").get<std::string>()] = v.at("vm").get<int>();
    name_of[v.at("vm").get<int>()] = v.at("name").get<std::string>();
  }
  // The numeric keys that are one VM's name and another's id.
  std::vector<std::string> shadowed;
  for (const std::string& n : std::vector<std::string>{"1", "2", "3"})
    if (id_of.at(n) != std::stoi(n) && name_of.count(std::stoi(n))) shadowed.push_back(n);
  ASSERT_FALSE(shadowed.empty()) << "the daemon numbered each domain N as N: " << all;

  auto stats_vm = [&](const std::string& key, uid_t uid, gid_t gid, std::vector<gid_t> groups) {
    auto j = reply_json(query_as(uid, gid, sock, "stats " + key, groups));
    return j.is_object() ? j.value("vm", -1) : -1;
  };
  for (const auto& n : shadowed) {
    SCOPED_TRACE("key " + n);
    const int by_id = std::stoi(n), by_name = id_of.at(n);
    const std::string want = "error '" + n + "' names 2 VMs:";
    for (const std::string& req : std::vector<std::string>{"stats ", "kvm ", "views ", "mark "}) {
      auto e = query_as(0, 0, sock, req + n + (req == "mark " ? " 1" : ""));
      EXPECT_EQ(e.rfind(want, 0), 0u) << req << e;
      EXPECT_NE(e.find("VM " + std::to_string(by_id) + " ('" + name_of.at(by_id) + "'"),
                std::string::npos) << e;
      EXPECT_NE(e.find("VM " + std::to_string(by_name) + " ('" + n + "'"), std::string::npos) << e;
      EXPECT_NE(e.find("by its magnet id"), std::string::npos) << e;
      EXPECT_NE(e.find("by its name"), std::string::npos) << e;
    }
    // The read-only group is told the same.
    auto e = query_as(kNobody, kNobody, sock, "stats " + n, {kReaders});
    EXPECT_EQ(e.rfind(want, 0), 0u) << e;
    // Each field by itself means one VM.
    EXPECT_EQ(stats_vm("id:" + n, 0, 0, {}), by_id);
    EXPECT_EQ(stats_vm("name:" + n, 0, 0, {}), by_name);
  }
  // A name that is another VM's UUID.
  auto e = query_as(0, 0, sock, "stats " + u1);
  EXPECT_EQ(e.rfind("error '" + u1 + "' names 2 VMs:", 0), 0u) << e;
  EXPECT_NE(e.find("VM " + std::to_string(id_of.at("3")) + " ('3', UUID " + u1 + ") by its UUID"),
            std::string::npos) << e;
  EXPECT_NE(e.find("VM " + std::to_string(id_of.at(u1)) + " ('" + u1 + "', UUID 5eed0000-0000-4000-8000-000000000004) by its name"),
            std::string::npos) << e;
  EXPECT_EQ(stats_vm("uuid:" + u1, 0, 0, {}), id_of.at("3"));
  EXPECT_EQ(stats_vm("name:" + u1, 0, 0, {}), id_of.at(u1));
  // One VM by several of its fields is no ambiguity; nothing is still nothing.
  EXPECT_EQ(stats_vm("5eed0000-0000-4000-8000-000000000004", kNobody, kNobody, {kReaders}), id_of.at(u1));
  auto none = query_as(0, 0, sock, "stats id:77");
  EXPECT_EQ(none.rfind("error no running VM named 'id:77'", 0), 0u) << none;
  EXPECT_EQ(d.stop(SIGTERM), 0) << d.stderr_text();
}

}  // namespace
}  // namespace magnet
