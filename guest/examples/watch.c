/* magnet-watch: prints the stats it is given whenever they arrive
 * (callback style, C).
 *
 *   magnet-watch [--socket PATH] [--period T] [--count N] [STAT...]
 *
 * Default stats: link.available_bps tap.tx_bps vcpu.run_sum.  One line per
 * value: its name, value, unit, validity, window and age; "(gap)" marks the
 * first values after the agent or the host came back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "magnet/cli_c.h"
#include "magnet/client.h"

static long printed;

static const char usage_text[] =
	"usage: magnet-watch [--socket PATH] [--period T] [--count N] [STAT...]\n"
	"\n"
	"Prints each STAT of this VM's view whenever it arrives (default:\n"
	"link.available_bps tap.tx_bps vcpu.run_sum): name, value, unit, validity,\n"
	"window and age; \"(gap)\" marks the first values after the agent or the\n"
	"host came back.\n"
	"  --socket PATH  the agent's socket (default /run/magnet/agent.sock)\n"
	"  --period T     how often the values come (default 1s; T is a duration\n"
	"                 with its unit: 100ms, 2.5s, 1min)\n"
	"  --count N      stop after N values (default: never)\n"
	"  -h, --help     this text\n";

static void on_value(const magnet_value *v, void *user)
{
	(void)user;
	printf("%-24s", v->name ? v->name : "?");
	if (v->index)
		printf("[%u]", v->index);
	if (v->valid)
		printf(" %14.3f %-8s", v->value, v->unit);
	else
		printf(" %14s %-8s", "-", v->unit);
	printf(" window %.1f s  age %.1f ms%s\n", v->window_ns / 1e9, v->age_ns / 1e6,
	       v->gap ? "  (gap)" : "");
	printed++;
}

/* --period in the duration syntax of every magnet program (magnet/cli.h);
 * it took milliseconds before, so a bare number is refused. */
static int parse_period(const char *s, unsigned *ms)
{
	unsigned long long ns;
	char why[160];

	if (magnet_cli_duration_ns(s, 0, &ns, why, sizeof why) != 0) {
		fprintf(stderr, "magnet-watch: --period: %s\n", why);
		return -1;
	}
	if (ns < 1000000ull || ns / 1000000ull > 3600000ull) {
		fprintf(stderr, "magnet-watch: --period: '%s' is not from 1ms to 1h\n", s);
		return -1;
	}
	*ms = (unsigned)(ns / 1000000ull);
	return 0;
}

int main(int argc, char **argv)
{
	const char *sock = NULL, *names[64];
	size_t n = 0;
	unsigned period = 1000;
	long count = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage_text, stdout);
			return 0;
		} else if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			sock = argv[++i];
		else if (!strcmp(argv[i], "--period") && i + 1 < argc) {
			if (parse_period(argv[++i], &period) != 0)
				return 2;
		}
		else if (!strcmp(argv[i], "--count") && i + 1 < argc)
			count = atol(argv[++i]);
		else if (argv[i][0] == '-') {
			fprintf(stderr, "magnet-watch: unknown option or missing value: %s\n%s", argv[i],
				usage_text);
			return 2;
		} else if (n < 64)
			names[n++] = argv[i];
	}
	if (!n) {
		names[n++] = "link.available_bps";
		names[n++] = "tap.tx_bps";
		names[n++] = "vcpu.run_sum";
	}
	magnet_client *c = magnet_client_new(sock);
	if (!c)
		return 1;
	if (magnet_client_subscribe(c, names, n, period, MAGNET_CLIENT_PERIODIC) != 0) {
		fprintf(stderr, "magnet-watch: %s\n", magnet_client_error(c));
		magnet_client_free(c);
		return 2;
	}
	magnet_client_on_value(c, on_value, NULL);
	while (!count || printed < count) {
		if (magnet_client_poll(c, 1000) < 0)
			fprintf(stderr, "magnet-watch: %s (retrying)\n", magnet_client_error(c));
		fflush(stdout);
	}
	magnet_client_free(c);
	return 0;
}
