#include "magnet/filters/engine.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include "magnet/events.h"
#include "magnet/filters/sketch.h"
#include "magnet/record.h"
#include "payload.h"
#include "tables.h"
#include "text.h"

namespace magnet::filters {

namespace {

dist_stats dist_of(const quantile_sketch& s) {
  static constexpr double kQs[] = {0.5, 0.9, 0.99};
  double q[3];
  s.quantiles(kQs, q);
  dist_stats d;
  d.count = s.count();
  d.sum = s.sum();
  d.mean = s.mean();
  d.min = s.min();
  d.max = s.max();
  d.p50 = q[0];
  d.p90 = q[1];
  d.p99 = q[2];
  d.relative_accuracy = s.relative_accuracy();
  return d;
}

// ------------------------------------------------------------ group-by ---

class group_tab {
 public:
  group_tab(group_key by, uint32_t max_groups) : by_(by), max_(max_groups), index_(max_groups) {}

  void add(const uint8_t* rec, const magnet_hdr& h) {
    uint64_t k1, k2 = 0;
    switch (by_) {
      case group_key::connection: k1 = h.abstract_id; break;
      case group_key::vm: k1 = h.vm_id; break;
      case group_key::cpu: k1 = h.cpu; break;
      case group_key::event: k1 = h.type; break;
      case group_key::process: k1 = h.tgid; break;
      case group_key::vcpu:
        if ((h.type == MAGNET_EV_KVM_EXIT || h.type == MAGNET_EV_KVM_ENTRY) &&
            h.len >= sizeof(magnet_hdr) + sizeof(magnet_kvm_entry)) {
          // vcpu_id is the first field of both kvm payloads
          k1 = kKvmBit | h.vm_id;
          k2 = load_at<uint32_t>(rec + sizeof(magnet_hdr));
        } else {
          k1 = h.tgid;
          k2 = h.tid;
        }
        break;
      default: k1 = 0;
    }
    uint32_t i = index_.find(k1, k2);
    if (i == index_map::npos) {
      if (rows_.size() >= max_) {
        ++other_events_;
        if (h.size > 0) other_bytes_ += static_cast<uint64_t>(h.size);
        return;
      }
      if (rows_.size() == rows_.capacity())
        rows_.reserve(std::min<size_t>(std::max<size_t>(rows_.size() * 2, 16), max_));
      i = static_cast<uint32_t>(rows_.size());
      rows_.push_back({k1, k2, 0, 0, 0, h.ts_ns, h.ts_ns, h.size > 0 ? uint64_t(h.size) : 0});
      if (by_ == group_key::connection) {
        if (ends_.capacity() < rows_.capacity()) ends_.reserve(rows_.capacity());
        ends_.push_back(ends_of(rec));
      }
      index_.insert(k1, k2, i);
    }
    row& r = rows_[i];
    ++r.events;
    if (h.size >= 0) r.bytes += static_cast<uint64_t>(h.size);
    else ++r.errors;
    r.first_ts = std::min<uint64_t>(r.first_ts, h.ts_ns);
    r.last_ts = std::max<uint64_t>(r.last_ts, h.ts_ns);
  }

  // Fills t, reusing its rows and their label strings.
  void table(group_table& t) const {
    t.by = by_;
    t.other_events = other_events_;
    t.other_bytes = other_bytes_;
    // Sort compact (bytes, events, position) entries, then build each
    // output row once, in its place (no moves of rows with their labels).
    struct rank {
      uint64_t bytes, events;
      uint32_t i;
    };
    static thread_local std::vector<rank> order;
    order.clear();
    for (uint32_t i = 0; i < rows_.size(); ++i) order.push_back({rows_[i].bytes, rows_[i].events, i});
    const uint64_t key_mask = by_ == group_key::vcpu ? ~kKvmBit : ~uint64_t{0};
    std::sort(order.begin(), order.end(), [&](const rank& a, const rank& b) {
      if (a.bytes != b.bytes) return a.bytes > b.bytes;
      if (a.events != b.events) return a.events > b.events;
      const row& x = rows_[a.i];
      const row& y = rows_[b.i];
      return std::tuple(x.k1 & key_mask, x.k2, x.k1) < std::tuple(y.k1 & key_mask, y.k2, y.k1);
    });
    t.rows.resize(rows_.size());
    for (size_t i = 0; i < order.size(); ++i) {
      const row& r = rows_[order[i].i];
      group_row& g = t.rows[i];
      g.key = r.k1 & key_mask;
      g.key2 = r.k2;
      g.events = r.events;
      g.bytes = r.bytes;
      g.errors = r.errors;
      g.first_ts = r.first_ts;
      g.last_ts = r.last_ts;
      g.bandwidth_bps = r.last_ts > r.first_ts ? static_cast<double>(r.bytes - r.first_bytes) * 1e9 /
                                                   static_cast<double>(r.last_ts - r.first_ts)
                                             : 0;
      set_label(g.label, r);
    }
  }

  size_t memory_bytes() const {
    return sizeof *this + rows_.capacity() * sizeof(row) + ends_.capacity() * sizeof(endpoints) +
           index_.memory_bytes();
  }
  static size_t max_memory_bytes(group_key by, uint32_t max_groups) {
    return sizeof(group_tab) + max_groups * sizeof(row) +
           (by == group_key::connection ? max_groups * sizeof(endpoints) : 0) +
           index_map::max_memory_bytes(max_groups);
  }

 private:
  static constexpr uint64_t kKvmBit = 1ull << 63;
  struct row {
    uint64_t k1, k2;
    uint64_t events, bytes, errors;
    uint64_t first_ts, last_ts;
    uint64_t first_bytes;  // bytes of the first event: excluded from bandwidth
  };
  // A connection row's two ends, from its first record (the flow id is a
  // hash of them); version 0 when that record has no addresses.
  struct endpoints {
    uint8_t version, proto;
    uint16_t sport, dport;
    uint8_t saddr[16], daddr[16];
  };

  static endpoints ends_of(const uint8_t* rec) {
    endpoints e{};
    payload_view pv(rec);
    if (!pv.has_addrs()) return e;
    e.version = static_cast<uint8_t>(pv.ip_version());
    e.proto = static_cast<uint8_t>(pv.proto());
    e.sport = pv.sport();
    e.dport = pv.dport();
    std::memcpy(e.saddr, pv.saddr(), 16);
    std::memcpy(e.daddr, pv.daddr(), 16);
    return e;
  }

  // "10.0.0.1:5000 > 10.0.0.2:6000 udp", "[fd00::1]:5000 > [fd00::2]:6000 tcp"
  static char* put_end(char* p, int version, const uint8_t* addr, uint16_t port) {
    char a[INET6_ADDRSTRLEN] = "";
    ::inet_ntop(version == 6 ? AF_INET6 : AF_INET, addr, a, sizeof a);
    size_t n = std::strlen(a);
    if (version == 6) *p++ = '[';
    std::memcpy(p, a, n);
    p += n;
    if (version == 6) *p++ = ']';
    *p++ = ':';
    return text::put_u(p, port);
  }

  // "10.0.0.1:5000 > 10.0.0.2:6000 udp" (else "0x1f3a..."), "vm 3", "cpu 1",
  // "net.sock.recv", "tgid 100",
  // "vm 3 vcpu 1" (kvm records), "tid 100/101" (other records by vcpu).
  void set_label(std::string& out, const row& r) const {
    using text::put_hex64, text::put_lit, text::put_u;
    char b[128];
    char* p = b;
    switch (by_) {
      case group_key::connection: {
        const endpoints& e = ends_[static_cast<size_t>(&r - rows_.data())];
        if (!e.version) {
          p = put_hex64(p, r.k1);
          break;
        }
        p = put_lit(put_end(p, e.version, e.saddr, e.sport), " > ");
        p = put_end(p, e.version, e.daddr, e.dport);
        switch (e.proto) {
          case IPPROTO_TCP: p = put_lit(p, " tcp"); break;
          case IPPROTO_UDP: p = put_lit(p, " udp"); break;
          case IPPROTO_ICMP: p = put_lit(p, " icmp"); break;
          case IPPROTO_ICMPV6: p = put_lit(p, " icmpv6"); break;
          default: p = put_u(put_lit(p, " proto "), e.proto);
        }
        break;
      }
      case group_key::vm: p = put_u(put_lit(p, "vm "), r.k1); break;
      case group_key::cpu: p = put_u(put_lit(p, "cpu "), r.k1); break;
      case group_key::event: out = event_name(static_cast<uint16_t>(r.k1)); return;
      case group_key::process: p = put_u(put_lit(p, "tgid "), r.k1); break;
      case group_key::vcpu:
        if (r.k1 & kKvmBit) p = put_u(put_lit(put_u(put_lit(p, "vm "), r.k1 & ~kKvmBit), " vcpu "), r.k2);
        else p = put_u(put_lit(put_u(put_lit(p, "tid "), r.k1), "/"), r.k2);
        break;
    }
    out.assign(b, p);
  }

  group_key by_;
  uint32_t max_;
  std::vector<row> rows_;
  std::vector<endpoints> ends_;  // connection tables: one per row
  index_map index_;
  uint64_t other_events_ = 0, other_bytes_ = 0;
};

// --------------------------------------------------------- correlation ---

class correlator {
 public:
  correlator(const correlate_spec& s, const predicate* from, const predicate* to)
      : spec_(&s), from_(from), to_(to), max_(std::bit_ceil(std::max<uint32_t>(s.max_pending, 2))),
        index_(max_) {}

  void add(const uint8_t* rec, const magnet_hdr& h) {
    bool is_from = from_->match(rec), is_to = to_->match(rec);
    if (!is_from && !is_to) return;
    expire(h.ts_ns);
    uint64_t k2 = key2(rec, h);
    if (is_to) {
      uint32_t i = index_.find(h.abstract_id, k2);
      if (i == index_map::npos) {
        // A record that is both from and to (same predicate) opens instead.
        if (!is_from) ++unmatched_;
      } else {
        entry& e = ring_[i];
        if (h.ts_ns >= e.ts) {
          latency_.add(static_cast<double>(h.ts_ns - e.ts));
          ++matched_;
        } else {
          ++reordered_;
        }
        e.alive = false;
        index_.erase(h.abstract_id, k2);
        --live_;
        return;
      }
    }
    if (is_from) open(h.abstract_id, k2, h.ts_ns);
  }

  void stats(correlation_stats& c) const {
    c.name = spec_->name;
    c.matched = matched_;
    c.unmatched = unmatched_;
    c.expired = expired_;
    c.evicted = evicted_;
    c.reordered = reordered_;
    c.pending = live_;
    c.latency_ns = dist_of(latency_);
  }

  size_t memory_bytes() const {
    return sizeof *this + ring_.capacity() * sizeof(entry) + index_.memory_bytes() +
           latency_.memory_bytes() - sizeof latency_;
  }
  static size_t max_memory_bytes(const correlate_spec& s, double acc) {
    uint32_t m = std::bit_ceil(std::max<uint32_t>(s.max_pending, 2));
    return sizeof(correlator) + m * sizeof(entry) + index_map::max_memory_bytes(m) +
           quantile_sketch::max_memory_bytes(acc);
  }

 private:
  struct entry {
    uint64_t ts, k1, k2;
    bool alive;
  };

  uint64_t key2(const uint8_t* rec, const magnet_hdr& h) const {
    payload_view pv(rec);
    switch (spec_->key) {
      case corr_key::abstract_id: return 0;
      case corr_key::ip_id: return pv.is_pkt() ? pv.ip_id() : 0;
      case corr_key::tcp_seq: return pv.is_pkt() ? pv.tcp_seq() : 0;
      case corr_key::automatic:
        if (!pv.is_pkt()) return 0;
        // bit 32 keeps a TCP sequence number apart from an IP id
        return pv.proto() == IPPROTO_TCP || (h.flags & MAGNET_RF_TCP)
                   ? (1ull << 32) | pv.tcp_seq()
                   : pv.ip_id();
    }
    return 0;
  }

  void pop_head() {
    head_ = (head_ + 1) & (ring_.size() - 1);
    --n_;
  }

  void expire(uint64_t now) {
    while (n_) {
      entry& e = ring_[head_];
      if (!e.alive) {
        pop_head();
        continue;
      }
      if (now < e.ts || now - e.ts <= spec_->timeout_ns) break;
      index_.erase(e.k1, e.k2);
      --live_;
      ++expired_;
      pop_head();
    }
  }

  void open(uint64_t k1, uint64_t k2, uint64_t ts) {
    uint32_t old = index_.find(k1, k2);
    if (old != index_map::npos) {
      // A retransmission or a reused key: the newer record wins.
      ring_[old].alive = false;
      index_.erase(k1, k2);
      --live_;
    }
    if (n_ == ring_.size()) {
      if (ring_.size() < max_) {
        std::vector<entry> nr(std::min<size_t>(std::max<size_t>(ring_.size() * 2, 64), max_));
        for (size_t i = 0; i < n_; ++i) {
          nr[i] = ring_[(head_ + i) & (ring_.size() - 1)];
          if (nr[i].alive) index_.update(nr[i].k1, nr[i].k2, static_cast<uint32_t>(i));
        }
        ring_ = std::move(nr);
        head_ = 0;
      } else {
        // Full: the oldest slot goes (a tombstone, or an evicted entry).
        entry& e = ring_[head_];
        if (e.alive) {
          index_.erase(e.k1, e.k2);
          --live_;
          ++evicted_;
        }
        pop_head();
      }
    }
    size_t pos = (head_ + n_) & (ring_.size() - 1);
    ring_[pos] = {ts, k1, k2, true};
    ++n_;
    ++live_;
    index_.insert(k1, k2, static_cast<uint32_t>(pos));
  }

  const correlate_spec* spec_;
  const predicate* from_;
  const predicate* to_;
  uint32_t max_;
  std::vector<entry> ring_;  // arrival order, power-of-two size
  size_t head_ = 0, n_ = 0, live_ = 0;
  index_map index_;          // (abstract_id, key) -> ring position
  quantile_sketch latency_;
  uint64_t matched_ = 0, unmatched_ = 0, expired_ = 0, evicted_ = 0, reordered_ = 0;

 public:
  void set_accuracy(double a) { latency_ = quantile_sketch(a); }
};

}  // namespace

// ------------------------------------------------------------ view state ---

struct view_def;

// One instance of a view: a global view has one, a per-VM template one per VM.
struct instance {
  instance(const view_def& d, uint32_t vm);

  void consume(const uint8_t* rec, const magnet_hdr& h);
  // Fills s, reusing its vectors and strings (no allocation once s has
  // held this instance's snapshot and no row was added since).
  void snapshot(uint64_t now, view_snapshot& s) const;
  view_snapshot snapshot(uint64_t now) const {
    view_snapshot s;
    snapshot(now, s);
    return s;
  }
  size_t memory_bytes() const;

  const view_def* def;
  uint32_t vm;  // 0 for a global view
  uint64_t matched = 0, sampled = 0, sample_ctr = 0;
  // Behind the kernel's sampling, one counter per type of def->residual: a
  // counter shared by types kept at different rates keeps the wrong share
  // of one of them when they alternate.
  std::array<uint64_t, MAGNET_NPROBES> residual_ctr{};
  uint64_t violations = 0;
  uint64_t last_ts = 0;
  bool have_last = false;
  std::vector<count_window> cwins;
  std::vector<time_window> twins;
  std::vector<uint8_t> win_order;  // per spec window: 0 count / 1 time, in spec order
  quantile_sketch value;
  std::vector<group_tab> groups;
  std::vector<correlator> corrs;
};

struct view_def {
  view_spec spec;
  predicate pred;
  std::vector<predicate> corr_from, corr_to;
  std::vector<std::pair<uint16_t, uint32_t>> residual;  // kernel sampling already applied
  uint32_t every = 1;  // the rate the view sees, the kernel's sampling included (apply_residual)
  std::unique_ptr<instance> global;
  // per-VM instances: dense by vm id for small ids, map beyond
  std::vector<std::unique_ptr<instance>> by_vm;
  std::unordered_map<uint32_t, std::unique_ptr<instance>> by_vm_big;
  size_t n_instances = 0;

  static constexpr uint32_t kDense = 4096;

  instance* lookup(uint32_t vm) const {
    if (vm < by_vm.size()) return by_vm[vm].get();
    if (vm < kDense) return nullptr;
    auto it = by_vm_big.find(vm);
    return it == by_vm_big.end() ? nullptr : it->second.get();
  }
  bool admits_vm(uint32_t vm) const {
    return vm != 0 && (spec.vms.empty() ||
                       std::find(spec.vms.begin(), spec.vms.end(), vm) != spec.vms.end());
  }
  instance* create(uint32_t vm) {
    auto in = std::make_unique<instance>(*this, vm);
    instance* raw = in.get();
    if (vm < kDense) {
      if (vm >= by_vm.size()) by_vm.resize(vm + 1);
      by_vm[vm] = std::move(in);
    } else {
      by_vm_big[vm] = std::move(in);
    }
    ++n_instances;
    return raw;
  }
  void erase(uint32_t vm) {
    if (vm < by_vm.size() && by_vm[vm]) {
      by_vm[vm].reset();
      --n_instances;
    } else if (by_vm_big.erase(vm)) {
      --n_instances;
    }
  }
  template <class F>
  void each_instance(F&& f) const {
    if (global) f(*global);
    for (const auto& p : by_vm)
      if (p) f(*p);
    for (const auto& [vm, p] : by_vm_big) f(*p);
  }
};

instance::instance(const view_def& d, uint32_t vm_id) : def(&d), vm(vm_id), value(d.spec.accuracy) {
  for (const auto& w : d.spec.windows) {
    if (w.k == window_stats::kind::count) {
      cwins.emplace_back(w.events);
      win_order.push_back(0);
    } else {
      twins.emplace_back(w.ns, w.max_events);
      win_order.push_back(1);
    }
  }
  for (auto g : d.spec.group_by) groups.emplace_back(g, d.spec.max_groups);
  for (size_t i = 0; i < d.spec.correlate.size(); ++i) {
    corrs.emplace_back(d.spec.correlate[i], &d.corr_from[i], &d.corr_to[i]);
    corrs.back().set_accuracy(d.spec.accuracy);
  }
}

void instance::consume(const uint8_t* rec, const magnet_hdr& h) {
  // Defence in depth behind the routing: a per-VM instance never takes a
  // record of another VM, whatever the caller did.
  if (def->spec.per_vm && h.vm_id != vm) {
    ++violations;
    return;
  }
  ++matched;
  uint32_t every = def->every;
  uint64_t nth = 0;  // the record's place among those of its type (kernel-sampled types)
  for (size_t i = 0; i < def->residual.size() && i < residual_ctr.size(); ++i)
    if (def->residual[i].first == h.type) {
      every = def->residual[i].second;
      nth = ++residual_ctr[i];
      break;
    }
  if (every > 1 && (nth ? nth : ++sample_ctr) % every != 0) return;
  ++sampled;
  for (auto& w : cwins) w.add(h.ts_ns, h.size);
  for (auto& w : twins) w.add(h.ts_ns, h.size);
  switch (def->spec.value) {
    case value_kind::size:
      if (h.size >= 0) value.add(static_cast<double>(h.size));
      break;
    case value_kind::interarrival:
      if (have_last && h.ts_ns >= last_ts) value.add(static_cast<double>(h.ts_ns - last_ts));
      break;
    case value_kind::none: break;
  }
  if (h.ts_ns >= last_ts) last_ts = h.ts_ns;
  have_last = true;
  for (auto& g : groups) g.add(rec, h);
  for (auto& c : corrs) c.add(rec, h);
}

void instance::snapshot(uint64_t now, view_snapshot& s) const {
  s.view = def->spec.name;
  s.vm = vm;
  s.per_vm = def->spec.per_vm;
  s.ts_ns = now;
  s.matched = matched;
  s.sampled = sampled;
  s.sample_every = def->every;
  s.windows.clear();
  size_t ci = 0, ti = 0;
  for (uint8_t k : win_order) s.windows.push_back(k == 0 ? cwins[ci++].stats() : twins[ti++].stats(now));
  s.value_of = def->spec.value;
  s.value = def->spec.value != value_kind::none ? dist_of(value) : dist_stats{};
  s.groups.resize(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) groups[i].table(s.groups[i]);
  s.correlations.resize(corrs.size());
  for (size_t i = 0; i < corrs.size(); ++i) corrs[i].stats(s.correlations[i]);
  s.memory_bytes = memory_bytes();
}

size_t instance::memory_bytes() const {
  size_t m = sizeof *this + value.memory_bytes() - sizeof value;
  m += cwins.capacity() * sizeof(count_window) + twins.capacity() * sizeof(time_window);
  m += win_order.capacity();
  for (const auto& w : cwins) m += w.memory_bytes() - sizeof w;
  for (const auto& w : twins) m += w.memory_bytes() - sizeof w;
  m += groups.capacity() * sizeof(group_tab) + corrs.capacity() * sizeof(correlator);
  for (const auto& g : groups) m += g.memory_bytes() - sizeof g;
  for (const auto& c : corrs) m += c.memory_bytes() - sizeof c;
  return m;
}

size_t max_memory_bytes(const view_spec& s) {
  size_t m = sizeof(instance) + s.windows.size() * (1 + std::max(sizeof(count_window), sizeof(time_window)));
  for (const auto& w : s.windows)
    m += w.k == window_stats::kind::count ? count_window::max_memory_bytes(w.events) - sizeof(count_window)
                                          : time_window::max_memory_bytes(std::bit_ceil(std::max<uint32_t>(w.max_events, 2))) - sizeof(time_window);
  m += quantile_sketch::max_memory_bytes(s.accuracy) - sizeof(quantile_sketch);
  for (size_t i = 0; i < s.group_by.size(); ++i) m += group_tab::max_memory_bytes(s.group_by[i], s.max_groups);
  for (const auto& c : s.correlate) m += correlator::max_memory_bytes(c, s.accuracy);
  return m;
}

// --------------------------------------------------------------- engine ---

struct engine::impl {
  options opt;
  std::vector<std::unique_ptr<view_def>> views;
  engine_stats st;
  std::map<uint16_t, uint32_t> kernel_sampling;
  uint64_t removed_violations = 0;

  // The view's rate behind the kernel's: the least common multiple of its
  // own sample_every and the kernel's rate of each type it may take, so
  // that every record it keeps stands for as many events whatever its type
  // (with the pushdown's rates, a gcd of the views', that is its own); the
  // engine samples each type the remainder.  Beyond 32 bits, the largest
  // of them, and the remainder rounded down.
  void apply_residual(view_def& v) {
    v.residual.clear();
    const auto takes = v.pred.push().events;  // none: any type
    uint64_t every = std::max<uint32_t>(1, v.spec.sample_every), largest = every;
    for (const auto& [type, k] : kernel_sampling)
      if (k > 1 && (!takes || takes->count(type))) {
        every = std::lcm(every, uint64_t{k});
        largest = std::max<uint64_t>(largest, k);
      }
    if (every > UINT32_MAX) every = largest;
    v.every = static_cast<uint32_t>(every);
    for (const auto& [type, k] : kernel_sampling)
      if (k > 1 && (!takes || takes->count(type)))
        v.residual.emplace_back(type, std::max<uint32_t>(1, v.every / k));
  }

  void feed_one(const uint8_t* rec) {
    const magnet_hdr& h = hdr_of(rec);
    ++st.records;
    if (h.ts_ns > st.last_ts) st.last_ts = h.ts_ns;
    for (auto& vp : views) {
      view_def& v = *vp;
      if (!v.spec.per_vm) {
        if (v.pred.match(rec)) v.global->consume(rec, h);
        continue;
      }
      // Routing is the isolation boundary: the instance is chosen by the
      // record's own vm_id, so no predicate can widen a VM's scope.
      if (h.vm_id == 0) continue;
      instance* in = v.lookup(h.vm_id);
      if (!in) {
        if (!v.admits_vm(h.vm_id) || !v.pred.match(rec)) continue;
        if (v.n_instances >= opt.max_vms_per_view) {
          ++st.vm_overflow;
          continue;
        }
        in = v.create(h.vm_id);
      } else if (!v.pred.match(rec)) {
        continue;
      }
      in->consume(rec, h);
    }
  }

  view_def* find(std::string_view name) const {
    for (const auto& v : views)
      if (v->spec.name == name) return v.get();
    return nullptr;
  }
};

engine::engine() : engine(options{}) {}
engine::engine(options o) : p_(std::make_unique<impl>()) { p_->opt = o; }
engine::~engine() = default;
engine::engine(engine&&) noexcept = default;
engine& engine::operator=(engine&&) noexcept = default;

status engine::add_view(view_spec spec) {
  auto fail = [&](const std::string& m) { return error{"view '" + spec.name + "': " + m}; };
  if (spec.name.empty()) return error{"view: a view needs a name"};
  if (p_->find(spec.name)) return fail("a view with this name already exists");
  if (spec.sample_every == 0) return fail("sample_every must be >= 1");
  if (spec.accuracy < 0.001 || spec.accuracy > 0.1)
    return fail("accuracy " + std::to_string(spec.accuracy) + " outside [0.001, 0.1]");
  if (spec.max_groups == 0) return fail("max_groups must be >= 1");
  for (const auto& w : spec.windows) {
    if (w.k == window_stats::kind::count && w.events == 0)
      return fail("a count window needs events >= 1");
    if (w.k == window_stats::kind::time && (w.ns == 0 || w.max_events == 0))
      return fail("a time window needs a duration > 0 and max_events >= 1");
  }
  if (!spec.per_vm && !spec.vms.empty()) return fail("'vms' needs per_vm: true");
  auto pred = predicate::parse(spec.filter);
  if (!pred) return fail(pred.err().message);
  if (spec.per_vm && pred->references(pfield::vm))
    return fail(
        "a per-VM view must not filter on 'vm': each instance sees only its own VM's records "
        "(use 'vms: [...]' to choose the VMs)");
  auto d = std::make_unique<view_def>();
  for (auto& c : spec.correlate) {
    if (c.name.empty()) return fail("a correlation needs a name");
    if (c.max_pending == 0) return fail("correlation '" + c.name + "': max_pending must be >= 1");
    auto f = predicate::parse(c.from);
    if (!f) return fail("correlation '" + c.name + "' from: " + f.err().message);
    auto t = predicate::parse(c.to);
    if (!t) return fail("correlation '" + c.name + "' to: " + t.err().message);
    if (spec.per_vm && (f->references(pfield::vm) || t->references(pfield::vm)))
      return fail("correlation '" + c.name + "': a per-VM view must not filter on 'vm'");
    d->corr_from.push_back(std::move(f).value());
    d->corr_to.push_back(std::move(t).value());
  }
  size_t bound = max_memory_bytes(spec);
  if (bound > kViewMemoryBudget)
    return fail("worst-case memory " + std::to_string(bound) + " bytes exceeds the " +
                std::to_string(kViewMemoryBudget) +
                "-byte budget per view instance (reduce windows' events/max_events, "
                "max_groups, group_by or max_pending)");
  d->pred = std::move(pred).value();
  d->spec = std::move(spec);
  p_->apply_residual(*d);
  if (!d->spec.per_vm) d->global = std::make_unique<instance>(*d, 0);
  for (uint32_t vm : d->spec.vms)
    if (vm != 0 && !d->lookup(vm)) d->create(vm);
  p_->views.push_back(std::move(d));
  return {};
}

status engine::remove_view(std::string_view name) {
  auto& vs = p_->views;
  for (auto it = vs.begin(); it != vs.end(); ++it)
    if ((*it)->spec.name == name) {
      (*it)->each_instance([&](const instance& in) { p_->removed_violations += in.violations; });
      vs.erase(it);
      return {};
    }
  return error{"view '" + std::string(name) + "': no such view"};
}

std::vector<std::string> engine::view_names() const {
  std::vector<std::string> out;
  for (const auto& v : p_->views) out.push_back(v->spec.name);
  return out;
}

const view_spec* engine::find_view(std::string_view name) const {
  auto* v = p_->find(name);
  return v ? &v->spec : nullptr;
}

void engine::add_vm(uint32_t vm) {
  for (auto& v : p_->views)
    if (v->spec.per_vm && v->admits_vm(vm) && !v->lookup(vm) &&
        v->n_instances < p_->opt.max_vms_per_view)
      v->create(vm);
}

void engine::remove_vm(uint32_t vm) {
  for (auto& v : p_->views)
    if (v->spec.per_vm) {
      if (auto* in = v->lookup(vm)) p_->removed_violations += in->violations;
      v->erase(vm);
    }
}

void engine::feed_one(const uint8_t* record) { p_->feed_one(record); }

void engine::feed(std::span<const uint8_t> records) {
  size_t off = 0, n = records.size();
  const uint8_t* b = records.data();
  while (off + sizeof(magnet_hdr) <= n) {
    uint16_t len = load_at<uint16_t>(b + off + offsetof(magnet_hdr, len));
    if (len < sizeof(magnet_hdr) || len % MAGNET_RECORD_ALIGN || len > n - off) {
      ++p_->st.malformed;
      return;
    }
    p_->feed_one(b + off);
    off += len;
  }
  if (off != n) ++p_->st.malformed;
}

result<uint64_t> engine::run(event_source& src) {
  uint64_t before = p_->st.records;
  for (;;) {
    auto b = src.next_batch();
    if (!b) return b.err();
    if (b->empty()) break;
    feed(*b);
  }
  return p_->st.records - before;
}

std::vector<view_snapshot> engine::snapshot(uint64_t now) const {
  if (now == 0) now = p_->st.last_ts;
  std::vector<view_snapshot> out;
  for (const auto& v : p_->views) v->each_instance([&](const instance& in) { out.push_back(in.snapshot(now)); });
  return out;
}

std::vector<view_snapshot> engine::snapshot_vm(uint32_t vm, uint64_t now) const {
  std::vector<view_snapshot> out;
  snapshot_vm(vm, out, now);
  return out;
}

void engine::snapshot_vm(uint32_t vm, std::vector<view_snapshot>& out, uint64_t now) const {
  if (now == 0) now = p_->st.last_ts;
  size_t n = 0;
  if (vm != 0) {  // vm 0 is the host: it is not a VM
    for (const auto& v : p_->views) {
      if (!v->spec.per_vm) continue;  // global views span VMs: never delivered to one
      if (auto* in = v->lookup(vm)) {
        if (n == out.size()) out.emplace_back();
        in->snapshot(now, out[n++]);
      }
    }
  }
  out.resize(n);
}

result<view_snapshot> engine::snapshot(std::string_view view, uint32_t vm, uint64_t now) const {
  if (now == 0) now = p_->st.last_ts;
  auto* v = p_->find(view);
  if (!v) return error{"view '" + std::string(view) + "': no such view"};
  if (!v->spec.per_vm) {
    if (vm != 0) return error{"view '" + std::string(view) + "' is not per-VM"};
    return v->global->snapshot(now);
  }
  auto* in = v->lookup(vm);
  if (!in) return error{"view '" + std::string(view) + "': no instance for vm " + std::to_string(vm)};
  return in->snapshot(now);
}

namespace {

template <class T>
void union_into(std::optional<std::set<T>>& acc, const std::optional<std::set<T>>& v, bool& first) {
  if (first) {
    acc = v;
    return;
  }
  if (!acc || !v) {
    acc.reset();
    return;
  }
  acc->insert(v->begin(), v->end());
}

}  // namespace

kernel_pushdown engine::pushdown() const {
  kernel_pushdown k;
  bool first = true;
  for (const auto& vp : p_->views) {
    filters::pushdown p = vp->pred.push();
    if (vp->spec.per_vm && !vp->spec.vms.empty())
      p.vm = std::set<uint32_t>(vp->spec.vms.begin(), vp->spec.vms.end());
    union_into(k.filter.cpu, p.cpu, first);
    union_into(k.filter.tgid, p.tgid, first);
    union_into(k.filter.vm, p.vm, first);
    union_into(k.filter.cgroup, p.cgroup, first);
    union_into(k.filter.abstract_id, p.abstract_id, first);
    union_into(k.filter.events, p.events, first);
    first = false;
  }
  for (int slot = 0; slot < MAGNET_NPROBES; ++slot) {
    uint16_t t = probe_type(slot);
    uint32_t g = 0;
    for (const auto& vp : p_->views) {
      const auto& ev = vp->pred.push().events;
      if (ev && !ev->count(t)) continue;
      g = std::gcd(g, vp->spec.sample_every);
    }
    if (g > 1) k.sample_every[t] = g;
  }
  return k;
}

void engine::set_kernel_sampling(std::map<uint16_t, uint32_t> applied) {
  p_->kernel_sampling = std::move(applied);
  for (auto& v : p_->views) p_->apply_residual(*v);
}

const engine_stats& engine::stats() const { return p_->st; }

size_t engine::memory_bytes() const {
  size_t m = sizeof(impl);
  for (const auto& v : p_->views) {
    m += sizeof(view_def) + v->by_vm.capacity() * sizeof(void*);
    v->each_instance([&](const instance& in) { m += in.memory_bytes(); });
  }
  return m;
}

uint64_t engine::isolation_violations() const {
  uint64_t n = p_->removed_violations;
  for (const auto& v : p_->views) v->each_instance([&](const instance& in) { n += in.violations; });
  return n;
}

std::string_view name_of(group_key k) {
  switch (k) {
    case group_key::connection: return "connection";
    case group_key::vcpu: return "vcpu";
    case group_key::vm: return "vm";
    case group_key::cpu: return "cpu";
    case group_key::event: return "event";
    case group_key::process: return "process";
  }
  return "?";
}

std::string_view name_of(value_kind k) {
  switch (k) {
    case value_kind::none: return "none";
    case value_kind::size: return "size";
    case value_kind::interarrival: return "interarrival";
  }
  return "?";
}

std::string_view name_of(corr_key k) {
  switch (k) {
    case corr_key::automatic: return "auto";
    case corr_key::ip_id: return "ip_id";
    case corr_key::tcp_seq: return "tcp_seq";
    case corr_key::abstract_id: return "abstract_id";
  }
  return "?";
}

}  // namespace magnet::filters
