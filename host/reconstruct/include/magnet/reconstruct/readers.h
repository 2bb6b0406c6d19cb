// Where segments come from: a pcap file (libpcap) or a magnet trace.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "magnet/reconstruct/segment.h"
#include "magnet/result.h"

namespace magnet::reconstruct {

// A capture's TCP segments.  A capture that ends inside a record (a
// truncated file) keeps what came before, with @partial and a @note saying
// why.
struct capture {
  std::vector<packet> packets;
  bool partial = false;
  std::string note;
  uint64_t skipped = 0;  // frames that are not TCP over IPv4/IPv6, fragments, too short
};

// A pcap file of link type Ethernet (with 802.1Q tags), Linux cooked (v1
// and v2) or raw IP; another link type is an error naming it.
result<capture> read_pcap(const std::string& path);
// The same from memory (the fuzz target, tests).
result<capture> read_pcap_memory(std::span<const uint8_t> data);

// A magnet trace's device-layer packet records (net.dev.xmit,
// net.dev.recv) of TCP.  They hold the IP length but not the TCP header's:
// the header length is taken per direction from the sequence numbers
// (tcp_header_estimate).  A trace with no such record is an error.
result<capture> read_trace(const std::string& path);

// The TCP header length (with IPv4 options) of one direction, from its
// segments' (seq, bytes after the IP header) in capture order: the most
// common difference between a segment's bytes and the advance of the next
// one's seq, among plausible ones (20..60); 32 (Linux's default, with
// timestamps) when no pair tells.
uint32_t tcp_header_estimate(const std::vector<std::pair<uint32_t, uint32_t>>& seq_and_l4_len);

}  // namespace magnet::reconstruct
