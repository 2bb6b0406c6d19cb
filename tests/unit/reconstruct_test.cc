// host/reconstruct: every phase on crafted segment sequences, the best of
// three, the scoring, the pcap and trace readers, and magnet reconstruct's
// usage errors.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "magnet/reconstruct/readers.h"
#include "magnet/reconstruct/reconstruct.h"
#include "magnet/trace_file.h"
#include "proc.h"

namespace magnet::reconstruct {
namespace {

constexpr uint64_t kMs = 1'000'000;

endpoint ep(uint8_t last, uint16_t port) {
  endpoint e;
  e.addr = {10, 0, 0, last};
  e.port = port;
  return e;
}
const endpoint kClient = ep(1, 40000), kServer = ep(2, 80);

// Segments of one connection: time in ms, client-to-server or not.
struct seg_in {
  uint64_t ms;
  bool from_client;
  uint32_t seq, len;
  uint8_t flags = kAck;
};
std::vector<packet> packets(const std::vector<seg_in>& v) {
  std::vector<packet> out;
  for (const auto& s : v) {
    packet p;
    p.time_ns = s.ms * kMs;
    p.src = s.from_client ? kClient : kServer;
    p.dst = s.from_client ? kServer : kClient;
    p.seq = s.seq;
    p.payload = s.len;
    p.flags = s.flags;
    out.push_back(p);
  }
  return out;
}

// One sanitised stream of @v.
stream one(const std::vector<seg_in>& v) {
  auto ss = separate(packets(v));
  EXPECT_EQ(ss.size(), 1u);
  sanitise(ss.at(0));
  return ss.at(0);
}

std::vector<uint64_t> sizes(const std::vector<message>& m) {
  std::vector<uint64_t> out;
  for (const auto& x : m) out.push_back(x.size);
  return out;
}

// A client's stream of back-to-back segments of these sizes from seq 1
// (after a SYN at seq 0), one per ms; @psh marks which carry PSH.
std::vector<seg_in> client_writes(const std::vector<uint32_t>& lens, const std::vector<bool>& psh = {}) {
  std::vector<seg_in> v{{0, true, 0, 0, kSyn}};
  uint32_t seq = 1;
  for (size_t i = 0; i < lens.size(); ++i) {
    const uint8_t f = kAck | (i < psh.size() && psh[i] ? kPsh : 0);
    v.push_back({i + 1, true, seq, lens[i], f});
    seq += lens[i];
  }
  return v;
}

TEST(Reconstruct, SeparatesStreamsAndFindsTheOpener) {
  auto v = packets({{0, false, 500, 0, kSyn | kAck}, {1, true, 99, 0, kSyn}, {2, true, 100, 10, kAck}});
  packet other = v[2];
  other.src.port = 40001;
  v.push_back(other);
  auto ss = separate(v);
  ASSERT_EQ(ss.size(), 2u);
  EXPECT_EQ(ss[0].a, kClient);  // the SYN's sender, though the SYN+ACK came first
  EXPECT_EQ(ss[0].segments.size(), 3u);
  EXPECT_EQ(ss[0].segments[0].dir, direction::b_to_a);
  EXPECT_EQ(ss[0].segments[2].dir, direction::a_to_b);
  EXPECT_EQ(ss[1].a.port, 40001);
}

TEST(Reconstruct, RetransmissionIsDropped) {
  auto s = one({{0, true, 0, 0, kSyn}, {1, true, 1, 1000}, {2, true, 1001, 1000}, {9, true, 1, 1000},
                {10, true, 2001, 200}});
  EXPECT_EQ(s.dropped, 1u);
  EXPECT_EQ(s.segments.size(), 3u);
  EXPECT_FALSE(s.partial);
  EXPECT_EQ(sizes(cut(s, {})), (std::vector<uint64_t>{2200}));
}

TEST(Reconstruct, DuplicateAndOverlapKeepEachByteOnce) {
  // The same segment twice (seen on two devices), then one overlapping the last.
  auto s = one({{0, true, 0, 0, kSyn}, {1, true, 1, 1000}, {1, true, 1, 1000}, {2, true, 501, 1000},
                {3, true, 1501, 100}});
  EXPECT_EQ(s.dropped, 2u);
  uint64_t bytes = 0;
  for (const auto& g : s.segments) bytes += g.payload;
  EXPECT_EQ(bytes, 1600u);
  EXPECT_EQ(s.segments[1].seq, 1001u);  // the overlap trimmed to its new bytes
}

TEST(Reconstruct, OutOfOrderIsPutInByteOrderWithMonotoneTimes) {
  auto s = one({{0, true, 0, 0, kSyn}, {1, true, 1449, 1448}, {2, true, 1, 1448}, {3, true, 2897, 10}});
  ASSERT_EQ(s.segments.size(), 3u);
  EXPECT_EQ(s.segments[0].seq, 1u);
  EXPECT_EQ(s.segments[1].seq, 1449u);
  EXPECT_GE(s.segments[1].time_ns, s.segments[0].time_ns);
  EXPECT_EQ(s.filled_bytes, 0u);
  EXPECT_EQ(sizes(cut(s, {})), (std::vector<uint64_t>{2906}));
}

TEST(Reconstruct, GapIsFilledAndMarked) {
  auto s = one({{0, true, 0, 0, kSyn}, {1, true, 1, 1448}, {2, true, 2897, 1448}, {3, true, 4345, 7}});
  EXPECT_EQ(s.filled_bytes, 1448u);
  EXPECT_TRUE(s.partial);
  auto m = cut(s, {});
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].size, 4351u);
  EXPECT_TRUE(m[0].gap);
}

TEST(Reconstruct, MssCutWhereNoSegmentHasPsh) {
  auto s = one(client_writes({1448, 1448, 500, 1448, 100}));
  EXPECT_EQ(mss_estimate(s)[0], 1448u);
  EXPECT_EQ(sizes(cut(s, {})), (std::vector<uint64_t>{3396, 1548}));
  EXPECT_EQ(sizes(cut(s, {.size = size_rule::never})), (std::vector<uint64_t>{4944}));
}

TEST(Reconstruct, PshCutsEvenFullSegments) {
  auto s = one(client_writes({1448, 1448, 1448, 1448, 700}, {false, true, false, true, true}));
  EXPECT_EQ(sizes(cut(s, {})), (std::vector<uint64_t>{2896, 2896, 700}));
}

TEST(Reconstruct, DirectionChangeEndsAMessage) {
  // Request/response of equal sizes: no size or PSH cut, only the turns.
  auto s = one({{0, true, 0, 0, kSyn}, {0, false, 0, 0, kSyn | kAck}, {1, true, 1, 100}, {2, false, 1, 100},
                {3, true, 101, 100}, {4, false, 101, 100}});
  auto m = cut(s, {});
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].dir, direction::a_to_b);
  EXPECT_EQ(m[1].dir, direction::b_to_a);
  EXPECT_EQ(m[3].first_ns, 4 * kMs);
}

TEST(Reconstruct, TimeGapEndsAMessage) {
  auto v = client_writes({1448, 1448, 1448});
  v[3].ms = 60;  // 58 ms after the one before
  auto s = one(v);
  EXPECT_EQ(sizes(cut(s, {})), (std::vector<uint64_t>{4344}));
  EXPECT_EQ(sizes(cut(s, {.gap_ns = 10 * kMs})), (std::vector<uint64_t>{2896, 1448}));
}

TEST(Reconstruct, GsoSuperSegmentsAreTakenAsRecorded) {
  // A tap sees TSO super-segments of varying sizes, PSH on the last.
  auto s = one(client_writes({65160, 20272, 3000, 65160, 1}, {false, false, true, false, true}));
  EXPECT_EQ(sizes(cut(s, {})), (std::vector<uint64_t>{88432, 65161}));
  // The seed's size rule alone would cut after every shorter super-segment.
  EXPECT_EQ(sizes(cut(s, {.size = size_rule::always})), (std::vector<uint64_t>{85432, 3000, 65161}));
}

TEST(Reconstruct, MidConnectionStartIsPartial) {
  auto s = one({{1, true, 5'000'000, 1448}, {2, true, 5'001'448, 100}, {3, false, 77, 10}});
  EXPECT_TRUE(s.partial);
  EXPECT_EQ(s.filled_bytes, 0u);
  EXPECT_EQ(sizes(cut(s, {})), (std::vector<uint64_t>{1548, 10}));
  auto with_syn = one(client_writes({1448, 100}));
  EXPECT_FALSE(with_syn.partial);
}

TEST(Reconstruct, SequenceNumbersWrap) {
  auto s = one({{0, true, 0xffffff00u, 0, kSyn}, {1, true, 0xffffff01u, 1448}, {2, true, 0xffffff01u + 1448, 100}});
  EXPECT_EQ(s.dropped, 0u);
  EXPECT_EQ(sizes(cut(s, {})), (std::vector<uint64_t>{1548}));
}

std::vector<message> msgs(const std::vector<std::pair<direction, uint64_t>>& v) {
  std::vector<message> out;
  uint64_t t = 0;
  for (const auto& [d, n] : v) {
    out.push_back({d, n, t, t + 1, 1, false});
    t += 10;
  }
  return out;
}
constexpr auto AB = direction::a_to_b, BA = direction::b_to_a;

TEST(Reconstruct, BestOfThreeKeepsTheMajorityCuts) {
  const auto truth = msgs({{AB, 1000}, {BA, 50}, {AB, 3000}, {AB, 200}, {BA, 50}, {AB, 700}});
  // Run 2 splits the 3000 (a pause in the sender), run 3 merges 3000+200.
  const auto run2 = msgs({{AB, 1000}, {BA, 50}, {AB, 1200}, {AB, 1800}, {AB, 200}, {BA, 50}, {AB, 700}});
  const auto run3 = msgs({{AB, 1000}, {BA, 50}, {AB, 3200}, {BA, 50}, {AB, 700}});
  auto best = reconcile({run2, truth, run3});
  EXPECT_EQ(sizes(best), sizes(truth));
  for (size_t i = 0; i < best.size() && i < truth.size(); ++i) EXPECT_EQ(best[i].dir, truth[i].dir) << i;
  // Where two of three agree on an error, the error wins: majority, not truth.
  auto bad = reconcile({run3, run3, truth});
  EXPECT_EQ(sizes(bad), sizes(run3));
  EXPECT_EQ(compare(best, truth).exact_pct, 100.0);
}

TEST(Reconstruct, ScoreCountsExactWithinMergedAndNone) {
  const auto truth = msgs({{AB, 1000}, {AB, 2000}, {AB, 3000}, {AB, 500}, {AB, 500}, {AB, 4000}});
  auto s = compare(msgs({{AB, 1000}, {AB, 2000}, {AB, 3000}, {AB, 1000}, {AB, 2000}, {AB, 2000}}), truth);
  EXPECT_EQ(s.messages, 6u);
  EXPECT_DOUBLE_EQ(s.exact_pct, 50.0);
  EXPECT_DOUBLE_EQ(s.within100_pct, 50.0);
  EXPECT_DOUBLE_EQ(s.approximate_pct, 100.0);
  EXPECT_DOUBLE_EQ(s.no_match_pct, 0.0);
  auto w = compare(msgs({{AB, 1050}, {AB, 950}}), msgs({{AB, 1000}, {AB, 1000}}));
  EXPECT_DOUBLE_EQ(w.exact_pct, 0.0);
  EXPECT_DOUBLE_EQ(w.within100_pct, 100.0);
  auto n = compare(msgs({{AB, 300}, {AB, 2700}}), msgs({{AB, 1000}, {AB, 1000}, {AB, 1000}}));
  EXPECT_DOUBLE_EQ(n.no_match_pct, 100.0);
  EXPECT_DOUBLE_EQ(n.approximate_pct, 0.0);
}

TEST(Reconstruct, SummaryHasMessagesAgainstSegments) {
  auto s = one(client_writes({1448, 552, 1448, 552}));
  auto rows = summarise(s, cut(s, {}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].messages.count, 2u);
  EXPECT_DOUBLE_EQ(rows[0].messages.mean_size, 2000.0);
  EXPECT_DOUBLE_EQ(rows[0].messages.mean_interval_ns, 2.0 * kMs);
  EXPECT_EQ(rows[0].segments.count, 4u);
  EXPECT_DOUBLE_EQ(rows[0].segments.mean_size, 1000.0);
  EXPECT_DOUBLE_EQ(rows[0].segments.median_interval_ns, 1.0 * kMs);
}

// ---- readers ----------------------------------------------------------

struct temp_dir {
  std::filesystem::path p;
  temp_dir() {
    char t[] = "/tmp/magnet-reconstruct-XXXXXX";
    p = mkdtemp(t);
  }
  ~temp_dir() { std::filesystem::remove_all(p); }
  std::string file(const std::string& n) const { return (p / n).string(); }
};

// An Ethernet + IPv4 + TCP frame (20-byte TCP header + 12 of options); the
// payload itself is not captured (snaplen), as tcpdump -s 128 would.
std::vector<uint8_t> ipv4_frame(uint32_t seq, uint16_t payload, uint8_t flags) {
  std::vector<uint8_t> f(14 + 20 + 32, 0);
  f[12] = 0x08;
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  const uint16_t tot = static_cast<uint16_t>(20 + 32 + payload);
  ip[2] = tot >> 8, ip[3] = tot & 0xff;
  ip[8] = 64, ip[9] = 6;
  const uint8_t src[4] = {10, 0, 0, 1}, dst[4] = {10, 0, 0, 2};
  std::memcpy(ip + 12, src, 4);
  std::memcpy(ip + 16, dst, 4);
  uint8_t* tcp = ip + 20;
  tcp[0] = 40000 >> 8, tcp[1] = 40000 & 0xff, tcp[3] = 80;
  for (int i = 0; i < 4; ++i) tcp[4 + i] = static_cast<uint8_t>(seq >> (24 - 8 * i));
  tcp[12] = 8 << 4;
  tcp[13] = flags;
  return f;
}

// A Linux cooked (SLL) + IPv6 + TCP frame.
std::vector<uint8_t> ipv6_sll_frame(uint32_t seq, uint16_t payload, uint8_t flags) {
  std::vector<uint8_t> f(16 + 40 + 20, 0);
  f[14] = 0x86, f[15] = 0xdd;
  uint8_t* ip = f.data() + 16;
  ip[0] = 0x60;
  const uint16_t plen = static_cast<uint16_t>(20 + payload);
  ip[4] = plen >> 8, ip[5] = plen & 0xff;
  ip[6] = 6, ip[7] = 64;
  ip[23] = 1, ip[39] = 2;  // ::1 -> ::2
  uint8_t* tcp = ip + 40;
  tcp[1] = 7, tcp[3] = 9;
  for (int i = 0; i < 4; ++i) tcp[4 + i] = static_cast<uint8_t>(seq >> (24 - 8 * i));
  tcp[12] = 5 << 4;
  tcp[13] = flags;
  return f;
}

void write_pcap(const std::string& path, int dlt, const std::vector<std::vector<uint8_t>>& frames) {
  pcap_t* dead = pcap_open_dead_with_tstamp_precision(dlt, 65535, PCAP_TSTAMP_PRECISION_NANO);
  ASSERT_NE(dead, nullptr);
  pcap_dumper_t* d = pcap_dump_open(dead, path.c_str());
  ASSERT_NE(d, nullptr) << pcap_geterr(dead);
  for (size_t i = 0; i < frames.size(); ++i) {
    pcap_pkthdr h{};
    h.ts.tv_sec = 100;
    h.ts.tv_usec = static_cast<suseconds_t>(i * 1000);  // nanoseconds in this precision
    h.caplen = h.len = static_cast<bpf_u_int32>(frames[i].size());
    pcap_dump(reinterpret_cast<u_char*>(d), &h, frames[i].data());
  }
  pcap_dump_close(d);
  pcap_close(dead);
}

TEST(ReconstructPcap, EthernetIpv4RoundTrip) {
  temp_dir t;
  write_pcap(t.file("a.pcap"), DLT_EN10MB,
             {ipv4_frame(0, 0, kSyn), ipv4_frame(1, 1448, kAck), ipv4_frame(1449, 300, kAck | kPsh)});
  auto c = read_pcap(t.file("a.pcap"));
  ASSERT_TRUE(c) << c.err().message;
  EXPECT_FALSE(c->partial);
  ASSERT_EQ(c->packets.size(), 3u);
  EXPECT_EQ(c->packets[1].payload, 1448u);
  EXPECT_EQ(c->packets[2].time_ns, 100'000'000'000ull + 2000);
  EXPECT_EQ(to_string(c->packets[0].src), "10.0.0.1:40000");
  auto ss = separate(c->packets);
  ASSERT_EQ(ss.size(), 1u);
  sanitise(ss[0]);
  EXPECT_EQ(sizes(cut(ss[0], {})), (std::vector<uint64_t>{1748}));
}

TEST(ReconstructPcap, LinuxCookedIpv6) {
  temp_dir t;
  write_pcap(t.file("b.pcap"), DLT_LINUX_SLL, {ipv6_sll_frame(10, 500, kAck | kPsh), ipv6_sll_frame(510, 9, kAck)});
  auto c = read_pcap(t.file("b.pcap"));
  ASSERT_TRUE(c) << c.err().message;
  ASSERT_EQ(c->packets.size(), 2u);
  EXPECT_TRUE(c->packets[0].src.v6);
  EXPECT_EQ(c->packets[0].payload, 500u);
  EXPECT_EQ(to_string(c->packets[0].dst), "[::2]:9");
}

TEST(ReconstructPcap, VlanTaggedCookedV2AndRawIp) {
  const auto frame = ipv4_frame(1, 700, kAck | kPsh);
  const std::vector<uint8_t> ip(frame.begin() + 14, frame.end());
  std::vector<uint8_t> vlan(frame.begin(), frame.begin() + 12);
  for (uint8_t b : {0x81, 0x00, 0x00, 0x05, 0x08, 0x00}) vlan.push_back(b);
  vlan.insert(vlan.end(), ip.begin(), ip.end());
  std::vector<uint8_t> sll2(20, 0);
  sll2[0] = 0x08;  // protocol first in v2
  sll2.insert(sll2.end(), ip.begin(), ip.end());
  temp_dir t;
  for (const auto& [dlt, f] : {std::pair{DLT_EN10MB, vlan}, std::pair{DLT_LINUX_SLL2, sll2}, std::pair{DLT_RAW, ip}}) {
    write_pcap(t.file("l.pcap"), dlt, {f});
    auto c = read_pcap(t.file("l.pcap"));
    ASSERT_TRUE(c) << dlt << ": " << c.err().message;
    ASSERT_EQ(c->packets.size(), 1u) << dlt;
    EXPECT_EQ(c->packets[0].payload, 700u) << dlt;
    EXPECT_EQ(c->packets[0].dst.port, 80) << dlt;
  }
}

TEST(ReconstructPcap, OtherLinkTypeIsNamed) {
  temp_dir t;
  write_pcap(t.file("w.pcap"), DLT_IEEE802_11, {std::vector<uint8_t>(40, 0)});
  auto c = read_pcap(t.file("w.pcap"));
  ASSERT_FALSE(c);
  EXPECT_NE(c.err().message.find("IEEE802_11"), std::string::npos) << c.err().message;
}

TEST(ReconstructPcap, TruncatedCaptureIsAMarkedPartialResult) {
  temp_dir t;
  write_pcap(t.file("t.pcap"), DLT_EN10MB, {ipv4_frame(1, 100, kAck), ipv4_frame(101, 100, kAck)});
  const auto size = std::filesystem::file_size(t.file("t.pcap"));
  std::filesystem::resize_file(t.file("t.pcap"), size - 10);
  auto c = read_pcap(t.file("t.pcap"));
  ASSERT_TRUE(c) << c.err().message;
  EXPECT_TRUE(c->partial);
  EXPECT_EQ(c->packets.size(), 1u);
  EXPECT_NE(c->note.find("truncated"), std::string::npos) << c->note;
}

TEST(ReconstructPcap, GarbageIsAnErrorNotACrash) {
  const uint8_t junk[] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_FALSE(read_pcap_memory(junk));
  EXPECT_FALSE(read_pcap("/nonexistent/x.pcap"));
}

TEST(ReconstructTrace, HeaderLengthFromSequenceNumbers) {
  // 1448-byte payloads behind 32-byte TCP headers; one repeat, one gap.
  EXPECT_EQ(tcp_header_estimate({{1, 1480}, {1449, 1480}, {1449, 1480}, {2897, 1480}, {9999, 132}}), 32u);
  EXPECT_EQ(tcp_header_estimate({{1, 1468}, {1449, 1468}, {2897, 100}}), 20u);
  EXPECT_EQ(tcp_header_estimate({{1, 100}}), 32u);
}

magnet_pkt trace_pkt(uint32_t seq, uint16_t payload, uint8_t flags) {
  magnet_pkt p{};
  p.l3proto = 0x0800;
  p.ip_version = 4;
  p.protocol = 6;
  p.tot_len = static_cast<uint16_t>(20 + 32 + payload);
  p.sport = 40000;
  p.dport = 80;
  p.tcp_seq = seq;
  p.tcp_flags = flags;
  p.saddr[0] = p.daddr[0] = 10;
  p.saddr[3] = 1;
  p.daddr[3] = 2;
  return p;
}

void write_trace(const std::string& path, const std::vector<std::pair<uint16_t, magnet_pkt>>& recs) {
  auto w = trace_writer::create(path, local_sysinfo(), {MAGNET_EV_NET_DEV_XMIT, MAGNET_EV_NET_SOCK_SEND});
  ASSERT_TRUE(w) << w.err().message;
  uint64_t t = 1000;
  for (const auto& [type, p] : recs) {
    magnet_hdr h{};
    h.ts_ns = t += 1000;
    h.type = type;
    h.vm_id = 3;
    h.flags = MAGNET_RF_TCP;
    auto r = make_record(h, p);
    ASSERT_TRUE(w->append(r));
  }
  ASSERT_TRUE(w->close());
}

TEST(ReconstructTrace, DeviceRecordsBecomeSegments) {
  temp_dir t;
  write_trace(t.file("x.trace"), {{MAGNET_EV_NET_DEV_XMIT, trace_pkt(1, 1448, kAck)},
                                  {MAGNET_EV_NET_DEV_XMIT, trace_pkt(1449, 1448, kAck)},
                                  {MAGNET_EV_NET_DEV_XMIT, trace_pkt(2897, 10, kAck | kPsh)}});
  auto c = read_trace(t.file("x.trace"));
  ASSERT_TRUE(c) << c.err().message;
  ASSERT_EQ(c->packets.size(), 3u);
  EXPECT_EQ(c->packets[0].payload, 1448u);
  EXPECT_EQ(c->packets[2].payload, 10u);
  EXPECT_EQ(c->packets[0].vm_id, 3u);
}

TEST(ReconstructTrace, NoTcpRecordsIsAnError) {
  temp_dir t;
  write_trace(t.file("n.trace"), {});
  auto c = read_trace(t.file("n.trace"));
  ASSERT_FALSE(c);
  EXPECT_NE(c.err().message.find("no TCP packet records"), std::string::npos) << c.err().message;
}

// ---- magnet reconstruct -------------------------------------------------

TEST(CliReconstruct, UsageErrorsExit2NamingTheProblem) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{MAGNET_BIN, "reconstruct"}, "capture FILE"},
      {{MAGNET_BIN, "reconstruct", "x.pcap", "--format", "xml"}, "--format: 'xml'"},
      {{MAGNET_BIN, "reconstruct", "x.pcap", "--gap-ms", "5ms"}, "--gap-ms: '5ms'"},
      {{MAGNET_BIN, "reconstruct", "x.pcap", "--runs", "a,,b"}, "--runs: 'a,,b' has an empty name"},
      {{MAGNET_BIN, "reconstruct", "x.pcap", "--bogus"}, "--bogus"},
  };
  for (const auto& [argv, want] : cases) {
    auto r = test::run(argv, 10);
    EXPECT_EQ(r.status, 2) << want << ": " << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  }
}

TEST(CliReconstruct, UnreadableInputExits1NamingFileAndReason) {
  temp_dir t;
  auto r = test::run({MAGNET_BIN, "reconstruct", t.file("missing.pcap")}, 10);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(t.file("missing.pcap")), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;
  write_pcap(t.file("w.pcap"), DLT_IEEE802_11, {std::vector<uint8_t>(40, 0)});
  r = test::run({MAGNET_BIN, "reconstruct", t.file("w.pcap")}, 10);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("link type IEEE802_11"), std::string::npos) << r.err;
}

TEST(CliReconstruct, JsonAndCsvOfAPcapAndTheBestOfThree) {
  temp_dir t;
  write_pcap(t.file("a.pcap"), DLT_EN10MB,
             {ipv4_frame(0, 0, kSyn), ipv4_frame(1, 1448, kAck), ipv4_frame(1449, 300, kAck | kPsh),
              ipv4_frame(1749, 1448, kAck | kPsh)});
  // A second run where the first message was cut in two.
  write_pcap(t.file("b.pcap"), DLT_EN10MB,
             {ipv4_frame(0, 0, kSyn), ipv4_frame(1, 1448, kAck | kPsh), ipv4_frame(1449, 300, kAck | kPsh),
              ipv4_frame(1749, 1448, kAck | kPsh)});
  auto r = test::run({MAGNET_BIN, "reconstruct", t.file("a.pcap"), "--format", "json", "--summary"}, 10);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["streams"].size(), 1u);
  const auto& s = j["streams"][0];
  EXPECT_EQ(s["a"], "10.0.0.1:40000");
  ASSERT_EQ(s["messages"].size(), 2u);
  EXPECT_EQ(s["messages"][0]["size"], 1748);
  EXPECT_EQ(s["messages"][1]["size"], 1448);
  EXPECT_EQ(s["summary"][0]["segments"]["count"], 3);
  r = test::run({MAGNET_BIN, "reconstruct", t.file("b.pcap"), "--runs", t.file("a.pcap") + "," + t.file("a.pcap")}, 10);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "stream,a,b,vm,direction,size,first_ns,last_ns,segments,gap\n"
                   "0,10.0.0.1:40000,10.0.0.2:80,0,a>b,1748,100000001000,100000002000,2,0\n"
                   "0,10.0.0.1:40000,10.0.0.2:80,0,a>b,1448,100000003000,100000003000,1,0\n");
}

}  // namespace
}  // namespace magnet::reconstruct
