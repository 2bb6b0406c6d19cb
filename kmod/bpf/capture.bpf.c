/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * magnet capture probes: the network stack at four layers (MAGNeT's journey
 * of a packet), TCP state, scheduler, process lifetime, block I/O and KVM.
 *
 * Every probe has one body (mg_*_event) and one thin entry point per attach
 * method: tp_btf / raw_tp / tracepoint first, then fentry/fexit, then
 * kprobe/kretprobe, plus cgroup_skb and netfilter programs where those hooks
 * are the stable interface for a layer.  The loader (host/src/capture.cc)
 * picks the first method the running kernel supports for each probe and
 * disables autoload of the rest.
 *
 * Layer map (send path):  net.sock.send  sock:sock_send_length | fexit inet{,6}_sendmsg
 *                         net.l4.send    netfilter LOCAL_OUT   | fentry/kprobe ip_local_out
 *                         net.ip.send    cgroup_skb/egress     (ip_finish_output)
 *                         net.dev.xmit   net:net_dev_queue
 * (receive path):         net.dev.recv   net:netif_receive_skb
 *                         net.ip.recv    netfilter PRE_ROUTING | fentry/kprobe ip_rcv
 *                         net.l4.recv    cgroup_skb/ingress    (sk_filter on delivery)
 *                         net.sock.recv  sock:sock_recv_length | fexit inet{,6}_recvmsg
 * Packet capture:         net.pkt.xmit / net.pkt.recv at the device hooks,
 *                         the frame's first bytes (magnet record --snap N)
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "magnet.bpf.h"
#include "magnet/flow.h"

/* ------------------------------------------------------------------ */
/* socket layer                                                        */

/* Fields of a kernel pointer: direct (CO-RE relocated) loads where the
 * pointer is a trusted BTF pointer (tp_btf, fentry, netfilter ctx), one
 * bpf_probe_read_kernel each otherwise (raw_tp, kprobe). */
#define MG_RD(direct, p, ...) ((direct) ? (p)->__VA_ARGS__ : BPF_CORE_READ(p, __VA_ARGS__))

/* VM tagging by device: an ifindex names a device only within its network
 * namespace, so every lookup (mg_vm_of_netdev) also gives the namespace,
 * as the inode number user space sees on /proc/PID/ns/net.  Where a probe
 * has the struct net_device, that is dev_net(dev)->ns.inum. */
static __always_inline __u32 mg_dev_netns(struct net_device *dev, bool direct)
{
	if (!dev)
		return 0;
	if (direct)
		return dev->nd_net.net->ns.inum;
	return BPF_CORE_READ(dev, nd_net.net, ns.inum);
}

/* The VM whose device @dev (interface @ifindex) is; the namespace is read
 * only when VM tagging is on. */
static __always_inline __u32 mg_vm_of_dev(struct net_device *dev, __u32 ifindex, bool direct)
{
	if (!filter_ctl.vm_tagging || !dev || !ifindex)
		return 0;
	return mg_vm_of_netdev(mg_dev_netns(dev, direct), ifindex);
}

static __always_inline void mg_sock_addrs(struct sock *sk, struct magnet_sock *p,
					  bool send, bool direct)
{
	__u8 *loc = send ? p->saddr : p->daddr;
	__u8 *rem = send ? p->daddr : p->saddr;
	__u16 lport = MG_RD(direct, sk, __sk_common.skc_num);
	__u16 rport = bpf_ntohs(MG_RD(direct, sk, __sk_common.skc_dport));

	p->protocol = MG_RD(direct, sk, sk_protocol);
	p->sport = send ? lport : rport;
	p->dport = send ? rport : lport;
	if (p->family == MG_AF_INET) {
		__u32 l = MG_RD(direct, sk, __sk_common.skc_rcv_saddr);
		__u32 r = MG_RD(direct, sk, __sk_common.skc_daddr);

		__builtin_memcpy(loc, &l, 4);
		__builtin_memcpy(rem, &r, 4);
	} else {
		BPF_CORE_READ_INTO(loc, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(rem, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	}
}

/* An unconnected socket (a UDP server before connect()) has no peer in
 * struct sock, and 6.x copies linear datagrams without a tracepoint, so its
 * receive records carry only the local end (saddr/sport zero). */
static __always_inline int mg_sock_event(struct sock *sk, int ret, __u32 slot,
					 __u16 type, bool direct, __u64 call_ns)
{
	bool send = slot == MAGNET_P_NET_SOCK_SEND;
	struct magnet_probe_pcpu *st;
	struct magnet_sock s = { .call_ns = call_ns };
	struct magnet_hdr *h;
	struct mg_ev ev;
	__u32 mode;

	if (slot >= MAGNET_NPROBES || !sk)
		return 0;
	mode = probe_ctl[slot].mode;
	if (!mode)
		return 0;
	s.family = MG_RD(direct, sk, __sk_common.skc_family);
	if (s.family != MG_AF_INET && s.family != MG_AF_INET6)
		return 0;
	/* Aggregation only, no filter, no VM tagging: count and return. */
	if (mg_count_only(mode) && !filter_ctl.vm_tagging) {
		if (self_tgid && bpf_get_current_pid_tgid() >> 32 == self_tgid)
			return 0;
		mg_count(slot, mode, 0, ret);
		return 0;
	}
	mg_ev_task(&ev, slot, ret);
	/* The flow id is known before the filters run: it can be filtered on.
	 * Aggregation alone needs neither the addresses nor the hash. */
	if ((mode & MAGNET_MODE_STREAM) || (filter_ctl.active & MAGNET_FK_ABSTRACT)) {
		mg_sock_addrs(sk, &s, send, direct);
		ev.aid = magnet_flow_id(s.saddr, s.daddr, s.sport, s.dport, s.protocol);
	}
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, type, sizeof(s), 0);
	if (!h)
		return 0;
	__builtin_memcpy(h + 1, &s, sizeof(s));
	mg_submit(st, h);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send_btf, struct sock *sk, int ret, int flags)
{
	return mg_sock_event(sk, ret, MAGNET_P_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_SEND, true, 0);
}

SEC("raw_tp/sock_send_length")
int BPF_PROG(sock_send_raw, struct sock *sk, int ret, int flags)
{
	return mg_sock_event(sk, ret, MAGNET_P_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_SEND, false, 0);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv_btf, struct sock *sk, int ret, int flags)
{
	return mg_sock_event(sk, ret, MAGNET_P_NET_SOCK_RECV, MAGNET_EV_NET_SOCK_RECV, true, 0);
}

SEC("raw_tp/sock_recv_length")
int BPF_PROG(sock_recv_raw, struct sock *sk, int ret, int flags)
{
	return mg_sock_event(sk, ret, MAGNET_P_NET_SOCK_RECV, MAGNET_EV_NET_SOCK_RECV, false, 0);
}

/* The call a socket record ends, per thread: its start (and, for kprobes,
 * the socket), from the entry probe to the return probe.  A thread is in
 * one send and one receive call at most.  LRU: a call whose return was
 * never seen (a probe attached mid-call) ages out. */
struct mg_sock_call {
	__u64 start_ns;
	__u64 sock; /* kprobe path only */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* pid_tgid << 1 | is_recv */
	__type(value, struct mg_sock_call);
} sock_entry SEC(".maps");

/* Entry: the call's start, kept only while the probe streams records
 * (call_ns is a field of the record: counting needs no start), and for the
 * kprobe path the socket, which its return probe cannot see. */
static __always_inline int mg_sock_enter(struct socket *sock, __u64 recv, bool kprobe)
{
	__u32 mode = probe_ctl[recv ? MAGNET_P_NET_SOCK_RECV : MAGNET_P_NET_SOCK_SEND].mode;
	__u64 key = bpf_get_current_pid_tgid() << 1 | recv;
	struct mg_sock_call c = { .sock = mg_ptr_bits(sock) };

	if (mode & MAGNET_MODE_STREAM)
		c.start_ns = bpf_ktime_get_ns();
	else if (!mode || !kprobe)
		return 0;
	bpf_map_update_elem(&sock_entry, &key, &c, BPF_ANY);
	return 0;
}

/* Return: the call's duration (0 when its start is unknown) and, for the
 * kprobe path, its socket; the entry is consumed. */
static __always_inline __u64 mg_sock_leave(__u64 recv, __u64 *sock)
{
	__u64 key = bpf_get_current_pid_tgid() << 1 | recv;
	struct mg_sock_call *c = bpf_map_lookup_elem(&sock_entry, &key);
	__u64 now, d = 0;

	*sock = 0;
	if (!c)
		return 0;
	now = bpf_ktime_get_ns();
	if (c->start_ns && now > c->start_ns)
		d = now - c->start_ns;
	*sock = c->sock;
	bpf_map_delete_elem(&sock_entry, &key);
	return d;
}

/* Before 6.3 (commit 6e6eda44b939 "net: add sock_send_length and
 * sock_recv_length tracepoints") the socket layer is reached through the
 * address families' own sendmsg/recvmsg, inet_* and inet6_*, which the
 * socket layer calls from net/socket.c into af_inet.c / af_inet6.c: never
 * inlined.  Not sock_sendmsg / sock_recvmsg: write(), send() and recv()
 * reach them from their own file, where the compiler may inline them
 * (Debian's 6.1 does: a probe there saw none of iperf3's UDP sends).
 * fentry and fexit together also time the call (magnet_sock.call_ns). */
#define MG_SOCK_FENTRY(fn, name, recv)                                                    \
	SEC("fentry/" #fn)                                                                \
	int BPF_PROG(name##_fentry, struct socket *sock)                                  \
	{                                                                                 \
		return mg_sock_enter(sock, recv, false);                                  \
	}
MG_SOCK_FENTRY(inet_sendmsg, sock_send, 0)
MG_SOCK_FENTRY(inet6_sendmsg, sock_send6, 0)
MG_SOCK_FENTRY(inet_recvmsg, sock_recv, 1)
MG_SOCK_FENTRY(inet6_recvmsg, sock_recv6, 1)

static __always_inline int mg_sock_fexit(struct socket *sock, int ret, __u64 recv)
{
	__u64 unused, d = mg_sock_leave(recv, &unused);

	/* sock is trusted here, so sock->sk stays a BTF pointer */
	if (recv)
		return mg_sock_event(sock->sk, ret, MAGNET_P_NET_SOCK_RECV, MAGNET_EV_NET_SOCK_RECV,
				     true, d);
	return mg_sock_event(sock->sk, ret, MAGNET_P_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_SEND, true,
			     d);
}

SEC("fexit/inet_sendmsg")
int BPF_PROG(sock_send_fexit, struct socket *sock, struct msghdr *msg, size_t size, int ret)
{
	return mg_sock_fexit(sock, ret, 0);
}

SEC("fexit/inet6_sendmsg")
int BPF_PROG(sock_send6_fexit, struct socket *sock, struct msghdr *msg, size_t size, int ret)
{
	return mg_sock_fexit(sock, ret, 0);
}

SEC("fexit/inet_recvmsg")
int BPF_PROG(sock_recv_fexit, struct socket *sock, struct msghdr *msg, size_t size, int flags,
	     int ret)
{
	return mg_sock_fexit(sock, ret, 1);
}

SEC("fexit/inet6_recvmsg")
int BPF_PROG(sock_recv6_fexit, struct socket *sock, struct msghdr *msg, size_t size, int flags,
	     int ret)
{
	return mg_sock_fexit(sock, ret, 1);
}

/* kprobe fallback: the socket and the start at entry, the record at return. */
static __always_inline int mg_sock_kret(int ret, __u64 recv)
{
	__u64 sockp, d = mg_sock_leave(recv, &sockp);
	struct socket *sock = (struct socket *)(unsigned long)sockp;

	if (!sock)
		return 0;
	if (recv)
		return mg_sock_event(BPF_CORE_READ(sock, sk), ret, MAGNET_P_NET_SOCK_RECV,
				     MAGNET_EV_NET_SOCK_RECV, false, d);
	return mg_sock_event(BPF_CORE_READ(sock, sk), ret, MAGNET_P_NET_SOCK_SEND,
			     MAGNET_EV_NET_SOCK_SEND, false, d);
}

#define MG_SOCK_KPROBES(fn, name, recv)                                                   \
	SEC("kprobe/" #fn)                                                                \
	int BPF_KPROBE(name##_kprobe, struct socket *sock)                                \
	{                                                                                 \
		return mg_sock_enter(sock, recv, true);                                   \
	}                                                                                 \
	SEC("kretprobe/" #fn)                                                             \
	int BPF_KRETPROBE(name##_kretprobe, int ret)                                      \
	{                                                                                 \
		return mg_sock_kret(ret, recv);                                           \
	}
MG_SOCK_KPROBES(inet_sendmsg, sock_send, 0)
MG_SOCK_KPROBES(inet6_sendmsg, sock_send6, 0)
MG_SOCK_KPROBES(inet_recvmsg, sock_recv, 1)
MG_SOCK_KPROBES(inet6_recvmsg, sock_recv6, 1)

/* ------------------------------------------------------------------ */
/* packet layers (l4, ip, device)                                      */

/* Which size a packet record reports. */
enum mg_size_of { MG_SZ_L4_PAYLOAD, MG_SZ_IP_TOTAL, MG_SZ_SKB_LEN };

/* Headers are copied once into this buffer: IPv4 with up to 28 bytes of
 * options or IPv6, plus the first 16 bytes of TCP/UDP. */
#define MG_HDR_BUF 80

/* Parses the IP and transport headers in @raw (n valid bytes); returns the
 * size to report.  No helper calls: all reads are from the stack. */
static __always_inline __s32 mg_parse_l3(const __u8 *raw, __u32 n, struct magnet_pkt *p,
					 __u16 *rflags, enum mg_size_of what)
{
	__u32 l4off, l4hdr = 0, hdrs;
	__s32 ip_total;
	const __u8 *l4;

	if (n < 20)
		return p->skb_len;
	p->ip_version = raw[0] >> 4;
	if (p->ip_version == 4) {
		const struct iphdr *iph = (const void *)raw;

		p->protocol = iph->protocol;
		p->tos = iph->tos;
		p->ttl = iph->ttl;
		p->ip_id = bpf_ntohs(iph->id);
		p->frag_off = bpf_ntohs(iph->frag_off);
		p->tot_len = bpf_ntohs(iph->tot_len);
		__builtin_memcpy(p->saddr, &iph->saddr, 4);
		__builtin_memcpy(p->daddr, &iph->daddr, 4);
		l4off = (raw[0] & 0xf) * 4;
		ip_total = p->tot_len;
	} else if (p->ip_version == 6 && n >= 40) {
		const struct ipv6hdr *ip6 = (const void *)raw;

		*rflags |= MAGNET_RF_IPV6;
		p->protocol = ip6->nexthdr;
		p->ttl = ip6->hop_limit;
		p->tot_len = bpf_ntohs(ip6->payload_len);
		__builtin_memcpy(p->saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->daddr, &ip6->daddr, 16);
		l4off = 40;
		ip_total = p->tot_len + 40;
	} else {
		return p->skb_len;
	}

	if ((p->protocol == MG_IPPROTO_TCP || p->protocol == MG_IPPROTO_UDP) &&
	    l4off + 16 <= MG_HDR_BUF && l4off + 16 <= n) {
		l4 = raw + (l4off & 0x3f);
		p->sport = (__u16)l4[0] << 8 | l4[1];
		p->dport = (__u16)l4[2] << 8 | l4[3];
		if (p->protocol == MG_IPPROTO_TCP) {
			*rflags |= MAGNET_RF_TCP;
			p->tcp_seq = (__u32)l4[4] << 24 | (__u32)l4[5] << 16 |
				     (__u32)l4[6] << 8 | l4[7];
			p->tcp_flags = l4[13];
			l4hdr = (l4[12] >> 4) * 4;
		} else {
			*rflags |= MAGNET_RF_UDP;
			l4hdr = 8;
		}
	}
	hdrs = l4off + l4hdr;
	if (what == MG_SZ_IP_TOTAL)
		return ip_total;
	if (what == MG_SZ_L4_PAYLOAD)
		return ip_total > (__s32)hdrs ? ip_total - (__s32)hdrs : 0;
	return p->skb_len;
}

/* The size a packet probe reports, read in place from the IP header at @h
 * (64 readable bytes): what mg_parse_l3 returns for the same packet, or -1
 * for an IPv4 header with options, which only the full parser handles. */
static __always_inline __s64 mg_l3_size(const __u8 *h, __u32 skb_len, enum mg_size_of what)
{
	__u32 total, l4off, l4hdr = 0;
	__u8 proto, doff;

	/* Constant offsets only: for bpf_rdonly_cast memory the verifier makes
	 * "offset + pointer" (which clang emits for h[var]) a plain scalar. */
	if ((h[0] >> 4) == 4) {
		if ((h[0] & 0xf) != 5)
			return -1;
		total = (__u32)h[2] << 8 | h[3];
		proto = h[9];
		l4off = 20;
		doff = h[20 + 12];
	} else if ((h[0] >> 4) == 6) {
		total = ((__u32)h[4] << 8 | h[5]) + 40;
		proto = h[6];
		l4off = 40;
		doff = h[40 + 12];
	} else {
		return skb_len;
	}
	if (what == MG_SZ_IP_TOTAL)
		return total;
	if (proto == MG_IPPROTO_TCP)
		l4hdr = (doff >> 4) * 4;
	else if (proto == MG_IPPROTO_UDP)
		l4hdr = 8;
	return total > l4off + l4hdr ? total - (l4off + l4hdr) : 0;
}

/* Whether a packet probe must copy the headers: for a record, for a size
 * other than skb->len, or for a flow filter.  Aggregating a device probe
 * does not look at the packet at all. */
static __always_inline bool mg_need_headers(__u32 mode, enum mg_size_of what)
{
	return (mode & MAGNET_MODE_STREAM) || what != MG_SZ_SKB_LEN ||
	       (filter_ctl.active & MAGNET_FK_ABSTRACT);
}

/* The common tail of every packet probe: tag, filter, record.  @netns_ino
 * is the namespace of the device pkt->ifindex (0: unknown, no VM by
 * device). */
static __always_inline int mg_pkt_emit(struct mg_ev *ev, struct magnet_pkt *pkt,
				       __u32 netns_ino, const __u8 *raw, __u32 n, __u16 type,
				       enum mg_size_of what)
{
	struct magnet_probe_pcpu *st;
	struct magnet_hdr *h;
	__u16 rflags = 0;
	__u32 slot = ev->slot;

	ev->size = mg_parse_l3(raw, n, pkt, &rflags, what);
	/* Device records belong to a VM only on its own tap: a vhost worker's
	 * transmit on the wire side is host traffic at this layer, so per-VM
	 * device counts are exactly the guest's TX (tap recv) and RX (tap xmit). */
	if (slot == MAGNET_P_NET_DEV_XMIT || slot == MAGNET_P_NET_DEV_RECV || !ev->vm)
		ev->vm = mg_vm_of_netdev(netns_ino, pkt->ifindex);
	/* The flow id costs a hash: only when a record or a filter needs it. */
	if (slot < MAGNET_NPROBES && ((probe_ctl[slot].mode & MAGNET_MODE_STREAM) ||
				      (filter_ctl.active & MAGNET_FK_ABSTRACT)))
		ev->aid = magnet_flow_id(pkt->saddr, pkt->daddr, pkt->sport, pkt->dport,
					 pkt->protocol);
	st = mg_admit(ev);
	if (!st)
		return 0;
	h = mg_reserve(st, ev, type, sizeof(*pkt), rflags);
	if (!h)
		return 0;
	__builtin_memcpy(h + 1, pkt, sizeof(*pkt));
	mg_submit(st, h);
	return 0;
}

/* A packet record from a kernel sk_buff pointer (tracing program types). */
static __always_inline int mg_pkt_event(struct sk_buff *skb, __u32 slot, __u16 type,
					enum mg_size_of what, bool at_data,
					bool task_ctx, bool direct)
{
	struct magnet_pkt pkt = {};
	__u8 raw[MG_HDR_BUF] __attribute__((aligned(8))) = {};
	struct net_device *dev;
	const void *l3;
	struct mg_ev ev;
	__u32 mode, n = 0;

	if (slot >= MAGNET_NPROBES || !skb)
		return 0;
	mode = probe_ctl[slot].mode;
	if (!mode)
		return 0;
	pkt.l3proto = bpf_ntohs(MG_RD(direct, skb, protocol));
	if (pkt.l3proto != MG_ETH_P_IP && pkt.l3proto != MG_ETH_P_IPV6)
		return 0; /* ARP and friends are not part of the journey */
	dev = MG_RD(direct, skb, dev);
	if (at_data)
		l3 = MG_RD(direct, skb, data);
	else
		l3 = MG_RD(direct, skb, head) + MG_RD(direct, skb, network_header);

	/* Aggregation only, no filter: count and return.  The size is skb->len
	 * on the device layer, else read in place from the IP header; the VM
	 * is the device's (a task's VM, with VM tagging on, takes the full
	 * path). */
	if (mg_count_only(mode) && (what == MG_SZ_SKB_LEN || !task_ctx || !filter_ctl.vm_tagging)) {
		__u32 len = MG_RD(direct, skb, len);
		__s64 size = -1;

		if (what == MG_SZ_SKB_LEN)
			size = len;
		else if (has_rdonly_mem)
			size = mg_l3_size(bpf_rdonly_cast(l3, 0), len, what);
		if (size >= 0) {
			__u32 tgid = task_ctx ? bpf_get_current_pid_tgid() >> 32 : 0;
			__u32 vm = 0;

			if (self_tgid && tgid == self_tgid)
				return 0;
			if (dev)
				vm = mg_vm_of_dev(dev, MG_RD(direct, dev, ifindex), direct);
			mg_count(slot, mode, vm, size);
			return 0;
		}
	}
	pkt.ifindex = dev ? MG_RD(direct, dev, ifindex) : 0;
	pkt.skb_len = MG_RD(direct, skb, len);

	if (mg_need_headers(mode, what)) {
		/* One copy of the headers; a short packet at the end of a page
		 * may not have 64 readable bytes, so retry with the IPv4 minimum. */
		n = 64;
		if (mg_read_kernel(raw, l3, 64)) {
			n = 36;
			if (mg_read_kernel(raw, l3, 36))
				n = 0;
		}
		if (n == 64 && (raw[0] >> 4) == 4 && (raw[0] & 0xf) * 4 + 16 > 64 &&
		    !mg_read_kernel(raw, l3, MG_HDR_BUF))
			n = MG_HDR_BUF;
	}

	if (task_ctx) {
		mg_ev_task(&ev, slot, 0);
	} else {
		ev.slot = slot;
		ev.now = 0;
		ev.cpu = bpf_get_smp_processor_id();
		ev.tgid = ev.tid = 0;
		ev.cgroup = 0;
		ev.vm = 0;
		ev.flags = 0;
		ev.aid = 0;
	}
	return mg_pkt_emit(&ev, &pkt,
			   filter_ctl.vm_tagging && dev ? mg_dev_netns(dev, direct) : 0,
			   raw, n, type, what);
}

/* device layer */
SEC("tp_btf/net_dev_queue")
int BPF_PROG(dev_xmit_btf, struct sk_buff *skb)
{
	return mg_pkt_event(skb, MAGNET_P_NET_DEV_XMIT, MAGNET_EV_NET_DEV_XMIT,
			    MG_SZ_SKB_LEN, false, true, true);
}

SEC("raw_tp/net_dev_queue")
int BPF_PROG(dev_xmit_raw, struct sk_buff *skb)
{
	return mg_pkt_event(skb, MAGNET_P_NET_DEV_XMIT, MAGNET_EV_NET_DEV_XMIT,
			    MG_SZ_SKB_LEN, false, true, false);
}

/* At netif_receive_skb the MAC header is pulled: skb->data is the L3
 * header, while network_header is only reset after the tracepoint. */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(dev_recv_btf, struct sk_buff *skb)
{
	return mg_pkt_event(skb, MAGNET_P_NET_DEV_RECV, MAGNET_EV_NET_DEV_RECV,
			    MG_SZ_SKB_LEN, true, false, true);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(dev_recv_raw, struct sk_buff *skb)
{
	return mg_pkt_event(skb, MAGNET_P_NET_DEV_RECV, MAGNET_EV_NET_DEV_RECV,
			    MG_SZ_SKB_LEN, true, false, false);
}

/* ------------------------------------------------------------------ */
/* packet capture (net.pkt.*): the device-layer hooks again, one record  */
/* per packet with its first bytes from the link-layer header on         */

/* Bytes kept per packet, 1..MAGNET_SNAP_MAX; set by the loader. */
const volatile __u32 snap_len = 96;
/* One device only (tcpdump -i): its ifindex and network namespace; 0 = every
 * device.  A constant, so a capture of every device has no test at all. */
const volatile __u32 snap_ifindex = 0;
const volatile __u32 snap_netns = 0;

/* The record is built here and copied into the ring in one call: its size
 * follows the packet's, which bpf_ringbuf_reserve cannot take.  Per CPU
 * rather than on the stack, so the bytes after the captured ones are
 * never the stack's leftovers (the tail pad is cleared explicitly).  The
 * extra 8 bytes keep the rounded-up length within the value for the
 * verifier. */
struct mg_snap_rec {
	struct magnet_hdr h;
	struct magnet_pkt_snap ps;
	__u8 data[MAGNET_SNAP_MAX + 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mg_snap_rec);
} snap_buf SEC(".maps");

/* A flow filter (abstract id) needs the packet's flow id: the IP and
 * transport headers at @l3, parsed as the journey's probes do.  Only then;
 * a capture without one leaves abstract_id 0. */
static __always_inline __u64 mg_snap_flow(const void *l3, __u16 l3proto, __u32 skb_len)
{
	__u8 raw[MG_HDR_BUF] __attribute__((aligned(8))) = {};
	struct magnet_pkt pkt = { .skb_len = skb_len };
	__u16 rflags = 0;

	if (l3proto != MG_ETH_P_IP && l3proto != MG_ETH_P_IPV6)
		return 0;
	if (mg_read_kernel(raw, l3, 64))
		return 0;
	mg_parse_l3(raw, 64, &pkt, &rflags, MG_SZ_SKB_LEN);
	return magnet_flow_id(pkt.saddr, pkt.daddr, pkt.sport, pkt.dport, pkt.protocol);
}

/* Where the frame starts and how long it is: from the MAC header when the
 * skb has one (the receive path has already pulled it off skb->data), else
 * from skb->data.  Offsets are plain numbers: skb->head and skb->data point
 * to bytes, not to a BTF struct, so the verifier lets them be subtracted. */
struct mg_frame {
	__u64 start;
	__u32 wire_len;
	__u32 linear; /* bytes readable from start without the page frags */
	__u16 mac_len;
};

static __always_inline void mg_frame_of(struct sk_buff *skb, struct mg_frame *f, bool direct)
{
	__u64 head = (__u64)MG_RD(direct, skb, head);
	__u64 data = (__u64)MG_RD(direct, skb, data);
	__u16 mac = MG_RD(direct, skb, mac_header), nh = MG_RD(direct, skb, network_header);
	__u32 len = MG_RD(direct, skb, len), data_len = MG_RD(direct, skb, data_len);
	__u32 pulled = 0;

	f->start = data;
	f->mac_len = 0;
	/* mac_header is ~0 until set; a pulled header longer than 64 bytes is
	 * no link-layer header this capture knows. */
	if (mac != (__u16)~0U && head + mac <= data && data - (head + mac) <= 64) {
		f->start = head + mac;
		pulled = data - f->start;
		/* Received: what eth_type_trans pulled is the link-layer header
		 * (network_header is reset only after the tracepoint).  Sent:
		 * nothing is pulled and network_header is the IP header. */
		if (pulled)
			f->mac_len = pulled;
		else if (nh != (__u16)~0U && nh >= mac && nh - mac <= 64)
			f->mac_len = nh - mac;
	}
	f->wire_len = len + pulled;
	f->linear = len > data_len ? len - data_len + pulled : pulled;
}

static __always_inline int mg_snap_event(struct sk_buff *skb, __u32 slot, __u16 type,
					 bool task_ctx, bool direct)
{
	struct magnet_probe_pcpu *st;
	struct net_device *dev;
	struct mg_snap_rec *r;
	struct mg_frame f;
	__u32 mode, zero = 0, ifindex, netns;
	__u64 cap;
	__u16 l3proto;
	struct mg_ev ev;

	if (slot >= MAGNET_NPROBES || !skb)
		return 0;
	mode = probe_ctl[slot].mode;
	if (!mode)
		return 0;
	dev = MG_RD(direct, skb, dev);
	ifindex = dev ? MG_RD(direct, dev, ifindex) : 0;
	netns = (filter_ctl.vm_tagging || snap_ifindex) && dev ? mg_dev_netns(dev, direct) : 0;
	if (snap_ifindex && (ifindex != snap_ifindex || netns != snap_netns))
		return 0;
	if (!filter_ctl.vm_tagging)
		netns = 0; /* no VM by device without tagging */
	if (task_ctx) {
		mg_ev_task(&ev, slot, 0);
	} else {
		__builtin_memset(&ev, 0, sizeof(ev));
		ev.slot = slot;
		ev.cpu = bpf_get_smp_processor_id();
	}
	ev.size = MG_RD(direct, skb, len);
	/* A device's packets are its VM's only on the VM's own tap (as net.dev). */
	ev.vm = mg_vm_of_netdev(netns, ifindex);
	if (mg_count_only(mode)) {
		if (!(self_tgid && ev.tgid == self_tgid))
			mg_count(slot, mode, ev.vm, ev.size);
		return 0;
	}
	mg_frame_of(skb, &f, direct);
	l3proto = bpf_ntohs(MG_RD(direct, skb, protocol));
	if (filter_ctl.active & MAGNET_FK_ABSTRACT)
		ev.aid = mg_snap_flow((const void *)(f.start + f.mac_len), l3proto, ev.size);
	st = mg_admit(&ev);
	if (!st)
		return 0;
	r = bpf_map_lookup_elem(&snap_buf, &zero);
	if (!r)
		return 0;
	/* 64-bit compares on the register the copy uses: with 32-bit ones
	 * clang bounds a zero-extended copy and passes the unbounded original
	 * (the verifier's "unbounded memory access"). */
	cap = f.linear;
	barrier_var(cap);
	if (cap > snap_len)
		cap = snap_len;
	if (cap > MAGNET_SNAP_MAX)
		cap = MAGNET_SNAP_MAX;
	/* Zero the last word first: the bytes past cap_len are padding. */
	*(__u64 *)(r->data + (cap & (MAGNET_SNAP_MAX - 8))) = 0;
	if (cap && bpf_probe_read_kernel(r->data, cap, (const void *)f.start))
		cap = 0;
	r->ps.ifindex = ifindex;
	r->ps.wire_len = f.wire_len;
	r->ps.cap_len = cap;
	r->ps.l3proto = l3proto;
	r->ps.mac_len = f.mac_len;
	r->ps.reserved = 0;
	mg_output(st, &ev, type, &r->h, sizeof(r->ps) + ((cap + 7) & ~7U), 0);
	return 0;
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(pkt_xmit_btf, struct sk_buff *skb)
{
	return mg_snap_event(skb, MAGNET_P_NET_PKT_XMIT, MAGNET_EV_NET_PKT_XMIT, true, true);
}

SEC("raw_tp/net_dev_queue")
int BPF_PROG(pkt_xmit_raw, struct sk_buff *skb)
{
	return mg_snap_event(skb, MAGNET_P_NET_PKT_XMIT, MAGNET_EV_NET_PKT_XMIT, true, false);
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(pkt_recv_btf, struct sk_buff *skb)
{
	return mg_snap_event(skb, MAGNET_P_NET_PKT_RECV, MAGNET_EV_NET_PKT_RECV, false, true);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(pkt_recv_raw, struct sk_buff *skb)
{
	return mg_snap_event(skb, MAGNET_P_NET_PKT_RECV, MAGNET_EV_NET_PKT_RECV, false, false);
}

/* l4 -> ip hand-off on send, ip entry on receive: netfilter hooks (6.4+,
 * per network namespace), else the functions behind them. */
struct bpf_nf_ctx___local {
	const struct nf_hook_state *state;
	struct sk_buff *skb;
} __attribute__((preserve_access_index));

#define MG_NF_ACCEPT 1

SEC("netfilter")
int l4_send_nf(struct bpf_nf_ctx___local *ctx)
{
	/* LOCAL_OUT runs in the sending task's context. */
	mg_pkt_event(ctx->skb, MAGNET_P_NET_L4_SEND, MAGNET_EV_NET_L4_SEND,
		     MG_SZ_L4_PAYLOAD, false, true, true);
	return MG_NF_ACCEPT;
}

SEC("netfilter")
int ip_recv_nf(struct bpf_nf_ctx___local *ctx)
{
	mg_pkt_event(ctx->skb, MAGNET_P_NET_IP_RECV, MAGNET_EV_NET_IP_RECV,
		     MG_SZ_IP_TOTAL, false, false, true);
	return MG_NF_ACCEPT;
}

SEC("fentry/ip_local_out")
int BPF_PROG(l4_send_fentry, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return mg_pkt_event(skb, MAGNET_P_NET_L4_SEND, MAGNET_EV_NET_L4_SEND,
			    MG_SZ_L4_PAYLOAD, false, true, true);
}

SEC("kprobe/ip_local_out")
int BPF_KPROBE(l4_send_kprobe, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return mg_pkt_event(skb, MAGNET_P_NET_L4_SEND, MAGNET_EV_NET_L4_SEND,
			    MG_SZ_L4_PAYLOAD, false, true, false);
}

/* ip_rcv runs before skb_reset_network_header's users: data is L3. */
SEC("fentry/ip_rcv")
int BPF_PROG(ip_recv_fentry, struct sk_buff *skb)
{
	return mg_pkt_event(skb, MAGNET_P_NET_IP_RECV, MAGNET_EV_NET_IP_RECV,
			    MG_SZ_IP_TOTAL, true, false, true);
}

SEC("kprobe/ip_rcv")
int BPF_KPROBE(ip_recv_kprobe, struct sk_buff *skb)
{
	return mg_pkt_event(skb, MAGNET_P_NET_IP_RECV, MAGNET_EV_NET_IP_RECV,
			    MG_SZ_IP_TOTAL, true, false, false);
}

/* The first @len bytes of the packet (@len a constant multiple of 4) into
 * @dst (8-byte aligned): plain loads from the linear area when it holds
 * them, which saves a helper call per packet, else bpf_skb_load_bytes. */
static __always_inline int mg_skb_copy(struct __sk_buff *skb, __u8 *dst, __u32 len)
{
	const __u8 *data = (const void *)(long)skb->data;
	const __u8 *end = (const void *)(long)skb->data_end;

	if (data + len > end)
		return bpf_skb_load_bytes(skb, 0, dst, len);
	mg_copy_words(dst, data, len);
	return 0;
}

/* The network namespace of a cgroup_skb packet's device.  These programs
 * get a struct __sk_buff, which has the ifindex but not the device, and on
 * 6.1 neither bpf_cast_to_kern_ctx (6.3+) nor bpf_get_netns_cookie (given
 * to cgroup_skb only in 2025).  But the context is the kernel's struct
 * sk_buff all the same (bpf_cast_to_kern_ctx returns it unchanged), so its
 * dev is read as a tracing probe reads it: with plain loads through
 * bpf_rdonly_cast where the kernel has that, else bpf_probe_read_kernel
 * (which cgroup_skb programs may call given CAP_PERFMON, 6.1 included).
 * The socket's namespace would not do: ipvlan in L3 mode sends a
 * container's packets out of the host's device, through the host's IP
 * output, with the container's socket attached.  No device: 0, and the
 * packet gets no VM by device. */
static __always_inline __u32 mg_cgskb_netns(struct __sk_buff *ctx)
{
	struct sk_buff *skb;

	if (has_rdonly_mem) {
		skb = bpf_rdonly_cast(ctx, bpf_core_type_id_kernel(struct sk_buff));
		return mg_dev_netns(skb->dev, true);
	}
	skb = (struct sk_buff *)mg_ptr_bits(ctx);
	return BPF_CORE_READ(skb, dev, nd_net.net, ns.inum); /* 0 if a read fails */
}

static __always_inline __u32 mg_cgskb_vm(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;

	if (!filter_ctl.vm_tagging || !ifindex)
		return 0;
	return mg_vm_of_netdev(mg_cgskb_netns(skb), ifindex);
}

/* cgroup_skb: ip output (ip_finish_output) and l4 delivery (sk_filter).
 * These hooks give a struct __sk_buff whose data starts at the IP header. */
static __always_inline int mg_cgskb_event(struct __sk_buff *skb, __u32 slot,
					  __u16 type, enum mg_size_of what)
{
	struct magnet_pkt pkt = {};
	__u8 raw[MG_HDR_BUF] __attribute__((aligned(8))) = {};
	struct mg_ev ev;
	__u32 mode, n;

	if (slot >= MAGNET_NPROBES)
		return 1;
	mode = probe_ctl[slot].mode;
	if (!mode)
		return 1;
	pkt.l3proto = bpf_ntohs(skb->protocol);
	if (pkt.l3proto != MG_ETH_P_IP && pkt.l3proto != MG_ETH_P_IPV6)
		return 1;

	/* Aggregation only, no filter: count and return, the size read in
	 * place when the linear data holds 64 bytes (see mg_pkt_event). */
	if (mg_count_only(mode)) {
		const __u8 *data = (const void *)(long)skb->data;
		const __u8 *end = (const void *)(long)skb->data_end;
		__s64 size = -1;

		if (skb->len >= 64 && data + 64 <= end)
			size = mg_l3_size(data, skb->len, what);
		if (size >= 0) {
			if (type == MAGNET_EV_NET_IP_SEND && cgskb_has_task && self_tgid &&
			    bpf_get_current_pid_tgid() >> 32 == self_tgid)
				return 1;
			mg_count(slot, mode, mg_cgskb_vm(skb), size);
			return 1;
		}
	}
	pkt.ifindex = skb->ifindex;
	pkt.skb_len = skb->len;
	/* bpf_skb_load_bytes wants a constant length: take the largest that fits. */
	n = skb->len >= 64 ? 64 : skb->len >= 36 ? 36 : skb->len >= 20 ? 20 : 0;
	if (n == 64) {
		if (mg_skb_copy(skb, raw, 64))
			return 1;
		if ((raw[0] >> 4) == 4 && (raw[0] & 0xf) * 4 + 16 > 64 && skb->len >= MG_HDR_BUF &&
		    !mg_skb_copy(skb, raw, MG_HDR_BUF))
			n = MG_HDR_BUF;
	} else if (n == 36) {
		if (mg_skb_copy(skb, raw, 36))
			return 1;
	} else if (n == 20) {
		if (mg_skb_copy(skb, raw, 20))
			return 1;
	} else {
		return 1;
	}

	ev.slot = slot;
	ev.now = 0;
	ev.cpu = bpf_get_smp_processor_id();
	if (type == MAGNET_EV_NET_IP_SEND && cgskb_has_task) {
		__u64 pid_tgid = bpf_get_current_pid_tgid();

		ev.tgid = pid_tgid >> 32;
		ev.tid = (__u32)pid_tgid;
	} else {
		ev.tgid = ev.tid = 0; /* softirq: no meaningful task */
	}
	/* cgroup of the socket's owner, only when a filter asks for it */
	ev.cgroup = (filter_ctl.active & MAGNET_FK_CGROUP) ? bpf_skb_cgroup_id(skb) : 0;
	ev.vm = 0;
	ev.flags = 0;
	ev.aid = 0;
	mg_pkt_emit(&ev, &pkt, filter_ctl.vm_tagging && pkt.ifindex ? mg_cgskb_netns(skb) : 0,
		    raw, n, type, what);
	return 1;
}

SEC("cgroup_skb/egress")
int ip_send_cgskb(struct __sk_buff *skb)
{
	return mg_cgskb_event(skb, MAGNET_P_NET_IP_SEND, MAGNET_EV_NET_IP_SEND,
			      MG_SZ_IP_TOTAL);
}

SEC("cgroup_skb/ingress")
int l4_recv_cgskb(struct __sk_buff *skb)
{
	return mg_cgskb_event(skb, MAGNET_P_NET_L4_RECV, MAGNET_EV_NET_L4_RECV,
			      MG_SZ_L4_PAYLOAD);
}

/* ------------------------------------------------------------------ */
/* TCP state                                                           */

static __always_inline int mg_tcp_state_event(struct sock *sk)
{
	struct magnet_probe_pcpu *st;
	struct magnet_tcp_state *p;
	struct inet_connection_sock *icsk = (void *)sk;
	struct tcp_sock *tp = (void *)sk;
	struct magnet_hdr *h;
	struct magnet_sock s = {};
	struct mg_ev ev;

	if (!probe_ctl[MAGNET_P_NET_TCP_STATE].mode || !sk)
		return 0;
	mg_ev_task(&ev, MAGNET_P_NET_TCP_STATE, 0);
	s.family = BPF_CORE_READ(sk, __sk_common.skc_family);
	mg_sock_addrs(sk, &s, true, false);
	ev.aid = magnet_flow_id(s.saddr, s.daddr, s.sport, s.dport, MG_IPPROTO_TCP);
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_NET_TCP_STATE, sizeof(*p), MAGNET_RF_TCP);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	__builtin_memset(p, 0, sizeof(*p));
	p->family = s.family;
	p->sport = s.sport;
	p->dport = s.dport;
	__builtin_memcpy(p->saddr, s.saddr, 16);
	__builtin_memcpy(p->daddr, s.daddr, 16);
	p->state = BPF_CORE_READ(sk, __sk_common.skc_state);
	p->ca_state = BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state);
	p->snd_wnd = BPF_CORE_READ(tp, snd_wnd);
	p->rcv_wnd = BPF_CORE_READ(tp, rcv_wnd);
	p->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
	p->rto_us = BPF_CORE_READ(icsk, icsk_rto); /* jiffies; user space scales */
	p->packets_out = BPF_CORE_READ(tp, packets_out);
	p->retrans_out = BPF_CORE_READ(tp, retrans_out);
	p->snd_ssthresh = BPF_CORE_READ(tp, snd_ssthresh);
	p->snd_cwnd = BPF_CORE_READ(tp, snd_cwnd);
	p->write_seq = BPF_CORE_READ(tp, write_seq);
	p->copied_seq = BPF_CORE_READ(tp, copied_seq);
	p->snd_nxt = BPF_CORE_READ(tp, snd_nxt);
	p->snd_una = BPF_CORE_READ(tp, snd_una);
	mg_submit(st, h);
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_state_btf, struct sock *sk, struct sk_buff *skb)
{
	return mg_tcp_state_event(sk);
}

SEC("raw_tp/tcp_probe")
int BPF_PROG(tcp_state_raw, struct sock *sk, struct sk_buff *skb)
{
	return mg_tcp_state_event(sk);
}

/* ------------------------------------------------------------------ */
/* scheduler and processes                                             */

static __always_inline int mg_sched_switch_event(struct task_struct *prev,
						 struct task_struct *next,
						 __s64 prev_state)
{
	struct magnet_probe_pcpu *st;
	struct magnet_sched_switch *p;
	struct magnet_hdr *h;
	struct mg_ev ev;

	if (!probe_ctl[MAGNET_P_SCHED_SWITCH].mode)
		return 0;
	mg_ev_task(&ev, MAGNET_P_SCHED_SWITCH, 0);
	ev.aid = BPF_CORE_READ(next, pid);
	/* Current is prev: a vCPU being switched in belongs to its VM too. */
	if (!ev.vm)
		ev.vm = mg_vm_of_task(BPF_CORE_READ(next, tgid), 0);
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_SCHED_SWITCH, sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->prev_tid = BPF_CORE_READ(prev, pid);
	p->next_tid = BPF_CORE_READ(next, pid);
	p->prev_state = prev_state;
	p->prev_prio = BPF_CORE_READ(prev, prio);
	p->next_prio = BPF_CORE_READ(next, prio);
	BPF_CORE_READ_STR_INTO(&p->prev_comm, prev, comm);
	BPF_CORE_READ_STR_INTO(&p->next_comm, next, comm);
	mg_submit(st, h);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_btf, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	return mg_sched_switch_event(prev, next, prev_state);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	return mg_sched_switch_event(prev, next, prev_state);
}

static __always_inline int mg_wakeup_event(struct task_struct *t)
{
	struct magnet_probe_pcpu *st;
	struct magnet_sched_wakeup *p;
	struct magnet_hdr *h;
	struct mg_ev ev;

	if (!probe_ctl[MAGNET_P_SCHED_WAKEUP].mode)
		return 0;
	mg_ev_task(&ev, MAGNET_P_SCHED_WAKEUP, 0);
	ev.aid = BPF_CORE_READ(t, pid);
	/* The wakee, not the waker, decides the VM. */
	ev.vm = mg_vm_of_task(BPF_CORE_READ(t, tgid), 0);
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_SCHED_WAKEUP, sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->tid = BPF_CORE_READ(t, pid);
	p->target_cpu = BPF_CORE_READ(t, wake_cpu);
	p->prio = BPF_CORE_READ(t, prio);
	p->reserved = 0;
	BPF_CORE_READ_STR_INTO(&p->comm, t, comm);
	mg_submit(st, h);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup_btf, struct task_struct *t)
{
	return mg_wakeup_event(t);
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(sched_wakeup_raw, struct task_struct *t)
{
	return mg_wakeup_event(t);
}

static __always_inline int mg_fork_event(struct task_struct *parent,
					 struct task_struct *child)
{
	struct magnet_probe_pcpu *st;
	struct magnet_proc_fork *p;
	struct magnet_hdr *h;
	struct mg_ev ev;

	if (!probe_ctl[MAGNET_P_PROC_FORK].mode)
		return 0;
	mg_ev_task(&ev, MAGNET_P_PROC_FORK, 0);
	ev.aid = BPF_CORE_READ(child, pid);
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_PROC_FORK, sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->parent_tid = BPF_CORE_READ(parent, pid);
	p->child_tid = BPF_CORE_READ(child, pid);
	BPF_CORE_READ_STR_INTO(&p->parent_comm, parent, comm);
	BPF_CORE_READ_STR_INTO(&p->child_comm, child, comm);
	mg_submit(st, h);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(proc_fork_btf, struct task_struct *parent, struct task_struct *child)
{
	return mg_fork_event(parent, child);
}

SEC("raw_tp/sched_process_fork")
int BPF_PROG(proc_fork_raw, struct task_struct *parent, struct task_struct *child)
{
	return mg_fork_event(parent, child);
}

static __always_inline int mg_exit_event(struct task_struct *t)
{
	struct magnet_probe_pcpu *st;
	struct magnet_proc_exit *p;
	struct magnet_hdr *h;
	struct mg_ev ev;

	if (!probe_ctl[MAGNET_P_PROC_EXIT].mode)
		return 0;
	mg_ev_task(&ev, MAGNET_P_PROC_EXIT, 0);
	ev.aid = BPF_CORE_READ(t, pid);
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_PROC_EXIT, sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->exit_code = BPF_CORE_READ(t, exit_code);
	p->reserved = 0;
	BPF_CORE_READ_STR_INTO(&p->comm, t, comm);
	mg_submit(st, h);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit_btf, struct task_struct *t)
{
	return mg_exit_event(t);
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(proc_exit_raw, struct task_struct *t)
{
	return mg_exit_event(t);
}

/* ------------------------------------------------------------------ */
/* block I/O                                                           */

/* A request's issue, for its completion: the latency, and the submitter the
 * completion is attributed to (it runs in interrupt context, where the
 * current task is whoever was interrupted). */
struct mg_blk_issue {
	__u64 ts;
	__u32 tgid;
	__u32 tid;
	__u32 vm;
	__u32 requeued; /* in blk_start: given back by the driver, to be issued again */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct mg_blk_issue);
} blk_start SEC(".maps");

/* The submitter of a request: block_rq_issue runs wherever the hardware
 * queue is run (the submitting task, kblockd, a completion that restarts
 * the queue, or a task that dispatches others' requests), so the task there
 * is not the submitter.  block_getrq fires in the submitter's context as a
 * request is made for its first bio; keyed by that bio, which is rq->bio,
 * or further down rq's bio list when later bios were merged in front of it
 * (a front merge: QEMU's I/O threads write neighbouring blocks out of
 * order), hence the walk of the list's first MG_BLK_BIO_WALK bios. */
#define MG_BLK_BIO_WALK 8
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct mg_blk_issue);
} blk_submitter SEC(".maps");

static __always_inline int mg_blk_getrq(struct bio *bio)
{
	struct mg_blk_issue is = {};
	__u64 key = mg_ptr_bits(bio);
	struct mg_ev ev;

	if (!bio || (!probe_ctl[MAGNET_P_BLK_ISSUE].mode && !probe_ctl[MAGNET_P_BLK_COMPLETE].mode))
		return 0;
	mg_ev_task(&ev, MAGNET_P_BLK_ISSUE, 0);
	is.tgid = ev.tgid;
	is.tid = ev.tid;
	is.vm = ev.vm;
	bpf_map_update_elem(&blk_submitter, &key, &is, BPF_ANY);
	return 0;
}

/* A bio merged into a request already made never makes one: an entry under
 * its address is left from an earlier bio there, and would give this bio's
 * request that bio's submitter if this one came first in its list (a front
 * merge). */
static __always_inline int mg_blk_merge(struct bio *bio)
{
	__u64 key = mg_ptr_bits(bio);

	if (bio)
		bpf_map_delete_elem(&blk_submitter, &key);
	return 0;
}

SEC("tp_btf/block_bio_backmerge")
int BPF_PROG(blk_backmerge_btf, struct bio *bio)
{
	return mg_blk_merge(bio);
}

SEC("raw_tp/block_bio_backmerge")
int BPF_PROG(blk_backmerge_raw, struct bio *bio)
{
	return mg_blk_merge(bio);
}

SEC("tp_btf/block_bio_frontmerge")
int BPF_PROG(blk_frontmerge_btf, struct bio *bio)
{
	return mg_blk_merge(bio);
}

SEC("raw_tp/block_bio_frontmerge")
int BPF_PROG(blk_frontmerge_raw, struct bio *bio)
{
	return mg_blk_merge(bio);
}

SEC("tp_btf/block_getrq")
int BPF_PROG(blk_getrq_btf, struct bio *bio)
{
	return mg_blk_getrq(bio);
}

SEC("raw_tp/block_getrq")
int BPF_PROG(blk_getrq_raw, struct bio *bio)
{
	return mg_blk_getrq(bio);
}

static __always_inline int mg_blk_event(struct request *rq, int error,
					unsigned int nr_bytes, bool complete)
{
	__u32 slot = complete ? MAGNET_P_BLK_COMPLETE : MAGNET_P_BLK_ISSUE;
	__u64 key = mg_ptr_bits(rq), lat = 0;
	struct magnet_probe_pcpu *st;
	struct mg_blk_issue *start;
	struct gendisk *disk;
	struct magnet_blk *p;
	struct magnet_hdr *h;
	struct mg_ev ev;
	__u32 op;

	if (!probe_ctl[MAGNET_P_BLK_ISSUE].mode && !probe_ctl[MAGNET_P_BLK_COMPLETE].mode)
		return 0;
	mg_ev_task(&ev, slot, 0);
	ev.now = bpf_ktime_get_ns(); /* also the latency's clock */
	if (!complete) {
		struct bio *b = BPF_CORE_READ(rq, bio);
		bool have_submitter = false;
		__u64 bkey = 0;

		/* The first bio of the list with a submitter is the one the
		 * request was made for.  Every entry found is deleted: the
		 * others are the first bios of requests merged into this one,
		 * and an entry left behind would name its submitter for a later
		 * bio at the same address. */
		for (int i = 0; i < MG_BLK_BIO_WALK; i++) { /* a bounded loop */
			struct mg_blk_issue *found;

			if (!b)
				break;
			bkey = mg_ptr_bits(b);
			found = bpf_map_lookup_elem(&blk_submitter, &bkey);
			if (found) {
				if (!have_submitter) {
					ev.tgid = found->tgid;
					ev.tid = found->tid;
					ev.vm = found->vm;
					have_submitter = true;
				}
				bpf_map_delete_elem(&blk_submitter, &bkey);
			}
			b = BPF_CORE_READ(b, bi_next);
		}

		if (!have_submitter) { /* no bio (a flush), made before tracing, or requeued */
			/* A request the driver gave back (its queue was full) is
			 * issued again from whichever context runs the queue next,
			 * often a kworker: it keeps its first issue's submitter and
			 * time (block_rq_requeue below). */
			start = bpf_map_lookup_elem(&blk_start, &key);
			if (start && start->requeued) {
				ev.tgid = start->tgid;
				ev.tid = start->tid;
				ev.vm = start->vm;
				start->requeued = 0;
				goto emit;
			}
		}
		struct mg_blk_issue is = {
			.ts = ev.now, .tgid = ev.tgid, .tid = ev.tid, .vm = ev.vm,
		};

		bpf_map_update_elem(&blk_start, &key, &is, BPF_ANY);
	} else {
		start = bpf_map_lookup_elem(&blk_start, &key);
		if (start) {
			lat = ev.now - start->ts;
			ev.tgid = start->tgid;
			ev.tid = start->tid;
			ev.vm = start->vm;
			/* A partial completion (fewer bytes than the request still
			 * has) keeps the request's submitter for the rest. */
			if (nr_bytes >= BPF_CORE_READ(rq, __data_len))
				bpf_map_delete_elem(&blk_start, &key);
		} else {
			/* issued before tracing started: submitter unknown */
			ev.tgid = ev.tid = ev.vm = 0;
		}
	}
emit:
	ev.size = complete ? nr_bytes : BPF_CORE_READ(rq, __data_len);
	ev.aid = mg_id(rq);
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, complete ? MAGNET_EV_BLK_COMPLETE : MAGNET_EV_BLK_ISSUE,
		       sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	__builtin_memset(p, 0, sizeof(*p));
	disk = BPF_CORE_READ(rq, q, disk);
	if (disk)
		p->dev = BPF_CORE_READ(disk, major) << 20 | BPF_CORE_READ(disk, first_minor);
	p->nr_bytes = ev.size;
	p->sector = BPF_CORE_READ(rq, __sector);
	p->latency_ns = lat;
	p->error = error;
	op = BPF_CORE_READ(rq, cmd_flags) & 0xff; /* REQ_OP_MASK */
	p->rwbs[0] = op == 0 ? 'R' : op == 1 ? 'W' : op == 2 ? 'F' : op == 3 ? 'D' : 'N';
	mg_submit(st, h);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(blk_issue_btf, struct request *rq)
{
	return mg_blk_event(rq, 0, 0, false);
}

SEC("raw_tp/block_rq_issue")
int BPF_PROG(blk_issue_raw, struct request *rq)
{
	return mg_blk_event(rq, 0, 0, false);
}

/* A request given back to the block layer before completing (the driver's
 * queue was full, or a flush sequence): marked, so that its next issue keeps
 * the submitter found at its first. */
static __always_inline int mg_blk_requeue(struct request *rq)
{
	__u64 key = mg_ptr_bits(rq);
	struct mg_blk_issue *start = bpf_map_lookup_elem(&blk_start, &key);

	if (start)
		start->requeued = 1;
	return 0;
}

SEC("tp_btf/block_rq_requeue")
int BPF_PROG(blk_requeue_btf, struct request *rq)
{
	return mg_blk_requeue(rq);
}

SEC("raw_tp/block_rq_requeue")
int BPF_PROG(blk_requeue_raw, struct request *rq)
{
	return mg_blk_requeue(rq);
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(blk_complete_btf, struct request *rq, int error, unsigned int nr_bytes)
{
	return mg_blk_event(rq, error, nr_bytes, true);
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(blk_complete_raw, struct request *rq, int error, unsigned int nr_bytes)
{
	return mg_blk_event(rq, error, nr_bytes, true);
}

/* ------------------------------------------------------------------ */
/* Latency statistics in kernel (magnet_lat_stat, proto/magnet/control.h). */

static __always_inline __u32 mg_log2(__u64 v)
{
	__u32 r = 0, s;

	s = (v > 0xffffffffULL) << 5; v >>= s; r |= s;
	s = (v > 0xffff) << 4; v >>= s; r |= s;
	s = (v > 0xff) << 3; v >>= s; r |= s;
	s = (v > 0xf) << 2; v >>= s; r |= s;
	s = (v > 0x3) << 1; v >>= s; r |= s;
	return r | (__u32)(v >> 1);
}

static __always_inline void mg_lat_add(void *map, const void *key, __u64 ns, __u64 aux)
{
	struct magnet_lat_stat *s, zero = {};
	__u32 b;

	s = bpf_map_lookup_elem(map, key);
	if (!s) {
		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(map, key);
		if (!s)
			return;
	}
	s->count++;
	s->total_ns += ns;
	if (ns > s->max_ns)
		s->max_ns = ns;
	s->aux += aux;
	b = mg_log2(ns);
	if (b >= MAGNET_LAT_BUCKETS)
		b = MAGNET_LAT_BUCKETS - 1;
	/* The barrier keeps the mask, which keeps the bound for older
	 * verifiers (6.1) that lose it on the compiler's copy of b. */
	asm volatile("" : "+r"(b));
	s->hist[b & (MAGNET_LAT_BUCKETS - 1)]++;
}

/* Whether the in-kernel statistics of a probe take this event: they follow
 * the probe's AGGREGATE bit and VM-only mode (not the record filters). */
static __always_inline bool mg_stats_take(__u32 slot, __u32 vm, __u32 tgid)
{
	__u32 mode;

	if (slot >= MAGNET_NPROBES)
		return false;
	mode = probe_ctl[slot].mode;
	if (!(mode & MAGNET_MODE_AGGREGATE))
		return false;
	if ((mode & MAGNET_MODE_VM_ONLY) && !vm)
		return false;
	return !(self_tgid && tgid == self_tgid);
}

/* ------------------------------------------------------------------ */
/* KVM: the tracepoint format carries the vendor-decoded exit reason,
 * which the tp_btf arguments (vcpu, isa) do not.
 *
 * Per vCPU thread, the exit being handled: kvm.entry turns it into an
 * exit -> entry time per reason, kvm.userspace_exit marks it as handled by
 * the VMM, and kvm.userspace_exit / kvm.wakeup take the vCPU id from it.
 * The loader attaches kvm_exit_tp for those probes too (probe "needs").  */

struct mg_vcpu_state {
	__u64 exit_ts; /* 0: no exit pending */
	__u32 reason;
	__u32 vcpu_id;
	__u16 isa;
	__u16 flags; /* MAGNET_KVM_F_* */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32); /* tid */
	__type(value, struct mg_vcpu_state);
} vcpu_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, MAGNET_KVM_STATS_ENTRIES);
	__type(key, struct magnet_kvm_exit_key);
	__type(value, struct magnet_lat_stat);
} kvm_exit_stats SEC(".maps");

static __always_inline bool mg_vcpu_state_wanted(void)
{
	return probe_ctl[MAGNET_P_KVM_ENTRY].mode ||
	       probe_ctl[MAGNET_P_KVM_USERSPACE_EXIT].mode ||
	       probe_ctl[MAGNET_P_KVM_WAKEUP].mode;
}

static __always_inline __u32 mg_vcpu_of(__u32 tid)
{
	struct mg_vcpu_state *s = bpf_map_lookup_elem(&vcpu_state, &tid);

	return s ? s->vcpu_id : 0xffffffff;
}

SEC("tracepoint/kvm/kvm_exit")
int kvm_exit_tp(struct trace_event_raw_kvm_exit *ctx)
{
	struct magnet_probe_pcpu *st;
	struct magnet_kvm_exit *p;
	struct mg_vcpu_state *vs;
	struct magnet_hdr *h;
	struct mg_ev ev;

	bool keep_state = mg_vcpu_state_wanted();

	if (!probe_ctl[MAGNET_P_KVM_EXIT].mode && !keep_state)
		return 0;
	mg_ev_task(&ev, MAGNET_P_KVM_EXIT, 0);
	ev.now = bpf_ktime_get_ns(); /* also the exit -> entry clock */
	if (keep_state) {
		vs = bpf_map_lookup_elem(&vcpu_state, &ev.tid);
		if (vs) {
			vs->exit_ts = ev.now;
			vs->reason = BPF_CORE_READ(ctx, exit_reason);
			vs->vcpu_id = BPF_CORE_READ(ctx, vcpu_id);
			vs->isa = BPF_CORE_READ(ctx, isa);
			vs->flags = 0;
		} else {
			struct mg_vcpu_state n = {
				.exit_ts = ev.now,
				.reason = BPF_CORE_READ(ctx, exit_reason),
				.vcpu_id = BPF_CORE_READ(ctx, vcpu_id),
				.isa = BPF_CORE_READ(ctx, isa),
			};

			bpf_map_update_elem(&vcpu_state, &ev.tid, &n, BPF_ANY);
		}
	}
	if (!probe_ctl[MAGNET_P_KVM_EXIT].mode)
		return 0;
	ev.aid = ((__u64)ev.tgid << 32) | BPF_CORE_READ(ctx, vcpu_id);
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_KVM_EXIT, sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->vcpu_id = BPF_CORE_READ(ctx, vcpu_id);
	p->exit_reason = BPF_CORE_READ(ctx, exit_reason);
	p->isa = BPF_CORE_READ(ctx, isa);
	p->reserved = 0;
	p->guest_rip = BPF_CORE_READ(ctx, guest_rip);
	p->info1 = BPF_CORE_READ(ctx, info1);
	p->info2 = BPF_CORE_READ(ctx, info2);
	mg_submit(st, h);
	return 0;
}

SEC("tracepoint/kvm/kvm_entry")
int kvm_entry_tp(struct trace_event_raw_kvm_entry *ctx)
{
	struct magnet_probe_pcpu *st;
	struct magnet_kvm_entry *p;
	struct mg_vcpu_state *vs;
	struct magnet_hdr *h;
	struct mg_ev ev;
	__u64 exit_ns = 0;
	__u32 reason = 0, vcpu;
	__u16 isa = 0, flags = 0;

	if (!probe_ctl[MAGNET_P_KVM_ENTRY].mode)
		return 0;
	mg_ev_task(&ev, MAGNET_P_KVM_ENTRY, 0);
	ev.now = bpf_ktime_get_ns();
	vcpu = BPF_CORE_READ(ctx, vcpu_id);
	vs = bpf_map_lookup_elem(&vcpu_state, &ev.tid);
	if (vs && vs->exit_ts && vs->exit_ts <= ev.now) {
		exit_ns = ev.now - vs->exit_ts;
		reason = vs->reason;
		isa = vs->isa;
		flags = vs->flags;
		vs->exit_ts = 0;
		vs->flags = 0;
	}
	if (exit_ns && mg_stats_take(MAGNET_P_KVM_ENTRY, ev.vm, ev.tgid)) {
		struct magnet_kvm_exit_key k = {
			.vm_id = ev.vm, .tgid = ev.tgid, .vcpu_id = vcpu,
			.reason = reason, .isa = isa,
		};

		mg_lat_add(&kvm_exit_stats, &k, exit_ns, flags & MAGNET_KVM_F_USERSPACE);
	}
	ev.aid = ((__u64)ev.tgid << 32) | vcpu;
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_KVM_ENTRY, sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->vcpu_id = vcpu;
	p->reserved = 0;
	p->guest_rip = BPF_CORE_READ(ctx, rip);
	p->exit_ns = exit_ns;
	p->exit_reason = reason;
	p->isa = isa;
	p->flags = flags;
	mg_submit(st, h);
	return 0;
}

SEC("tracepoint/kvm/kvm_userspace_exit")
int kvm_uexit_tp(struct trace_event_raw_kvm_userspace_exit *ctx)
{
	struct magnet_kvm_userspace_exit *p;
	struct magnet_probe_pcpu *st;
	struct mg_vcpu_state *vs;
	struct magnet_hdr *h;
	struct mg_ev ev;
	__u32 vcpu = 0xffffffff;

	if (!probe_ctl[MAGNET_P_KVM_USERSPACE_EXIT].mode && !probe_ctl[MAGNET_P_KVM_ENTRY].mode)
		return 0;
	mg_ev_task(&ev, MAGNET_P_KVM_USERSPACE_EXIT, 0);
	vs = bpf_map_lookup_elem(&vcpu_state, &ev.tid);
	if (vs) {
		vs->flags |= MAGNET_KVM_F_USERSPACE;
		vcpu = vs->vcpu_id;
	}
	if (!probe_ctl[MAGNET_P_KVM_USERSPACE_EXIT].mode)
		return 0;
	ev.aid = ((__u64)ev.tgid << 32) | vcpu;
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_KVM_USERSPACE_EXIT, sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->vcpu_id = vcpu;
	p->reason = BPF_CORE_READ(ctx, reason);
	p->error = BPF_CORE_READ(ctx, errno);
	p->reserved = 0;
	mg_submit(st, h);
	return 0;
}

SEC("tracepoint/kvm/kvm_vcpu_wakeup")
int kvm_wakeup_tp(struct trace_event_raw_kvm_vcpu_wakeup *ctx)
{
	struct magnet_probe_pcpu *st;
	struct magnet_kvm_wakeup *p;
	struct magnet_hdr *h;
	struct mg_ev ev;
	__u64 ns;
	__u32 vcpu;
	__u8 waited;

	if (!probe_ctl[MAGNET_P_KVM_WAKEUP].mode)
		return 0;
	mg_ev_task(&ev, MAGNET_P_KVM_WAKEUP, 0);
	vcpu = mg_vcpu_of(ev.tid);
	ns = BPF_CORE_READ(ctx, ns);
	waited = BPF_CORE_READ(ctx, waited);
	if (mg_stats_take(MAGNET_P_KVM_WAKEUP, ev.vm, ev.tgid)) {
		struct magnet_kvm_exit_key k = {
			.vm_id = ev.vm, .tgid = ev.tgid, .vcpu_id = vcpu,
			.reason = waited ? MAGNET_KVM_REASON_HALT_WAITED
					 : MAGNET_KVM_REASON_HALT_POLLED,
		};

		mg_lat_add(&kvm_exit_stats, &k, ns, 0);
	}
	ev.aid = ((__u64)ev.tgid << 32) | vcpu;
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_KVM_WAKEUP, sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->halt_ns = ns;
	p->vcpu_id = vcpu;
	p->waited = waited;
	p->valid = BPF_CORE_READ(ctx, valid);
	p->reserved = 0;
	mg_submit(st, h);
	return 0;
}

SEC("tracepoint/kvm/kvm_halt_poll_ns")
int kvm_halt_poll_tp(struct trace_event_raw_kvm_halt_poll_ns *ctx)
{
	struct magnet_kvm_halt_poll *p;
	struct magnet_probe_pcpu *st;
	struct magnet_hdr *h;
	struct mg_ev ev;
	__u32 vcpu;

	if (!probe_ctl[MAGNET_P_KVM_HALT_POLL].mode)
		return 0;
	mg_ev_task(&ev, MAGNET_P_KVM_HALT_POLL, 0);
	vcpu = BPF_CORE_READ(ctx, vcpu_id);
	ev.aid = ((__u64)ev.tgid << 32) | vcpu;
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_KVM_HALT_POLL, sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->vcpu_id = vcpu;
	p->new_ns = BPF_CORE_READ(ctx, new);
	p->old_ns = BPF_CORE_READ(ctx, old);
	p->grow = BPF_CORE_READ(ctx, grow);
	p->reserved[0] = p->reserved[1] = p->reserved[2] = 0;
	mg_submit(st, h);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Drops: kfree_skb with a drop reason (5.17+).  A drop belongs to a VM when
 * it happens on the VM's tap (e.g. tun_net_xmit with a full ring: the guest
 * does not take its packets fast enough). */

/* The packets of VMs on their way through the host (see "Host-side
 * queueing" below): a drop of one of them is that VM's, whatever device
 * dropped it. */
struct mg_queued {
	__u64 ts;
	__u64 head;
	__u64 flow;
	__u32 len;
	__u32 ifindex;
	__u32 netns; /* of the device ifindex (see mg_dev_netns) */
	__u32 vm;
	__u16 ip_id;
	__u16 rflags; /* MAGNET_RF_TCP / _UDP / _IPV6 of the packet */
	__u16 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* skb address */
	__type(value, struct mg_queued);
} queued_tx SEC(".maps"), queued_rx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, MAGNET_VMNET_QUEUE_ENTRIES);
	__type(key, struct magnet_vmnet_queue_key);
	__type(value, struct magnet_lat_stat);
} vmnet_queue_stats SEC(".maps");

static __always_inline __u64 mg_l3_flow(struct sk_buff *skb, const void *l3, bool direct,
					__u16 *ip_id, __u16 *proto_flags);

#define MG_QUEUE_MAX_NS 1000000000ULL

/* Whether @skb still carries the packet @q was recorded for: the same data
 * buffer, the same flow and IPv4 id (the skb cache hands a freed skb and
 * its buffer to later packets), and not older than MG_QUEUE_MAX_NS. */
static __always_inline bool mg_same_packet(struct sk_buff *skb, const struct mg_queued *q,
					   bool direct)
{
	const void *l3 = MG_RD(direct, skb, head) + MG_RD(direct, skb, network_header);
	__u64 now = bpf_ktime_get_ns();
	__u16 ip_id = 0, pf = 0;

	if (q->head != mg_ptr_bits(MG_RD(direct, skb, head)) || now < q->ts ||
	    now - q->ts > MG_QUEUE_MAX_NS)
		return false;
	return mg_l3_flow(skb, l3, direct, &ip_id, &pf) == q->flow && ip_id == q->ip_id;
}

/* Whether @skb was addressed to one host (PACKET_HOST, 0) rather than to a
 * group or to all (PACKET_MULTICAST, PACKET_BROADCAST) or to another host.
 * The bridge floods a VM's multicast and broadcast frames as copies and
 * delivers the original to the host's own stack, which discards what it
 * did not join (ip6_mc_input): that is filtering, not a loss on the VM's
 * path, so drops past the tap are attributed to a VM for unicast only. */
static __always_inline bool mg_unicast(struct sk_buff *skb, bool direct)
{
	__u8 t = direct ? BPF_CORE_READ_BITFIELD(skb, pkt_type)
			: BPF_CORE_READ_BITFIELD_PROBED(skb, pkt_type);

	return t == 0;
}

static __always_inline int mg_drop_event(struct sk_buff *skb, void *location,
					 __u32 reason, bool direct)
{
	struct magnet_probe_pcpu *st;
	struct magnet_net_drop *p;
	struct net_device *dev;
	struct magnet_hdr *h;
	struct mg_ev ev;
	__u16 rflags = 0;
	__u32 ifindex;

	if (!probe_ctl[MAGNET_P_NET_DROP].mode || !skb)
		return 0;
	dev = MG_RD(direct, skb, dev);
	ifindex = dev ? MG_RD(direct, dev, ifindex) : 0;
	mg_ev_task(&ev, MAGNET_P_NET_DROP, MG_RD(direct, skb, len));
	/* Mostly softirq context: the current task is whoever was interrupted
	 * (possibly the recorder itself, whose events are skipped), so drops
	 * belong to no task, like device records. */
	ev.tgid = ev.tid = 0;
	ev.vm = mg_vm_of_dev(dev, ifindex, direct);
	if (!ev.vm && filter_ctl.vm_tagging) {
		/* A VM's packet dropped past its tap (a shaped link's qdisc,
		 * the bridge): still the VM's, and its protocol is known. */
		__u64 key = mg_ptr_bits(skb);
		struct mg_queued *q = bpf_map_lookup_elem(&queued_tx, &key);

		if (q && mg_unicast(skb, direct) && mg_same_packet(skb, q, direct)) {
			ev.vm = q->vm;
			rflags = q->rflags;
		}
		if (q)
			bpf_map_delete_elem(&queued_tx, &key);
	}
	ev.aid = mg_id(skb);
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, MAGNET_EV_NET_DROP, sizeof(*p), rflags);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->location = mg_ptr_bits(location);
	p->reason = reason;
	p->ifindex = ifindex;
	p->protocol = bpf_ntohs(MG_RD(direct, skb, protocol));
	p->reserved = 0;
	p->reserved2 = 0;
	mg_submit(st, h);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(drop_btf, struct sk_buff *skb, void *location, int reason)
{
	return mg_drop_event(skb, location, reason, true);
}

SEC("raw_tp/kfree_skb")
int BPF_PROG(drop_raw, struct sk_buff *skb, void *location, int reason)
{
	return mg_drop_event(skb, location, reason, false);
}

/* ------------------------------------------------------------------ */
/* Host-side queueing of VM packets: the time from the device a packet
 * enters the host through (netif_receive_skb) to the device that transmits
 * it (net_dev_start_xmit), keyed by the sk_buff.  tx: entered on a VM's tap,
 * leaves on another device; rx: entered on a non-tap device, leaves on a
 * VM's tap.  An entry is trusted only if the same skb still has the same
 * data buffer and carries the same packet (flow id and IPv4 id), and is
 * younger than MG_QUEUE_MAX_NS.  A packet delivered locally leaves its
 * entry behind, and the skb cache can hand the same skb and buffer to a
 * later packet: without the packet check, that one was timed from the
 * old packet's arrival (a 21 ms "delay" in the direct lab).  (skb->len
 * differs by the link-layer header the forwarding path pushes back, so it
 * cannot be compared.)                                                 */


/* Flow id and IPv4 id of the packet whose L3 header is at @l3. */
static __always_inline __u64 mg_l3_flow(struct sk_buff *skb, const void *l3, bool direct,
					__u16 *ip_id, __u16 *proto_flags)
{
	struct magnet_pkt pkt = {};
	__u8 raw[MG_HDR_BUF] = {};
	__u16 rflags = 0;
	__u16 proto = bpf_ntohs(MG_RD(direct, skb, protocol));

	if (proto != MG_ETH_P_IP && proto != MG_ETH_P_IPV6)
		return 0;
	if (bpf_probe_read_kernel(raw, 64, l3))
		return 0;
	mg_parse_l3(raw, 64, &pkt, &rflags, MG_SZ_SKB_LEN);
	*ip_id = pkt.ip_id;
	*proto_flags = (rflags & MAGNET_RF_IPV6) | (pkt.protocol == 6 ? MAGNET_RF_TCP : 0) |
		       (pkt.protocol == 17 ? MAGNET_RF_UDP : 0);
	return magnet_flow_id(pkt.saddr, pkt.daddr, pkt.sport, pkt.dport, pkt.protocol);
}

static __always_inline int mg_queue_in(struct sk_buff *skb, bool tx, bool direct)
{
	__u32 slot = tx ? MAGNET_P_VMNET_QUEUE_TX : MAGNET_P_VMNET_QUEUE_RX;
	struct net_device *dev;
	struct mg_queued q = {};
	__u64 key;

	if (!probe_ctl[slot].mode || !filter_ctl.vm_tagging || !skb)
		return 0;
	dev = MG_RD(direct, skb, dev);
	q.ifindex = dev ? MG_RD(direct, dev, ifindex) : 0;
	q.netns = mg_dev_netns(dev, direct);
	q.vm = mg_vm_of_netdev(q.netns, q.ifindex);
	if (tx != (q.vm != 0))
		return 0; /* tx starts on a tap, rx anywhere else */
	q.ts = bpf_ktime_get_ns();
	q.head = mg_ptr_bits(MG_RD(direct, skb, head));
	q.len = MG_RD(direct, skb, len);
	/* at netif_receive_skb, skb->data is the L3 header */
	q.flow = mg_l3_flow(skb, MG_RD(direct, skb, data), direct, &q.ip_id, &q.rflags);
	key = mg_ptr_bits(skb);
	bpf_map_update_elem(tx ? (void *)&queued_tx : (void *)&queued_rx, &key, &q, BPF_ANY);
	return 0;
}

static __always_inline int mg_queue_out(struct sk_buff *skb, struct net_device *dev,
					bool tx, bool direct)
{
	__u32 slot = tx ? MAGNET_P_VMNET_QUEUE_TX : MAGNET_P_VMNET_QUEUE_RX;
	void *map = tx ? (void *)&queued_tx : (void *)&queued_rx;
	struct magnet_vmnet_queue *p;
	struct magnet_probe_pcpu *st;
	struct magnet_hdr *h;
	struct mg_queued *q;
	struct mg_ev ev;
	__u32 out_if, out_ns, vm;
	__u64 key, delay;

	if (!probe_ctl[slot].mode || !filter_ctl.vm_tagging || !skb || !dev)
		return 0;
	key = mg_ptr_bits(skb);
	q = bpf_map_lookup_elem(map, &key);
	if (!q)
		return 0;
	out_if = MG_RD(direct, dev, ifindex);
	out_ns = mg_dev_netns(dev, direct);
	if (out_if == q->ifindex && out_ns == q->netns)
		return 0; /* not forwarded (yet) */
	vm = tx ? q->vm : mg_vm_of_netdev(out_ns, out_if);
	mg_ev_task(&ev, slot, MG_RD(direct, skb, len));
	ev.now = bpf_ktime_get_ns();
	ev.tgid = ev.tid = 0; /* softirq: no task (see mg_drop_event) */
	if (!vm || q->head != mg_ptr_bits(MG_RD(direct, skb, head)) ||
	    ev.now < q->ts || ev.now - q->ts > MG_QUEUE_MAX_NS) {
		bpf_map_delete_elem(map, &key);
		return 0;
	}
	{
		/* The same packet?  At xmit skb->data is the link-layer header;
		 * network_header was set on receive (or by the IP layer). */
		__u16 ip_id = 0, pf = 0;
		const void *l3 = MG_RD(direct, skb, head) + MG_RD(direct, skb, network_header);

		if (mg_l3_flow(skb, l3, direct, &ip_id, &pf) != q->flow || ip_id != q->ip_id) {
			bpf_map_delete_elem(map, &key);
			return 0;
		}
	}
	delay = ev.now - q->ts;
	ev.vm = vm;
	ev.size = q->len; /* as received: without the link-layer header */
	ev.aid = q->flow;
	if (mg_stats_take(slot, vm, ev.tgid)) {
		struct magnet_vmnet_queue_key k = { .vm_id = vm, .dir = tx ? 0 : 1 };

		mg_lat_add(&vmnet_queue_stats, &k, delay, 0);
	}
	st = mg_admit(&ev);
	if (st) {
		h = mg_reserve(st, &ev, tx ? MAGNET_EV_VMNET_QUEUE_TX : MAGNET_EV_VMNET_QUEUE_RX,
			       sizeof(*p), q->rflags);
		if (h) {
			p = (void *)(h + 1);
			p->delay_ns = delay;
			p->in_ifindex = q->ifindex;
			p->out_ifindex = out_if;
			p->ip_id = q->ip_id;
			p->reserved = 0;
			p->reserved2 = 0;
			mg_submit(st, h);
		}
	}
	bpf_map_delete_elem(map, &key);
	return 0;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(queue_tx_in_btf, struct sk_buff *skb)
{
	return mg_queue_in(skb, true, true);
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(queue_tx_out_btf, struct sk_buff *skb, struct net_device *dev)
{
	return mg_queue_out(skb, dev, true, true);
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(queue_rx_in_btf, struct sk_buff *skb)
{
	return mg_queue_in(skb, false, true);
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(queue_rx_out_btf, struct sk_buff *skb, struct net_device *dev)
{
	return mg_queue_out(skb, dev, false, true);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(queue_tx_in_raw, struct sk_buff *skb)
{
	return mg_queue_in(skb, true, false);
}

SEC("raw_tp/net_dev_start_xmit")
int BPF_PROG(queue_tx_out_raw, struct sk_buff *skb, struct net_device *dev)
{
	return mg_queue_out(skb, dev, true, false);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(queue_rx_in_raw, struct sk_buff *skb)
{
	return mg_queue_in(skb, false, false);
}

SEC("raw_tp/net_dev_start_xmit")
int BPF_PROG(queue_rx_out_raw, struct sk_buff *skb, struct net_device *dev)
{
	return mg_queue_out(skb, dev, false, false);
}

/* ------------------------------------------------------------------ */
/* vhost-net: one run of handle_tx / handle_rx in the VM's vhost worker
 * (a "vhost-<qemu pid>" kernel thread before 6.4, a QEMU thread since),
 * where kprobes or fentry exist (module functions, no tracepoints).     */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* tid << 1 | rx */
	__type(value, __u64);
} vhost_start SEC(".maps");

static __always_inline int mg_vhost_enter(bool rx)
{
	__u32 slot = rx ? MAGNET_P_VMNET_VHOST_RX : MAGNET_P_VMNET_VHOST_TX;
	__u64 key, now;

	if (!probe_ctl[slot].mode)
		return 0;
	key = (bpf_get_current_pid_tgid() & 0xffffffff) << 1 | rx;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&vhost_start, &key, &now, BPF_ANY);
	return 0;
}

static __always_inline int mg_vhost_exit(bool rx)
{
	__u32 slot = rx ? MAGNET_P_VMNET_VHOST_RX : MAGNET_P_VMNET_VHOST_TX;
	struct magnet_vmnet_vhost *p;
	struct magnet_probe_pcpu *st;
	struct magnet_hdr *h;
	struct mg_ev ev;
	__u64 key, *t0, dur;

	if (!probe_ctl[slot].mode)
		return 0;
	key = (bpf_get_current_pid_tgid() & 0xffffffff) << 1 | rx;
	t0 = bpf_map_lookup_elem(&vhost_start, &key);
	if (!t0)
		return 0;
	mg_ev_task(&ev, slot, 0);
	ev.now = bpf_ktime_get_ns();
	dur = ev.now >= *t0 ? ev.now - *t0 : 0;
	bpf_map_delete_elem(&vhost_start, &key);
	ev.aid = ev.tid;
	st = mg_admit(&ev);
	if (!st)
		return 0;
	h = mg_reserve(st, &ev, rx ? MAGNET_EV_VMNET_VHOST_RX : MAGNET_EV_VMNET_VHOST_TX,
		       sizeof(*p), 0);
	if (!h)
		return 0;
	p = (void *)(h + 1);
	p->duration_ns = dur;
	mg_submit(st, h);
	return 0;
}

SEC("fentry/handle_tx")
int BPF_PROG(vhost_tx_fentry)
{
	return mg_vhost_enter(false);
}

SEC("fexit/handle_tx")
int BPF_PROG(vhost_tx_fexit)
{
	return mg_vhost_exit(false);
}

SEC("fentry/handle_rx")
int BPF_PROG(vhost_rx_fentry)
{
	return mg_vhost_enter(true);
}

SEC("fexit/handle_rx")
int BPF_PROG(vhost_rx_fexit)
{
	return mg_vhost_exit(true);
}

SEC("kprobe/handle_tx")
int BPF_KPROBE(vhost_tx_kprobe)
{
	return mg_vhost_enter(false);
}

SEC("kretprobe/handle_tx")
int BPF_KRETPROBE(vhost_tx_kretprobe)
{
	return mg_vhost_exit(false);
}

SEC("kprobe/handle_rx")
int BPF_KPROBE(vhost_rx_kprobe)
{
	return mg_vhost_enter(true);
}

SEC("kretprobe/handle_rx")
int BPF_KRETPROBE(vhost_rx_kretprobe)
{
	return mg_vhost_exit(true);
}
