#include "magnet/export/ulm.h"

#include <arpa/inet.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "magnet/events.h"

namespace magnet::host {
namespace {

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// As the text and JSON formats decide it: IPv6 when the record says so.
bool record_is_v6(const uint8_t* pl, std::span<const field> fields) {
  for (const auto& f : fields) {
    if (f.name == "ip_version") return pl[f.off] == 6;
    if (f.name == "family") return load<uint16_t>(pl + f.off) == AF_INET6;
  }
  return false;
}

// Network records carry the flow id as abstract id; the others a socket,
// request or vCPU identity, which ULM calls plain ID.
bool is_network_event(uint16_t type) {
  return (type >= 0x0100 && type <= 0x01ff) || (type >= 0x0500 && type <= 0x05ff);
}

std::string upper(std::string_view s) {
  std::string o(s);
  for (auto& c : o)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return o;
}

}  // namespace

std::vector<field_value> payload_values(const uint8_t* rec) {
  const auto& h = hdr_of(rec);
  const auto* e = find_event(h.type);
  if (!e) return {};
  auto fields = payload_fields(e->payload_kind);
  const size_t plen = h.len - sizeof(magnet_hdr);
  while (!fields.empty() && fields.back().off + fields.back().size > plen)
    fields = fields.first(fields.size() - 1);
  const uint8_t* pl = rec + sizeof(magnet_hdr);
  const bool v6 = record_is_v6(pl, fields);
  std::vector<field_value> out;
  out.reserve(fields.size());
  for (const auto& f : fields) {
    const uint8_t* p = pl + f.off;
    field_value v{f.name, field_value::kind::u64};
    switch (f.type) {
      case ftype::u8: v.u = load<uint8_t>(p); break;
      case ftype::u16: v.u = load<uint16_t>(p); break;
      case ftype::u32: v.u = load<uint32_t>(p); break;
      case ftype::u64: v.u = load<uint64_t>(p); break;
      case ftype::s32:
        v.k = field_value::kind::s64;
        v.s = load<int32_t>(p);
        break;
      case ftype::s64:
        v.k = field_value::kind::s64;
        v.s = load<int64_t>(p);
        break;
      case ftype::hex64: {
        char buf[24];
        std::snprintf(buf, sizeof buf, "0x%" PRIx64, load<uint64_t>(p));
        v.k = field_value::kind::text;
        v.text = buf;
        break;
      }
      case ftype::addr: {
        char buf[INET6_ADDRSTRLEN] = {};
        inet_ntop(v6 ? AF_INET6 : AF_INET, p, buf, sizeof buf);
        v.k = field_value::kind::text;
        v.text = buf;
        break;
      }
      case ftype::str:
        v.k = field_value::kind::text;
        for (size_t i = 0; i < f.size && p[i]; ++i) {
          char c = static_cast<char>(p[i]);
          v.text += (c >= 0x20 && c < 0x7f) ? c : '?';
        }
        break;
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::string ulm_value(std::string_view v) {
  bool plain = !v.empty();
  for (char c : v)
    if (c == ' ' || c == '"' || c == '\\' || c == '=' || c == '\t') plain = false;
  if (plain) return std::string(v);
  std::string o = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + '"';
}

std::string ulm_line(const uint8_t* rec, const magnet_sysinfo& si) {
  const auto& h = hdr_of(rec);
  if (h.type == MAGNET_EV_SYSINFO || h.type == MAGNET_EV_EVENT_DESC) return {};

  // Wall time in whole microseconds, floored (also before 1970).
  const int64_t wall_ns = static_cast<int64_t>(h.ts_ns) + si.realtime_offset_ns;
  int64_t secs = wall_ns / 1000000000;
  int64_t ns = wall_ns % 1000000000;
  if (ns < 0) ns += 1000000000, --secs;
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char date[48];
  std::snprintf(date, sizeof date, "%04d%02d%02d%02d%02d%02d.%06" PRId64, tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ns / 1000);

  std::string host(si.hostname, strnlen(si.hostname, sizeof si.hostname));
  std::string s = "DATE=";
  s += date;
  s += " HOST=" + ulm_value(host);
  s += " PROG=magnet NL.EVNT=" + ulm_value(event_name(h.type));
  s += h.type == MAGNET_EV_LOST ? " LVL=Warning" : " LVL=Usage";
  s += " VM=" + std::to_string(h.vm_id);
  s += " TGID=" + std::to_string(h.tgid);
  s += " TID=" + std::to_string(h.tid);
  s += " CPU=" + std::to_string(h.cpu);
  if (h.abstract_id) {
    char id[24];
    std::snprintf(id, sizeof id, "0x%" PRIx64, static_cast<uint64_t>(h.abstract_id));
    s += is_network_event(h.type) ? " FLOW=" : " ID=";
    s += id;
  }
  s += " SIZE=" + std::to_string(h.size);
  if (h.flags) s += " FLAGS=" + std::to_string(h.flags);
  for (const auto& v : payload_values(rec)) {
    s += ' ';
    s += upper(v.name);
    s += '=';
    switch (v.k) {
      case field_value::kind::u64: s += std::to_string(v.u); break;
      case field_value::kind::s64: s += std::to_string(v.s); break;
      case field_value::kind::text: s += ulm_value(v.text); break;
    }
  }
  return s;
}

}  // namespace magnet::host
