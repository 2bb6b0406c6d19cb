// The filter-expression language shared by `magnet record --filter` and the
// synthesis engine's views: parse once, then match() records on the hot path
// and hand push() to the loader so the kernel drops what it can.
// The language is specified in docs/engine.md ("Predicate language").
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "magnet/result.h"

namespace magnet::filters {

// What the kernel can filter: each engaged set is an exact, necessary
// condition of the predicate (a record the predicate matches always passes
// every engaged set), so the loader may write them into the filter maps.
// A disengaged optional means "no constraint on that field"; an engaged but
// empty set means "nothing can match" (e.g. `cpu == 1 and cpu == 2`).
struct pushdown {
  std::optional<std::set<uint32_t>> cpu, tgid, vm;
  std::optional<std::set<uint64_t>> cgroup, abstract_id;
  std::optional<std::set<uint16_t>> events;  // event types

  bool empty() const {
    return !cpu && !tgid && !vm && !cgroup && !abstract_id && !events;
  }
  bool operator==(const pushdown&) const = default;
};

// Field identifiers of the language (stable order: used in error listings).
enum class pfield : uint8_t {
  event, cpu, tgid, tid, vm, cgroup, abstract_id, flow, size,
  sport, dport, port, proto, ifindex, saddr, daddr, addr,
};

class predicate {
 public:
  // Matches every record.
  predicate();

  // "" (or only blanks) = match all.  Errors name the problem and column.
  static magnet::result<predicate> parse(std::string_view expr);

  // record = magnet_hdr + payload, native byte order, hdr.len valid.
  // Evaluates the whole expression (pushdown is only an optimisation);
  // the single exception is `cgroup`, which records do not carry: it is
  // accepted only where it is pushed down and is assumed to hold here.
  bool match(const uint8_t* record) const;

  const pushdown& push() const { return push_; }
  const std::string& text() const { return text_; }

  // True for the match-all predicate.
  bool is_true() const { return nodes_.empty(); }
  // True if the expression mentions the field anywhere (engine uses it to
  // reject `vm` in per-VM view templates).
  bool references(pfield f) const;
  // True if the expression uses cgroup (records do not carry it, so such a
  // predicate is exact only behind the kernel filter).
  bool needs_kernel() const { return references(pfield::cgroup); }

  // "event, cpu, tgid (pid), ..." for messages.
  static std::string field_list();

  // Internal representation, public only so the parser (a free function in
  // the .cc) can build it; not part of the stable API.
  enum class op : uint8_t { eq, ne, lt, le, gt, ge, in, and_, or_, not_, always };
  struct value {
    uint64_t num = 0;                  // numbers, event types, proto, flow hash
    std::array<uint8_t, 16> addr{};    // saddr/daddr/addr
  };
  struct node {
    op o = op::always;
    pfield f = pfield::event;
    uint32_t a = 0, b = 0;  // children (and/or/not) or [a, b) in values_
  };

 private:
  friend struct parser;
  bool eval(uint32_t n, const uint8_t* rec) const;
  bool leaf(const node& nd, const uint8_t* rec) const;

  std::string text_;
  std::vector<node> nodes_;   // root is nodes_.back(); empty = true
  std::vector<value> values_;
  pushdown push_;
};

}  // namespace magnet::filters
