// Records and trace files: round trip, other endianness, and every kind of
// damage a reader must name instead of printing garbage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet {
namespace {

struct temp_file {
  std::string path;
  temp_file() {
    char p[] = "/tmp/magnet-test-XXXXXX";
    int fd = mkstemp(p);
    close(fd);
    path = p;
  }
  ~temp_file() { unlink(path.c_str()); }
  std::vector<uint8_t> bytes() const {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
  }
  void write(const std::vector<uint8_t>& b) const {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
};

std::vector<std::vector<uint8_t>> sample_records() {
  std::vector<std::vector<uint8_t>> v;
  magnet_hdr h{};
  h.ts_ns = 1000;
  h.abstract_id = 0x1122334455667788ull;
  h.tgid = 42;
  h.tid = 43;
  h.vm_id = 3;
  h.size = 1400;
  h.cpu = 1;
  h.type = MAGNET_EV_NET_SOCK_SEND;
  magnet_sock s{};
  s.family = 2;
  s.protocol = 17;
  s.sport = 5000;
  s.dport = 6000;
  s.saddr[0] = 10, s.saddr[3] = 1;
  s.daddr[0] = 10, s.daddr[3] = 2;
  v.push_back(make_record(h, s));

  h.ts_ns = 2000;
  h.type = MAGNET_EV_NET_DEV_XMIT;
  h.size = -11;  // an error code, as MAGNeT carries them
  magnet_pkt p{};
  p.ifindex = 7;
  p.ip_version = 4;
  p.protocol = 6;
  p.tcp_seq = 0xdeadbeef;
  p.ip_id = 0x1234;
  v.push_back(make_record(h, p));

  h.ts_ns = 3000;
  h.type = MAGNET_EV_SCHED_SWITCH;
  magnet_sched_switch sw{};
  sw.prev_tid = 1;
  sw.next_tid = 2;
  sw.prev_state = -1;
  std::strcpy(sw.prev_comm, "iperf3");
  v.push_back(make_record(h, sw));

  h.ts_ns = 4000;
  h.type = MAGNET_EV_LOST;
  magnet_lost l{};
  l.count = 99;
  l.probe_type = MAGNET_EV_NET_SOCK_SEND;
  l.cpu = 1;
  l.first_ts_ns = 3500;
  v.push_back(make_record(h, l));
  return v;
}

void write_trace(const temp_file& f, const std::vector<std::vector<uint8_t>>& recs) {
  auto w = trace_writer::create(f.path, local_sysinfo(),
                                {MAGNET_EV_NET_SOCK_SEND, MAGNET_EV_NET_DEV_XMIT});
  ASSERT_TRUE(w) << w.err().message;
  for (const auto& r : recs) ASSERT_TRUE(w->append(r));
  ASSERT_TRUE(w->close());
}

std::vector<std::vector<uint8_t>> read_all(trace_reader& r) {
  std::vector<std::vector<uint8_t>> out;
  for (;;) {
    auto n = r.next();
    EXPECT_TRUE(n) << n.err().message;
    if (!n || !*n) break;
    uint16_t t = hdr_of(*n).type;
    if (t == MAGNET_EV_SYSINFO || t == MAGNET_EV_EVENT_DESC) continue;
    out.emplace_back(*n, *n + hdr_of(*n).len);
  }
  return out;
}

// Rewrites every record of a native trace in the other byte order.
std::vector<uint8_t> to_other_endian(std::vector<uint8_t> b) {
  for (size_t off = 8; off < b.size();) {
    uint8_t* r = b.data() + off;
    uint16_t len = hdr_of(r).len;
    swap_payload(r);  // needs the native type, so before the header
    swap_header(r);
    off += len;
  }
  return b;
}

TEST(TraceFile, RoundTripKeepsEveryByte) {
  temp_file f;
  auto recs = sample_records();
  write_trace(f, recs);
  auto r = trace_reader::open(f.path);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_FALSE(r->foreign_endian());
  EXPECT_EQ(r->sysinfo().format_major, MAGNET_FORMAT_MAJOR);
  EXPECT_EQ(r->described_types(),
            (std::set<uint16_t>{MAGNET_EV_NET_SOCK_SEND, MAGNET_EV_NET_DEV_XMIT}));
  EXPECT_EQ(read_all(*r), recs);
  auto n = r->validate();
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, recs.size() + 3 /* sysinfo + 2 descriptors */);
}

TEST(TraceFile, SysinfoConvertsTimestampsToWallClock) {
  auto si = local_sysinfo();
  EXPECT_EQ(si.endian_marker, MAGNET_ENDIAN_MARKER);
  EXPECT_GT(si.ncpus, 0u);
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  int64_t wall = static_cast<int64_t>(monotonic_ns()) + si.realtime_offset_ns;
  int64_t real = now.tv_sec * 1000000000ll + now.tv_nsec;
  EXPECT_LT(std::llabs(wall - real), 50'000'000) << "offset off by more than 50 ms";
  EXPECT_GT(std::strlen(si.hostname), 0u);
  EXPECT_GT(std::strlen(si.kernel_release), 0u);
}

TEST(TraceFile, ReadsATraceWrittenOnAMachineOfTheOtherEndianness) {
  temp_file native, foreign;
  auto recs = sample_records();
  write_trace(native, recs);
  auto swapped = to_other_endian(native.bytes());
  ASSERT_NE(swapped, native.bytes());
  foreign.write(swapped);
  auto r = trace_reader::open(foreign.path);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_TRUE(r->foreign_endian());
  EXPECT_EQ(r->sysinfo().ncpus, local_sysinfo().ncpus);
  EXPECT_EQ(read_all(*r), recs) << "records come back in native order, field by field";
}

TEST(TraceFile, TruncationIsNamedWithItsOffset) {
  temp_file f;
  write_trace(f, sample_records());
  auto b = f.bytes();
  b.resize(b.size() - 20);
  f.write(b);
  auto r = trace_reader::open(f.path);
  ASSERT_TRUE(r);
  auto v = r->validate();
  ASSERT_FALSE(v);
  EXPECT_NE(v.err().message.find("truncated record"), std::string::npos) << v.err().message;
  EXPECT_NE(v.err().message.find("at offset"), std::string::npos);
}

TEST(TraceFile, CorruptLengthIsAnError) {
  temp_file f;
  write_trace(f, sample_records());
  auto b = f.bytes();
  // Last record's length field -> 13 (not a multiple of 8).
  size_t off = 8, last = 0;
  while (off < b.size()) {
    last = off;
    off += hdr_of(b.data() + off).len;
  }
  uint16_t bad = 13;
  std::memcpy(b.data() + last + offsetof(magnet_hdr, len), &bad, 2);
  f.write(b);
  auto r = trace_reader::open(f.path);
  ASSERT_TRUE(r);
  auto v = r->validate();
  ASSERT_FALSE(v);
  EXPECT_NE(v.err().message.find("length 13"), std::string::npos) << v.err().message;
}

TEST(TraceFile, RecordShorterThanItsPayloadIsAnError) {
  magnet_hdr h{};
  h.type = MAGNET_EV_NET_SOCK_SEND;
  auto rec = make_record(h, nullptr, 0);  // header only, payload missing
  auto s = check_record(rec, "here");
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("payload needs"), std::string::npos) << s.err().message;
}

TEST(TraceFile, NotATraceAndEmptyFilesAreRejected) {
  temp_file f;
  f.write({'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!'});
  auto r = trace_reader::open(f.path);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("not a magnet trace"), std::string::npos);
  f.write({});
  EXPECT_FALSE(trace_reader::open(f.path));
  auto missing = trace_reader::open("/nonexistent/trace.mtr");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.err().message.find("No such file"), std::string::npos);
}

TEST(TraceFile, NewerMajorVersionIsRefused) {
  temp_file f;
  write_trace(f, sample_records());
  auto b = f.bytes();
  uint16_t major = MAGNET_FORMAT_MAJOR + 1;
  std::memcpy(b.data() + 8 + sizeof(magnet_hdr) + offsetof(magnet_sysinfo, format_major), &major,
              2);
  f.write(b);
  auto r = trace_reader::open(f.path);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("format version"), std::string::npos) << r.err().message;
}

TEST(TraceFile, UnknownEventIdsAreCarriedOpaque) {
  temp_file f;
  magnet_hdr h{};
  h.type = 0x0fff;  // a future guest event
  uint64_t payload[3] = {1, 2, 3};
  auto rec = make_record(h, payload, sizeof payload);
  write_trace(f, {rec});
  auto r = trace_reader::open(f.path);
  ASSERT_TRUE(r);
  EXPECT_EQ(read_all(*r), std::vector<std::vector<uint8_t>>{rec});
}

TEST(Record, CsvHasTheRequiredLeadingColumns) {
  auto h = csv_header();
  EXPECT_EQ(h.rfind("ts_ns,cpu,event,vm,tgid,tid,abstract_id,size,", 0), 0u) << h;
  auto recs = sample_records();
  auto line = format_record(recs[0].data(), out_format::csv);
  auto ncols = [](const std::string& s) { return std::count(s.begin(), s.end(), ',') + 1; };
  EXPECT_EQ(ncols(line), ncols(h)) << "every row has every column";
  EXPECT_EQ(line.rfind("1000,1,net.sock.send,3,42,43,0x1122334455667788,1400,", 0), 0u) << line;
  EXPECT_NE(line.find(",10.0.0.1,10.0.0.2"), std::string::npos) << line;
}

TEST(Record, TextAndJsonCarryPayloadFields) {
  auto recs = sample_records();
  auto text = format_record(recs[1].data(), out_format::text);
  EXPECT_NE(text.find("net.dev.xmit"), std::string::npos);
  EXPECT_NE(text.find("size=-11"), std::string::npos);
  EXPECT_NE(text.find("tcp_seq=3735928559"), std::string::npos) << text;
  auto json = format_record(recs[2].data(), out_format::json);
  EXPECT_NE(json.find("\"event\":\"sched.switch\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"prev_comm\":\"iperf3\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"prev_state\":-1"), std::string::npos) << json;
}

// The trace_file fuzzer's seed corpus stays meaningful as the format
// evolves: the "ok-" seeds (both byte orders) read to the end, the "bad-"
// ones are refused with a message, at open or at a record.
TEST(TraceFile, FuzzSeedsReadAsNamed) {
  namespace fs = std::filesystem;
  int n = 0, foreign = 0;
  for (const auto& ent : fs::directory_iterator(MAGNET_SOURCE_DIR "/fuzz/corpus/trace_file")) {
    const std::string name = ent.path().filename();
    SCOPED_TRACE(name);
    ++n;
    auto r = trace_reader::open(ent.path());
    std::string err;
    if (!r) {
      err = r.err().message;
    } else {
      foreign += r->foreign_endian();
      auto v = r->validate();
      if (!v) err = v.err().message;
    }
    if (name.rfind("ok-", 0) == 0) {
      EXPECT_EQ(err, "");
    } else {
      EXPECT_NE(err, "") << "a damaged trace read without an error";
    }
  }
  EXPECT_GE(n, 15);
  EXPECT_GE(foreign, 2) << "seeds of the other byte order";
}

}  // namespace
}  // namespace magnet
