// Placement (host/place): the planners on small fleets whose best plan is
// known, the constraints each one keeps, the SLA risk's estimator, the
// refusal of fleets that are not one, and properties every plan of a
// random fleet must have.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "magnet/place/planner.h"
#include "magnet/power/model.h"

namespace magnet::place {
namespace {

constexpr double GiB = 1024.0 * 1024 * 1024;

// A straight line from idle to full: the power above idle is linear in
// the load, so moving load between two such hosts costs nothing and
// emptying one saves exactly its idle power.
power::power_model line(double idle, double full) {
  return power::parse_power_model("idle = " + std::to_string(idle) + "\nfull = " + std::to_string(full) + "\n",
                                  "test")
      .value();
}

host_spec host(const std::string& name, double cpus = 10, double mem = 100 * GiB, double link = 0) {
  host_spec h;
  h.name = name;
  h.cpus = cpus;
  h.mem_bytes = mem;
  h.link_bps = link;
  h.model = line(100, 200);
  return h;
}

vm_demand vm(const std::string& name, const std::string& on, double cpu, double mem = 4 * GiB) {
  vm_demand v;
  v.name = name;
  v.uuid = "uuid-" + name;
  v.host = on;
  v.cpu_cores = cpu;
  v.cpu_peak_cores = cpu;
  v.vcpus = 4;
  v.mem_bytes = mem;
  return v;
}

plan make(const fleet& f, algorithm a = algorithm::magnet, plan_options o = {}) {
  auto p = make_plan(f, a, o);
  if (!p) ADD_FAILURE() << p.err().message;
  return p.ok() ? *p : plan{};
}

const host_outcome& outcome(const plan& p, const std::string& name) {
  for (const auto& h : p.hosts)
    if (h.name == name) return h;
  throw std::runtime_error("no host " + name);
}

double total_saved(const plan& p) {
  double s = 0;
  for (const auto& m : p.moves) s += m.watts_saved;
  return s;
}

// Two hosts a fifth loaded: one is emptied, and the fleet saves its idle
// power (100 W), since with straight lines the load costs the same watts
// wherever it runs.
TEST(PlaceMagnet, TwoLightHostsOneEmptiedSavingItsIdlePower) {
  const fleet f{{host("a"), host("b")}, {vm("x", "a", 2), vm("y", "b", 2)}};
  const plan p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_DOUBLE_EQ(p.watts_before, 2 * (100 + 100 * 0.2));
  EXPECT_DOUBLE_EQ(p.watts_after, 100 + 100 * 0.4);
  EXPECT_DOUBLE_EQ(p.moves[0].watts_saved, 100);
  const host_outcome& from = outcome(p, p.moves[0].from);
  const host_outcome& to = outcome(p, p.moves[0].to);
  EXPECT_TRUE(from.emptied);
  EXPECT_EQ(from.watts_after, 0);
  EXPECT_FALSE(to.emptied);
  EXPECT_DOUBLE_EQ(to.cpu_used, 4);
  EXPECT_EQ(p.moves[0].uuid, "uuid-" + p.moves[0].vm);
}

// A measured host calibrates its model: the emptied host saves what its
// meter reads, the target adds what its model adds.
TEST(PlaceMagnet, MeasuredWattsCalibrateTheModel) {
  fleet f{{host("a"), host("b")}, {vm("x", "a", 2), vm("y", "b", 3)}};
  f.hosts[0].watts_now = 150;  // the model says 120
  f.hosts[1].watts_now = 125;  // the model says 130
  const plan p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_DOUBLE_EQ(p.watts_before, 275);
  EXPECT_EQ(p.moves[0].from, "a");  // the least loaded
  // b: 125 W now, its model adds 20 W for x's 2 cores; a's 150 W go.
  EXPECT_DOUBLE_EQ(p.moves[0].watts_saved, 150 - 20);
  EXPECT_DOUBLE_EQ(p.watts_after, 145);
}

// Emptying a host is kept only when it saves power: here the only host
// that may be emptied draws less than its VM would add to the other.
TEST(PlaceMagnet, NoEmptyingThatCostsPower) {
  fleet f{{host("a"), host("b", 10, 200 * GiB)}, {vm("x", "a", 2, 4 * GiB), vm("y", "b", 2, 92 * GiB)}};
  f.hosts[0].model = line(10, 20);    // a: 12 W; x fits in b, and adds 40 W there
  f.hosts[1].model = line(100, 300);  // b: 140 W, but y's 92 GiB do not fit in a with x
  EXPECT_TRUE(make(f).moves.empty());
  f.vms[1].mem_bytes = 4 * GiB;  // the control: now b is emptied into a, for 138 W
  const plan p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_EQ(p.moves[0].vm, "y");
  EXPECT_DOUBLE_EQ(p.moves[0].watts_saved, 138);
}

// An emptying switches a host off, never another on: not even a more
// efficient one (two hosts' worth of migrations for a difference in the
// curves).
TEST(PlaceMagnet, NoHostWokenToEmptyAnother) {
  fleet f{{host("a"), host("b")}, {vm("x", "a", 2), vm("y", "a", 2, 2 * GiB)}};
  f.hosts[1].model = line(50, 100);  // 70 W with a's load, against a's 140 W
  EXPECT_TRUE(make(f).moves.empty());
  // Relief does wake a host when no host on has room.
  f.vms[0].cpu_cores = f.vms[0].cpu_peak_cores = 7;  // a: 9 cores, above 8
  const plan p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_EQ(p.moves[0].vm, "y");  // the smaller whose leaving is enough
  EXPECT_EQ(p.moves[0].to, "b");
  EXPECT_LT(p.moves[0].watts_saved, 0);  // relief costs power
}

// Two VMs whose traffic together exceeds a link are not put behind it;
// the same VMs with links nobody knows (0) are.
TEST(PlaceMagnet, HeavyNetworkVmsAreNotColocatedBeyondTheLink) {
  fleet f{{host("a", 10, 100 * GiB, 10e9), host("b", 10, 100 * GiB, 10e9)}, {vm("x", "a", 1), vm("y", "b", 1)}};
  f.vms[0].net_bps = 5e9;
  f.vms[1].net_bps = 5e9;  // 10 Gbit/s together, above 0.9 of the link
  plan p = make(f);
  EXPECT_TRUE(p.moves.empty());
  f.vms[1].net_bps = 4e9;  // 9 Gbit/s: within
  p = make(f);
  EXPECT_EQ(p.moves.size(), 1u);
  EXPECT_DOUBLE_EQ(outcome(p, p.moves[0].to).net_used_bps, 9e9);
  f.vms[1].net_bps = 5e9;
  f.hosts[0].link_bps = f.hosts[1].link_bps = 0;
  EXPECT_EQ(make(f).moves.size(), 1u);
}

// Memory bounds a host: 60 + 60 GiB do not fit in 0.95 of 100 GiB.
TEST(PlaceMagnet, MemoryBoundsAHost) {
  fleet f{{host("a"), host("b")}, {vm("x", "a", 1, 60 * GiB), vm("y", "b", 1, 60 * GiB)}};
  EXPECT_TRUE(make(f).moves.empty());
  f.vms[1].mem_bytes = 35 * GiB;  // 95 GiB: exactly the limit
  const plan p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_DOUBLE_EQ(outcome(p, p.moves[0].to).mem_used, 95 * GiB);
}

// The VMs' peaks bound a host at the peaks' quantile: the means plus the
// root of the summed squared deviations, not the sum of the peaks.
TEST(PlaceMagnet, PeaksBoundAHostAsTheyAddUp) {
  fleet f{{host("a"), host("b")}, {vm("x", "a", 2), vm("y", "b", 2)}};
  f.vms[0].cpu_peak_cores = f.vms[1].cpu_peak_cores = 6;  // 4 + sqrt(32) = 9.66 <= 10 (sum of peaks: 12)
  plan p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_NEAR(outcome(p, p.moves[0].to).cpu_peak_used, 4 + std::sqrt(32.0), 1e-9);
  f.vms[0].cpu_peak_cores = f.vms[1].cpu_peak_cores = 7.5;  // 4 + sqrt(60.5) = 11.8 > 10
  EXPECT_TRUE(make(f).moves.empty());
  // The baselines do not look at peaks.
  EXPECT_EQ(make(f, algorithm::pabfd).moves.size(), 1u);
}

// A host must survive any one of its VMs using all its vCPUs (a burst no
// window showed yet): its mean demand plus the largest vcpus - mean.
TEST(PlaceMagnet, OneVmUsingAllItsVcpusMustFit) {
  fleet f{{host("a"), host("b")}, {vm("x", "a", 1), vm("y", "b", 2)}};
  f.vms[0].vcpus = 7;  // together: 3 + 6 = 9 <= 10 (less the margin, 9.9)
  plan p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_DOUBLE_EQ(outcome(p, p.moves[0].to).cpu_peak_used, 9);
  f.vms[0].vcpus = 9;  // 3 + 8 = 11 > 10
  EXPECT_TRUE(make(f).moves.empty());
  f.vms[0].vcpus = 0;  // unknown: not counted
  EXPECT_EQ(make(f).moves.size(), 1u);
  f.vms[0].vcpus = 9;  // the baselines do not look at it
  EXPECT_EQ(make(f, algorithm::pabfd).moves.size(), 1u);
  // It decides where VMs go, not whether they move: a host above it only
  // by a burst no one saw is not relieved (no host is woken for it).
  const fleet g{{host("a"), host("b")}, {vm("x", "a", 1), vm("y", "a", 2)}};
  fleet h = g;
  h.vms[0].vcpus = 9;  // 3 + 8 > 10
  const plan q = make(h);
  EXPECT_TRUE(q.moves.empty());
  EXPECT_DOUBLE_EQ(q.hosts[0].cpu_peak_used, 11);
  EXPECT_TRUE(q.notes.empty());
}

// A VM that may burst far goes where one already may: host e empties only
// when e1 (4 vCPUs of burst) joins t2, whose own VM may burst 4.5, and e2
// takes t1's burst room instead.  The fewest added watts alone (linear
// curves: a tie, the first listed wins) sends e1 to t1, after which e2
// fits on neither host's burst room and e stays on; magnet's candidate
// that prices a VM's target with the burst headroom it takes empties e,
// and the plan predicted to draw least is kept.
TEST(PlaceMagnet, BurstHeadroomPricedCandidateEmptiesAHostTheFewestWattsCannot) {
  fleet f{{host("e"), host("t1"), host("t2")},
          {vm("e1", "e", 1), vm("e2", "e", 3), vm("t1v", "t1", 3.5, 40 * GiB), vm("t2v", "t2", 3.5, 40 * GiB)}};
  f.vms[0].vcpus = 5;  // gap 4; its peak (3.5) above e2's: it is placed first
  f.vms[0].cpu_peak_cores = 3.5;
  f.vms[1].vcpus = 5;  // gap 2
  f.vms[2].vcpus = 4;  // gap 0.5
  f.vms[3].vcpus = 8;  // gap 4.5
  const plan p = make(f);
  ASSERT_EQ(p.moves.size(), 2u);
  EXPECT_TRUE(outcome(p, "e").emptied);
  for (const move& m : p.moves) EXPECT_EQ(m.to, m.vm == "e1" ? "t2" : "t1");
  EXPECT_DOUBLE_EQ(p.watts_after, (100 + 10 * 6.5) + (100 + 10 * 4.5));
  for (const auto& h : p.hosts) EXPECT_LE(h.cpu_peak_used, 9.9 + 1e-9) << h.name;
}

// An emptying fills its targets up to the limits less
// consolidation_margin: a host filled to the limit gives VMs back at the
// next rise of demand.
TEST(PlaceMagnet, EmptyingLeavesTheMargin) {
  fleet f{{host("a"), host("b")}, {vm("x", "a", 2), vm("y", "b", 6)}};  // 8 together: cpu_upper
  f.vms[0].vcpus = f.vms[1].vcpus = 0;  // the peak (8) within the margin too: only the mean binds
  plan_options o;
  ASSERT_DOUBLE_EQ(o.consolidation_margin, 0.01);  // up to 7.9 cores
  EXPECT_TRUE(make(f, algorithm::magnet, o).moves.empty());
  o.consolidation_margin = 0;
  EXPECT_EQ(make(f, algorithm::magnet, o).moves.size(), 1u);
}

// A VM that may not migrate stays; the host is emptied the other way.
TEST(PlaceMagnet, NonMigratableVmStays) {
  fleet f{{host("a"), host("b")}, {vm("x", "a", 3), vm("y", "b", 1)}};
  f.vms[1].migratable = false;  // b is the lighter host, but y cannot leave it
  plan p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_EQ(p.moves[0].vm, "x");
  EXPECT_EQ(p.moves[0].to, "b");
  f.vms[0].migratable = false;
  p = make(f);
  EXPECT_TRUE(p.moves.empty());
  for (algorithm a : {algorithm::first_fit, algorithm::round_robin, algorithm::pabfd, algorithm::watcher})
    EXPECT_TRUE(make(f, a).moves.empty()) << name_of(a);
}

// A host that accepts no VMs is emptied and never a target, even when it
// would be the best one.
TEST(PlaceMagnet, HostThatAcceptsNoVmsIsOnlyEmptied) {
  fleet f{{host("a"), host("m")}, {vm("x", "a", 1), vm("y", "m", 3, 8 * GiB)}};
  plan p = make(f);  // the control: a, the cheaper to empty, is emptied into m
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_EQ(p.moves[0].to, "m");
  f.hosts[1].accepts_vms = false;
  p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_EQ(p.moves[0].vm, "y");
  EXPECT_EQ(p.moves[0].to, "a");
  EXPECT_TRUE(outcome(p, "m").emptied);
  for (algorithm a : {algorithm::first_fit, algorithm::round_robin, algorithm::pabfd, algorithm::watcher})
    for (const move& m : make(f, a).moves) EXPECT_NE(m.to, "m") << name_of(a);
}

// An overloaded host gives up the VM with the least memory whose leaving
// is enough, to a host already on rather than one that is off.
TEST(PlaceMagnet, OverloadedHostIsRelievedBySmallestSufficientVm) {
  // a: 9 cores, above 0.8 x 10.  Leaving alone is enough for big (3.5
  // left) and mid (6), not for tiny (8.5); mid has less memory than big.
  // b, on, has room for mid; c is off.
  const fleet f{{host("a"), host("b"), host("c")},
                {vm("big", "a", 5.5, 8 * GiB), vm("mid", "a", 3, 2 * GiB), vm("tiny", "a", 0.5, 1 * GiB),
                 vm("other", "b", 4)}};
  const plan p = make(f);
  ASSERT_EQ(p.moves.size(), 1u);
  EXPECT_EQ(p.moves[0].vm, "mid");
  EXPECT_EQ(p.moves[0].to, "b");
  EXPECT_DOUBLE_EQ(outcome(p, "a").cpu_used, 6);
  EXPECT_DOUBLE_EQ(p.moves[0].watts_saved, 0);  // straight lines: load moved, no host off or on
}

// No more moves than max_moves: emptying a host takes all its VMs or none.
TEST(PlaceMagnet, NeverMoreThanMaxMoves) {
  fleet f{{host("a"), host("b"), host("c"), host("d")},
          {vm("w", "a", 1), vm("x", "b", 1), vm("y", "c", 1), vm("z1", "d", 1), vm("z2", "d", 1)}};
  plan_options o;
  EXPECT_EQ(make(f, algorithm::magnet, o).moves.size(), 3u);
  o.max_moves = 2;
  const plan p = make(f, algorithm::magnet, o);
  EXPECT_EQ(p.moves.size(), 2u);
  EXPECT_FALSE(p.notes.empty());
  for (algorithm a : {algorithm::first_fit, algorithm::round_robin, algorithm::pabfd, algorithm::watcher})
    EXPECT_LE(make(f, a, o).moves.size(), 2u) << name_of(a);
}

// Bad fleets are refused, naming what is wrong.
TEST(PlaceErrors, BadFleetsNameTheVmOrHost) {
  auto err = [](const fleet& f, plan_options o = {}) {
    auto p = make_plan(f, algorithm::magnet, o);
    return p ? std::string("accepted") : p.err().message;
  };
  const fleet good{{host("a"), host("b")}, {vm("x", "a", 1), vm("y", "b", 1)}};
  EXPECT_EQ(err(good), "accepted");
  fleet f = good;
  f.vms[1].host = "nowhere";
  EXPECT_EQ(err(f), "VM 'y': runs on host 'nowhere', which the fleet does not list");
  f = good;
  f.hosts[1].name = "a";
  EXPECT_EQ(err(f), "two hosts are named 'a'");
  f = good;
  f.vms[1].name = "x";
  EXPECT_EQ(err(f), "two VMs are named 'x'");
  f = good;
  f.vms[0].cpu_cores = -1;
  EXPECT_EQ(err(f), "VM 'x': cpu_cores is negative (-1)");
  f = good;
  f.vms[0].net_bps = std::nan("");
  EXPECT_EQ(err(f), "VM 'x': net_bps is not a finite number");
  f = good;
  f.hosts[1].cpus = 0;
  EXPECT_EQ(err(f), "host 'b': no CPUs (cpus 0)");
  f = good;
  f.hosts[0].model = {};
  EXPECT_EQ(err(f), "host 'a': no power model");
  f = good;
  f.hosts[0].mem_bytes = -5;
  EXPECT_EQ(err(f), "host 'a': mem_bytes is negative (-5)");
  plan_options o;
  o.cpu_upper = 0;
  EXPECT_EQ(err(good, o), "cpu_upper must be above 0 (is 0)");
  o = {};
  o.peak_quantile = 1;
  EXPECT_EQ(err(good, o), "peak_quantile must be between 0.5 and 1 (is 1)");
  EXPECT_EQ(parse_algorithm("best-fit").err().message,
            "unknown placement algorithm 'best-fit' (magnet, first-fit, round-robin, pabfd, watcher)");
  for (algorithm a : {algorithm::magnet, algorithm::first_fit, algorithm::round_robin, algorithm::pabfd,
                      algorithm::watcher})
    EXPECT_EQ(parse_algorithm(name_of(a)).value(), a);
}

// The SLA risk: a normal demand whose peak_quantile is each VM's peak.
TEST(PlaceRisk, OverloadChanceFromMeanAndPeaks) {
  // One VM, mean 8, peak 8 + z(0.95) on 10 CPUs: sigma 1, P(> 10) = P(Z > 2).
  plan_options o;
  o.peak_quantile = 0.95;
  o.cpu_upper = o.peak_upper = 2;  // nothing to relieve
  fleet f{{host("a")}, {vm("x", "a", 8)}};
  f.vms[0].cpu_peak_cores = 8 + 1.6448536269514722;
  plan p = make(f, algorithm::magnet, o);
  EXPECT_NEAR(p.sla_risk, 0.5 * std::erfc(2 / std::sqrt(2.0)), 1e-6);
  EXPECT_NEAR(p.hosts[0].sla_risk, p.sla_risk, 1e-12);
  // No spread: short or not.
  f.vms[0].cpu_peak_cores = 0;
  EXPECT_EQ(make(f, algorithm::magnet, o).sla_risk, 0);
  f.vms[0].cpu_cores = 11;
  EXPECT_EQ(make(f, algorithm::magnet, o).sla_risk, 1);
  // The fleet's figure: the mean over hosts with VMs (an empty host is not counted).
  fleet g{{host("a"), host("b"), host("c")}, {vm("x", "a", 11), vm("y", "b", 1)}};
  EXPECT_DOUBLE_EQ(make(g, algorithm::round_robin, o).sla_risk, 0.5);
}

// PABFD: minimum migration time (the least memory) off an overloaded
// host, onto the host whose power rises least; then the least utilised
// host emptied.
TEST(PlaceBaselines, PabfdMovesTheSmallestVmOffAnOverloadedHostThenEmptiesTheLightest) {
  fleet f{{host("a"), host("b"), host("c")},
          {vm("big", "a", 5, 8 * GiB), vm("small", "a", 4, 2 * GiB), vm("b1", "b", 2), vm("c1", "c", 1)}};
  // b and c have the same straight line: the same rise; the first listed wins.
  plan p = make(f, algorithm::pabfd);
  ASSERT_EQ(p.moves.size(), 2u);
  EXPECT_EQ(p.moves[0].vm, "small");
  EXPECT_EQ(p.moves[0].to, "b");
  // b was a target and may not be emptied; c, the least utilised host
  // left, is: its VM goes where the power rises least, b (a, overloaded,
  // takes none).
  EXPECT_EQ(p.moves[1].vm, "c1");
  EXPECT_EQ(p.moves[1].to, "b");
  EXPECT_TRUE(outcome(p, "c").emptied);
}

// First-fit decreasing from scratch; round-robin spreads.
TEST(PlaceBaselines, FirstFitPacksAndRoundRobinSpreads) {
  const fleet f{{host("a"), host("b"), host("c")},
                {vm("v1", "c", 2), vm("v2", "c", 5), vm("v3", "b", 4), vm("v4", "b", 3)}};
  plan p = make(f, algorithm::first_fit);
  // Decreasing: v2 (5) -> a, v3 (4) -> b (a would be 9 > 8), v4 (3) -> a (8),
  // v1 (2) -> b (6).  In the fleet's order it would be a 7, b 7.
  EXPECT_DOUBLE_EQ(outcome(p, "a").cpu_used, 8);
  EXPECT_DOUBLE_EQ(outcome(p, "b").cpu_used, 6);
  EXPECT_TRUE(outcome(p, "c").emptied);
  EXPECT_EQ(p.moves.size(), 3u);  // v2, v4 to a; v1 to b; v3 was on b already
  p = make(f, algorithm::round_robin);
  // In the fleet's order: v1 -> a, v2 -> b, v3 -> c, v4 -> a.
  EXPECT_DOUBLE_EQ(outcome(p, "a").cpu_used, 5);
  EXPECT_DOUBLE_EQ(outcome(p, "b").cpu_used, 5);
  EXPECT_DOUBLE_EQ(outcome(p, "c").cpu_used, 4);
}

// Watcher: offload the busiest overloaded host's least CPU-using VM first,
// first-fit from the busiest; then move VMs from the least busy hosts to
// the busiest that fit.
TEST(PlaceBaselines, WatcherOffloadsThenConsolidatesFirstFit) {
  fleet f{{host("a"), host("b"), host("c")},
          {vm("a1", "a", 6), vm("a2", "a", 3), vm("b1", "b", 4), vm("c1", "c", 1.5)}};
  const plan p = make(f, algorithm::watcher);
  // Offload: a (9 > 8) sends a2 (the lesser) to b (7), the busiest that fits.
  // Consolidation: c (1.5) sends c1 to the busiest that fits: not b (8.5),
  // a (7.5).
  ASSERT_EQ(p.moves.size(), 2u);
  EXPECT_EQ(p.moves[0].vm, "a2");
  EXPECT_EQ(p.moves[0].to, "b");
  EXPECT_EQ(p.moves[1].vm, "c1");
  EXPECT_EQ(p.moves[1].to, "a");
  EXPECT_TRUE(outcome(p, "c").emptied);
}

// Whether any host of @f is above a limit of @o before a plan (magnet
// may then spend power to relieve it).
bool over_before(const fleet& f, const plan_options& o) {
  for (const host_spec& h : f.hosts) {
    double cpu = 0, dev2 = 0, mem = 0, net = 0;
    for (const vm_demand& v : f.vms)
      if (v.host == h.name) {
        cpu += v.cpu_cores;
        dev2 += std::pow(std::max(v.cpu_peak_cores, v.cpu_cores) - v.cpu_cores, 2);
        mem += v.mem_bytes;
        net += v.net_bps;
      }
    if (cpu > o.cpu_upper * h.cpus || cpu + std::sqrt(dev2) > o.peak_upper * h.cpus ||
        mem > o.mem_upper * h.mem_bytes || (h.link_bps > 0 && net > o.link_upper * h.link_bps))
      return true;
  }
  return false;
}

// Properties of every plan on random fleets: VMs that may not move stay,
// no VM lands on a host that accepts none, magnet's targets stay within
// every limit and its plan never costs power, the moves' savings add up to
// the plan's, and the plan is the same when made again.
TEST(PlaceProperties, RandomFleetsKeepTheRules) {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> u(0, 1);
  for (int round = 0; round < 60; ++round) {
    fleet f;
    const int nh = 2 + int(u(rng) * 12), nv = int(u(rng) * 40);
    for (int h = 0; h < nh; ++h) {
      f.hosts.push_back(host("h" + std::to_string(h), 8 + 8 * (h % 3), 64 * GiB, u(rng) < 0.5 ? 10e9 : 0));
      f.hosts.back().accepts_vms = u(rng) > 0.15;
      if (u(rng) < 0.3) f.hosts.back().model = line(60, 250);
    }
    for (int v = 0; v < nv; ++v) {
      vm_demand d = vm("v" + std::to_string(v), "h" + std::to_string(int(u(rng) * nh)), u(rng) * 3,
                       (1 + u(rng) * 8) * GiB);
      d.cpu_peak_cores = d.cpu_cores * (1 + u(rng));
      d.net_bps = u(rng) < 0.2 ? u(rng) * 6e9 : 1e7;
      d.migratable = u(rng) > 0.1;
      f.vms.push_back(d);
    }
    plan_options o;
    o.max_moves = round % 3 == 0 ? 3 : 0;
    for (algorithm a : {algorithm::magnet, algorithm::first_fit, algorithm::round_robin, algorithm::pabfd,
                        algorithm::watcher}) {
      SCOPED_TRACE(std::string(name_of(a)) + " round " + std::to_string(round));
      const plan p = make(f, a, o);
      std::map<std::string, const vm_demand*> by_name;
      for (const auto& d : f.vms) by_name[d.name] = &d;
      std::set<std::string> targets, moved;
      for (const move& m : p.moves) {
        EXPECT_TRUE(by_name[m.vm]->migratable) << m.vm;
        EXPECT_EQ(by_name[m.vm]->host, m.from);
        EXPECT_NE(m.from, m.to);
        EXPECT_TRUE(moved.insert(m.vm).second) << m.vm << " moves twice";
        targets.insert(m.to);
        for (const auto& h : f.hosts)
          if (h.name == m.to) {
            EXPECT_TRUE(h.accepts_vms) << m.to;
          }
      }
      if (o.max_moves > 0) {
        EXPECT_LE(int(p.moves.size()), o.max_moves);
      }
      EXPECT_NEAR(total_saved(p), p.watts_before - p.watts_after, 1e-6);
      const plan again = make(f, a, o);
      ASSERT_EQ(again.moves.size(), p.moves.size());
      for (size_t i = 0; i < p.moves.size(); ++i) EXPECT_EQ(again.moves[i].to, p.moves[i].to);
      if (a != algorithm::magnet) continue;
      if (!over_before(f, o)) {
        EXPECT_LE(p.watts_after, p.watts_before + 1e-9);
      }
      for (const auto& t : targets) {
        const host_outcome& out = outcome(p, t);
        const host_spec& hs = *std::find_if(f.hosts.begin(), f.hosts.end(), [&](auto& h) { return h.name == t; });
        EXPECT_LE(out.cpu_used, o.cpu_upper * hs.cpus + 1e-9) << t;
        EXPECT_LE(out.cpu_peak_used, o.peak_upper * hs.cpus + 1e-9) << t;
        EXPECT_LE(out.mem_used, o.mem_upper * hs.mem_bytes + 1) << t;
        if (hs.link_bps > 0) {
          EXPECT_LE(out.net_used_bps, o.link_upper * hs.link_bps + 1) << t;
        }
      }
    }
  }
}

}  // namespace
}  // namespace magnet::place
