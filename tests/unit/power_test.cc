// Host power (host/power): the SPECpower-style model and its file, the
// powercap reader on synthetic trees (zones, wraps, missing files), the
// split of an interval's energy and its conservation, and the meter that
// sums it tick by tick.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "magnet/power/attribution.h"
#include "magnet/power/meter.h"
#include "magnet/power/model.h"
#include "magnet/power/powercap.h"

namespace magnet::power {
namespace {

namespace fs = std::filesystem;

// HP ProLiant ML110 G4 (Xeon 3040), SPECpower_ssj2008, at 0 %, 10 %, ...
// 100 %: the curve CloudSim and Beloglazov & Buyya (2012) use.
const char* kMl110G4 =
    "# HP ProLiant ML110 G4\n"
    "idle = 86\n"
    "full = 117\n"
    "point = 10% 89.4\npoint = 20% 92.6\npoint = 30% 96\npoint = 40% 99.5\npoint = 50% 102\n"
    "point = 60% 106\npoint = 70% 108\npoint = 80% 112\npoint = 90% 114\n";

power_model ml110() { return parse_power_model(kMl110G4, "ml110.conf").value(); }

TEST(PowerModel, InterpolatesLinearlyBetweenPointsAndClamps) {
  const power_model m = ml110();
  ASSERT_EQ(m.points.size(), 11u);
  EXPECT_EQ(m.idle_watts(), 86);
  EXPECT_EQ(m.full_watts(), 117);
  EXPECT_DOUBLE_EQ(model_watts(m, 0), 86);
  EXPECT_DOUBLE_EQ(model_watts(m, 0.5), 102);
  EXPECT_DOUBLE_EQ(model_watts(m, 0.55), 104);
  EXPECT_DOUBLE_EQ(model_watts(m, 0.05), 87.7);
  EXPECT_DOUBLE_EQ(model_watts(m, 0.95), 115.5);
  EXPECT_DOUBLE_EQ(model_watts(m, 1), 117);
  EXPECT_DOUBLE_EQ(model_watts(m, -0.5), 86);
  EXPECT_DOUBLE_EQ(model_watts(m, 1.5), 117);
  EXPECT_DOUBLE_EQ(model_watts(m, std::nan("")), 86);
  // Idle and full alone: a straight line.
  const power_model line = parse_power_model("idle = 100\nfull = 300\n", "l").value();
  EXPECT_DOUBLE_EQ(model_watts(line, 0.25), 150);
  EXPECT_EQ(describe(m), "86 W idle, 117 W full, 9 points between");
}

// The model's stated error (error = N%): a fraction of the power above
// idle, said in the log's description; none when the file has no line.
TEST(PowerModel, StatedErrorIsAFractionOfThePowerAboveIdle) {
  EXPECT_FALSE(ml110().error.has_value());
  const power_model m = parse_power_model("idle = 86\nfull = 117\nerror = 15%\npoint = 50% 102\n", "e").value();
  ASSERT_TRUE(m.error.has_value());
  EXPECT_DOUBLE_EQ(*m.error, 0.15);
  EXPECT_DOUBLE_EQ(model_watts(m, 0.5), 102) << "the curve is unchanged";
  EXPECT_EQ(describe(m), "86 W idle, 117 W full, 1 point between, error 15% above idle");
  EXPECT_DOUBLE_EQ(*parse_power_model("idle = 1\nfull = 2\nerror = 0%\n", "z").value().error, 0);
}

TEST(PowerModel, BadFilesAreNamedByFileAndLine) {
  const std::pair<const char*, const char*> bad[] = {
      {"idle = 86\n", "m.conf: no 'full = WATTS' line"},
      {"full = 117\n", "m.conf: no 'idle = WATTS' line"},
      {"idle = 86\nfull = 117\nidle = 80\n", "m.conf:3: idle set again"},
      {"idle = lots\nfull = 117\n", "m.conf:1: idle: 'lots' is not a number of watts"},
      {"idle = -3\nfull = 117\n", "m.conf:1: idle: '-3' is not a number of watts"},
      {"idle = 86\nfull = 80\n", "m.conf:2: full (80.000000 W) is below idle (line 1)"},
      {"idle = 86\nfull = 117\npoint = 50%\n", "m.conf:3: point: '50%' is not 'UTIL% WATTS'"},
      {"idle = 86\nfull = 117\npoint = 100% 110\n", "m.conf:3: point: '100%' is not a utilisation strictly"},
      {"idle = 86\nfull = 117\npoint = 0% 86\n", "m.conf:3: point: '0%' is not a utilisation strictly"},
      {"idle = 86\nfull = 117\npoint = 50% watts\n", "m.conf:3: point: 'watts' is not a number of watts"},
      {"idle = 86\nfull = 117\npoint = 50% 100\npoint = 40% 99\n",
       "m.conf:4: point: utilisation 40% is not above the point before (line 3)"},
      {"idle = 86\nfull = 117\npoint = 50% 100\npoint = 60% 95\n",
       "m.conf:4: point: its watts fall outside the curve (below the point or idle before it)"},
      {"idle = 86\nfull = 117\npoint = 10% 80\n", "m.conf:3: point: its watts fall outside the curve"},
      {"idle = 86\nfull = 117\npoint = 90% 120\n", "m.conf:3: point: its watts fall outside the curve (above full)"},
      {"idle = 86\nfull = 117\nidel = 3\n", "m.conf:3: unknown key 'idel' (idle, full, point, error)"},
      {"idle = 86\nfull = 117\nerror = 15\n", "m.conf:3: error: '15' is not a percentage (error = N%)"},
      {"idle = 86\nfull = 117\nerror = -5%\n", "m.conf:3: error: '-5%' is not a percentage"},
      {"idle = 86\nfull = 117\nerror = much%\n", "m.conf:3: error: 'much%' is not a percentage"},
      {"idle = 86\nerror = 5%\nfull = 117\nerror = 6%\n", "m.conf:4: error set again"},
      {"idle 86\n", "m.conf:1: 'idle 86' is not 'key = value'"},
  };
  for (const auto& [text, why] : bad) {
    auto m = parse_power_model(text, "m.conf");
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_NE(m.err().message.find(why), std::string::npos) << text << "\n" << m.err().message;
  }
  auto missing = load_power_model("/nonexistent/power.conf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.err().message.find("/nonexistent/power.conf: No such file"), std::string::npos)
      << missing.err().message;
}

// A powercap tree in a temporary directory.
struct tree {
  std::string root = "/tmp/magnet-powercap-test-" + std::to_string(getpid()) + "-" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name();
  tree() {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~tree() { fs::remove_all(root); }
  void put(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(root + "/" + rel).parent_path());
    std::ofstream(root + "/" + rel, std::ios::trunc) << text;
  }
  void zone(const std::string& dir, const std::string& name, uint64_t uj, uint64_t max) {
    put(dir + "/name", name + "\n");
    put(dir + "/energy_uj", std::to_string(uj) + "\n");
    put(dir + "/max_energy_range_uj", std::to_string(max) + "\n");
  }
  void energy(const std::string& dir, uint64_t uj) { put(dir + "/energy_uj", std::to_string(uj) + "\n"); }
};

TEST(Powercap, CounterDeltaHandlesAWrap) {
  EXPECT_EQ(counter_delta_uj(100, 250, 1000), 150u);
  EXPECT_EQ(counter_delta_uj(900, 50, 1000), 150u);  // 100 to the top, 50 after it
  EXPECT_EQ(counter_delta_uj(1000, 0, 1000), 0u);
  EXPECT_EQ(counter_delta_uj(5000, 40, 1000), 40u) << "not a wrap of this range";
}

TEST(Powercap, PackageZonesOnlySummedWithEachZonesWrap) {
  tree t;
  t.zone("intel-rapl:0", "package-0", 262143000000 - 1000000, 262143000000);  // 1 J before its wrap
  t.zone("intel-rapl:0/intel-rapl:0:0", "core", 5, 1000);       // a subzone: part of package-0
  t.zone("intel-rapl:0:0", "core", 5, 1000);                     // as sysfs links it at the top too
  t.zone("intel-rapl:10", "package-1", 2000000, 65532610987);
  t.zone("intel-rapl:1", "psys", 7000000, 65532610987);          // the platform: holds the packages
  t.put("intel-rapl/enabled", "1\n");                            // the control type, not a zone
  auto r = powercap_reader::open(t.root);
  ASSERT_TRUE(r.ok()) << r.err().message;
  ASSERT_EQ(r->zones().size(), 2u);
  EXPECT_EQ(r->zones()[0].name, "package-0");
  EXPECT_EQ(r->zones()[1].name, "package-1");
  EXPECT_EQ(r->zones()[1].dir, t.root + "/intel-rapl:10");
  EXPECT_EQ(describe(*r, t.root), "package-0 (intel-rapl:0), package-1 (intel-rapl:10) under " + t.root);
  auto a = r->read();
  ASSERT_TRUE(a.ok()) << a.err().message;
  EXPECT_EQ(*a, (std::vector<uint64_t>{262143000000 - 1000000, 2000000}));
  t.energy("intel-rapl:0", 2500000);   // wrapped: 1 J to the top, 2.5 J after it
  t.energy("intel-rapl:10", 3000000);  // 1 J
  t.energy("intel-rapl:1", 9000000);   // psys: not counted
  auto b = r->read();
  ASSERT_TRUE(b.ok()) << b.err().message;
  EXPECT_DOUBLE_EQ(r->joules_between(*a, *b), 4.5);
}

TEST(Powercap, NoTreeOrNoPackageIsNoRaplAndNotAnError) {
  auto none = powercap_reader::open("/nonexistent/powercap");
  ASSERT_TRUE(none.ok()) << none.err().message;
  EXPECT_TRUE(none->zones().empty());
  tree t;
  t.zone("intel-rapl:0", "psys", 1, 1000);
  auto psys = powercap_reader::open(t.root);
  ASSERT_TRUE(psys.ok()) << psys.err().message;
  EXPECT_TRUE(psys->zones().empty());
}

TEST(Powercap, AZoneMissingOrGarblingAFileIsAnErrorNamingIt) {
  struct broken {
    std::string rm, put, text, why;
  };
  const broken cases[] = {
      {"energy_uj", "", "", "/intel-rapl:0/energy_uj: No such file or directory"},
      {"max_energy_range_uj", "", "", "/intel-rapl:0/max_energy_range_uj: No such file or directory"},
      {"name", "", "", "/intel-rapl:0/name: No such file or directory"},
      {"", "energy_uj", "12ab\n", "/intel-rapl:0/energy_uj: '12ab' is not a count of microjoules"},
      {"", "energy_uj", "\n", "/intel-rapl:0/energy_uj: '' is not a count of microjoules"},
      {"", "max_energy_range_uj", "-1\n", "/intel-rapl:0/max_energy_range_uj: '-1' is not a count"},
      {"", "max_energy_range_uj", "0\n", "/intel-rapl:0/max_energy_range_uj: 0 is not a counter's range"},
  };
  for (const auto& c : cases) {
    tree t;
    t.zone("intel-rapl:0", "package-0", 1, 1000);
    if (!c.rm.empty()) fs::remove(t.root + "/intel-rapl:0/" + c.rm);
    if (!c.put.empty()) t.put("intel-rapl:0/" + c.put, c.text);
    auto r = powercap_reader::open(t.root);
    ASSERT_FALSE(r.ok()) << c.rm << c.put;
    EXPECT_EQ(r.err().message.rfind(t.root, 0), 0u) << r.err().message;
    EXPECT_NE(r.err().message.find(c.why), std::string::npos) << r.err().message;
  }
  // A zone that goes away after the start: its reading names it.
  tree t;
  t.zone("intel-rapl:0", "package-0", 1, 1000);
  auto r = powercap_reader::open(t.root);
  ASSERT_TRUE(r.ok());
  fs::remove(t.root + "/intel-rapl:0/energy_uj");
  auto v = r->read();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.err().message, t.root + "/intel-rapl:0/energy_uj: No such file or directory");
}

TEST(ProcStat, TheCpuLineInNanoseconds) {
  // user nice system idle iowait irq softirq steal guest guest_nice
  auto t = parse_proc_stat("cpu  100 2 30 500 7 1 3 11 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n", 100);
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(t->busy_ns, (100u + 2 + 30 + 1 + 3) * 10'000'000ull) << "guest is in user already; steal is not busy";
  EXPECT_EQ(t->idle_ns, (500u + 7) * 10'000'000ull);
  EXPECT_TRUE(parse_proc_stat("cpu  1 2 3 4 5 6 7\n", 100).ok()) << "kernels before steal";
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3 4 5 6 7\n", 100).ok());
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 3\n", 100).ok());
  EXPECT_FALSE(parse_proc_stat("cpu  1 x 3 4 5 6 7\n", 100).ok());
  auto real = read_proc_stat();
  ASSERT_TRUE(real.ok()) << real.err().message;
  EXPECT_GT(real->busy_ns + real->idle_ns, 0u);
  auto missing = read_proc_stat("/nonexistent/stat");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.err().message.find("/nonexistent/stat"), std::string::npos);
}

double sum(const energy_split& s) {
  double j = s.idle_j + s.own_j;
  for (const auto& [id, v] : s.vms) j += v;
  return j;
}

TEST(Attribution, ActiveEnergyFollowsBusyTimeIdleStaysTheHosts) {
  // 10 J, 4 J of it idle; 600 ns busy: VM 1 ran 200 (vCPUs 150, vhost 30,
  // I/O threads 20), VM 2 100: 2 J, 1 J, the host's own 3 J.
  std::map<uint32_t, vm_work> vms{{1, {150, 30, 20}}, {2, {100, 0, 0}}, {3, {0, 0, 0}}};
  energy_split s = attribute(10, 4, 600, vms);
  EXPECT_DOUBLE_EQ(s.idle_j, 4);
  EXPECT_DOUBLE_EQ(s.vms[1], 2);
  EXPECT_DOUBLE_EQ(s.vms[2], 1);
  EXPECT_EQ(s.vms.at(3), 0);
  EXPECT_DOUBLE_EQ(s.own_j, 3);
  EXPECT_DOUBLE_EQ(sum(s), 10);
  // The VMs' work above the host's busy time (other clocks): they share
  // all of the active part, the host's own gets nothing.
  s = attribute(10, 4, 200, {{1, {300, 0, 0}}, {2, {100, 0, 0}}});
  EXPECT_DOUBLE_EQ(s.vms[1], 4.5);
  EXPECT_DOUBLE_EQ(s.vms[2], 1.5);
  EXPECT_EQ(s.own_j, 0);
  // No busy time at all: the active part is the host's.
  s = attribute(10, 4, 0, {{1, {}}});
  EXPECT_DOUBLE_EQ(s.own_j, 6);
  EXPECT_EQ(s.vms[1], 0);
  // An idle part beyond the energy is the energy.
  s = attribute(10, 12, 100, {{1, {100, 0, 0}}});
  EXPECT_DOUBLE_EQ(s.idle_j, 10);
  EXPECT_EQ(s.vms[1], 0);
  EXPECT_DOUBLE_EQ(sum(s), 10);
}

TEST(Attribution, IdlePartBySource) {
  // RAPL: the idle fraction of the CPUs' time.
  EXPECT_DOUBLE_EQ(rapl_idle_joules(10, {250, 750}), 7.5);
  EXPECT_DOUBLE_EQ(rapl_idle_joules(10, {0, 0}), 10) << "no CPU time: all idle";
  // Model: idle power for the interval; the energy at the interval's use.
  auto e = model_interval(ml110(), {500, 500}, 0.1);
  EXPECT_DOUBLE_EQ(e.host_j, 10.2);
  EXPECT_DOUBLE_EQ(e.idle_j, 8.6);
}

TEST(Attribution, EnergyIsConservedOverRandomIntervals) {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> joules(0, 5000);
  std::uniform_int_distribution<uint64_t> ns(0, 4'000'000'000ull);
  std::uniform_int_distribution<int> count(0, 200);
  double worst = 0;
  for (int i = 0; i < 2000; ++i) {
    const double host = joules(rng);
    const double idle = joules(rng) * 0.5;
    std::map<uint32_t, vm_work> vms;
    for (int v = count(rng); v > 0; --v) vms[static_cast<uint32_t>(v)] = {ns(rng) / 8, ns(rng) / 64, ns(rng) / 64};
    const energy_split s = attribute(host, idle, ns(rng) * 16, vms);
    EXPECT_EQ(s.vms.size(), vms.size());
    for (const auto& [id, j] : s.vms) EXPECT_GE(j, 0);
    EXPECT_GE(s.own_j, 0);
    if (host > 0) worst = std::max(worst, std::abs(sum(s) - host) / host);
  }
  EXPECT_LE(worst, 1e-9);
}

TEST(PowerMeter, ModelSourceSumsIntervalsAndConserves) {
  power_meter m(ml110());
  EXPECT_STREQ(m.source(), "model");
  const uint64_t s = 1'000'000'000;
  ASSERT_TRUE(m.sample(10 * s, {1000, 1000}, {{1, {5000, 0, 0}}}).ok());
  EXPECT_EQ(m.totals().host_j, 0) << "the first sample is the baseline";
  EXPECT_EQ(m.host_watts(), 0);
  // 1 s at 50 %: 102 J, 86 idle; busy 1000 ns, VM 1 ran 600: 9.6 J.
  ASSERT_TRUE(m.sample(11 * s, {2000, 2000}, {{1, {5600, 0, 0}}}).ok());
  EXPECT_DOUBLE_EQ(m.totals().host_j, 102);
  EXPECT_DOUBLE_EQ(m.totals().idle_j, 86);
  EXPECT_DOUBLE_EQ(m.totals().vms.at(1), 9.6);
  EXPECT_DOUBLE_EQ(m.totals().own_j, 6.4);
  EXPECT_DOUBLE_EQ(m.host_watts(), 102);
  EXPECT_DOUBLE_EQ(m.vm_watts(1), 9.6);
  // VM 2 arrives: nothing for it this interval (its baseline); VM 1 ran
  // all the busy time at 100 %: 117 - 86 = 31 J.
  ASSERT_TRUE(m.sample(12 * s, {3000, 2000}, {{1, {6600, 0, 0}}, {2, {70000, 0, 0}}}).ok());
  EXPECT_DOUBLE_EQ(m.totals().vms.at(1), 40.6);
  EXPECT_EQ(m.totals().vms.at(2), 0);
  EXPECT_DOUBLE_EQ(m.host_watts(), 117) << "over the last second";
  // VM 1 goes: its joules are kept as gone; VM 2 ran 500 of 1000 busy.
  ASSERT_TRUE(m.sample(13 * s, {4000, 2000}, {{2, {70500, 0, 0}}}).ok());
  const auto& t = m.totals();
  EXPECT_DOUBLE_EQ(t.gone_j, 40.6);
  EXPECT_DOUBLE_EQ(t.vms.at(2), 15.5);
  EXPECT_EQ(t.vms.count(1), 0u);
  double all = t.idle_j + t.own_j + t.gone_j;
  for (const auto& [id, j] : t.vms) all += j;
  EXPECT_NEAR(all, t.host_j, 1e-9 * t.host_j);
  EXPECT_DOUBLE_EQ(t.host_j, 102 + 117 + 117);
  // A VM's counters that went back (its threads seen anew): nothing this time.
  ASSERT_TRUE(m.sample(14 * s, {5000, 2000}, {{2, {10, 0, 0}}}).ok());
  EXPECT_DOUBLE_EQ(m.totals().vms.at(2), 15.5);
}

TEST(PowerMeter, RaplSourceOnASyntheticTreeWithAWrap) {
  tree t;
  const uint64_t max = 60'000'000;  // 60 J
  t.zone("intel-rapl:0", "package-0", 55'000'000, max);
  t.zone("intel-rapl:1", "package-1", 0, max);
  auto r = powercap_reader::open(t.root);
  ASSERT_TRUE(r.ok()) << r.err().message;
  power_meter m(std::move(*r));
  EXPECT_STREQ(m.source(), "rapl");
  const uint64_t ms = 1'000'000;
  std::map<uint32_t, vm_work> vms{{1, {0, 0, 0}}, {2, {0, 0, 0}}};
  ASSERT_TRUE(m.sample(1000 * ms, {0, 0}, vms).ok());
  // Ten ticks of 100 ms at 50 W + 30 W, package-0 wrapping at the first
  // (55 J + 5 J reaches its 60 J range):
  // CPUs 40 % busy; VM 1 a quarter of the busy time, VM 2 half.
  uint64_t e0 = 55'000'000, e1 = 0, busy = 0, idle = 0, w1 = 0, w2 = 0;
  for (int i = 1; i <= 10; ++i) {
    e0 = (e0 + 5'000'000) % max;  // 5 J a tick
    e1 += 3'000'000;
    t.energy("intel-rapl:0", e0);
    t.energy("intel-rapl:1", e1);
    busy += 80'000'000;
    idle += 120'000'000;
    w1 += 20'000'000;
    w2 += 40'000'000;
    vms = {{1, {w1, 0, 0}}, {2, {w2, 0, 0}}};
    ASSERT_TRUE(m.sample((1000 + 100 * i) * ms, {busy, idle}, vms).ok());
  }
  const auto& tot = m.totals();
  EXPECT_NEAR(tot.host_j, 80, 1e-9);
  EXPECT_NEAR(tot.idle_j, 48, 1e-9);  // 60 % idle
  EXPECT_NEAR(tot.vms.at(1), 8, 1e-9);
  EXPECT_NEAR(tot.vms.at(2), 16, 1e-9);
  EXPECT_NEAR(tot.own_j, 8, 1e-9);
  EXPECT_NEAR(m.host_watts(), 80, 1e-9);
  EXPECT_NEAR(m.vm_watts(2), 16, 1e-9);
  // A reading that fails changes nothing; the next counts since the last good one.
  fs::remove(t.root + "/intel-rapl:1/energy_uj");
  auto bad = m.sample(2100 * ms, {busy, idle}, vms);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().message, t.root + "/intel-rapl:1/energy_uj: No such file or directory");
  EXPECT_NEAR(m.totals().host_j, 80, 1e-9);
  t.energy("intel-rapl:0", (e0 + 10'000'000) % max);
  t.energy("intel-rapl:1", e1 + 6'000'000);
  ASSERT_TRUE(m.sample(2200 * ms, {busy + 160'000'000, idle + 240'000'000}, vms).ok());
  EXPECT_NEAR(m.totals().host_j, 96, 1e-9);
}

}  // namespace
}  // namespace magnet::power
