#include "magnet/export/openmetrics.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "magnet/event.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"
#include "magnet/text.h"
#include "magnet/view.h"

namespace magnet::host {

// ---------------------------------------------------------------- negotiation

namespace {

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

exposition negotiate_exposition(std::string_view accept) {
  double q_om = 0, q_text = 0;
  while (!accept.empty()) {
    size_t comma = accept.find(',');
    std::string_view range = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view{} : accept.substr(comma + 1);
    size_t semi = range.find(';');
    std::string_view type = trim(range.substr(0, semi));
    double q = 1;
    std::string_view version;
    bool bad = false;
    while (semi != std::string_view::npos) {
      range = range.substr(semi + 1);
      semi = range.find(';');
      std::string_view p = trim(range.substr(0, semi));
      size_t eq = p.find('=');
      if (eq == std::string_view::npos) continue;
      std::string_view k = trim(p.substr(0, eq)), v = trim(p.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      if (iequal(k, "q")) {
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), q);
        if (ec != std::errc{} || end != v.data() + v.size() || q < 0 || q > 1) bad = true;
      } else if (iequal(k, "version")) {
        version = v;
      }
    }
    if (bad) continue;
    if (iequal(type, "application/openmetrics-text")) {
      if (version.empty() || version == "1.0.0") q_om = std::max(q_om, q);
    } else if (iequal(type, "text/plain")) {
      if (version.empty() || version == "0.0.4") q_text = std::max(q_text, q);
    } else if (type == "*/*" || iequal(type, "text/*")) {
      q_text = std::max(q_text, q);
    }
  }
  return q_om > 0 && q_om >= q_text ? exposition::openmetrics : exposition::prometheus;
}

std::string_view content_type(exposition f) {
  return f == exposition::openmetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                      : "text/plain; version=0.0.4; charset=utf-8";
}

// ---------------------------------------------------------------- record totals

void record_totals::feed(std::span<const uint8_t> recs, const std::vector<link_info>& links) {
  for_each_vm_record(recs, [&](const magnet_hdr& h, const uint8_t* r) {
    const uint8_t* p = r + sizeof(magnet_hdr);
    const size_t plen = h.len - sizeof(magnet_hdr);
    const uint64_t w = weights_(h);  // the events the record stands for (sampled: N)
    if (h.type == MAGNET_EV_NET_DROP && plen >= sizeof(magnet_net_drop)) {
      const auto& d = *reinterpret_cast<const magnet_net_drop*>(p);
      bool at_link = std::any_of(links.begin(), links.end(),
                                 [&](const link_info& l) { return l.ifindex && l.ifindex == d.ifindex; });
      auto& t = vms_[h.vm_id];
      (at_link ? t.drops_link : t.drops_tap) += w;
    } else if (h.type == MAGNET_EV_BLK_COMPLETE && plen >= sizeof(magnet_blk)) {
      const auto& b = *reinterpret_cast<const magnet_blk*>(p);
      if (!b.latency_ns) return;
      auto& s = vms_[h.vm_id].blk_latency;
      s.count += w;
      s.total_ns += b.latency_ns * w;
      s.max_ns = std::max<uint64_t>(s.max_ns, b.latency_ns);
      // The kernel's bucket (mg_log2 in capture.bpf.c): floor(log2(ns)), 0 for 0 and 1.
      size_t i = b.latency_ns > 1 ? static_cast<size_t>(63 - __builtin_clzll(static_cast<uint64_t>(b.latency_ns))) : 0;
      s.hist[std::min(i, s.hist.size() - 1)] += w;
    }
  });
}

void record_totals::retain(std::span<const uint32_t> vms) {
  std::erase_if(vms_, [&](const auto& kv) { return !std::binary_search(vms.begin(), vms.end(), kv.first); });
}

const vm_record_totals* record_totals::find(uint32_t vm) const {
  auto it = vms_.find(vm);
  return it == vms_.end() ? nullptr : &it->second;
}

// ---------------------------------------------------------------- rendering

namespace {

constexpr int kFirstBound = 8;   // le = 2^8 - 1 ns: kernel buckets 0..7
constexpr int kLastBound = 31;   // le = 2^31 - 1 ns: kernel bucket 30; 31 is +Inf
constexpr size_t kBounds = kLastBound - kFirstBound + 1;
static_assert(kLastBound == MAGNET_LAT_BUCKETS - 1, "the kernel's last bucket is +Inf");

const std::array<double, kBounds>& bounds() {
  static const auto b = [] {
    std::array<double, kBounds> a{};
    for (size_t i = 0; i < kBounds; ++i)
      a[i] = static_cast<double>((uint64_t{1} << (kFirstBound + i)) - 1) / 1e9;
    return a;
  }();
  return b;
}

void put_u64(std::string& o, uint64_t v) {
  char b[24];
  auto [end, ec] = std::to_chars(b, b + sizeof b, v);
  o.append(b, end);
}

void put_double(std::string& o, double v) {
  if (std::isnan(v)) {
    o += "NaN";
  } else if (std::isinf(v)) {
    o += v > 0 ? "+Inf" : "-Inf";
  } else {
    char b[32];
    auto [end, ec] = std::to_chars(b, b + sizeof b, v);
    o.append(b, end);
  }
}

// Label values in both formats; HELP text in OpenMetrics.  (The text
// format 0.0.4 escapes only \ and newline in HELP.)
void put_escaped(std::string& o, std::string_view s, bool quote = true) {
  for (char c : s) {
    if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '"' && quote) o += "\\\"";
    else o += c;
  }
}

// Every how many of the finite bounds a histogram keeps: all, or one in
// four (a factor of 16 between bounds: 255 ns, 4.1 us, 65.5 us, 1.05 ms,
// 16.8 ms, 268 ms, then +Inf).
size_t bound_stride(histogram_detail d) { return d == histogram_detail::coarse ? 4 : 1; }

const std::array<std::string, kBounds + 1>& bound_labels() {
  static const auto l = [] {
    std::array<std::string, kBounds + 1> a;
    for (size_t i = 0; i < kBounds; ++i) put_double(a[i], bounds()[i]);
    a[kBounds] = "+Inf";
    return a;
  }();
  return l;
}

class writer {
 public:
  writer(std::string& o, exposition f, histogram_detail d)
      : o_(o), om_(f == exposition::openmetrics), stride_(bound_stride(d)) {}
  bool om() const { return om_; }

  void family(const metric_family& m) {
    const char* suffix = !om_ && m.type == metric_type::counter ? "_total"
                         : !om_ && m.type == metric_type::info  ? "_info"
                                                                : "";
    const char* type = m.type == metric_type::counter     ? "counter"
                       : m.type == metric_type::histogram ? "histogram"
                       : m.type == metric_type::info      ? (om_ ? "info" : "gauge")
                                                          : "gauge";
    o_ += "# HELP ";
    o_ += m.name;
    o_ += suffix;
    o_ += ' ';
    put_escaped(o_, m.help, om_);
    o_ += "\n# TYPE ";
    o_ += m.name;
    o_ += suffix;
    o_ += ' ';
    o_ += type;
    o_ += '\n';
    if (om_ && *m.unit) {
      o_ += "# UNIT ";
      o_ += m.name;
      o_ += ' ';
      o_ += m.unit;
      o_ += '\n';
    }
  }

  // name+suffix{base,extra} — @base and @extra are already escaped label
  // lists without braces; either may be empty.
  void begin(std::string_view name, std::string_view suffix, std::string_view base,
             std::string_view extra = {}) {
    o_ += name;
    o_ += suffix;
    if (!base.empty() || !extra.empty()) {
      o_ += '{';
      o_ += base;
      if (!base.empty() && !extra.empty()) o_ += ',';
      o_ += extra;
      o_ += '}';
    }
    o_ += ' ';
  }
  void value(uint64_t v) {
    put_u64(o_, v);
    o_ += '\n';
  }
  void value(double v) {
    put_double(o_, v);
    o_ += '\n';
  }

  void histogram(std::string_view name, std::string_view base, std::string_view extra, const lat_stat& s) {
    uint64_t cum = 0;
    size_t k = 0;  // next kernel bucket to add
    std::string labels(extra);
    if (!labels.empty()) labels += ',';
    labels += "le=\"";
    const size_t keep = labels.size();
    for (size_t b = 0; b <= kBounds; ++b) {
      if (b < kBounds && b % stride_) continue;  // coarse: its buckets go to the next bound kept
      const size_t upto = b < kBounds ? kFirstBound + b : s.hist.size();  // kernel buckets < upto
      for (; k < upto; ++k) cum += s.hist[k];
      labels.resize(keep);
      labels += bound_labels()[b];
      labels += '"';
      begin(name, "_bucket", base, labels);
      value(cum);
    }
    // The buckets' own total: the kernel bumps count and a bucket apart, so
    // a concurrent reading may see one without the other.
    begin(name, "_count", base, extra);
    value(cum);
    begin(name, "_sum", base, extra);
    value(static_cast<double>(s.total_ns) / 1e9);
  }

  std::string& out() { return o_; }

 private:
  std::string& o_;
  bool om_;
  size_t stride_;
};

// What a family's emitter sees: the input, and each VM's escaped labels.
struct context {
  const exposition_input& in;
  std::vector<std::string> base;  // per VM: domain="...",uuid="..."
};

using emit_fn = void (*)(writer&, const metric_family&, const context&);

// Calls fn(vm, counters, base labels) for every VM with counters.
template <class Fn>
void each_vm(const context& c, Fn&& fn) {
  for (size_t i = 0; i < c.in.vms.size(); ++i)
    if (c.in.vms[i].counters) fn(c.in.vms[i], *c.in.vms[i].counters, c.base[i]);
}

std::string label(std::string_view k, std::string_view v) {
  std::string s(k);
  s += "=\"";
  put_escaped(s, v);
  s += '"';
  return s;
}

bool is_pseudo_reason(uint32_t idx) {
  return idx == MAGNET_VIEW_REASON_HALT_POLLED || idx == MAGNET_VIEW_REASON_HALT_SLEPT;
}

std::string reason_label(uint32_t idx) { return label("reason", kvm_exit_reason_name(idx >> 24, idx & 0xffffff)); }

template <uint64_t vm_counters::*Field>
void emit_counter_field(writer& w, const metric_family& m, const context& c) {
  each_vm(c, [&](const vm_exposition&, const vm_counters& v, const std::string& base) {
    w.begin(m.name, "_total", base);
    w.value(v.*Field);
  });
}

struct family_def {
  metric_family meta;
  emit_fn emit;
  bool power = false;  // only on a host with a power source (exposition_input::power)
};

// The host's power families' {source="..."} (and part).
std::string source_label(const context& c) { return label("source", c.in.power->source); }

void emit_host_part(writer& w, const metric_family& m, const context& c, const char* part, double j) {
  w.begin(m.name, "_total", source_label(c), label("part", part));
  w.value(j);
}

// Calls fn(base labels, figures) for every VM with power figures.
template <class Fn>
void each_vm_power(const context& c, Fn&& fn) {
  for (size_t i = 0; i < c.in.vms.size(); ++i)
    if (c.in.vms[i].power) fn(c.base[i], *c.in.vms[i].power);
}

const family_def kFamilies[] = {
    {{"magnet_vm", metric_type::info, "",
      "A VM the daemon follows: libvirt domain name and UUID, magnet's VM id"},
     [](writer& w, const metric_family& m, const context& c) {
       for (size_t i = 0; i < c.in.vms.size(); ++i) {
         w.begin(m.name, "_info", c.base[i], label("magnet_id", std::to_string(c.in.vms[i].vm_id)));
         w.value(uint64_t{1});
       }
     }},
    {{"magnet_vm_vcpu_seconds", metric_type::counter, "seconds",
      "Time of each vCPU thread by state: run (on a CPU), wait (runnable, no CPU: the host side "
      "of steal), halt (the guest idle)"},
     [](writer& w, const metric_family& m, const context& c) {
       static const char* kState[] = {"run", "wait", "halt"};
       each_vm(c, [&](const vm_exposition&, const vm_counters& v, const std::string& base) {
         for (const auto& [vcpu, ns] : v.vcpu_ns)
           for (int s = 0; s < 3; ++s) {
             w.begin(m.name, "_total", base,
                     label("vcpu", std::to_string(vcpu)) + "," + label("state", kState[s]));
             w.value(static_cast<double>(ns[static_cast<size_t>(s)]) / 1e9);
           }
       });
     }},
    {{"magnet_vm_kvm_exits", metric_type::counter, "",
      "KVM exits by exit reason (counted as the vCPU enters the guest again)"},
     [](writer& w, const metric_family& m, const context& c) {
       each_vm(c, [&](const vm_exposition&, const vm_counters& v, const std::string& base) {
         for (const auto& [idx, s] : v.reasons)
           if (!is_pseudo_reason(idx)) {
             w.begin(m.name, "_total", base, reason_label(idx));
             w.value(s.count);
           }
       });
     }},
    {{"magnet_vm_kvm_exit_handling_seconds", metric_type::histogram, "seconds",
      "KVM exit to the next entry, by exit reason"},
     [](writer& w, const metric_family& m, const context& c) {
       each_vm(c, [&](const vm_exposition&, const vm_counters& v, const std::string& base) {
         for (const auto& [idx, s] : v.reasons)
           if (!is_pseudo_reason(idx)) w.histogram(m.name, base, reason_label(idx), s);
       });
     }},
    {{"magnet_vm_kvm_halt_seconds", metric_type::histogram, "seconds",
      "vCPU halts by how they ended: polled (in KVM's halt-polling loop) or slept"},
     [](writer& w, const metric_family& m, const context& c) {
       each_vm(c, [&](const vm_exposition&, const vm_counters& v, const std::string& base) {
         for (const auto& [idx, s] : v.reasons)
           if (is_pseudo_reason(idx))
             w.histogram(m.name, base,
                         label("kind", idx == MAGNET_VIEW_REASON_HALT_POLLED ? "polled" : "slept"), s);
       });
     }},
    {{"magnet_vm_network_transmit_bytes", metric_type::counter, "bytes",
      "Bytes the guest sent on its taps, from the IP header on"},
     emit_counter_field<&vm_counters::tap_tx_bytes>},
    {{"magnet_vm_network_receive_bytes", metric_type::counter, "bytes",
      "Bytes the guest received on its taps, from the IP header on"},
     emit_counter_field<&vm_counters::tap_rx_bytes>},
    {{"magnet_vm_network_transmit_packets", metric_type::counter, "",
      "Packets the guest sent on its taps"},
     emit_counter_field<&vm_counters::tap_tx_pkts>},
    {{"magnet_vm_network_receive_packets", metric_type::counter, "",
      "Packets the guest received on its taps"},
     emit_counter_field<&vm_counters::tap_rx_pkts>},
    {{"magnet_vm_network_drops", metric_type::counter, "",
      "The VM's packets dropped on the host: on its taps and host path (where=\"tap\") or at a "
      "shared link given with --link (where=\"link\")"},
     [](writer& w, const metric_family& m, const context& c) {
       each_vm(c, [&](const vm_exposition& vm, const vm_counters&, const std::string& base) {
         const vm_record_totals none{};
         const vm_record_totals& r = vm.records ? *vm.records : none;
         w.begin(m.name, "_total", base, "where=\"tap\"");
         w.value(r.drops_tap);
         w.begin(m.name, "_total", base, "where=\"link\"");
         w.value(r.drops_link);
       });
     }},
    {{"magnet_vm_host_queue_seconds", metric_type::histogram, "seconds",
      "Host queueing delay of the VM's packets: tap to the outgoing device (direction=\"transmit\") "
      "and incoming device to the tap (direction=\"receive\")"},
     [](writer& w, const metric_family& m, const context& c) {
       each_vm(c, [&](const vm_exposition&, const vm_counters& v, const std::string& base) {
         w.histogram(m.name, base, "direction=\"transmit\"", v.queue[0]);
         w.histogram(m.name, base, "direction=\"receive\"", v.queue[1]);
       });
     }},
    {{"magnet_vm_block_bytes", metric_type::counter, "bytes", "Bytes of the VM's completed block requests"},
     emit_counter_field<&vm_counters::blk_bytes>},
    {{"magnet_vm_block_requests", metric_type::counter, "", "The VM's completed block requests"},
     emit_counter_field<&vm_counters::blk_reqs>},
    {{"magnet_vm_block_latency_seconds", metric_type::histogram, "seconds",
      "Block request issue to completion"},
     [](writer& w, const metric_family& m, const context& c) {
       each_vm(c, [&](const vm_exposition& vm, const vm_counters&, const std::string& base) {
         w.histogram(m.name, base, {}, vm.records ? vm.records->blk_latency : lat_stat{});
       });
     }},
    {{"magnet_vm_lost_records", metric_type::counter, "",
      "The VM's records lost in the kernel (over its stream quota, or the ring buffer full)"},
     emit_counter_field<&vm_counters::lost>},
    {{"magnet_vm_power_watts", metric_type::gauge, "watts",
      "The VM's share of the host's power over the last second: of the host's power above idle, "
      "its CPU time's share of the host's busy time (docs/placement.md)"},
     [](writer& w, const metric_family& m, const context& c) {
       each_vm_power(c, [&](const std::string& base, const vm_power_figures& p) {
         w.begin(m.name, "", base);
         w.value(p.watts);
       });
     },
     true},
    {{"magnet_vm_energy_joules", metric_type::counter, "joules",
      "The VM's share of the host's energy since the daemon started (as magnet_vm_power_watts)"},
     [](writer& w, const metric_family& m, const context& c) {
       each_vm_power(c, [&](const std::string& base, const vm_power_figures& p) {
         w.begin(m.name, "_total", base);
         w.value(p.joules);
       });
     },
     true},
    {{"magnet_host_power_watts", metric_type::gauge, "watts",
      "The host's power over the last second, from RAPL (source=\"rapl\") or the host's power "
      "model at its CPU utilisation (source=\"model\")"},
     [](writer& w, const metric_family& m, const context& c) {
       w.begin(m.name, "", source_label(c));
       w.value(c.in.power->watts);
     },
     true},
    {{"magnet_host_energy_joules", metric_type::counter, "joules",
      "The host's energy since the daemon started: the VMs' magnet_vm_energy_joules_total and "
      "magnet_host_energy_part_joules_total add up to it"},
     [](writer& w, const metric_family& m, const context& c) {
       w.begin(m.name, "_total", source_label(c));
       w.value(c.in.power->host_j);
     },
     true},
    {{"magnet_host_energy_part_joules", metric_type::counter, "joules",
      "The host's energy that no VM it follows is given: its idle power (part=\"idle\"), its busy "
      "time that was no VM's work (part=\"own\"), VMs that have gone since (part=\"gone\")"},
     [](writer& w, const metric_family& m, const context& c) {
       emit_host_part(w, m, c, "idle", c.in.power->idle_j);
       emit_host_part(w, m, c, "own", c.in.power->own_j);
       emit_host_part(w, m, c, "gone", c.in.power->gone_j);
     },
     true},
    {{"magnet_records", metric_type::counter, "", "Records the daemon consumed from the kernel"},
     [](writer& w, const metric_family& m, const context& c) {
       w.begin(m.name, "_total", {});
       w.value(c.in.records);
     }},
    {{"magnet_lost_records", metric_type::counter, "",
      "Records lost in the kernel (ring buffer full), all VMs together"},
     [](writer& w, const metric_family& m, const context& c) {
       w.begin(m.name, "_total", {});
       w.value(c.in.lost);
     }},
    {{"magnet_libvirt_up", metric_type::gauge, "", "1 while the daemon is connected to libvirt"},
     [](writer& w, const metric_family& m, const context& c) {
       w.begin(m.name, "", {});
       w.value(uint64_t{c.in.libvirt_connected ? 1u : 0u});
     }},
    {{"magnet_vms", metric_type::gauge, "", "VMs the daemon follows"},
     [](writer& w, const metric_family& m, const context& c) {
       w.begin(m.name, "", {});
       w.value(static_cast<uint64_t>(c.in.vms.size()));
     }},
    {{"process_resident_memory_bytes", metric_type::gauge, "bytes", "Resident memory of the daemon"},
     [](writer& w, const metric_family& m, const context& c) {
       w.begin(m.name, "", {});
       w.value(c.in.resident_bytes);
     }},
    // Last: it times everything above.
    {{"magnet_scrape_duration_seconds", metric_type::gauge, "seconds",
      "Time the daemon took to render this page, up to this family"},
     nullptr},
};

}  // namespace

std::vector<double> histogram_bounds_s(histogram_detail d) {
  std::vector<double> out;
  for (size_t b = 0; b < kBounds; b += bound_stride(d)) out.push_back(bounds()[b]);
  return out;
}

std::span<const metric_family> metric_families() {
  static const auto v = [] {
    std::vector<metric_family> out;
    for (const auto& f : kFamilies) out.push_back(f.meta);
    return out;
  }();
  return v;
}

std::vector<std::string> metric_series_names() {
  std::vector<std::string> out;
  for (const auto& f : metric_families()) {
    const std::string n = f.name;
    switch (f.type) {
      case metric_type::counter: out.push_back(n + "_total"); break;
      case metric_type::info: out.push_back(n + "_info"); break;
      case metric_type::gauge: out.push_back(n); break;
      case metric_type::histogram:
        for (const char* s : {"_bucket", "_count", "_sum"}) out.push_back(n + s);
        break;
    }
  }
  return out;
}

std::string render_metrics(const exposition_input& in, exposition f,
                           const std::function<uint64_t()>& clock) {
  const uint64_t t0 = clock ? clock() : monotonic_ns();
  context c{in, {}};
  c.base.reserve(in.vms.size());
  for (const auto& vm : in.vms) c.base.push_back(label("domain", vm.domain) + "," + label("uuid", vm.uuid));
  std::string o;
  o.reserve(4096 + in.vms.size() * 57344);  // a busy VM: about 53 KiB of text
  writer w(o, f, in.detail);
  for (const auto& d : kFamilies) {
    if (d.power && !in.power) continue;
    w.family(d.meta);
    if (d.emit) {
      d.emit(w, d.meta, c);
    } else {
      const uint64_t t1 = clock ? clock() : monotonic_ns();
      w.begin(d.meta.name, "", {});
      w.value(static_cast<double>(t1 - t0) / 1e9);
    }
  }
  if (w.om()) o += "# EOF\n";
  return o;
}

uint64_t resident_memory_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "re");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? resident * static_cast<uint64_t>(page) : 0;
}

}  // namespace magnet::host
