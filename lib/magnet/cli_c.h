/* The command-line duration parser of magnet/cli.h, for the C programs
 * (magnet-watch), so that every program reads a duration the same way. */
#ifndef MAGNET_CLI_C_H
#define MAGNET_CLI_C_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parses S as magnet::cli::parse_duration_ns does: 0 and *NS set, or -1 and
 * WHY (WHY_SIZE bytes) saying what is wrong with it.  BARE_SECONDS: a bare
 * number is seconds; 0: it is refused (options that took milliseconds). */
int magnet_cli_duration_ns(const char *s, int bare_seconds, unsigned long long *ns, char *why,
                           size_t why_size);

#ifdef __cplusplus
}
#endif

#endif
