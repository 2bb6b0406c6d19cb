// VM awareness end to end, in the direct lab: the registry against a real
// libvirtd and real domains, and the host daemon's per-VM views against
// real guest traffic measured by iperf3 itself.  Two guests: g1
// (10.77.0.11) and g2 (10.77.0.12), so that a view can be checked to hold
// only its own VM's traffic.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <future>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lab_fixture.h"
#include "magnet/registry/registry.h"

namespace magnet::e2e {
namespace {
namespace fs = std::filesystem;

const std::map<std::string, std::string> kGuestAddr = {{"g1", "10.77.0.11"}, {"g2", "10.77.0.12"}};

pid_t pid_of(const std::string& domain) {
  return static_cast<pid_t>(std::atoi(ReadFileText("/run/libvirt/qemu/" + domain + ".pid").c_str()));
}

// The connection rows of @view in a views reply whose label is a flow
// ("A:P > B:Q proto"), by label.
std::map<std::string, nlohmann::json> FlowRows(const nlohmann::json& reply, const std::string& view) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& v : reply)
    if (v.at("view") == view)
      for (const auto& g : v.at("groups"))
        if (g.at("by") == "connection")
          for (const auto& r : g.at("rows"))
            if (r.at("label").get<std::string>().find(" > ") != std::string::npos)
              out[r.at("label").get<std::string>()] = r;
  return out;
}

// Every flow row in any view of a VM's reply has the VM's own address at
// one of its ends (the addresses are the records' own, not the vm field the
// engine sets); returns the number of flow rows.
int ExpectOnlyFlowsOf(const nlohmann::json& reply, const std::string& addr) {
  static const std::regex flow(R"(^([0-9.]+):\d+ > ([0-9.]+):\d+ \S+$)");
  int n = 0;
  for (const auto& v : reply)
    for (const auto& g : v.at("groups"))
      if (g.at("by") == "connection")
        for (const auto& r : g.at("rows")) {
          const std::string label = r.at("label");
          std::smatch m;
          if (!std::regex_match(label, m, flow)) continue;
          ++n;
          EXPECT_TRUE(m[1] == addr || m[2] == addr)
              << "view " << v.at("view") << ": flow " << label << " is not " << addr << "'s";
        }
  return n;
}

// Records what the registry hands to the kernel maps.
struct recording_tagger : host::vm_tagger {
  std::mutex mu;
  std::vector<host::vm_info> changed;
  std::vector<uint32_t> gone;
  void vm_changed(const host::vm_info& vm) override {
    std::lock_guard lk(mu);
    changed.push_back(vm);
  }
  void vm_gone(uint32_t id) override {
    std::lock_guard lk(mu);
    gone.push_back(id);
  }
};

class VmAwarenessDirect : public TwoGuestDirectSuite {
 protected:
  static std::string magnet() { return BuildDir() + "/host/magnet"; }
};

std::optional<host::vm_info> find_vm(const std::vector<host::vm_info>& vms, const std::string& name) {
  for (const auto& vm : vms)
    if (vm.name == name) return vm;
  return std::nullopt;
}

TEST_F(VmAwarenessDirect, RegistryMapsTheRunningDomainsToTheirProcessThreadsAndTaps) {
  recording_tagger tagger;
  host::registry reg("qemu:///system", tagger);
  auto s = reg.reconcile();
  ASSERT_TRUE(s) << s.err().message;
  auto vms = reg.vms();
  ASSERT_EQ(vms.size(), 2u);
  std::set<uint32_t> ids;
  std::set<int> taps;
  for (const std::string name : {"g1", "g2"}) {
    SCOPED_TRACE(name);
    const auto vm = find_vm(vms, name);
    ASSERT_TRUE(vm) << "no VM named " << name;
    EXPECT_EQ(vm->uuid.size(), 36u);
    EXPECT_GE(vm->vm_id, 1u);
    ids.insert(vm->vm_id);
    EXPECT_EQ(vm->qemu_pid, pid_of(name)) << "QEMU process found through libvirt";
    int vcpus = 0;
    for (const auto& t : vm->threads)
      if (t.role == "vcpu") {
        ++vcpus;
        EXPECT_EQ(t.vcpu, 0);
        EXPECT_NE(t.comm.find("/TCG"), std::string::npos) << t.comm;
      }
    EXPECT_EQ(vcpus, 1) << "one vCPU thread";
    ASSERT_EQ(vm->taps.size(), 1u);
    EXPECT_GT(vm->taps[0].ifindex, 0) << "tap " << vm->taps[0].name << " resolved in QEMU's netns";
    taps.insert(vm->taps[0].ifindex);
    EXPECT_FALSE(vm->cgroups.empty());
  }
  EXPECT_EQ(ids.size(), 2u) << "one magnet id per VM";
  EXPECT_EQ(taps.size(), 2u) << "one tap per VM";
  std::lock_guard lk(tagger.mu);
  ASSERT_EQ(tagger.changed.size(), 2u);
  for (const auto& c : tagger.changed) {
    const auto vm = find_vm(vms, c.name);
    ASSERT_TRUE(vm) << c.name;
    EXPECT_EQ(c, *vm) << "the same mapping goes to the kernel maps";
  }
}

// magnet host in the background, ended by PID (waiting for its exit) when
// the test ends, however it ends (its own --duration, @duration_s or a whole
// test's bound, only ends one a dead test left behind); the constructor
// waits until the registry knows every lab guest.
struct daemon_run {
  std::string magnet, sock, log, top;
  std::unique_ptr<Background> proc;
  daemon_run(const std::string& magnet_bin, const std::string& name, const std::string& extra = "",
             int duration_s = LabBounds().Test())
      : magnet(magnet_bin) {
    sock = "/tmp/magnet-e2e-" + name + "-" + std::to_string(getpid()) + ".sock";
    log = ArtifactDir(::testing::UnitTest::GetInstance()->current_test_suite()->name() +
                      std::string(".") + name) +
          "/host.log";
    proc = std::make_unique<Background>(magnet + " -v host --socket " + sock + " --duration " +
                                            std::to_string(duration_s) + " " + extra,
                                        log);
    WaitFor(
        [&] {
          auto r = Top();
          if (r.status != 0) return false;
          for (const auto& [g, addr] : kGuestAddr)
            if (r.out.find("\"name\":\"" + g + "\"") == std::string::npos) return false;
          top = r.out;
          return true;
        },
        LabBounds().Ready());
  }
  ProcResult Top() const {
    return RunProcess({magnet, "top", "--socket", sock, "--json", "--count", "1"}, LabBounds().Quick());
  }
  ProcResult Query(const std::string& what, const std::string& arg = "") const {
    std::vector<std::string> argv = {magnet, what};
    if (!arg.empty()) argv.push_back(arg);
    for (const char* a : {"--socket", sock.c_str(), "--json"}) argv.push_back(a);
    return RunProcess(argv, LabBounds().Quick());
  }
  // A VM's row of a `magnet top --json` reply (null when absent).
  nlohmann::json TopRow(const std::string& name) const {
    auto r = Top();
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (r.status != 0 || j.is_discarded() || !j.contains("vms")) return nullptr;
    for (const auto& v : j["vms"])
      if (v.value("name", "") == name) return v;
    return nullptr;
  }
  ProcResult Views(const std::string& vm) const {
    return RunProcess({magnet, "views", "--vm", vm, "--socket", sock, "--json"}, LabBounds().Quick());
  }
  // The VM's views once its records have stopped arriving: two replies in a
  // row (0.5 s apart) with the same number of records per view; bounded by
  // a quick step (then the last reply).  Fails the test when no reply parses.
  nlohmann::json SettledViews(const std::string& vm) const {
    nlohmann::json last;
    std::vector<uint64_t> prev;
    WaitFor(
        [&] {
          auto r = Views(vm);
          if (r.status != 0) return false;
          auto j = nlohmann::json::parse(r.out, nullptr, false);
          if (j.is_discarded()) return false;
          std::vector<uint64_t> counts;
          for (const auto& v : j) counts.push_back(v.at("matched").get<uint64_t>());
          last = j;
          bool same = counts == prev;
          prev = counts;
          return same;
        },
        LabBounds().Quick(), 500);
    EXPECT_FALSE(last.is_null()) << "no views reply for " << vm << " from the daemon";
    return last.is_null() ? nlohmann::json::array() : last;
  }
  int vm_id(const std::string& name) const {
    std::smatch m;
    if (!std::regex_search(top, m, std::regex("\\{\"vm\":(\\d+),\"name\":\"" + name + "\"")))
      return -1;
    return std::stoi(m[1]);
  }
};

// Both guests send UDP at once, at different rates, to the lab network's
// host side; each VM's view holds its own flow at the rate iperf3's server
// measured, and only flows with that VM's address at one end.
TEST_F(VmAwarenessDirect, DaemonPerVmViewsMatchIperf3AndHoldOnlyThatVmsFlows) {
  daemon_run d(magnet(), "daemon");
  ASSERT_FALSE(d.top.empty()) << ReadFileText(d.log);
  struct guest {
    std::string name;
    int port;
    const char* rate;
    int vm = -1;
    std::string json;
  };
  std::vector<guest> gs = {{"g1", 5601, "20M"}, {"g2", 5602, "5M"}};
  {
    auto top = nlohmann::json::parse(d.top);
    for (auto& g : gs) {
      g.vm = d.vm_id(g.name);
      ASSERT_GT(g.vm, 0) << d.top;
      bool found = false;
      for (const auto& r : top.at("vms"))
        if (r.at("name") == g.name) {
          found = true;
          EXPECT_EQ(r.at("vcpus").get<int>(), 1) << d.top;
        }
      EXPECT_TRUE(found) << g.name << " in " << d.top;
    }
    ASSERT_NE(gs[0].vm, gs[1].vm);
  }

  // iperf3's servers report what they received.
  std::vector<std::unique_ptr<Background>> servers;
  for (auto& g : gs) {
    g.json = "/tmp/magnet-e2e-iperf-" + g.name + "-" + std::to_string(getpid()) + ".json";
    ::unlink(g.json.c_str());
    servers.push_back(std::make_unique<Background>(
        "ip netns exec magnetlab timeout " + std::to_string(bounds().Linger(5)) + " iperf3 -s -1 -B 10.77.0.1 -p " +
            std::to_string(g.port) + " -J",
        g.json));
    ASSERT_TRUE(WaitFor([&] { return Listening("magnetlab", g.port); }, bounds().Ready()))
        << "iperf3 server on port " << g.port;
  }
  auto client = [&](const guest& g) {
    return lab()->Run(g.name, "iperf3 -c 10.77.0.1 -p " + std::to_string(g.port) + " -u -b " + g.rate +
                                  " -l 1400 -t 5 >/dev/null 2>&1; echo rc=$?",
                      bounds().Work(5));
  };
  auto second = std::async(std::launch::async, client, gs[1]);
  auto first = client(gs[0]);
  for (const auto& c : {first, second.get()}) {
    ASSERT_EQ(c.status, 0) << c.Describe();
    ASSERT_NE(c.out.find("rc=0"), std::string::npos) << c.Describe();
  }
  for (auto& g : gs) {
    SCOPED_TRACE(g.name);
    double iperf_bps = -1;
    WaitFor([&] { return (iperf_bps = IperfReceivedBitsPerSecond(ReadFileText(g.json))) > 0; }, bounds().Quick());
    ASSERT_GT(iperf_bps, 1e6) << ReadFileText(g.json).substr(0, 2000);

    auto views = d.SettledViews(g.name);
    const std::string& me = kGuestAddr.at(g.name);
    // Every flow in this VM's views is its own (and some are there).
    EXPECT_GT(ExpectOnlyFlowsOf(views, me), 0) << views.dump().substr(0, 3000);
    for (const auto& v : views) EXPECT_EQ(v.at("vm").get<int>(), g.vm);
    const std::string label = me + ":";
    const std::string to = " > 10.77.0.1:" + std::to_string(g.port) + " udp";
    double flow = -1;
    for (const auto& [l, row] : FlowRows(views, "guest-tx"))
      if (l.starts_with(label) && l.ends_with(to)) flow = row.at("bandwidth_bps").get<double>();
    ASSERT_GT(flow, 0) << "no flow " << me << ":* >" << to << " in " << g.name << "'s guest-tx view: "
                       << views.dump().substr(0, 3000);
    // Bytes at the tap include the IP and UDP headers: 28 of 1428 per datagram.
    const double view_bps = flow * 8 * 1400.0 / 1428.0;
    EXPECT_NEAR(view_bps / iperf_bps, 1.0, 0.05)
        << "view " << view_bps / 1e6 << " Mbit/s vs iperf3 " << iperf_bps / 1e6 << " Mbit/s";
    std::printf("[e2e] %s guest-tx flow: view %.3f Mbit/s, iperf3 %.3f Mbit/s\n", g.name.c_str(),
                view_bps / 1e6, iperf_bps / 1e6);
    RecordProperty(g.name + "_iperf3_mbps", std::to_string(iperf_bps / 1e6));
    RecordProperty(g.name + "_view_mbps", std::to_string(view_bps / 1e6));
    ::unlink(g.json.c_str());
  }
}

// A network namespace standing for the wire behind the lab's bridge: a veth
// from the bridge into it, with @addr there; gone with this object.
struct wire_ns {
  std::string ns, va, vb;  // vb: the end inside ns
  bool ok = false;
  std::string why;
  wire_ns(const std::string& prefix, const std::string& addr) {
    const std::string tag = std::to_string(getpid() % 100000);
    ns = prefix + tag;
    va = prefix + "a" + tag;  // 15 characters at most: a prefix of up to 7
    vb = prefix + "b" + tag;
    auto r = RunProcess({"sh", "-c",
                         "set -e; ip netns add " + ns + "; ip -n magnetlab link add " + va +
                             " type veth peer name " + vb + " netns " + ns +
                             "; ip -n magnetlab link set " + va + " master magbr0 up; ip -n " + ns +
                             " addr add " + addr + "/24 dev " + vb + "; ip -n " + ns + " link set " + vb +
                             " up; ip -n " + ns + " link set lo up"},
                        LabBounds().Quick());
    ok = r.status == 0;
    why = r.Describe();
  }
  ~wire_ns() {
    RunProcess({"ip", "-n", "magnetlab", "link", "del", va}, LabBounds().Quick());
    RunProcess({"ip", "netns", "del", ns}, LabBounds().Quick());
  }
  wire_ns(const wire_ns&) = delete;
  wire_ns& operator=(const wire_ns&) = delete;
};

// The host side of a VM's network path: every packet the host forwards
// between the VM's tap and another device (here a veth into a namespace
// standing for the wire) gets a vmnet.queue record of that VM, and a guest
// that stops taking packets has them dropped on its tap, counted per VM
// exactly as the tap's own tx_dropped counter.
TEST_F(VmAwarenessDirect, HostQueueingAndTapDropsAreAttributedToTheVm) {
  // No per-VM stream quota: the flood below is far over the default one,
  // and this test counts every drop record (HardeningDirect tests the quota).
  // g1's own tap (g2 has one on the same bridge), and a view of the drops
  // on it next to the default ones: the default "drops" view also holds g1's
  // packets dropped past its tap (e.g. a late segment of the flows below
  // that the host's stack refuses), which the tap's counter does not count.
  auto ifl = RunProcess({"virsh", "-q", "-c", "qemu:///system", "domiflist", "g1"}, bounds().Quick());
  ASSERT_EQ(ifl.status, 0) << ifl.Describe();
  std::smatch tm;
  ASSERT_TRUE(std::regex_search(ifl.out, tm, std::regex(R"(^\s*(vnet\d+)\s)"))) << ifl.out;
  const std::string tap = tm[1];
  auto tap_index =
      RunProcess({"ip", "netns", "exec", "magnetlab", "cat", "/sys/class/net/" + tap + "/ifindex"}, bounds().Quick());
  ASSERT_EQ(tap_index.status, 0) << tap_index.Describe();
  const std::string views_file = ArtifactDir("VmAwarenessDirect.vmnet") + "/views.yaml";
  {
    auto defaults = RunProcess({magnet(), "host", "--print-default-views"}, bounds().Quick());
    ASSERT_EQ(defaults.status, 0) << defaults.Describe();
    std::ofstream f(views_file);
    f << defaults.out << "  - name: tap-drops\n    filter: \"event == net.drop and ifindex == "
      << Trim(tap_index.out) << "\"\n    per_vm: true\n    windows: [{ms: 1000}]\n";
  }
  daemon_run d(magnet(), "vmnet", "--vm-quota 0 --views " + views_file);
  ASSERT_FALSE(d.top.empty()) << ReadFileText(d.log);
  const int vm = d.vm_id("g1");
  ASSERT_GT(vm, 0) << d.top;
  const wire_ns wire("magwire", "10.77.0.250");
  ASSERT_TRUE(wire.ok) << wire.why;
  const std::string &ns = wire.ns, &vb = wire.vb;

  // g1's queueing statistics in a `magnet top` reply; fails the test when
  // the reply does not parse or has no g1.
  auto g1_of = [](const std::string& top) {
    auto j = nlohmann::json::parse(top, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << top;
    if (!j.is_discarded())
      for (const auto& r : j.at("vms"))
        if (r.at("name") == "g1") return r;
    ADD_FAILURE() << "no VM named g1 in " << top;
    return nlohmann::json();
  };

  // Guest -> wire, then wire -> guest (-R), 4 Mbit/s of 1000-byte datagrams.
  // The first runs in the background so that the daemon's in-kernel
  // queueing statistics can be read while it sends.
  nlohmann::json mid;
  for (std::string dir : {"", " -R"}) {
    SCOPED_TRACE("iperf3" + dir);
    Background srv("ip netns exec " + ns + " timeout " + std::to_string(bounds().Linger(4)) + " iperf3 -s -1 -p 5611",
                   "/dev/null");
    ASSERT_TRUE(WaitFor([&] { return Listening(ns, 5611); }, bounds().Ready())) << "iperf3 server in " << ns;
    const std::string run = "iperf3 -c 10.77.0.250 -p 5611 -u -b 4M -l 1000 -t 4" + dir;
    if (dir.empty()) {
      auto bg = lab()->Run("g1", "rm -f /tmp/magnet-q.rc; (sh -c '" + run +
                                     " >/dev/null 2>&1; echo rc=$? >/tmp/magnet-q.rc' >/dev/null 2>&1 &)");
      ASSERT_EQ(bg.status, 0) << bg.Describe();
      // While it sends: 500 datagrams/s through the host's queue.
      WaitFor(
          [&] {
            auto t = d.Top();
            EXPECT_EQ(t.status, 0) << t.Describe();
            if (t.status != 0) return true;
            mid = g1_of(t.out);
            return mid.is_null() || mid.at("queue_tx_per_s").get<double>() > 250;
          },
          bounds().Work(4), 500);
      std::string rc;
      ASSERT_TRUE(WaitFor([&] { return (rc = lab()->Run("g1", "cat /tmp/magnet-q.rc 2>/dev/null").out)
                                           .find("rc=") != std::string::npos; },
                          bounds().Work(4), 500))
          << "the background iperf3 in g1 did not end";
      EXPECT_NE(rc.find("rc=0"), std::string::npos) << rc;
    } else {
      auto c = lab()->Run("g1", run + " >/dev/null 2>&1; echo rc=$?", bounds().Work(4));
      ASSERT_NE(c.out.find("rc=0"), std::string::npos) << c.Describe();
    }
  }
  ASSERT_FALSE(mid.is_null());
  {
    // 500 datagrams/s; the delay is the host's forwarding: well under 100 ms.
    EXPECT_GT(mid.at("queue_tx_per_s").get<double>(), 250) << mid;
    EXPECT_GT(mid.at("queue_tx_us").get<double>(), 0) << mid;
    EXPECT_LT(mid.at("queue_tx_us").get<double>(), 100000) << mid;
    EXPECT_GE(mid.at("queue_tx_p99_us").get<double>(), mid.at("queue_tx_us").get<double>() / 2) << mid;
    std::printf("[e2e] g1 host queueing guest->wire: %.1f pkt/s, mean %.1f us, p99 %.1f us\n",
                mid.at("queue_tx_per_s").get<double>(), mid.at("queue_tx_us").get<double>(),
                mid.at("queue_tx_p99_us").get<double>());
  }
  auto views = d.SettledViews("g1");
  auto queued = ConnectionEvents(views.dump(), "host-queue", vm);
  int checked = 0;
  for (std::string v : {"guest-tx", "guest-rx"}) {
    SCOPED_TRACE(v);
    // The flows of this test: those with >= 1000 packets at the tap.
    for (const auto& [id, n] : ConnectionEvents(views.dump(), v, vm)) {
      if (n < 1000) continue;
      ++checked;
      EXPECT_EQ(queued[id], n) << "flow " << id
                               << ": every packet between the tap and the wire is queued once";
    }
  }
  EXPECT_EQ(checked, 2) << "one flow each way of at least 1000 packets. " << views.dump().substr(0, 3000);
  EXPECT_GT(ExpectOnlyFlowsOf(views, kGuestAddr.at("g1")), 0);

  // Drops: the guest takes its link down, so its virtio queue and then the
  // tap's queue fill; the host keeps sending to its (static) address.
  auto mac = lab()->Run("g1", "cat /sys/class/net/eth0/address");
  ASSERT_EQ(mac.status, 0) << mac.Describe();
  const std::string g1_mac = Trim(mac.out);
  ASSERT_EQ(g1_mac.size(), 17u) << g1_mac;
  const std::string dropped_path = "/sys/class/net/" + tap + "/statistics/tx_dropped";
  auto tx_dropped = [&] {
    auto r = RunProcess({"ip", "netns", "exec", "magnetlab", "cat", dropped_path}, bounds().Quick());
    EXPECT_EQ(r.status, 0) << r.Describe();
    return r.status == 0 ? std::stol(Trim(r.out)) : -1L;
  };
  // Records so far, per view ("drops": all of g1's; "tap-drops": on its tap).
  auto matched_of = [](const nlohmann::json& snaps) {
    std::map<std::string, uint64_t> m;
    for (const auto& v : snaps)
      if (v.at("view") == "drops" || v.at("view") == "tap-drops")
        m[v.at("view").get<std::string>()] = v.at("matched").get<uint64_t>();
    return m;
  };
  // Both baselines while the link is up and the views settled: a packet the
  // host sends g1 between its link going down and a later read of the
  // counter (a late segment of the flows above) would be in the records but
  // not in the counter's difference.  And the two from one moment: the
  // counter read before and after a settled snapshot, again until it did not
  // move in between (a drop between the two was once counted by the records
  // only: 3768 against 3767).
  std::map<std::string, uint64_t> matched_before;
  long before = tx_dropped();
  for (int i = 0; i < 5; ++i) {
    auto snap = d.SettledViews("g1");
    const long again = tx_dropped();
    matched_before = matched_of(snap);
    if (again == before) break;
    before = again;
  }
  ASSERT_EQ(matched_before.size(), 2u) << "no drops or tap-drops view for g1: " << views.dump().substr(0, 2000);
  ASSERT_GE(before, 0);
  auto down = lab()->Run("g1", "ip link set eth0 down; echo ok");
  ASSERT_EQ(down.status, 0) << down.Describe();
  struct link_up {  // whatever happens below
    Lab* lab;
    ~link_up() { lab->Run("g1", "ip link set eth0 up"); }
  } up{lab()};
  auto flood = RunProcess(
      {"ip", "netns", "exec", ns, "python3", "-c",
       "import socket,subprocess\n"
       "subprocess.run(['ip','neigh','replace','10.77.0.11','lladdr','" + g1_mac +
           "','dev','" + vb + "','nud','permanent'],check=True)\n"
       "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
       "for i in range(5000): s.sendto(b'x'*200,('10.77.0.11',9))\n"},
      bounds().Quick());
  ASSERT_EQ(flood.status, 0) << flood.Describe();
  // Until the tap's counter stops moving.
  long after = before, prev = -1;
  WaitFor([&] { prev = after; after = tx_dropped(); return after == prev; }, bounds().Quick(), 300);
  auto up_again = lab()->Run("g1", "ip link set eth0 up; echo ok");
  EXPECT_EQ(up_again.status, 0) << up_again.Describe();
  // The end like the baselines: the counter read after a settled snapshot
  // until it did not move in between (a drop after the read above, before
  // the snapshot, was once in the records only: 3771 against 3770).
  nlohmann::json v2;
  for (int i = 0; i < 5; ++i) {
    v2 = d.SettledViews("g1");
    const long again = tx_dropped();
    if (again == after) break;
    after = again;
  }
  ASSERT_GT(after - before, 500) << "the tap dropped too little to test: " << before << " -> " << after;
  for (const auto& v : v2) EXPECT_EQ(v.at("vm").get<int>(), vm);
  auto matched = matched_of(v2);
  const long on_tap = static_cast<long>(matched["tap-drops"] - matched_before["tap-drops"]);
  const long all = static_cast<long>(matched["drops"] - matched_before["drops"]);
  EXPECT_EQ(on_tap, after - before) << "net.drop records of g1 on its tap vs the tap's tx_dropped";
  // Elsewhere on its path: a handful at most (late segments), never the flood.
  EXPECT_GE(all, on_tap);
  EXPECT_LE(all - on_tap, 10) << "g1's drops past its tap";
  std::printf("[e2e] tap %s dropped %ld, net.drop records of g1 on it: %ld (%ld past it)\n", tap.c_str(),
              after - before, on_tap, all - on_tap);
}

// Block I/O per VM: a disk hot-plugged into g1 with cache=none, so QEMU
// writes it with O_DIRECT and the host's block requests are issued by g1's
// QEMU.  Completions (interrupt context) are attributed to the submitter.
TEST_F(VmAwarenessDirect, BlockIoOfTheGuestIsAttributedToIt) {
  daemon_run d(magnet(), "blk");
  ASSERT_FALSE(d.top.empty()) << ReadFileText(d.log);
  const int vm = d.vm_id("g1");
  ASSERT_GT(vm, 0) << d.top;
  // On the machine's disk (O_DIRECT: not tmpfs), removed at the end.
  const std::string img = "/var/tmp/magnet-e2e-disk-" + std::to_string(getpid()) + ".img";
  struct cleanup {
    std::string img;
    ~cleanup() {
      RunProcess({"virsh", "-q", "-c", "qemu:///system", "detach-disk", "g1", "vdb", "--live"}, LabBounds().Domain());
      ::unlink(img.c_str());
    }
  } cl{img};
  ASSERT_EQ(RunProcess({"truncate", "-s", "64M", img}, bounds().Quick()).status, 0);
  auto att = RunProcess({"virsh", "-q", "-c", "qemu:///system", "attach-disk", "g1", img, "vdb",
                         "--targetbus", "virtio", "--cache", "none", "--live"},
                        bounds().Domain());
  ASSERT_EQ(att.status, 0) << att.Describe();
  // The guest names it after its own disks (vda: it has no other).
  // (The disk appears within a readiness bound, in fifths of a second.)
  auto w = lab()->Run("g1", "for i in $(seq " + std::to_string(5 * bounds().Ready()) +
                                "); do d=$(ls /sys/block | grep '^vd' | head -n1); "
                                "[ -n \"$d\" ] && [ -b /dev/$d ] && break; sleep 0.2; done; "
                                "dd if=/dev/zero of=/dev/$d bs=65536 count=256 2>/dev/null && sync && "
                                "echo rc=0",
                      bounds().Ready() + bounds().Crunch());
  ASSERT_NE(w.out.find("rc=0"), std::string::npos) << w.Describe();
  const auto views = d.SettledViews("g1");
  // Per process (group_by process: cumulative rows): g1's QEMU completed
  // the 16 MiB the guest wrote, in requests of its own.
  const std::string qemu = "tgid " + std::to_string(pid_of("g1"));
  uint64_t bytes = 0, events = 0;
  bool have_block_io = false;
  for (const auto& inst : views) {
    EXPECT_EQ(inst.at("vm").get<int>(), vm);
    if (inst.at("view") != "block-io") continue;
    have_block_io = true;
    for (const auto& g : inst.at("groups"))
      for (const auto& r : g.at("rows")) {
        EXPECT_EQ(r.at("label"), qemu) << "a request of g1 attributed to another process";
        if (r.at("label") == qemu) {
          bytes += r.at("bytes").get<uint64_t>();
          events += r.at("events").get<uint64_t>();
        }
      }
  }
  // O_DIRECT: the guest's data, and besides it only the little I/O g1's
  // QEMU does itself: reading the new disk's first blocks as it attaches
  // it (512 and 4096 bytes) and, when the guest's sync makes it
  // fdatasync, the file system's fast-commit blocks it writes in that
  // call.  Before the submitter was taken at block_getrq, requests that
  // another context dispatched went to that context: short by 104 KiB in
  // one run, 4 KiB over in another.
  ASSERT_TRUE(have_block_io) << views.dump().substr(0, 2000);
  EXPECT_GE(bytes, 16u << 20) << views.dump().substr(0, 2000);
  EXPECT_LE(bytes, (16u << 20) + (64u << 10)) << views.dump().substr(0, 2000);
  EXPECT_GE(events, 4u) << views.dump().substr(0, 2000);
  std::printf("[e2e] g1 block I/O on the host: %llu requests, %llu bytes (guest wrote %u)\n",
              static_cast<unsigned long long>(events), static_cast<unsigned long long>(bytes),
              16u << 20);
}

TEST_F(VmAwarenessDirect, StopAndStartOfTheDomainArePickedUp) {
  recording_tagger tagger;
  host::registry reg("qemu:///system", tagger);
  ASSERT_TRUE(reg.reconcile());
  ASSERT_EQ(reg.vms().size(), 2u);
  auto g1 = find_vm(reg.vms(), "g1");
  auto g2 = find_vm(reg.vms(), "g2");
  ASSERT_TRUE(g1 && g2);
  const uint32_t id = g1->vm_id, g2_id = g2->vm_id;
  const pid_t pid = g1->qemu_pid;

  auto d = RunProcess({"virsh", "-q", "-c", "qemu:///system", "destroy", "g1"}, bounds().Domain());
  ASSERT_EQ(d.status, 0) << d.Describe();
  struct restart {  // g1 runs again after this test, however it ends
    ~restart() {
      if (RunProcess({"virsh", "-q", "-c", "qemu:///system", "domstate", "g1"}, LabBounds().Quick())
              .out.find("running") == std::string::npos)
        RunProcess({"virsh", "-q", "-c", "qemu:///system", "start", "g1"}, LabBounds().Domain());
    }
  } again;
  ASSERT_TRUE(reg.reconcile());
  ASSERT_EQ(reg.vms().size(), 1u) << "g2 only";
  EXPECT_EQ(reg.vms()[0].name, "g2");
  EXPECT_EQ(reg.vms()[0].vm_id, g2_id) << "g2 keeps its id";
  {
    std::lock_guard lk(tagger.mu);
    ASSERT_EQ(tagger.gone.size(), 1u);
    EXPECT_EQ(tagger.gone[0], id) << "the stopped VM's maps are cleaned up";
  }
  auto s = RunProcess({"virsh", "-q", "-c", "qemu:///system", "start", "g1"}, bounds().Domain());
  ASSERT_EQ(s.status, 0) << s.Describe();
  ASSERT_TRUE(reg.reconcile());
  ASSERT_EQ(reg.vms().size(), 2u);
  g1 = find_vm(reg.vms(), "g1");
  ASSERT_TRUE(g1);
  EXPECT_EQ(g1->vm_id, id) << "same domain, same magnet id";
  EXPECT_NE(g1->qemu_pid, pid) << "a new QEMU process";
}

// Records of one column of `magnet dump --format csv`, per value.
std::map<std::string, long> CsvCount(const std::string& csv, const std::string& column,
                                     const std::string& event_prefix) {
  std::map<std::string, long> out;
  auto lines = SplitLines(csv);
  if (lines.empty()) return out;
  std::map<std::string, size_t> col;
  {
    std::stringstream h(lines[0]);
    size_t i = 0;
    for (std::string c; std::getline(h, c, ',');) col[c] = i++;
  }
  if (!col.count(column) || !col.count("event")) return out;
  for (size_t l = 1; l < lines.size(); ++l) {
    std::vector<std::string> f;
    std::stringstream in(lines[l]);
    for (std::string c; std::getline(in, c, ',');) f.push_back(c);
    if (f.size() <= std::max(col[column], col["event"])) continue;
    if (f[col["event"]].rfind(event_prefix, 0) == 0) ++out[f[col[column]]];
  }
  return out;
}

// Standalone record and stat follow libvirt when given --vm (issue 20): the
// probes tag the VMs' events in the kernel as the daemon's do, and --vm
// keeps only that VM's.  Both guests send UDP to a "wire" namespace behind
// the bridge (so the host forwards every datagram: vmnet.queue) while
// `record --vm g1` runs: every record is g1's, with the id its --json names,
// and both net.dev and vmnet.queue recorded; then `stat --vm g2` counts g2's
// packets under g2's id and nothing else.
TEST_F(VmAwarenessDirect, StandaloneRecordAndStatTagTheVmsTheyAreGiven) {
  const wire_ns wire("magsa", "10.77.0.251");
  ASSERT_TRUE(wire.ok) << wire.why;
  const std::string& ns = wire.ns;
  // Both guests send 3 s of 4 Mbit/s to the wire, each to a server of its own.
  auto send_both = [&] {
    std::vector<std::unique_ptr<Background>> srv;
    for (int port : {5621, 5622}) {
      srv.push_back(std::make_unique<Background>("ip netns exec " + ns + " timeout " +
                                                     std::to_string(bounds().Linger(3)) +
                                                     " iperf3 -s -1 -p " + std::to_string(port),
                                                 "/dev/null"));
      EXPECT_TRUE(WaitFor([&] { return Listening(ns, port); }, bounds().Ready())) << port;
    }
    auto client = [&](const std::string& g, int port) {
      return lab()->Run(g, "iperf3 -c 10.77.0.251 -p " + std::to_string(port) +
                               " -u -b 4M -l 1000 -t 3 >/dev/null 2>&1; echo rc=$?",
                        bounds().Work(3));
    };
    auto second = std::async(std::launch::async, client, "g2", 5622);
    auto first = client("g1", 5621);
    EXPECT_NE(first.out.find("rc=0"), std::string::npos) << first.Describe();
    auto s2 = second.get();
    EXPECT_NE(s2.out.find("rc=0"), std::string::npos) << s2.Describe();
  };

  // The last line of a Background's output (stdout and stderr) that is a JSON object.
  auto last_json = [](const std::string& file) {
    nlohmann::json j;
    for (const auto& l : SplitLines(ReadFileText(file)))
      if (!l.empty() && l[0] == '{') j = nlohmann::json::parse(l, nullptr, false);
    return j;
  };
  const std::string dir = ArtifactDir("VmAwarenessDirect.standalone");
  const std::string trace = dir + "/g1.mtr", rec_out = dir + "/record.out", stat_out = dir + "/stat.out";
  ::unlink(trace.c_str());
  nlohmann::json j;
  {
    Background rec(magnet() + " record -o " + trace + " -p net.dev,vmnet.queue --vm g1 -q --json", rec_out);
    // The trace file exists once the VMs are tagged and the probes attached.
    ASSERT_TRUE(WaitFor([&] { return fs::exists(trace); }, bounds().Ready()))
        << "record did not start: " << ReadFileText(rec_out);
    send_both();
    rec.Stop();  // SIGTERM: the recorder flushes and prints its summary
    j = last_json(rec_out);
  }
  ASSERT_TRUE(j.is_object() && j.contains("vms")) << ReadFileText(rec_out);
  ASSERT_TRUE(j["vms"].contains("g1") && j["vms"].contains("g2")) << j.dump();
  const std::string g1 = std::to_string(j["vms"]["g1"].get<int>());
  EXPECT_NE(g1, "0") << j.dump();
  auto csv = RunProcess({magnet(), "dump", trace, "--format", "csv"}, bounds().Crunch());
  ASSERT_EQ(csv.status, 0) << csv.Describe();
  const auto dev = CsvCount(csv.out, "vm", "net.dev"), queue = CsvCount(csv.out, "vm", "vmnet.queue");
  // 3 s at 500 datagrams/s through g1's tap, and as many forwarded by the host.
  EXPECT_EQ(dev.size(), 1u) << "net.dev records of VMs other than g1 (vm " << g1 << ")";
  EXPECT_GE(dev.count(g1) ? dev.at(g1) : 0, 1000) << "net.dev records of g1";
  EXPECT_EQ(queue.size(), 1u) << "vmnet.queue records of VMs other than g1 (vm " << g1 << ")";
  EXPECT_GE(queue.count(g1) ? queue.at(g1) : 0, 1000) << "vmnet.queue records of g1";

  // stat --vm g2: rows of g2's id only, with its packets (each line's counts
  // are since the start: the last line has them all).
  nlohmann::json sj;
  {
    Background st(magnet() + " stat -p net.dev --vm g2 -i 1s --json", stat_out);
    ASSERT_TRUE(WaitFor([&] { return last_json(stat_out).is_object(); }, bounds().Ready()))
        << "stat did not start: " << ReadFileText(stat_out);
    send_both();
    sleep(1);  // the last datagrams in a report
    st.Stop();
    sj = last_json(stat_out);
  }
  ASSERT_TRUE(sj.is_object()) << ReadFileText(stat_out);
  long g2_events = 0;
  for (const auto& row : sj.at("rows")) {
    if (row.at("events").get<long>() == 0) continue;
    EXPECT_EQ(row.value("vm_name", ""), "g2") << row.dump();
    EXPECT_NE(row.at("vm").get<int>(), 0) << row.dump();
    g2_events += row.at("events").get<long>();
  }
  EXPECT_GE(g2_events, 1000) << sj.dump();
  std::printf("[e2e] standalone: record --vm g1: %ld net.dev and %ld vmnet.queue records, all vm %s; "
              "stat --vm g2: %ld events\n",
              dev.count(g1) ? dev.at(g1) : 0L, queue.count(g1) ? queue.at(g1) : 0L, g1.c_str(), g2_events);
}

}  // namespace
}  // namespace magnet::e2e

namespace magnet::e2e {
namespace {

// Hardening in the direct lab (its own lab, two guests, each with its
// agent subscribed over virtio-serial): one VM flooding, VM churn, the
// daemon killed, libvirtd restarted.
class HardeningDirect : public VmAwarenessDirect {};

// The frames the daemon has sent to each VM's sessions so far, by VM name.
std::map<std::string, uint64_t> FramesByVm(const daemon_run& d) {
  std::map<std::string, uint64_t> out;
  auto j = nlohmann::json::parse(d.Query("sessions").out, nullptr, false);
  if (j.is_discarded() || !j.contains("sessions")) return out;
  for (const auto& s : j["sessions"]) out[s.value("name", "")] += s.value("frames", 0ull);
  return out;
}

bool Subscribed(const daemon_run& d, const std::vector<std::string>& names) {
  auto j = nlohmann::json::parse(d.Query("sessions").out, nullptr, false);
  if (j.is_discarded() || !j.contains("sessions")) return false;
  for (const auto& n : names) {
    bool found = false;
    for (const auto& s : j["sessions"]) found |= s.value("name", "") == n && s.value("subscribed", false);
    if (!found) return false;
  }
  return true;
}

// g2 is flooded (the smallest UDP datagrams, as fast as the host can send
// them, at g2's tap: each one an event of g2's, and a drop when its queue
// is full) beyond its per-VM quota: what it loses is counted as its own
// loss (top's LOST, its lost.events), while g1, well under the quota,
// loses nothing, its per-flow view still has what iperf3 sent within 1 %,
// and its agent's frames keep their pace.  (A TCG guest cannot send fast
// enough itself to go far over a quota that its idle neighbour stays under.)
TEST_F(HardeningDirect, OneVmsFloodIsItsOwnLossAndTheOtherVmKeepsItsRateAndAccuracy) {
  daemon_run d(magnet(), "flood", "--vm-quota 20000");
  ASSERT_FALSE(d.top.empty()) << ReadFileText(d.log);
  ASSERT_TRUE(WaitFor([&] { return Subscribed(d, {"g1", "g2"}); }, bounds().Ready())) << d.Query("sessions").out;
  std::vector<std::unique_ptr<Background>> servers;
  const std::string j1 = "/tmp/magnet-e2e-flood-g1-" + std::to_string(getpid()) + ".json";
  ::unlink(j1.c_str());
  servers.push_back(std::make_unique<Background>(
      "ip netns exec magnetlab timeout " + std::to_string(bounds().Linger(10)) +
          " iperf3 -s -1 -B 10.77.0.1 -p 5621 -J",
      j1));
  ASSERT_EQ(lab()->Run("g2", "(timeout " + std::to_string(bounds().Linger(10)) +
                                 " iperf3 -s -1 -p 5622 >/dev/null 2>&1 &)").status,
            0);
  ASSERT_TRUE(WaitFor([&] { return Listening("magnetlab", 5621); }, bounds().Ready()));
  ASSERT_TRUE(WaitFor([&] { return lab()->Run("g2", "netstat -ltn | grep -q ':5622 '").status == 0; }, bounds().Ready()))
      << lab()->Run("g2", "netstat -ltn").out;
  const auto top0 = d.TopRow("g2");
  const auto frames0 = FramesByVm(d);
  const auto t0 = std::chrono::steady_clock::now();
  auto flood = std::async(std::launch::async, [&] {
    return RunProcess({"sh", "-c",
                       "ip netns exec magnetlab iperf3 -c 10.77.0.12 -p 5622 -u -b 0 -l 16 -t 10 "
                       ">/dev/null 2>&1; echo rc=$?"},
                      bounds().Work(10));
  });
  auto g1 = lab()->Run("g1", "iperf3 -c 10.77.0.1 -p 5621 -u -b 2M -l 1400 -t 8 >/dev/null 2>&1; echo rc=$?",
                       bounds().Work(8));
  const auto f = flood.get();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto frames1 = FramesByVm(d);
  ASSERT_NE(g1.out.find("rc=0"), std::string::npos) << g1.Describe();
  ASSERT_NE(f.out.find("rc=0"), std::string::npos) << f.Describe();

  double iperf_bps = -1;
  WaitFor([&] { return (iperf_bps = IperfReceivedBitsPerSecond(ReadFileText(j1))) > 0; }, bounds().Quick());
  ASSERT_GT(iperf_bps, 1e6) << ReadFileText(j1).substr(0, 2000);
  const long sent = IperfSentDatagrams(ReadFileText(j1));
  ASSERT_GT(sent, 0) << ReadFileText(j1).substr(0, 2000);
  auto views = d.SettledViews("g1");
  nlohmann::json flow_row;
  for (const auto& [l, row] : FlowRows(views, "guest-tx"))
    if (l.starts_with("10.77.0.11:") && l.ends_with(" > 10.77.0.1:5621 udp")) flow_row = row;
  ASSERT_FALSE(flow_row.is_null()) << views.dump().substr(0, 3000);
  const double view_bps = flow_row.at("bandwidth_bps").get<double>() * 8 * 1400.0 / 1428.0;
  // The flow's bytes at the tap: each datagram 1428 (28 of IP and UDP
  // headers), plus iperf3's one 4-byte connect datagram before the test.
  const double view_bytes = flow_row.at("bytes").get<double>();
  const double sent_bytes = static_cast<double>(sent) * 1428 + 32;

  const auto r1 = d.TopRow("g1"), r2 = d.TopRow("g2");
  ASSERT_FALSE(r1.is_null() || r2.is_null()) << d.Top().Describe();
  const uint64_t lost2 = r2.value("lost_quota", 0ull) - top0.value("lost_quota", 0ull);
  const double tx2 = r2.value("tx_mbps", 0.0);
  std::printf("[e2e] flood: g2 lost %llu events over its quota (20000/s per CPU) in %.1f s; g1 lost %llu "
              "(quota) + %llu (ring); g1 flow %.0f bytes at the tap vs %.0f sent by iperf3 (%ld datagrams); "
              "g1 view %.3f Mbit/s vs iperf3 %.3f; g1 frames %llu, g2 frames %llu\n",
              static_cast<unsigned long long>(lost2), secs,
              static_cast<unsigned long long>(r1.value("lost_quota", 0ull)),
              static_cast<unsigned long long>(r1.value("lost_ring", 0ull)), view_bytes, sent_bytes, sent,
              view_bps / 1e6, iperf_bps / 1e6,
              static_cast<unsigned long long>(frames1.count("g1") ? frames1.at("g1") - frames0.at("g1") : 0),
              static_cast<unsigned long long>(frames1.count("g2") ? frames1.at("g2") - frames0.at("g2") : 0));
  RecordProperty("g2_quota_lost", std::to_string(lost2));
  RecordProperty("g1_view_over_iperf3", std::to_string(view_bps / iperf_bps));
  RecordProperty("g1_view_bytes_over_sent", std::to_string(view_bytes / sent_bytes));
  EXPECT_GT(lost2, 0u) << "the flood went over g2's quota: " << r2.dump() << " (tx " << tx2 << " Mbit/s)";
  EXPECT_EQ(r1.value("lost_quota", 1ull), 0u) << r1.dump();
  EXPECT_EQ(r1.value("lost_ring", 1ull), 0u) << r1.dump();
  // g1's view has every byte g1 sent.  Bytes, not rates: the two rates
  // divide by different spans (the view: its first to its last datagram;
  // iperf3: the server's seconds of the test, which messages on the control
  // connection start and end), and these part when the flood starves the
  // g1 guest of CPU.  On one CI machine g1 reached only 1.1 of the 2 Mbit/s
  // asked, and the view's rate was 10 % over iperf3's.  The VM-awareness
  // tests compare rates with no flood.  Datagrams lost at the tail are in
  // neither count; 1 % leaves room for a few of them.
  EXPECT_NEAR(view_bytes / sent_bytes, 1.0, 0.01)
      << "g1's flow has " << view_bytes << " bytes at the tap, iperf3 sent " << sent << " datagrams ("
      << sent_bytes << " bytes at the tap); view " << view_bps / 1e6 << " Mbit/s vs iperf3 " << iperf_bps / 1e6;
  // g1's own stats say it lost nothing; g2's say what it lost.
  auto lost_stat = [&](const std::string& vm) {
    auto j = nlohmann::json::parse(d.Query("stats", vm).out, nullptr, false);
    if (j.is_discarded()) return -1.0;
    for (const auto& s : j.value("stats", nlohmann::json::array()))
      if (s.value("name", "") == "lost.events") return s.value("value", -1.0);
    return -1.0;
  };
  EXPECT_EQ(lost_stat("g1"), 0.0);
  EXPECT_GT(lost_stat("g2"), 0.0);
  // The agent in g1 subscribed at its period: its frames kept coming.
  auto j = nlohmann::json::parse(d.Query("sessions").out, nullptr, false);
  double period_ms = 0;
  for (const auto& s : j.value("sessions", nlohmann::json::array()))
    if (s.value("name", "") == "g1") period_ms = s.value("period_ms", 0.0);
  ASSERT_GT(period_ms, 0) << j.dump();
  ASSERT_TRUE(frames1.count("g1") && frames0.count("g1"));
  EXPECT_GE(static_cast<double>(frames1.at("g1") - frames0.at("g1")), 0.8 * secs * 1000 / period_ms)
      << "g1's frames during g2's flood (" << secs << " s, period " << period_ms << " ms)";
  ::unlink(j1.c_str());
}

// BPF programs and links on this machine (all of them: the daemon's go
// away with its last fd).
std::pair<size_t, size_t> BpfObjects() {
  auto count = [](const char* what) -> size_t {
    auto r = RunProcess({"bpftool", what, "show", "-j"}, LabBounds().Quick());
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_array() ? j.size() : static_cast<size_t>(-1);
  };
  return {count("prog"), count("link")};
}

// SIGKILL while recording and with both agents connected: nothing of it is
// left in the kernel; started again, it serves both VMs and both agents
// subscribe again.
TEST_F(HardeningDirect, DaemonKilledLeavesNoProbeBehindAndItsSuccessorServesAgain) {
  const auto before = BpfObjects();
  {
    daemon_run d(magnet(), "killed");
    ASSERT_FALSE(d.top.empty()) << ReadFileText(d.log);
    ASSERT_TRUE(WaitFor([&] { return Subscribed(d, {"g1", "g2"}); }, bounds().Ready())) << d.Query("sessions").out;
    const auto during = BpfObjects();
    EXPECT_GT(during.first, before.first) << "its programs are loaded";
    ASSERT_TRUE(d.proc->Running());
    d.proc->Kill();
    EXPECT_TRUE(WaitFor([&] { return BpfObjects() == before; }, bounds().Quick()))
        << "before " << before.first << " programs / " << before.second << " links, after SIGKILL "
        << BpfObjects().first << " / " << BpfObjects().second;
  }
  daemon_run d(magnet(), "successor");
  ASSERT_FALSE(d.top.empty()) << "the successor serves both VMs: " << ReadFileText(d.log);
  EXPECT_TRUE(WaitFor([&] { return Subscribed(d, {"g1", "g2"}); }, bounds().Ready())) << d.Query("sessions").out;
}

// libvirtd restarted under a running daemon: the daemon keeps answering
// (libvirt false meanwhile), finds both VMs again with the same ids, the
// guests' agents keep their sessions, and g1's traffic after the restart
// is in its view.
TEST_F(HardeningDirect, LibvirtdRestartedUnderTheDaemon) {
  daemon_run d(magnet(), "libvirtd");
  ASSERT_FALSE(d.top.empty()) << ReadFileText(d.log);
  const int g1 = d.vm_id("g1"), g2 = d.vm_id("g2");
  ASSERT_TRUE(WaitFor([&] { return Subscribed(d, {"g1", "g2"}); }, bounds().Ready())) << d.Query("sessions").out;
  // How many times each guest's agent has lost its host so far.
  auto HostGaps = [&](const std::string& g) {
    const Bounds& b = bounds();
    auto v = nlohmann::json::parse(
        lab()->Run(g, "magnet-agent view --json --wait " + std::to_string(b.Quick()), b.Work(b.Quick())).out, nullptr,
        false);
    if (v.is_object())
      for (const auto& x : v["values"])
        if (x.value("name", "") == "host.gaps") return x.value("value", -1.0);
    return -1.0;
  };
  std::map<std::string, double> gaps;
  for (const std::string g : {"g1", "g2"}) {
    gaps[g] = HostGaps(g);
    ASSERT_GE(gaps[g], 0) << g << ": no host.gaps in magnet-agent view";
  }
  auto r = lab()->Lab_({"restart-libvirtd"}, bounds().Domain() + bounds().Quick());
  ASSERT_EQ(r.status, 0) << r.Describe();
  EXPECT_TRUE(WaitFor(
      [&] {
        auto j = nlohmann::json::parse(d.Top().out, nullptr, false);
        return !j.is_discarded() && j.value("libvirt", false) && !d.TopRow("g1").is_null() &&
               !d.TopRow("g2").is_null();
      },
      bounds().Ready()))
      << d.Top().Describe() << ReadFileText(d.log);
  EXPECT_EQ(d.TopRow("g1").value("vm", 0), g1);
  EXPECT_EQ(d.TopRow("g2").value("vm", 0), g2);
  EXPECT_NE(ReadFileText(d.log).find("registry"), std::string::npos) << "the loss of libvirt is logged";
  // The agents' sessions (virtio-serial) stay: libvirt going away is no
  // change of the VMs (a libvirtd shutting down lists domains it no longer
  // describes; that once closed every guest's channel).  Each agent counts
  // the gaps in its host connection.
  for (const auto& [g, before] : gaps) {
    EXPECT_TRUE(WaitFor([&] { return Subscribed(d, {g}); }, bounds().Ready())) << d.Query("sessions").out;
    EXPECT_EQ(HostGaps(g), before) << g << "'s agent lost its host over a libvirtd restart";
  }
  Background server("ip netns exec magnetlab timeout " + std::to_string(bounds().Linger(3)) +
                        " iperf3 -s -1 -B 10.77.0.1 -p 5631",
                    "/dev/null");
  ASSERT_TRUE(WaitFor([&] { return Listening("magnetlab", 5631); }, bounds().Ready()));
  auto c = lab()->Run("g1", "iperf3 -c 10.77.0.1 -p 5631 -u -b 3M -l 1400 -t 3 >/dev/null 2>&1; echo rc=$?",
                      bounds().Work(3));
  ASSERT_NE(c.out.find("rc=0"), std::string::npos) << c.Describe();
  auto views = d.SettledViews("g1");
  bool found = false;
  for (const auto& [l, row] : FlowRows(views, "guest-tx"))
    found |= l.ends_with(" > 10.77.0.1:5631 udp");
  EXPECT_TRUE(found) << views.dump().substr(0, 3000);
}

// Entries of the BPF map named @name that process @pid holds, as bpftool
// prints them (other processes may have maps of that name too): the map
// ids come from the process's fdinfo.
nlohmann::json MapEntries(const std::string& name, pid_t pid) {
  std::set<int> held;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fdinfo", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::smatch m;
    const std::string info = ReadFileText(it->path());
    if (std::regex_search(info, m, std::regex("map_id:\\s*(\\d+)"))) held.insert(std::stoi(m[1]));
  }
  auto maps = nlohmann::json::parse(RunProcess({"bpftool", "map", "show", "-j"}, LabBounds().Quick()).out, nullptr, false);
  if (!maps.is_array()) return nlohmann::json::array();
  for (const auto& m : maps) {
    if (m.value("name", "") != name || !held.count(m.value("id", -1))) continue;
    auto r = RunProcess({"bpftool", "map", "dump", "id", std::to_string(m.value("id", 0)), "-j"}, LabBounds().Quick());
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_array() ? j : nlohmann::json::array();
  }
  return nlohmann::json::array();
}

// An entry's key or value as bpftool prints it: the BTF-formatted form
// when there is one, else the raw bytes (little-endian) as a number.
nlohmann::json Field(const nlohmann::json& e, const char* what) {
  if (e.contains("formatted")) return e["formatted"][what];
  const auto& raw = e[what];
  if (!raw.is_array()) return raw;
  uint64_t v = 0;
  for (size_t i = raw.size(); i-- > 0;) v = v << 8 | std::stoul(raw[i].get<std::string>(), nullptr, 16);
  return v;
}

// Count of entries of a VM-tagging map of process @pid whose value is @vm.
size_t EntriesOf(const std::string& map, pid_t pid, int vm) {
  size_t n = 0;
  for (const auto& e : MapEntries(map, pid)) {
    auto v = Field(e, "value");
    if (v.is_number() && v.get<int64_t>() == vm) ++n;
  }
  return n;
}

// The fds of process @pid, and how many of them are BPF programs and links.
struct fd_counts {
  size_t fds = 0, progs = 0, links = 0;
};
fd_counts FdsOf(pid_t pid) {
  fd_counts c;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fdinfo", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    ++c.fds;
    const std::string info = ReadFileText(it->path());
    if (info.find("\nprog_id:") != std::string::npos && info.find("\nlink_id:") == std::string::npos) ++c.progs;
    if (info.find("\nlink_id:") != std::string::npos) ++c.links;
  }
  return c;
}

size_t Count(const std::string& cmd) {
  return SplitLines(RunProcess({"sh", "-c", cmd}, LabBounds().Quick()).out).size();
}

// 50 cycles of stop/start, reboot/start and undefine/define/start of g2
// while the daemon runs: afterwards the daemon holds as many fds, the
// kernel as many programs, links and tagging entries, the lab as many taps
// and cgroups as before; g2's tagging entries name its current QEMU process
// and tap only; g1 was never disturbed and its count of lost events is 0.
TEST_F(HardeningDirect, FiftyCyclesOfVmChurnLeaveNothingBehind) {
  const int kCycles = 50;
  // Each cycle is a few domain operations and a boot.
  daemon_run d(magnet(), "churn", "", bounds().Test() + kCycles * bounds().Domain());
  ASSERT_FALSE(d.top.empty()) << ReadFileText(d.log);
  ASSERT_TRUE(WaitFor([&] { return Subscribed(d, {"g1", "g2"}); }, bounds().Ready())) << d.Query("sessions").out;
  const int g2 = d.vm_id("g2");
  const pid_t daemon = d.proc->pid();
  const std::string taps = "ip -n magnetlab -o link show type tun";
  // Every cgroup (libvirt makes none for the lab's domains here: they stay
  // in their parent's, which the registry never tags as theirs).
  // Not the machine's own per-command cgroups (memory/process_api/<id>, made and removed for
  // every command whatever runs it, this test's or not): one went away during a churn while
  // other sessions worked on the machine, and the count differed by it.
  const std::string cgroups = "find /sys/fs/cgroup -type d -not -path '*/process_api/*' 2>/dev/null";
  struct snap {
    size_t fds, progs, links, tgid, netdev, cgroup, taps, cgroups;
    std::string str() const {
      return "fds " + std::to_string(fds) + " progs " + std::to_string(progs) + " links " +
             std::to_string(links) + " g2 entries (tgid " + std::to_string(tgid) + ", netdev " +
             std::to_string(netdev) + ", cgroup " + std::to_string(cgroup) + ") taps " +
             std::to_string(taps) + " cgroups " + std::to_string(cgroups);
    }
    bool operator==(const snap&) const = default;
  };
  auto take = [&] {
    const fd_counts f = FdsOf(daemon);  // its own: other processes may load programs meanwhile
    return snap{f.fds, f.progs, f.links, EntriesOf("vm_by_tgid", daemon, g2),
                EntriesOf("vm_by_netdev", daemon, g2), EntriesOf("vm_by_cgroup", daemon, g2), Count(taps),
                Count(cgroups)};
  };
  // Two snapshots in a row alike (a query connection may still be open).
  snap before = take(), prev{};
  WaitFor([&] { prev = before; before = take(); return before == prev; }, bounds().Quick(), 500);
  ASSERT_GT(before.tgid, 0u) << before.str();
  ASSERT_GT(before.progs, 0u) << before.str();
  ASSERT_GT(before.netdev, 0u) << before.str();
  auto virsh = [](const std::string& args) {
    return RunProcess({"sh", "-c", "virsh -q -c qemu:///system " + args}, LabBounds().Domain());
  };
  const std::string xml = "/tmp/magnet-e2e-churn-g2-" + std::to_string(getpid()) + ".xml";
  ASSERT_EQ(virsh("dumpxml g2 >" + xml).status, 0);
  struct restore {  // g2 defined and running after this test, however it ends
    std::function<ProcResult(const std::string&)> v;
    std::string xml;
    ~restore() {
      v("define " + xml);
      if (v("domstate g2").out.find("running") == std::string::npos) v("start g2");
      ::unlink(xml.c_str());
    }
  } again{virsh, xml};
  // Each step must succeed; a failure says what virsh said.  A domain is
  // down once libvirt itself says "shut off" (an error from domstate, such
  // as a lock that a job still holds, is not "not running").
  auto ok = [&](const std::string& args) {
    const auto r = virsh(args);
    EXPECT_EQ(r.status, 0) << "virsh " << args << ": " << r.Describe();
    return r.status == 0;
  };
  ProcResult state;
  auto shut_off = [&] {
    state = virsh("domstate g2");
    return state.status == 0 && Trim(state.out) == "shut off";
  };
  const auto t0 = std::chrono::steady_clock::now();
  double kind_secs[3] = {0, 0, 0};  // where the time goes, per kind of cycle
  for (int i = 0; i < kCycles; ++i) {
    SCOPED_TRACE("cycle " + std::to_string(i));
    const auto c0 = std::chrono::steady_clock::now();
    struct add_time {
      double& to;
      std::chrono::steady_clock::time_point from;
      ~add_time() { to += std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count(); }
    } timed{kind_secs[i % 3], c0};
    switch (i % 3) {
      case 0:  // stop, start
        ASSERT_TRUE(ok("destroy g2"));
        ASSERT_TRUE(ok("start g2"));
        break;
      case 1: {  // restart: the guest reboots (the lab's domains end on reboot), then start
        // Not `virsh reset`: Debian 12's QEMU 7.2 can hang for good in
        // monitor_cleanup(), waiting for its QMP dispatcher, when libvirt's
        // SIGTERM (on_reboot=destroy) meets the reset command still in
        // flight; the domain then stays "in shutdown".  Seen here once in 17
        // resets of a guest half a second after its start with the daemon
        // running (it touches no QMP: only its load widens the race), and in
        // none of 25 without it.
        // Its control channel answers once the guest, started by the cycle before, has booted.
        const auto reboot =
            lab()->Run("g2", "(sleep 0.3; reboot -f) >/dev/null 2>&1 & echo rebooting", bounds().Domain());
        ASSERT_EQ(reboot.out, "rebooting\n") << reboot.Describe();
        ASSERT_TRUE(WaitFor(shut_off, bounds().Domain())) << "virsh domstate g2: " << state.Describe() << state.out;
        ASSERT_TRUE(ok("start g2"));
        break;
      }
      case 2:  // undefine, define, start
        ASSERT_TRUE(ok("destroy g2"));
        ASSERT_TRUE(ok("undefine g2"));
        ASSERT_TRUE(ok("define " + xml));
        ASSERT_TRUE(ok("start g2"));
        break;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The last start's agent subscribes again; then everything is as before.
  ASSERT_TRUE(WaitFor([&] { return Subscribed(d, {"g1", "g2"}); }, bounds().Domain() + bounds().Ready()))
      << d.Query("sessions").out;
  snap after{};
  EXPECT_TRUE(WaitFor([&] { return (after = take()) == before; }, bounds().Ready()))
      << "before: " << before.str() << "\nafter:  " << after.str();
  EXPECT_EQ(d.vm_id("g2"), g2) << "same domain (same UUID), same id";
  // g2's entries name its current process and tap.
  const pid_t qemu = pid_of("g2");
  bool own = false;
  for (const auto& e : MapEntries("vm_by_tgid", daemon)) {
    auto k = Field(e, "key"), v = Field(e, "value");
    if (v.is_number() && v.get<int64_t>() == g2) {
      EXPECT_EQ(k.get<int64_t>(), qemu) << "a tgid entry of g2 that is not its QEMU: " << e.dump();
      own |= k.get<int64_t>() == qemu;
    }
  }
  EXPECT_TRUE(own) << MapEntries("vm_by_tgid", daemon).dump();
  const auto r1 = d.TopRow("g1");
  EXPECT_EQ(r1.value("lost_quota", 1ull) + r1.value("lost_ring", 1ull), 0u) << r1.dump();
  EXPECT_NE(ReadFileText(d.log).find("[vm.down]"), std::string::npos);
  std::printf("[e2e] churn: %d cycles of g2 in %.0f s (stop/start %.0f s, reboot/start %.0f s, "
              "undefine/define/start %.0f s); before/after: %s\n",
              kCycles, secs, kind_secs[0], kind_secs[1], kind_secs[2], after.str().c_str());
  RecordProperty("churn_cycles", kCycles);
}

}  // namespace
}  // namespace magnet::e2e
