/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Flow identity: the abstract id of every network record.
 *
 * The same function runs in the BPF probes and in user space, so a datagram
 * carries the same abstract id at the socket, l4, ip and device layers, on
 * the sending and the receiving side, and a user can name a flow in a filter
 * (`flow == 10.0.0.1:5000>10.0.0.2:6000/udp`) without knowing the hash.
 *
 * Direction matters: the tuple is always the packet's (source -> destination),
 * so a socket's send records use (local -> remote) and its receive records
 * (remote -> local).  Addresses are in network order, IPv4 in the first four
 * bytes with the rest zero; ports in host order.
 */
#ifndef MAGNET_PROTO_FLOW_H
#define MAGNET_PROTO_FLOW_H

#ifndef __BPF__
#include <linux/types.h>
#endif

static inline __u64 magnet_mix64(__u64 x)
{
	/* splitmix64 finaliser: cheap, good avalanche, no tables */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* Native-order word load: BPF and user space on one machine agree, and it
 * is one instruction instead of eight byte loads in the probes. */
static inline __u64 magnet_load64(const __u8 *p)
{
	__u64 v;

	__builtin_memcpy(&v, p, sizeof(v));
	return v;
}

static inline __u64 magnet_flow_id(const __u8 *saddr, const __u8 *daddr,
				   __u16 sport, __u16 dport, __u8 protocol)
{
	__u64 h = 0x6d61676e6574ULL; /* "magnet" */

	h = magnet_mix64(h ^ magnet_load64(saddr));
	h = magnet_mix64(h ^ magnet_load64(saddr + 8));
	h = magnet_mix64(h ^ magnet_load64(daddr));
	h = magnet_mix64(h ^ magnet_load64(daddr + 8));
	h = magnet_mix64(h ^ ((__u64)sport << 24 | (__u64)dport << 8 | protocol));
	return h ? h : 1; /* 0 means "no identity" */
}

#endif /* MAGNET_PROTO_FLOW_H */
