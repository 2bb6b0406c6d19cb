#!/usr/bin/env bash
# Delivery latency into real VMs (issue: each VM's own view): from a
# host-side value change (magnet mark) to the guest application's callback,
# echoed back to the host by UDP and timed on the host's clock
# (lab_latency, magnet-marker-echo).
#   direct  TCG guest, its view over the virtio-serial channel
#   nested  KVM guest in the nested lab host, its view over vhost-vsock
#
#   bench/deliver/lab.sh [--json] [--count N] [direct] [nested]
# (both modes when none is named; each brings its lab up and down)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${MAGNET_BUILD_DIR:-$top/build}
lab="$top/tools/lab"
json=0 count=300 modes=()
while (($#)); do
  case "$1" in
    --json) json=1 ;;
    --count) count=${2:?--count needs a number}; shift ;;
    direct|nested) modes+=("$1") ;;
    *) echo "bench/deliver/lab.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
((${#modes[@]})) || modes=(direct nested)
[[ $count =~ ^[0-9]+$ ]] || { echo "bench/deliver/lab.sh: --count '$count' is not a number" >&2; exit 2; }
[[ -x $build/bench/deliver/lab_latency && -x $build/host/magnet ]] ||
  { echo "bench/deliver/lab.sh: build first (tools/build.sh)" >&2; exit 1; }
flag=()
((json)) && flag=(--json)
up=""
cleanup() { [[ -n $up ]] && MAGNET_LAB_MODE=$up "$lab" down >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM
echo_cmd="(magnet-marker-echo --to 10.77.0.1:7001 --port 7002 --duration 600 >/tmp/marker-echo.out 2>&1 &)"
for m in "${modes[@]}"; do
  echo "[deliver-lab] $m: lab up" >&2
  up=$m
  MAGNET_LAB_MODE=$m "$lab" up 1 >/tmp/magnet-deliver-lab-up.log 2>&1 ||
    { tail -20 /tmp/magnet-deliver-lab-up.log >&2; exit 1; }
  if [[ $m == direct ]]; then
    sock=/tmp/magnet-deliver-lab.sock
    "$build/host/magnet" host --socket "$sock" --vsock off --duration 600 2>/tmp/magnet-deliver-lab.log &
    hpid=$!
    for _ in $(seq 100); do
      "$build/host/magnet" sessions --json --socket "$sock" 2>/dev/null | grep -q '"subscribed":true' && break
      sleep 0.2
    done
    MAGNET_LAB_MODE=$m "$lab" run g1 "$echo_cmd"
    sleep 1
    ip netns exec magnetlab "$build/bench/deliver/lab_latency" --socket "$sock" --vm g1 \
      --listen 10.77.0.1:7001 --guest 10.77.0.11:7002 --count "$count" --label virtio-serial "${flag[@]}" || true
    kill "$hpid" 2>/dev/null || true
    wait "$hpid" 2>/dev/null || true
  else
    mb=/mnt/magnetbuild
    sock=/tmp/magnet-deliver-lab.sock
    MAGNET_LAB_MODE=$m "$lab" run labhost \
      "($mb/host/magnet host --socket $sock --duration 600 >/tmp/magnet-deliver-lab.log 2>&1 &); \
       for i in \$(seq 300); do $mb/host/magnet sessions --json --socket $sock 2>/dev/null | grep -q '\"subscribed\":true' && break; sleep 0.2; done"
    MAGNET_LAB_MODE=$m "$lab" run g1 "${echo_cmd/--port 7002/--port 7002 --vsock-port 7003}"
    sleep 1
    # --bare-vsock: the same marks written straight to the guest program's vsock port, in turns.
    MAGNET_LAB_MODE=$m "$lab" run labhost \
      "$mb/bench/deliver/lab_latency --socket $sock --vm g1 --listen 10.77.0.1:7001 \
       --guest 10.77.0.11:7002 --count $count --label vsock --bare-vsock 3:7003 ${flag[*]}" || true
  fi
  MAGNET_LAB_MODE=$m "$lab" down >/dev/null 2>&1 || true
  up=""
done
