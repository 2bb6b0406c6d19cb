#!/usr/bin/env bash
# e2e.AdaptDirect: the adaptive sender on a shared bottleneck (bench/adapt,
# direct lab, 8 Mbit/s link, phases of 8 s), adaptive and fixed-rate cases.
# Bounds that do not depend on this machine's speed:
#   * the adaptive sender follows every change within its phase (settled
#     for a second with two seconds of the phase left; how fast it follows
#     is bench/adapt's target, 1 s, a benchmark and not this test's bound);
#   * it never offers more than its own target (the available bandwidth of
#     its view, less its headroom) beyond the token bucket's slack;
#   * while g2's UDP overloads the link, its loss stays far below the
#     fixed-rate sender's in the same run, and below 5% over the run.
#   adapt_test.sh SOURCE_DIR BUILD_DIR SUITE_TIMEOUT
set -uo pipefail
src=$1 build=$2
out=$(mktemp -d /tmp/magnet-adapt-test.XXXXXX)
trap 'rm -rf "$out"' EXIT
# On tools/test's one direct lab when it gives one (docs/lab.md), else on a
# lab of its own.
reuse=()
if [[ -n ${MAGNET_E2E_SHARED_LAB:-} ]]; then
  export MAGNET_LAB_STATE=$MAGNET_E2E_SHARED_LAB
  reuse=(--reuse-lab)
fi
# ctest's bound on this suite (tests/e2e/CMakeLists.txt), less the lab's
# teardown bound (docs/lab.md, "Bounds"): bench/adapt then ends its lab itself.
bound=$(( $3 - $("$src/tools/lab" bound down) ))
MAGNET_BUILD_DIR=$build timeout "$bound" "$src/bench/adapt/run.sh" --cases adaptive,fixed --phase 8 \
  "${reuse[@]}" --out "$out" >"$out/table.txt" 2>"$out/err.txt"
rc=$?
cat "$out/table.txt"
if [[ $rc != 0 ]]; then
  echo "adapt_test: bench/adapt exited with $rc"
  tail -30 "$out/err.txt"
  exit 1
fi
python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
doc = json.load(open(out + "/results.json"))
res = {r["case"]: r for r in doc["results"]}
bad = []
a, f = res.get("adaptive"), res.get("fixed")
if not a or "phases" not in a or not f or "phases" not in f:
    print("adapt_test: a case did not run:", json.dumps(doc)[:2000]); sys.exit(1)
bound = 6.0  # a phase of 8 s less 2: following, and staying, seen inside the phase
for p in a["phases"][1:]:
    if p["follow_s"] is None or p["follow_s"] > bound:
        bad.append("phase %d (%s): followed after %s s (bound %.0f s)" % (p["phase"], p["what"], p["follow_s"], bound))
# Never above its own target: each second's offered rate against the rate
# it had computed (its view's available bandwidth less headroom), with the
# slack of a second whose rate changed and a 4-datagram bucket.
sent = [json.loads(l) for l in open(out + "/adaptive/g1-send.jsonl") if l.startswith("{")]
prev = None
for s in sent:
    if s.get("mode") != "adaptive":
        continue
    cap = max(s["rate_bps"], prev if prev is not None else s["rate_bps"]) * 1.1 + 4 * 1400 * 8
    if s["offered_bps"] > cap:
        bad.append("second %.0f: offered %.0f bit/s above its target %.0f" % (s["t"], s["offered_bps"], s["rate_bps"]))
    prev = s["rate_bps"]
if len(sent) < 20:
    bad.append("the sender reported %d seconds" % len(sent))
al, fl = a["phases"][1]["loss_pct"], f["phases"][1]["loss_pct"]
if al is None or fl is None or not (al < fl / 2):
    bad.append("loss under g2's UDP: adaptive %s%%, fixed %s%%" % (al, fl))
if a["loss_pct"] is None or a["loss_pct"] > 5:
    bad.append("adaptive loss over the run %s%% (bound 5%%)" % a["loss_pct"])
for b in bad:
    print("adapt_test: " + b)
print("adapt_test: " + ("FAILED" if bad else "ok") +
      " (adaptive loss %.2f%%, fixed %.2f%%; follow times %s)" %
      (a["loss_pct"] or 0, f["loss_pct"] or 0, [p["follow_s"] for p in a["phases"][1:]]))
sys.exit(1 if bad else 0)
EOF
