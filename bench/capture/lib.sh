# Helpers shared by overhead.sh and ab.sh (sourced, not run).  The caller
# sets SELF (its name, for messages), PIDS (background processes to end at
# exit), NS_S/NS_R (the namespaces), WORK (a scratch directory) and
# OLD_STATS (kernel.bpf_stats_enabled to restore, or empty).

# Ends every process in PIDS (SIGINT, then SIGKILL after 2 s), removes the
# namespaces and WORK, restores bpf_stats: the EXIT trap.
bench_cleanup() {
  set +e
  local p
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  ip netns del "$NS_S" 2>/dev/null
  ip netns del "$NS_R" 2>/dev/null
  [[ -n "$OLD_STATS" ]] && sysctl -qw kernel.bpf_stats_enabled="$OLD_STATS"
  rm -rf "$WORK"
}

# veth_up V_S ADDR_S V_R ADDR_R: a veth pair from NS_S to NS_R, /24
# addresses, links and loopbacks up.
veth_up() {
  ip netns add "$NS_S"
  ip netns add "$NS_R"
  ip link add "$1" netns "$NS_S" type veth peer name "$3" netns "$NS_R"
  ip -n "$NS_S" addr add "$2/24" dev "$1"
  ip -n "$NS_R" addr add "$4/24" dev "$3"
  local ns
  for ns in "$NS_S" "$NS_R"; do ip -n "$ns" link set lo up; done
  ip -n "$NS_S" link set "$1" up
  ip -n "$NS_R" link set "$3" up
}

wait_for() {  # wait_for FILE PATTERN SECONDS
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "$SELF: timed out waiting for '$2' in $1:" >&2
  cat "$1" >&2 || true
  return 1
}

# IDs of the BPF programs a process holds open (from /proc/PID/fdinfo).
prog_ids() {
  local f
  for f in /proc/"$1"/fdinfo/*; do awk '/^prog_id:/{print $2}' "$f" 2>/dev/null; done | sort -un
}
