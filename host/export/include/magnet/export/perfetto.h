// `magnet dump --format perfetto`: a trace as Perfetto TrackEvents, for
// ui.perfetto.dev and trace_processor.  The protobuf is written by hand
// (proto/perfetto/trace.proto is the subset of Perfetto's schema used);
// magnet does not link libprotobuf.
//
// What is written (docs/cli.md, "magnet dump"):
//   - one packet sequence; its first packet clears incremental state, sets
//     CLOCK_MONOTONIC (the clock of every record) as the timestamp clock and
//     the trace clock, and carries a clock snapshot that ties it to
//     CLOCK_REALTIME (sysinfo.realtime_offset_ns); the others need that
//     state; event and argument names are interned;
//   - a track per CPU with the running thread as slices (sched.switch) and
//     the CPU's other events as instants;
//   - per VM (vm id, or the QEMU process of kvm records without one) a
//     process track with, per vCPU, its time on a CPU (sched.switch of the
//     vCPU thread) and its KVM time (guest / exit slices from kvm.exit and
//     kvm.entry), its tap events, and counters of its tap bytes per second
//     in each direction (guest tx = net.dev.recv on its tap, rx =
//     net.dev.xmit), over fixed bins;
//   - host network events on one track per layer (socket, transport, ip,
//     device), each record an instant with its fields as arguments;
//   - one Perfetto flow per packet: the events of one datagram or segment at
//     every layer, on both sides and at the host's tap, share a flow id
//     (same flow id, IPv4 id and TCP sequence within journey_ns; a socket
//     send joins the next new packet of its flow, a UDP receive the oldest
//     datagram delivered to its port).
#pragma once

#include <cstdint>
#include <cstdio>

#include "magnet/result.h"
#include "magnet/trace_file.h"

namespace magnet::host {

struct perfetto_options {
  uint64_t rate_bin_ns = 100'000'000;  // counter bins (bytes/s per VM and direction)
  uint64_t journey_ns = 1'000'000'000;  // a packet identity seen again later is a new packet
};

// Writes the whole trace behind @r (already validated) to @out.  Reads the
// trace twice (rewinds @r).  An error names a write failure.
status export_perfetto(trace_reader& r, std::FILE* out, const perfetto_options& opt = {});

}  // namespace magnet::host
