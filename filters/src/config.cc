#include "magnet/filters/config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

namespace magnet::filters {

namespace {

struct config_error {
  std::string msg;
};

std::string where(const YAML::Node& n) {
  auto m = n.Mark();
  if (m.line < 0) return "";
  return " at line " + std::to_string(m.line + 1) + ", column " + std::to_string(m.column + 1);
}

[[noreturn]] void fail(const YAML::Node& n, const std::string& m) { throw config_error{m + where(n)}; }

void check_keys(const YAML::Node& n, std::initializer_list<std::string_view> allowed,
                const std::string& what) {
  if (!n.IsMap()) fail(n, what + " must be a mapping");
  for (const auto& kv : n) {
    auto k = kv.first.as<std::string>();
    bool ok = false;
    for (auto a : allowed) ok |= a == k;
    if (!ok) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      fail(kv.first, "unknown key '" + k + "' in " + what + " (known: " + list + ")");
    }
  }
}

template <class T>
T get(const YAML::Node& n, const std::string& what) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail(n, "invalid value for " + what);
  }
}

uint64_t get_u64(const YAML::Node& n, const std::string& what, uint64_t max) {
  auto s = get<std::string>(n, what);
  if (s.empty() || s[0] == '-') fail(n, what + " must be a non-negative integer");
  uint64_t v = get<uint64_t>(n, what);
  if (v > max) fail(n, what + " " + std::to_string(v) + " is larger than " + std::to_string(max));
  return v;
}

window_spec parse_window(const YAML::Node& n, const std::string& what) {
  check_keys(n, {"events", "ms", "us", "ns", "max_events"}, what);
  window_spec w;
  int kinds = 0;
  if (n["events"]) {
    w.k = window_stats::kind::count;
    w.events = static_cast<uint32_t>(get_u64(n["events"], what + " events", 0xffffffffu));
    ++kinds;
  }
  for (auto [key, mul] : {std::pair{"ms", 1'000'000ull}, {"us", 1'000ull}, {"ns", 1ull}}) {
    if (!n[key]) continue;
    w.k = window_stats::kind::time;
    w.ns = get_u64(n[key], what + " " + key, UINT64_MAX / mul) * mul;
    ++kinds;
  }
  if (kinds != 1) fail(n, what + " needs exactly one of events, ms, us, ns");
  if (n["max_events"]) {
    if (w.k != window_stats::kind::time) fail(n["max_events"], "max_events applies to time windows only");
    w.max_events = static_cast<uint32_t>(get_u64(n["max_events"], what + " max_events", 0xffffffffu));
  }
  return w;
}

group_key parse_group(const YAML::Node& n) {
  auto s = get<std::string>(n, "group_by");
  for (auto k : {group_key::connection, group_key::vcpu, group_key::vm, group_key::cpu,
                 group_key::event, group_key::process})
    if (name_of(k) == s) return k;
  fail(n, "unknown group_by key '" + s + "' (known: connection, vcpu, vm, cpu, event, process)");
}

uint64_t duration_ns(const YAML::Node& parent, const std::string& what, uint64_t def) {
  uint64_t v = def;
  int n = 0;
  for (auto [key, mul] : {std::pair{"timeout_ms", 1'000'000ull}, {"timeout_us", 1'000ull}, {"timeout_ns", 1ull}})
    if (parent[key]) {
      v = get_u64(parent[key], what + " " + key, UINT64_MAX / mul) * mul;
      ++n;
    }
  if (n > 1) fail(parent, what + ": give one of timeout_ms, timeout_us, timeout_ns");
  return v;
}

correlate_spec parse_corr(const YAML::Node& n, const std::string& what) {
  check_keys(n, {"name", "from", "to", "key", "timeout_ms", "timeout_us", "timeout_ns", "max_pending"},
             what);
  correlate_spec c;
  if (!n["name"] || !n["from"] || !n["to"]) fail(n, what + " needs name, from and to");
  c.name = get<std::string>(n["name"], what + " name");
  c.from = get<std::string>(n["from"], what + " from");
  c.to = get<std::string>(n["to"], what + " to");
  if (n["key"]) {
    auto k = get<std::string>(n["key"], what + " key");
    bool ok = false;
    for (auto ck : {corr_key::automatic, corr_key::ip_id, corr_key::tcp_seq, corr_key::abstract_id})
      if (name_of(ck) == k) c.key = ck, ok = true;
    if (!ok) fail(n["key"], "unknown correlation key '" + k + "' (known: auto, ip_id, tcp_seq, abstract_id)");
  }
  c.timeout_ns = duration_ns(n, what, c.timeout_ns);
  if (n["max_pending"])
    c.max_pending = static_cast<uint32_t>(get_u64(n["max_pending"], what + " max_pending", 1u << 24));
  return c;
}

view_spec parse_view(const YAML::Node& n, size_t idx) {
  std::string what = "view #" + std::to_string(idx + 1);
  if (n.IsMap() && n["name"] && n["name"].IsScalar()) what = "view '" + n["name"].as<std::string>() + "'";
  check_keys(n, {"name", "filter", "per_vm", "vms", "sample_every", "windows", "value", "accuracy",
                 "group_by", "max_groups", "correlate"},
             what);
  view_spec v;
  if (!n["name"]) fail(n, what + " needs a name");
  v.name = get<std::string>(n["name"], what + " name");
  if (n["filter"]) v.filter = get<std::string>(n["filter"], what + " filter");
  if (n["per_vm"]) v.per_vm = get<bool>(n["per_vm"], what + " per_vm");
  if (auto vms = n["vms"]) {
    if (!vms.IsSequence()) fail(vms, what + " vms must be a list of VM ids");
    for (const auto& x : vms) v.vms.push_back(static_cast<uint32_t>(get_u64(x, what + " vms", 0xffffffffu)));
  }
  if (n["sample_every"])
    v.sample_every = static_cast<uint32_t>(get_u64(n["sample_every"], what + " sample_every", 0xffffffffu));
  if (auto ws = n["windows"]) {
    if (!ws.IsSequence()) fail(ws, what + " windows must be a list");
    for (const auto& w : ws) v.windows.push_back(parse_window(w, what + " window"));
  }
  if (n["value"]) {
    auto s = get<std::string>(n["value"], what + " value");
    bool ok = false;
    for (auto k : {value_kind::none, value_kind::size, value_kind::interarrival})
      if (name_of(k) == s) v.value = k, ok = true;
    if (!ok) fail(n["value"], "unknown value '" + s + "' (known: none, size, interarrival)");
  }
  if (n["accuracy"]) v.accuracy = get<double>(n["accuracy"], what + " accuracy");
  if (auto g = n["group_by"]) {
    if (g.IsScalar()) v.group_by.push_back(parse_group(g));
    else if (g.IsSequence())
      for (const auto& x : g) v.group_by.push_back(parse_group(x));
    else fail(g, what + " group_by must be a key or a list of keys");
  }
  if (n["max_groups"])
    v.max_groups = static_cast<uint32_t>(get_u64(n["max_groups"], what + " max_groups", 1u << 24));
  if (auto cs = n["correlate"]) {
    if (!cs.IsSequence()) fail(cs, what + " correlate must be a list");
    for (const auto& c : cs) v.correlate.push_back(parse_corr(c, what + " correlation"));
  }
  return v;
}

}  // namespace

result<std::vector<view_spec>> parse_views(std::string_view text) {
  try {
    YAML::Node root = YAML::Load(std::string(text));
    if (!root.IsMap() || !root["views"]) return error{"config: expected a top-level 'views:' list"};
    check_keys(root, {"views"}, "the document");
    auto vs = root["views"];
    if (!vs.IsSequence()) return error{"config: 'views' must be a list" + where(vs)};
    std::vector<view_spec> out;
    std::set<std::string> names;
    for (size_t i = 0; i < vs.size(); ++i) {
      out.push_back(parse_view(vs[i], i));
      if (!names.insert(out.back().name).second)
        fail(vs[i], "duplicate view name '" + out.back().name + "'");
    }
    return out;
  } catch (const config_error& e) {
    return error{"config: " + e.msg};
  } catch (const YAML::Exception& e) {
    return error{std::string("config: ") + e.what()};
  }
}

result<std::vector<view_spec>> load_views(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error::from_errno("config: " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_views(ss.str());
  if (!r) return error{path + ": " + r.err().message};
  return r;
}

status add_views(engine& e, const std::vector<view_spec>& views) {
  std::vector<std::string> added;
  for (const auto& v : views) {
    auto st = e.add_view(v);
    if (!st) {
      for (const auto& n : added) (void)e.remove_view(n);
      return st;
    }
    added.push_back(v.name);
  }
  return {};
}

}  // namespace magnet::filters
