#!/bin/bash
# guest-run.sh GUEST TIMEOUT CMD: inside the nested lab host, run CMD in its KVM guest GUEST over
# the guest's control channel; CMD's output, and its exit status as this script's (124: no
# answer in time, 2: no such guest).  What `tools/lab run GUEST` does in nested mode, through
# the lab host's own control channel, with only the control-channel client read (ctl-lib.sh)
# instead of all of lab-lib.sh: that was most of a nested round trip's time under TCG.
set -uo pipefail
# shellcheck source=tools/lab.d/ctl-lib.sh
source "${BASH_SOURCE[0]%/*}/ctl-lib.sh"
state=${MAGNET_LAB_STATE:-/run/magnet-lab}
if [[ $# -ne 3 ]]; then
  lab_err "usage: guest-run.sh GUEST TIMEOUT CMD"
  exit 2
fi
if [[ ! -d $state/guests/$1 ]]; then
  lab_err "no guest named $1 (guests: $(ls "$state/guests" 2>/dev/null | tr '\n' ' '))"
  exit 2
fi
lab_ctl_exec "$state/guests/$1/ctl.sock" "$2" "$3"
