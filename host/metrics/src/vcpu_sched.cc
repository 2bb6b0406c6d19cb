#include "magnet/metrics/vcpu_sched.h"

#include "magnet/event.h"
#include "magnet/record.h"

namespace magnet::host {

void vcpu_sched::add_thread(pid_t tid, uint32_t vm, int vcpu) {
  auto& e = threads_[tid];
  e.t.vm = vm;
  e.t.vcpu = vcpu;
}

void vcpu_sched::remove_vm(uint32_t vm) {
  std::erase_if(threads_, [vm](const auto& kv) { return kv.second.t.vm == vm; });
}

void vcpu_sched::close(entry& e, uint64_t ts) {
  if (e.s == state::unknown || ts < e.since) return;
  uint64_t d = ts - e.since;
  if (e.s == state::running) e.t.run_ns += d;
  else if (e.s == state::runnable) e.t.wait_ns += d;
  else e.t.halt_ns += d;
}

void vcpu_sched::feed(std::span<const uint8_t> recs) {
  for (size_t off = 0; off + sizeof(magnet_hdr) <= recs.size();) {
    const uint8_t* r = recs.data() + off;
    const auto& h = hdr_of(r);
    if (h.len < sizeof(magnet_hdr) || off + h.len > recs.size()) break;
    off += h.len;
    if (h.type == MAGNET_EV_SCHED_SWITCH && h.len >= sizeof(h) + sizeof(magnet_sched_switch)) {
      const auto& s = *reinterpret_cast<const magnet_sched_switch*>(r + sizeof(h));
      if (auto it = threads_.find(static_cast<pid_t>(s.prev_tid)); it != threads_.end()) {
        close(it->second, h.ts_ns);
        // prev_state 0 (TASK_RUNNING): preempted, still runnable.
        it->second.s = s.prev_state == 0 ? state::runnable : state::sleeping;
        it->second.since = h.ts_ns;
      }
      if (auto it = threads_.find(static_cast<pid_t>(s.next_tid)); it != threads_.end()) {
        close(it->second, h.ts_ns);
        it->second.s = state::running;
        it->second.since = h.ts_ns;
      }
    } else if (h.type == MAGNET_EV_SCHED_WAKEUP &&
               h.len >= sizeof(h) + sizeof(magnet_sched_wakeup)) {
      const auto& w = *reinterpret_cast<const magnet_sched_wakeup*>(r + sizeof(h));
      if (auto it = threads_.find(static_cast<pid_t>(w.tid));
          it != threads_.end() && it->second.s != state::running) {
        close(it->second, h.ts_ns);
        it->second.s = state::runnable;
        it->second.since = h.ts_ns;
      }
    }
  }
}

std::map<pid_t, vcpu_times> vcpu_sched::totals(uint64_t now_ns) const {
  std::map<pid_t, vcpu_times> out;
  for (const auto& [tid, e] : threads_) {
    entry copy = e;
    close(copy, now_ns);
    out[tid] = copy.t;
  }
  return out;
}

}  // namespace magnet::host
