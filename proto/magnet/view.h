/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * magnet view protocol: how a VM's own view travels into that VM.
 *
 * Spoken host daemon <-> guest agent (over virtio-vsock, or a per-VM
 * virtio-serial channel) and guest agent <-> local applications (over a
 * unix socket in the guest); the same frames on all three legs.  Included by
 * host/, guest/ and lib/; the codec is lib/magnet/view_codec.h.
 *
 * Wire format: every frame is a 24-byte header then a body of body_len
 * bytes (at most MAGNET_VIEW_MAX_BODY).  Every integer is little-endian on
 * the wire whatever the machine; doubles are IEEE-754 binary64 in
 * little-endian byte order.  The structs below give the layout (offsets and
 * sizes, guarded by asserts at the end); the codec reads and writes the
 * fields one by one, never by casting a buffer.
 *
 * Identity: nothing in any frame names a VM.  The host knows which VM a
 * connection belongs to from the kernel (the vsock peer CID, or the
 * virtio-serial channel it opened), never from what the guest sends.
 *
 * Version and bump rules
 * ----------------------
 *   MAGNET_VIEW_VERSION (the header's version byte) changes when an existing
 *   message's layout or meaning changes: a field moves, changes size or
 *   unit, a flag changes meaning, an existing stat id changes meaning or
 *   unit.  Peers negotiate it in hello/welcome; a frame of another version
 *   after the negotiation is a protocol error.
 *   No bump for additions: a new message type (an older peer answers
 *   MAGNET_VERR_UNKNOWN_TYPE and goes on), fields appended at the end of a
 *   body (bodies carry their length; an older reader ignores the tail),
 *   a new stat id (an older receiver skips records whose id it does not
 *   know: every record has the size given in the stats body), a new event
 *   type in event batches (records carry their own length).
 *   Message types, stat ids and error codes are never reused.
 */
#ifndef MAGNET_PROTO_VIEW_H
#define MAGNET_PROTO_VIEW_H

#include <linux/types.h>

#define MAGNET_VIEW_MAGIC 0x564e474dU /* bytes "MGNV" on the wire */
#define MAGNET_VIEW_VERSION 1          /* highest version this code speaks */
#define MAGNET_VIEW_VERSION_MIN 1      /* lowest version this code speaks */
#define MAGNET_VIEW_MAX_BODY 16384     /* bytes; larger frames are refused */

/* Default vsock port of the host daemon (any CID), and the name of the
 * virtio-serial channel for guests without vsock. */
#define MAGNET_VIEW_VSOCK_PORT 5300
#define MAGNET_VIEW_CHANNEL_NAME "org.magnet.view.0"
/* The guest agent's socket for local applications. */
#define MAGNET_VIEW_AGENT_SOCKET "/run/magnet/agent.sock"

/* Smallest period a subscription may ask for. */
#define MAGNET_VIEW_MIN_PERIOD_MS 20
#define MAGNET_VIEW_MAX_PERIOD_MS 60000
/* Most stat ids and event types one subscription may name. */
#define MAGNET_VIEW_MAX_SUB_IDS 256
#define MAGNET_VIEW_MAX_SUB_EVENTS 32
/* Longest label in hello and message in error. */
#define MAGNET_VIEW_MAX_LABEL 64
#define MAGNET_VIEW_MAX_ERROR_TEXT 256

/*
 * Message types (header.type).  Stable, never reused.
 *   0x01 - 0x1f  sent by the client (guest agent to host; application to agent)
 *   0x20 - 0x3f  sent by the server (host to agent; agent to application)
 *   0x40 - 0x5f  sent by either side
 */
enum magnet_view_type {
	MAGNET_VMSG_HELLO = 0x01,     /* client: versions it speaks, a label for logs */
	MAGNET_VMSG_SUBSCRIBE = 0x02, /* client: which stats, how often, events */
	MAGNET_VMSG_PULL = 0x03,      /* client: send one stats frame now */
	MAGNET_VMSG_WELCOME = 0x21,   /* server: chosen version, session id, limits */
	MAGNET_VMSG_STATS = 0x22,     /* server: the client's own stat values */
	MAGNET_VMSG_EVENTS = 0x23,    /* server: the client's own event records, cleaned
				       * for a guest (magnet_view_events) */
	MAGNET_VMSG_ERROR = 0x40,     /* either: code and message */
	MAGNET_VMSG_PING = 0x41,      /* either: liveness, clock offset */
	MAGNET_VMSG_PONG = 0x42,      /* either: answer to a ping */
	MAGNET_VMSG_RESYNC = 0x43,    /* either: everything before the answer is void */
};

/* header.flags */
enum magnet_view_flags {
	MAGNET_VF_REPLY = 1 << 0, /* RESYNC: this is the answer */
};

struct magnet_view_hdr {
	__u32 magic;     /* MAGNET_VIEW_MAGIC */
	__u8 version;    /* MAGNET_VIEW_VERSION of the frame; hello may carry any */
	__u8 type;       /* enum magnet_view_type */
	__u16 flags;     /* enum magnet_view_flags */
	__u32 body_len;  /* bytes after the header, <= MAGNET_VIEW_MAX_BODY */
	__u32 seq;       /* per sender and connection, from 1, +1 per frame */
	__u64 ts_ns;     /* sender's CLOCK_MONOTONIC when the frame was made */
};

/* HELLO: the first frame of a client.  The label is free text for logs
 * (software name and version); it names nothing and is never trusted. */
struct magnet_view_hello {
	__u8 min_version;
	__u8 max_version;
	__u8 role;       /* enum magnet_view_role */
	__u8 label_len;  /* <= MAGNET_VIEW_MAX_LABEL; label bytes follow */
	__u32 features;  /* reserved, 0 */
};

enum magnet_view_role {
	MAGNET_VROLE_AGENT = 1, /* a guest agent, to the host */
	MAGNET_VROLE_APP = 2,   /* an application, to the guest agent */
};

/* WELCOME: the answer to hello. */
struct magnet_view_welcome {
	__u8 version;         /* chosen: the highest both speak */
	__u8 reserved[3];
	__u32 min_period_ms;  /* smallest period this server accepts */
	__u64 session_id;     /* changes when the VM's identity changes (another
			       * VM, a restarted VM, a restarted daemon) */
	__u32 max_sub_ids;    /* most ids per subscription */
	__u32 max_body;       /* largest body this server sends or takes */
};

/* SUBSCRIBE: replaces the connection's subscription. */
enum magnet_view_mode {
	MAGNET_VMODE_PERIODIC = 1, /* a stats frame every period */
	MAGNET_VMODE_ON_CHANGE = 2, /* when a subscribed value changes, at most once per period */
	MAGNET_VMODE_PULL = 3,     /* only in answer to PULL (at most once per period) */
};

enum magnet_view_sub_flags {
	MAGNET_VSUB_EVENTS = 1 << 0, /* also send the VM's own event records */
};

struct magnet_view_subscribe {
	__u32 period_ms;   /* MAGNET_VIEW_MIN_PERIOD_MS .. MAGNET_VIEW_MAX_PERIOD_MS */
	__u8 mode;         /* enum magnet_view_mode */
	__u8 flags;        /* enum magnet_view_sub_flags */
	__u16 n_ids;       /* stat ids that follow (__u16 each); 0 = every stat */
	__u16 n_events;    /* then event types (__u16 each); 0 with EVENTS = every type
			    * a guest may see; a type it may not see: BAD_SUBSCRIBE */
	__u16 reserved;
};

/* STATS: the subscribed values.  n records of rec_size bytes each follow;
 * rec_size >= sizeof(struct magnet_view_stat) (a later version may append
 * to the record: readers step by rec_size). */
enum magnet_view_stats_flags {
	MAGNET_VSTATS_GAP = 1 << 0, /* values are missing before this frame
				     * (reconnection, restarted host) */
};

struct magnet_view_stats {
	__u16 n;
	__u16 rec_size;
	__u32 flags;       /* enum magnet_view_stats_flags */
};

enum magnet_view_stat_flags {
	MAGNET_VSTAT_VALID = 1 << 0, /* the value is measured; else unknown */
};

struct magnet_view_stat {
	__u16 id;        /* MAGNET_STAT_* */
	__u16 flags;     /* enum magnet_view_stat_flags */
	__u32 index;     /* which one: vCPU number, exit reason (see below), 0 */
	__u32 window_us; /* the value is over this window; 0 = a level or a total */
	__u32 age_us;    /* how old the value is at the frame's ts_ns */
	double value;    /* in the stat's unit */
};

/* EVENTS: the VM's own records in the event ABI's format (proto/magnet/
 * event.h: magnet_hdr + payload, hdr.len each, back to back), as the guest
 * schema (lib/magnet/guest_schema.h, docs/guest.md "What a guest may see")
 * lets a guest see them: only guest-safe types, only the fields it keeps
 * (host tids, task names of other tasks, CPUs, devices, kernel addresses
 * and hdr.vm_id are zero), payloads cut to the known fields, abstract ids
 * re-keyed per session where they came from kernel pointers or host ids. */
struct magnet_view_events {
	__u32 n;
	__u32 lost;  /* records for this connection dropped since the last batch */
};

/* ERROR: n bytes of text follow (UTF-8, no terminator). */
enum magnet_view_error {
	MAGNET_VERR_BAD_FRAME = 1,      /* malformed, truncated or oversize frame */
	MAGNET_VERR_VERSION = 2,        /* no common protocol version */
	MAGNET_VERR_UNKNOWN_TYPE = 3,   /* message type this peer does not know */
	MAGNET_VERR_NOT_NOW = 4,        /* a message out of order (e.g. before hello) */
	MAGNET_VERR_BAD_SUBSCRIBE = 5,  /* period, mode or ids out of range, or event
					 * types a guest may not see */
	MAGNET_VERR_RATE = 6,           /* too many messages or subscriptions */
	MAGNET_VERR_REFUSED = 7,        /* identity unknown or connection cap */
	MAGNET_VERR_TIMEOUT = 8,        /* a deadline passed */
	MAGNET_VERR_SHUTDOWN = 9,       /* the server is stopping */
};

struct magnet_view_errmsg {
	__u16 code;   /* enum magnet_view_error */
	__u16 n;      /* <= MAGNET_VIEW_MAX_ERROR_TEXT */
	__u32 reserved;
};

/* PING / PONG: pong echoes token and sent_ns and adds its own clock, so the
 * pinger gets the round trip and the peer's clock at its midpoint. */
struct magnet_view_ping {
	__u64 token;
	__u64 sent_ns;  /* pinger's CLOCK_MONOTONIC */
};

struct magnet_view_pong {
	__u64 token;
	__u64 sent_ns;  /* echoed */
	__u64 peer_ns;  /* answerer's CLOCK_MONOTONIC when it answered */
};

/* RESYNC: a peer that lost track of the stream (a restarted agent on a
 * virtio-serial channel, which keeps bytes across its users) sends one with
 * a fresh token and drops everything it reads until the RESYNC with
 * MAGNET_VF_REPLY and the same token. */
struct magnet_view_resync {
	__u64 token;
};

/*
 * Stat ids.  Stable, never reused.  Ranges:
 *   0x0001 - 0x00ff   the VM's network path on the host
 *   0x0100 - 0x01ff   its vCPUs
 *   0x0200 - 0x02ff   the hypervisor (KVM exits)
 *   0x0300 - 0x03ff   its block I/O on the host
 *   0x0400 - 0x04ff   accounting: lost events, delivery
 *   0x0500 - 0x05ff   its share of the host's power
 *   0x0800 - 0x0fff   computed in the guest by the agent
 *
 * Index: 0 unless said.  vcpu.*: the vCPU number.  kvm.reason_*:
 * (isa << 24) | exit code (isa 1 VMX, 2 SVM), halts as (0xff << 24) | 1
 * (polled) or 2 (slept).
 *
 * X(ENUM_SUFFIX, id, "name", "unit", "description")
 */
#define MAGNET_VIEW_STATS(X)                                                                    \
	X(TAP_TX_BPS, 0x0001, "tap.tx_bps", "bit/s", "guest -> host at its taps")                \
	X(TAP_RX_BPS, 0x0002, "tap.rx_bps", "bit/s", "host -> guest at its taps")                \
	X(TAP_TX_PPS, 0x0003, "tap.tx_pps", "packet/s", "guest -> host at its taps")            \
	X(TAP_RX_PPS, 0x0004, "tap.rx_pps", "packet/s", "host -> guest at its taps")            \
	X(DROPS_TAP, 0x0010, "drops.tap", "packet/s", "dropped on its taps")                     \
	X(DROPS_QDISC, 0x0011, "drops.qdisc", "packet/s", "its packets dropped by a host qdisc") \
	X(DROPS_HOST, 0x0012, "drops.host", "packet/s", "its packets dropped elsewhere on the host path") \
	X(QUEUE_TX_MEAN, 0x0020, "queue.tx_mean_us", "us", "host queueing delay tap -> wire, mean") \
	X(QUEUE_TX_P50, 0x0021, "queue.tx_p50_us", "us", "host queueing delay tap -> wire, median") \
	X(QUEUE_TX_P99, 0x0022, "queue.tx_p99_us", "us", "host queueing delay tap -> wire, 99th percentile") \
	X(QUEUE_TX_PPS, 0x0023, "queue.tx_pps", "packet/s", "packets measured tap -> wire")     \
	X(QUEUE_RX_MEAN, 0x0024, "queue.rx_mean_us", "us", "host queueing delay wire -> tap, mean") \
	X(QUEUE_RX_P50, 0x0025, "queue.rx_p50_us", "us", "host queueing delay wire -> tap, median") \
	X(QUEUE_RX_P99, 0x0026, "queue.rx_p99_us", "us", "host queueing delay wire -> tap, 99th percentile") \
	X(QUEUE_RX_PPS, 0x0027, "queue.rx_pps", "packet/s", "packets measured wire -> tap")     \
	X(LINK_CAPACITY, 0x0030, "link.capacity_bps", "bit/s", "capacity of the shared host link its traffic crosses") \
	X(LINK_USE, 0x0031, "link.use_bps", "bit/s", "its own use of that link")                \
	X(LINK_AVAILABLE, 0x0032, "link.available_bps", "bit/s", "bandwidth available to it on that link (docs/guest.md)") \
	X(LINK_AVAILABLE_ERR, 0x0033, "link.available_err_bps", "bit/s", "uncertainty of link.available_bps") \
	X(LINK_QUEUE_P50, 0x0034, "link.queue_p50_us", "us", "its packets' queueing delay up to that link, median") \
	X(LINK_QUEUE_P99, 0x0035, "link.queue_p99_us", "us", "its packets' queueing delay up to that link, 99th percentile") \
	X(LINK_DROPS, 0x0036, "link.drops", "packet/s", "its packets dropped at that link")     \
	X(ALLOWANCE_TX, 0x0040, "allowance.tx_bps", "bit/s", "its shaping limit guest -> host (libvirt or tc), 0 = none") \
	X(ALLOWANCE_RX, 0x0041, "allowance.rx_bps", "bit/s", "its shaping limit host -> guest (libvirt or tc), 0 = none") \
	X(VCPU_COUNT, 0x0100, "vcpu.count", "", "vCPUs")                                        \
	X(VCPU_RUN, 0x0101, "vcpu.run", "cpu", "a vCPU on a host CPU (fraction of one CPU)")   \
	X(VCPU_WAIT, 0x0102, "vcpu.wait", "cpu", "a vCPU runnable but waiting for a host CPU") \
	X(VCPU_HALT, 0x0103, "vcpu.halt", "cpu", "a vCPU halted or blocked in the host")       \
	X(VCPU_RUN_SUM, 0x0104, "vcpu.run_sum", "cpu", "vcpu.run summed over its vCPUs")       \
	X(VCPU_WAIT_SUM, 0x0105, "vcpu.wait_sum", "cpu", "vcpu.wait summed over its vCPUs")    \
	X(VCPU_HALT_SUM, 0x0106, "vcpu.halt_sum", "cpu", "vcpu.halt summed over its vCPUs")    \
	X(KVM_EXITS, 0x0200, "kvm.exits", "exit/s", "VM exits")                                 \
	X(KVM_EXIT_TIME, 0x0201, "kvm.exit_time", "cpu", "time in exit handling other than halts") \
	X(KVM_REASON_EXITS, 0x0202, "kvm.reason_exits", "exit/s", "exits of one reason")       \
	X(KVM_REASON_TIME, 0x0203, "kvm.reason_time", "cpu", "exit handling time of one reason") \
	X(KVM_REASON_MEAN, 0x0204, "kvm.reason_mean_us", "us", "mean exit handling time of one reason") \
	X(BLK_BPS, 0x0300, "blk.bytes_per_s", "byte/s", "block I/O completed for it on the host") \
	X(BLK_IOPS, 0x0301, "blk.iops", "request/s", "block requests completed for it")         \
	X(BLK_LAT_MEAN, 0x0302, "blk.lat_mean_us", "us", "block request latency, mean")         \
	X(BLK_LAT_P99, 0x0303, "blk.lat_p99_us", "us", "block request latency, 99th percentile") \
	X(LOST_EVENTS, 0x0400, "lost.events", "event", "its events lost in the host kernel since the session began") \
	X(LOST_DELIVERY, 0x0401, "lost.delivery", "event", "its event records dropped for this connection (slow reader)") \
	X(HOST_MARKER, 0x0402, "host.marker", "", "a value an operator sets (magnet mark): latency probes") \
	X(POWER_WATTS, 0x0500, "power.watts", "W", "its share of the host's power (docs/placement.md)") \
	X(ENERGY_JOULES, 0x0501, "energy.joules", "J", "its share of the host's energy since the daemon first saw it") \
	X(POWER_SOURCE, 0x0502, "power.source", "", "where the host's power comes from: 1 RAPL, 2 a power model") \
	X(POWER_MODEL_ERR, 0x0503, "power.model_err_watts", "W", "uncertainty of power.watts from the model's stated error (power.source 2)") \
	X(GUEST_SOCK_TX_BPS, 0x0800, "guest.sock_tx_bps", "bit/s", "sent by its sockets (guest kernel)") \
	X(GUEST_SOCK_RX_BPS, 0x0801, "guest.sock_rx_bps", "bit/s", "received by its sockets (guest kernel)") \
	X(GUEST_DEV_TX_BPS, 0x0802, "guest.dev_tx_bps", "bit/s", "sent by its network devices (guest kernel)") \
	X(GUEST_DEV_RX_BPS, 0x0803, "guest.dev_rx_bps", "bit/s", "received by its network devices (guest kernel)") \
	X(JOURNEY_SOCK_DEV, 0x0810, "journey.sock_dev_us", "us", "guest socket -> guest device (index: percentile)") \
	X(JOURNEY_DEV_TAP, 0x0811, "journey.dev_tap_us", "us", "guest device -> host tap (index: percentile)") \
	X(JOURNEY_TAP_WIRE, 0x0812, "journey.tap_wire_us", "us", "host tap -> host wire (index: percentile)") \
	X(JOURNEY_MATCHED, 0x0813, "journey.matched_pps", "packet/s", "packets seen on both sides") \
	X(CLOCK_OFFSET, 0x0820, "clock.offset_us", "us", "host clock minus guest clock")        \
	X(CLOCK_ERROR, 0x0821, "clock.error_us", "us", "uncertainty of clock.offset_us (half the best round trip)") \
	X(HOST_LINK, 0x0822, "host.connected", "", "the agent's session with the host: 0 none, 1 vsock, 2 virtio-serial") \
	X(HOST_GAPS, 0x0823, "host.gaps", "", "sessions with the host lost since the agent started") \
	X(HOST_LAST_GAP, 0x0824, "host.last_gap_ms", "ms", "length of the last time without the host")

enum magnet_view_stat_id {
#define MAGNET_X_STAT_ENUM(sym, id, name, unit, desc) MAGNET_STAT_##sym = id,
	MAGNET_VIEW_STATS(MAGNET_X_STAT_ENUM)
#undef MAGNET_X_STAT_ENUM
};

/* power.source */
#define MAGNET_VIEW_POWER_RAPL 1
#define MAGNET_VIEW_POWER_MODEL 2

/* Exit reason index of kvm.reason_*. */
#define MAGNET_VIEW_REASON_INDEX(isa, code) ((((__u32)(isa)) << 24) | ((code) & 0xffffffU))
#define MAGNET_VIEW_REASON_HALT_POLLED 0xff000001U
#define MAGNET_VIEW_REASON_HALT_SLEPT 0xff000002U

/* Layout guards, for g++ and clang alike. */
#ifdef __cplusplus
#define MAGNET_VIEW_ASSERT(c, m) static_assert(c, m)
#else
#define MAGNET_VIEW_ASSERT(c, m) _Static_assert(c, m)
#endif
#define MAGNET_VIEW_ASSERT_SIZE(t, n) \
	MAGNET_VIEW_ASSERT(sizeof(struct t) == (n), #t " layout changed: bump MAGNET_VIEW_VERSION")
MAGNET_VIEW_ASSERT_SIZE(magnet_view_hdr, 24);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_hello, 8);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_welcome, 24);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_subscribe, 12);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_stats, 8);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_stat, 24);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_events, 8);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_errmsg, 8);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_ping, 16);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_pong, 24);
MAGNET_VIEW_ASSERT_SIZE(magnet_view_resync, 8);
MAGNET_VIEW_ASSERT(__builtin_offsetof(struct magnet_view_hdr, body_len) == 8, "hdr.body_len moved");
MAGNET_VIEW_ASSERT(__builtin_offsetof(struct magnet_view_hdr, ts_ns) == 16, "hdr.ts_ns moved");
MAGNET_VIEW_ASSERT(__builtin_offsetof(struct magnet_view_stat, value) == 16, "stat.value moved");

#endif /* MAGNET_PROTO_VIEW_H */
