#include "magnet/capture/latency.h"

#include <asm/svm.h>
#include <asm/vmx.h>
#include <linux/kvm.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace magnet {

void lat_stat::add(const magnet_lat_stat& s) {
  lat_stat o{s.count, s.total_ns, s.max_ns, s.aux, {}};
  std::copy(std::begin(s.hist), std::end(s.hist), o.hist.begin());
  merge(o);
}

void lat_stat::merge(const lat_stat& o) {
  count += o.count;
  total_ns += o.total_ns;
  max_ns = std::max(max_ns, o.max_ns);
  aux += o.aux;
  for (size_t i = 0; i < hist.size(); ++i) hist[i] += o.hist[i];
}

lat_stat lat_stat::since(const lat_stat& e) const {
  lat_stat d = *this;
  d.count -= std::min(count, e.count);
  d.total_ns -= std::min(total_ns, e.total_ns);
  d.aux -= std::min(aux, e.aux);
  for (size_t i = 0; i < hist.size(); ++i) d.hist[i] -= std::min(hist[i], e.hist[i]);
  return d;
}

double lat_stat::quantile_ns(double q) const {
  uint64_t n = 0;
  for (auto h : hist) n += h;
  if (!n) return 0;
  double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(n);
  double seen = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    if (!hist[i]) continue;
    if (seen + static_cast<double>(hist[i]) >= rank) {
      double lo = i ? std::ldexp(1.0, static_cast<int>(i)) : 0.0;
      double hi = std::ldexp(1.0, static_cast<int>(i) + 1);
      double f = (rank - seen) / static_cast<double>(hist[i]);
      double v = lo + f * (hi - lo);
      return max_ns ? std::min(v, static_cast<double>(max_ns)) : v;
    }
    seen += static_cast<double>(hist[i]);
  }
  return static_cast<double>(max_ns);
}

namespace {

struct code_name {
  int64_t code;  // SVM_EXIT_ERR is -1
  const char* name;
};

// The kernel's own tables (uapi asm/vmx.h, asm/svm.h), as perf kvm uses.
const code_name kVmx[] = {VMX_EXIT_REASONS};
const code_name kSvm[] = {SVM_EXIT_REASONS};

std::string lower(const char* s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

}  // namespace

std::string kvm_exit_reason_name(uint32_t isa, uint32_t reason) {
  if (reason == MAGNET_KVM_REASON_HALT_POLLED) return "halt(polled)";
  if (reason == MAGNET_KVM_REASON_HALT_WAITED) return "halt(slept)";
  if (isa == 1)
    for (const auto& c : kVmx)
      if (c.code == static_cast<int64_t>(reason)) return lower(c.name);
  if (isa == 2)
    for (const auto& c : kSvm)
      if (c.code == static_cast<int64_t>(reason)) return lower(c.name);
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", reason);
  return buf;
}

std::string kvm_userspace_reason_name(uint32_t reason) {
  switch (reason) {
    case KVM_EXIT_UNKNOWN: return "unknown";
    case KVM_EXIT_EXCEPTION: return "exception";
    case KVM_EXIT_IO: return "io";
    case KVM_EXIT_HYPERCALL: return "hypercall";
    case KVM_EXIT_DEBUG: return "debug";
    case KVM_EXIT_HLT: return "hlt";
    case KVM_EXIT_MMIO: return "mmio";
    case KVM_EXIT_IRQ_WINDOW_OPEN: return "irq_window_open";
    case KVM_EXIT_SHUTDOWN: return "shutdown";
    case KVM_EXIT_FAIL_ENTRY: return "fail_entry";
    case KVM_EXIT_INTR: return "intr";
    case KVM_EXIT_SET_TPR: return "set_tpr";
    case KVM_EXIT_TPR_ACCESS: return "tpr_access";
    case KVM_EXIT_NMI: return "nmi";
    case KVM_EXIT_INTERNAL_ERROR: return "internal_error";
    case KVM_EXIT_SYSTEM_EVENT: return "system_event";
    case KVM_EXIT_IOAPIC_EOI: return "ioapic_eoi";
    case KVM_EXIT_HYPERV: return "hyperv";
    case KVM_EXIT_X86_RDMSR: return "x86_rdmsr";
    case KVM_EXIT_X86_WRMSR: return "x86_wrmsr";
    case KVM_EXIT_DIRTY_RING_FULL: return "dirty_ring_full";
    case KVM_EXIT_X86_BUS_LOCK: return "x86_bus_lock";
    default: {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%u", reason);
      return buf;
    }
  }
}

}  // namespace magnet
