/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * libmagnet-client: a guest application's access to its VM's own view.
 *
 * The library talks to the guest agent (magnet-agent) over its unix socket
 * (/run/magnet/agent.sock by default): it subscribes to stats by name with
 * a period, and hands over each value with the time it was measured, its
 * window and its validity.  When the agent restarts, the library reconnects
 * and subscribes again by itself; the first values after such a gap say so.
 *
 * Two styles: callbacks (magnet_client_on_value, then call magnet_client_poll
 * in a loop or when magnet_client_fd is readable), or polling
 * (magnet_client_get for the newest value of a stat, after any
 * magnet_client_poll).  One magnet_client is for one thread.
 *
 * Stat names are those of proto/magnet/view.h (docs/guest.md lists them):
 * "link.available_bps", "tap.tx_bps", "vcpu.run", "power.watts", ...
 * A stat the host does not have (power.* on a host without a power
 * source) never comes: magnet_client_get returns -1 for it.
 */
#ifndef MAGNET_CLIENT_H
#define MAGNET_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct magnet_client magnet_client;

typedef struct magnet_value {
	const char *name;   /* the stat's name ("tap.tx_bps"), or NULL for an id this library does not know */
	const char *unit;   /* "bit/s", "us", ... ("" when none) */
	uint16_t id;        /* the stat's stable id */
	uint32_t index;     /* which one: vCPU number, exit reason, percentile; else 0 */
	double value;
	int valid;          /* 1: measured; 0: unknown (then value is 0) */
	int gap;            /* 1: values were missing before this one (agent or host restarted) */
	uint64_t ts_ns;     /* CLOCK_MONOTONIC of this guest when the value was current */
	uint64_t window_ns; /* the value is over this window (0: a level or a total) */
	uint64_t age_ns;    /* how old it was when handed over (or when read with _get) */
} magnet_value;

enum magnet_client_mode {
	MAGNET_CLIENT_PERIODIC = 1, /* every period */
	MAGNET_CLIENT_ON_CHANGE = 2, /* when a value changes, at most once per period */
};

typedef void (*magnet_value_cb)(const magnet_value *v, void *user);

/* A client of the agent at @socket_path (NULL: the default); it connects
 * on the first magnet_client_poll.  NULL only when out of memory. */
magnet_client *magnet_client_new(const char *socket_path);
void magnet_client_free(magnet_client *c);

/* Subscribes to @n stats by name (n = 0: every stat) every @period_ms
 * (at least 20).  Returns 0, or -1 with magnet_client_error() naming the
 * unknown stat or the bad period.  Replaces an earlier subscription. */
int magnet_client_subscribe(magnet_client *c, const char *const *names, size_t n,
			    unsigned period_ms, int mode);

/* Calls @cb for every value received (from magnet_client_poll). */
void magnet_client_on_value(magnet_client *c, magnet_value_cb cb, void *user);

/* Connects (or reconnects, with a backoff of at most one second), waits up
 * to @timeout_ms for data, reads it and runs the callbacks.  Returns the
 * number of values received (0 on a timeout), or -1 when not connected
 * (magnet_client_error says why; the next call tries again). */
int magnet_client_poll(magnet_client *c, int timeout_ms);

/* The newest value of stat @name with @index: 0, or -1 when none was
 * received yet or the name is unknown.  age_ns is its age now. */
int magnet_client_get(magnet_client *c, const char *name, uint32_t index, magnet_value *out);

int magnet_client_connected(const magnet_client *c);
/* The host session of the view (changes when the VM's identity changes or
 * the host daemon restarts), 0 when none. */
uint64_t magnet_client_session(const magnet_client *c);
/* The socket, for an event loop (readable: call magnet_client_poll(c, 0));
 * -1 while not connected. */
int magnet_client_fd(const magnet_client *c);
/* Why the last call failed ("" if it did not). */
const char *magnet_client_error(const magnet_client *c);

#ifdef __cplusplus
}
#endif

#endif /* MAGNET_CLIENT_H */
