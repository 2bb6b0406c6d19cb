#!/usr/bin/env bash
# bench/adapt: guest applications that adapt, on a shared bottleneck.
#
# The direct lab (two TCG guests) sends through a "wire": a veth from the
# lab bridge into a namespace of its own, shaped with tbf to CAPACITY with a
# queue of 50 ms.  magnet host is told the link (--link DEV@magnetlab) and
# reads its capacity from the tbf.  Phases of PHASE seconds each:
#   1 g1 alone   2 g2 sends UDP at 70% of C   3 alone   4 g2 TCP bulk   5 alone
# run once per case for g1's sender:
#   adaptive  magnet-adapt send --adaptive (its rate from its own view only)
#   fixed     magnet-adapt send --fixed at its alone-rate (95% of C)
#   tcp       magnet-adapt send --tcp (adapts by itself, by loss and queueing)
# Receivers on the wire report every 100 ms (host clock); g1's queueing
# delay at the bottleneck is magnet's (magnet stats g1, every 0.5 s).
# Prints a table (bench/adapt/analyze.py), and with --json the figures; the
# plot of rates over time goes to OUT/adapt.png (gnuplot).
#
#   bench/adapt/run.sh [--json] [--out DIR] [--capacity MBIT] [--phase S]
#                      [--cases adaptive,fixed,tcp] [--reuse-lab]
# --reuse-lab: a direct lab with g1 and g2 is up already (tools/demo).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${MAGNET_BUILD_DIR:-$top/build}
magnet=$build/host/magnet
adapt=$build/guest/magnet-adapt
json=0 out="" cap_mbit=8 phase=10 cases=adaptive,fixed,tcp reuse=0
usage() { sed -n '/^#   bench/,/^# --reuse/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --json) json=1 ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --capacity) cap_mbit=${2:?--capacity needs Mbit/s}; shift ;;
    --phase) phase=${2:?--phase needs seconds}; shift ;;
    --cases) cases=${2:?--cases needs a list}; shift ;;
    --reuse-lab) reuse=1 ;;
    -h|--help) usage ;;
    *) echo "bench/adapt: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
[[ $cap_mbit =~ ^[0-9]+$ && $cap_mbit -ge 1 && $cap_mbit -le 1000 ]] ||
  { echo "bench/adapt: --capacity '$cap_mbit' is not a whole number of Mbit/s (1-1000)" >&2; exit 2; }
[[ $phase =~ ^[0-9]+$ && $phase -ge 3 && $phase -le 120 ]] ||
  { echo "bench/adapt: --phase '$phase' is not a whole number of seconds (3-120)" >&2; exit 2; }
for c in ${cases//,/ }; do
  [[ $c == adaptive || $c == fixed || $c == tcp ]] ||
    { echo "bench/adapt: unknown case '$c' (adaptive, fixed, tcp)" >&2; exit 2; }
done
[[ -x $magnet && -x $adapt ]] || { echo "bench/adapt: build first (tools/build.sh)" >&2; exit 1; }
out=${out:-$(mktemp -d /tmp/magnet-adapt.XXXXXX)}
mkdir -p "$out"
cap=$((cap_mbit * 1000000))
lab="$top/tools/lab"
export MAGNET_LAB_MODE=direct

ns=mgadapt$$ va=mgaa$$ vb=mgab$$
pids=() lab_started=0
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip -n magnetlab link del "$va" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  if [[ $lab_started == 1 ]]; then "$lab" down >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT INT TERM
log() { echo "[adapt] $*" >&2; }

if [[ $reuse == 0 ]]; then
  lab_started=1
  log "lab up (direct, 2 guests)"
  if ! MAGNET_LAB_GUESTS=2 "$lab" up >"$out/lab-up.log" 2>&1; then
    tail -20 "$out/lab-up.log" >&2
    exit 1
  fi
fi

# The wire: one MAC for every run (guests' ARP caches outlive a run).
ip netns add "$ns"
ip -n magnetlab link add "$va" type veth peer name "$vb" netns "$ns"
ip -n magnetlab link set "$va" master magbr0 up
ip -n "$ns" link set "$vb" address 02:77:00:00:00:fa
ip -n "$ns" addr add 10.77.0.250/24 dev "$vb"
ip -n "$ns" link set "$vb" up
ip -n "$ns" link set lo up
limit=$((cap / 8 / 20))  # 50 ms of queue at C
ip netns exec magnetlab tc qdisc add dev "$va" root tbf rate "${cap}bit" burst 16kb limit "$limit"

sock="$out/host.sock"
"$magnet" host --socket "$sock" --vsock off --link "$va@magnetlab" --duration 1800 2>"$out/host.log" &
pids+=($!)
for _ in $(seq 150); do
  n=$("$magnet" sessions --json --socket "$sock" 2>/dev/null | grep -o '"subscribed":true' | wc -l || true)
  [[ $n -ge 2 ]] && break
  sleep 0.2
done
[[ ${n:-0} -ge 2 ]] || { log "the guests' agents did not subscribe"; tail -20 "$out/host.log" >&2; exit 1; }

alone=$(awk -v c="$cap" 'BEGIN { printf "%d", c * 0.95 * 1400 / 1442 }')
udp2=$(awk -v c="$cap" 'BEGIN { printf "%d", c * 0.7 * 1400 / 1442 }')
total=$((5 * phase))
for c in ${cases//,/ }; do
  log "case $c: phases of $phase s, C = $cap_mbit Mbit/s"
  d="$out/$c"
  mkdir -p "$d"
  tcp=""
  [[ $c == tcp ]] && tcp=--tcp
  ip netns exec "$ns" "$adapt" receive --port 6001 $tcp --duration $((total + 6)) --interval 100ms >"$d/g1-recv.jsonl" &
  pids+=($!)
  ip netns exec "$ns" "$adapt" receive --port 6002 --duration $((total + 6)) --interval 100ms >"$d/g2-udp.jsonl" &
  pids+=($!)
  ip netns exec "$ns" "$adapt" receive --port 6003 --tcp --duration $((total + 6)) --interval 100ms >"$d/g2-tcp.jsonl" &
  pids+=($!)
  # g1's bottleneck delay and the link's bytes, every 0.5 s on the host.
  (
    while :; do
      w=$(date +%s.%N)
      s=$("$magnet" stats g1 --json --socket "$sock" 2>/dev/null || echo null)
      q=$(ip netns exec magnetlab tc -s -j qdisc show dev "$va" 2>/dev/null || echo null)
      echo "{\"wall\":$w,\"stats\":${s:-null},\"tc\":${q:-null}}"
      sleep 0.5
    done
  ) >"$d/samples.jsonl" &
  sampler=$!
  pids+=($sampler)
  sleep 0.5
  case $c in
    adaptive) send="--adaptive" ;;
    fixed) send="--fixed $alone" ;;
    tcp) send="--tcp" ;;
  esac
  "$lab" run g1 "magnet-adapt send --to 10.77.0.250:6001 $send --duration $((total + 2)) 2>&1" \
    >"$d/g1-send.jsonl" 2>&1 &
  g1=$!
  pids+=($g1)
  sleep $((phase + 1))
  "$lab" run g2 "(magnet-adapt send --to 10.77.0.250:6002 --fixed $udp2 --duration $phase >/dev/null 2>&1 &)"
  sleep $((2 * phase))
  "$lab" run g2 "(magnet-adapt send --to 10.77.0.250:6003 --tcp --duration $phase >/dev/null 2>&1 &)"
  sleep $((2 * phase))
  wait "$g1" || true
  sleep 2
  kill "$sampler" 2>/dev/null || true
  echo "{\"case\":\"$c\",\"capacity_bps\":$cap,\"phase_s\":$phase,\"alone_rate_bps\":$alone}" >"$d/meta.json"
  sleep 4  # the receivers end by themselves
done

args=("$out" --cases "$cases")
((json)) && args+=(--json)
python3 "$top/bench/adapt/analyze.py" "${args[@]}"
log "data and plot in $out"
