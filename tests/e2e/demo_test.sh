#!/usr/bin/env bash
# e2e.Demo: the README's main job, tools/demo, run as a user runs it, and its
# output checked: both parts ran, both guests' iperf3 succeeded, magnet top
# has a row per VM, and each VM's guest-tx view holds its own UDP flow at
# about its iperf3 rate (g1 20, g2 5 Mbit/s) and no flow of the other VM.
#   demo_test.sh SOURCE_DIR BUILD_DIR SUITE_TIMEOUT
set -uo pipefail
src=$1 build=$2
# On tools/test's one direct lab when it gives one (docs/lab.md), else, as a
# user's run, on a lab of its own.
reuse=()
if [[ -n ${MAGNET_E2E_SHARED_LAB:-} ]]; then
  export MAGNET_LAB_STATE=$MAGNET_E2E_SHARED_LAB
  reuse=(--reuse-lab)
fi
# ctest's bound on this suite (tests/e2e/CMakeLists.txt), less the lab's
# teardown bound (docs/lab.md, "Bounds"): tools/demo then ends its lab itself.
bound=$(( $3 - $("$src/tools/lab" bound down) ))
out=$(mktemp /tmp/magnet-demo-test.XXXXXX)
trap 'rm -f "$out"' EXIT

MAGNET_BUILD_DIR=$build timeout "$bound" "$src/tools/demo" "${reuse[@]}" >"$out" 2>&1
rc=$?
fail() { echo "demo_test: $*"; echo "----- tools/demo output -----"; cat "$out"; exit 1; }
[[ $rc == 0 ]] || fail "tools/demo exited with $rc"

grep -q '^== magnet stat: TCP iperf3' "$out" || fail "part 1 (capture core) did not run"
grep -qE '^  net\.sock\.send +[0-9]+' "$out" || fail "no per-layer counts from the recorded trace"
for g in g1 g2; do
  grep -q "^$g iperf3 rc=0" "$out" || fail "$g's iperf3 did not succeed"
  grep -qE "^[0-9]+ +$g +1 " "$out" || fail "magnet top has no row for $g"
done

# The UDP flow of guest $1 (address $2, port $3) in its own view section,
# and no address of the other guest ($4) there; prints the flow's Mbit/s.
flow_mbps() {
  awk -v g="$1" -v me="$2" -v port="$3" -v other="$4" '
    /^== magnet views --vm / { on = ($5 == g); next }
    /^== / { on = 0 }
    on && index($0, other) { print "LEAK " $0; exit }
    on && index($0, me ":") && index($0, "> 10.77.0.1:" port " udp") { print $NF; exit }
  ' "$out"
}
check() {  # guest address port other min max
  local v
  v=$(flow_mbps "$1" "$2" "$3" "$4")
  [[ -n "$v" ]] || fail "no UDP flow $2 -> 10.77.0.1:$3 in $1's view"
  [[ $v != LEAK* ]] || fail "$1's view shows the other VM's address: ${v#LEAK }"
  awk -v v="$v" -v lo="$5" -v hi="$6" 'BEGIN { exit !(v >= lo && v <= hi) }' ||
    fail "$1's flow reads $v Mbit/s, expected $5-$6"
  echo "demo_test: $1's own flow in its view: $v Mbit/s"
}
check g1 10.77.0.11 5701 10.77.0.12 16 24
check g2 10.77.0.12 5702 10.77.0.11 4 6
# Part 2, inside each VM: its own view as its agent printed it, and nothing
# of the other VM (its name or address).
in_guest() {  # guest other_name other_address
  awk -v g="$1" '/^-- in / { on = ($3 == g ":"); next } /^(==|--) / { on = 0 } on' "$out"
}
for pair in "g1 g2 10.77.0.12" "g2 g1 10.77.0.11"; do
  read -r g other oip <<<"$pair"
  sec=$(in_guest "$g")
  grep -q "this VM's view" <<<"$sec" || fail "no view printed inside $g"
  grep -qE 'tap\.tx_bps ' <<<"$sec" || fail "$g's in-guest view has no tap.tx_bps"
  if grep -qwE "$other|${oip//./\\.}" <<<"$sec"; then fail "$g's in-guest view names $other"; fi
  echo "demo_test: $g's own view printed inside it, nothing of $other"
done

# Part 3: the adaptive sender's table, its targets and the plot file.
grep -qE '^adaptive +1 +alone' "$out" || fail "no table of the adaptive sender"
grep -qE '^(MET|MISS) +follows every change' "$out" || fail "no verdict on following the changes"
plot=$(sed -n 's/^plot: //p' "$out")
[[ -n "$plot" && -s "$plot" ]] || fail "no plot file named, or it is empty ('$plot')"
echo "demo_test: the adaptive sender ran; plot $plot"
echo "demo_test: ok"
