/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * magnet control ABI: the state user space writes into the BPF object at run
 * time (enable/disable, sampling, filters, VM tagging) and the counters it
 * reads back (aggregation, loss).  Shared by kmod/ and host/.
 *
 * Everything here can change while the probes run; nothing needs a reload.
 */
#ifndef MAGNET_PROTO_CONTROL_H
#define MAGNET_PROTO_CONTROL_H

#include "magnet/event.h"

/* Largest VM id the in-kernel aggregation tables index directly. */
#define MAGNET_MAX_VM_ID 255
#define MAGNET_MAX_CPUS 256

/* probe_ctl[slot].mode bits */
enum magnet_probe_mode {
	MAGNET_MODE_STREAM = 1 << 0,    /* copy records to the ring buffer */
	MAGNET_MODE_AGGREGATE = 1 << 1, /* count events/bytes per VM in kernel */
	MAGNET_MODE_VM_ONLY = 1 << 2,   /* drop events not attributed to a VM */
};

/* One per probe slot, in the object's .data (mmapped by user space). */
struct magnet_probe_ctl {
	__u32 mode;         /* 0 = disabled */
	__u32 sample_every; /* 1-in-N per CPU; 0 or 1 = every event */
	__u64 sample_ns;    /* at most one record per CPU per this many ns; 0 = off */
};

/* filter_ctl.active bits: which filter sets are in force (AND of kinds). */
enum magnet_filter_kind {
	MAGNET_FK_CPU = 1 << 0,
	MAGNET_FK_TGID = 1 << 1,
	MAGNET_FK_CGROUP = 1 << 2,
	MAGNET_FK_VM = 1 << 3,
	MAGNET_FK_ABSTRACT = 1 << 4,
};

/*
 * Global knobs in .data.  Each active kind admits a record only if its value
 * is a key of the matching map (filter_tgid, filter_cgroup, filter_vm,
 * filter_abstract) or, for CPUs, its bit is set in cpu_mask.
 */
struct magnet_filter_ctl {
	__u32 active;
	__u32 vm_tagging;  /* non-zero when any vm_by_* map has entries */
	__u64 cpu_mask[MAGNET_MAX_CPUS / 64];
	/* Ring-buffer wakeup: wake the consumer only when this many bytes are
	 * waiting (MAGNeT's read watermark); the consumer also polls with a
	 * timeout, so nothing waits longer than that. */
	__u64 wakeup_watermark;
	/* Per-VM stream quota: a token bucket per VM and CPU (vm_pcpu) lets a
	 * VM's events onto the stream at most one per vm_cost_ns on average,
	 * with bursts of up to vm_burst_ns worth of them; an event over it is
	 * lost, counted in the VM's quota_lost (and total_dropped), which the
	 * consumer reports as a stream.lost record of that VM (reason
	 * MAGNET_LOST_VM_QUOTA).  Aggregates still count it.  0 = no quota.
	 * Events of no VM have none. */
	__u64 vm_cost_ns;
	__u64 vm_burst_ns;
};

/* Per-CPU state and loss counters of one VM (percpu array vm_pcpu, index =
 * VM id): what the VM's own view reports as its lost events. */
struct magnet_vm_pcpu {
	__u64 credit_ns;  /* the bucket, in ns of quota (at most vm_burst_ns) */
	__u64 last_ns;    /* when it was last filled */
	__u64 quota_lost; /* events refused: over the VM's quota */
	__u64 ring_lost;  /* records lost: ring buffer full */
};

/* Per-CPU, per-probe state and counters (percpu array, index = slot). */
struct magnet_probe_pcpu {
	__u64 seen;          /* events that passed the filters */
	__u64 emitted;       /* records reserved in the ring buffer */
	__u64 dropped;       /* records lost: ring buffer full */
	__u64 first_drop_ns; /* first drop since the consumer last acknowledged */
	__u64 last_drop_ns;
	__u64 last_emit_ns;  /* for time-based sampling */
	__u64 sample_count;  /* for 1-in-N sampling */
	__u64 reserved;
};

/* In-kernel aggregation: per-CPU counters, index = slot * (MAX_VM_ID+1) + vm_id. */
struct magnet_agg {
	__u64 events;
	__u64 bytes;
};
#define MAGNET_AGG_ENTRIES (MAGNET_NPROBES * (MAGNET_MAX_VM_ID + 1))

/*
 * Latency statistics kept in kernel (per-CPU hash maps, summed by user
 * space): count, total, max and a log2 histogram, bucket i holding values in
 * [2^i, 2^(i+1)) ns (bucket 0 also holds 0; the last one everything above).
 */
#define MAGNET_LAT_BUCKETS 32
struct magnet_lat_stat {
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
	__u64 aux; /* kvm_exit_stats: exits that went out to userspace */
	__u64 hist[MAGNET_LAT_BUCKETS];
};

/* kvm_exit_stats map: exit -> entry time per VM, QEMU process, vCPU and exit
 * reason, updated by kvm.entry in AGGREGATE mode.  The kvm.wakeup probe in
 * AGGREGATE mode adds halt times under the two pseudo reasons below. */
struct magnet_kvm_exit_key {
	__u32 vm_id;
	__u32 tgid;
	__u32 vcpu_id;
	__u32 reason; /* VMX/SVM exit code (isa in magnet_kvm_entry), or below */
	__u32 isa;    /* 1 = VMX, 2 = SVM, 0 for the pseudo reasons */
};
#define MAGNET_KVM_REASON_HALT_POLLED 0xffff0001u /* halt ended while polling */
#define MAGNET_KVM_REASON_HALT_WAITED 0xffff0002u /* halt ended after sleeping */
#define MAGNET_KVM_STATS_ENTRIES 16384

/* vmnet_queue_stats map: host queueing delay per VM and direction,
 * updated by vmnet.queue.tx/rx in AGGREGATE mode. */
struct magnet_vmnet_queue_key {
	__u32 vm_id;
	__u32 dir; /* 0 = tx (guest -> wire), 1 = rx (wire -> guest) */
};
#define MAGNET_VMNET_QUEUE_ENTRIES 1024

/*
 * vm_by_netdev map: a VM's network device (its tap) -> VM id, written by
 * the host registry.  An ifindex is only unique inside one network
 * namespace, so the key also names the namespace: the inode number of its
 * nsfs file (stat("/proc/PID/ns/net").st_ino, the kernel's
 * net->ns.inum), which every probe can read from the device (dev_net) or,
 * in cgroup_skb programs, from the packet's socket (sock_net).  A probe
 * that cannot learn the namespace does not tag: netns_ino 0 is never a key.
 */
struct magnet_vm_netdev_key {
	__u32 netns_ino;
	__u32 ifindex;
};

MAGNET_ASSERT_SIZE(magnet_probe_ctl, 16);
MAGNET_ASSERT_SIZE(magnet_lat_stat, 288);
MAGNET_ASSERT_SIZE(magnet_kvm_exit_key, 20);
MAGNET_ASSERT_SIZE(magnet_vmnet_queue_key, 8);
MAGNET_ASSERT_SIZE(magnet_vm_netdev_key, 8);
MAGNET_ASSERT_SIZE(magnet_probe_pcpu, 64);
MAGNET_ASSERT_SIZE(magnet_agg, 16);
MAGNET_ASSERT_SIZE(magnet_vm_pcpu, 32);

#endif /* MAGNET_PROTO_CONTROL_H */
