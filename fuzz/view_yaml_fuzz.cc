// libFuzzer target: view definition files (`magnet host --views`, reloaded
// on SIGHUP), through the loader and into the engine: parse_views, then
// add_views, then a fixed stream of records of three VMs and the host, then
// snapshots of every view and of one VM, as JSON.  Oracles besides the
// sanitizers: add_views adds all views or none; the JSON texts are arrays.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/events.h"
#include "magnet/filters/config.h"
#include "magnet/filters/engine.h"
#include "magnet/trace_file.h"

using namespace magnet;

namespace {

// Packets, socket sends, KVM exits, block completions and scheduler
// switches of VMs 1..3 and the host, 1 ms apart.
std::vector<uint8_t> stream() {
  std::vector<uint8_t> out;
  uint64_t ts = 1'000'000'000;
  for (int i = 0; i < 64; ++i) {
    magnet_hdr h{};
    h.ts_ns = ts += 1'000'000;
    h.vm_id = static_cast<uint32_t>(i % 4);
    h.cpu = static_cast<uint16_t>(i % 2);
    h.tgid = 100 + static_cast<uint32_t>(i % 3);
    h.tid = h.tgid + 1;
    h.abstract_id = 0x1000 + static_cast<uint64_t>(i % 5);
    h.size = i % 7 == 6 ? -11 : 1000 + i;
    std::vector<uint8_t> r;
    switch (i % 5) {
      case 0:
      case 1: {
        magnet_pkt p{};
        p.ifindex = 10 + h.vm_id;
        p.l3proto = 0x0800;
        p.ip_version = 4;
        p.protocol = 17;
        p.ip_id = static_cast<uint16_t>(i / 2);
        p.sport = 5000;
        p.dport = static_cast<uint16_t>(6000 + h.vm_id);
        p.saddr[0] = 10, p.saddr[3] = static_cast<uint8_t>(h.vm_id);
        p.daddr[0] = 10, p.daddr[3] = 1;
        h.type = i % 5 ? MAGNET_EV_NET_DEV_XMIT : MAGNET_EV_NET_DEV_RECV;
        r = make_record(h, p);
        break;
      }
      case 2: {
        magnet_kvm_exit k{};
        k.vcpu_id = static_cast<uint32_t>(i % 2);
        k.exit_reason = 30;
        h.type = MAGNET_EV_KVM_EXIT;
        r = make_record(h, k);
        break;
      }
      case 3: {
        magnet_blk b{};
        b.nr_bytes = 4096;
        b.latency_ns = 50'000;
        h.type = MAGNET_EV_BLK_COMPLETE;
        r = make_record(h, b);
        break;
      }
      default: {
        magnet_sock s{};
        s.family = 2;
        s.protocol = 6;
        s.sport = 40000;
        s.dport = 443;
        h.type = MAGNET_EV_NET_SOCK_SEND;
        r = make_record(h, s);
        break;
      }
    }
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

void check_array(const std::string& json) {
  if (json.empty() || json.front() != '[' || json.back() != ']') abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<uint8_t> records = stream();
  auto views = filters::parse_views(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!views) return 0;
  filters::engine e;
  if (!filters::add_views(e, *views)) {
    if (!e.view_names().empty()) abort();  // all or none
    return 0;
  }
  if (e.view_names().size() != views->size()) abort();
  e.feed(records);
  check_array(filters::to_json(e.snapshot()));
  check_array(filters::to_json(e.snapshot_vm(1)));
  (void)e.pushdown();
  return 0;
}
