#include "magnet/filters/predicate.h"

#include <arpa/inet.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

#include "magnet/events.h"
#include "magnet/event.h"
#include "magnet/flow.h"
#include "magnet/record.h"
#include "payload.h"

namespace magnet::filters {

namespace {

using op = predicate::op;

struct field_def {
  std::string_view name;
  pfield f;
};

// Aliases after the canonical names so field_list() can show them together.
constexpr field_def kFields[] = {
    {"event", pfield::event},   {"cpu", pfield::cpu},
    {"tgid", pfield::tgid},     {"pid", pfield::tgid},
    {"tid", pfield::tid},       {"vm", pfield::vm},
    {"cgroup", pfield::cgroup}, {"abstract_id", pfield::abstract_id},
    {"id", pfield::abstract_id}, {"flow", pfield::flow},
    {"size", pfield::size},     {"sport", pfield::sport},
    {"dport", pfield::dport},   {"port", pfield::port},
    {"proto", pfield::proto},   {"ifindex", pfield::ifindex},
    {"saddr", pfield::saddr},   {"daddr", pfield::daddr},
    {"addr", pfield::addr},
};

bool is_addr_field(pfield f) {
  return f == pfield::saddr || f == pfield::daddr || f == pfield::addr;
}

// Fields whose values are identities, not magnitudes: ordering is meaningless.
bool equality_only(pfield f) {
  return f == pfield::event || f == pfield::flow || f == pfield::cgroup || is_addr_field(f);
}

// Largest value a field can hold in a record (range-checks literals).
uint64_t field_max(pfield f) {
  switch (f) {
    case pfield::cpu: return 0xffff;
    case pfield::sport:
    case pfield::dport:
    case pfield::port: return 0xffff;
    case pfield::proto: return 0xffff;  // sock.protocol is 16 bits
    case pfield::tgid:
    case pfield::tid:
    case pfield::vm:
    case pfield::ifindex: return 0xffffffffu;
    case pfield::event: return 0xffff;
    default: return std::numeric_limits<uint64_t>::max();
  }
}

// Which pushdown set a field feeds, if any.
enum class pslot : uint8_t { none, cpu, tgid, vm, cgroup, abstract_id, events };

pslot push_slot(pfield f) {
  switch (f) {
    case pfield::cpu: return pslot::cpu;
    case pfield::tgid: return pslot::tgid;
    case pfield::vm: return pslot::vm;
    case pfield::cgroup: return pslot::cgroup;
    case pfield::abstract_id:
    case pfield::flow: return pslot::abstract_id;
    case pfield::event: return pslot::events;
    default: return pslot::none;
  }
}

bool parse_u64(std::string_view s, uint64_t& out) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc{} && p == s.data() + s.size();
}

bool parse_addr(std::string_view s, std::array<uint8_t, 16>& out) {
  std::string z(s);
  out.fill(0);
  if (inet_pton(AF_INET, z.c_str(), out.data()) == 1) return true;
  return inet_pton(AF_INET6, z.c_str(), out.data()) == 1;
}

bool parse_proto(std::string_view s, uint64_t& out) {
  if (s == "tcp") return out = IPPROTO_TCP, true;
  if (s == "udp") return out = IPPROTO_UDP, true;
  if (s == "icmp") return out = IPPROTO_ICMP, true;
  if (s == "icmpv6" || s == "icmp6") return out = IPPROTO_ICMPV6, true;
  if (s == "sctp") return out = IPPROTO_SCTP, true;
  return parse_u64(s, out) && out <= 0xff;
}

// "A:p" with A an IPv4 literal or "[IPv6]".
bool parse_endpoint(std::string_view s, std::array<uint8_t, 16>& a, uint16_t& port) {
  std::string_view host, p;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return false;
    host = s.substr(1, close - 1);
    p = s.substr(close + 2);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return false;
    host = s.substr(0, colon);
    p = s.substr(colon + 1);
  }
  uint64_t v;
  if (!parse_u64(p, v) || v > 0xffff) return false;
  port = static_cast<uint16_t>(v);
  std::string z(host);
  a.fill(0);
  if (!s.empty() && s.front() == '[') return inet_pton(AF_INET6, z.c_str(), a.data()) == 1;
  return inet_pton(AF_INET, z.c_str(), a.data()) == 1;
}

}  // namespace

// Recursive-descent parser over the expression text.  Tokens are read on
// demand because what a value looks like depends on its field (a flow
// literal contains '>' and ':', a cgroup path '/').
struct parser {
  std::string_view s;
  size_t pos = 0;
  predicate& p;
  // Every walk of the tree (this parser, match(), the pushdown) recurses as
  // deep as the tree: its height and the nesting of parentheses and 'not'
  // are bounded, so that no expression can overflow the stack.
  static constexpr int kMaxDepth = 256;
  int nesting = 0;             // '(' and 'not' open at pos
  std::vector<uint16_t> height;  // per node: height of its subtree

  static error fail(std::string msg) { return error{"filter: " + std::move(msg)}; }
  std::string col(size_t at) const { return " at column " + std::to_string(at + 1); }
  error too_deep(size_t at) const {
    return fail("expression nested too deeply" + col(at) + " (at most " +
                std::to_string(kMaxDepth) +
                " levels of parentheses, 'not', 'and' and 'or'; use 'in {...}' for a list of "
                "values)");
  }

  void skip_ws() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r'))
      ++pos;
  }
  static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  // Keyword at pos, as a whole word.
  bool at_word(std::string_view w) const {
    if (s.substr(pos, w.size()) != w) return false;
    return pos + w.size() >= s.size() || !ident_char(s[pos + w.size()]);
  }
  bool at(std::string_view t) const { return s.substr(pos, t.size()) == t; }

  // What is at pos, for messages.
  std::string found() const {
    if (pos >= s.size()) return "end of expression";
    size_t e = pos;
    while (e < s.size() && e - pos < 20 && s[e] != ' ') ++e;
    return "'" + std::string(s.substr(pos, std::max<size_t>(e - pos, 1))) + "'";
  }

  uint32_t add(predicate::node n) {
    uint16_t h = 1;
    if (n.o == op::and_ || n.o == op::or_) h = static_cast<uint16_t>(1 + std::max(height[n.a], height[n.b]));
    else if (n.o == op::not_) h = static_cast<uint16_t>(1 + height[n.a]);
    height.push_back(h);
    p.nodes_.push_back(n);
    return static_cast<uint32_t>(p.nodes_.size() - 1);
  }

  result<uint32_t> parse_or() {
    auto l = parse_and();
    if (!l) return l;
    uint32_t left = *l;
    for (;;) {
      skip_ws();
      const size_t op_pos = pos;
      if (at("||")) pos += 2;
      else if (at_word("or")) pos += 2;
      else return left;
      auto r = parse_and();
      if (!r) return r;
      left = add({op::or_, pfield::event, left, *r});
      if (height[left] > kMaxDepth) return too_deep(op_pos);
    }
  }

  result<uint32_t> parse_and() {
    auto l = parse_unary();
    if (!l) return l;
    uint32_t left = *l;
    for (;;) {
      skip_ws();
      const size_t op_pos = pos;
      if (at("&&")) pos += 2;
      else if (at_word("and")) pos += 3;
      else return left;
      auto r = parse_unary();
      if (!r) return r;
      left = add({op::and_, pfield::event, left, *r});
      if (height[left] > kMaxDepth) return too_deep(op_pos);
    }
  }

  result<uint32_t> parse_unary() {
    skip_ws();
    const bool bang = at("!") && !at("!="), word = !bang && at_word("not");
    if (bang || word || at("(")) {
      if (++nesting > kMaxDepth) return too_deep(pos);
      auto c = parse_nested(bang ? 1 : word ? 3 : 0);
      --nesting;
      return c;
    }
    return parse_comparison();
  }

  // 'not' (@len 1 or 3: the operator's length) or a parenthesis (0) at pos.
  result<uint32_t> parse_nested(size_t len) {
    if (len) {
      pos += len;
      auto c = parse_unary();
      if (!c) return c;
      return add({op::not_, pfield::event, *c, 0});
    }
    size_t open = pos++;
    auto c = parse_or();
    if (!c) return c;
    skip_ws();
    if (!at(")")) {
      if (pos >= s.size())
        return fail("unbalanced parenthesis: '(' at column " + std::to_string(open + 1) +
                    " is not closed");
      return fail("expected ')' or an operator" + col(pos) + ", found " + found());
    }
    ++pos;
    return c;
  }

  result<uint32_t> parse_comparison() {
    skip_ws();
    size_t start = pos;
    if (pos >= s.size())
      return fail("expected a condition" + col(pos) + ", found end of expression");
    if (at(")")) return fail("unbalanced parenthesis: ')'" + col(pos) + " has no matching '('");
    while (pos < s.size() && ident_char(s[pos])) ++pos;
    std::string_view name = s.substr(start, pos - start);
    if (name == "and" || name == "or" || name == "not" || name == "in")
      return fail("expected a field name" + col(start) + ", found keyword '" +
                  std::string(name) + "'");
    if (name.empty())
      return fail("expected a field name" + col(start) + ", found " + (pos = start, found()) +
                  " (fields: " + predicate::field_list() + ")");
    const field_def* fd = nullptr;
    for (const auto& d : kFields)
      if (d.name == name) fd = &d;
    if (!fd)
      return fail("unknown field '" + std::string(name) + "'" + col(start) +
                  " (fields: " + predicate::field_list() + ")");
    pfield f = fd->f;

    skip_ws();
    size_t op_at = pos;
    op o;
    std::string_view optext;
    if (at("==")) o = op::eq, optext = "==";
    else if (at("!=")) o = op::ne, optext = "!=";
    else if (at("<=")) o = op::le, optext = "<=";
    else if (at(">=")) o = op::ge, optext = ">=";
    else if (at("<")) o = op::lt, optext = "<";
    else if (at(">")) o = op::gt, optext = ">";
    else if (at_word("in")) o = op::in, optext = "in";
    else if (at("=")) return fail("'=' is not an operator" + col(pos) + "; use '=='");
    else
      return fail("expected an operator (==, !=, <, <=, >, >=, in) after '" +
                  std::string(name) + "'" + col(pos) + ", found " + found());
    pos += optext.size();
    if (equality_only(f) && o != op::eq && o != op::ne && o != op::in)
      return fail("operator '" + std::string(optext) + "'" + col(op_at) + " does not apply to " +
                  std::string(name) + " (use ==, != or in)");

    uint32_t first = static_cast<uint32_t>(p.values_.size());
    if (o == op::in) {
      skip_ws();
      if (!at("{"))
        return fail("expected '{' after 'in'" + col(pos) + ", found " + found());
      ++pos;
      for (;;) {
        skip_ws();
        if (at("}")) {
          if (p.values_.size() == first)
            return fail("empty set after 'in'" + col(pos));
          return fail("expected a value before '}'" + col(pos));
        }
        if (auto st = parse_value(f, name, "in"); !st) return st.err();
        skip_ws();
        if (at(",")) {
          ++pos;
          continue;
        }
        if (at("}")) {
          ++pos;
          break;
        }
        if (pos >= s.size()) return fail("unterminated set: expected '}'" + col(pos));
        return fail("expected ',' or '}' in set" + col(pos) + ", found " + found());
      }
    } else {
      if (auto st = parse_value(f, name, optext); !st) return st.err();
    }
    uint32_t last = static_cast<uint32_t>(p.values_.size());
    // Event prefixes expand to several types; == then means "any of them".
    if (f == pfield::event && o == op::eq) o = op::in;
    // Sorted sets allow binary search on large sets (numbers only).
    if (!is_addr_field(f)) {
      auto b = p.values_.begin() + first, e = p.values_.begin() + last;
      std::sort(b, e, [](const auto& x, const auto& y) { return x.num < y.num; });
      auto u = std::unique(b, e, [](const auto& x, const auto& y) { return x.num == y.num; });
      p.values_.erase(u, e);
      last = static_cast<uint32_t>(p.values_.size());
    }
    return add({o, f, first, last});
  }

  // Scans one literal: a quoted string or a run up to a delimiter.
  std::string_view raw_value() {
    skip_ws();
    if (pos < s.size() && s[pos] == '"') {
      auto close = s.find('"', pos + 1);
      if (close == std::string_view::npos) return {};
      auto v = s.substr(pos + 1, close - pos - 1);
      pos = close + 1;
      return v;
    }
    size_t b = pos;
    while (pos < s.size()) {
      char c = s[pos];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(' || c == ')' || c == '{' ||
          c == '}' || c == ',' || c == '&' || c == '|' || c == '!' || c == '=' || c == '<')
        break;
      ++pos;
    }
    return s.substr(b, pos - b);
  }

  // "invalid protocol 'ftp' for proto at column 10 (expected tcp, ...)"
  status bad_value(std::string_view v, std::string_view fname, size_t at_pos, const std::string& what,
                   const std::string& expected = {}) {
    return fail("invalid " + what + " '" + std::string(v) + "' for " + std::string(fname) + col(at_pos) +
                (expected.empty() ? std::string() : " (expected " + expected + ")"));
  }

  // event == NAME, a prefix (net.sock, net.sock.*) or an id: one value per
  // event it names.
  status parse_event(std::string_view v, std::string_view fname, size_t at_pos) {
    predicate::value val;
    uint64_t num;
    if (parse_u64(v, num)) {
      if (num == 0 || num > 0xffff) return bad_value(v, fname, at_pos, "event id");
      val.num = num;
      p.values_.push_back(val);
      return {};
    }
    std::string_view prefix = v;
    if (prefix.ends_with(".*")) prefix.remove_suffix(2);
    bool any = false;
    for (const auto& e : all_events())
      if (name_matches(e.name, prefix)) {
        val.num = e.type;
        p.values_.push_back(val);
        any = true;
      }
    if (any) return {};
    std::string known;
    for (const auto& e : all_events()) known += (known.empty() ? "" : ", ") + std::string(e.name);
    return fail("unknown event '" + std::string(v) + "'" + col(at_pos) +
                " (events: " + known + "; a prefix such as 'net.sock' selects a group)");
  }

  // A cgroup id, or an absolute path in a cgroup2 file system (its inode).
  status parse_cgroup(std::string_view v, std::string_view fname, size_t at_pos, uint64_t& out) {
    if (parse_u64(v, out)) return {};
    if (v.empty() || v.front() != '/')
      return bad_value(v, fname, at_pos, "cgroup", "a number or an absolute path under a cgroup2 mount");
    std::string path(v);
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0)
      return fail("cgroup path '" + path + "'" + col(at_pos) + ": " + std::strerror(errno));
    if (!S_ISDIR(st.st_mode))
      return fail("cgroup path '" + path + "'" + col(at_pos) + " is not a directory");
    struct statfs sf{};
    if (::statfs(path.c_str(), &sf) != 0 || sf.f_type != CGROUP2_SUPER_MAGIC)
      return fail("cgroup path '" + path + "'" + col(at_pos) + " is not in a cgroup2 file system");
    out = st.st_ino;  // the kernel's cgroup id is the kernfs inode number
    return {};
  }

  // A:p>B:q/proto, as its flow id.
  status parse_flow(std::string_view v, std::string_view fname, size_t at_pos, uint64_t& out) {
    auto gt = v.find('>');
    auto slash = v.rfind('/');
    if (gt == std::string_view::npos || slash == std::string_view::npos || slash < gt)
      return bad_value(v, fname, at_pos, "flow", "SRC:PORT>DST:PORT/PROTO, IPv6 in brackets");
    std::array<uint8_t, 16> sa, da;
    uint16_t sp, dp;
    uint64_t pr;
    if (!parse_endpoint(v.substr(0, gt), sa, sp))
      return bad_value(v, fname, at_pos, "flow source", "ADDR:PORT or [IPv6]:PORT");
    if (!parse_endpoint(v.substr(gt + 1, slash - gt - 1), da, dp))
      return bad_value(v, fname, at_pos, "flow destination", "ADDR:PORT or [IPv6]:PORT");
    if (!parse_proto(v.substr(slash + 1), pr))
      return bad_value(v, fname, at_pos, "flow protocol", "tcp, udp or a number");
    out = magnet_flow_id(sa.data(), da.data(), sp, dp, static_cast<uint8_t>(pr));
    return {};
  }

  // Signed: negative sizes are -errno.  Stored as the two's complement.
  status parse_size(std::string_view v, std::string_view fname, size_t at_pos, uint64_t& out) {
    std::string_view t = v;
    bool neg = !t.empty() && t.front() == '-';
    if (neg) t.remove_prefix(1);
    uint64_t mag;
    if (!parse_u64(t, mag) || mag > (neg ? 0x80000000ull : 0x7fffffffull))
      return bad_value(v, fname, at_pos, "size", "a 32-bit signed number");
    out = static_cast<uint64_t>(neg ? -static_cast<int64_t>(mag) : static_cast<int64_t>(mag));
    return {};
  }

  status parse_value(pfield f, std::string_view fname, std::string_view after) {
    skip_ws();
    size_t at_pos = pos;
    bool quoted = pos < s.size() && s[pos] == '"';
    std::string_view v = raw_value();
    if (v.empty() && !quoted) {
      return fail("expected a value after '" + std::string(after) + "'" + col(at_pos) +
                  (at_pos < s.size() ? ", found " + found() : std::string()));
    }
    if (f == pfield::event) return parse_event(v, fname, at_pos);
    predicate::value val;
    status st;
    switch (f) {
      case pfield::cgroup: st = parse_cgroup(v, fname, at_pos, val.num); break;
      case pfield::flow: st = parse_flow(v, fname, at_pos, val.num); break;
      case pfield::size: st = parse_size(v, fname, at_pos, val.num); break;
      case pfield::saddr:
      case pfield::daddr:
      case pfield::addr:
        if (!parse_addr(v, val.addr)) return bad_value(v, fname, at_pos, "address", "an IPv4 or IPv6 literal");
        break;
      case pfield::proto:
        if (!parse_proto(v, val.num))
          return bad_value(v, fname, at_pos, "protocol", "tcp, udp, icmp, icmpv6, sctp or 0..255");
        break;
      default:
        if (!parse_u64(v, val.num)) return bad_value(v, fname, at_pos, "number", "decimal or 0x hex");
        if (val.num > field_max(f))
          return fail("value " + std::string(v) + " out of range for " + std::string(fname) + col(at_pos) +
                      " (max " + std::to_string(field_max(f)) + ")");
        break;
    }
    if (!st) return st;
    p.values_.push_back(val);
    return {};
  }
};

namespace {

// If node n is `F == v`, `F in {...}` or an OR-tree of those on one pushable
// field slot, returns that slot and fills out with the union of the values.
pslot pushable(const predicate& pr, const std::vector<predicate::node>& nodes,
               const std::vector<predicate::value>& vals, uint32_t n, std::set<uint64_t>& out) {
  const auto& nd = nodes[n];
  if (nd.o == op::eq || nd.o == op::in) {
    pslot s = push_slot(nd.f);
    if (s == pslot::none) return s;
    for (uint32_t i = nd.a; i < nd.b; ++i) out.insert(vals[i].num);
    return s;
  }
  if (nd.o == op::or_) {
    pslot l = pushable(pr, nodes, vals, nd.a, out);
    if (l == pslot::none) return l;
    pslot r = pushable(pr, nodes, vals, nd.b, out);
    return r == l ? l : pslot::none;
  }
  return pslot::none;
}

template <class T>
void intersect_into(std::optional<std::set<T>>& dst, const std::set<uint64_t>& src) {
  std::set<T> conv;
  for (auto v : src) conv.insert(static_cast<T>(v));
  if (!dst) {
    dst = std::move(conv);
    return;
  }
  std::set<T> both;
  std::set_intersection(dst->begin(), dst->end(), conv.begin(), conv.end(),
                        std::inserter(both, both.end()));
  dst = std::move(both);
}

void conjuncts(const std::vector<predicate::node>& nodes, uint32_t n, std::vector<uint32_t>& out) {
  if (nodes[n].o == op::and_) {
    conjuncts(nodes, nodes[n].a, out);
    conjuncts(nodes, nodes[n].b, out);
  } else {
    out.push_back(n);
  }
}

size_t count_field(const std::vector<predicate::node>& nodes, uint32_t n, pfield f) {
  const auto& nd = nodes[n];
  switch (nd.o) {
    case op::and_:
    case op::or_: return count_field(nodes, nd.a, f) + count_field(nodes, nd.b, f);
    case op::not_: return count_field(nodes, nd.a, f);
    case op::always: return 0;
    default: return nd.f == f ? 1 : 0;
  }
}

}  // namespace

predicate::predicate() = default;

std::string predicate::field_list() {
  std::string s;
  for (size_t i = 0; i < std::size(kFields); ++i) {
    const auto& d = kFields[i];
    bool alias = i > 0 && kFields[i - 1].f == d.f;
    if (alias) {
      s += " (alias ";
      s += d.name;
      s += ')';
      continue;
    }
    if (!s.empty()) s += ", ";
    s += d.name;
  }
  return s;
}

result<predicate> predicate::parse(std::string_view expr) {
  predicate pr;
  pr.text_ = std::string(expr);
  parser ps{expr, 0, pr};
  ps.skip_ws();
  if (ps.pos >= expr.size()) return pr;  // match all

  auto root = ps.parse_or();
  if (!root) return root.err();
  ps.skip_ws();
  if (ps.pos < expr.size()) {
    if (ps.at(")"))
      return parser::fail("unbalanced parenthesis: ')'" + ps.col(ps.pos) +
                          " has no matching '('");
    return parser::fail("unexpected " + ps.found() + ps.col(ps.pos) +
                        " (expected 'and', 'or' or the end of the expression)");
  }
  // The evaluator walks from the root, which must be the last node.
  if (*root != pr.nodes_.size() - 1) pr.nodes_.push_back(pr.nodes_[*root]);

  std::vector<uint32_t> cs;
  conjuncts(pr.nodes_, static_cast<uint32_t>(pr.nodes_.size() - 1), cs);
  size_t pushed_cgroup = 0;
  for (uint32_t c : cs) {
    std::set<uint64_t> vals;
    switch (pushable(pr, pr.nodes_, pr.values_, c, vals)) {
      case pslot::none: continue;
      case pslot::cpu: intersect_into(pr.push_.cpu, vals); break;
      case pslot::tgid: intersect_into(pr.push_.tgid, vals); break;
      case pslot::vm: intersect_into(pr.push_.vm, vals); break;
      case pslot::cgroup:
        intersect_into(pr.push_.cgroup, vals);
        pushed_cgroup += count_field(pr.nodes_, c, pfield::cgroup);
        break;
      case pslot::abstract_id: intersect_into(pr.push_.abstract_id, vals); break;
      case pslot::events: intersect_into(pr.push_.events, vals); break;
    }
  }
  if (count_field(pr.nodes_, static_cast<uint32_t>(pr.nodes_.size() - 1), pfield::cgroup) !=
      pushed_cgroup)
    return parser::fail(
        "'cgroup' can only be used as a top-level 'and' condition of the form "
        "cgroup == X, cgroup in {...} or an 'or' of those: records do not carry the cgroup, "
        "only the kernel can filter on it");
  return pr;
}

bool predicate::references(pfield f) const {
  for (const auto& n : nodes_)
    if (n.o != op::and_ && n.o != op::or_ && n.o != op::not_ && n.o != op::always && n.f == f)
      return true;
  // flow is an abstract_id in disguise
  if (f == pfield::abstract_id) return references(pfield::flow);
  return false;
}

bool predicate::match(const uint8_t* record) const {
  if (nodes_.empty()) return true;
  return eval(static_cast<uint32_t>(nodes_.size() - 1), record);
}

bool predicate::eval(uint32_t n, const uint8_t* rec) const {
  const node& nd = nodes_[n];
  switch (nd.o) {
    case op::and_: return eval(nd.a, rec) && eval(nd.b, rec);
    case op::or_: return eval(nd.a, rec) || eval(nd.b, rec);
    case op::not_: return !eval(nd.a, rec);
    case op::always: return true;
    default: return leaf(nd, rec);
  }
}

namespace {

template <class T>
bool cmp(op o, T x, T v) {
  switch (o) {
    case op::eq: return x == v;
    case op::ne: return x != v;
    case op::lt: return x < v;
    case op::le: return x <= v;
    case op::gt: return x > v;
    case op::ge: return x >= v;
    default: return false;
  }
}

bool in_set(const predicate::value* b, const predicate::value* e, uint64_t x) {
  if (e - b <= 8) {
    for (; b != e; ++b)
      if (b->num == x) return true;
    return false;
  }
  auto it = std::lower_bound(b, e, x, [](const predicate::value& v, uint64_t k) { return v.num < k; });
  return it != e && it->num == x;
}

}  // namespace

bool predicate::leaf(const node& nd, const uint8_t* rec) const {
  const magnet_hdr& h = hdr_of(rec);
  const value* vb = values_.data() + nd.a;
  const value* ve = values_.data() + nd.b;

  uint64_t x[2];
  int nx = 0;
  switch (nd.f) {
    case pfield::event:
      // eq was rewritten to in at parse time (prefix expansion)
      return nd.o == op::in ? in_set(vb, ve, h.type) : !in_set(vb, ve, h.type);
    case pfield::cgroup: return true;  // enforced by the kernel, see header
    case pfield::cpu: x[nx++] = h.cpu; break;
    case pfield::tgid: x[nx++] = h.tgid; break;
    case pfield::tid: x[nx++] = h.tid; break;
    case pfield::vm: x[nx++] = h.vm_id; break;
    case pfield::abstract_id:
    case pfield::flow: x[nx++] = h.abstract_id; break;
    case pfield::size: {
      int64_t s = h.size;
      if (nd.o == op::in) return in_set(vb, ve, static_cast<uint64_t>(s));
      return cmp<int64_t>(nd.o, s, static_cast<int64_t>(vb->num));
    }
    case pfield::saddr:
    case pfield::daddr:
    case pfield::addr: {
      payload_view pv(rec);
      const uint8_t* a[2];
      int na = 0;
      if (!pv.has_addrs()) return false;
      if (nd.f != pfield::daddr) a[na++] = pv.saddr();
      if (nd.f != pfield::saddr) a[na++] = pv.daddr();
      bool any = false;
      for (int i = 0; i < na && !any; ++i)
        for (const value* v = vb; v != ve; ++v)
          if (std::memcmp(a[i], v->addr.data(), 16) == 0) {
            any = true;
            break;
          }
      return nd.o == op::ne ? !any : any;
    }
    default: {
      payload_view pv(rec);
      switch (nd.f) {
        case pfield::sport:
          if (!pv.has_ports()) return false;
          x[nx++] = pv.sport();
          break;
        case pfield::dport:
          if (!pv.has_ports()) return false;
          x[nx++] = pv.dport();
          break;
        case pfield::port:
          if (!pv.has_ports()) return false;
          x[nx++] = pv.sport();
          x[nx++] = pv.dport();
          break;
        case pfield::proto:
          if (!pv.has_proto()) return false;
          x[nx++] = pv.proto();
          break;
        case pfield::ifindex:
          if (!pv.has_ifindex()) return false;
          x[nx++] = pv.ifindex();
          break;
        default: return false;
      }
    }
  }
  // Two-valued fields (port): "!=" means neither equals; other operators
  // hold if either value satisfies them.
  if (nd.o == op::ne) {
    for (int i = 0; i < nx; ++i)
      if (x[i] == vb->num) return false;
    return true;
  }
  for (int i = 0; i < nx; ++i) {
    if (nd.o == op::in ? in_set(vb, ve, x[i]) : cmp<uint64_t>(nd.o, x[i], vb->num)) return true;
  }
  return false;
}

}  // namespace magnet::filters
