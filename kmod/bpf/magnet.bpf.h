/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Shared BPF machinery of the capture probes: control state, filters,
 * sampling, in-kernel aggregation, VM tagging and the ring-buffer path with
 * loss accounting.  Every probe goes through mg_admit() then mg_reserve() /
 * mg_submit(), so the policy lives in one place.
 */
#ifndef MAGNET_BPF_H
#define MAGNET_BPF_H

#include "magnet/control.h"

#define MG_AF_INET 2
#define MG_AF_INET6 10
#define MG_ETH_P_IP 0x0800
#define MG_ETH_P_IPV6 0x86DD
#define MG_IPPROTO_TCP 6
#define MG_IPPROTO_UDP 17

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader before load. */
const volatile __u64 id_key = 0;     /* scrambles kernel pointers into ids */
const volatile __u32 self_tgid = 0;  /* the recorder itself: never traced */
/* cgroup_skb programs may call bpf_get_current_pid_tgid (probed by the
 * loader; a constant false removes the call before the verifier sees it). */
const volatile bool cgskb_has_task = false;
/* The wakeup watermark is checked on every record whose per-probe, per-CPU
 * count of emitted records is a multiple of this mask + 1 (a power of two
 * chosen by the loader so that the records in between cannot fill the
 * ring; 0 on small rings: every record checks). */
const volatile __u32 wakeup_check_mask = 0;
/* bpf_rdonly_cast(p, 0) gives read-only, fault-tolerant access to any
 * kernel address with plain loads (6.17+); the loader probes it.  The
 * kfunc is weak: on kernels without it the call stays unresolved and,
 * has_rdonly_mem being a constant false, the verifier drops it as dead
 * code. */
const volatile bool has_rdonly_mem = false;

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/* Run-time control, mmapped by user space (skel->bss). */
struct magnet_probe_ctl probe_ctl[MAGNET_NPROBES];
struct magnet_filter_ctl filter_ctl;
/* Consumer acknowledgement of drops per probe and CPU: a drop that finds
 * dropped == drop_ack starts a new loss interval (first_drop_ns). */
__u64 drop_ack[MAGNET_NPROBES][MAGNET_MAX_CPUS];
/* Cheap change detector for the consumer: any drop bumps it. */
__u64 total_dropped;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by the loader */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAGNET_NPROBES);
	__type(key, __u32);
	__type(value, struct magnet_probe_pcpu);
} probe_pcpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAGNET_AGG_ENTRIES);
	__type(key, __u32);
	__type(value, struct magnet_agg);
} agg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAGNET_MAX_VM_ID + 1);
	__type(key, __u32);
	__type(value, struct magnet_vm_pcpu);
} vm_pcpu SEC(".maps");

#define MG_SET_MAP(name, ktype)                       \
	struct {                                      \
		__uint(type, BPF_MAP_TYPE_HASH);      \
		__uint(max_entries, 4096);            \
		__type(key, ktype);                   \
		__type(value, __u8);                  \
	} name SEC(".maps")

MG_SET_MAP(filter_tgid, __u32);
MG_SET_MAP(filter_cgroup, __u64);
MG_SET_MAP(filter_vm, __u32);
MG_SET_MAP(filter_abstract, __u64);

/* VM tagging, written by the host registry (issue: VM awareness). */
#define MG_VM_MAP(name, ktype)                        \
	struct {                                      \
		__uint(type, BPF_MAP_TYPE_HASH);      \
		__uint(max_entries, 65536);           \
		__type(key, ktype);                   \
		__type(value, __u32);                 \
	} name SEC(".maps")

MG_VM_MAP(vm_by_tgid, __u32);
MG_VM_MAP(vm_by_netdev, struct magnet_vm_netdev_key); /* (netns, ifindex) */
MG_VM_MAP(vm_by_cgroup, __u64);

/* BTF only describes types that globals, maps or signatures reference; this
 * one-entry map keeps every record layout in the object's BTF so the layout
 * test can compare it with the C++ view of proto/.  Never read or written.
 * (A map rather than a global: the skeleton would expose a global's type.) */
struct mg_btf_anchor {
	struct magnet_hdr hdr;
	struct magnet_sock sock;
	struct magnet_pkt pkt;
	struct magnet_tcp_state tcp_state;
	struct magnet_sched_switch sched_switch;
	struct magnet_sched_wakeup sched_wakeup;
	struct magnet_proc_fork proc_fork;
	struct magnet_proc_exit proc_exit;
	struct magnet_blk blk;
	struct magnet_kvm_exit kvm_exit;
	struct magnet_kvm_entry kvm_entry;
	struct magnet_kvm_userspace_exit kvm_userspace_exit;
	struct magnet_kvm_wakeup kvm_wakeup;
	struct magnet_kvm_halt_poll kvm_halt_poll;
	struct magnet_net_drop net_drop;
	struct magnet_vmnet_queue vmnet_queue;
	struct magnet_vmnet_vhost vmnet_vhost;
	struct magnet_pkt_snap pkt_snap;
	struct magnet_lat_stat lat_stat;
	struct magnet_kvm_exit_key kvm_exit_key;
	struct magnet_vmnet_queue_key vmnet_queue_key;
	struct magnet_vm_netdev_key vm_netdev_key;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mg_btf_anchor);
} mg_btf_types SEC(".maps");

/* The bits of a kernel pointer as a plain number: the verifier forbids
 * arithmetic on BTF-typed (trusted) pointers, so read them back from the
 * stack. */
static __always_inline __u64 mg_ptr_bits(const void *p)
{
	__u64 v = 0;

	bpf_probe_read_kernel(&v, sizeof(v), &p);
	return v;
}

/* @len bytes (a constant multiple of 4) from readable memory @src into @dst
 * (8-byte aligned), with 8-byte loads and a 4-byte tail at constant
 * offsets. */
static __always_inline void mg_copy_words(__u8 *dst, const __u8 *src, __u32 len)
{
	__u32 i;

#pragma unroll
	for (i = 0; i + 8 <= len; i += 8)
		*(__u64 *)(dst + i) = *(const __u64 *)(src + i);
	if (len & 4)
		*(__u32 *)(dst + i) = *(const __u32 *)(src + i);
}

/* @len bytes (a constant multiple of 4) at kernel address @src into @dst
 * (8-byte aligned).  With has_rdonly_mem these are inline loads instead of a
 * bpf_probe_read_kernel call; a load that faults reads as zero rather than
 * failing the copy, which the header parser treats as a packet it cannot
 * parse. */
static __always_inline int mg_read_kernel(__u8 *dst, const void *src, __u32 len)
{
	if (!has_rdonly_mem)
		return bpf_probe_read_kernel(dst, len, src);
	mg_copy_words(dst, bpf_rdonly_cast(src, 0), len);
	return 0;
}

static __always_inline __u64 mg_id(const void *p)
{
	return p ? (mg_ptr_bits(p) ^ id_key) : 0;
}

static __always_inline __u32 mg_vm_of_task(__u32 tgid, __u64 cgroup)
{
	__u32 *vm;

	if (!filter_ctl.vm_tagging)
		return 0;
	vm = bpf_map_lookup_elem(&vm_by_tgid, &tgid);
	if (!vm && cgroup)
		vm = bpf_map_lookup_elem(&vm_by_cgroup, &cgroup);
	return vm ? *vm : 0;
}

/* The VM whose device is @ifindex in the network namespace @netns_ino (see
 * struct magnet_vm_netdev_key).  A probe that could not learn the namespace
 * passes 0 and gets no VM: the ifindex alone could be another namespace's
 * device. */
static __always_inline __u32 mg_vm_of_netdev(__u32 netns_ino, __u32 ifindex)
{
	struct magnet_vm_netdev_key k = { .netns_ino = netns_ino, .ifindex = ifindex };
	__u32 *vm;

	if (!filter_ctl.vm_tagging || !ifindex || !netns_ino)
		return 0;
	vm = bpf_map_lookup_elem(&vm_by_netdev, &k);
	return vm ? *vm : 0;
}

/* What a probe knows about an event before it decides to record it. */
struct mg_ev {
	__u64 now; /* 0 until the event is streamed (see mg_admit) */
	__u64 aid;
	__u64 cgroup; /* 0 when the program type cannot know it */
	__u32 tgid;
	__u32 tid;
	__u32 vm;
	__u32 cpu;
	__s32 size;
	__u32 slot;
	__u16 flags; /* MAGNET_RF_* */
};

/* Counts an admitted event: seen, and the in-kernel aggregate when the
 * probe aggregates.  Returns the per-CPU probe state. */
static __always_inline struct magnet_probe_pcpu *mg_count(__u32 slot, __u32 mode, __u32 vm,
							  __s32 size)
{
	struct magnet_probe_pcpu *st;
	struct magnet_agg *a;
	__u32 idx;

	st = bpf_map_lookup_elem(&probe_pcpu, &slot);
	if (!st)
		return NULL;
	st->seen++;
	if (mode & MAGNET_MODE_AGGREGATE) {
		idx = slot * (MAGNET_MAX_VM_ID + 1) + (vm & MAGNET_MAX_VM_ID);
		a = bpf_map_lookup_elem(&agg, &idx);
		if (a) {
			a->events++;
			if (size > 0)
				a->bytes += size;
		}
	}
	return st;
}

/* Aggregation only, no filter: such an event is counted and nothing else
 * (no timestamp, no record, no filter lookup), which a probe can do before
 * it gathers anything else. */
static __always_inline bool mg_count_only(__u32 mode)
{
	return mode == MAGNET_MODE_AGGREGATE && !filter_ctl.active;
}

static __always_inline void mg_count_drop(struct magnet_probe_pcpu *st,
					  struct mg_ev *ev)
{
	__u32 slot = ev->slot, cpu = ev->cpu;

	if (slot < MAGNET_NPROBES && cpu < MAGNET_MAX_CPUS &&
	    st->dropped == drop_ack[slot][cpu])
		st->first_drop_ns = ev->now;
	st->dropped++;
	st->last_drop_ns = ev->now;
	__sync_fetch_and_add(&total_dropped, 1);
}

/* The VM's token bucket on this CPU (filter_ctl.vm_cost_ns): true when
 * the event fits in its quota; false counts it as the VM's quota loss. */
static __always_inline bool mg_vm_quota(struct mg_ev *ev)
{
	__u32 vm = ev->vm & MAGNET_MAX_VM_ID;
	__u64 cost = filter_ctl.vm_cost_ns, burst = filter_ctl.vm_burst_ns;
	struct magnet_vm_pcpu *q;
	__u64 credit;

	q = bpf_map_lookup_elem(&vm_pcpu, &vm);
	if (!q)
		return true;
	credit = q->credit_ns + (ev->now - q->last_ns);
	if (ev->now < q->last_ns || credit > burst)
		credit = burst;
	q->last_ns = ev->now;
	if (credit < cost) {
		q->credit_ns = credit;
		q->quota_lost++;
		__sync_fetch_and_add(&total_dropped, 1);
		return false;
	}
	q->credit_ns = credit - cost;
	return true;
}

/*
 * Filters, aggregation and sampling.  Returns the per-CPU probe state when
 * the event must be streamed, NULL otherwise (disabled, filtered out,
 * aggregation-only, or not sampled).  The timestamp is taken here, only for
 * events that go on to the stream: bpf_ktime_get_ns is one of the dearest
 * steps of a probe, and aggregation does not need it.
 */
static __always_inline struct magnet_probe_pcpu *mg_admit(struct mg_ev *ev)
{
	__u32 slot = ev->slot;
	struct magnet_probe_pcpu *st;
	struct magnet_probe_ctl *ctl;
	__u32 mode, active;

	if (slot >= MAGNET_NPROBES)
		return NULL;
	/* A pointer keeps its bounds across spills; a reloaded index does not. */
	ctl = &probe_ctl[slot];
	mode = ctl->mode;
	if (!mode)
		return NULL;
	if (self_tgid && ev->tgid == self_tgid)
		return NULL;
	if ((mode & MAGNET_MODE_VM_ONLY) && !ev->vm)
		return NULL;

	active = filter_ctl.active;
	if (active) {
		if (active & MAGNET_FK_CPU) {
			__u32 w = (ev->cpu / 64) & (MAGNET_MAX_CPUS / 64 - 1);

			if (!(filter_ctl.cpu_mask[w] & (1ULL << (ev->cpu % 64))))
				return NULL;
		}
		if ((active & MAGNET_FK_TGID) &&
		    !bpf_map_lookup_elem(&filter_tgid, &ev->tgid))
			return NULL;
		if ((active & MAGNET_FK_CGROUP) &&
		    !bpf_map_lookup_elem(&filter_cgroup, &ev->cgroup))
			return NULL;
		if ((active & MAGNET_FK_VM) &&
		    !bpf_map_lookup_elem(&filter_vm, &ev->vm))
			return NULL;
		if ((active & MAGNET_FK_ABSTRACT) &&
		    !bpf_map_lookup_elem(&filter_abstract, &ev->aid))
			return NULL;
	}

	st = mg_count(slot, mode, ev->vm, ev->size);
	if (!st)
		return NULL;
	if (!(mode & MAGNET_MODE_STREAM))
		return NULL;
	if (!ev->now)
		ev->now = bpf_ktime_get_ns();

	if (ctl->sample_every > 1) {
		if (++st->sample_count < ctl->sample_every)
			return NULL;
		st->sample_count = 0;
		ev->flags |= MAGNET_RF_SAMPLED;
	}
	if (ctl->sample_ns) {
		if (st->last_emit_ns && ev->now - st->last_emit_ns < ctl->sample_ns)
			return NULL;
		st->last_emit_ns = ev->now;
		ev->flags |= MAGNET_RF_SAMPLED;
	}
	if (ev->vm && filter_ctl.vm_cost_ns && !mg_vm_quota(ev))
		return NULL;
	return st;
}

/* A record the ring had no room for: the probe's loss, and its VM's. */
static __always_inline void mg_ring_lost(struct magnet_probe_pcpu *st, struct mg_ev *ev)
{
	mg_count_drop(st, ev);
	if (ev->vm) {
		__u32 vm = ev->vm & MAGNET_MAX_VM_ID;
		struct magnet_vm_pcpu *q = bpf_map_lookup_elem(&vm_pcpu, &vm);

		if (q)
			q->ring_lost++;
	}
}

static __always_inline void mg_fill_hdr(struct magnet_hdr *h, struct mg_ev *ev, __u16 type,
					__u32 plen, __u16 flags)
{
	h->ts_ns = ev->now;
	h->abstract_id = ev->aid;
	h->tgid = ev->tgid;
	h->tid = ev->tid;
	h->vm_id = ev->vm;
	h->size = ev->size;
	h->type = type;
	h->cpu = ev->cpu;
	h->len = sizeof(*h) + plen;
	h->flags = flags | ev->flags;
}

/* Reserve a record of sizeof(header) + plen bytes (plen: a multiple of 8). */
static __always_inline void *mg_reserve(struct magnet_probe_pcpu *st,
					struct mg_ev *ev, __u16 type,
					__u32 plen, __u16 flags)
{
	struct magnet_hdr *h;

	h = bpf_ringbuf_reserve(&events, sizeof(*h) + plen, 0);
	if (!h) {
		mg_ring_lost(st, ev);
		return NULL;
	}
	st->emitted++;
	mg_fill_hdr(h, ev, type, plen, flags);
	return h;
}

/* Batched wakeups: below the watermark nobody is woken (the consumer's poll
 * timeout picks the records up); at or above it every checking submit asks
 * for a wakeup.  The kernel coalesces pending wakeups (irq_work), so a slow
 * reader is not flooded, and no window can be jumped over by concurrent
 * CPUs.  Only one record in wakeup_check_mask + 1 per probe and CPU queries
 * the ring (a helper call that reads both positions): the wakeup comes at
 * most that many records late, far less than the room above the watermark. */
static __always_inline __u64 mg_wakeup_flags(struct magnet_probe_pcpu *st)
{
	if (!(st->emitted & wakeup_check_mask) &&
	    bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= filter_ctl.wakeup_watermark)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void mg_submit(struct magnet_probe_pcpu *st, void *rec)
{
	bpf_ringbuf_submit(rec, mg_wakeup_flags(st));
}

/* A record whose size is known only at run time (bpf_ringbuf_reserve wants
 * a constant): built at @h, then copied into the ring in one call, with the
 * same accounting as mg_reserve + mg_submit.  @plen: a multiple of 8. */
static __always_inline void mg_output(struct magnet_probe_pcpu *st, struct mg_ev *ev,
				      __u16 type, struct magnet_hdr *h, __u32 plen, __u16 flags)
{
	mg_fill_hdr(h, ev, type, plen, flags);
	st->emitted++;
	if (bpf_ringbuf_output(&events, h, sizeof(*h) + plen, mg_wakeup_flags(st))) {
		st->emitted--;
		mg_ring_lost(st, ev);
	}
}

static __always_inline void mg_ev_task(struct mg_ev *ev, __u32 slot, __s32 size)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	ev->slot = slot;
	ev->now = 0;
	ev->cpu = bpf_get_smp_processor_id();
	ev->tgid = pid_tgid >> 32;
	ev->tid = (__u32)pid_tgid;
	/* A helper call per event: only when a cgroup filter or cgroup-based
	 * VM tagging can use it. */
	ev->cgroup = (filter_ctl.active & MAGNET_FK_CGROUP) || filter_ctl.vm_tagging
			     ? bpf_get_current_cgroup_id()
			     : 0;
	ev->vm = mg_vm_of_task(ev->tgid, ev->cgroup);
	ev->size = size;
	ev->aid = 0;
	ev->flags = 0;
}

#endif /* MAGNET_BPF_H */
