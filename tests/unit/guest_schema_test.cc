// What a guest may see of host records (lib/magnet/guest_schema.h), as a
// property over the whole event catalogue: records whose every byte is a
// sentinel go through the guest path, and every byte that comes out is
// either one the specification below keeps (equal to the input) or zero.
//
// The specification here is written from docs/guest.md ("What a guest may
// see"), apart from the library's table: a row that keeps too much or too
// little fails, and so does an event type added to MAGNET_EVENTS without a
// row in the table and an entry here.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "magnet/event.h"
#include "magnet/events.h"
#include "magnet/guest_schema.h"
#include "magnet/record.h"
#include "magnet/view_codec.h"

namespace magnet::view {
namespace {

// --------------------------------------------------------------- SipHash ---

// The SipHash paper's vectors (Aumasson and Bernstein, "SipHash: a fast
// short-input PRF", appendix A, and the reference implementation's
// vectors.h): key 00 01 .. 0f, message of i bytes 00 01 .. (i-1).
constexpr uint64_t kSipVectors[64] = {
    0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d,
    0xcf2794e0277187b7, 0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137,
    0x93f5f5799a932462, 0x9e0082df0ba9e4b0, 0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7,
    0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee, 0xa129ca6149be45e5,
    0x3f2acc7f57c29bdb, 0x699ae9f52cbe4794, 0x4bc1b3f0968dd39c, 0xbb6dc91da77961bd,
    0xbed65cf21aa2ee98, 0xd0f2cbb02e3b67c7, 0x93536795e3a33e88, 0xa80c038ccd5ccec8,
    0xb8ad50c6f649af94, 0xbce192de8a85b8ea, 0x17d835b85bbb15f3, 0x2f2e6163076bcfad,
    0xde4daaaca71dc9a5, 0xa6a2506687956571, 0xad87a3535c49ef28, 0x32d892fad841c342,
    0x7127512f72f27cce, 0xa7f32346f95978e3, 0x12e0b01abb051238, 0x15e034d40fa197ae,
    0x314dffbe0815a3b4, 0x027990f029623981, 0xcadcd4e59ef40c4d, 0x9abfd8766a33735c,
    0x0e3ea96b5304a7d0, 0xad0c42d6fc585992, 0x187306c89bc215a9, 0xd4a60abcf3792b95,
    0xf935451de4f21df2, 0xa9538f0419755787, 0xdb9acddff56ca510, 0xd06c98cd5c0975eb,
    0xe612a3cb9ecba951, 0xc766e62cfcadaf96, 0xee64435a9752fe72, 0xa192d576b245165a,
    0x0a8787bf8ecb74b2, 0x81b3e73d20b49b6f, 0x7fa8220ba3b2ecea, 0x245731c13ca42499,
    0xb78dbfaf3a8d83bd, 0xea1ad565322a1a0b, 0x60e61c23a3795013, 0x6606d7e446282b93,
    0x6ca4ecb15c5f91e1, 0x9f626da15c9625f3, 0xe51b38608ef25f57, 0x958a324ceb064572,
};

TEST(SipHash, ReferenceVectors) {
  const siphash_key k{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  uint8_t msg[64];
  for (int i = 0; i < 64; ++i) msg[i] = static_cast<uint8_t>(i);
  for (size_t n = 0; n < 64; ++n)
    EXPECT_EQ(siphash24(k, msg, n), kSipVectors[n]) << "message of " << n << " bytes";
  EXPECT_EQ(siphash24(k, msg, 15), 0xa129ca6149be45e5ull);
}

TEST(SipHash, RandomKeysDiffer) {
  auto a = random_siphash_key(), b = random_siphash_key();
  ASSERT_TRUE(a) << a.err().message;
  ASSERT_TRUE(b) << b.err().message;
  EXPECT_NE(*a, *b);
  EXPECT_NE(a->k0, 0u);
}

// ------------------------------------------------------ the specification ---

struct fld {
  uint16_t off, size;
  const char* name;
};
#define FLD(s, f) \
  fld { static_cast<uint16_t>(offsetof(s, f)), static_cast<uint16_t>(sizeof(s::f)), #f }

struct spec {
  bool delivered = false;
  guest_id id = guest_id::zero;
  std::vector<fld> keep;  // payload fields kept (sched.*: when every side is a vCPU)
};

std::vector<fld> pkt_keep() {
  return {FLD(magnet_pkt, skb_len),  FLD(magnet_pkt, tcp_seq),    FLD(magnet_pkt, l3proto),
          FLD(magnet_pkt, ip_id),    FLD(magnet_pkt, frag_off),   FLD(magnet_pkt, tot_len),
          FLD(magnet_pkt, sport),    FLD(magnet_pkt, dport),      FLD(magnet_pkt, ip_version),
          FLD(magnet_pkt, protocol), FLD(magnet_pkt, tos),        FLD(magnet_pkt, ttl),
          FLD(magnet_pkt, tcp_flags), FLD(magnet_pkt, saddr),     FLD(magnet_pkt, daddr)};
}

// docs/guest.md, "What a guest may see".  Types not listed are refused.
const std::map<uint16_t, spec>& specification() {
  static const std::map<uint16_t, spec> s = [] {
    using gi = guest_id;
    std::map<uint16_t, spec> m;
    for (uint16_t t : {MAGNET_EV_SYSINFO, MAGNET_EV_EVENT_DESC, MAGNET_EV_NET_SOCK_SEND,
                       MAGNET_EV_NET_SOCK_RECV, MAGNET_EV_NET_L4_SEND, MAGNET_EV_NET_L4_RECV,
                       MAGNET_EV_NET_IP_SEND, MAGNET_EV_NET_IP_RECV, MAGNET_EV_NET_TCP_STATE,
                       MAGNET_EV_PROC_FORK, MAGNET_EV_PROC_EXIT, MAGNET_EV_APP_ADD,
                       MAGNET_EV_NET_PKT_XMIT, MAGNET_EV_NET_PKT_RECV})
      m[t] = {false, gi::zero, {}};
    m[MAGNET_EV_LOST] = {true, gi::zero,
                         {FLD(magnet_lost, count), FLD(magnet_lost, first_ts_ns),
                          FLD(magnet_lost, last_ts_ns), FLD(magnet_lost, probe_type),
                          FLD(magnet_lost, reason)}};
    m[MAGNET_EV_NET_DEV_XMIT] = m[MAGNET_EV_NET_DEV_RECV] = {true, gi::flow, pkt_keep()};
    m[MAGNET_EV_NET_DROP] = {true, gi::rekey,
                             {FLD(magnet_net_drop, reason), FLD(magnet_net_drop, protocol)}};
    m[MAGNET_EV_SCHED_SWITCH] = {
        true, gi::zero,
        {FLD(magnet_sched_switch, prev_state), FLD(magnet_sched_switch, prev_prio),
         FLD(magnet_sched_switch, next_prio), FLD(magnet_sched_switch, prev_comm),
         FLD(magnet_sched_switch, next_comm)}};
    m[MAGNET_EV_SCHED_WAKEUP] = {true, gi::zero,
                                 {FLD(magnet_sched_wakeup, prio), FLD(magnet_sched_wakeup, comm)}};
    m[MAGNET_EV_BLK_ISSUE] = m[MAGNET_EV_BLK_COMPLETE] = {
        true, gi::rekey,
        {FLD(magnet_blk, nr_bytes), FLD(magnet_blk, latency_ns), FLD(magnet_blk, rwbs),
         FLD(magnet_blk, error)}};
    m[MAGNET_EV_KVM_EXIT] = {true, gi::rekey,
                             {FLD(magnet_kvm_exit, vcpu_id), FLD(magnet_kvm_exit, exit_reason),
                              FLD(magnet_kvm_exit, isa), FLD(magnet_kvm_exit, guest_rip),
                              FLD(magnet_kvm_exit, info1), FLD(magnet_kvm_exit, info2)}};
    m[MAGNET_EV_KVM_ENTRY] = {true, gi::rekey,
                              {FLD(magnet_kvm_entry, vcpu_id), FLD(magnet_kvm_entry, guest_rip),
                               FLD(magnet_kvm_entry, exit_ns), FLD(magnet_kvm_entry, exit_reason),
                               FLD(magnet_kvm_entry, isa), FLD(magnet_kvm_entry, flags)}};
    m[MAGNET_EV_KVM_USERSPACE_EXIT] = {true, gi::rekey,
                                       {FLD(magnet_kvm_userspace_exit, vcpu_id),
                                        FLD(magnet_kvm_userspace_exit, reason),
                                        FLD(magnet_kvm_userspace_exit, error)}};
    m[MAGNET_EV_KVM_WAKEUP] = {true, gi::rekey,
                               {FLD(magnet_kvm_wakeup, halt_ns), FLD(magnet_kvm_wakeup, vcpu_id),
                                FLD(magnet_kvm_wakeup, waited), FLD(magnet_kvm_wakeup, valid)}};
    m[MAGNET_EV_KVM_HALT_POLL] = {
        true, gi::rekey,
        {FLD(magnet_kvm_halt_poll, vcpu_id), FLD(magnet_kvm_halt_poll, new_ns),
         FLD(magnet_kvm_halt_poll, old_ns), FLD(magnet_kvm_halt_poll, grow)}};
    m[MAGNET_EV_VMNET_QUEUE_TX] = m[MAGNET_EV_VMNET_QUEUE_RX] = {
        true, gi::flow, {FLD(magnet_vmnet_queue, delay_ns), FLD(magnet_vmnet_queue, ip_id)}};
    m[MAGNET_EV_VMNET_VHOST_TX] = m[MAGNET_EV_VMNET_VHOST_RX] = {
        true, gi::rekey, {FLD(magnet_vmnet_vhost, duration_ns)}};
    return m;
  }();
  return s;
}

// ----------------------------------------------------------------- helpers ---

constexpr size_t kHdr = sizeof(magnet_hdr);
constexpr size_t kTail = 24;  // bytes of a newer minor's payload, beyond the known one

size_t aligned(size_t n) { return (n + MAGNET_RECORD_ALIGN - 1) / MAGNET_RECORD_ALIGN * MAGNET_RECORD_ALIGN; }

// Header and payload all @sentinel, @tail more payload bytes of 0xC3.
std::vector<uint8_t> sentinel_record(uint16_t type, uint8_t sentinel, size_t tail = kTail) {
  const size_t payload = payload_size(find_event(type)->payload_kind);
  std::vector<uint8_t> r(kHdr + payload + tail, sentinel);
  std::fill(r.begin() + static_cast<long>(kHdr + payload), r.end(), 0xC3);
  const uint16_t len = static_cast<uint16_t>(r.size());
  std::memcpy(r.data() + offsetof(magnet_hdr, type), &type, 2);
  std::memcpy(r.data() + offsetof(magnet_hdr, len), &len, 2);
  return r;
}

magnet_hdr header_of(const std::vector<uint8_t>& r) {
  magnet_hdr h;
  std::memcpy(&h, r.data(), sizeof h);
  return h;
}

template <class T>
void put(std::vector<uint8_t>& r, size_t payload_off, T v) {
  std::memcpy(r.data() + kHdr + payload_off, &v, sizeof v);
}

// The field name at a payload offset, for messages.
std::string field_at(uint16_t kind, size_t off) {
  for (const auto& f : payload_fields(kind))
    if (off >= f.off && off < f.off + f.size) return std::string(f.name);
  return "byte " + std::to_string(off) + " (no named field)";
}

// Expected payload: @keep's bytes from @in, every other byte zero.
void expect_payload(const std::vector<uint8_t>& in, const std::vector<uint8_t>& out, uint16_t type,
                    const std::vector<fld>& keep) {
  const uint16_t kind = find_event(type)->payload_kind;
  const size_t payload = payload_size(kind);
  ASSERT_EQ(out.size(), kHdr + aligned(payload)) << "the tail beyond the known payload is cut";
  std::vector<bool> kept(payload, false);
  for (const auto& f : keep)
    for (size_t i = f.off; i < f.off + f.size; ++i) kept[i] = true;
  for (size_t i = 0; i < aligned(payload); ++i) {
    const uint8_t want = i < payload && kept[i] ? in[kHdr + i] : 0;
    EXPECT_EQ(out[kHdr + i], want) << event_name(type) << ": payload " << field_at(kind, i)
                                   << (i < payload && kept[i] ? " is kept" : " must be zero");
  }
}

// The library's own table: every output byte is in a span it keeps (and
// equal to the input) or zero.
void expect_within_table(const std::vector<uint8_t>& in, const std::vector<uint8_t>& out,
                         const guest_row& row) {
  std::vector<bool> kept(out.size(), false);
  auto mark = [&](std::span<const guest_span> spans, size_t base) {
    for (const auto& s : spans)
      for (size_t i = base + s.off; i < base + s.off + s.size; ++i) kept[i] = true;
  };
  mark(guest_header_keep(), 0);
  mark(row.keep, kHdr);
  for (const auto& side : row.sides) mark(side.keep, kHdr);
  for (size_t i = 0; i < out.size(); ++i) {
    if (i >= offsetof(magnet_hdr, abstract_id) && i < offsetof(magnet_hdr, abstract_id) + 8) continue;
    if (i >= offsetof(magnet_hdr, len) && i < offsetof(magnet_hdr, len) + 2) continue;
    if (kept[i])
      EXPECT_EQ(out[i], in[i]) << event_name(row.type) << ": kept byte " << i;
    else
      EXPECT_EQ(out[i], 0) << event_name(row.type) << ": byte " << i << " is not in the table";
  }
}

struct session_keys {
  siphash_key a{0x0123456789abcdefull, 0xfedcba9876543210ull};
  siphash_key b{0x1111111111111111ull, 0x2222222222222222ull};
};

// --------------------------------------------------------------- the table ---

// A type added to MAGNET_EVENTS needs a row in the library's table (its
// build fails without one: a static_assert over the X-macro) and an entry in
// the specification above (this test fails without one).
TEST(GuestSchema, EveryCatalogueTypeHasARowAndASpecification) {
  std::set<uint16_t> rows;
  for (const auto& r : guest_schema()) {
    EXPECT_TRUE(rows.insert(r.type).second) << "two rows for " << event_name(r.type);
    EXPECT_NE(find_event(r.type), nullptr) << "a row for " << r.type << ", not in MAGNET_EVENTS";
  }
  size_t n = 0;
#define MAGNET_X_CHECK(sym, id, name, pl)                                                      \
  {                                                                                            \
    ++n;                                                                                       \
    const guest_row* r = guest_row_of(id);                                                     \
    EXPECT_NE(r, nullptr) << name " has no row in lib/src/guest_schema.cc";                    \
    EXPECT_EQ(specification().count(id), 1u)                                                   \
        << name " has no entry in this test's specification (docs/guest.md)";                  \
    if (r) {                                                                                   \
      EXPECT_EQ(r->payload_kind, (pl)) << name;                                                \
      EXPECT_EQ(r->payload, payload_size(pl)) << name " row knows another payload size";       \
      EXPECT_EQ(guest_safe_type(id), r->refused == nullptr) << name;                           \
    }                                                                                          \
  }
  MAGNET_EVENTS(MAGNET_X_CHECK)
#undef MAGNET_X_CHECK
  EXPECT_EQ(n, all_events().size());
  EXPECT_EQ(rows.size(), all_events().size());
  EXPECT_EQ(guest_row_of(0x7777), nullptr);
  EXPECT_FALSE(guest_safe_type(0x7777));
}

TEST(GuestSchema, SafeTypesAreExactlyTheSpecifiedOnes) {
  for (const auto& e : all_events()) {
    auto it = specification().find(e.type);
    ASSERT_NE(it, specification().end()) << e.name;
    EXPECT_EQ(guest_safe_type(e.type), it->second.delivered) << e.name;
    if (auto* r = guest_row_of(e.type); r && r->refused) {
      EXPECT_GT(std::strlen(r->refused), 10u) << e.name << ": a refusal says why";
    }
  }
}

// ------------------------------------------------------- the property test ---

// Every type, header and payload all sentinel, plus a tail: only what the
// specification keeps comes out; refused types produce nothing.
TEST(GuestSchema, OnlySpecifiedBytesSurviveForEveryEventType) {
  session_keys keys;
  const uint32_t sentinel_tid[2] = {0xA5A5A5A5u, 0x5A5A5A5Au};
  for (int run = 0; run < 2; ++run) {
    const uint8_t sentinel = run == 0 ? 0xA5 : 0x5A;
    const std::set<uint32_t> vcpus = {sentinel_tid[run]};
    const std::set<uint32_t> none;
    guest_context ctx{&vcpus, keys.a}, other_session{&vcpus, keys.b}, no_vcpu{&none, keys.a};
    for (const auto& e : all_events()) {
      SCOPED_TRACE(std::string(e.name) + " sentinel " + std::to_string(sentinel));
      const spec& sp = specification().at(e.type);
      const auto in = sentinel_record(e.type, sentinel);
      const magnet_hdr ih = header_of(in);
      std::vector<uint8_t> out = {1, 2, 3};  // what was there before stays
      const bool delivered = to_guest(in.data(), in.size(), ctx, out);
      ASSERT_EQ(delivered, sp.delivered);
      ASSERT_GE(out.size(), 3u);
      EXPECT_EQ(out[0], 1);
      EXPECT_EQ(out[2], 3);
      out.erase(out.begin(), out.begin() + 3);
      if (!sp.delivered) {
        EXPECT_TRUE(out.empty()) << "a refused type produces nothing";
        continue;
      }
      const magnet_hdr oh = header_of(out);
      EXPECT_EQ(oh.ts_ns, ih.ts_ns);
      EXPECT_EQ(oh.size, ih.size);
      EXPECT_EQ(oh.type, ih.type);
      EXPECT_EQ(oh.flags, ih.flags);
      EXPECT_EQ(oh.len, out.size());
      EXPECT_EQ(oh.len % MAGNET_RECORD_ALIGN, 0);
      EXPECT_EQ(oh.tgid, 0u);
      EXPECT_EQ(oh.tid, 0u);
      EXPECT_EQ(oh.cpu, 0u);
      EXPECT_EQ(oh.vm_id, 0u) << "nothing in a frame names a VM";
      switch (sp.id) {
        case guest_id::zero: EXPECT_EQ(oh.abstract_id, 0u); break;
        case guest_id::flow: EXPECT_EQ(oh.abstract_id, ih.abstract_id); break;
        case guest_id::rekey: {
          EXPECT_NE(oh.abstract_id, ih.abstract_id);
          EXPECT_NE(oh.abstract_id, 0u);
          std::vector<uint8_t> again, other;
          ASSERT_TRUE(to_guest(in.data(), in.size(), ctx, again));
          EXPECT_EQ(header_of(again).abstract_id, oh.abstract_id) << "equal ids stay equal";
          ASSERT_TRUE(to_guest(in.data(), in.size(), other_session, other));
          EXPECT_NE(header_of(other).abstract_id, oh.abstract_id) << "another session's key";
          break;
        }
      }
      expect_payload(in, out, e.type, sp.keep);
      expect_within_table(in, out, *guest_row_of(e.type));
      // A record shorter than the payload the table knows is not delivered.
      std::vector<uint8_t> short_rec(in.begin(), in.end() - static_cast<long>(kTail + 8));
      const uint16_t slen = static_cast<uint16_t>(short_rec.size());
      std::memcpy(short_rec.data() + offsetof(magnet_hdr, len), &slen, 2);
      std::vector<uint8_t> none_out;
      EXPECT_FALSE(to_guest(short_rec.data(), short_rec.size(), ctx, none_out));
      EXPECT_TRUE(none_out.empty());
      // sched.*: the sentinel tid is not a vCPU of the VM: nothing.
      if (e.type == MAGNET_EV_SCHED_SWITCH || e.type == MAGNET_EV_SCHED_WAKEUP) {
        EXPECT_FALSE(to_guest(in.data(), in.size(), no_vcpu, none_out));
        guest_context unknown{nullptr, keys.a};
        EXPECT_FALSE(to_guest(in.data(), in.size(), unknown, none_out));
        EXPECT_TRUE(none_out.empty());
      }
    }
  }
}

TEST(GuestSchema, RecordLengthBoundsThePayload) {
  // A header that says fewer bytes than the caller passes: the rest is the
  // next record's, not this one's payload.
  auto in = sentinel_record(MAGNET_EV_BLK_ISSUE, 0xA5);
  const uint16_t len = static_cast<uint16_t>(kHdr + 8);
  std::memcpy(in.data() + offsetof(magnet_hdr, len), &len, 2);
  std::vector<uint8_t> out;
  EXPECT_FALSE(to_guest(in.data(), in.size(), {nullptr, {}}, out));
  EXPECT_FALSE(to_guest(in.data(), kHdr - 1, {nullptr, {}}, out));
  EXPECT_TRUE(out.empty());
}

// ------------------------------------------------------------------ sched.* ---

class GuestSched : public ::testing::Test {
 protected:
  static constexpr uint32_t kVcpu0 = 4101, kVcpu1 = 4102, kHostTask = 977;  // e.g. libvirtd
  std::set<uint32_t> vcpus{kVcpu0, kVcpu1};
  guest_context ctx{&vcpus, {1, 2}};

  static std::vector<uint8_t> sw(uint32_t prev, uint32_t next) {
    auto r = sentinel_record(MAGNET_EV_SCHED_SWITCH, 0xA5);
    put(r, offsetof(magnet_sched_switch, prev_tid), prev);
    put(r, offsetof(magnet_sched_switch, next_tid), next);
    return r;
  }
  static std::vector<uint8_t> wake(uint32_t tid) {
    auto r = sentinel_record(MAGNET_EV_SCHED_WAKEUP, 0x5A);
    put(r, offsetof(magnet_sched_wakeup, tid), tid);
    return r;
  }
};

TEST_F(GuestSched, SwitchFromAVcpuKeepsItsSideAndAnonymisesTheOther) {
  auto in = sw(kVcpu0, kHostTask);
  std::vector<uint8_t> out;
  ASSERT_TRUE(to_guest(in.data(), in.size(), ctx, out));
  expect_payload(in, out, MAGNET_EV_SCHED_SWITCH,
                 {FLD(magnet_sched_switch, prev_state), FLD(magnet_sched_switch, prev_prio),
                  FLD(magnet_sched_switch, prev_comm)});
  EXPECT_EQ(header_of(out).abstract_id, 0u);
}

TEST_F(GuestSched, SwitchToAVcpuKeepsItsSideAndAnonymisesTheOther) {
  auto in = sw(kHostTask, kVcpu1);
  std::vector<uint8_t> out;
  ASSERT_TRUE(to_guest(in.data(), in.size(), ctx, out));
  expect_payload(in, out, MAGNET_EV_SCHED_SWITCH,
                 {FLD(magnet_sched_switch, next_prio), FLD(magnet_sched_switch, next_comm)});
}

TEST_F(GuestSched, SwitchBetweenTwoVcpusKeepsBothSidesButNotTheTids) {
  auto in = sw(kVcpu0, kVcpu1);
  std::vector<uint8_t> out;
  ASSERT_TRUE(to_guest(in.data(), in.size(), ctx, out));
  expect_payload(in, out, MAGNET_EV_SCHED_SWITCH, specification().at(MAGNET_EV_SCHED_SWITCH).keep);
}

TEST_F(GuestSched, SwitchOfNoVcpuOfTheVmIsNotDelivered) {
  std::vector<uint8_t> out;
  for (auto [p, n] : {std::pair{kHostTask, 978u}, std::pair{0u, kHostTask}, std::pair{kHostTask, 0u}}) {
    auto in = sw(p, n);
    EXPECT_FALSE(to_guest(in.data(), in.size(), ctx, out)) << p << " -> " << n;
  }
  // The idle task (tid 0) is never a vCPU, whatever the caller's set holds.
  std::set<uint32_t> with_zero{0};
  auto idle = sw(0, 0);
  EXPECT_FALSE(to_guest(idle.data(), idle.size(), {&with_zero, {}}, out));
  EXPECT_TRUE(out.empty());
}

TEST_F(GuestSched, WakeupOfAVcpuKeepsNameAndPriorityOnly) {
  auto in = wake(kVcpu1);
  std::vector<uint8_t> out;
  ASSERT_TRUE(to_guest(in.data(), in.size(), ctx, out));
  expect_payload(in, out, MAGNET_EV_SCHED_WAKEUP,
                 {FLD(magnet_sched_wakeup, prio), FLD(magnet_sched_wakeup, comm)});
  auto host = wake(kHostTask);
  std::vector<uint8_t> none;
  EXPECT_FALSE(to_guest(host.data(), host.size(), ctx, none));
  EXPECT_TRUE(none.empty());
}

// ------------------------------------------------------------ re-keyed ids ---

// The old ids were kernel pointers XOR one daemon-wide key: XOR-ing two of
// them gave the XOR of the pointers.  Re-keyed ids give nothing of it.
TEST(GuestSchema, RekeyedIdsDoNotCancelUnderXor) {
  const guest_context ctx{nullptr, {0x5eed, 0xf00d}};
  auto id_of = [&](uint64_t id) {
    auto r = sentinel_record(MAGNET_EV_BLK_ISSUE, 0);
    std::memcpy(r.data() + offsetof(magnet_hdr, abstract_id), &id, 8);
    std::vector<uint8_t> out;
    EXPECT_TRUE(to_guest(r.data(), r.size(), ctx, out));
    return header_of(out).abstract_id;
  };
  const uint64_t key = 0x9e3779b97f4a7c15ull;  // a daemon-wide key as before
  const uint64_t a = 0xffff888100001000ull ^ key, b = 0xffff888100002000ull ^ key;
  EXPECT_NE(id_of(a) ^ id_of(b), a ^ b);
  EXPECT_EQ(id_of(a), id_of(a));
  EXPECT_NE(id_of(a), id_of(b));
  EXPECT_EQ(id_of(0), 0u) << "no identity stays no identity";
}

// ----------------------------------------------------------- refusal text ---

TEST(GuestSchema, RefusalTextNamesEachUnsafeType) {
  const uint16_t one[] = {MAGNET_EV_NET_DEV_XMIT, MAGNET_EV_PROC_FORK};
  EXPECT_EQ(not_guest_safe(one), "event type proc.fork is not guest-safe");
  const uint16_t two[] = {MAGNET_EV_PROC_FORK, MAGNET_EV_KVM_EXIT, MAGNET_EV_NET_L4_SEND,
                          MAGNET_EV_PROC_FORK};
  EXPECT_EQ(not_guest_safe(two), "proc.fork, net.l4.send are not guest-safe");
  const uint16_t unknown[] = {0x7777};
  EXPECT_EQ(not_guest_safe(unknown), "event type 0x7777 (unknown) is not guest-safe");
  const uint16_t safe[] = {MAGNET_EV_NET_DEV_XMIT, MAGNET_EV_SCHED_SWITCH};
  EXPECT_EQ(not_guest_safe(safe), "");
  // At most MAGNET_VIEW_MAX_SUB_EVENTS names: the text stays within an error frame.
  std::vector<uint16_t> many;
  for (uint16_t t = 0x0f00; t < 0x0f00 + 32; ++t) many.push_back(t);
  const std::string text = not_guest_safe(many);
  EXPECT_LE(text.size(), 256u);
  EXPECT_NE(text.find("more are not guest-safe"), std::string::npos) << text;
}

// ------------------------------------------------------------- its stats ---

// The host stats a guest may receive, by name, written from docs/guest.md
// ("What a guest may see") apart from the library's table: a stat added to
// the table as safe without an entry here fails, and so does one dropped.
// The host's total power is not among them (its own share is).
const std::set<std::string_view>& guest_safe_stat_names() {
  static const std::set<std::string_view> s = {
      "tap.tx_bps", "tap.rx_bps", "tap.tx_pps", "tap.rx_pps",
      "drops.tap", "drops.qdisc", "drops.host",
      "queue.tx_mean_us", "queue.tx_p50_us", "queue.tx_p99_us", "queue.tx_pps",
      "queue.rx_mean_us", "queue.rx_p50_us", "queue.rx_p99_us", "queue.rx_pps",
      "link.capacity_bps", "link.use_bps", "link.available_bps", "link.available_err_bps",
      "link.queue_p50_us", "link.queue_p99_us", "link.drops",
      "allowance.tx_bps", "allowance.rx_bps",
      "vcpu.count", "vcpu.run", "vcpu.wait", "vcpu.halt", "vcpu.run_sum", "vcpu.wait_sum",
      "vcpu.halt_sum",
      "kvm.exits", "kvm.exit_time", "kvm.reason_exits", "kvm.reason_time", "kvm.reason_mean_us",
      "blk.bytes_per_s", "blk.iops", "blk.lat_mean_us", "blk.lat_p99_us",
      "lost.events", "lost.delivery", "host.marker",
      // Its own share of the host's power (docs/placement.md, "Into each guest").
      "power.watts", "energy.joules", "power.source", "power.model_err_watts"};
  return s;
}

TEST(GuestStats, SafeStatsAreExactlyTheSpecifiedOnes) {
  std::set<std::string_view> safe;
  for (const auto& s : all_stats()) {
    if (guest_safe_stat(s.id)) safe.insert(s.name);
    if (s.id >= 0x0800) {
      EXPECT_FALSE(guest_safe_stat(s.id)) << s.name << ": the agent's, not the host's";
    }
  }
  EXPECT_EQ(safe, guest_safe_stat_names());
  for (const auto& n : {"power.watts", "energy.joules", "power.source", "power.model_err_watts"}) {
    const auto* info = find_stat(std::string_view(n));
    ASSERT_NE(info, nullptr) << n << " is not in proto/magnet/view.h";
    EXPECT_TRUE(guest_safe_stat(info->id)) << n;
  }
  for (const auto& s : all_stats())
    EXPECT_EQ(s.name.find("host.power"), std::string_view::npos) << "no host total: " << s.name;
  EXPECT_FALSE(guest_safe_stat(0x04ff)) << "an id of no stat";
  EXPECT_FALSE(guest_safe_stat(0)) << "no stat";
}

// Every host stat of the catalogue has exactly one row, and each row says why.
TEST(GuestStats, EveryHostStatHasOneRowWithItsReason) {
  std::map<uint16_t, int> rows;
  for (const auto& r : guest_stat_schema()) {
    ++rows[r.id];
    const auto* info = find_stat(r.id);
    ASSERT_NE(info, nullptr) << "a row for " << r.id << ", not in MAGNET_VIEW_STATS";
    EXPECT_LT(r.id, 0x0800) << info->name << ": the agent's stats are not the host's to send";
    EXPECT_NE(r.safe == nullptr, r.refused == nullptr) << info->name << ": one reason";
    const char* why = r.safe ? r.safe : r.refused;
    EXPECT_GT(why ? std::strlen(why) : 0, 10u) << info->name << ": a row says why";
  }
  for (const auto& s : all_stats())
    if (s.id < 0x0800) {
      EXPECT_EQ(rows[s.id], 1) << s.name;
    }
}

}  // namespace
}  // namespace magnet::view
