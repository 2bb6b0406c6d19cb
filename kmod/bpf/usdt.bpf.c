// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Application marks: the USDT probe magnet:add of <magnet/usdt.h>
 * (MAGNET_ADD(event_id, abstract_id, value)) as app.add records.
 *
 * A separate object from capture.bpf.c so that a kernel without uprobes, or
 * a libbpf without USDT support, loses only this, and every capture probe
 * stays as it is.  The loader hands it the capture object's ring buffer
 * (bpf_map__reuse_fd on `events`), so app.add records land in the same
 * stream, in the same record format.
 *
 * Not shared with the capture probes: their control (.bss probe_ctl,
 * filters, sampling, VM tagging, per-probe loss counters).  Those live in
 * the capture object's .bss and are indexed by probe slot; app.add is
 * recorded whenever the program is attached, unfiltered, and counts its
 * own ring-full drops in `dropped`, which the recorder reports.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
/* usdt.bpf.h includes <linux/errno.h>, whose <asm/errno.h> is found in
 * kmod/bpf/asm/ (see there). */
#include <bpf/usdt.bpf.h>

#include "magnet/event.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Replaced by the capture object's ring (same definition) before load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

__u64 emitted;
__u64 dropped; /* ring full: the record is lost */

struct mg_app_add_record {
	struct magnet_hdr hdr;
	struct magnet_app_add add;
};

/* Keeps the record's types in this object's BTF for the layout test
 * (tests/unit/btf_layout_test.cc), as mg_btf_types does in capture.bpf.c.
 * Never read or written. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mg_app_add_record);
} mg_usdt_btf_types SEC(".maps");

SEC("usdt")
int BPF_USDT(app_add, __u32 event_id, __u32 abstract_id, __u64 value)
{
	struct mg_app_add_record *r;
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->hdr.abstract_id = abstract_id;
	r->hdr.tgid = pid_tgid >> 32;
	r->hdr.tid = (__u32)pid_tgid;
	r->hdr.vm_id = 0;
	r->hdr.size = 0;
	r->hdr.type = MAGNET_EV_APP_ADD;
	r->hdr.cpu = bpf_get_smp_processor_id();
	r->hdr.len = sizeof(*r);
	r->hdr.flags = 0;
	r->add.event_id = event_id;
	r->add.abstract_id = abstract_id;
	r->add.value = value;
	bpf_ringbuf_submit(r, 0);
	__sync_fetch_and_add(&emitted, 1);
	return 0;
}
