#!/usr/bin/env bash
# Capture overhead of magnet on iperf3 over a veth pair between two network
# namespaces created here (and removed at exit).  Root only.  See
# docs/bench.md for what every number means.
#
#   overhead.sh [--rounds R] [--seconds T] [--proto udp,tcp] [--json FILE]
#               [--modes baseline,stream,stream4,aggregation,aggregation4,packet,tcpdump]
#               [--build DIR] [--build-b DIR] [--pin]
#       goodput per mode, runs interleaved (order rotated every round);
#       a mode written MODE@b runs with the build given by --build-b (an
#       A/B of two builds in one run, e.g. --modes baseline,stream4,stream4@b);
#       --pin pins the iperf3 client to CPU 0 and the server to CPU 1
#   overhead.sh --cost [--rate 200M] [--rounds R] [--seconds T] [--json FILE]
#       per-probe cost (bpf_stats) against empty programs on the same hooks,
#       and CPU time per packet at a fixed UDP rate below saturation;
#       --cost-mode stream|stream4|aggregation|aggregation4 picks what runs
#       (default stream)
#
# Modes:  baseline      nothing attached
#         stream        magnet record --probes net.sock,net.l4,net.ip,net.dev:
#                       the whole journey, 4 layers x send+recv = 8 records
#                       per datagram (sender and receiver are both here);
#                       trace file on /dev/shm
#         stream4       magnet record, the 4 layers of the send path only
#                       (net.sock.send,net.l4.send,net.ip.send,net.dev.xmit):
#                       4 records per datagram
#         aggregation   magnet stat, the same 8 probes as stream
#         aggregation4  magnet stat, the same 4 probes as stream4
#         empty         empty BPF programs (empty_probes) on the 8 hooks: the
#                       floor any probe on these hooks pays (optional mode)
#         empty4        empty programs on the 4 send hooks (optional mode)
#         packet        magnet record --snap 96 -i VETH: one record per packet
#                       with its first 96 bytes, on the receiver's veth only
#                       (inside the receiver namespace): what tcpdump sees;
#                       trace file on /dev/shm.  Its BPF time is measured
#                       in one more run per protocol with bpf_stats on (off
#                       during the goodput rounds: its clock reads would
#                       weigh on magnet alone)
#         tcpdump       tcpdump -s 96 -w /dev/null on the receiver's veth
#                       (inside the receiver namespace)
set -euo pipefail

ROUNDS=5
DUR=5
PROTOS=udp,tcp
MODES=baseline,stream,stream4,aggregation,aggregation4,tcpdump
JSON=""
COST=0
RATE=200M
COST_MODE=stream
BUILD=""
BUILD_B=""
PIN=0
LEN=1400
PROBES=net.sock,net.l4,net.ip,net.dev                       # 8 per datagram
PROBES4=net.sock.send,net.l4.send,net.ip.send,net.dev.xmit  # 4 per datagram

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) DUR=$2; shift 2 ;;
    --proto) PROTOS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    --cost) COST=1; shift ;;
    --rate) RATE=$2; shift 2 ;;
    --cost-mode) COST_MODE=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --build-b) BUILD_B=$2; shift 2 ;;
    --pin) PIN=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "overhead.sh: unknown argument $1" >&2; usage ;;
  esac
done

HERE=$(cd "$(dirname "$0")" && pwd)
[[ -n "$BUILD" ]] || BUILD=$(cd "$HERE/../.." && pwd)/build
MAGNET=$BUILD/host/magnet
MAGNET_B=${BUILD_B:+$BUILD_B/host/magnet}
if [[ $MODES == *@b* ]]; then
  [[ -n "$BUILD_B" && -x "$MAGNET_B" ]] || { echo "overhead.sh: a MODE@b needs --build-b DIR with host/magnet" >&2; exit 2; }
fi
EMPTY=$BUILD/bench/capture/empty_probes
[[ $EUID -eq 0 ]] || { echo "overhead.sh: needs root" >&2; exit 1; }
for t in "$MAGNET" iperf3 ip python3 bpftool; do
  command -v "$t" >/dev/null || { echo "overhead.sh: missing $t" >&2; exit 1; }
done

TAG=$$
NS_S=mgbench-s-$TAG        # sender (iperf3 client)
NS_R=mgbench-r-$TAG        # receiver (iperf3 server, tcpdump)
V_S=mbs$TAG
V_R=mbr$TAG
A_S=10.231.0.1
A_R=10.231.0.2
WORK=$(mktemp -d /dev/shm/magnet-overhead.XXXXXX)
RESULTS=$WORK/results.tsv
PIDS=()
OLD_STATS=""

SELF=overhead.sh
# shellcheck source=lib.sh
. "$HERE/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

forget_pid() {  # drop a PID from the cleanup list once reaped
  local keep=() p
  for p in "${PIDS[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]+"${keep[@]}"}")
}

# Stops a background helper by PID with SIGINT and reaps it.
stop_pid() {
  local p=$1
  kill -INT "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  forget_pid "$p"
}

# utime+stime of a process in clock ticks, and its voluntary context switches.
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
vol_csw() { awk '/^voluntary_ctxt_switches/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------------- network
veth_up "$V_S" $A_S "$V_R" $A_R
# ip netns exec execs in place: $! is iperf3's own PID.
PIN_S=() PIN_C=()
[[ $PIN == 1 ]] && { PIN_S=(-A 1); PIN_C=(-A 0); }
ip netns exec "$NS_R" iperf3 -s -B $A_R -p 5201 "${PIN_S[@]}" >"$WORK/iperf3-server.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do
  ip netns exec "$NS_S" bash -c "exec 3<>/dev/tcp/$A_R/5201" 2>/dev/null && break
  sleep 0.1
done
sleep 0.2

# iperf3 client run; prints "goodput_bps packets udp_lost_pct" on stdout.
run_iperf() {  # proto out.json [rate]
  local proto=$1 out=$2 rate=${3:-0} args=()
  if [[ $proto == udp ]]; then args=(-u -l $LEN -b "$rate"); fi
  ip netns exec "$NS_S" iperf3 -c $A_R -p 5201 -t "$DUR" --json "${PIN_C[@]}" "${args[@]}" >"$out" || {
    echo "overhead.sh: iperf3 failed:" >&2; cat "$out" >&2; return 1; }
  python3 - "$out" "$proto" $LEN <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); proto = sys.argv[2]; ln = int(sys.argv[3])
e = d["end"]
if proto == "udp":
    s = e.get("sum_received") or e["sum"]
    if "sum_received" in e:
        bps = s["bits_per_second"]; pk = e["sum"]["packets"]; lp = e["sum"]["lost_percent"]
    else:  # iperf3 <= 3.12: sum is the sender's view plus the server's loss
        pk, lost, secs = s["packets"], s["lost_packets"], s["seconds"]
        bps = (pk - lost) * ln * 8 / secs; lp = s["lost_percent"]
    print(f"{bps:.0f} {pk} {lp:.3f}")
else:
    r = e["sum_received"]; sent = e["sum_sent"]
    print(f"{r['bits_per_second']:.0f} {int(sent['bytes'] / 1448)} 0")
EOF
}

# ---------------------------------------------------------------- overhead
start_mode() {  # mode -> sets HPID (helper PID or empty)
  HPID=""
  local mode=${1%@b} magnet=$MAGNET probes=$PROBES
  [[ $1 == *@b ]] && magnet=$MAGNET_B
  [[ $mode == *4 ]] && probes=$PROBES4
  case $mode in
    baseline) ;;
    stream|stream4)
      : >"$WORK/helper.err"
      "$magnet" record -o "$WORK/trace.mgt" --probes $probes 2>"$WORK/helper.err" &
      HPID=$!; PIDS+=("$HPID")
      wait_for "$WORK/helper.err" "recording" 15 ;;
    empty|empty4)
      : >"$WORK/helper.err"
      local so=()
      [[ $mode == empty4 ]] && so=(--send-only)
      "$EMPTY" --netns "/run/netns/$NS_S" --netns "/run/netns/$NS_R" "${so[@]}" 2>"$WORK/helper.err" &
      HPID=$!; PIDS+=("$HPID")
      wait_for "$WORK/helper.err" "ready" 15 ;;
    aggregation|aggregation4)
      : >"$WORK/helper.out"
      "$magnet" stat --probes $probes --interval 1s >"$WORK/helper.out" 2>&1 &
      HPID=$!; PIDS+=("$HPID")
      wait_for "$WORK/helper.out" "." 15 ;;   # first table: probes attached
    packet)
      : >"$WORK/helper.err"
      ip netns exec "$NS_R" "$magnet" record -o "$WORK/trace.mgt" --snap 96 -i "$V_R" 2>"$WORK/helper.err" &
      HPID=$!; PIDS+=("$HPID")
      wait_for "$WORK/helper.err" "recording" 15 ;;
    tcpdump)
      : >"$WORK/helper.err"
      ip netns exec "$NS_R" tcpdump -n -i "$V_R" -s 96 -w /dev/null 2>"$WORK/helper.err" &
      HPID=$!; PIDS+=("$HPID")
      wait_for "$WORK/helper.err" "listening on" 15 ;;
    *) echo "overhead.sh: unknown mode $1" >&2; exit 2 ;;
  esac
}

# Packet capture's BPF time: one more run per protocol with bpf_stats on,
# the record process's programs summed (run_time_ns over every run, on
# every device: the interface test is inside the program).
packet_cpu() {
  local protos=(${PROTOS//,/ }) proto ids line recs
  OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled)
  sysctl -qw kernel.bpf_stats_enabled=1
  printf 'proto\tbpf_ns\tbpf_cnt\trecords\tgoodput_bps\n' >"$WORK/packet_cpu.tsv"
  for proto in "${protos[@]}"; do
    start_mode packet
    ids=$(prog_ids "$HPID")
    bpftool prog show --json >"$WORK/before.json"
    read -r bps pk lp < <(run_iperf "$proto" "$WORK/iperf.json" 0) || true
    [[ -n "${bps:-}" ]] || { echo "overhead.sh: iperf3 run failed" >&2; exit 1; }
    bpftool prog show --json >"$WORK/after.json"
    stop_pid "$HPID"
    line=$(grep -E '^magnet: [0-9]+ records' "$WORK/helper.err" | tail -1)
    recs=$(sed -E 's/^magnet: ([0-9]+) records.*/\1/' <<<"$line")
    rm -f "$WORK/trace.mgt"
    python3 - "$WORK/before.json" "$WORK/after.json" "$proto" "$recs" "$bps" $ids >>"$WORK/packet_cpu.tsv" <<'EOF'
import json, sys
b = {p["id"]: p for p in json.load(open(sys.argv[1]))}
a = {p["id"]: p for p in json.load(open(sys.argv[2]))}
ns = cnt = 0
for i in map(int, sys.argv[6:]):
    if i in a:
        ns += a[i].get("run_time_ns", 0) - b.get(i, {}).get("run_time_ns", 0)
        cnt += a[i].get("run_cnt", 0) - b.get(i, {}).get("run_cnt", 0)
print("\t".join(map(str, [sys.argv[3], ns, cnt, sys.argv[4], sys.argv[5]])))
EOF
    printf '  %s packet CPU run: bpf_stats on, %s records\n' "$proto" "$recs" >&2
  done
  sysctl -qw kernel.bpf_stats_enabled="$OLD_STATS"
}

run_overhead() {
  local modes=(${MODES//,/ }) protos=(${PROTOS//,/ }) n=${#modes[@]}
  printf 'proto\tround\tmode\tgoodput_bps\tpackets\tudp_lost_pct\trecords\tlost_events\thelper_cpu_s\thelper_vol_csw\n' >"$RESULTS"
  for proto in "${protos[@]}"; do
    for ((r = 1; r <= ROUNDS; r++)); do
      for ((k = 0; k < n; k++)); do
        local mode=${modes[$(((k + r - 1) % n))]}
        start_mode "$mode"
        local c0=0 s0=0 c1=0 s1=0
        [[ -n "$HPID" ]] && { c0=$(cpu_ticks "$HPID"); s0=$(vol_csw "$HPID"); }
        read -r bps pk lp < <(run_iperf "$proto" "$WORK/iperf.json" 0) || true
        [[ -n "${bps:-}" ]] || { echo "overhead.sh: iperf3 run failed" >&2; exit 1; }
        [[ -n "$HPID" ]] && { c1=$(cpu_ticks "$HPID"); s1=$(vol_csw "$HPID"); }
        local recs=- lost=-
        if [[ -n "$HPID" ]]; then stop_pid "$HPID"; fi
        if [[ $mode == stream* || $mode == packet* ]]; then
          local line
          line=$(grep -E '^magnet: [0-9]+ records, [0-9]+ bytes, [0-9]+ lost' "$WORK/helper.err" | tail -1)
          [[ -n "$line" ]] || { echo "overhead.sh: no final line from magnet record:" >&2; cat "$WORK/helper.err" >&2; exit 1; }
          recs=$(sed -E 's/^magnet: ([0-9]+) records.*/\1/' <<<"$line")
          lost=$(sed -E 's/.* ([0-9]+) lost.*/\1/' <<<"$line")
          rm -f "$WORK/trace.mgt"
        elif [[ $mode == tcpdump ]]; then  # its exit lines: captured, dropped by kernel
          recs=$(sed -nE 's/^([0-9]+) packets? captured.*/\1/p' "$WORK/helper.err" | tail -1)
          lost=$(sed -nE 's/^([0-9]+) packets? dropped by kernel.*/\1/p' "$WORK/helper.err" | tail -1)
          recs=${recs:--} lost=${lost:--}
        fi
        local hcpu
        hcpu=$(awk -v a="$c0" -v b="$c1" -v t="$CLK_TCK" 'BEGIN{printf "%.2f", (b-a)/t}')
        printf '%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$proto" "$r" "$mode" "$bps" "$pk" "$lp" \
          "$recs" "$lost" "$hcpu" "$((s1 - s0))" >>"$RESULTS"
        printf '  %s round %d %-12s %8.0f Mbit/s%s\n' "$proto" "$r" "$mode" \
          "$(awk -v b="$bps" 'BEGIN{print b/1e6}')" \
          "$([[ $mode == stream* || $mode == packet* ]] && echo ", $recs records, $lost lost")" >&2
      done
    done
  done
  [[ ",$MODES," == *,packet,* ]] && packet_cpu
  python3 - "$RESULTS" "$JSON" "$ROUNDS" "$DUR" "$WORK/packet_cpu.tsv" <<'EOF'
import csv, json, os, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
out = {"bench": "capture_overhead", "rounds": int(sys.argv[3]), "seconds": float(sys.argv[4]),
       "path": "iperf3 over veth between two netns", "protocols": {}}
targets = {"stream": 0.95, "stream4": 0.95, "aggregation": 0.98, "aggregation4": 0.98}
targets.update({m + "@b": t for m, t in list(targets.items())})
label = {"stream": "stream (8 rec/dgram)", "stream4": "stream4 (4 rec/dgram)",
         "aggregation": "aggregation (8 probes)", "aggregation4": "aggregation4 (4 probes)",
         "empty": "empty progs (8 hooks)", "empty4": "empty progs (4 hooks)",
         "packet": "packet (--snap 96)", "tcpdump": "tcpdump -s 96"}
recorded = ("stream", "packet", "tcpdump")  # modes that count their records
# CPU of packet capture: magnet's BPF time (the bpf_stats run) and its
# record process, against the tcpdump process (utime+stime; its in-kernel
# copy, AF_PACKET in softirq, is charged to no process and not counted).
cpu_runs = list(csv.DictReader(open(sys.argv[5]), delimiter="\t")) if os.path.exists(sys.argv[5]) else []
def packet_cpu_summary(proto, pr, res):
    run = next((c for c in cpu_runs if c["proto"] == proto), None)
    if not run or "packet" not in res or "tcpdump" not in res: return
    secs = float(sys.argv[4])
    med = statistics.median
    recs_p = med(int(r["records"]) for r in pr if r["mode"] == "packet")
    recs_t = [int(r["records"]) for r in pr if r["mode"] == "tcpdump" and r["records"] != "-"]
    proc_p = res["packet"]["helper_cpu_s_median"]; proc_t = res["tcpdump"]["helper_cpu_s_median"]
    bpf_s = int(run["bpf_ns"]) / 1e9
    bpf_per_rec = int(run["bpf_ns"]) / max(1, int(run["records"]))
    tot_p = proc_p + bpf_per_rec * recs_p / 1e9
    e = {"bpf_run_s": bpf_s, "bpf_runs": int(run["bpf_cnt"]), "bpf_run_records": int(run["records"]),
         "bpf_ns_per_record": bpf_per_rec, "process_cpu_s": proc_p,
         "magnet_cpu_s": tot_p, "magnet_ns_per_record": tot_p * 1e9 / max(1, recs_p),
         "tcpdump_process_cpu_s": proc_t,
         "tcpdump_ns_per_packet": proc_t * 1e9 / max(1, med(recs_t)) if recs_t else None}
    e["less_cpu_than_tcpdump"] = e["magnet_cpu_s"] < proc_t
    res["packet"]["cpu"] = e
    print(f"packet CPU per {secs:g} s run (medians): magnet record {proc_p:.2f} s + BPF "
          f"{bpf_per_rec:.0f} ns/record x {recs_p:.0f} records = {tot_p:.2f} s "
          f"({e['magnet_ns_per_record']:.0f} ns/record); tcpdump process {proc_t:.2f} s"
          + (f" ({e['tcpdump_ns_per_packet']:.0f} ns/packet)" if recs_t else "")
          + " (its kernel copy not counted): " + ("less" if e["less_cpu_than_tcpdump"] else "more") + " CPU than tcpdump")
    print(f"  BPF from a separate run with bpf_stats: {run['bpf_cnt']} program runs (every device), "
          f"{bpf_s:.3f} s, {run['records']} records, goodput {float(run['goodput_bps'])/1e6:.0f} Mbit/s")

for proto in dict.fromkeys(r["proto"] for r in rows):
    pr = [r for r in rows if r["proto"] == proto]
    modes = list(dict.fromkeys(r["mode"] for r in pr))
    base = {r["round"]: float(r["goodput_bps"]) for r in pr if r["mode"] == "baseline"}
    bmed = statistics.median(base.values()) if base else None
    res = {}
    for m in modes:
        mr = [r for r in pr if r["mode"] == m]
        g = [float(r["goodput_bps"]) for r in mr]
        # per-round ratio: this run over the baseline run of the same round
        rr = [float(r["goodput_bps"]) / base[r["round"]] for r in mr if r["round"] in base]
        e = {"goodput_bps": {"median": statistics.median(g), "min": min(g), "max": max(g)},
             "samples_bps": g,
             "ratio_of_medians": statistics.median(g) / bmed if bmed else None,
             "per_round_ratio": {"median": statistics.median(rr), "min": min(rr), "max": max(rr)} if rr else None,
             "udp_lost_pct_median": statistics.median(float(r["udp_lost_pct"]) for r in mr),
             "helper_cpu_s_median": statistics.median(float(r["helper_cpu_s"]) for r in mr),
             "helper_voluntary_csw_median": statistics.median(int(r["helper_vol_csw"]) for r in mr)}
        if m.startswith(recorded):
            e["records"] = [int(r["records"]) if r["records"] != "-" else None for r in mr]
            e["lost_events"] = [int(r["lost_events"]) if r["lost_events"] != "-" else None for r in mr]
            e["records_per_packet"] = statistics.median(
                int(r["records"]) / max(1, int(r["packets"])) for r in mr
                if r["records"] != "-") if proto == "udp" and m.startswith(("stream", "packet")) else None
        if m in targets:
            e["target_ratio"] = targets[m]
        res[m] = e
    for m in ("stream", "stream4", "stream@b", "stream4@b", "packet", "packet@b"):
        if m in res and "tcpdump" in res:
            res[m]["above_tcpdump"] = res[m]["goodput_bps"]["median"] > res["tcpdump"]["goodput_bps"]["median"]
            # same round: this run against the tcpdump run of that round
            td = {r["round"]: float(r["goodput_bps"]) for r in pr if r["mode"] == "tcpdump"}
            res[m]["rounds_above_tcpdump"] = sum(
                1 for r in pr if r["mode"] == m and r["round"] in td and float(r["goodput_bps"]) > td[r["round"]])
    out["protocols"][proto] = res
    print(f"\n{proto.upper()} ({'-l 1400 -b 0' if proto == 'udp' else 'default'}), {sys.argv[3]} rounds x {sys.argv[4]} s, interleaved; goodput = receiver Mbit/s")
    print(f"{'mode':<24}{'median':>9}{'min-max':>15}{'ratio':>8}{'round ratio (min-max)':>24}"
          f"{'udp lost%':>10}{'helper CPU':>11}{'wakeups/s':>10}  lost events")
    for m, e in res.items():
        g = e["goodput_bps"]; rr = e["per_round_ratio"]
        mm = f"{g['min']/1e6:.0f}-{g['max']/1e6:.0f}"
        rat = f"{e['ratio_of_medians']:.3f}" if e["ratio_of_medians"] else "-"
        rrs = f"{rr['median']:.3f} ({rr['min']:.3f}-{rr['max']:.3f})" if rr else "-"
        cpu = f"{100*e['helper_cpu_s_median']/float(sys.argv[4]):.0f}%" if m != "baseline" else "-"
        wk = f"{e['helper_voluntary_csw_median']/float(sys.argv[4]):.0f}" if m != "baseline" else "-"
        lost = ",".join(map(str, e["lost_events"])) if m.startswith(recorded) else ""
        lbl = label.get(m.removesuffix("@b"), m) + (" @b" if m.endswith("@b") else "")
        print(f"{lbl:<24}{g['median']/1e6:>9.0f}{mm:>15}{rat:>8}{rrs:>24}{e['udp_lost_pct_median']:>10.2f}{cpu:>11}{wk:>10}  {lost}")
    for m in ("stream", "stream4", "stream@b", "stream4@b", "packet", "packet@b"):
        if m in res and res[m].get("records_per_packet"):
            print(f"{m}: {res[m]['records_per_packet']:.2f} records per datagram sent")
    for m in ("stream", "stream4", "stream@b", "stream4@b", "packet", "packet@b"):
        if m in res and "above_tcpdump" in res[m]:
            print(f"{m}: {'above' if res[m]['above_tcpdump'] else 'below'} tcpdump (medians); "
                  f"above it in {res[m]['rounds_above_tcpdump']} of {len(res[m]['samples_bps'])} rounds")
    packet_cpu_summary(proto, pr, res)
if sys.argv[2]:
    s = json.dumps(out, indent=1)
    if sys.argv[2] == "-": print(s)
    else: open(sys.argv[2], "w").write(s + "\n")
EOF
}

# ---------------------------------------------------------------- per-probe cost
snapshot() { bpftool prog show --json >"$1"; }

run_cost() {
  [[ -x "$EMPTY" ]] || { echo "overhead.sh: build $EMPTY first" >&2; exit 1; }
  OLD_STATS=$(sysctl -n kernel.bpf_stats_enabled)
  sysctl -qw kernel.bpf_stats_enabled=1
  : >"$WORK/cost.tsv"
  for ((r = 1; r <= ROUNDS; r++)); do
    # Phase A: empty programs alone.  Phase B: magnet stream + empty
    # programs on the same hooks, both seeing the same packets.
    for phase in empty both; do
      : >"$WORK/empty.err"
      "$EMPTY" --netns "/run/netns/$NS_S" --netns "/run/netns/$NS_R" 2>"$WORK/empty.err" &
      local epid=$!; PIDS+=("$epid")
      wait_for "$WORK/empty.err" "ready" 15
      local mpid="" ids
      ids=$(prog_ids "$epid")
      if [[ $phase == both ]]; then
        start_mode "$COST_MODE"; mpid=$HPID
        ids="$ids $(prog_ids "$mpid")"
      fi
      snapshot "$WORK/before.json"
      local c0=0 c1=0
      [[ -n "$mpid" ]] && c0=$(cpu_ticks "$mpid")
      read -r bps pk lp < <(run_iperf udp "$WORK/iperf.json" "$RATE") || true
      [[ -n "${bps:-}" ]] || { echo "overhead.sh: iperf3 run failed" >&2; exit 1; }
      [[ -n "$mpid" ]] && c1=$(cpu_ticks "$mpid")
      snapshot "$WORK/after.json"
      local recs=0 lost=0
      if [[ -n "$mpid" ]]; then
        stop_pid "$mpid"
      fi
      if [[ -n "$mpid" && $COST_MODE == stream* ]]; then
        local line
        line=$(grep -E '^magnet: [0-9]+ records' "$WORK/helper.err" | tail -1)
        recs=$(sed -E 's/^magnet: ([0-9]+) records.*/\1/' <<<"$line")
        lost=$(sed -E 's/.* ([0-9]+) lost.*/\1/' <<<"$line")
        rm -f "$WORK/trace.mgt"
      fi
      stop_pid "$epid"
      python3 - "$WORK/before.json" "$WORK/after.json" "$r" "$phase" "$pk" "$bps" "$lp" \
        "$(awk -v a="$c0" -v b="$c1" -v t="$CLK_TCK" 'BEGIN{print (b-a)/t}')" "$recs" "$lost" \
        $ids >>"$WORK/cost.tsv" <<'EOF'
import json, sys
b = {p["id"]: p for p in json.load(open(sys.argv[1]))}
a = {p["id"]: p for p in json.load(open(sys.argv[2]))}
r, phase, pk, bps, lp, cpu, recs, lost = sys.argv[3:11]
for i in map(int, sys.argv[11:]):
    if i not in a: continue
    p0, p1 = b.get(i, {}), a[i]
    dt = p1.get("run_time_ns", 0) - p0.get("run_time_ns", 0)
    dn = p1.get("run_cnt", 0) - p0.get("run_cnt", 0)
    print("\t".join(map(str, [r, phase, p1["name"], dn, dt, pk, bps, lp, cpu, recs, lost])))
EOF
      printf '  cost round %d %-5s %s packets at %s\n' "$r" "$phase" "$pk" "$RATE" >&2
    done
  done
  python3 - "$WORK/cost.tsv" "$JSON" "$RATE" "$DUR" <<'EOF'
import json, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
hook = {  # magnet program -> (empty program on the same hook, hook)
    "sock_send_btf": ("empty_sock_send", "tp_btf sock_send_length"),
    "l4_send_nf": ("empty_l4_send", "netfilter LOCAL_OUT"),
    "ip_send_cgskb": ("empty_ip_send", "cgroup_skb egress"),
    "dev_xmit_btf": ("empty_dev_xmit", "tp_btf net_dev_queue"),
    "dev_recv_btf": ("empty_dev_recv", "tp_btf netif_receive_skb"),
    "ip_recv_nf": ("empty_ip_recv", "netfilter PRE_ROUTING"),
    "l4_recv_cgskb": ("empty_l4_recv", "cgroup_skb ingress"),
    "sock_recv_btf": ("empty_sock_recv", "tp_btf sock_recv_length"),
}
med = statistics.median
per = {}  # (phase, name) -> [ns/event per round]
cnt = {}
rounds = {}
for r, phase, name, dn, dt, pk, bps, lp, cpu, recs, lost in rows:
    dn, dt = int(dn), int(dt)
    if dn <= 0: continue
    per.setdefault((phase, name), []).append(dt / dn)
    cnt.setdefault((phase, name), []).append(dn / max(1, int(pk)))
    rd = rounds.setdefault((r, phase), {"pk": int(pk), "bps": float(bps), "lp": float(lp),
                                        "cpu": float(cpu), "recs": int(recs), "lost": int(lost), "ns": {}})
    rd["ns"][name] = dt
def mm(v): return f"{med(v):6.0f} ({min(v):.0f}-{max(v):.0f})"
print(f"\nPer-probe cost ({__import__('os').environ.get('COST_MODE')}), UDP -l 1400 -b {sys.argv[3]} for {sys.argv[4]} s, {len({k[0] for k in rounds})} rounds;"
      " ns/event = run_time_ns/run_cnt (kernel.bpf_stats_enabled=1), median (min-max)")
print(f"{'magnet program':<15}{'hook':<26}{'events/pkt':>11}{'magnet ns/ev':>20}{'empty ns/ev (same run)':>24}"
      f"{'empty alone':>20}{'added ns':>10}")
out = {"bench": "capture_probe_cost", "rate": sys.argv[3], "seconds": float(sys.argv[4]), "programs": []}
tot_added = []
for m, (e, h) in hook.items():
    mv = per.get(("both", m)); ev = per.get(("both", e)); ea = per.get(("empty", e))
    if not mv or not ev: print(f"{m:<15}{h:<26}  (no events)"); continue
    added = [x - y for x, y in zip(mv, ev)]
    tot_added.append(med(added))
    print(f"{m:<15}{h:<26}{med(cnt[('both', m)]):>11.2f}{mm(mv):>20}{mm(ev):>24}{mm(ea) if ea else '-':>20}{med(added):>10.0f}")
    out["programs"].append({"program": m, "hook": h, "events_per_packet": med(cnt[("both", m)]),
                            "magnet_ns_per_event": {"median": med(mv), "min": min(mv), "max": max(mv)},
                            "empty_ns_per_event_same_run": {"median": med(ev), "min": min(ev), "max": max(ev)},
                            "empty_ns_per_event_alone": {"median": med(ea), "min": min(ea), "max": max(ea)} if ea else None,
                            "added_ns_per_event": med(added)})
# CPU time per packet, phase "both"
kern, cons, rpp, lost, lp = [], [], [], [], []
for (r, phase), d in rounds.items():
    if phase != "both": continue
    kern.append(sum(v for k, v in d["ns"].items() if k in hook) / d["pk"])
    cons.append(d["cpu"] * 1e9 / d["pk"])
    rpp.append(d["recs"] / d["pk"]); lost.append(d["lost"]); lp.append(d["lp"])
# empty programs on the hooks magnet used (all 8, or the 4 send hooks)
empt = [sum(d["ns"].get(e, 0) for m, (e, h) in hook.items() if m in d["ns"]) / d["pk"]
        for (r, ph), d in rounds.items() if ph == "both"]
nh = len({m for (r, ph), d in rounds.items() if ph == "both" for m in d["ns"] if m in hook})
print(f"\nCPU time per datagram at {sys.argv[3]} (phase magnet+empty), median (min-max):")
print(f"  magnet BPF programs, summed over the {nh} hooks (bpf_stats): {mm(kern)} ns")
print(f"  empty programs on the same {nh} hooks (bpf_stats):           {mm(empt)} ns")
print(f"  => added in the kernel by magnet's probes:                {med(kern)-med(empt):6.0f} ns")
print(f"  magnet record process, utime+stime / datagrams:           {mm(cons)} ns  (10 ms tick resolution)")
print(f"  records per datagram {med(rpp):.2f}; lost events {lost}; iperf3 UDP loss % {lp}")
out["per_packet"] = {"magnet_bpf_ns": {"median": med(kern), "min": min(kern), "max": max(kern)},
                     "empty_bpf_ns": {"median": med(empt), "min": min(empt), "max": max(empt)},
                     "consumer_cpu_ns": {"median": med(cons), "min": min(cons), "max": max(cons)},
                     "records_per_packet": med(rpp), "lost_events": lost, "udp_lost_pct": lp}
if sys.argv[2]:
    s = json.dumps(out, indent=1)
    if sys.argv[2] == "-": print(s)
    else: open(sys.argv[2], "w").write(s + "\n")
EOF
}

echo "overhead.sh: kernel.bpf_stats_enabled=$(sysctl -n kernel.bpf_stats_enabled) during the runs" >&2
export COST_MODE
if [[ $COST == 1 ]]; then run_cost; else run_overhead; fi
