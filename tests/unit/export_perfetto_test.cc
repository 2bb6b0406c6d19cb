// `magnet dump --format perfetto`: the file magnet encodes by hand is
// decoded with protoc's code for proto/perfetto/trace.proto (the subset of
// Perfetto's schema), and what it says is checked against the fixture:
// tracks, slices, a packet's journey as one flow, rate counters, sequence
// flags and interning.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "export_fixture.h"
#include "proc.h"
#include "trace.pb.h"

namespace magnet {
namespace {

namespace pp = perfetto::protos;
using test::run;

struct decoded_event {
  uint64_t ts;
  uint64_t track;
  pp::TrackEvent::Type type;
  std::string name;
  std::map<std::string, std::string> args;  // value as text
  std::vector<uint64_t> flows;
  int64_t counter = 0;
};

// The trace decoded, with interned names resolved as a reader must: only
// from interned data seen earlier on the sequence.
struct decoded {
  pp::Trace trace;
  std::map<uint64_t, pp::TrackDescriptor> tracks;
  std::vector<decoded_event> events;

  uint64_t track_named(const std::string& name, uint64_t parent = 0) const {
    for (const auto& [uuid, t] : tracks) {
      const std::string& n = t.has_process() ? t.process().process_name() : t.name();
      if (n == name && (!parent || t.parent_uuid() == parent)) return uuid;
    }
    ADD_FAILURE() << "no track named '" << name << "'";
    return 0;
  }
  std::vector<decoded_event> on(uint64_t track) const {
    std::vector<decoded_event> v;
    for (const auto& e : events)
      if (e.track == track) v.push_back(e);
    return v;
  }
};

decoded decode(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes{std::istreambuf_iterator<char>(f), {}};
  decoded d;
  EXPECT_TRUE(d.trace.ParseFromString(bytes)) << "not a Perfetto Trace message";
  std::map<uint64_t, std::string> names, arg_names;
  for (const auto& p : d.trace.packet()) {
    if (p.has_interned_data()) {
      for (const auto& n : p.interned_data().event_names()) {
        EXPECT_FALSE(names.count(n.iid())) << "iid " << n.iid() << " interned twice";
        names[n.iid()] = n.name();
      }
      for (const auto& n : p.interned_data().debug_annotation_names()) {
        EXPECT_FALSE(arg_names.count(n.iid()));
        arg_names[n.iid()] = n.name();
      }
    }
    if (p.has_track_descriptor()) {
      EXPECT_FALSE(d.tracks.count(p.track_descriptor().uuid())) << "track described twice";
      d.tracks[p.track_descriptor().uuid()] = p.track_descriptor();
    }
    if (!p.has_track_event()) continue;
    const auto& te = p.track_event();
    decoded_event e{p.timestamp(), te.track_uuid(), te.type()};
    if (te.has_name_iid()) {
      EXPECT_TRUE(names.count(te.name_iid())) << "name iid used before it was interned";
      e.name = names[te.name_iid()];
    }
    for (const auto& a : te.debug_annotations()) {
      EXPECT_TRUE(arg_names.count(a.name_iid()));
      std::string v = a.has_string_value() ? a.string_value()
                      : a.has_int_value()  ? std::to_string(a.int_value())
                                           : std::to_string(a.uint_value());
      e.args[arg_names[a.name_iid()]] = v;
    }
    e.flows.assign(te.flow_ids().begin(), te.flow_ids().end());
    e.counter = te.counter_value();
    d.events.push_back(std::move(e));
  }
  return d;
}

struct perfetto_fixture {
  test::fixture_trace trace;
  std::string out = "/tmp/magnet-export-" + std::to_string(getpid()) + ".pftrace";
  decoded d;
  perfetto_fixture() {
    auto r = run({MAGNET_BIN, "dump", trace.path, "--format", "perfetto", "-o", out});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(r.out.empty()) << "the trace goes to -o only";
    d = decode(out);
  }
  ~perfetto_fixture() { unlink(out.c_str()); }
};

constexpr uint64_t us(uint64_t v) { return test::kStart + v * 1000; }

TEST(ExportPerfetto, SequenceClockAndInterning) {
  perfetto_fixture f;
  const auto& packets = f.d.trace.packet();
  ASSERT_GT(packets.size(), 10);
  const auto& first = packets[0];
  EXPECT_EQ(first.sequence_flags(), pp::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
  EXPECT_TRUE(first.first_packet_on_sequence());
  EXPECT_EQ(first.trace_packet_defaults().timestamp_clock_id(), pp::BUILTIN_CLOCK_MONOTONIC);
  ASSERT_TRUE(first.has_clock_snapshot());
  const auto& snap = first.clock_snapshot();
  EXPECT_EQ(snap.primary_trace_clock(), pp::BUILTIN_CLOCK_MONOTONIC);
  std::map<uint32_t, uint64_t> clocks;
  for (const auto& c : snap.clocks()) clocks[c.clock_id()] = c.timestamp();
  EXPECT_EQ(clocks[pp::BUILTIN_CLOCK_MONOTONIC], test::kStart);
  EXPECT_EQ(clocks[pp::BUILTIN_CLOCK_REALTIME], test::kStart + test::kRealtimeOffset);
  for (int i = 0; i < packets.size(); ++i) {
    EXPECT_EQ(packets[i].trusted_packet_sequence_id(), 1u) << i;
    if (i > 0) {
      EXPECT_EQ(packets[i].sequence_flags(), pp::TracePacket::SEQ_NEEDS_INCREMENTAL_STATE) << i;
    }
  }
  // Every event name is sent once, however often it is used.
  int sock_sends = 0;
  for (const auto& e : f.d.events) sock_sends += e.name == "net.sock.send";
  EXPECT_EQ(sock_sends, 2);
}

TEST(ExportPerfetto, TracksForCpusVmsAndVcpus) {
  perfetto_fixture f;
  const auto& d = f.d;
  for (const char* cpu : {"CPU 0", "CPU 1"}) d.track_named(cpu);
  uint64_t vm1 = d.track_named("VM 1"), vm2 = d.track_named("VM 2");
  ASSERT_TRUE(vm1 && vm2);
  EXPECT_EQ(d.tracks.at(vm1).process().pid(), 1000) << "the VM's QEMU process";
  EXPECT_EQ(d.tracks.at(vm2).process().pid(), 2000);
  d.track_named("vCPU 0 KVM", vm1);
  d.track_named("vCPU 1 KVM", vm1);
  d.track_named("vCPU 0 KVM", vm2);
  d.track_named("vCPU 0 on CPU", vm1);
  d.track_named("vCPU 1 on CPU", vm1);
  d.track_named("vCPU 0 on CPU", vm2);
  for (const char* layer : {"net: socket", "net: transport", "net: ip", "net: device"})
    d.track_named(layer);
  d.track_named("VM 1 network", vm1);
  for (const auto& [uuid, t] : d.tracks)
    if (t.has_parent_uuid()) {
      EXPECT_TRUE(d.tracks.count(t.parent_uuid())) << t.name();
    }
}

std::vector<std::string> slices(const std::vector<decoded_event>& evs) {
  std::vector<std::string> v;
  for (const auto& e : evs) {
    std::string s = e.type == pp::TrackEvent::TYPE_SLICE_BEGIN ? "B " + e.name
                    : e.type == pp::TrackEvent::TYPE_SLICE_END ? "E"
                                                               : "? " + e.name;
    v.push_back(s + " @" + std::to_string((e.ts - test::kStart) / 1000));
  }
  return v;
}

TEST(ExportPerfetto, CpuAndVcpuSlices) {
  perfetto_fixture f;
  const auto& d = f.d;
  uint64_t vm1 = d.track_named("VM 1"), vm2 = d.track_named("VM 2");
  using V = std::vector<std::string>;
  EXPECT_EQ(slices(d.on(d.track_named("CPU 0"))),
            (V{"B CPU 0/KVM 1001 @10", "E @100", "B CPU 1/KVM 1002 @100"}));
  EXPECT_EQ(slices(d.on(d.track_named("vCPU 0 on CPU", vm1))), (V{"B CPU 0 @10", "E @100"}));
  EXPECT_EQ(slices(d.on(d.track_named("vCPU 1 on CPU", vm1))), (V{"B CPU 0 @100"}));
  EXPECT_EQ(slices(d.on(d.track_named("vCPU 0 on CPU", vm2))), (V{"B CPU 1 @30"}));
  // kvm.exit and kvm.entry: guest time and exit handling, the exit named.
  EXPECT_EQ(slices(d.on(d.track_named("vCPU 0 KVM", vm1))),
            (V{"B guest @20", "E @50", "B exit hlt @50", "E @80", "B guest @80"}));
  // Only a kvm.entry: the exit it ends comes from its exit_ns.
  EXPECT_EQ(slices(d.on(d.track_named("vCPU 0 KVM", vm2))),
            (V{"B exit io_instruction @35", "E @40", "B guest @40"}));
  EXPECT_EQ(slices(d.on(d.track_named("vCPU 1 KVM", vm1))), (V{"B guest @110"}));
}

TEST(ExportPerfetto, OnePacketsJourneyIsOneFlow) {
  perfetto_fixture f;
  const auto& d = f.d;
  std::map<uint64_t, std::vector<const decoded_event*>> by_flow;
  for (const auto& e : d.events)
    for (uint64_t id : e.flows) by_flow[id].push_back(&e);
  const uint64_t vm1_net = d.track_named("VM 1 network", d.track_named("VM 1"));
  const std::vector<std::pair<std::string, uint64_t>> path = {
      {"net.sock.send", d.track_named("net: socket")},
      {"net.l4.send", d.track_named("net: transport")},
      {"net.ip.send", d.track_named("net: ip")},
      {"net.dev.xmit", d.track_named("net: device")},
      {"net.dev.xmit", vm1_net},
      {"vmnet.queue.rx", vm1_net}};
  std::set<uint64_t> seen;
  for (uint64_t start : {200, 400}) {
    // The datagram's first event, the socket send, names its flow.
    const decoded_event* send = nullptr;
    for (const auto& e : d.events)
      if (e.name == "net.sock.send" && e.ts == us(start)) send = &e;
    ASSERT_TRUE(send);
    ASSERT_EQ(send->flows.size(), 1u);
    const uint64_t flow = send->flows[0];
    EXPECT_TRUE(seen.insert(flow).second) << "each datagram is its own flow";
    const auto& evs = by_flow[flow];
    ASSERT_EQ(evs.size(), path.size()) << "the flow links exactly the datagram's events";
    for (size_t i = 0; i < path.size(); ++i) {
      EXPECT_EQ(evs[i]->name, path[i].first) << i;
      EXPECT_EQ(evs[i]->track, path[i].second) << i;
      EXPECT_EQ(evs[i]->type, pp::TrackEvent::TYPE_INSTANT);
      EXPECT_EQ(evs[i]->args.at("abstract_id"), "0x5eedf10e0000abcd");
    }
    // The record's fields are the event's arguments.
    EXPECT_EQ(evs[1]->args.at("ip_id"), std::to_string(start == 200 ? 0x0101 : 0x0102));
    EXPECT_EQ(evs[4]->args.at("ifindex"), "9");
    EXPECT_EQ(evs[5]->args.at("delay_ns"), "3000");
    EXPECT_EQ(evs[0]->args.at("saddr"), "10.0.0.1");
    EXPECT_EQ(evs[0]->args.at("size"), "1472");
  }
}

TEST(ExportPerfetto, TapRatesPerVmAndDirection) {
  perfetto_fixture f;
  const auto& d = f.d;
  auto counters = [&](const std::string& vm, const std::string& dir) {
    uint64_t t = d.track_named(vm + " tap " + dir, d.track_named(vm));
    EXPECT_TRUE(d.tracks.at(t).has_counter());
    std::vector<std::pair<uint64_t, int64_t>> v;  // (ms after the start, bytes/s)
    for (const auto& e : d.on(t)) {
      EXPECT_EQ(e.type, pp::TrackEvent::TYPE_COUNTER);
      v.push_back({(e.ts - test::kStart) / 1'000'000, e.counter});
    }
    return v;
  };
  using V = std::vector<std::pair<uint64_t, int64_t>>;
  // VM 1 receives both datagrams (2 x 1514 bytes) in bin 0, 1000 bytes in
  // bin 1, sends 500 bytes in bin 2; each series ends with a zero.
  EXPECT_EQ(counters("VM 1", "rx bytes/s (host -> guest)"),
            (V{{0, 30280}, {100, 10000}, {200, 0}, {300, 0}}));
  EXPECT_EQ(counters("VM 1", "tx bytes/s (guest -> host)"),
            (V{{0, 0}, {100, 0}, {200, 5000}, {300, 0}}));
  EXPECT_EQ(counters("VM 2", "tx bytes/s (guest -> host)"), (V{{0, 2000}, {100, 0}}));
  EXPECT_EQ(counters("VM 2", "rx bytes/s (host -> guest)"), (V{{0, 0}, {100, 0}}));
}

// The receiving side: an unconnected UDP socket records only its own end,
// so its receives carry another flow id; each takes the oldest datagram
// delivered to its port.
TEST(ExportPerfetto, UnconnectedReceiverTakesDatagramsInOrder) {
  using test::hdr;
  std::vector<std::vector<uint8_t>> recs;
  magnet_sock rx{};
  rx.family = 2;
  rx.protocol = 17;
  rx.dport = 6000;
  rx.daddr[0] = 10, rx.daddr[2] = 1, rx.daddr[3] = 2;
  for (uint16_t id : {0x0201, 0x0202}) {
    const uint64_t t = 10 * id;
    recs.push_back(make_record(hdr(MAGNET_EV_NET_DEV_RECV, t, 0, 0, 0, 0, 1514, test::kFlow),
                               test::udp_pkt(id, 3)));
    recs.push_back(make_record(hdr(MAGNET_EV_NET_IP_RECV, t + 1, 0, 0, 0, 0, 1500, test::kFlow),
                               test::udp_pkt(id, 3)));
    recs.push_back(make_record(hdr(MAGNET_EV_NET_L4_RECV, t + 2, 0, 0, 0, 0, 1472, test::kFlow),
                               test::udp_pkt(id, 3)));
  }
  for (int i = 0; i < 3; ++i)  // the third finds nothing queued
    recs.push_back(make_record(
        hdr(MAGNET_EV_NET_SOCK_RECV, 10'000 + i, 1, 0, 600, 601, 1472, 0x1234), rx));
  test::fixture_trace t(recs, "rx");
  std::string out = "/tmp/magnet-export-rx-" + std::to_string(getpid()) + ".pftrace";
  auto r = run({MAGNET_BIN, "dump", t.path, "--format", "perfetto", "-o", out});
  ASSERT_EQ(r.status, 0) << r.err;
  auto d = decode(out);
  unlink(out.c_str());
  std::map<uint64_t, std::vector<std::string>> by_flow;
  std::vector<uint64_t> order;
  for (const auto& e : d.events)
    for (uint64_t id : e.flows) {
      if (by_flow[id].empty()) order.push_back(id);
      by_flow[id].push_back(e.name + "@" + std::to_string((e.ts - test::kStart) / 1000));
    }
  ASSERT_EQ(order.size(), 2u);
  using V = std::vector<std::string>;
  EXPECT_EQ(by_flow[order[0]],
            (V{"net.dev.recv@5130", "net.ip.recv@5131", "net.l4.recv@5132",
               "net.sock.recv@10000"}));
  EXPECT_EQ(by_flow[order[1]],
            (V{"net.dev.recv@5140", "net.ip.recv@5141", "net.l4.recv@5142",
               "net.sock.recv@10001"}));
}

// The second, independent reading: protoc's own decoder, from the .proto
// text alone.
TEST(ExportPerfetto, ProtocDecodesIt) {
  perfetto_fixture f;
  auto r = run({"/bin/sh", "-c",
                std::string(MAGNET_PROTOC) + " --decode=perfetto.protos.Trace --proto_path=" +
                    MAGNET_SOURCE_DIR + "/proto/perfetto trace.proto < " + f.out});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* s : {"track_descriptor {", "name: \"CPU 0\"", "process_name: \"VM 1\"",
                        "type: TYPE_SLICE_BEGIN", "type: TYPE_COUNTER", "counter_value: 30280",
                        "flow_ids: ", "primary_trace_clock: BUILTIN_CLOCK_MONOTONIC",
                        "name: \"vmnet.queue.rx\""})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
}

TEST(ExportPerfetto, BadInputAndOutput) {
  test::fixture_trace t;
  auto no_o = run({MAGNET_BIN, "dump", t.path, "--format", "perfetto"});
  EXPECT_EQ(no_o.status, 2);
  EXPECT_NE(no_o.err.find("--format perfetto writes a binary file: name it with -o"),
            std::string::npos)
      << no_o.err;
  EXPECT_TRUE(no_o.out.empty());

  // '-o -' is standard output, but not a terminal (script(1) gives it one).
  auto tty = run({"script", "-qec",
                  std::string(MAGNET_BIN) + " dump " + t.path + " --format perfetto -o -",
                  "/dev/null"});
  EXPECT_EQ(tty.status, 2);
  EXPECT_NE(tty.out.find("standard output is a terminal"), std::string::npos) << tty.out;
  auto pipe = run({"/bin/sh", "-c",
                   std::string(MAGNET_BIN) + " dump " + t.path +
                       " --format perfetto -o - | wc -c"});
  EXPECT_EQ(pipe.status, 0);
  EXPECT_GT(std::stol(pipe.out), 1000) << "written to a pipe";

  // A truncated trace: an error naming it, and no output file.
  std::string out = "/tmp/magnet-export-bad-" + std::to_string(getpid()) + ".pftrace";
  truncate(t.path.c_str(), static_cast<off_t>(std::ifstream(t.path, std::ios::ate).tellg()) - 5);
  auto bad = run({MAGNET_BIN, "dump", t.path, "--format", "perfetto", "-o", out});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("truncated record"), std::string::npos) << bad.err;
  EXPECT_NE(access(out.c_str(), F_OK), 0) << "no output for a bad trace";

  auto notrace = run({MAGNET_BIN, "dump", "/etc/hostname", "--format", "perfetto", "-o", out});
  EXPECT_EQ(notrace.status, 1);
  EXPECT_NE(notrace.err.find("not a magnet trace file"), std::string::npos) << notrace.err;

  test::fixture_trace good({}, "empty");
  auto unwritable =
      run({MAGNET_BIN, "dump", good.path, "--format", "perfetto", "-o", "/nonexistent/x.pftrace"});
  EXPECT_EQ(unwritable.status, 1);
  EXPECT_NE(unwritable.err.find("cannot create /nonexistent/x.pftrace"), std::string::npos)
      << unwritable.err;

  // A write error is an error, and OUT is removed only if it is a regular
  // file: never the device it names.
  for (const char* format : {"perfetto", "ulm"}) {
    test::fixture_trace ok_trace;
    auto full = run({MAGNET_BIN, "dump", ok_trace.path, "--format", format, "-o", "/dev/full"});
    EXPECT_EQ(full.status, 1) << format;
    EXPECT_NE(full.err.find("/dev/full: No space left on device"), std::string::npos)
        << full.err;
    struct stat st {};
    ASSERT_EQ(stat("/dev/full", &st), 0) << "magnet dump removed /dev/full";
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }

  auto fmt = run({MAGNET_BIN, "dump", good.path, "--format", "chrome"});
  EXPECT_EQ(fmt.status, 2);
  EXPECT_NE(fmt.err.find("'chrome' is not one of text, csv, json, ulm, perfetto"),
            std::string::npos)
      << fmt.err;
}

}  // namespace
}  // namespace magnet
