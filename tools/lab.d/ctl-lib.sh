#!/bin/bash
# The lab's control-channel client (protocol: vm-images/common/magnet-ctl), on its own: sourced by
# lab-lib.sh, and alone by guest-run.sh inside the nested lab host, for every run in a KVM guest
# there.  Under the lab host's TCG, bash reading all of lab-lib.sh took most of such a round trip.
# No errexit here: the caller's options stay as they are.

lab_log() { printf '[lab] %s\n' "$*" >&2; }
lab_err() { printf '[lab] ERROR: %s\n' "$*" >&2; }
# Seconds since the epoch: bash's own clock, no date process (each one a fork and an exec, which
# cost tens of milliseconds inside the nested lab host).
lab_now() { echo "$EPOCHSECONDS"; }

# Control channel client (protocol: vm-images/common/magnet-ctl).
# lab_ctl_exec SOCK TIMEOUT CMD: run CMD in the VM, print its output, return its exit status.
# Returns 124 (and prints an error) when no answer arrives in TIMEOUT+10 s.
lab_ctl_exec() {
  # A request garbled on the wire (rc 253 from magnet-ctl: it did not run) is sent once more.
  local rc=0
  lab_ctl_exec_once "$@" || rc=$?
  if (( rc == 253 )); then
    lab_log "control channel $1: request arrived garbled, sending it again"
    rc=0
    lab_ctl_exec_once "$@" || rc=$?
  fi
  return "$rc"
}

lab_ctl_exec_once() {
  local sock="$1" to="$2" cmd="$3" id b64 line out="" rc="" state=wait deadline remaining eof=0
  [[ -S "$sock" ]] || { lab_err "control socket $sock does not exist"; return 125; }
  id="$$-$RANDOM$RANDOM"
  b64="$(printf '%s' "$cmd" | base64 -w0)"
  # timeout: a second bound, independent of this loop's, so that whatever
  # socat or the read below wait for, the exchange ends (CI once saw a run
  # outlive its own deadline by 50 s, cause unknown).
  coproc LAB_CTL { exec timeout -k 2 $((to + 12)) socat -t 2 - "UNIX-CONNECT:$sock" 2>/dev/null; }
  local cpid=$LAB_CTL_PID rfd=${LAB_CTL[0]} wfd=${LAB_CTL[1]}
  # The base64's length last: magnet-ctl then knows the request arrived whole without a process
  # of its own to check it (an empty command keeps the old form).
  local len=""
  [[ -n $b64 ]] && len=" ${#b64}"
  { printf 'RUN %s %s %s%s\n' "$id" "$to" "$b64" "$len" 1>&"$wfd"; } 2>/dev/null || true
  deadline=$(( EPOCHSECONDS + to + 10 ))
  while :; do
    remaining=$(( deadline - EPOCHSECONDS ))
    (( remaining > 0 )) || break
    if IFS= read -r -t "$remaining" line <&"$rfd"; then
      case "$line" in
        "@@MAGNET-OUT $id") state=out ;;
        "@@MAGNET-RC $id "*) rc="${line##* }"; break ;;
        *) [[ "$state" == out ]] && out+="$line" ;;
      esac
    else
      (( $? > 128 )) && continue
      eof=1
      break
    fi
  done
  kill "$cpid" 2>/dev/null || true
  wait "$cpid" 2>/dev/null || true
  if [[ -z "$rc" ]]; then
    if (( eof )); then
      lab_err "control channel $sock closed before the command finished (VM gone?)"
    else
      lab_err "no answer on control channel $sock within $((to + 10)) s"
    fi
    return 124
  fi
  [[ -n "$out" ]] && printf '%s' "$out" | base64 -d
  return "$rc"
}

# lab_ctl_ping SOCK: 0 when the control loop answers within 3 s.
lab_ctl_ping() {
  local sock="$1" id line ok=1
  [[ -S "$sock" ]] || return 1
  id="p$$-$RANDOM"
  coproc LAB_PING { exec socat -t 1 - "UNIX-CONNECT:$sock" 2>/dev/null; }
  local cpid=$LAB_PING_PID rfd=${LAB_PING[0]} wfd=${LAB_PING[1]}
  { printf 'PING %s\n' "$id" 1>&"$wfd"; } 2>/dev/null || true
  while IFS= read -r -t 3 line <&"$rfd"; do
    if [[ "$line" == "@@MAGNET-PONG $id" ]]; then ok=0; break; fi
  done
  kill "$cpid" 2>/dev/null || true
  wait "$cpid" 2>/dev/null || true
  return $ok
}
