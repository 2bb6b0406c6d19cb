// pcap files through libpcap: the link layer, IPv4/IPv6 and TCP headers
// parsed here, bounds checked against the captured length.
#include <pcap/pcap.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "magnet/reconstruct/readers.h"

namespace magnet::reconstruct {

namespace {

constexpr uint16_t kEtherIPv4 = 0x0800, kEtherIPv6 = 0x86dd, kEtherVlan = 0x8100, kEtherQinQ = 0x88a8;

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// The TCP header at @l4 (@n bytes captured), @l4_len bytes by the IP length.
bool parse_tcp(const uint8_t* l4, size_t n, uint32_t l4_len, packet& p) {
  if (n < 20) return false;
  const uint32_t doff = (l4[12] >> 4) * 4u;
  if (doff < 20 || doff > l4_len) return false;
  p.src.port = be16(l4);
  p.dst.port = be16(l4 + 2);
  p.seq = be32(l4 + 4);
  p.flags = l4[13];
  p.payload = l4_len - doff;
  return true;
}

bool parse_ipv4(const uint8_t* ip, size_t n, packet& p) {
  if (n < 20 || ip[0] >> 4 != 4) return false;
  const uint32_t ihl = (ip[0] & 0xf) * 4u, tot = be16(ip + 2);
  if (ihl < 20 || n < ihl || ip[9] != 6 || tot < ihl) return false;
  if (be16(ip + 6) & 0x3fff) return false;  // a fragment (offset or more-fragments)
  std::memcpy(p.src.addr.data(), ip + 12, 4);
  std::memcpy(p.dst.addr.data(), ip + 16, 4);
  return parse_tcp(ip + ihl, n - ihl, tot - ihl, p);
}

bool parse_ipv6(const uint8_t* ip, size_t n, packet& p) {
  if (n < 40 || ip[0] >> 4 != 6) return false;
  uint32_t left = be16(ip + 4);  // payload length: what follows the fixed header
  uint8_t next = ip[6];
  size_t off = 40;
  // Hop-by-hop, routing and destination options come before TCP; a
  // fragment header means a fragment, which is skipped.
  while (next == 0 || next == 43 || next == 60) {
    if (n < off + 8) return false;
    const uint32_t len = (ip[off + 1] + 1u) * 8;
    if (len > left || n < off + len) return false;
    next = ip[off];
    off += len;
    left -= len;
  }
  if (next != 6) return false;
  p.src.v6 = p.dst.v6 = true;
  std::memcpy(p.src.addr.data(), ip + 8, 16);
  std::memcpy(p.dst.addr.data(), ip + 24, 16);
  return parse_tcp(ip + off, n - off, left, p);
}

bool parse_ip(uint16_t ethertype, const uint8_t* ip, size_t n, packet& p) {
  if (ethertype == kEtherIPv4) return parse_ipv4(ip, n, p);
  if (ethertype == kEtherIPv6) return parse_ipv6(ip, n, p);
  return false;
}

// One frame of link type @dlt.
bool parse_frame(int dlt, const uint8_t* f, size_t n, packet& p) {
  switch (dlt) {
    case DLT_EN10MB: {
      if (n < 14) return false;
      size_t off = 12;
      uint16_t type = be16(f + off);
      while ((type == kEtherVlan || type == kEtherQinQ) && n >= off + 6) {
        off += 4;
        type = be16(f + off);
      }
      return parse_ip(type, f + off + 2, n - off - 2, p);
    }
    case DLT_LINUX_SLL:
      return n >= 16 && parse_ip(be16(f + 14), f + 16, n - 16, p);
    case DLT_LINUX_SLL2:
      return n >= 20 && parse_ip(be16(f), f + 20, n - 20, p);
    case DLT_RAW:
      return n >= 1 && parse_ip(f[0] >> 4 == 6 ? kEtherIPv6 : kEtherIPv4, f, n, p);
  }
  return false;
}

using pcap_ptr = std::unique_ptr<pcap_t, void (*)(pcap_t*)>;

result<capture> read_all(pcap_t* pc, const std::string& name) {
  const int dlt = pcap_datalink(pc);
  if (dlt != DLT_EN10MB && dlt != DLT_LINUX_SLL && dlt != DLT_LINUX_SLL2 && dlt != DLT_RAW) {
    const char* n = pcap_datalink_val_to_name(dlt);
    return error{name + ": link type " + (n ? n : "unknown") + " (" + std::to_string(dlt) +
                 ") is not one magnet reconstruct reads (EN10MB, LINUX_SLL, LINUX_SLL2, RAW)"};
  }
  capture c;
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  for (;;) {
    const int rc = pcap_next_ex(pc, &h, &data);
    if (rc == PCAP_ERROR_BREAK) break;  // the end of the file
    if (rc == PCAP_ERROR) {
      c.partial = true;
      c.note = name + ": " + pcap_geterr(pc) + " (after " + std::to_string(c.packets.size()) + " TCP segments)";
      break;
    }
    packet p;
    // Opened with nanosecond precision: tv_usec holds nanoseconds.
    p.time_ns = static_cast<uint64_t>(h->ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(h->ts.tv_usec);
    if (parse_frame(dlt, data, h->caplen, p)) c.packets.push_back(p);
    else ++c.skipped;
  }
  return c;
}

}  // namespace

result<capture> read_pcap(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE] = "";
  pcap_ptr pc(pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err), pcap_close);
  if (!pc) return error{path + ": " + err};
  return read_all(pc.get(), path);
}

result<capture> read_pcap_memory(std::span<const uint8_t> data) {
  if (data.empty()) return error{"pcap: empty input"};
  std::FILE* f = fmemopen(const_cast<uint8_t*>(data.data()), data.size(), "rb");
  if (!f) return error::from_errno("pcap: fmemopen");
  char err[PCAP_ERRBUF_SIZE] = "";
  // pcap_close closes @f as well.
  pcap_ptr pc(pcap_fopen_offline_with_tstamp_precision(f, PCAP_TSTAMP_PRECISION_NANO, err), pcap_close);
  if (!pc) {
    std::fclose(f);
    return error{std::string("pcap: ") + err};
  }
  return read_all(pc.get(), "pcap");
}

}  // namespace magnet::reconstruct
