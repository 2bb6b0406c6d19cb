#!/usr/bin/env bash
# bench/daemon/cost.sh: what `magnet host` itself costs while a VM sends.
#
# The direct lab (two TCG guests, g1 and g2) and a "wire": a veth from the
# lab bridge into a namespace of its own (10.77.0.249), as the e2e tests
# make it (tests/e2e/vm_views_test.cc, wire_ns).  Each run is one iperf3
# TCP stream of SECONDS from g1 through its tap to an iperf3 server on the
# wire, with one daemon configuration; the configurations run interleaved,
# their order rotated every round.  Per run:
#   goodput      what the iperf3 server received (its -J end summary)
#   daemon CPU   the daemon's threads' time on a CPU across the window
#                (first field of /proc/PID/task/*/schedstat), % of one core
#   BPF          run_time_ns and run_cnt (kernel.bpf_stats_enabled=1 during
#                the run, the old value restored at exit) summed over the
#                programs the daemon holds (prog_id in /proc/PID/fdinfo):
#                ns per second of wall time, ns per run, runs per second
#   QEMU CPU     g1's QEMU process (all threads), % of one core
# The daemon starts before the window and is ready (magnet top lists g1
# and g2) before it opens; it is stopped by its PID after the window.
#
#   bench/daemon/cost.sh [--rounds N] [--seconds S] [--configs LIST] [--json]
#                        [--build DIR] [--out DIR] [--reuse-lab]
#   --rounds N      rounds (default 5)
#   --seconds S     length of each iperf3 run (default 10)
#   --configs LIST  comma list of configurations (default all, in this order):
#     off           no daemon
#     default       magnet host with its default probes and views
#                   (net.dev,net.drop,vmnet.queue,sched,kvm.exit,kvm.entry,
#                   kvm.wakeup,blk), --no-deliver
#     deliver       default, and delivery to the guests' agents over their
#                   virtio-serial view channels (--vsock off)
#     no-sched      default without sched (sched.switch, sched.wakeup)
#     light         default without sched and without vmnet.queue
#     sampled       default probes; the built-in views with sample_every: 10
#                   on guest-tx, guest-rx and host-queue
#     ksampled      default probes and views, --sample net.dev=16,vmnet.queue=16:
#                   the kernel streams 1 in 16 of their records
#     quota         default, --vm-quota 1000 (at most 1000 events/s of a VM
#                   per CPU onto the stream)
#   --json          the results as one JSON object on stdout instead of the table
#   --build DIR     build tree with host/magnet (default $MAGNET_BUILD_DIR,
#                   else <repo>/build); the lab's images are its vm-images
#   --out DIR       keep the raw runs (runs.tsv; progs.tsv: each program's
#                   deltas), the daemons' logs and both summaries
#                   (summary.txt, summary.json) in DIR
#   --reuse-lab     a direct lab with g1 and g2 is up already: use it and
#                   leave it up (otherwise: tools/lab up 2, and down at exit)
# Root.  Run it under the lab's lock: flock /run/magnet-lab.lock bench/daemon/cost.sh
# A bad argument exits 2 naming it; a failed step exits 1.
set -euo pipefail

SELF=bench/daemon/cost.sh
top=$(cd "$(dirname "$0")/../.." && pwd)
here=$top/bench/daemon
ALL_CONFIGS=off,default,deliver,no-sched,light,sampled,ksampled,quota
DEFAULT_PROBES=net.dev,net.drop,vmnet.queue,sched,kvm.exit,kvm.entry,kvm.wakeup,blk
SAMPLE_EVERY=10
KSAMPLE=net.dev=16,vmnet.queue=16
QUOTA=1000
WIRE_ADDR=10.77.0.249
WIRE_MAC=02:77:00:00:00:f9
PORT=5631

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }
bad() { echo "$SELF: $*" >&2; echo "(--help lists the options)" >&2; exit 2; }
need_value() { [[ $# -ge 2 && -n $2 ]] || bad "$1 needs a value"; }

rounds=5 seconds=10 configs=$ALL_CONFIGS json=0 out="" reuse=0
build=${MAGNET_BUILD_DIR:-$top/build}
while (($#)); do
  case "$1" in
    --rounds) need_value "$@"; rounds=$2; shift ;;
    --seconds) need_value "$@"; seconds=$2; shift ;;
    --configs) need_value "$@"; configs=$2; shift ;;
    --build) need_value "$@"; build=$2; shift ;;
    --out) need_value "$@"; out=$2; shift ;;
    --json) json=1 ;;
    --reuse-lab) reuse=1 ;;
    -h|--help) usage; exit 0 ;;
    *) bad "unknown argument '$1'" ;;
  esac
  shift
done
if ! [[ $rounds =~ ^[0-9]{1,3}$ ]] || ((10#$rounds < 1 || 10#$rounds > 100)); then
  bad "--rounds '$rounds' is not a whole number from 1 to 100"
fi
if ! [[ $seconds =~ ^[0-9]{1,3}$ ]] || ((10#$seconds < 2 || 10#$seconds > 600)); then
  bad "--seconds '$seconds' is not a whole number of seconds from 2 to 600"
fi
rounds=$((10#$rounds)) seconds=$((10#$seconds))
declare -A seen=()
cfgs=()
IFS=, read -r -a cfg_list <<<"$configs"
for c in "${cfg_list[@]}"; do
  [[ ,$ALL_CONFIGS, == *,"$c",* ]] || bad "unknown configuration '$c' in --configs (known: $ALL_CONFIGS)"
  [[ -z ${seen[$c]:-} ]] || bad "configuration '$c' is twice in --configs"
  seen[$c]=1
  cfgs+=("$c")
done
((${#cfgs[@]} >= 1)) || bad "--configs '$configs' names no configuration"
magnet=$build/host/magnet
[[ $EUID -eq 0 ]] || { echo "$SELF: needs root" >&2; exit 1; }
[[ -x $magnet ]] || { echo "$SELF: no $magnet (--build DIR, or build the magnet target)" >&2; exit 1; }
for t in iperf3 bpftool python3 ip ss sysctl virsh; do
  command -v "$t" >/dev/null || { echo "$SELF: missing $t" >&2; exit 1; }
done

export MAGNET_LAB_MODE=direct MAGNET_BUILD_DIR=$build
lab=$top/tools/lab
work=$(mktemp -d /tmp/magnet-daemon-cost.XXXXXX)
[[ -n $out ]] && mkdir -p "$out"
ns=mgdcost$$ va=mgdca$$ vb=mgdcb$$
pids=()            # processes of ours still running: ended by PID at exit
lab_started=0 old_stats=""
log() { echo "[daemon-cost] $*" >&2; }

# Ends what this script started (by PID), removes the wire, restores
# bpf_stats and brings down a lab it brought up.
cleanup() {
  set +e
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  ip -n magnetlab link del "$va" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  [[ -n $old_stats ]] && sysctl -qw kernel.bpf_stats_enabled="$old_stats"
  if [[ $lab_started == 1 ]]; then
    log "lab down"
    "$lab" down >/dev/null 2>&1
  fi
  if [[ -n $out ]]; then cp -r "$work"/. "$out"/ 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

forget() {  # forget PID: no longer ours to end
  local keep=() p
  for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  pids=("${keep[@]+"${keep[@]}"}")
}

# Sum of the first field of /proc/PID/task/*/schedstat: ns on a CPU of
# every thread the process has now (a thread that ended takes its time with it).
cpu_ns() {
  { cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } | awk '{ s += $1 } END { printf "%.0f\n", s }'
}
now_ns() { date +%s%N; }

# IDs of the BPF programs a process holds (programs and links name them).
prog_ids() {
  local f
  for f in /proc/"$1"/fdinfo/*; do awk '/^prog_id:/ { print $2 }' "$f" 2>/dev/null || true; done | sort -un
}

# run_time_ns and run_cnt summed over the programs IDS (a file, one a
# line), and how many of them ran, between two `bpftool prog show --json`
# files; each program's own deltas go to PROGS (round, config, name).
bpf_delta() {  # before.json after.json ids progs.tsv round config -> "run_ns run_cnt progs_that_ran"
  python3 - "$@" <<'EOF'
import json, sys
b = {p["id"]: p for p in json.load(open(sys.argv[1]))}
a = {p["id"]: p for p in json.load(open(sys.argv[2]))}
ids = [int(l) for l in open(sys.argv[3]) if l.strip()]
ns = cnt = ran = 0
with open(sys.argv[4], "a") as progs:
    for i in ids:
        if i not in a or i not in b: continue
        dt = a[i].get("run_time_ns", 0) - b[i].get("run_time_ns", 0)
        dn = a[i].get("run_cnt", 0) - b[i].get("run_cnt", 0)
        ns += dt
        cnt += dn
        ran += dn > 0
        if dn > 0:
            progs.write(f"{sys.argv[5]}\t{sys.argv[6]}\t{a[i].get('name', i)}\t{dt}\t{dn}\n")
print(ns, cnt, ran)
EOF
}

lab_up() {
  if [[ $reuse == 1 ]]; then
    local st
    st=$("$lab" status 2>&1 || true)
    [[ $st == *mode=direct* ]] || { echo "$SELF: --reuse-lab: no direct lab is up ($st)" >&2; exit 1; }
  else
    log "lab up (direct, 2 guests; build $build)"
    # A failed up tears down what it made itself, and only that (a lab
    # already up is another's): ours to bring down only once it is up.
    if ! "$lab" up 2 >"$work/lab-up.log" 2>&1; then
      tail -20 "$work/lab-up.log" >&2
      echo "$SELF: tools/lab up 2 failed (log above)" >&2
      exit 1
    fi
    lab_started=1
  fi
  local g
  for g in g1 g2; do
    [[ -s /run/libvirt/qemu/$g.pid ]] || { echo "$SELF: the lab has no running $g" >&2; exit 1; }
  done
  qemu_pid=$(cat /run/libvirt/qemu/g1.pid)
}

# The wire: a veth from the lab bridge into namespace $ns, $WIRE_ADDR
# there, with the same MAC every time: g1's ARP cache outlives a run of
# this script in a lab that stays up (--reuse-lab).
wire_up() {
  ip netns add "$ns"
  ip -n magnetlab link add "$va" type veth peer name "$vb" netns "$ns"
  ip -n magnetlab link set "$va" master magbr0 up
  ip -n "$ns" link set "$vb" address "$WIRE_MAC"
  ip -n "$ns" addr add "$WIRE_ADDR/24" dev "$vb"
  ip -n "$ns" link set "$vb" up
  ip -n "$ns" link set lo up
}

# The daemon's arguments for configuration $1 (after `magnet -v host`).
daemon_args() {
  local no_sched=${DEFAULT_PROBES/,sched/}
  case $1 in
    default) echo "--no-deliver" ;;
    deliver) echo "--vsock off" ;;
    no-sched) echo "-p $no_sched --no-deliver" ;;
    light) echo "-p ${no_sched/,vmnet.queue/} --no-deliver" ;;
    sampled) echo "--views $work/sampled-views.yaml --no-deliver" ;;
    ksampled) echo "--sample $KSAMPLE --no-deliver" ;;
    quota) echo "--vm-quota $QUOTA --no-deliver" ;;
  esac
}

what_of() {
  case $1 in
    off) echo "no daemon" ;;
    default) echo "default probes ($DEFAULT_PROBES), built-in views, no delivery" ;;
    deliver) echo "as default, with delivery to the guests' agents over virtio-serial (vsock off)" ;;
    no-sched) echo "probes ${DEFAULT_PROBES/,sched/}, built-in views, no delivery" ;;
    light) echo "probes $(sed 's/,sched//; s/,vmnet.queue//' <<<"$DEFAULT_PROBES"), built-in views, no delivery" ;;
    sampled) echo "default probes; views guest-tx, guest-rx, host-queue with sample_every: $SAMPLE_EVERY; no delivery" ;;
    ksampled) echo "default probes and views, the kernel streaming 1 in 16 of net.dev's and vmnet.queue's records (--sample $KSAMPLE), no delivery" ;;
    quota) echo "default probes and views, --vm-quota $QUOTA (events/s of a VM per CPU onto the stream), no delivery" ;;
  esac
}

# The built-in views, with sample_every on the three per-packet views.
make_sampled_views() {
  "$magnet" host --print-default-views | awk -v n="$SAMPLE_EVERY" '
    /^  - name:/ { v = $3 }
    { print }
    /^    per_vm: true/ && (v == "guest-tx" || v == "guest-rx" || v == "host-queue") {
      print "    sample_every: " n }' >"$work/sampled-views.yaml"
  [[ $(grep -c sample_every "$work/sampled-views.yaml") == 3 ]] ||
    { echo "$SELF: the built-in views no longer have guest-tx, guest-rx and host-queue" >&2; exit 1; }
  "$magnet" host --check-views "$work/sampled-views.yaml" >/dev/null
}

# Starts the daemon of configuration $1 (round $2) and waits until `magnet
# top` lists both guests; sets dpid and dsock.
daemon_start() {
  local cfg=$1 r=$2 args
  dsock=$work/host-$cfg-$r.sock
  dlog=$work/host-$cfg-$r.log
  read -r -a args <<<"$(daemon_args "$cfg")"
  # --config /dev/null: an installed /etc/magnet/magnet.conf must not change the run.
  "$magnet" -v host --config /dev/null --socket "$dsock" --duration $((seconds + 120)) "${args[@]}" \
    >"$dlog" 2>&1 &
  dpid=$!
  pids+=("$dpid")
  local top="" i
  for ((i = 0; i < 300; i++)); do
    kill -0 "$dpid" 2>/dev/null || { tail -20 "$dlog" >&2; echo "$SELF: magnet host ($cfg) exited at start" >&2; exit 1; }
    top=$("$magnet" top --socket "$dsock" --json --count 1 2>/dev/null || true)
    [[ $top == *'"name":"g1"'* && $top == *'"name":"g2"'* ]] && break
    sleep 0.2
  done
  [[ $top == *'"name":"g1"'* && $top == *'"name":"g2"'* ]] ||
    { tail -20 "$dlog" >&2; echo "$SELF: magnet host ($cfg) did not list g1 and g2 within 60 s" >&2; exit 1; }
  sleep 1  # its first ticks, the guests' tagging: not in the window
}

# Stops the daemon by its PID (SIGTERM: it drains); sets drec to "records
# lost" from its [stopped] line ("- -" without one).
daemon_stop() {
  kill -TERM "$dpid"
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$dpid" 2>/dev/null; then
    kill -KILL "$dpid"
    echo "$SELF: magnet host did not stop within 10 s of SIGTERM" >&2
  fi
  wait "$dpid" 2>/dev/null || true
  forget "$dpid"
  drec=$(sed -nE 's/.*\[stopped\] ([0-9]+) records, ([0-9]+) lost.*/\1 \2/p' "$dlog" | tail -1)
  [[ -n $drec ]] || drec="- -"
}

# One iperf3 run from g1 to the wire; sets bps to the receiver's bits/s.
iperf_window() {
  local sj=$work/server.json
  ip netns exec "$ns" timeout $((seconds + 60)) iperf3 -s -1 -p $PORT -J >"$sj" 2>"$work/server.err" &
  local spid=$! i c
  pids+=("$spid")
  for ((i = 0; i < 100; i++)); do
    [[ -n $(ip netns exec "$ns" ss -Hltn "sport = :$PORT") ]] && break
    sleep 0.1
  done
  c=$("$lab" run g1 "iperf3 -c $WIRE_ADDR -p $PORT -t $seconds --connect-timeout 5000 >/tmp/mgcost.out 2>&1; rc=\$?; [ \$rc = 0 ] || cat /tmp/mgcost.out; echo rc=\$rc" || true)
  wait "$spid" || true
  forget "$spid"
  [[ $c == *rc=0* ]] || { echo "$SELF: iperf3 in g1 failed: $c" >&2; cat "$sj" "$work/server.err" >&2; exit 1; }
  bps=$(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]))' "$sj")
}

# One run of configuration $1 in round $2: appends a line to runs.tsv.
run_one() {
  local cfg=$1 r=$2 ids=$work/ids
  local t0 d0=0 q0 t1 d1=0 q1 bpf="0 0 0"
  : >"$ids"
  dpid="" drec="- -"
  if [[ $cfg != off ]]; then
    daemon_start "$cfg" "$r"
    prog_ids "$dpid" >"$ids"
    bpftool prog show --json >"$work/before.json"
  fi
  q0=$(cpu_ns "$qemu_pid")
  [[ -n $dpid ]] && d0=$(cpu_ns "$dpid")
  t0=$(now_ns)
  iperf_window
  t1=$(now_ns)
  [[ -n $dpid ]] && d1=$(cpu_ns "$dpid")
  q1=$(cpu_ns "$qemu_pid")
  if [[ -n $dpid ]]; then
    bpftool prog show --json >"$work/after.json"
    bpf=$(bpf_delta "$work/before.json" "$work/after.json" "$ids" "$work/progs.tsv" "$r" "$cfg")
    daemon_stop
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$cfg" "$bps" "$((t1 - t0))" "$((d1 - d0))" \
    "$((q1 - q0))" "$(wc -l <"$ids")" "${bpf// /$'\t'}" "${drec// /$'\t'}" >>"$work/runs.tsv"
  log "round $r $(printf '%-9s' "$cfg") $(awk -v b="$bps" 'BEGIN { printf "%.1f", b / 1e6 }') Mbit/s," \
    "daemon $(awk -v d=$((d1 - d0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.2f", 100 * d / t }') % of a core"
}

lab_up
wire_up
make_sampled_views
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
# What each configuration is, for the report (the views file by its name).
printf 'commit\t%s\t%s\t%s\n' "$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "$rounds" "$seconds" >"$work/configs.tsv"
for c in "${cfgs[@]}"; do
  printf '%s\t%s\t%s\n' "$c" "$(what_of "$c")" "$(daemon_args "$c" | sed "s|$work/||")" >>"$work/configs.tsv"
done
printf 'round\tconfig\tgoodput_bps\twindow_ns\tdaemon_cpu_ns\tqemu_cpu_ns\tdaemon_progs\tbpf_run_ns\tbpf_run_cnt\tbpf_progs_ran\trecords\tlost\n' \
  >"$work/runs.tsv"
printf 'round\tconfig\tprogram\trun_ns\trun_cnt\n' >"$work/progs.tsv"
n=${#cfgs[@]}
for ((r = 1; r <= rounds; r++)); do
  for ((k = 0; k < n; k++)); do
    run_one "${cfgs[$(((k + r - 1) % n))]}" "$r"
    sleep 1
  done
done
report=(python3 "$here/report.py" "$work/runs.tsv" "$work/configs.tsv" "$work/progs.tsv")
"${report[@]}" >"$work/summary.txt"
"${report[@]}" --json >"$work/summary.json"
if ((json)); then cat "$work/summary.json"; else cat "$work/summary.txt"; fi
