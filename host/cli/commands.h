#pragma once

#include <cstdint>
#include <functional>

#include "magnet/cli.h"

namespace magnet::host {

int cmd_probes(cli::args& a);
int cmd_record(cli::args& a);
int cmd_dump(cli::args& a);
int cmd_stat(cli::args& a);
int cmd_host(cli::args& a);
int cmd_top(cli::args& a);
int cmd_views(cli::args& a);
int cmd_sessions(cli::args& a);
int cmd_mark(cli::args& a);
int cmd_stats(cli::args& a);
int cmd_kvm(cli::args& a);
int cmd_place(cli::args& a);
int cmd_fleet_config(cli::args& a);
int cmd_reconstruct(cli::args& a);

// Set by SIGINT/SIGTERM; the loops of record and stat watch it.
bool stop_requested();
void install_stop_handlers();

// The reporting loop of stat and kvm: calls report(elapsed_s, interval_s)
// every interval_ns until SIGINT/SIGTERM, @count reports or @duration_ns
// (0 = no limit).
void every_interval(uint64_t interval_ns, uint64_t count, uint64_t duration_ns,
                    const std::function<void(double, double)>& report);

}  // namespace magnet::host
