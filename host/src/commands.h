#pragma once

#include "cli.h"

namespace magnet::host {

int cmd_probes(cli::args& a);
int cmd_record(cli::args& a);
int cmd_dump(cli::args& a);
int cmd_stat(cli::args& a);
int cmd_host(cli::args& a);
int cmd_top(cli::args& a);
int cmd_views(cli::args& a);

// Set by SIGINT/SIGTERM; the loops of record and stat watch it.
bool stop_requested();
void install_stop_handlers();

}  // namespace magnet::host
