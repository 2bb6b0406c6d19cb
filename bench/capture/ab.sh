#!/usr/bin/env bash
# Per-probe cost of two magnet builds measured at the same time: both attach
# to the same hooks and see the same packets, so the machine's drift (other
# work, frequency, cache state) hits both alike and B-A is what the code
# changed.  Start order alternates every round: the build attached first
# runs first on every packet and pays for the first touches (~10 ns per
# event here), so use an even number of rounds.  Root only.  See
# docs/bench.md.
#
#   ab.sh [--mode stream|aggregation] [--rounds 4] [--seconds 3] [--rate 200M]
#         [--probes net.sock,net.l4,net.ip,net.dev] BUILD_A BUILD_B
#
# BUILD_A/B are build directories (BUILD/host/magnet).  ns/event =
# run_time_ns/run_cnt (kernel.bpf_stats_enabled=1) per program, median over
# the rounds.  Both sets of programs run on every packet, so the absolute
# figures are higher than overhead.sh --cost's; compare B with A, and run a
# build against itself first to see the noise (typically a few ns).
set -euo pipefail

MODE=stream
ROUNDS=4
DUR=3
RATE=200M
PROBES=net.sock,net.l4,net.ip,net.dev
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mode) MODE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) DUR=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --probes) PROBES=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "ab.sh: unknown argument $1" >&2; usage ;;
    *) break ;;
  esac
done
[[ $# -eq 2 ]] || usage
A=$(cd "$1" && pwd)
B=$(cd "$2" && pwd)
[[ $EUID -eq 0 ]] || { echo "ab.sh: needs root" >&2; exit 1; }
for t in "$A/host/magnet" "$B/host/magnet" iperf3 ip python3 bpftool; do
  command -v "$t" >/dev/null || { echo "ab.sh: missing $t" >&2; exit 1; }
done
[[ $MODE == stream || $MODE == aggregation ]] || { echo "ab.sh: --mode stream|aggregation" >&2; exit 2; }

NS_S=mgab-s-$$
NS_R=mgab-r-$$
WORK=$(mktemp -d /dev/shm/magnet-ab.XXXXXX)
PIDS=()
OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled)

SELF=ab.sh
# shellcheck source=lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

veth_up "mas$$" 10.232.0.1 "mar$$" 10.232.0.2
ip netns exec "$NS_R" iperf3 -s -B 10.232.0.2 -p 5201 >/dev/null 2>&1 </dev/null &
PIDS+=($!)
sleep 1
sysctl -qw kernel.bpf_stats_enabled=1

# start BUILD OUT NF_PRIORITY -> SPID
start() {
  : >"$2"
  if [[ $MODE == stream ]]; then
    MAGNET_NF_PRIORITY=$3 "$1/host/magnet" record -o "$WORK/t.$RANDOM.mgt" --probes "$PROBES" \
      >/dev/null 2>"$2" &
    SPID=$!
    PIDS+=("$SPID")
    wait_for "$2" recording 15
  else
    MAGNET_NF_PRIORITY=$3 "$1/host/magnet" stat --probes "$PROBES" --interval 1s >"$2" 2>&1 &
    SPID=$!
    PIDS+=("$SPID")
    wait_for "$2" . 15
  fi
}


dir() { [[ $1 == A ]] && echo "$A" || echo "$B"; }

: >"$WORK/rows"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then first=A second=B; else first=B second=A; fi
  start "$(dir $first)" "$WORK/o1" -128; p1=$SPID
  start "$(dir $second)" "$WORK/o2" -127; p2=$SPID
  i1=$(prog_ids "$p1" | tr '\n' ' ')
  i2=$(prog_ids "$p2" | tr '\n' ' ')
  bpftool prog show --json >"$WORK/before.json"
  ip netns exec "$NS_S" iperf3 -c 10.232.0.2 -p 5201 -t "$DUR" -u -l 1400 -b "$RATE" >/dev/null
  bpftool prog show --json >"$WORK/after.json"
  kill -INT "$p1" "$p2"
  wait "$p1" "$p2" 2>/dev/null || true
  PIDS=("${PIDS[0]}")
  rm -f "$WORK"/*.mgt
  python3 - "$WORK/before.json" "$WORK/after.json" "$first" "$i1" "$second" "$i2" \
    >>"$WORK/rows" <<'EOF'
import json, sys
b = {p["id"]: p for p in json.load(open(sys.argv[1]))}
a = {p["id"]: p for p in json.load(open(sys.argv[2]))}
for var, ids in ((sys.argv[3], sys.argv[4]), (sys.argv[5], sys.argv[6])):
    for i in map(int, ids.split()):
        if i not in a: continue
        dn = a[i].get("run_cnt", 0) - b.get(i, {}).get("run_cnt", 0)
        dt = a[i].get("run_time_ns", 0) - b.get(i, {}).get("run_time_ns", 0)
        if dn > 0: print(var, a[i]["name"], dn, dt / dn)
EOF
  echo "ab.sh: round $r ($first attached first)" >&2
done

python3 - "$WORK/rows" "$A" "$B" "$MODE" "$RATE" "$DUR" "$ROUNDS" <<'EOF'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
progs = ["sock_send_btf", "l4_send_nf", "ip_send_cgskb", "dev_xmit_btf",
         "dev_recv_btf", "ip_recv_nf", "l4_recv_cgskb", "sock_recv_btf"]
d = {}
for v, n, c, ns in rows:
    d.setdefault((v, n), []).append(float(ns))
print(f"A = {sys.argv[2]}\nB = {sys.argv[3]}")
print(f"{sys.argv[4]}, UDP -l 1400 -b {sys.argv[5]} for {sys.argv[6]} s, {sys.argv[7]} rounds; "
      "ns/event, median over rounds, both builds attached")
print(f"{'program':<16}{'A':>8}{'B':>8}{'B-A':>8}")
sa = sb = 0
for p in progs:
    if ("A", p) not in d or ("B", p) not in d: continue
    a, b = st.median(d[("A", p)]), st.median(d[("B", p)])
    sa += a; sb += b
    print(f"{p:<16}{a:>8.0f}{b:>8.0f}{b - a:>8.0f}")
print(f"{'sum':<16}{sa:>8.0f}{sb:>8.0f}{sb - sa:>8.0f}")
EOF
