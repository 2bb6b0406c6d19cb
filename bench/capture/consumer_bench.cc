// Synthetic consumer throughput: how many records/s the user-space side of
// `magnet record` drains on one core, with the kernel side taken out.
//
// Each repetition fills a large ring buffer (default 256 MiB) with records
// produced by BPF_PROG_TEST_RUN of the cgroup_skb program l4_recv_cgskb
// (probe armed in stream mode, crafted Ethernet+IPv4+UDP 1400-byte
// datagram, repeat=N), then times draining it, pinned to one CPU:
//   null        ring_consumer (batching, loss accounting) + a sink that walks
//               every record header (what any consumer must at least do)
//   trace       ring_consumer + trace_writer::append to a file on /dev/shm:
//               what `magnet record` does with no user-space filter
//   libbpf-raw  ring_buffer__consume with a callback that only counts:
//               the floor set by libbpf's ring buffer protocol
// Wall time and the thread's CPU time are both measured; records/s is
// records / wall time (the thread is pinned and never sleeps while draining).
//
//   consumer_bench [--reps N] [--ring SIZE_MIB] [--cpu C] [--dir DIR] [--json]
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../summary.h"
#include "magnet/capture/capture.h"
#include "magnet/capture/consumer.h"
#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

using namespace magnet;

namespace {

// Ethernet + IPv4 + UDP + payload, as BPF_PROG_TEST_RUN wants it.
std::vector<uint8_t> udp_packet(uint32_t payload) {
  std::vector<uint8_t> p(14, 0);
  uint16_t et = htons(ETH_P_IP);
  std::memcpy(&p[12], &et, 2);
  iphdr ip{};
  ip.version = 4;
  ip.ihl = 5;
  ip.ttl = 64;
  ip.protocol = IPPROTO_UDP;
  ip.tot_len = htons(static_cast<uint16_t>(20 + 8 + payload));
  ip.id = htons(1);
  ip.saddr = htonl(0x0a0a0001);
  ip.daddr = htonl(0x0a0a0002);
  p.insert(p.end(), reinterpret_cast<uint8_t*>(&ip), reinterpret_cast<uint8_t*>(&ip) + 20);
  udphdr u{};
  u.source = htons(40000);
  u.dest = htons(5201);
  u.len = htons(static_cast<uint16_t>(8 + payload));
  p.insert(p.end(), reinterpret_cast<uint8_t*>(&u), reinterpret_cast<uint8_t*>(&u) + 8);
  p.resize(p.size() + payload, 0x5a);
  return p;
}

uint64_t now_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

using magnet::bench::summarize;
using stats = magnet::bench::summary;

struct sample {
  double rps, cpu_rps, bytes_per_rec;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 7, cpu = 1;
  size_t ring_mib = 256;
  std::string dir = "/dev/shm";
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--ring" && i + 1 < argc) ring_mib = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--cpu" && i + 1 < argc) cpu = std::atoi(argv[++i]);
    else if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--json") json = true;
    else {
      std::fprintf(stderr,
                   "usage: consumer_bench [--reps N] [--ring MIB] [--cpu C] [--dir DIR] [--json]\n");
      return 2;
    }
  }
  if (reps < 1 || ring_mib < 1 || (ring_mib & (ring_mib - 1))) {
    std::fprintf(stderr, "consumer_bench: --reps >= 1, --ring a power of two (MiB)\n");
    return 2;
  }
  // Producer and consumer on the same CPU: the fill (test runs) and the drain
  // alternate, never overlap, and the drain runs on one core.
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::perror("consumer_bench: sched_setaffinity");
    return 1;
  }

  capture_options co;
  co.ring_bytes = ring_mib << 20;
  auto cap = capture::open(co);
  if (!cap) {
    std::fprintf(stderr, "consumer_bench: %s\n", cap.err().message.c_str());
    return 1;
  }
  (*cap)->arm(MAGNET_EV_NET_L4_RECV, MAGNET_MODE_STREAM);
  int prog = (*cap)->program_fd("l4_recv_cgskb");
  if (prog < 0) {
    std::fprintf(stderr, "consumer_bench: no program l4_recv_cgskb\n");
    return 1;
  }
  const auto pkt = udp_packet(1400);

  // One probe record: header + magnet_pkt, plus libbpf's 8-byte ring header,
  // rounded to 8.  Fill to 7/8 of the ring: nothing is ever dropped.
  const size_t rec = sizeof(magnet_hdr) + sizeof(magnet_pkt);
  const size_t slot = (rec + 8 + 7) & ~size_t(7);
  const uint32_t fill = static_cast<uint32_t>((co.ring_bytes / 8 * 7) / slot);

  double producer_ns = 0;
  auto fill_ring = [&]() -> bool {
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt.data(),
                .data_size_in = static_cast<__u32>(pkt.size()),
                .repeat = static_cast<int>(fill));
    int err = bpf_prog_test_run_opts(prog, &o);
    if (err) {
      std::fprintf(stderr, "consumer_bench: BPF_PROG_TEST_RUN: %s\n", std::strerror(-err));
      return false;
    }
    producer_ns = o.duration;  // average ns per run, as reported by the kernel
    return true;
  };

  const std::string path = dir + "/magnet-consumer-bench." + std::to_string(getpid()) + ".trace";
  struct variant {
    const char* name;
    std::string what;
    std::vector<sample> s;
  };
  std::vector<variant> vs = {
      {"null", "ring_consumer + sink walking record headers", {}},
      {"trace", "ring_consumer + trace_writer to " + dir, {}},
      {"libbpf-raw", "ring_buffer__consume, counting callback only", {}},
  };
  std::vector<double> prod;
  uint64_t lost_total = 0;

  for (int r = 0; r < reps; ++r) {
    // Rotate the order of the variants each repetition.
    for (size_t k = 0; k < vs.size(); ++k) {
      size_t v = (k + r) % vs.size();
      if (!fill_ring()) return 1;
      prod.push_back(producer_ns);
      uint64_t recs = 0, bytes = 0, t0 = 0, c0 = 0, t1 = 0, c1 = 0;
      if (v == 2) {
        struct ctx_t {
          uint64_t n = 0, b = 0;
        } ctx;
        auto* rb = ring_buffer__new(
            (*cap)->ringbuf_fd(),
            [](void* c, void*, size_t sz) -> int {
              auto* x = static_cast<ctx_t*>(c);
              ++x->n;
              x->b += sz;
              return 0;
            },
            &ctx, nullptr);
        if (!rb) {
          std::fprintf(stderr, "consumer_bench: ring_buffer__new failed\n");
          return 1;
        }
        t0 = now_ns(CLOCK_MONOTONIC);
        c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        while (ring_buffer__consume(rb) > 0) {
        }
        t1 = now_ns(CLOCK_MONOTONIC);
        c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        ring_buffer__free(rb);
        recs = ctx.n;
        bytes = ctx.b;
      } else {
        std::optional<trace_writer> w;
        if (v == 1) {
          auto tw = trace_writer::create(path, local_sysinfo(),
                                         {MAGNET_EV_NET_L4_RECV, MAGNET_EV_LOST});
          if (!tw) {
            std::fprintf(stderr, "consumer_bench: %s\n", tw.err().message.c_str());
            return 1;
          }
          w.emplace(std::move(*tw));
        }
        uint64_t walked = 0;
        status ws;
        auto sink = [&](std::span<const uint8_t> b) {
          if (w) {
            if (ws) ws = w->append(b);
            return;
          }
          for (size_t off = 0; off < b.size(); off += hdr_of(b.data() + off).len) ++walked;
        };
        auto cons = ring_consumer::create((*cap)->ringbuf_fd(), **cap, sink);
        if (!cons) {
          std::fprintf(stderr, "consumer_bench: %s\n", cons.err().message.c_str());
          return 1;
        }
        t0 = now_ns(CLOCK_MONOTONIC);
        c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        for (;;) {
          auto n = (*cons)->drain();
          if (!n) {
            std::fprintf(stderr, "consumer_bench: %s\n", n.err().message.c_str());
            return 1;
          }
          if (*n == 0) break;
        }
        if (w) {
          if (auto s = w->close(); !s) ws = s;
        }
        t1 = now_ns(CLOCK_MONOTONIC);
        c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        if (!ws) {
          std::fprintf(stderr, "consumer_bench: %s\n", ws.err().message.c_str());
          return 1;
        }
        recs = (*cons)->records();
        bytes = (*cons)->bytes();
        lost_total += (*cons)->lost();
        unlink(path.c_str());
      }
      if (recs != fill) {
        std::fprintf(stderr, "consumer_bench: %s drained %llu records, expected %u\n", vs[v].name,
                     static_cast<unsigned long long>(recs), fill);
        return 1;
      }
      vs[v].s.push_back({recs / ((t1 - t0) / 1e9), recs / ((c1 - c0) / 1e9),
                         double(bytes) / double(recs)});
    }
  }

  auto pst = summarize(prod);
  if (json) {
    std::printf("{\"bench\":\"consumer\",\"cpu\":%d,\"ring_mib\":%zu,\"records_per_fill\":%u,"
                "\"reps\":%d,\"record_bytes\":%zu,\"lost\":%llu,"
                "\"producer_ns_per_record\":{\"median\":%.1f,\"min\":%.1f,\"max\":%.1f},"
                "\"variants\":[",
                cpu, ring_mib, fill, reps, rec, static_cast<unsigned long long>(lost_total),
                pst.med, pst.min, pst.max);
    for (size_t v = 0; v < vs.size(); ++v) {
      std::vector<double> a, c;
      for (auto& s : vs[v].s) a.push_back(s.rps), c.push_back(s.cpu_rps);
      auto sa = summarize(a), sc = summarize(c);
      std::printf("%s{\"name\":\"%s\",\"what\":\"%s\",\"records_per_s\":{\"median\":%.0f,"
                  "\"min\":%.0f,\"max\":%.0f},\"records_per_cpu_s\":{\"median\":%.0f,"
                  "\"min\":%.0f,\"max\":%.0f},\"samples\":[",
                  v ? "," : "", vs[v].name, vs[v].what.c_str(), sa.med, sa.min, sa.max, sc.med, sc.min,
                  sc.max);
      for (size_t i = 0; i < a.size(); ++i) std::printf("%s%.0f", i ? "," : "", a[i]);
      std::printf("]}");
    }
    std::printf("],\"target_records_per_s\":5000000}\n");
    return 0;
  }
  std::printf("consumer throughput on CPU %d: %u records of %zu bytes per fill (%zu MiB ring), "
              "%d repetitions, order rotated\n",
              cpu, fill, rec, ring_mib, reps);
  std::printf("producer (BPF_PROG_TEST_RUN l4_recv_cgskb): median %.0f ns/record (min %.0f, max "
              "%.0f)\n\n",
              pst.med, pst.min, pst.max);
  std::printf("%-11s %14s %24s %16s  %s\n", "sink", "M records/s", "min-max", "M rec/CPU-s",
              "what");
  for (auto& v : vs) {
    std::vector<double> a, c;
    for (auto& s : v.s) a.push_back(s.rps), c.push_back(s.cpu_rps);
    auto sa = summarize(a), sc = summarize(c);
    char mm[64];
    std::snprintf(mm, sizeof mm, "%.2f-%.2f", sa.min / 1e6, sa.max / 1e6);
    std::printf("%-11s %14.2f %24s %16.2f  %s\n", v.name, sa.med / 1e6, mm, sc.med / 1e6, v.what.c_str());
  }
  std::printf("\ntarget: >= 5 M records/s on one core (the 'trace' row is what magnet record "
              "does); lost %llu\n",
              static_cast<unsigned long long>(lost_total));
  return 0;
}
