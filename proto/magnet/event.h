/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * magnet event ABI: the one definition of every record that crosses the
 * kernel -> user boundary and that is stored in trace files.
 *
 * Included by the BPF programs (kmod/) and by C++ (host/, filters/, guest/).
 * Only fixed-width types; every struct is a multiple of 8 bytes and has no
 * implicit padding, so its layout is the same for clang -target bpf and g++.
 *
 * Format version and bump rules
 * -----------------------------
 *   MAGNET_FORMAT_MAJOR changes when an existing field moves, changes size or
 *   meaning, or an existing event id changes payload kind.  Readers refuse a
 *   trace with a different major.
 *   MAGNET_FORMAT_MINOR changes when something is *added*: a new event id, a
 *   new payload kind, or new fields appended at the end of a payload (records
 *   carry their length, so old readers skip the tail).  Readers accept any
 *   minor and treat unknown event ids as opaque records.
 *   Event ids are never reused, even when a probe is removed.
 *   Map keys and run-time control state (control.h) are not part of the
 *   trace format: they change together with the BPF object and the loader
 *   that ship in one binary, so changing them bumps nothing here (e.g. the
 *   VM tagging key by device became (netns, ifindex) without a bump).
 */
#ifndef MAGNET_PROTO_EVENT_H
#define MAGNET_PROTO_EVENT_H

#ifdef __BPF__
/* vmlinux.h already provides __u8 .. __u64 */
#else
#include <linux/types.h>
#endif

#define MAGNET_FORMAT_MAJOR 1
#define MAGNET_FORMAT_MINOR 3 /* 3: app.add, net.pkt.* */

/* Written natively into the sysinfo record: a reader that sees the bytes
 * reversed knows the trace was written on a machine of the other endianness. */
#define MAGNET_ENDIAN_MARKER 0x0102030405060708ULL

/* 8 bytes at the start of every trace file, before the sysinfo record. */
#define MAGNET_FILE_MAGIC "MAGNETTR"

/* All records are padded to this alignment; hdr.len includes the padding. */
#define MAGNET_RECORD_ALIGN 8
#define MAGNET_MAX_RECORD 4096

/*
 * Payload kinds: the shape of the bytes after the header.  Stable numbers.
 */
enum magnet_payload_kind {
	MAGNET_PL_NONE = 0,
	MAGNET_PL_SYSINFO = 1,
	MAGNET_PL_LOST = 2,
	MAGNET_PL_EVENT_DESC = 3,
	MAGNET_PL_SOCK = 4,
	MAGNET_PL_PKT = 5,
	MAGNET_PL_TCP_STATE = 6,
	MAGNET_PL_SCHED_SWITCH = 7,
	MAGNET_PL_SCHED_WAKEUP = 8,
	MAGNET_PL_PROC_FORK = 9,
	MAGNET_PL_PROC_EXIT = 10,
	MAGNET_PL_BLK = 11,
	MAGNET_PL_KVM_EXIT = 12,
	MAGNET_PL_KVM_ENTRY = 13,
	MAGNET_PL_KVM_USERSPACE_EXIT = 14, /* minor 1 */
	MAGNET_PL_KVM_WAKEUP = 15,
	MAGNET_PL_KVM_HALT_POLL = 16,
	MAGNET_PL_NET_DROP = 17,
	MAGNET_PL_VMNET_QUEUE = 18,
	MAGNET_PL_VMNET_VHOST = 19,
	MAGNET_PL_APP_ADD = 20, /* minor 3 */
	MAGNET_PL_PKT_SNAP = 21, /* minor 3 */
	MAGNET_PL_COUNT
};

/*
 * Event ids.  Stable, never reused.  Reserved ranges:
 *   0x0000            invalid
 *   0x0001 - 0x00ff   stream records (sysinfo, lost, descriptors)
 *   0x0100 - 0x01ff   host network stack        (net.*)
 *   0x0200 - 0x02ff   scheduler and processes   (sched.*, proc.*)
 *   0x0300 - 0x03ff   block I/O                 (blk.*)
 *   0x0400 - 0x04ff   host hypervisor           (kvm.*)
 *   0x0500 - 0x05ff   host VM network path      (vmnet.*: tap, vhost-net)
 *   0x0600 - 0x06ff   application probes        (app.*: USDT marks)
 *   0x0800 - 0x0fff   guest-side probes         (guest.*)
 *   0x1000 - 0x1fff   synthetic records made by the synthesis engine
 *
 * X(ENUM_SUFFIX, id, "dotted.name", payload kind)
 */
#define MAGNET_EVENTS(X)                                                     \
	X(SYSINFO, 0x0001, "stream.sysinfo", MAGNET_PL_SYSINFO)               \
	X(LOST, 0x0002, "stream.lost", MAGNET_PL_LOST)                        \
	X(EVENT_DESC, 0x0003, "stream.event_desc", MAGNET_PL_EVENT_DESC)      \
	X(NET_SOCK_SEND, 0x0100, "net.sock.send", MAGNET_PL_SOCK)             \
	X(NET_SOCK_RECV, 0x0101, "net.sock.recv", MAGNET_PL_SOCK)             \
	X(NET_L4_SEND, 0x0102, "net.l4.send", MAGNET_PL_PKT)                  \
	X(NET_L4_RECV, 0x0103, "net.l4.recv", MAGNET_PL_PKT)                  \
	X(NET_IP_SEND, 0x0104, "net.ip.send", MAGNET_PL_PKT)                  \
	X(NET_IP_RECV, 0x0105, "net.ip.recv", MAGNET_PL_PKT)                  \
	X(NET_DEV_XMIT, 0x0106, "net.dev.xmit", MAGNET_PL_PKT)                \
	X(NET_DEV_RECV, 0x0107, "net.dev.recv", MAGNET_PL_PKT)                \
	X(NET_TCP_STATE, 0x0108, "net.tcp.state", MAGNET_PL_TCP_STATE)        \
	X(NET_DROP, 0x0109, "net.drop", MAGNET_PL_NET_DROP)                   \
	X(NET_PKT_XMIT, 0x010a, "net.pkt.xmit", MAGNET_PL_PKT_SNAP)          \
	X(NET_PKT_RECV, 0x010b, "net.pkt.recv", MAGNET_PL_PKT_SNAP)          \
	X(SCHED_SWITCH, 0x0200, "sched.switch", MAGNET_PL_SCHED_SWITCH)       \
	X(SCHED_WAKEUP, 0x0201, "sched.wakeup", MAGNET_PL_SCHED_WAKEUP)       \
	X(PROC_FORK, 0x0202, "proc.fork", MAGNET_PL_PROC_FORK)                \
	X(PROC_EXIT, 0x0203, "proc.exit", MAGNET_PL_PROC_EXIT)                \
	X(BLK_ISSUE, 0x0300, "blk.issue", MAGNET_PL_BLK)                      \
	X(BLK_COMPLETE, 0x0301, "blk.complete", MAGNET_PL_BLK)                \
	X(KVM_EXIT, 0x0400, "kvm.exit", MAGNET_PL_KVM_EXIT)                   \
	X(KVM_ENTRY, 0x0401, "kvm.entry", MAGNET_PL_KVM_ENTRY)                \
	X(KVM_USERSPACE_EXIT, 0x0402, "kvm.userspace_exit",                  \
	  MAGNET_PL_KVM_USERSPACE_EXIT)                                      \
	X(KVM_WAKEUP, 0x0403, "kvm.wakeup", MAGNET_PL_KVM_WAKEUP)             \
	X(KVM_HALT_POLL, 0x0404, "kvm.halt_poll", MAGNET_PL_KVM_HALT_POLL)    \
	X(VMNET_QUEUE_TX, 0x0500, "vmnet.queue.tx", MAGNET_PL_VMNET_QUEUE)    \
	X(VMNET_QUEUE_RX, 0x0501, "vmnet.queue.rx", MAGNET_PL_VMNET_QUEUE)    \
	X(VMNET_VHOST_TX, 0x0502, "vmnet.vhost.tx", MAGNET_PL_VMNET_VHOST)    \
	X(VMNET_VHOST_RX, 0x0503, "vmnet.vhost.rx", MAGNET_PL_VMNET_VHOST)    \
	X(APP_ADD, 0x0600, "app.add", MAGNET_PL_APP_ADD)

enum magnet_event_type {
#define MAGNET_X_ENUM(sym, id, name, pl) MAGNET_EV_##sym = id,
	MAGNET_EVENTS(MAGNET_X_ENUM)
#undef MAGNET_X_ENUM
};

/*
 * Probe slots: a dense index 0..MAGNET_NPROBES-1 for the event types that a
 * BPF probe produces, used to index the per-probe control and counter maps.
 * Stable within a format major.
 */
enum magnet_probe_slot {
	MAGNET_P_NET_SOCK_SEND = 0,
	MAGNET_P_NET_SOCK_RECV,
	MAGNET_P_NET_L4_SEND,
	MAGNET_P_NET_L4_RECV,
	MAGNET_P_NET_IP_SEND,
	MAGNET_P_NET_IP_RECV,
	MAGNET_P_NET_DEV_XMIT,
	MAGNET_P_NET_DEV_RECV,
	MAGNET_P_NET_TCP_STATE,
	MAGNET_P_SCHED_SWITCH,
	MAGNET_P_SCHED_WAKEUP,
	MAGNET_P_PROC_FORK,
	MAGNET_P_PROC_EXIT,
	MAGNET_P_BLK_ISSUE,
	MAGNET_P_BLK_COMPLETE,
	MAGNET_P_KVM_EXIT,
	MAGNET_P_KVM_ENTRY,
	/* minor 1 */
	MAGNET_P_KVM_USERSPACE_EXIT,
	MAGNET_P_KVM_WAKEUP,
	MAGNET_P_KVM_HALT_POLL,
	MAGNET_P_NET_DROP,
	MAGNET_P_VMNET_QUEUE_TX,
	MAGNET_P_VMNET_QUEUE_RX,
	MAGNET_P_VMNET_VHOST_TX,
	MAGNET_P_VMNET_VHOST_RX,
	/* minor 3 */
	MAGNET_P_NET_PKT_XMIT,
	MAGNET_P_NET_PKT_RECV,
	MAGNET_NPROBES
};

/* Record flags (hdr.flags). */
enum magnet_record_flags {
	MAGNET_RF_SAMPLED = 1 << 0, /* passed a 1-in-N or time sampler */
	MAGNET_RF_TCP = 1 << 1,     /* l4 record of a TCP segment */
	MAGNET_RF_UDP = 1 << 2,     /* l4 record of a UDP datagram */
	MAGNET_RF_IPV6 = 1 << 3,
};

/*
 * The fixed header of every record.  40 bytes.
 *   ts_ns        CLOCK_MONOTONIC in ns (bpf_ktime_get_ns); convert to wall
 *                time with sysinfo.realtime_offset_ns.
 *   abstract_id  socket identity (net.sock.*, net.tcp.state), skb identity
 *                (net.l4/ip/dev.*), request (blk.*), vCPU (kvm.*); opaque,
 *                stable within one recording.
 *   size         bytes moved (payload bytes of the layer); negative values
 *                are -errno, as in MAGNeT.
 *   len          total record length in bytes incl. header and padding.
 */
struct magnet_hdr {
	__u64 ts_ns;
	__u64 abstract_id;
	__u32 tgid;
	__u32 tid;
	__u32 vm_id; /* 0 = host / unknown */
	__s32 size;
	__u16 type;
	__u16 cpu;
	__u16 len;
	__u16 flags;
};

/* First record of every stream and trace file. */
struct magnet_sysinfo {
	__u64 endian_marker;      /* MAGNET_ENDIAN_MARKER, native order */
	__u16 format_major;
	__u16 format_minor;
	__u32 ncpus;
	__s64 realtime_offset_ns; /* wall = ts_ns + realtime_offset_ns */
	__u64 start_ts_ns;        /* monotonic time the recording started */
	__u8 boot_id[16];         /* /proc/sys/kernel/random/boot_id */
	char hostname[64];
	char kernel_release[64];
	char tool_version[32];
};

/* Inserted by the consumer where records were dropped. */
struct magnet_lost {
	__u64 count;       /* records dropped */
	__u64 first_ts_ns; /* time of the first drop in this interval */
	__u64 last_ts_ns;  /* time of the last drop in this interval */
	__u16 probe_type;  /* event id of the probe that dropped */
	__u16 cpu;         /* CPU it dropped on */
	__u32 reason;      /* enum magnet_lost_reason */
};

enum magnet_lost_reason {
	MAGNET_LOST_RINGBUF_FULL = 1, /* kernel ring buffer had no room */
	MAGNET_LOST_CONSUMER = 2,     /* a user-space queue overflowed */
	MAGNET_LOST_VM_QUOTA = 3,     /* over its VM's stream quota (hdr.vm_id; any
				       * probe: probe_type 0; any CPU: cpu 0xffff;
				       * first/last_ts_ns bound the interval) */
};

/* Self-description of one event type used in the stream. */
struct magnet_event_desc {
	__u16 type;
	__u16 payload_kind;
	__u32 reserved;
	char name[32];
};

/* Addresses: IPv4 in the first 4 bytes (network order), rest zero. */
struct magnet_sock {
	__u16 family;   /* AF_INET / AF_INET6 */
	__u16 protocol; /* IPPROTO_TCP / IPPROTO_UDP / ... */
	__u16 sport;    /* host order */
	__u16 dport;    /* host order */
	__u8 saddr[16];
	__u8 daddr[16];
	/* minor 2: the sendmsg/recvmsg call the record ends (hdr.ts_ns is its
	 * return), from entry to return; 0 when not measured (the
	 * sock_send_length / sock_recv_length tracepoints have no entry) */
	__u64 call_ns;
};

/* A packet seen at the l4, ip or device layer. */
struct magnet_pkt {
	__u32 ifindex;
	__u32 skb_len;
	__u32 tcp_seq;
	__u16 l3proto;  /* ethertype, host order (0x0800 IPv4, 0x86dd IPv6) */
	__u16 ip_id;    /* host order */
	__u16 frag_off; /* host order, incl. flags */
	__u16 tot_len;  /* IP total length, host order */
	__u16 sport;
	__u16 dport;
	__u8 ip_version;
	__u8 protocol;  /* IP protocol */
	__u8 tos;
	__u8 ttl;
	__u8 tcp_flags;
	__u8 reserved0;
	__u16 reserved1;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* TCP socket state snapshot (tcp:tcp_probe and friends). */
struct magnet_tcp_state {
	__u16 family;
	__u16 sport;
	__u16 dport;
	__u8 state;  /* TCP_ESTABLISHED ... */
	__u8 ca_state;
	__u32 snd_wnd;
	__u32 rcv_wnd;
	__u32 srtt_us;
	__u32 rto_us;
	__u32 packets_out;
	__u32 retrans_out;
	__u32 snd_ssthresh;
	__u32 snd_cwnd;
	__u32 write_seq;
	__u32 copied_seq;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 flags; /* reserved for TCP flags of the triggering segment */
	__u32 reserved;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct magnet_sched_switch {
	__u32 prev_tid;
	__u32 next_tid;
	__s64 prev_state;
	__u32 prev_prio;
	__u32 next_prio;
	char prev_comm[16];
	char next_comm[16];
};

struct magnet_sched_wakeup {
	__u32 tid;
	__s32 target_cpu;
	__u32 prio;
	__u32 reserved;
	char comm[16];
};

struct magnet_proc_fork {
	__u32 parent_tid;
	__u32 child_tid;
	char parent_comm[16];
	char child_comm[16];
};

struct magnet_proc_exit {
	__s32 exit_code;
	__u32 reserved;
	char comm[16];
};

struct magnet_blk {
	__u32 dev;     /* major << 20 | minor (kernel dev_t) */
	__u32 nr_bytes;
	__u64 sector;
	__u64 latency_ns; /* blk.complete: issue -> complete, 0 if unknown */
	char rwbs[8];     /* R, W, D, F, ... as in blktrace */
	__s32 error;
	__u32 reserved;
};

struct magnet_kvm_exit {
	__u32 vcpu_id;
	__u32 exit_reason;
	__u32 isa; /* 1 = VMX, 2 = SVM */
	__u32 reserved;
	__u64 guest_rip;
	__u64 info1;
	__u64 info2;
};

struct magnet_kvm_entry {
	__u32 vcpu_id;
	__u32 reserved;
	__u64 guest_rip;
	/* minor 1: the exit this entry ends (0 / 0 when kvm.entry saw no exit
	 * of this vCPU thread since it was enabled) */
	__u64 exit_ns;     /* kvm.exit -> kvm.entry of this vCPU thread */
	__u32 exit_reason; /* as in kvm.exit (VMX or SVM code, see isa) */
	__u16 isa;         /* 1 = VMX, 2 = SVM */
	__u16 flags;       /* MAGNET_KVM_F_* */
};

/* magnet_kvm_entry.flags */
enum magnet_kvm_flags {
	MAGNET_KVM_F_USERSPACE = 1 << 0, /* the exit went out to the VMM (QEMU) */
};

/* kvm.userspace_exit: KVM_RUN returns to the VMM. */
struct magnet_kvm_userspace_exit {
	__u32 vcpu_id; /* 0xffffffff when no kvm.exit of this thread was seen */
	__u32 reason;  /* KVM_EXIT_* of linux/kvm.h (IO, MMIO, ...) */
	__s32 error;   /* negative errno of KVM_RUN, 0 on success */
	__u32 reserved;
};

/* kvm.wakeup: a halted vCPU resumes (kvm_vcpu_halt). */
struct magnet_kvm_wakeup {
	__u64 halt_ns; /* time spent halted (polling and/or sleeping) */
	__u32 vcpu_id; /* 0xffffffff when unknown */
	__u8 waited;   /* 1: the thread slept; 0: halt polling caught the wakeup */
	__u8 valid;    /* 1: a real wakeup event (kvm_vcpu_valid_wakeup) */
	__u16 reserved;
};

/* kvm.halt_poll: KVM adjusts a vCPU's halt-polling window. */
struct magnet_kvm_halt_poll {
	__u32 vcpu_id;
	__u32 new_ns;
	__u32 old_ns;
	__u8 grow; /* 1: grown, 0: shrunk */
	__u8 reserved[3];
};

/* net.drop: a packet freed as dropped (kfree_skb with a drop reason);
 * hdr.vm_id from the device's ifindex (a VM's tap), hdr.size = skb->len,
 * hdr.tgid/tid 0 (drops happen mostly in softirq context, where the current
 * task is whoever was interrupted). */
struct magnet_net_drop {
	__u64 location; /* kernel text address that dropped it */
	__u32 reason;   /* enum skb_drop_reason of the running kernel */
	__u32 ifindex;  /* skb->dev, 0 if none */
	__u16 protocol; /* skb->protocol, host order (0x0800 IPv4, ...) */
	__u16 reserved;
	__u32 reserved2;
};

/* vmnet.queue.tx / .rx: host-side queueing of a VM's packet, from the
 * device it entered the host through (netif_receive_skb) to the device
 * that transmits it (net_dev_start_xmit).  tx: guest tap -> other device
 * (the wire); rx: other device -> guest tap.  hdr.size = skb->len,
 * hdr.abstract_id = the flow id (proto/magnet/flow.h) when IPv4/IPv6,
 * hdr.tgid/tid 0 (softirq context). */
struct magnet_vmnet_queue {
	__u64 delay_ns;
	__u32 in_ifindex;
	__u32 out_ifindex;
	/* minor 2: the packet's IPv4 id (0 for IPv6): with the flow id, what
	 * names one packet to its guest (the agent's journey, docs/guest.md) */
	__u16 ip_id;
	__u16 reserved;
	__u32 reserved2;
};

/* vmnet.vhost.tx / .rx: one run of vhost-net's handle_tx / handle_rx in
 * the VM's vhost worker (hdr.tid). */
struct magnet_vmnet_vhost {
	__u64 duration_ns;
};

/* app.add: an application's own mark, MAGNET_ADD(event_id, abstract_id,
 * value) of <magnet/usdt.h>, read by a uprobe on its USDT note (minor 3).
 * hdr.tgid/tid: the marking thread; hdr.abstract_id = abstract_id (the
 * record's identity, as for other events); hdr.vm_id 0; hdr.size 0.
 * Not a probe slot: the USDT object has its own control (see
 * kmod/bpf/usdt.bpf.c), so the per-probe control arrays keep their size. */
struct magnet_app_add {
	__u32 event_id;    /* chosen by the application */
	__u32 abstract_id; /* chosen by the application */
	__u64 value;
};

/* net.pkt.xmit / .recv (minor 3): one record per packet at the device layer
 * (the net.dev.* hooks) with its first bytes from the link-layer header on,
 * as a packet capture (tcpdump -s N) keeps them.  hdr.size = skb->len;
 * hdr.abstract_id = 0 (the bytes name the packet).  cap_len bytes follow
 * this struct, padded with zeros to MAGNET_RECORD_ALIGN: hdr.len = 40 +
 * 16 + cap_len rounded up to 8. */
#define MAGNET_SNAP_MAX 128 /* compile-time bound of cap_len */
struct magnet_pkt_snap {
	__u32 ifindex;
	__u32 wire_len; /* the frame's length from its link-layer header */
	__u16 cap_len;  /* bytes that follow: min(snap length, linear bytes) */
	__u16 l3proto;  /* skb->protocol, host order */
	__u16 mac_len;  /* link-layer header bytes at the start (0: none) */
	__u16 reserved;
};

/* Layout guards, checked by clang -target bpf and by g++ alike. */
#ifdef __cplusplus
#define MAGNET_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define MAGNET_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
#define MAGNET_ASSERT_SIZE(t, n) \
	MAGNET_STATIC_ASSERT(sizeof(struct t) == (n), #t " layout changed: bump MAGNET_FORMAT_MAJOR")
MAGNET_ASSERT_SIZE(magnet_hdr, 40);
MAGNET_ASSERT_SIZE(magnet_sysinfo, 208);
MAGNET_ASSERT_SIZE(magnet_lost, 32);
MAGNET_ASSERT_SIZE(magnet_event_desc, 40);
MAGNET_ASSERT_SIZE(magnet_sock, 48);
MAGNET_ASSERT_SIZE(magnet_pkt, 64);
MAGNET_ASSERT_SIZE(magnet_tcp_state, 96);
MAGNET_ASSERT_SIZE(magnet_sched_switch, 56);
MAGNET_ASSERT_SIZE(magnet_sched_wakeup, 32);
MAGNET_ASSERT_SIZE(magnet_proc_fork, 40);
MAGNET_ASSERT_SIZE(magnet_proc_exit, 24);
MAGNET_ASSERT_SIZE(magnet_blk, 40);
MAGNET_ASSERT_SIZE(magnet_kvm_exit, 40);
MAGNET_ASSERT_SIZE(magnet_kvm_entry, 32);
MAGNET_ASSERT_SIZE(magnet_kvm_userspace_exit, 16);
MAGNET_ASSERT_SIZE(magnet_kvm_wakeup, 16);
MAGNET_ASSERT_SIZE(magnet_kvm_halt_poll, 16);
MAGNET_ASSERT_SIZE(magnet_net_drop, 24);
MAGNET_ASSERT_SIZE(magnet_vmnet_queue, 24);
MAGNET_ASSERT_SIZE(magnet_vmnet_vhost, 8);
MAGNET_ASSERT_SIZE(magnet_app_add, 16);
MAGNET_ASSERT_SIZE(magnet_pkt_snap, 16);
MAGNET_STATIC_ASSERT(40 + 16 + MAGNET_SNAP_MAX <= MAGNET_MAX_RECORD, "snap record too long");
MAGNET_STATIC_ASSERT(__builtin_offsetof(struct magnet_hdr, type) == 32, "hdr.type moved");
MAGNET_STATIC_ASSERT(__builtin_offsetof(struct magnet_hdr, len) == 36, "hdr.len moved");

#endif /* MAGNET_PROTO_EVENT_H */
