// The service unit against the code (no privileges): its
// CapabilityBoundingSet is exactly what the daemon may use
// (privileges.h); sd_notify's datagram reaches path and abstract sockets
// (magnet/service.h); magnet host's settings file (magnet/config_file.h,
// cmd_host.cc): every option a key, the shipped file naming them all,
// errors that name the file, the line and the key.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "magnet/config_file.h"
#include "magnet/daemon/privileges.h"
#include "magnet/service.h"
#include "proc.h"

namespace magnet {
namespace {

std::set<std::string> split(const std::string& s, char sep) {
  std::set<std::string> out;
  std::stringstream in(s);
  for (std::string w; std::getline(in, w, sep);)
    if (!w.empty()) out.insert(w);
  return out;
}

// The value of @key= in the unit file @path (the last such line).
std::string unit_value(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line, value;
  while (std::getline(f, line))
    if (line.rfind(key + "=", 0) == 0) value = line.substr(key.size() + 1);
  return value;
}

TEST(ServiceUnit, CapabilityBoundingSetIsEverythingTheDaemonMayUse) {
  const std::string unit = std::string(MAGNET_SOURCE_DIR) + "/packaging/systemd/magnet.service.in";
  const std::string in_unit = unit_value(unit, "CapabilityBoundingSet");
  ASSERT_FALSE(in_unit.empty()) << unit << " has no CapabilityBoundingSet";
  const std::string in_code = host::capability_names(host::daemon_capability_bound());
  EXPECT_EQ(split(in_unit, ' '), split(in_code, ','))
      << unit << ": " << in_unit << "\nprivileges.cc: " << in_code;
  // What the daemon keeps is within it, whatever the kernel and options.
  for (bool serial : {false, true})
    for (const auto& c : host::daemon_capabilities(serial))
      EXPECT_TRUE(host::daemon_capability_bound() >> c.cap & 1) << c.why;
}

// A datagram socket bound at @name ("@..." abstract), as systemd's.
struct notify_listener {
  int fd = -1;
  explicit notify_listener(const std::string& name) {
    fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    name.copy(a.sun_path, sizeof a.sun_path - 1);
    if (name[0] == '@') a.sun_path[0] = '\0';
    else ::unlink(name.c_str());
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) ADD_FAILURE() << "bind " << name;
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~notify_listener() { ::close(fd); }
  std::string receive() {
    char b[512];
    ssize_t n = ::recv(fd, b, sizeof b, 0);
    return n < 0 ? "recv: " + std::string(std::strerror(errno)) : std::string(b, static_cast<size_t>(n));
  }
};

TEST(NotifyServiceManager, SendsToAPathSocket) {
  const std::string path = "/tmp/magnet-notify-" + std::to_string(getpid()) + ".sock";
  notify_listener l(path);
  auto s = notify_service_manager("READY=1", path.c_str());
  ASSERT_TRUE(s) << s.err().message;
  EXPECT_EQ(l.receive(), "READY=1");
  ::unlink(path.c_str());
}

TEST(NotifyServiceManager, SendsToAnAbstractSocket) {
  const std::string name = "@magnet-notify-test-" + std::to_string(getpid());
  notify_listener l(name);
  auto s = notify_service_manager("STOPPING=1", name.c_str());
  ASSERT_TRUE(s) << s.err().message;
  EXPECT_EQ(l.receive(), "STOPPING=1");
}

TEST(NotifyServiceManager, NothingToDoWithoutASocketAndOtherAddressesRefused) {
  EXPECT_TRUE(notify_service_manager("READY=1", nullptr));
  EXPECT_TRUE(notify_service_manager("READY=1", ""));
  auto v = notify_service_manager("READY=1", "vsock:2:1234");
  ASSERT_FALSE(v);
  EXPECT_NE(v.err().message.find("not a unix socket path or @abstract name"), std::string::npos)
      << v.err().message;
  auto gone = notify_service_manager("READY=1", "/nonexistent/notify");
  ASSERT_FALSE(gone);
  EXPECT_NE(gone.err().message.find("/nonexistent/notify"), std::string::npos) << gone.err().message;
}


TEST(ConfigFile, KeyValueLinesAndTheLineOfEachError) {
  auto c = parse_config("# settings\n\n  uri = test:///default \nlink=a@ns=1gbit\n\t# more\nx.y_z-1 = #1\n", "F");
  ASSERT_TRUE(c) << c.err().message;
  ASSERT_EQ(c->size(), 3u);
  EXPECT_EQ((*c)[0].key, "uri");
  EXPECT_EQ((*c)[0].value, "test:///default");
  EXPECT_EQ((*c)[0].line, 3);
  EXPECT_EQ((*c)[1].value, "a@ns=1gbit") << "everything after the first '='";
  EXPECT_EQ((*c)[2].value, "#1") << "a '#' inside a value is the value's";
  EXPECT_EQ((*c)[2].line, 6);
  const std::pair<const char*, const char*> bad[] = {
      {"uri = a\njust words\n", "F:2: 'just words' is not 'key = value'"},
      {" = v\n", "F:1: no key before '='"},
      {"\n\nbuffer =  \n", "F:3: buffer: no value after '='"},
      {"a key = v\n", "F:1: 'a key' is not a key"},
  };
  for (const auto& [text, why] : bad) {
    auto r = parse_config(text, "F");
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.err().message.rfind(why, 0), 0u) << r.err().message;
  }
  auto missing = load_config("/nonexistent/magnet.conf");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.err().message.find("/nonexistent/magnet.conf: No such file"), std::string::npos);
}

const std::string kDir = "/tmp/magnet-config-test-" + std::to_string(getpid());

std::string write_conf(const std::string& name, const std::string& text, mode_t mode = 0644) {
  ::mkdir(kDir.c_str(), 0755);
  const std::string p = kDir + "/" + name;
  std::ofstream(p, std::ios::trunc) << text;
  ::chmod(p.c_str(), mode);
  return p;
}

// magnet host with @conf, stopped before it would run: --check-views needs
// the settings read and checked first, and no privileges.
test::run_result check(const std::string& conf, std::vector<std::string> more = {}) {
  const std::string views = write_conf("views.yaml", "views:\n  - name: a\n    filter: \"event == net.dev.recv\"\n    per_vm: true\n");
  std::vector<std::string> argv = {MAGNET_BIN, "host", "--config", conf};
  argv.insert(argv.end(), more.begin(), more.end());
  argv.push_back("--check-views");
  argv.push_back(views);
  return test::run(argv, 20);
}

// The long options `magnet host --help` describes, but those that print
// and exit, --help and --config: what the settings file may set.
std::set<std::string> host_settings() {
  auto h = test::run({MAGNET_BIN, "host", "--help"}, 10);
  std::set<std::string> out;
  std::regex opt(R"(^ +(?:-\w, )?--([a-z-]+))");
  std::stringstream in(h.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, opt)) out.insert(m[1]);
  }
  for (const char* action : {"help", "config", "check-views", "print-default-views", "list-metrics", "json"})
    out.erase(action);
  return out;
}

TEST(ConfigFile, EveryOptionOfHostIsAKeyAndTheShippedFileNamesThemAll) {
  const std::set<std::string> options = host_settings();
  ASSERT_GT(options.size(), 15u) << "the help's option lines were not found";
  // The shipped file: each setting once, commented out (its default, or an example).
  std::ifstream f(std::string(MAGNET_SOURCE_DIR) + "/packaging/magnet.conf");
  std::set<std::string> shipped;
  std::string all;
  std::regex line_re(R"(^#([a-z-]+) = (.*)$)");
  for (std::string line; std::getline(f, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) continue;
    EXPECT_TRUE(shipped.insert(m[1]).second) << m[1] << " twice";
    std::string value = m[2];
    if (m[1] == "http-tokens") value = write_conf("tokens", "tok-0123456789abcdef all\n", 0600);
    if (m[1] == "power-model") value = write_conf("power-model.conf", "idle = 86\nfull = 117\n");
    all += std::string(m[1]) + " = " + value + "\n";
  }
  EXPECT_EQ(shipped, options) << "packaging/magnet.conf against magnet host --help";
  // Every line of it taken as it stands (uncommented) is accepted.
  auto r = check(write_conf("all.conf", all));
  EXPECT_EQ(r.status, 0) << all << r.err;
}

TEST(ConfigFile, UnknownKeysAndBadValuesExitTwoNamingTheFileTheLineAndTheKey) {
  const std::string tokens = write_conf("tokens-open", "tok-0123456789abcdef all\n", 0644);
  const std::pair<std::string, std::string> bad[] = {
      {"uri = test:///default\nbufer = 16M\n", ":2: unknown key 'bufer'"},
      {"# c\n\nbuffer = 12Q\n", ":3: buffer = 12Q: --buffer: "},
      {"buffer = 5000\n", ":1: buffer = 5000: --buffer: 5000 is not a power of two"},
      {"vsock = maybe\n", ":1: vsock = maybe: --vsock: 'maybe' is not auto, on or off"},
      {"no-deliver = perhaps\n", ":1: no-deliver: 'perhaps' is not yes or no"},
      {"probes = net.dev,nosuch\n", ":1: probes = net.dev,nosuch: --probes: "},
      {"socket = /a\nsocket = /b\n", ":2: 'socket' set again (first on line 1)"},
      {"http = 127.0.0.1:80\nhttp-stream-interval = 5ms\n", ":2: http-stream-interval = 5ms: "},
      {"http = 127.0.0.1:80\nhttp-tokens = " + tokens + "\n", ":2: http-tokens = " + tokens + ": "},
      {"link = eth0=fast\n", ":1: link = eth0=fast: --link: "},
      {"vm-quota = -1\n", ":1: vm-quota = -1: "},
      {"sample = vmnet.queue=1ms\n", ":1: sample = vmnet.queue=1ms: --sample: 'vmnet.queue=1ms': the daemon samples by count only"},
      {"power-model = " + kDir + "/none.model\n",
       ":1: power-model = " + kDir + "/none.model: --power-model: " + kDir + "/none.model: No such file"},
      {"just words\n", ":1: 'just words' is not 'key = value'"},
  };
  int n = 0;
  for (const auto& [text, why] : bad) {
    const std::string conf = write_conf("bad" + std::to_string(n++) + ".conf", text);
    auto r = check(conf);
    EXPECT_EQ(r.status, 2) << text << r.err;
    EXPECT_NE(r.err.find(conf + why), std::string::npos) << text << "\n" << r.err;
  }
  auto missing = check(kDir + "/none.conf");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("--config: " + kDir + "/none.conf: No such file"), std::string::npos) << missing.err;
}

TEST(ConfigFile, TheCommandLineOverridesTheFile) {
  // Refused as the file has it (HTTP beyond loopback without tokens)...
  const std::string conf = write_conf("wide.conf", "http = 0.0.0.0:9477\nvsock = on\n");
  auto r = check(conf);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("not a loopback address"), std::string::npos) << r.err;
  // ... accepted with the command line's address instead.
  r = check(conf, {"--http", "127.0.0.1:0"});
  EXPECT_EQ(r.status, 0) << r.err;
  // A bad value given on the command line is the command line's error.
  r = check(conf, {"--http", "127.0.0.1:0", "--vsock", "maybe"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--vsock: 'maybe'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(conf), std::string::npos) << r.err;
  // /dev/null: no settings at all.
  EXPECT_EQ(check("/dev/null").status, 0);
}

}  // namespace
}  // namespace magnet
