// A VM's share of the host's power as stats of its view
// (magnet/metrics/power_stats.h): the meter's own figures for that VM, its
// source, the model's stated error carried by its share; nothing for a VM
// the meter does not know, and nothing of the host's total.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "magnet/metrics/power_stats.h"

namespace magnet::host {
namespace {

namespace fs = std::filesystem;
using power::power_meter;
using power::vm_work;

power::power_model model(const char* text) { return power::parse_power_model(text, "m.conf").value(); }

std::map<uint16_t, view::stat_value> by_id(const std::vector<view::stat_value>& v) {
  std::map<uint16_t, view::stat_value> m;
  for (const auto& s : v) EXPECT_TRUE(m.emplace(s.id, s).second) << "stat " << s.id << " twice";
  return m;
}

std::vector<view::stat_value> stats_of(const power_meter& m, uint32_t vm) {
  std::vector<view::stat_value> out;
  append_power_stats(m, vm, out);
  return out;
}

constexpr uint64_t kMs = 1'000'000;

// A straight model (100 W idle, 300 W full, error 10 %), two VMs, ticks of
// 100 ms at 50 % busy, VM 1 a fifth of the busy time: 20 W of its own.
TEST(PowerStats, ModelSourceIsTheMetersFiguresWithTheStatedError) {
  power_meter m(model("idle = 100\nfull = 300\nerror = 10%\n"));
  std::map<uint32_t, vm_work> vms{{1, {}}, {2, {}}};
  ASSERT_TRUE(m.sample(1000 * kMs, {0, 0}, vms).ok());
  // The VM is known, the meter has no interval yet: watts unknown, energy 0.
  auto first = by_id(stats_of(m, 1));
  ASSERT_EQ(first.size(), 4u);
  EXPECT_FALSE(first[MAGNET_STAT_POWER_WATTS].valid());
  EXPECT_TRUE(first[MAGNET_STAT_ENERGY_JOULES].valid());
  EXPECT_EQ(first[MAGNET_STAT_ENERGY_JOULES].value, 0);
  EXPECT_FALSE(first[MAGNET_STAT_POWER_MODEL_ERR].valid());
  uint64_t busy = 0, w1 = 0, w2 = 0;
  for (int i = 1; i <= 15; ++i) {
    busy += 100 * kMs;  // 2 CPUs, 100 ms: half busy
    w1 += 20 * kMs;
    w2 += 50 * kMs;
    vms = {{1, {w1, 0, 0}}, {2, {w2, 0, 0}}};
    ASSERT_TRUE(m.sample((1000 + 100 * i) * kMs, {busy, busy}, vms).ok());
  }
  auto s = by_id(stats_of(m, 1));
  ASSERT_EQ(s.size(), 4u);
  const auto& w = s[MAGNET_STAT_POWER_WATTS];
  EXPECT_TRUE(w.valid());
  EXPECT_EQ(w.value, m.vm_watts(1)) << "the meter's figure, as /metrics has it";
  EXPECT_NEAR(w.value, 20, 1e-9);
  EXPECT_EQ(w.window_us, m.window_ns() / 1000);
  EXPECT_GE(w.window_us, 1'000'000u);
  EXPECT_EQ(w.age_us, 0u);
  const auto& e = s[MAGNET_STAT_ENERGY_JOULES];
  EXPECT_EQ(e.value, m.totals().vms.at(1));
  EXPECT_NEAR(e.value, 15 * 2.0, 1e-9) << "1.5 s at 20 W";
  EXPECT_EQ(e.window_us, 0u) << "a total";
  EXPECT_EQ(s[MAGNET_STAT_POWER_SOURCE].value, MAGNET_VIEW_POWER_MODEL);
  EXPECT_TRUE(s[MAGNET_STAT_POWER_MODEL_ERR].valid());
  EXPECT_NEAR(s[MAGNET_STAT_POWER_MODEL_ERR].value, 2, 1e-9) << "10 % of its 20 W";
  EXPECT_NEAR(by_id(stats_of(m, 2))[MAGNET_STAT_POWER_WATTS].value, 50, 1e-9);
  // A VM the meter does not know (never sampled, or gone): nothing at all.
  EXPECT_TRUE(stats_of(m, 3).empty());
  ASSERT_TRUE(m.sample(2600 * kMs, {busy + 100 * kMs, busy + 100 * kMs}, {{2, {w2, 0, 0}}}).ok());
  EXPECT_TRUE(stats_of(m, 1).empty()) << "VM 1 gone";
  // The stats are appended after what is there.
  std::vector<view::stat_value> out{{MAGNET_STAT_TAP_TX_BPS, MAGNET_VSTAT_VALID, 0, 0, 0, 1}};
  append_power_stats(m, 2, out);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].id, MAGNET_STAT_TAP_TX_BPS);
}

TEST(PowerStats, AModelThatStatesNoErrorSendsItUnknown) {
  power_meter m(model("idle = 100\nfull = 300\n"));
  ASSERT_TRUE(m.sample(1000 * kMs, {0, 0}, {{1, {}}}).ok());
  ASSERT_TRUE(m.sample(1100 * kMs, {100 * kMs, 100 * kMs}, {{1, {50 * kMs, 0, 0}}}).ok());
  auto s = by_id(stats_of(m, 1));
  ASSERT_EQ(s.count(MAGNET_STAT_POWER_MODEL_ERR), 1u);
  EXPECT_FALSE(s[MAGNET_STAT_POWER_MODEL_ERR].valid());
  EXPECT_TRUE(s[MAGNET_STAT_POWER_WATTS].valid());
  EXPECT_NEAR(s[MAGNET_STAT_POWER_WATTS].value, 50, 1e-9);
}

// RAPL: measured, so no model error; the source says so.
TEST(PowerStats, RaplSourceHasNoModelError) {
  const std::string root = "/tmp/magnet-power-stats-" + std::to_string(getpid());
  fs::remove_all(root);
  auto put = [&](const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(root + "/" + rel).parent_path());
    std::ofstream(root + "/" + rel, std::ios::trunc) << text;
  };
  put("intel-rapl:0/name", "package-0\n");
  put("intel-rapl:0/max_energy_range_uj", "1000000000\n");
  put("intel-rapl:0/energy_uj", "0\n");
  auto r = power::powercap_reader::open(root);
  ASSERT_TRUE(r.ok()) << r.err().message;
  power_meter m(std::move(*r));
  ASSERT_TRUE(m.sample(1000 * kMs, {0, 0}, {{1, {}}}).ok());
  put("intel-rapl:0/energy_uj", "8000000\n");  // 8 J in 100 ms: 80 W
  ASSERT_TRUE(m.sample(1100 * kMs, {100 * kMs, 100 * kMs}, {{1, {25 * kMs, 0, 0}}}).ok());
  fs::remove_all(root);
  auto s = by_id(stats_of(m, 1));
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s.count(MAGNET_STAT_POWER_MODEL_ERR), 0u);
  EXPECT_EQ(s[MAGNET_STAT_POWER_SOURCE].value, MAGNET_VIEW_POWER_RAPL);
  // Half idle: 40 W active, the VM a quarter of the busy time.
  EXPECT_NEAR(s[MAGNET_STAT_POWER_WATTS].value, 10, 1e-9);
  EXPECT_NEAR(s[MAGNET_STAT_ENERGY_JOULES].value, 1, 1e-9);
}

}  // namespace
}  // namespace magnet::host
