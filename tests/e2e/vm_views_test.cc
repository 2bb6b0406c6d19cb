// VM awareness end to end, in the direct lab: the registry against a real
// libvirtd and a real domain, and the host daemon's per-VM views against
// real guest traffic measured by iperf3 itself.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include "lab_fixture.h"
#include "registry.h"

namespace magnet::e2e {
namespace {
namespace fs = std::filesystem;

std::string read_file(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

pid_t pid_of(const std::string& domain) {
  return static_cast<pid_t>(std::atoi(read_file("/run/libvirt/qemu/" + domain + ".pid").c_str()));
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

class VmAwarenessDirect : public LabSuite {
 protected:
  static void SetUpTestSuite() { BringUp("direct", 1, 240); }
  static void TearDownTestSuite() { TearDownLab(); }
  void SetUp() override {
    ASSERT_NE(lab(), nullptr);
    ASSERT_TRUE(up_error().empty()) << up_error();
  }
  static std::string magnet() { return BuildDir() + "/host/magnet"; }
};

TEST_F(VmAwarenessDirect, RegistryMapsTheRunningDomainToItsProcessThreadsAndTap) {
  recording_tagger tagger;
  host::registry reg("qemu:///system", tagger);
  auto s = reg.reconcile();
  ASSERT_TRUE(s) << s.err().message;
  auto vms = reg.vms();
  ASSERT_EQ(vms.size(), 1u);
  const auto& vm = vms[0];
  EXPECT_EQ(vm.name, "g1");
  EXPECT_EQ(vm.uuid.size(), 36u);
  EXPECT_GE(vm.vm_id, 1u);
  EXPECT_EQ(vm.qemu_pid, pid_of("g1")) << "QEMU process found through libvirt";
  int vcpus = 0;
  for (const auto& t : vm.threads)
    if (t.role == "vcpu") {
      ++vcpus;
      EXPECT_EQ(t.vcpu, 0);
      EXPECT_NE(t.comm.find("/TCG"), std::string::npos) << t.comm;
    }
  EXPECT_EQ(vcpus, 1) << "one vCPU thread";
  ASSERT_EQ(vm.taps.size(), 1u);
  EXPECT_GT(vm.taps[0].ifindex, 0) << "tap " << vm.taps[0].name << " resolved in QEMU's netns";
  EXPECT_FALSE(vm.cgroups.empty());
  std::lock_guard lk(tagger.mu);
  ASSERT_EQ(tagger.changed.size(), 1u);
  EXPECT_EQ(tagger.changed[0], vm) << "the same mapping goes to the kernel maps";
}

TEST_F(VmAwarenessDirect, DaemonPerVmViewMatchesIperf3AndHoldsOnlyThatVm) {
  const std::string sock = "/tmp/magnet-e2e-host-" + std::to_string(getpid()) + ".sock";
  // The daemon, in the background, bounded by its own --duration.
  std::string log = ArtifactDir("VmAwarenessDirect.daemon") + "/host.log";
  auto start = RunProcess({"sh", "-c",
                           magnet() + " -v host --socket " + sock + " --duration 90 >" + log +
                               " 2>&1 & echo $!"},
                          10);
  ASSERT_EQ(start.status, 0) << start.Describe();
  const std::string daemon_pid = start.out.substr(0, start.out.find('\n'));
  struct stop_daemon {
    std::string pid;
    ~stop_daemon() { RunProcess({"kill", "-TERM", pid}, 5); }
  } stopper{daemon_pid};

  // The registry picks the running VM up within a second or two.
  std::string vms;
  for (int i = 0; i < 50; ++i) {
    auto r = RunProcess({magnet(), "top", "--socket", sock, "--json", "--count", "1"}, 10);
    if (r.status == 0 && r.out.find("\"name\":\"g1\"") != std::string::npos) {
      vms = r.out;
      break;
    }
    usleep(200000);
  }
  ASSERT_FALSE(vms.empty()) << read_file(log);
  EXPECT_NE(vms.find("\"vcpus\":1"), std::string::npos) << vms;

  // UDP from the guest to the lab network's host side, at a fixed rate;
  // iperf3's server reports what it received.
  auto server = RunProcess({"sh", "-c",
                            "ip netns exec magnetlab timeout 40 iperf3 -s -1 -B 10.77.0.1 -p 5601 -J "
                            "> /tmp/magnet-e2e-iperf.json 2>&1 & echo $!"},
                           10);
  ASSERT_EQ(server.status, 0);
  sleep(1);
  auto client = lab()->Run("g1", "iperf3 -c 10.77.0.1 -p 5601 -u -b 20M -l 1400 -t 5 >/dev/null 2>&1; echo rc=$?", 60);
  ASSERT_EQ(client.status, 0) << client.Describe();
  ASSERT_NE(client.out.find("rc=0"), std::string::npos) << client.Describe();
  sleep(1);
  const double iperf_bps = IperfReceivedBitsPerSecond(read_file("/tmp/magnet-e2e-iperf.json"));
  ASSERT_GT(iperf_bps, 1e6) << read_file("/tmp/magnet-e2e-iperf.json").substr(0, 2000);

  auto views = RunProcess({magnet(), "views", "--vm", "g1", "--socket", sock}, 10);
  ASSERT_EQ(views.status, 0) << views.Describe();
  std::smatch vmid;
  ASSERT_TRUE(std::regex_search(vms, vmid, std::regex(R"re(\{"vm":(\d+),"name":"g1")re")));
  // Isolation is checked inside: every instance in g1's reply is g1's.
  double flow = FlowBytesPerSecond(views.out, "guest-tx", std::stoi(vmid[1]));
  ASSERT_GT(flow, 0) << views.out.substr(0, 2000);
  // Bytes at the tap include the IP and UDP headers: 28 of 1428 per datagram.
  const double view_bps = flow * 8 * 1400.0 / 1428.0;
  EXPECT_NEAR(view_bps / iperf_bps, 1.0, 0.05)
      << "view " << view_bps / 1e6 << " Mbit/s vs iperf3 " << iperf_bps / 1e6 << " Mbit/s";
  std::printf("[e2e] g1 guest-tx flow: view %.3f Mbit/s, iperf3 %.3f Mbit/s\n", view_bps / 1e6,
              iperf_bps / 1e6);
  RecordProperty("iperf3_mbps", std::to_string(iperf_bps / 1e6));
  RecordProperty("view_mbps", std::to_string(view_bps / 1e6));
}

TEST_F(VmAwarenessDirect, StopAndStartOfTheDomainArePickedUp) {
  recording_tagger tagger;
  host::registry reg("qemu:///system", tagger);
  ASSERT_TRUE(reg.reconcile());
  ASSERT_EQ(reg.vms().size(), 1u);
  const uint32_t id = reg.vms()[0].vm_id;
  const pid_t pid = reg.vms()[0].qemu_pid;

  auto d = RunProcess({"virsh", "-q", "-c", "qemu:///system", "destroy", "g1"}, 30);
  ASSERT_EQ(d.status, 0) << d.Describe();
  ASSERT_TRUE(reg.reconcile());
  EXPECT_TRUE(reg.vms().empty());
  {
    std::lock_guard lk(tagger.mu);
    ASSERT_EQ(tagger.gone.size(), 1u);
    EXPECT_EQ(tagger.gone[0], id) << "the stopped VM's maps are cleaned up";
  }
  auto s = RunProcess({"virsh", "-q", "-c", "qemu:///system", "start", "g1"}, 60);
  ASSERT_EQ(s.status, 0) << s.Describe();
  ASSERT_TRUE(reg.reconcile());
  ASSERT_EQ(reg.vms().size(), 1u);
  EXPECT_EQ(reg.vms()[0].vm_id, id) << "same domain, same magnet id";
  EXPECT_NE(reg.vms()[0].qemu_pid, pid) << "a new QEMU process";
}

}  // namespace
}  // namespace magnet::e2e
