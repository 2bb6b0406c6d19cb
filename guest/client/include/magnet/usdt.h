/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Application marks for magnet: MAGNET_ADD(event_id, abstract_id, value)
 * places a USDT probe (provider "magnet", name "add") at the call site.
 * `magnet record --usdt BINARY` attaches a uprobe to every such site and
 * records an app.add event (proto/magnet/event.h: struct magnet_app_add)
 * into the same trace as the kernel's events.
 *
 * Detached, a mark is one nop instruction plus whatever it takes to have
 * the three arguments in registers or memory (sys/sdt.h only names their
 * locations in an ELF note; it moves nothing).  Arguments with side effects
 * are evaluated whether or not anything is attached.
 *
 * Header only, C and C++; needs sys/sdt.h (Debian: systemtap-sdt-dev).  See
 * docs/instrumentation.md.
 */
#ifndef MAGNET_USDT_H
#define MAGNET_USDT_H

#include <stdint.h>
#include <sys/sdt.h>

/* event_id and abstract_id are cut to 32 bits, value is 64 bits: the
 * casts fix the argument sizes the USDT note records, so the BPF side
 * reads the same widths whatever types the caller passes. */
#define MAGNET_ADD(event_id, abstract_id, value)                      \
	DTRACE_PROBE3(magnet, add, (uint32_t)(event_id),              \
		      (uint32_t)(abstract_id), (uint64_t)(value))

#endif /* MAGNET_USDT_H */
