// /metrics: the exact text of both formats for fixed counters, label
// escaping, histograms from the kernel's log2 buckets, content negotiation,
// and the list of series names against what a page really holds.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>
#include <set>
#include <sstream>

#include "magnet/event.h"
#include "magnet/view.h"
#include "magnet/export/openmetrics.h"

namespace magnet::host {
namespace {

// The lines of the family whose HELP line names @name (up to the next HELP).
std::string block(const std::string& page, const std::string& name) {
  size_t at = page.find("# HELP " + name + " ");
  if (at == std::string::npos) return "<no family " + name + ">";
  size_t end = page.find("# HELP ", at + 1);
  if (end == std::string::npos) end = page.find("# EOF", at);
  return page.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// A clock that advances 2.5 ms per reading.
std::function<uint64_t()> fixed_clock() {
  auto t = std::make_shared<uint64_t>(1000000000);
  return [t] { return *t += 2500000; };
}

struct fixture {
  vm_counters c1, c2;
  vm_record_totals r1;
  exposition_input in;
  fixture() {
    c1.tap_tx_bytes = 1500000;
    c1.tap_tx_pkts = 1000;
    c1.tap_rx_bytes = 64000;
    c1.tap_rx_pkts = 1000;
    c1.blk_bytes = 4096 * 3;
    c1.blk_reqs = 3;
    c1.lost = 7;
    c1.vcpu_ns[0] = {1500000000, 250000000, 3000000000};
    c1.vcpu_ns[1] = {1, 0, 0};
    lat_stat io;  // VMX io_instruction: 2 exits of 300 ns (bucket 8), 1 of 5 us (bucket 12)
    io.count = 3;
    io.total_ns = 5600;
    io.hist[8] = 2;
    io.hist[12] = 1;
    c1.reasons[MAGNET_VIEW_REASON_INDEX(1, 30)] = io;
    lat_stat slept;
    slept.count = 1;
    slept.total_ns = 4000000000ull;  // 4 s: the kernel's last bucket, +Inf only
    slept.hist[31] = 1;
    c1.reasons[MAGNET_VIEW_REASON_HALT_SLEPT] = slept;
    c1.queue[0].count = 2;
    c1.queue[0].total_ns = 100;
    c1.queue[0].hist[0] = 1;  // below 2 ns
    c1.queue[0].hist[7] = 1;  // 128..255 ns: still in the first bound
    r1.drops_tap = 5;
    r1.drops_link = 2;
    r1.blk_latency.count = 1;
    r1.blk_latency.total_ns = 1000000;
    r1.blk_latency.hist[19] = 1;
    in.vms.push_back({"web \"one\"\\\nx", "11111111-2222-3333-4444-555555555555", 3, &c1, &r1,
                      vm_power_figures{12.5, 300.25}});
    in.vms.push_back({"g2", "66666666-2222-3333-4444-555555555555", 4, &c2, nullptr, vm_power_figures{0, 0}});
    in.vms.push_back({"starting", "77777777-2222-3333-4444-555555555555", 5, nullptr, nullptr});
    in.records = 12345;
    in.lost = 9;
    in.resident_bytes = 10 << 20;
    in.libvirt_connected = true;
    in.power = host_power_figures{"rapl", 101.5, 5000.5, 3000, 1200.25, 500};
  }
};

const char* kLe[] = {"2.55e-07",    "5.11e-07",    "1.023e-06",  "2.047e-06",   "4.095e-06",
                     "8.191e-06",   "1.6383e-05",  "3.2767e-05", "6.5535e-05",  "0.000131071",
                     "0.000262143", "0.000524287", "0.001048575", "0.002097151", "0.004194303",
                     "0.008388607", "0.016777215", "0.033554431", "0.067108863", "0.134217727",
                     "0.268435455", "0.536870911", "1.073741823", "2.147483647"};

TEST(OpenMetrics, HistogramBoundsAreTheKernelsLog2BucketsInSeconds) {
  auto b = histogram_bounds_s();
  ASSERT_EQ(b.size(), std::size(kLe));
  for (size_t i = 0; i < b.size(); ++i) EXPECT_DOUBLE_EQ(b[i], std::stod(kLe[i])) << i;
}

// --metrics-detail coarse: one bound in four of the same series, each
// bucket as cumulative as on the full page (the ones between go to the next
// bound kept), _count and _sum unchanged; every other family the same.
TEST(OpenMetrics, CoarseHistogramsKeepOneBoundInFourWithTheSameCounts) {
  auto b = histogram_bounds_s(histogram_detail::coarse);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_DOUBLE_EQ(b[i], std::stod(kLe[4 * i])) << i;
  fixture f;
  const std::string full = render_metrics(f.in, exposition::prometheus, fixed_clock());
  f.in.detail = histogram_detail::coarse;
  const std::string coarse = render_metrics(f.in, exposition::prometheus, fixed_clock());
  const std::string dom1 = R"(domain="web \"one\"\\\nx",uuid="11111111-2222-3333-4444-555555555555")";
  std::string h = "# HELP magnet_vm_kvm_exit_handling_seconds KVM exit to the next entry, by exit reason\n"
                  "# TYPE magnet_vm_kvm_exit_handling_seconds histogram\n";
  for (size_t i = 0; i < std::size(kLe); i += 4)
    h += "magnet_vm_kvm_exit_handling_seconds_bucket{" + dom1 + ",reason=\"io_instruction\",le=\"" +
         kLe[i] + "\"} " + (i < 1 ? "0" : i < 5 ? "2" : "3") + "\n";
  h += "magnet_vm_kvm_exit_handling_seconds_bucket{" + dom1 + ",reason=\"io_instruction\",le=\"+Inf\"} 3\n"
       "magnet_vm_kvm_exit_handling_seconds_count{" + dom1 + ",reason=\"io_instruction\"} 3\n"
       "magnet_vm_kvm_exit_handling_seconds_sum{" + dom1 + ",reason=\"io_instruction\"} 5.6e-06\n";
  EXPECT_EQ(block(coarse, "magnet_vm_kvm_exit_handling_seconds"), h);
  // Block latency of 1 ms (kernel bucket 19): in le=0.001048575, kept.
  const std::string blk = block(coarse, "magnet_vm_block_latency_seconds");
  EXPECT_NE(blk.find("magnet_vm_block_latency_seconds_bucket{" + dom1 + ",le=\"6.5535e-05\"} 0\n"),
            std::string::npos) << blk;
  EXPECT_NE(blk.find("magnet_vm_block_latency_seconds_bucket{" + dom1 + ",le=\"0.001048575\"} 1\n"),
            std::string::npos) << blk;
  // Only the bucket lines differ: the full page without the bounds dropped
  // is the coarse page (but for the scrape's own duration, the last line).
  std::set<std::string> dropped;
  for (size_t i = 0; i < std::size(kLe); ++i)
    if (i % 4) dropped.insert(std::string("le=\"") + kLe[i] + "\"}");
  std::string kept;
  std::istringstream lines(full);
  for (std::string line; std::getline(lines, line);) {
    bool drop = false;
    for (const auto& d : dropped) drop |= line.find(d) != std::string::npos;
    if (!drop) kept += line + "\n";
  }
  auto without_duration = [](const std::string& p) { return p.substr(0, p.find("magnet_scrape_duration_seconds ")); };
  EXPECT_EQ(without_duration(kept), without_duration(coarse));
  EXPECT_LT(coarse.size(), full.size());
}

TEST(OpenMetrics, PrometheusTextExactFamilies) {
  fixture f;
  const std::string page = render_metrics(f.in, exposition::prometheus, fixed_clock());
  const std::string dom1 = R"(domain="web \"one\"\\\nx",uuid="11111111-2222-3333-4444-555555555555")";
  const std::string dom2 = R"(domain="g2",uuid="66666666-2222-3333-4444-555555555555")";
  const std::string dom3 = R"(domain="starting",uuid="77777777-2222-3333-4444-555555555555")";
  EXPECT_EQ(page.rfind("# HELP magnet_vm_info ", 0), 0u) << page.substr(0, 200);
  EXPECT_EQ(block(page, "magnet_vm_info"),
            "# HELP magnet_vm_info A VM the daemon follows: libvirt domain name and UUID, magnet's VM id\n"
            "# TYPE magnet_vm_info gauge\n"
            "magnet_vm_info{" + dom1 + ",magnet_id=\"3\"} 1\n"
            "magnet_vm_info{" + dom2 + ",magnet_id=\"4\"} 1\n"
            "magnet_vm_info{" + dom3 + ",magnet_id=\"5\"} 1\n");
  EXPECT_EQ(block(page, "magnet_vm_vcpu_seconds_total"),
            "# HELP magnet_vm_vcpu_seconds_total Time of each vCPU thread by state: run (on a CPU), "
            "wait (runnable, no CPU: the host side of steal), halt (the guest idle)\n"
            "# TYPE magnet_vm_vcpu_seconds_total counter\n"
            "magnet_vm_vcpu_seconds_total{" + dom1 + ",vcpu=\"0\",state=\"run\"} 1.5\n"
            "magnet_vm_vcpu_seconds_total{" + dom1 + ",vcpu=\"0\",state=\"wait\"} 0.25\n"
            "magnet_vm_vcpu_seconds_total{" + dom1 + ",vcpu=\"0\",state=\"halt\"} 3\n"
            "magnet_vm_vcpu_seconds_total{" + dom1 + ",vcpu=\"1\",state=\"run\"} 1e-09\n"
            "magnet_vm_vcpu_seconds_total{" + dom1 + ",vcpu=\"1\",state=\"wait\"} 0\n"
            "magnet_vm_vcpu_seconds_total{" + dom1 + ",vcpu=\"1\",state=\"halt\"} 0\n");
  EXPECT_EQ(block(page, "magnet_vm_kvm_exits_total"),
            "# HELP magnet_vm_kvm_exits_total KVM exits by exit reason (counted as the vCPU enters "
            "the guest again)\n"
            "# TYPE magnet_vm_kvm_exits_total counter\n"
            "magnet_vm_kvm_exits_total{" + dom1 + ",reason=\"io_instruction\"} 3\n");
  EXPECT_EQ(block(page, "magnet_vm_network_transmit_bytes_total"),
            "# HELP magnet_vm_network_transmit_bytes_total Bytes the guest sent on its taps, from "
            "the IP header on\n"
            "# TYPE magnet_vm_network_transmit_bytes_total counter\n"
            "magnet_vm_network_transmit_bytes_total{" + dom1 + "} 1500000\n"
            "magnet_vm_network_transmit_bytes_total{" + dom2 + "} 0\n");
  EXPECT_EQ(block(page, "magnet_vm_network_drops_total"),
            "# HELP magnet_vm_network_drops_total The VM's packets dropped on the host: on its taps "
            "and host path (where=\"tap\") or at a shared link given with --link (where=\"link\")\n"
            "# TYPE magnet_vm_network_drops_total counter\n"
            "magnet_vm_network_drops_total{" + dom1 + ",where=\"tap\"} 5\n"
            "magnet_vm_network_drops_total{" + dom1 + ",where=\"link\"} 2\n"
            "magnet_vm_network_drops_total{" + dom2 + ",where=\"tap\"} 0\n"
            "magnet_vm_network_drops_total{" + dom2 + ",where=\"link\"} 0\n");
  EXPECT_EQ(block(page, "magnet_vm_lost_records_total"),
            "# HELP magnet_vm_lost_records_total The VM's records lost in the kernel (over its "
            "stream quota, or the ring buffer full)\n"
            "# TYPE magnet_vm_lost_records_total counter\n"
            "magnet_vm_lost_records_total{" + dom1 + "} 7\n"
            "magnet_vm_lost_records_total{" + dom2 + "} 0\n");
  // Exit handling: cumulative buckets, +Inf equal to _count, _sum in seconds.
  std::string h = "# HELP magnet_vm_kvm_exit_handling_seconds KVM exit to the next entry, by exit reason\n"
                  "# TYPE magnet_vm_kvm_exit_handling_seconds histogram\n";
  for (size_t i = 0; i < std::size(kLe); ++i)
    h += "magnet_vm_kvm_exit_handling_seconds_bucket{" + dom1 + ",reason=\"io_instruction\",le=\"" +
         kLe[i] + "\"} " + (i < 1 ? "0" : i < 5 ? "2" : "3") + "\n";
  h += "magnet_vm_kvm_exit_handling_seconds_bucket{" + dom1 + ",reason=\"io_instruction\",le=\"+Inf\"} 3\n"
       "magnet_vm_kvm_exit_handling_seconds_count{" + dom1 + ",reason=\"io_instruction\"} 3\n"
       "magnet_vm_kvm_exit_handling_seconds_sum{" + dom1 + ",reason=\"io_instruction\"} 5.6e-06\n";
  EXPECT_EQ(block(page, "magnet_vm_kvm_exit_handling_seconds"), h);
  // A halt of 4 s lies beyond the last finite bound.
  const std::string halt = block(page, "magnet_vm_kvm_halt_seconds");
  EXPECT_NE(halt.find("magnet_vm_kvm_halt_seconds_bucket{" + dom1 + ",kind=\"slept\",le=\"2.147483647\"} 0\n"),
            std::string::npos) << halt;
  EXPECT_NE(halt.find("magnet_vm_kvm_halt_seconds_bucket{" + dom1 + ",kind=\"slept\",le=\"+Inf\"} 1\n"),
            std::string::npos) << halt;
  EXPECT_NE(halt.find("magnet_vm_kvm_halt_seconds_sum{" + dom1 + ",kind=\"slept\"} 4\n"), std::string::npos) << halt;
  // Buckets below 255 ns are merged into the first bound.
  const std::string q = block(page, "magnet_vm_host_queue_seconds");
  EXPECT_NE(q.find("magnet_vm_host_queue_seconds_bucket{" + dom1 + ",direction=\"transmit\",le=\"2.55e-07\"} 2\n"),
            std::string::npos) << q;
  EXPECT_NE(q.find("magnet_vm_host_queue_seconds_bucket{" + dom2 + ",direction=\"receive\",le=\"+Inf\"} 0\n"),
            std::string::npos) << q;
  const std::string blk = block(page, "magnet_vm_block_latency_seconds");
  EXPECT_NE(blk.find("magnet_vm_block_latency_seconds_bucket{" + dom1 + ",le=\"0.000524287\"} 0\n"),
            std::string::npos) << blk;
  EXPECT_NE(blk.find("magnet_vm_block_latency_seconds_bucket{" + dom1 + ",le=\"0.001048575\"} 1\n"),
            std::string::npos) << blk;
  const size_t globals = page.find("# HELP magnet_records_total");
  ASSERT_NE(globals, std::string::npos) << page;
  EXPECT_EQ(page.substr(globals),
            "# HELP magnet_records_total Records the daemon consumed from the kernel\n"
            "# TYPE magnet_records_total counter\n"
            "magnet_records_total 12345\n"
            "# HELP magnet_lost_records_total Records lost in the kernel (ring buffer full), all VMs together\n"
            "# TYPE magnet_lost_records_total counter\n"
            "magnet_lost_records_total 9\n"
            "# HELP magnet_libvirt_up 1 while the daemon is connected to libvirt\n"
            "# TYPE magnet_libvirt_up gauge\n"
            "magnet_libvirt_up 1\n"
            "# HELP magnet_vms VMs the daemon follows\n"
            "# TYPE magnet_vms gauge\n"
            "magnet_vms 3\n"
            "# HELP process_resident_memory_bytes Resident memory of the daemon\n"
            "# TYPE process_resident_memory_bytes gauge\n"
            "process_resident_memory_bytes 10485760\n"
            "# HELP magnet_scrape_duration_seconds Time the daemon took to render this page, up to this family\n"
            "# TYPE magnet_scrape_duration_seconds gauge\n"
            "magnet_scrape_duration_seconds 0.0025\n");
}

// The power families (host/power): each VM's share, the host's power and
// energy by source, the parts no VM is given; the VM not yet sampled has
// none.  Without a power source not one line of them, HELP and TYPE
// included.
TEST(OpenMetrics, PowerFamiliesAndNoneWithoutAPowerSource) {
  fixture f;
  const std::string page = render_metrics(f.in, exposition::prometheus, fixed_clock());
  const std::string dom1 = R"(domain="web \"one\"\\\nx",uuid="11111111-2222-3333-4444-555555555555")";
  const std::string dom2 = R"(domain="g2",uuid="66666666-2222-3333-4444-555555555555")";
  EXPECT_EQ(block(page, "magnet_vm_power_watts"),
            "# HELP magnet_vm_power_watts The VM's share of the host's power over the last second: of the "
            "host's power above idle, its CPU time's share of the host's busy time (docs/placement.md)\n"
            "# TYPE magnet_vm_power_watts gauge\n"
            "magnet_vm_power_watts{" + dom1 + "} 12.5\n"
            "magnet_vm_power_watts{" + dom2 + "} 0\n");
  EXPECT_EQ(block(page, "magnet_vm_energy_joules_total"),
            "# HELP magnet_vm_energy_joules_total The VM's share of the host's energy since the daemon "
            "started (as magnet_vm_power_watts)\n"
            "# TYPE magnet_vm_energy_joules_total counter\n"
            "magnet_vm_energy_joules_total{" + dom1 + "} 300.25\n"
            "magnet_vm_energy_joules_total{" + dom2 + "} 0\n");
  EXPECT_EQ(block(page, "magnet_host_power_watts"),
            "# HELP magnet_host_power_watts The host's power over the last second, from RAPL "
            "(source=\"rapl\") or the host's power model at its CPU utilisation (source=\"model\")\n"
            "# TYPE magnet_host_power_watts gauge\n"
            "magnet_host_power_watts{source=\"rapl\"} 101.5\n");
  EXPECT_EQ(block(page, "magnet_host_energy_joules_total"),
            "# HELP magnet_host_energy_joules_total The host's energy since the daemon started: the VMs' "
            "magnet_vm_energy_joules_total and magnet_host_energy_part_joules_total add up to it\n"
            "# TYPE magnet_host_energy_joules_total counter\n"
            "magnet_host_energy_joules_total{source=\"rapl\"} 5000.5\n");
  EXPECT_EQ(block(page, "magnet_host_energy_part_joules_total"),
            "# HELP magnet_host_energy_part_joules_total The host's energy that no VM it follows is given: "
            "its idle power (part=\"idle\"), its busy time that was no VM's work (part=\"own\"), VMs that "
            "have gone since (part=\"gone\")\n"
            "# TYPE magnet_host_energy_part_joules_total counter\n"
            "magnet_host_energy_part_joules_total{source=\"rapl\",part=\"idle\"} 3000\n"
            "magnet_host_energy_part_joules_total{source=\"rapl\",part=\"own\"} 1200.25\n"
            "magnet_host_energy_part_joules_total{source=\"rapl\",part=\"gone\"} 500\n");
  const std::string om = render_metrics(f.in, exposition::openmetrics, fixed_clock());
  EXPECT_NE(om.find("# TYPE magnet_host_energy_joules counter\n# UNIT magnet_host_energy_joules joules\n"
                    "magnet_host_energy_joules_total{source=\"rapl\"} 5000.5\n"),
            std::string::npos);
  EXPECT_NE(om.find("# TYPE magnet_vm_power_watts gauge\n# UNIT magnet_vm_power_watts watts\n"), std::string::npos);

  f.in.power.reset();
  for (auto& vm : f.in.vms) vm.power.reset();
  for (auto fmt : {exposition::prometheus, exposition::openmetrics}) {
    const std::string none = render_metrics(f.in, fmt, fixed_clock());
    for (const char* word : {"power", "energy", "joules", "watts"})
      EXPECT_EQ(none.find(word), std::string::npos) << word;
    EXPECT_NE(none.find("magnet_records_total 12345"), std::string::npos);
  }
}

TEST(OpenMetrics, OpenMetricsTypesUnitsTotalsAndEof) {
  fixture f;
  const std::string page = render_metrics(f.in, exposition::openmetrics, fixed_clock());
  const std::string dom2 = R"(domain="g2",uuid="66666666-2222-3333-4444-555555555555")";
  EXPECT_EQ(block(page, "magnet_vm"),
            "# HELP magnet_vm A VM the daemon follows: libvirt domain name and UUID, magnet's VM id\n"
            "# TYPE magnet_vm info\n"
            "magnet_vm_info{domain=\"web \\\"one\\\"\\\\\\nx\",uuid=\"11111111-2222-3333-4444-555555555555\","
            "magnet_id=\"3\"} 1\n"
            "magnet_vm_info{" + dom2 + ",magnet_id=\"4\"} 1\n"
            "magnet_vm_info{domain=\"starting\",uuid=\"77777777-2222-3333-4444-555555555555\","
            "magnet_id=\"5\"} 1\n");
  EXPECT_EQ(block(page, "magnet_vm_network_receive_bytes"),
            "# HELP magnet_vm_network_receive_bytes Bytes the guest received on its taps, from the IP header on\n"
            "# TYPE magnet_vm_network_receive_bytes counter\n"
            "# UNIT magnet_vm_network_receive_bytes bytes\n"
            "magnet_vm_network_receive_bytes_total{domain=\"web \\\"one\\\"\\\\\\nx\","
            "uuid=\"11111111-2222-3333-4444-555555555555\"} 64000\n"
            "magnet_vm_network_receive_bytes_total{" + dom2 + "} 0\n");
  // OpenMetrics escapes quotes in HELP too.
  EXPECT_NE(page.find("# HELP magnet_vm_network_drops The VM's packets dropped on the host: on its taps "
                      "and host path (where=\\\"tap\\\")"),
            std::string::npos);
  EXPECT_NE(page.find("# TYPE magnet_vm_host_queue_seconds histogram\n# UNIT magnet_vm_host_queue_seconds seconds\n"),
            std::string::npos);
  EXPECT_NE(page.find("# TYPE magnet_vm_kvm_exits counter\nmagnet_vm_kvm_exits_total{"), std::string::npos)
      << "no UNIT line for a count";
  EXPECT_TRUE(page.ends_with("magnet_scrape_duration_seconds 0.0025\n# EOF\n")) << page.substr(page.size() - 300);
  EXPECT_EQ(page.find("# EOF"), page.size() - 6) << "one EOF, at the end";
  EXPECT_EQ(render_metrics(f.in, exposition::prometheus).find("# EOF"), std::string::npos);
  // Every counter sample ends _total, and no family name does.
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("# TYPE ")) {
      EXPECT_EQ(line.find("_total "), std::string::npos) << line;
    }
}

TEST(OpenMetrics, ContentNegotiation) {
  // Prometheus 2.42's scrape Accept header.
  EXPECT_EQ(negotiate_exposition("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                                 "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
            exposition::openmetrics);
  EXPECT_EQ(negotiate_exposition("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            exposition::openmetrics);
  EXPECT_EQ(negotiate_exposition("APPLICATION/OpenMetrics-Text"), exposition::openmetrics);
  EXPECT_EQ(negotiate_exposition("text/plain, application/openmetrics-text"), exposition::openmetrics)
      << "equal preference: the one that was named";
  EXPECT_EQ(negotiate_exposition(""), exposition::prometheus);
  EXPECT_EQ(negotiate_exposition("*/*"), exposition::prometheus);
  EXPECT_EQ(negotiate_exposition("text/plain;version=0.0.4"), exposition::prometheus);
  EXPECT_EQ(negotiate_exposition("application/openmetrics-text;version=0.0.1"), exposition::prometheus)
      << "a version we do not write";
  EXPECT_EQ(negotiate_exposition("application/openmetrics-text;q=0"), exposition::prometheus);
  EXPECT_EQ(negotiate_exposition("application/openmetrics-text;q=0.4,text/plain;q=0.9"), exposition::prometheus);
  EXPECT_EQ(negotiate_exposition("application/openmetrics-text;q=banana"), exposition::prometheus)
      << "a malformed q drops that range";
  EXPECT_EQ(negotiate_exposition(",,;;=,application/json"), exposition::prometheus);
  EXPECT_EQ(content_type(exposition::openmetrics), "application/openmetrics-text; version=1.0.0; charset=utf-8");
  EXPECT_EQ(content_type(exposition::prometheus), "text/plain; version=0.0.4; charset=utf-8");
}

// The name list (--list-metrics, the dashboard test) is what pages hold.
TEST(OpenMetrics, SeriesNamesAreExactlyThoseOfAPage) {
  fixture f;
  const std::string page = render_metrics(f.in, exposition::prometheus);
  std::set<std::string> on_page;
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') on_page.insert(line.substr(0, line.find_first_of("{ ")));
  const auto names = metric_series_names();
  EXPECT_EQ(on_page, std::set<std::string>(names.begin(), names.end()));
  static const std::regex valid("^[a-zA-Z_:][a-zA-Z0-9_:]*$");
  for (const auto& n : names) EXPECT_TRUE(std::regex_match(n, valid)) << n;
}

std::vector<uint8_t> record(uint32_t vm, uint16_t type, const void* payload, size_t n) {
  std::vector<uint8_t> r(sizeof(magnet_hdr) + n);
  magnet_hdr h{};
  h.vm_id = vm;
  h.type = type;
  h.len = static_cast<uint16_t>(r.size());
  std::memcpy(r.data(), &h, sizeof h);
  std::memcpy(r.data() + sizeof h, payload, n);
  return r;
}

TEST(OpenMetrics, RecordTotalsCountDropsAndBucketBlockLatencyAsTheKernel) {
  record_totals t;
  std::vector<uint8_t> b;
  auto add = [&](const std::vector<uint8_t>& r) { b.insert(b.end(), r.begin(), r.end()); };
  magnet_net_drop d{};
  d.ifindex = 7;
  add(record(1, MAGNET_EV_NET_DROP, &d, sizeof d));
  d.ifindex = 9;  // the link's device
  add(record(1, MAGNET_EV_NET_DROP, &d, sizeof d));
  add(record(0, MAGNET_EV_NET_DROP, &d, sizeof d));  // the host's: not a VM's
  magnet_blk k{};
  for (uint64_t ns : {0ull, 1ull, 2ull, 3ull, 1023ull, 1024ull, 1ull << 40}) {
    k.latency_ns = ns;
    add(record(2, MAGNET_EV_BLK_COMPLETE, &k, sizeof k));
  }
  link_info l;
  l.ifindex = 9;
  t.feed(b, {l});
  ASSERT_NE(t.find(1), nullptr);
  EXPECT_EQ(t.find(1)->drops_tap, 1u);
  EXPECT_EQ(t.find(1)->drops_link, 1u);
  ASSERT_NE(t.find(2), nullptr);
  const lat_stat& s = t.find(2)->blk_latency;
  EXPECT_EQ(s.count, 6u) << "a latency of 0 is unknown";
  EXPECT_EQ(s.hist[0], 1u);  // 1
  EXPECT_EQ(s.hist[1], 2u);  // 2, 3
  EXPECT_EQ(s.hist[9], 1u);  // 1023
  EXPECT_EQ(s.hist[10], 1u);  // 1024
  EXPECT_EQ(s.hist[31], 1u) << "beyond the last bucket: the last";
  EXPECT_EQ(t.find(0), nullptr);
  const uint32_t keep[] = {2};
  t.retain(keep);
  EXPECT_EQ(t.find(1), nullptr);
  EXPECT_NE(t.find(2), nullptr);
}

// Behind `magnet host --sample`: a sampled record of a type kept 1 in N is N
// drops, or N block requests in the latency histogram (its count, sum and
// bucket; the largest is one request's); without the flag, or of a type not
// sampled, one.
TEST(OpenMetrics, RecordTotalsCountASampledRecordForTheEventsItStandsFor) {
  record_totals t;
  t.set_sample_weights(sample_weights({{MAGNET_EV_NET_DROP, 4}, {MAGNET_EV_BLK_COMPLETE, 8}}));
  std::vector<uint8_t> b;
  auto add = [&](std::vector<uint8_t> r, bool sampled) {
    if (sampled) reinterpret_cast<magnet_hdr*>(r.data())->flags |= MAGNET_RF_SAMPLED;
    b.insert(b.end(), r.begin(), r.end());
  };
  magnet_net_drop d{};
  d.ifindex = 7;
  add(record(1, MAGNET_EV_NET_DROP, &d, sizeof d), true);
  add(record(1, MAGNET_EV_NET_DROP, &d, sizeof d), false);
  d.ifindex = 9;
  add(record(1, MAGNET_EV_NET_DROP, &d, sizeof d), true);
  magnet_blk k{};
  k.latency_ns = 1500;
  add(record(2, MAGNET_EV_BLK_COMPLETE, &k, sizeof k), true);
  k.latency_ns = 100;
  add(record(2, MAGNET_EV_BLK_COMPLETE, &k, sizeof k), false);
  link_info l;
  l.ifindex = 9;
  t.feed(b, {l});
  ASSERT_NE(t.find(1), nullptr);
  EXPECT_EQ(t.find(1)->drops_tap, 5u);
  EXPECT_EQ(t.find(1)->drops_link, 4u);
  ASSERT_NE(t.find(2), nullptr);
  const lat_stat& s = t.find(2)->blk_latency;
  EXPECT_EQ(s.count, 9u);
  EXPECT_EQ(s.total_ns, 8u * 1500 + 100);
  EXPECT_EQ(s.max_ns, 1500u);
  EXPECT_EQ(s.hist[10], 8u);  // 1500
  EXPECT_EQ(s.hist[6], 1u);   // 100
}

}  // namespace
}  // namespace magnet::host
