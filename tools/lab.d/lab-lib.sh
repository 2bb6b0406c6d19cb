#!/bin/bash
# magnet lab library: shared by tools/lab (people), tests/e2e (GoogleTest fixture) and, inside the
# nested lab host, by itself (reached there through the read-only 9p share of the repository).
# Source it and call lab_main ARGS..., or call the lab_* functions directly.
#
# Environment:
#   MAGNET_LAB_MODE      direct | nested (default: auto, see lab_detect_mode)
#   MAGNET_BUILD_DIR     build tree (default <repo>/build); images live in $MAGNET_BUILD_DIR/vm-images
#   MAGNET_LAB_STATE     state/log directory (default /run/magnet-lab)
#   MAGNET_LAB_GUESTS    number of guests for 'up' (default 2 nested, 1 direct)
#   MAGNET_LAB_READY_TIMEOUT  seconds to wait for each VM's readiness (default 60 direct, 90 nested)
#   MAGNET_LAB_GUEST_KERNEL / MAGNET_LAB_GUEST_INITRD  override the guest image files
#   MAGNET_LAB_CID_BASE  vsock CID of guest 1 (default 3; guest N gets base+N-1)
#   MAGNET_LAB_NO_BUILD=1  do not (re)build images, use what is there
#   MAGNET_LAB_LIBVIRTD  libvirtd binary (default: libvirtd from PATH)
set -euo pipefail

LAB_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LAB_REPO="$(cd "$LAB_LIB_DIR/../.." && pwd)"
LAB_STATE="${MAGNET_LAB_STATE:-/run/magnet-lab}"
LAB_NETNS=magnetlab
LAB_BRIDGE=magbr0
LAB_NET_PREFIX=10.77.0
LAB_CTL_NAME=org.magnet.ctl.0

# lab_log, lab_err, lab_now and the control-channel client (lab_ctl_exec, lab_ctl_ping).
# shellcheck source=tools/lab.d/ctl-lib.sh
source "$LAB_LIB_DIR/ctl-lib.sh"
lab_die() { lab_err "$*"; exit 1; }

lab_inside_labhost() { grep -qw 'magnet.role=labhost' /proc/cmdline 2>/dev/null; }

lab_build_dir() { echo "${MAGNET_BUILD_DIR:-$LAB_REPO/build}"; }
lab_images_dir() { echo "$(lab_build_dir)/vm-images"; }

# Mode: inside the lab host -> local (libvirt here, KVM). Otherwise MAGNET_LAB_MODE, else
# direct when this machine offers KVM and vhost-net, else nested.
lab_detect_mode() {
  if lab_inside_labhost; then echo local; return; fi
  case "${MAGNET_LAB_MODE:-auto}" in
    direct|nested) echo "$MAGNET_LAB_MODE" ;;
    auto) if [[ -c /dev/vhost-net && -c /dev/kvm && "${MAGNET_LAB_KVM_WORKS:-0}" == 1 ]]; then echo direct; else echo nested; fi ;;
    *) lab_die "MAGNET_LAB_MODE must be direct or nested (got '$MAGNET_LAB_MODE')" ;;
  esac
}


# lab_wait_ready NAME CONSOLE_LOG CTL_SOCK TIMEOUT [PID]: wait for the readiness line on the
# console and an answer on the control channel. PID (optional): fail early when it dies.
# LAB_READY_S: how long it took.
LAB_READY_S=0
lab_wait_ready() {
  local name="$1" log="$2" sock="$3" to="$4" pid="${5:-}" t0 deadline
  t0=$(lab_now); deadline=$(( t0 + to ))
  while (( $(lab_now) < deadline )); do
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      lab_err "$name: its QEMU process (pid $pid) exited before becoming ready; console log: $log"
      lab_console_tail "$log"
      return 1
    fi
    if [[ -f "$log" ]] && grep -q "MAGNET-READY" "$log" 2>/dev/null && lab_ctl_ping "$sock"; then
      LAB_READY_S=$(( $(lab_now) - t0 ))
      lab_log "$name ready after $LAB_READY_S s: $(grep -a -o 'MAGNET-READY.*' "$log" | head -n1 | tr -d '\r')"
      return 0
    fi
    sleep 0.2
  done
  lab_err "$name did not become ready within $to s; console log: $log"
  lab_console_tail "$log"
  return 1
}

lab_console_tail() {
  [[ -f "$1" ]] || return 0
  lab_err "--- last lines of $1 ---"
  tail -n 30 "$1" | tr -d '\033' >&2 || true
  lab_err "--- end of $1 ---"
}

# ---------------------------------------------------------------------------------------------
# The lab's speed factor (docs/lab.md, "Bounds"): how much slower than an idle machine this lab
# answers, measured once when it comes up.  The median of 5 control-channel round trips to g1 (a
# `true`; in nested mode through the lab host, as every run there goes) over the mode's
# reference (the same measured on an idle machine like the CI's), clamped to [1, 4].  Written
# to $LAB_STATE/speed ("factor=F roundtrip_ms=M reference_ms=R samples_ms=A,B,..."), where the
# e2e fixture reads it to scale its bounds; `tools/lab speed` prints it.
LAB_SPEED_REF_MS_DIRECT=${MAGNET_LAB_SPEED_REF_MS_DIRECT:-250}
# Nested: 565 ms in a fresh clone's CI run of 2026-11-27 (1,200-1,500 ms before a nested run read
# only ctl-lib.sh and magnet-ctl stopped polling with sleep 0.2).
LAB_SPEED_REF_MS_NESTED=${MAGNET_LAB_SPEED_REF_MS_NESTED:-600}
LAB_SPEED_MAX=4
LAB_LABHOST_READY_REF_S=${MAGNET_LAB_LABHOST_READY_REF_S:-20}
lab_speed_measure() {
  local mode ref i t0 ms=() med factor
  mode="$(lab_state_get mode)"
  ref=$LAB_SPEED_REF_MS_DIRECT
  [[ "$mode" == nested ]] && ref=$LAB_SPEED_REF_MS_NESTED
  for i in 1 2 3 4 5; do
    t0=$(date +%s%N)
    if ! lab_run g1 60 true >/dev/null 2>&1; then
      lab_err "g1 did not answer a control-channel round trip right after becoming ready"
      return 1
    fi
    ms+=( $(( ($(date +%s%N) - t0) / 1000000 )) )
  done
  med=$(printf '%s\n' "${ms[@]}" | sort -n | sed -n 3p)
  factor=$(awk -v m="$med" -v r="$ref" -v max="$LAB_SPEED_MAX" \
    'BEGIN { f = m / r; if (f < 1) f = 1; if (f > max) f = max; printf "%.2f", f }')
  lab_state_set speed "factor=$factor roundtrip_ms=$med reference_ms=$ref samples_ms=$(IFS=,; echo "${ms[*]}")"
  lab_log "speed factor $factor: control-channel round trip to g1 $med ms (median of ${ms[*]}; $mode reference $ref ms, clamped to [1, $LAB_SPEED_MAX])"
}

# lab_bound KIND [SECONDS]: the bound, in whole seconds, on a lab step of KIND for the lab that is
# up ($LAB_STATE/speed; with no lab up: factor 1 in MAGNET_LAB_MODE's mode).  The shell tests'
# equivalent of tests/e2e/lab_fixture.h's Bounds, with the same kinds and numbers (direct,
# nested); the e2e fixture checks that `tools/lab bounds` prints what it computes itself.
lab_bound() {
  local kind="$1" secs="${2:-0}" factor=1 nested=0 base
  if [[ -f "$LAB_STATE/speed" ]]; then
    factor="$(sed -n 's/^factor=\([0-9.]*\).*/\1/p' "$LAB_STATE/speed")"
    [[ "$(lab_state_get mode)" == nested ]] && nested=1
  elif [[ "${MAGNET_LAB_MODE:-}" == nested ]]; then
    nested=1
  fi
  case "$kind" in
    quick) base="15 45" ;;
    ready) base="30 90" ;;
    crunch) base="60 180" ;;
    domain) base="60 120" ;;
    test) base="300 900" ;;
    logs) base="60 120" ;;
    down) base="120 180" ;;
    work) echo $(( $(awk -v s="$secs" 'BEGIN { printf "%d", (s == int(s)) ? s : int(s) + 1 }') + $(lab_bound quick) )); return ;;
    linger) echo $(( $(awk -v s="$secs" 'BEGIN { printf "%d", (s == int(s)) ? s : int(s) + 1 }') + 4 * $(lab_bound ready) )); return ;;
    *) lab_err "lab_bound: unknown kind '$kind' (quick ready crunch domain test logs down work linger)"; return 2 ;;
  esac
  read -r -a base <<<"$base"
  awk -v b="${base[$nested]}" -v f="$factor" 'BEGIN { v = b * f; printf "%d\n", (v == int(v)) ? v : int(v) + 1 }'
}

# lab_prioritize PID: gives the scheduling group of the VM process PID the weight of nice
# MAGNET_LAB_NICE (default -10; 0 leaves it alone).  With autogroups (Debian's default) every
# session shares the CPUs equally whatever its processes' nice values, so on a machine where
# others compile (two cores, five builds) the lab host's vCPUs got a fifth of a core and a
# nested guest took 122 s to boot instead of 16 (docs/lab.md, "Bounds").  The VM's session is
# its own (libvirt and the lab's watcher start it with setsid), so this touches nothing else.
lab_prioritize() {
  local pid="$1" nice="${MAGNET_LAB_NICE:--10}"
  # Inside the lab host everything is the lab's: its guests keep the daemon's weight there.
  lab_inside_labhost && return 0
  [[ "$nice" != 0 && -n "$pid" && -w "/proc/$pid/autogroup" ]] || return 0
  echo "$nice" >"/proc/$pid/autogroup" 2>/dev/null ||
    lab_log "could not give pid $pid's scheduling group nice $nice (MAGNET_LAB_NICE)"
}

# ---------------------------------------------------------------------------------------------
# State helpers
lab_state_set() { mkdir -p "$LAB_STATE"; printf '%s\n' "$2" >"$LAB_STATE/$1"; }
lab_state_get() { cat "$LAB_STATE/$1" 2>/dev/null || true; }
lab_guest_dir() { echo "$LAB_STATE/guests/$1"; }
lab_guests() { if [[ -d "$LAB_STATE/guests" ]]; then ls "$LAB_STATE/guests"; fi; }

# Run a command in the lab's network namespace when there is one (direct mode).
lab_in_ns() {
  if [[ "$(lab_state_get netns)" == "$LAB_NETNS" ]]; then ip netns exec "$LAB_NETNS" "$@"; else "$@"; fi
}
lab_virsh() { virsh -q -c qemu:///system "$@"; }

# ---------------------------------------------------------------------------------------------
# Images
lab_images_build() {
  [[ "${MAGNET_LAB_NO_BUILD:-0}" == 1 ]] && return 0
  local what="$1" log
  mkdir -p "$(lab_images_dir)"
  log="$(lab_images_dir)/build-$what.log"
  if ! "$LAB_REPO/vm-images/$what/build.sh" "$(lab_images_dir)" >"$log" 2>&1; then
    lab_err "building the $what image failed; log: $log"
    tail -n 5 "$log" >&2 || true
    return 1
  fi
}

lab_check_file() { # WHAT PATH
  [[ -r "$2" ]] || { lab_err "missing image input: $1 $2 (build it with vm-images/build.sh or fix the path)"; return 1; }
}

# ---------------------------------------------------------------------------------------------
# libvirt (started by the lab, ended by PID)
lab_libvirt_start() {
  if [[ -f /run/libvirt/libvirtd.pid ]] && kill -0 "$(cat /run/libvirt/libvirtd.pid)" 2>/dev/null; then
    lab_err "a libvirtd not started by the lab is already running (pid $(cat /run/libvirt/libvirtd.pid)); stop it first"
    return 1
  fi
  # Never let libvirt autostart Debian's 'default' NAT network.
  rm -f /etc/libvirt/qemu/networks/autostart/default.xml
  mkdir -p /run/libvirt /var/log/libvirt/qemu "$LAB_STATE/logs"
  : >"$LAB_STATE/logs/libvirtd.log"
  if [[ -f /run/libvirt/virtlogd.pid ]] && kill -0 "$(cat /run/libvirt/virtlogd.pid)" 2>/dev/null; then
    lab_err "a virtlogd not started by the lab is already running (pid $(cat /run/libvirt/virtlogd.pid)); stop it first"
    return 1
  fi
  if ! lab_in_ns virtlogd -d -p "$LAB_STATE/virtlogd.pid" 2>>"$LAB_STATE/logs/virtlogd.log"; then
    lab_err "virtlogd failed to start; log: $LAB_STATE/logs/virtlogd.log"; return 1
  fi
  lab_state_set pid.virtlogd "$(cat "$LAB_STATE/virtlogd.pid")"
  lab_libvirtd_start
}

# libvirtd itself, in the lab's namespace; waits until it answers.
lab_libvirtd_start() {
  local libvirtd="${MAGNET_LAB_LIBVIRTD:-libvirtd}"
  if ! LIBVIRT_LOG_OUTPUTS="3:file:$LAB_STATE/logs/libvirtd.log" lab_in_ns "$libvirtd" -d -p "$LAB_STATE/libvirtd.pid" 2>>"$LAB_STATE/logs/libvirtd.log"; then
    lab_err "libvirtd ($libvirtd) failed to start; log: $LAB_STATE/logs/libvirtd.log"
    return 1
  fi
  local i
  for i in $(seq 1 100); do
    [[ -f "$LAB_STATE/libvirtd.pid" ]] && break
    sleep 0.1
  done
  lab_state_set pid.libvirtd "$(cat "$LAB_STATE/libvirtd.pid" 2>/dev/null || echo 0)"
  local deadline=$(( $(lab_now) + ${MAGNET_LAB_LIBVIRTD_TIMEOUT:-60} ))
  while (( $(lab_now) < deadline )); do
    if lab_virsh version >/dev/null 2>&1; then lab_qemu_events_start; return 0; fi
    if ! kill -0 "$(lab_state_get pid.libvirtd)" 2>/dev/null; then break; fi
    sleep 0.2
  done
  lab_err "libvirtd did not answer within ${MAGNET_LAB_LIBVIRTD_TIMEOUT:-60} s (pid $(lab_state_get pid.libvirtd)); log: $LAB_STATE/logs/libvirtd.log"
  tail -n 10 "$LAB_STATE/logs/libvirtd.log" >&2 || true
  return 1
}

# Restart libvirtd (direct mode, or inside the lab host): SIGTERM by its
# PID, then started as 'up' starts it.  Running domains keep running;
# libvirtd finds them again from its state under /run/libvirt.
lab_libvirtd_restart() {
  case "$(lab_state_get mode)" in
    nested) lab_labhost_lab 120 restart-libvirtd; return ;;
    direct|local) ;;
    *) lab_err "no lab is up (state: $LAB_STATE)"; return 2 ;;
  esac
  lab_kill_pid qemuevents
  lab_kill_pid libvirtd
  lab_libvirtd_start
}

lab_kill_pid() { # NAME: end a process the lab started, by its recorded PID
  local pid; pid="$(lab_state_get "pid.$1")"
  [[ -n "$pid" && "$pid" != 0 ]] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$LAB_STATE/pid.$1"
}

# ---------------------------------------------------------------------------------------------
# Local guests (libvirt on the machine running this code: direct mode or inside the lab host)
lab_net_setup() { # [netns]: with an argument, create the namespace (direct mode)
  if [[ -n "${1:-}" ]]; then
    if ip netns list 2>/dev/null | grep -qw "$1"; then
      lab_err "network namespace $1 already exists: another lab is up on this machine (its 'tools/lab down' removes it)"; return 1
    fi
    ip netns add "$1" || { lab_err "cannot create network namespace $1"; return 1; }
    lab_state_set netns "$1"   # recorded only once created: teardown deletes only what it created
    ip -n "$1" link set lo up
  fi
  if lab_in_ns ip link show "$LAB_BRIDGE" >/dev/null 2>&1; then
    lab_err "bridge $LAB_BRIDGE already exists (a lab is up? run: tools/lab down)"; return 1
  fi
  lab_in_ns ip link add "$LAB_BRIDGE" type bridge
  lab_in_ns ip addr add "$LAB_NET_PREFIX.1/24" dev "$LAB_BRIDGE"
  lab_in_ns ip link set "$LAB_BRIDGE" up
  lab_state_set bridge "$LAB_BRIDGE"
}

lab_render_domain() { # NAME INDEX -> XML on stdout
  local name="$1" idx="$2" dir xml domtype cpu vsock netdrv kernel initrd cid cmdline
  dir="$(lab_guest_dir "$name")"
  kernel="$(lab_state_get guest_kernel)"; initrd="$(lab_state_get guest_initrd)"
  cid=$(( ${MAGNET_LAB_CID_BASE:-3} + idx - 1 ))
  if [[ "$(lab_state_get accel)" == kvm ]]; then
    domtype=kvm; cpu="${MAGNET_LAB_GUEST_CPU:-<cpu mode='host-passthrough'/>}"; netdrv=${MAGNET_LAB_GUEST_NETDRIVER:-vhost}
    vsock="<vsock model='virtio'><cid auto='no' address='$cid'/></vsock>"
  else
    domtype=qemu; cpu=""; netdrv=qemu; vsock=""
    [[ -c /dev/vhost-vsock ]] && vsock="<vsock model='virtio'><cid auto='no' address='$cid'/></vsock>"
  fi
  cmdline="$(cat "$(dirname "$initrd")/cmdline-base" 2>/dev/null || echo 'console=ttyS0 panic=-1 quiet')"
  cmdline+=" magnet.name=$name magnet.role=guest magnet.ip=$LAB_NET_PREFIX.$((10 + idx))/24 magnet.gw=$LAB_NET_PREFIX.1 magnet.cid=$cid"
  [[ -n ${MAGNET_LAB_GUEST_APPEND:-} ]] && cmdline+=" $MAGNET_LAB_GUEST_APPEND"
  xml="$(cat "$LAB_REPO/vm-images/xml/guest.xml.in")"
  xml="${xml//@DOMTYPE@/$domtype}"; xml="${xml//@NAME@/$name}"; xml="${xml//@MEM_MB@/${MAGNET_LAB_GUEST_MEM_MB:-256}}"
  xml="${xml//@KERNEL@/$kernel}"; xml="${xml//@INITRD@/$initrd}"; xml="${xml//@CMDLINE@/$cmdline}"
  xml="${xml//@CPU@/$cpu}"; xml="${xml//@EMULATOR@/$(command -v qemu-system-x86_64)}"
  xml="${xml//@BRIDGE@/$LAB_BRIDGE}"; xml="${xml//@MAC@/52:54:00:77:00:$(printf '%02x' $((10 + idx)))}"
  xml="${xml//@NETDRIVER@/$netdrv}"; xml="${xml//@DIR@/$dir}"; xml="${xml//@VSOCK@/$vsock}"
  xml="${xml//@STATE@/$LAB_STATE}"
  printf '%s\n' "$xml"
}

# lab_stale_domain_remove NAME: a domain NAME exists when this lab, which has just started its own
# libvirtd (so no other lab's libvirtd runs), is about to define it.  A domain some lab defined
# (its metadata, guest.xml.in) whose lab is not up (no mode in its state directory) was left
# behind by a lab that ended without its teardown (killed, or the machine restarted: libvirt keeps
# the definition under /etc/libvirt/qemu): it is removed, saying so.  So is one that names this
# lab's own state directory.  Any other domain is not the lab's to touch: 'up' refuses.
lab_stale_domain_remove() {
  local name="$1" state
  state="$(lab_virsh metadata "$name" urn:magnet:lab 2>/dev/null | sed -n "s/.* state=[\"']\([^\"']*\)[\"'].*/\1/p")"
  if [[ -z "$state" ]]; then
    lab_err "a libvirt domain named $name already exists and is not the lab's (run: tools/lab down, or remove it)"; return 1
  fi
  # This lab's own state directory: 'up' refused to start while a lab was up there, so the
  # domain is a leftover of an earlier lab with the same state directory (a CI run killed at its
  # time limit, for one), never of a lab that is up.
  if [[ "$state" != "$LAB_STATE" && -f "$state/mode" ]]; then
    lab_err "a libvirt domain named $name belongs to a lab that is up (state: $state; run: tools/lab down)"; return 1
  fi
  local whose="gone"
  [[ "$state" == "$LAB_STATE" ]] && whose="this lab's own, reused"
  lab_log "removing domain $name, left behind by a lab that ended without its teardown (state: $state, $whose)"
  lab_virsh destroy "$name" >/dev/null 2>&1 || true
  local out
  if ! out="$(lab_virsh undefine "$name" 2>&1)"; then
    lab_err "cannot remove the stale domain $name: $out"; return 1
  fi
}

lab_guest_start() { # NAME INDEX
  local name="$1" idx="$2" dir out
  dir="$(lab_guest_dir "$name")"
  mkdir -p "$dir"
  lab_render_domain "$name" "$idx" >"$dir/domain.xml"
  if lab_virsh dominfo "$name" >/dev/null 2>&1; then
    lab_stale_domain_remove "$name" || return 1
  fi
  # Marked before the define: a teardown that comes between the two (Ctrl-C) still removes it.
  echo defined >"$dir/defined"
  if ! out="$(lab_virsh define "$dir/domain.xml" 2>&1)"; then
    lab_err "virsh define $name failed: $out (domain XML: $dir/domain.xml)"; return 1
  fi
  if ! out="$(lab_virsh start "$name" 2>&1)"; then
    lab_err "virsh start $name failed: $out"
    lab_err "logs: /var/log/libvirt/qemu/$name.log, $LAB_STATE/logs/libvirtd.log"
    return 1
  fi
  lab_prioritize "$(lab_guest_pid "$name")"
  lab_log "started $name (cid $(( ${MAGNET_LAB_CID_BASE:-3} + idx - 1 )), ip $LAB_NET_PREFIX.$((10 + idx)))"
}

lab_guest_pid() { cat "/run/libvirt/qemu/$1.pid" 2>/dev/null; }

# lab_guest_cpu_reset NAME: 0, printing the event, when NAME's QEMU ended because the guest's CPU
# reset it (QMP SHUTDOWN reason guest-reset; nothing in the lab reboots a guest, and on_reboot is
# destroy) while its console shows no kernel of its own dying (no panic, oops, BUG or sysrq):
# under the lab host's emulated nested SVM, a triple fault (docs/lab.md). The event is written by
# the qemu-monitor-event loop, a moment after QEMU ends: waits up to 3 s for it.
lab_guest_cpu_reset() {
  local name="$1" ev="$LAB_STATE/logs/qemu-events.log" con i line
  con="$(lab_guest_dir "$name")/console.log"
  for i in 1 2 3 4 5 6; do
    line="$(grep -a "for domain '$name'" "$ev" 2>/dev/null | grep -a '"reason":"guest-reset"' | head -n1)"
    [[ -n "$line" ]] && break
    sleep 0.5
  done
  [[ -n "$line" ]] || return 1
  grep -q -a -E 'Kernel panic|BUG:|Oops|sysrq' "$con" 2>/dev/null && return 1
  printf '%s\n' "$line"
}

# lab_local_up N: libvirt + bridge + N guests, waiting for readiness.
lab_local_up() {
  local n="$1" mode="$2" i kernel initrd to
  if [[ -d "$LAB_STATE" && -f "$LAB_STATE/mode" ]]; then
    lab_err "a lab is already up (state: $LAB_STATE, mode $(lab_state_get mode)); run: tools/lab down"; return 1
  fi
  mkdir -p "$LAB_STATE/guests" "$LAB_STATE/logs"
  lab_state_set mode "$mode"
  if [[ "$mode" == direct ]]; then
    lab_state_set accel "${MAGNET_LAB_ACCEL:-tcg}"
    lab_images_build guest || return 1
    # Uncompressed (vmlinux through its PVH entry, initrd.cpio): a TCG guest
    # booted in 7 s instead of 11 here (docs/lab.md).
    kernel="${MAGNET_LAB_GUEST_KERNEL:-$(lab_images_dir)/guest/vmlinux}"
    initrd="${MAGNET_LAB_GUEST_INITRD:-$(lab_images_dir)/guest/initrd.cpio}"
    to="${MAGNET_LAB_READY_TIMEOUT:-60}"
  else
    lab_state_set accel kvm
    local gdir="${MAGNET_LAB_GUEST_DIR:-/opt/magnet/guest}"
    kernel="${MAGNET_LAB_GUEST_KERNEL:-$gdir/vmlinuz}"; initrd="${MAGNET_LAB_GUEST_INITRD:-$gdir/initrd.img}"
    to="${MAGNET_LAB_READY_TIMEOUT:-90}"
  fi
  lab_check_file "guest kernel" "$kernel" || return 1
  lab_check_file "guest initrd" "$initrd" || return 1
  lab_state_set guest_kernel "$kernel"; lab_state_set guest_initrd "$initrd"
  if [[ "$mode" == direct ]]; then lab_net_setup "$LAB_NETNS" || return 1; else lab_net_setup || return 1; fi
  lab_libvirt_start || return 1
  # Under nested KVM (TCG lab host) concurrent guest boots crashed the lab host kernel once
  # (stack guard page hit in a vCPU thread): boot KVM guests one after the other.
  if [[ "$(lab_state_get accel)" == kvm ]]; then
    local ev
    for i in $(seq 1 "$n"); do
      lab_guest_start "g$i" "$i" || return 1
      if ! lab_wait_ready "g$i" "$(lab_guest_dir "g$i")/console.log" "$(lab_guest_dir "g$i")/ctl.sock" "$to" "$(lab_guest_pid "g$i")"; then
        if ev="$(lab_guest_cpu_reset "g$i")"; then
          lab_err "$LAB_NESTED_GUEST_RESET: g$i, with no word on its console ($ev)"
          return "$LAB_RC_NESTED_GUEST_RESET"
        fi
        # Wedged while booting, with no reset (seen in a fresh-clone CI run: a guest brought up
        # again after a death printed nothing for 90 s): retried like a reset.
        if ev="$(lab_vcpu_wedged "$(for k in 1 2 3; do virsh -q -c qemu:///system qemu-monitor-command "g$i" \
              --hmp 'info registers' 2>/dev/null | tr -d '\r' | grep -m1 '^RIP='; [[ $k == 3 ]] || sleep 1; done)")"; then
          lab_err "$LAB_NESTED_GUEST_RESET: g$i never became ready, $ev"
          return "$LAB_RC_NESTED_GUEST_RESET"
        fi
        return 1
      fi
    done
  else
    for i in $(seq 1 "$n"); do lab_guest_start "g$i" "$i" || return 1; done
    for i in $(seq 1 "$n"); do
      lab_wait_ready "g$i" "$(lab_guest_dir "g$i")/console.log" "$(lab_guest_dir "g$i")/ctl.sock" "$to" "$(lab_guest_pid "g$i")" || return 1
    done
  fi
  # Inside the lab host the outer lab measures, through the lab host.
  if [[ "$mode" == direct ]]; then lab_speed_measure || return 1; fi
  lab_state_set up 1
}

# Every guest QEMU's SHUTDOWN event (QMP, through libvirt) with its reason, in
# $LAB_STATE/logs/qemu-events.log: "guest-shutdown" is a poweroff, "guest-reset" a
# reset the guest's CPU asked for (a reboot, a panic's reboot, or a triple fault;
# the domains' on_reboot is destroy, so it ends the guest), "host-qmp-quit" the
# lab's own destroy. tools/test reads it (nested mode) to tell a guest that the
# emulated nested SVM reset without a word from one that died of its own kernel.
lab_qemu_events_start() {
  setsid virsh -q -c qemu:///system qemu-monitor-event --loop --timestamp --event SHUTDOWN \
    </dev/null >>"$LAB_STATE/logs/qemu-events.log" 2>&1 &
  lab_state_set pid.qemuevents "$!"
}

lab_local_down() {
  local g
  for g in $(lab_guests); do
    [[ -f "$(lab_guest_dir "$g")/defined" ]] || continue  # only domains this lab defined
    lab_virsh destroy "$g" >/dev/null 2>&1 || true
    lab_virsh undefine "$g" >/dev/null 2>&1 || true
  done
  lab_kill_pid qemuevents
  lab_kill_pid libvirtd
  lab_kill_pid virtlogd
  if [[ -n "$(lab_state_get bridge)" ]]; then
    lab_in_ns ip link del "$LAB_BRIDGE" 2>/dev/null || true
  fi
  if [[ "$(lab_state_get netns)" == "$LAB_NETNS" ]]; then
    ip netns del "$LAB_NETNS" 2>/dev/null || true
  fi
}

# ---------------------------------------------------------------------------------------------
# Nested mode: the lab host VM under TCG on this machine.
lab_labhost_dir() { echo "$LAB_STATE/labhost"; }
lab_labhost_sock() { echo "$(lab_labhost_dir)/ctl.sock"; }

LAB_LABHOST_DIED="magnet-lab: the lab host QEMU ended without being stopped"
# What `up` inside the lab host prints, and its exit status, when a KVM guest was reset by its
# CPU while booting (lab_guest_cpu_reset): the outer lab_nested_up retries it like a death of the
# lab host itself, and tools/test recognizes the line.
LAB_NESTED_GUEST_RESET="magnet-lab: a nested guest was reset by its CPU"
LAB_RC_NESTED_GUEST_RESET=3

# lab_labhost_lockup: 0, printing what it saw, when every vCPU of the lab host runs its kernel
# with interrupts off for three samples a second apart (HMP `info registers`): a lockup that
# no watchdog of its own can report (the soft lockup detector needs the timer interrupt, and
# TCG offers no NMI watchdog).  Seen under the hostile guest test's load: both vCPUs spinning on
# one kernel address with interrupts off, the control channel and the serial console dead.
# Appends the line to the lab host's console log, where the e2e fixture and tools/test look for
# a death of the lab host.
LAB_LABHOST_LOCKED="magnet-lab: the lab host locked up"
lab_labhost_lockup() {
  local mon cpus i c out rfl seen=""
  mon="$(lab_labhost_dir)/monitor.sock"
  [[ -S "$mon" ]] || return 1
  cpus=$( (echo 'info cpus'; sleep 0.5) | timeout 5 socat - "UNIX-CONNECT:$mon" 2>/dev/null | grep -c 'CPU #' || true)
  (( cpus > 0 )) || return 1
  for i in 1 2 3; do
    for ((c = 0; c < cpus; c++)); do
      # RIP=ffffffff84e7c467 RFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0
      out=$( (echo "cpu $c"; echo 'info registers'; sleep 0.5) | timeout 5 socat - "UNIX-CONNECT:$mon" 2>/dev/null |
        tr -d '\r' | grep -m1 '^RIP=' || true)
      rfl=$(sed -n 's/.* RFL=\([0-9a-f]*\) .*/\1/p' <<<"$out")
      [[ -n "$rfl" && "$out" == *" CPL=0 "* && "$out" == *" HLT=0"* ]] || return 1
      (( (16#$rfl & 0x200) == 0 )) || return 1
      (( i < 3 )) || seen+=" [CPU $c: ${out%% II=*}]"
    done
    (( i == 3 )) || sleep 1
  done
  echo "$LAB_LABHOST_LOCKED: every vCPU runs its kernel with interrupts off (3 samples over 2 s):$seen" |
    tee -a "$(lab_labhost_dir)/console.log"
}

# lab_vcpu_wedged SAMPLES: 0, printing why, when three `info registers` RIP= lines of one vCPU
# (one a second) show it halted in each (the interrupt that would wake it never came) or at one
# same kernel instruction in each; 1 otherwise.
lab_vcpu_wedged() {
  local n=0 halted=0 same=0 first="" rip cpl line
  while IFS= read -r line; do
    [[ $line == RIP=* ]] || continue
    n=$((n + 1))
    rip=${line%% *} cpl=$(sed -n 's/.* CPL=\([0-9]\) .*/\1/p' <<<"$line")
    [[ $line == *" HLT=1"* ]] && halted=$((halted + 1))
    [[ -z $first ]] && first=$rip
    [[ $rip == "$first" && $cpl == 0 ]] && same=$((same + 1))
  done <<<"$1"
  if (( n == 3 && halted == 3 )); then echo "its vCPU halted in 3 samples over 2 s"; return 0; fi
  if (( n == 3 && same == 3 )); then echo "its vCPU at one kernel instruction ($first) in 3 samples over 2 s"; return 0; fi
  return 1
}

# lab_guest_lockup NAME: a nested KVM guest that does not answer its control channel, looked at
# through its QEMU's monitor in the lab host (`info registers`, three samples over two seconds).
# The control channel is served by the guest's own shell, which answers within its request's
# bound even when the command it runs hangs (magnet-ctl kills it): a guest that does not answer
# at all whose vCPU sits halted (HLT=1: the interrupt that would deliver the request never came)
# or runs its kernel at one same instruction in every sample is wedged under the emulated nested
# SVM, like the resets without a word (docs/lab.md).  That is written to the lab host's console
# log, where tools/test looks for a lab death, as "$LAB_GUEST_LOCKED NAME".  A guest that answers,
# or whose vCPU makes progress, is not: status 1, its state on standard output.
LAB_GUEST_LOCKED="magnet-lab: a nested guest locked up:"
lab_guest_lockup() {
  local g="$1" out samples="" n=0 why line
  if lab_run "$g" 5 true >/dev/null 2>&1; then
    echo "$g answers its control channel"; return 1
  fi
  out=$(lab_labhost_exec 30 "for i in 1 2 3; do virsh -q -c qemu:///system qemu-monitor-command $(printf '%q' "$g") --hmp 'info registers' | tr -d '\r' | grep -m1 '^RIP='; [ \$i = 3 ] || sleep 1; done" 2>/dev/null) || true
  while IFS= read -r line; do
    [[ $line == RIP=* ]] || continue
    n=$((n + 1))
    samples+=" [${line%% II=*} ${line##* }]"
  done <<<"$out"
  if why="$(lab_vcpu_wedged "$out")"; then
    echo "$LAB_GUEST_LOCKED $g does not answer its control channel and $why:$samples" |
      tee -a "$(lab_labhost_dir)/console.log"
  else
    echo "$g does not answer its control channel; its vCPU ($n samples):${samples:- none read}"
    return 1
  fi
}

# lab_labhost_stop: end the lab host QEMU, marked as an intended stop for its watcher.
lab_labhost_stop() {
  touch "$(lab_labhost_dir)/stopping" 2>/dev/null || true
  lab_kill_pid labhost
}

# The lab host's QEMU: the one tools/setup.sh unpacked from bookworm-backports (docs/lab.md:
# Debian 12's QEMU 7.2 emulates nested SVM badly enough to kill the lab host), with its own data
# files; else, saying so, Debian 12's.
LAB_LABHOST_QEMU_DIR="${MAGNET_LABHOST_QEMU_DIR:-/opt/magnet/labhost-qemu}"
lab_labhost_qemu() {
  if [[ -n "${MAGNET_LAB_LABHOST_QEMU:-}" ]]; then
    echo "$MAGNET_LAB_LABHOST_QEMU"
  elif [[ -x "$LAB_LABHOST_QEMU_DIR/usr/bin/qemu-system-x86_64" ]]; then
    echo "$LAB_LABHOST_QEMU_DIR/usr/bin/qemu-system-x86_64"
  else
    lab_log "no QEMU in $LAB_LABHOST_QEMU_DIR (tools/setup.sh fetches it): the lab host runs under $(qemu-system-x86_64 --version | head -n1), which kills it often (docs/lab.md)"
    echo qemu-system-x86_64
  fi
}

# The lab host's clock: the TSC.  Under TCG its two vCPUs' TSCs fail the kernel's
# synchronization check ("Marking TSC unstable due to TSCs unsynchronized"), and the kernel falls
# back to the HPET: every clock read becomes an MMIO exit into QEMU's device model under its big
# lock (the lab host's QEMU main thread then ran at 45-100 % of a core), and both vCPUs once
# locked up in read_hpet()'s contended loop with interrupts off (docs/lab.md, "Known
# limitation").  tsc=reliable skips the check and the clocksource watchdog; TCG's TSC comes from
# the host's clock, one for both vCPUs.
LAB_LABHOST_CLOCK=${MAGNET_LAB_LABHOST_CLOCK-tsc=reliable}

lab_labhost_start() {
  local d img pid to qemu qemu_data=()
  d="$(lab_labhost_dir)"; img="$(lab_images_dir)/labhost"
  mkdir -p "$d"
  lab_check_file "lab host kernel" "$img/vmlinuz" || return 1
  lab_check_file "lab host initrd" "$img/initrd.img" || return 1
  qemu="$(lab_labhost_qemu)"
  if [[ -n "${MAGNET_LAB_LABHOST_QEMU_DATA:-}" ]]; then
    qemu_data=(-L "$MAGNET_LAB_LABHOST_QEMU_DATA")
  elif [[ "$qemu" == "$LAB_LABHOST_QEMU_DIR"/* ]]; then
    qemu_data=(-L "$LAB_LABHOST_QEMU_DIR/usr/share/qemu")
  fi
  rm -f "$d/ctl.sock" "$d/console.sock" "$d/console.log" "$d/qemu.pid" "$d/stopping"
  # QEMU runs in the foreground of a detached watcher (not -daemonize, which sends its stderr
  # to /dev/null): when it ends and the lab did not stop it, the watcher writes its exit status,
  # its stderr and any OOM kill of it by this machine's kernel to the end of the console log,
  # where tools/test looks for a lab host that died (LAB_LABHOST_DIED).
  MAGNET_LAB_LABHOST_D="$d" setsid bash -c '
    d=$MAGNET_LAB_LABHOST_D
    "$@" </dev/null >/dev/null 2>"$d/qemu.err" &
    q=$!
    wait "$q"; rc=$?
    [[ -e $d/stopping ]] && exit 0
    how="exit status $rc"; ((rc > 128)) && how="signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null))"
    {
      echo
      echo "'"$LAB_LABHOST_DIED"' (pid $q): $how"
      sed "s/^/  qemu stderr: /" "$d/qemu.err" 2>/dev/null | tail -n 20
      dmesg 2>/dev/null | grep -E "Killed process $q\b|oom-kill:.*pid=$q\b" | sed "s/^/  host kernel: /"
    } >>"$d/console.log"
  ' lab-labhost-watch "$qemu" "${qemu_data[@]}" \
      -name magnet-labhost,debug-threads=on -accel "${MAGNET_LAB_LABHOST_ACCEL:-tcg}" -cpu "${MAGNET_LAB_LABHOST_CPU:-max}" -smp 2 -m "${MAGNET_LAB_LABHOST_MEM_MB:-3072}" \
      -nodefaults -no-reboot -nic none -display none \
      -monitor "unix:$d/monitor.sock,server=on,wait=off" \
      -kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
      -append "$(cat "$img/cmdline-base") softlockup_panic=1 rcupdate.rcu_cpu_stall_timeout=120 $LAB_LABHOST_CLOCK ${MAGNET_LAB_LABHOST_APPEND:-} magnet.role=labhost magnet.name=labhost" \
      -chardev "socket,id=con0,path=$d/console.sock,server=on,wait=off,logfile=$d/console.log,logappend=on" \
      -serial chardev:con0 \
      -device virtio-serial-pci \
      -chardev "socket,id=ctl0,path=$d/ctl.sock,server=on,wait=off" \
      -device "virtserialport,chardev=ctl0,name=$LAB_CTL_NAME" \
      -device virtio-rng-pci \
      -virtfs "local,path=$(lab_build_dir),mount_tag=magnetbuild,security_model=none,readonly=on" \
      -virtfs "local,path=$LAB_REPO,mount_tag=magnetsrc,security_model=none,readonly=on" \
      -pidfile "$d/qemu.pid" </dev/null >/dev/null 2>&1 &
  local i
  for i in $(seq 1 100); do
    [[ -s "$d/qemu.pid" ]] && break
    grep -q "$LAB_LABHOST_DIED" "$d/console.log" 2>/dev/null && break
    sleep 0.1
  done
  if [[ ! -s "$d/qemu.pid" ]]; then
    lab_err "starting the lab host QEMU failed: $(cat "$d/qemu.err" 2>/dev/null)"; return 1
  fi
  pid="$(cat "$d/qemu.pid")"
  lab_state_set pid.labhost "$pid"
  lab_prioritize "$pid"
  to="${MAGNET_LAB_LABHOST_TIMEOUT:-120}"
  lab_wait_ready labhost "$d/console.log" "$d/ctl.sock" "$to" "$pid"
}

# lab_labhost_exec TIMEOUT CMD: run CMD in the lab host.
lab_labhost_exec() { lab_ctl_exec "$(lab_labhost_sock)" "$1" "$2"; }

# lab_labhost_lab TIMEOUT ARGS...: run this library's lab_main inside the lab host.
lab_labhost_lab() {
  local to="$1"; shift
  local args="" a
  for a in "$@"; do args+=" $(printf '%q' "$a")"; done
  local envs=""
  local v
  for v in MAGNET_LAB_GUESTS MAGNET_LAB_GUEST_CPU MAGNET_LAB_GUEST_NETDRIVER MAGNET_LAB_READY_TIMEOUT MAGNET_LAB_CID_BASE MAGNET_LAB_GUEST_KERNEL MAGNET_LAB_GUEST_INITRD MAGNET_LAB_GUEST_DIR MAGNET_LAB_GUEST_MEM_MB MAGNET_LAB_GUEST_APPEND; do
    [[ -n "${!v:-}" ]] && envs+="$v=$(printf '%q' "${!v}") "
  done
  lab_labhost_exec "$to" "${envs}MAGNET_BUILD_DIR=/mnt/magnetbuild bash -c 'source /mnt/magnetsrc/tools/lab.d/lab-lib.sh; lab_main \"\$@\"' lab$args"
}

# lab_labhost_runs_magnet: the build's magnet, which the tests run in the lab host through the
# 9p share, starts there: its shared libraries come from the lab host image (vm-images/labhost/
# build.sh, "bins"), and one missing (libpcap, when magnet reconstruct came) failed every nested
# test that runs magnet, each after its own bound, instead of the lab's up at once.
lab_labhost_runs_magnet() {
  local bin out
  bin="$(lab_build_dir)/host/magnet"
  [[ -x "$bin" ]] || return 0  # no magnet built: the tests that need it say so themselves
  if ! out="$(lab_labhost_exec 60 "/mnt/magnetbuild/host/magnet --version" 2>&1)"; then
    lab_err "the lab host cannot run $bin (through /mnt/magnetbuild): ${out:-no output}; a shared library of it missing from the lab host image? (vm-images/labhost/build.sh, bins)"
    return 1
  fi
}

# Nested SVM emulated by TCG is not fully reliable: rarely the lab host kernel dies (stack guard
# page hit in a KVM vCPU thread) or locks up while a KVM guest boots. The lab host panics on soft
# lockups (QEMU then exits). RCU stalls are not fatal and reported only after 120 s: enabling a
# tracepoint patches text with cross-CPU IPIs, which under TCG can take long to be answered while
# the other vCPU runs a nested KVM guest (a stall, not a hang, that panic_on_rcu_stall turned into
# a crash). An attempt whose lab host died or stopped answering is retried
# (MAGNET_LAB_NESTED_RETRIES, default 2) after keeping its logs; other failures are not retried.
lab_nested_up() {
  local n="$1" attempt max ready_to inner_to
  if [[ -f "$LAB_STATE/mode" ]]; then
    lab_err "a lab is already up (state: $LAB_STATE, mode $(lab_state_get mode)); run: tools/lab down"; return 1
  fi
  mkdir -p "$LAB_STATE/logs"
  lab_state_set mode nested
  lab_images_build labhost || return 1
  max=$(( ${MAGNET_LAB_NESTED_RETRIES:-2} + 1 ))
  local rc
  for attempt in $(seq 1 "$max"); do
    rc=0
    if lab_labhost_start && lab_labhost_runs_magnet; then
      # Each KVM guest's readiness bound: 90 s on an idle machine, times how much slower than
      # there the lab host itself came up (its reference: LAB_LABHOST_READY_REF_S), at most 4x:
      # on a loaded machine a guest took 54 s and the next more than 90 (docs/lab.md, "Bounds").
      ready_to="${MAGNET_LAB_READY_TIMEOUT:-$(awk -v t="$LAB_READY_S" -v r="$LAB_LABHOST_READY_REF_S" \
        'BEGIN { f = t / r; if (f < 1) f = 1; if (f > 4) f = 4; printf "%d", 90 * f + 0.5 }')}"
      inner_to=$(( 60 + n * (ready_to + 30) ))
      lab_log "each guest's readiness bound: $ready_to s (the lab host was ready after $LAB_READY_S s; reference $LAB_LABHOST_READY_REF_S s)"
      MAGNET_LAB_READY_TIMEOUT="$ready_to" lab_labhost_lab "$inner_to" up "$n" || rc=$?
      if (( rc == 0 )) && ! lab_speed_measure; then rc=$(lab_nested_speed_failure); fi
    else
      rc=1
    fi
    if (( rc == 0 )); then
      lab_state_set up 1
      return 0
    fi
    # The lab host is fine and no KVM guest in it was reset by its CPU: a real failure, no retry.
    if (( rc != LAB_RC_NESTED_GUEST_RESET )) && kill -0 "$(lab_state_get pid.labhost)" 2>/dev/null &&
      lab_ctl_ping "$(lab_labhost_sock)"; then
      return 1
    fi
    lab_labhost_lockup >/dev/null || true  # says so on its console when it locked up
    if (( attempt < max )); then
      local keep
      keep="$(lab_build_dir)/lab-logs/nested-attempt-$attempt-failed-$(date +%Y%m%d-%H%M%S)"
      lab_collect "$keep" >/dev/null 2>&1 || true
      if (( rc == LAB_RC_NESTED_GUEST_RESET )); then
        lab_err "attempt $attempt: a KVM guest was reset by the emulated nested SVM (logs kept in $keep); retrying"
      else
        lab_err "attempt $attempt: the lab host died or stopped answering (logs kept in $keep); retrying"
      fi
      lab_labhost_stop
    elif (( rc == LAB_RC_NESTED_GUEST_RESET )); then
      lab_err "a KVM guest was reset by the emulated nested SVM in each of $max attempts"
    else
      lab_err "the lab host died or stopped answering; console log: $(lab_labhost_dir)/console.log"
    fi
  done
  return 1
}

# lab_nested_speed_failure: the status of a nested up whose round trips to g1 failed right after
# g1 became ready.  In a fresh-clone CI run g1 was ready, then did not answer, the lab host alive
# and answering, and the up failed unretried: a KVM guest wedged or ended under the emulated
# nested SVM there is retried like one reset while booting (LAB_RC_NESTED_GUEST_RESET); a guest
# that answers again, or whose vCPU makes progress, is a real failure (1).
lab_nested_speed_failure() {
  local why state
  if why="$(lab_guest_lockup g1)"; then
    lab_err "$why"
    echo "$LAB_RC_NESTED_GUEST_RESET"; return
  fi
  state="$(lab_labhost_exec 30 "virsh -q -c qemu:///system domstate g1" 2>/dev/null | tr -d '\r' | head -n1)"
  if [[ -n "$state" && "$state" != running && "$state" != paused ]]; then
    lab_err "$LAB_NESTED_GUEST_RESET: g1 is '$state' right after becoming ready"
    echo "$LAB_RC_NESTED_GUEST_RESET"; return
  fi
  lab_err "g1 after its failed round trips: $why; its domain: ${state:-unknown}"
  echo 1
}

lab_nested_down() {
  # Orderly inner teardown only when the lab host answers; its QEMU is ended by PID anyway,
  # which takes everything inside it down.
  if kill -0 "$(lab_state_get pid.labhost)" 2>/dev/null && lab_ctl_ping "$(lab_labhost_sock)"; then
    lab_labhost_lab 60 down >/dev/null 2>&1 || true
  fi
  lab_labhost_stop
}

# ---------------------------------------------------------------------------------------------
# Logs
# lab_collect DEST: copy consoles, libvirt/QEMU logs and domain XML into DEST.
lab_collect() {
  local dest="$1" mode g
  mkdir -p "$dest"
  mode="$(lab_state_get mode)"
  if [[ "$mode" == nested ]]; then
    cp "$(lab_labhost_dir)"/console.log "$dest/labhost-console.log" 2>/dev/null || true
    cp "$(lab_labhost_dir)"/qemu.err "$dest/labhost-qemu.err" 2>/dev/null || true
    if [[ -S "$(lab_labhost_sock)" ]] && lab_ctl_ping "$(lab_labhost_sock)"; then
      lab_labhost_exec 60 "cd / && tar cf - run/magnet-lab var/log/libvirt 2>/dev/null | gzip | base64" 2>/dev/null \
        | base64 -d 2>/dev/null | tar xzf - -C "$dest" 2>/dev/null || true
    fi
  else
    for g in $(lab_guests); do
      mkdir -p "$dest/$g"
      cp "$(lab_guest_dir "$g")"/{console.log,domain.xml} "$dest/$g/" 2>/dev/null || true
      cp "/var/log/libvirt/qemu/$g.log" "$dest/$g/qemu.log" 2>/dev/null || true
    done
    cp "$LAB_STATE/logs/libvirtd.log" "$dest/" 2>/dev/null || true
  fi
  lab_log "logs copied to $dest"
}

# ---------------------------------------------------------------------------------------------
# People's commands
lab_usage() {
  cat <<'USAGE'
usage: tools/lab COMMAND [ARGS]
  up [N]            build images if needed, start the lab (N guests: g1..gN) and wait until ready
  status            mode, VMs, PIDs, addresses
  run GUEST CMD...  run a shell command in GUEST (g1.., or 'labhost' in nested mode); exit status is CMD's
  shell GUEST       interactive command loop in GUEST over its control channel
  console GUEST     attach to GUEST's serial console (Ctrl-] to leave); direct mode or 'labhost'
  logs DIR          copy consoles and libvirt/QEMU logs into DIR
  down              destroy everything the lab started (domains, libvirtd, virtlogd, netns, lab host)
  build             build/refresh the images only
  restart-libvirtd  stop libvirtd (by its PID) and start it again; the domains keep running
  labhost-lockup    nested: exit 0, saying so on the lab host's console, when its vCPUs spin with
                    interrupts off (a lockup its own watchdogs cannot report)
  speed             the lab's speed factor, measured when it came up (docs/lab.md, "Bounds")
  bound KIND [S]    the bound on a step of KIND for this lab (bounds: every kind)
Environment: MAGNET_LAB_MODE=direct|nested, MAGNET_BUILD_DIR, MAGNET_LAB_STATE (see docs/lab.md)
USAGE
}

lab_run() { # GUEST TIMEOUT CMD
  local g="$1" to="$2" cmd="$3" mode
  mode="$(lab_state_get mode)"
  [[ -n "$mode" ]] || { lab_err "no lab is up (state: $LAB_STATE)"; return 2; }
  if [[ "$mode" == nested ]]; then
    if [[ "$g" == labhost ]]; then lab_labhost_exec "$to" "$cmd"; return; fi
    # guest-run.sh: the control-channel client alone, not all of this library (docs/lab.md,
    # "Bounds": a nested round trip).
    lab_labhost_exec $((to + 15)) "bash /mnt/magnetsrc/tools/lab.d/guest-run.sh $(printf '%q ' "$g" "$to" "$cmd")"
    return
  fi
  [[ -d "$(lab_guest_dir "$g")" ]] || { lab_err "no guest named $g (guests: $(lab_guests | tr '\n' ' '))"; return 2; }
  lab_ctl_exec "$(lab_guest_dir "$g")/ctl.sock" "$to" "$cmd"
}

lab_status() {
  local mode g pid
  mode="$(lab_state_get mode)"
  if [[ -z "$mode" ]]; then echo "lab: down"; return 0; fi
  echo "lab: mode=$mode state=$LAB_STATE up=$(lab_state_get up)"
  if [[ "$mode" == nested ]]; then
    pid="$(lab_state_get pid.labhost)"
    if kill -0 "$pid" 2>/dev/null; then echo "labhost: running pid=$pid"; else echo "labhost: NOT running"; fi
    lab_labhost_lab 60 status || true
    return 0
  fi
  echo "libvirtd pid=$(lab_state_get pid.libvirtd) virtlogd pid=$(lab_state_get pid.virtlogd) accel=$(lab_state_get accel) netns=$(lab_state_get netns)"
  for g in $(lab_guests); do
    pid="$(lab_guest_pid "$g" || true)"
    echo "$g: state=$(lab_virsh domstate "$g" 2>/dev/null || echo none) qemu_pid=${pid:-none} ctl=$(lab_guest_dir "$g")/ctl.sock"
  done
}

lab_shell() {
  local g="$1" line
  echo "magnet lab shell on $g (each line runs in a fresh /bin/sh in the guest; Ctrl-D leaves)"
  while IFS= read -r -e -p "$g\$ " line; do
    [[ -z "$line" ]] && continue
    lab_run "$g" 600 "$line" || echo "[exit $?]"
  done
}

lab_console() {
  local g="$1" sock
  if [[ "$g" == labhost ]]; then sock="$(lab_labhost_dir)/console.sock"; else sock="$(lab_guest_dir "$g")/console.sock"; fi
  [[ -S "$sock" ]] || lab_die "no console socket for $g ($sock); in nested mode use 'tools/lab console labhost' and then 'socat -,raw,echo=0 UNIX-CONNECT:/run/magnet-lab/guests/$g/console.sock'"
  if [[ -t 0 ]]; then
    echo "connected to $g console (Ctrl-] leaves)"
    socat "-,raw,echo=0,escape=0x1d" "UNIX-CONNECT:$sock"
  else
    socat -t 2 - "UNIX-CONNECT:$sock"  # scripted use: stdin to the console, output back
  fi
}

lab_down() {
  local mode
  mode="$(lab_state_get mode)"
  case "$mode" in
    nested) lab_nested_down ;;
    direct|local) lab_local_down ;;
    "") ;;
  esac
  rm -rf "$LAB_STATE"
}

lab_main() {
  local cmd="${1:-}" mode
  [[ $# -gt 0 ]] && shift
  mode="$(lab_detect_mode)"
  case "$cmd" in
    up)
      local n="${1:-${MAGNET_LAB_GUESTS:-}}" rc=0
      if [[ "$mode" == local ]]; then
        # Inside the lab host: the outer harness collects logs and tears down on failure.
        lab_local_up "${n:-2}" local; return
      fi
      if [[ -f "$LAB_STATE/mode" ]]; then
        lab_err "a lab is already up (state: $LAB_STATE, mode $(lab_state_get mode)); run: tools/lab down"; return 1
      fi
      trap 'lab_err "interrupted: tearing the lab down"; lab_down; exit 130' INT TERM
      if [[ "$mode" == nested ]]; then
        lab_nested_up "${n:-2}" || rc=$?
      else
        lab_local_up "${n:-1}" direct || rc=$?
      fi
      if (( rc != 0 )); then
        local dest
        dest="${MAGNET_LAB_FAIL_LOGS:-$(lab_build_dir)/lab-logs/up-failed-$(date +%Y%m%d-%H%M%S)}"
        lab_collect "$dest" >/dev/null 2>&1 || true
        lab_down
        lab_err "lab up failed ($mode mode); everything was torn down; logs: $dest"
      fi
      trap - INT TERM
      return "$rc" ;;
    down) lab_down ;;
    status) lab_status ;;
    run)
      [[ $# -ge 2 ]] || lab_die "usage: tools/lab run GUEST CMD..."
      local g="$1"; shift
      lab_run "$g" "${MAGNET_LAB_RUN_TIMEOUT:-300}" "$*" ;;
    run-timeout) lab_run "$1" "$2" "$3" ;;
    shell) [[ $# -eq 1 ]] || lab_die "usage: tools/lab shell GUEST"; lab_shell "$1" ;;
    console) [[ $# -eq 1 ]] || lab_die "usage: tools/lab console GUEST"; lab_console "$1" ;;
    logs) [[ $# -eq 1 ]] || lab_die "usage: tools/lab logs DIR"; lab_collect "$1" ;;
    build) "$LAB_REPO/vm-images/build.sh" "$(lab_images_dir)" ;;
    guest-pid) lab_guest_pid "$1" ;;
    restart-libvirtd) lab_libvirtd_restart ;;
    labhost-lockup) lab_labhost_lockup ;;
    guest-lockup)
      [[ $# -eq 1 && "$(lab_state_get mode 2>/dev/null)" == nested ]] || lab_die "usage: tools/lab guest-lockup GUEST (a nested lab's)"
      lab_guest_lockup "$1" ;;
    speed)
      [[ -f "$LAB_STATE/speed" ]] || lab_die "no speed measured: no lab is up (state: $LAB_STATE)"
      cat "$LAB_STATE/speed" ;;
    bound) [[ $# -ge 1 ]] || lab_die "usage: tools/lab bound KIND [SECONDS]"; lab_bound "$@" ;;
    bounds)
      local k
      for k in quick ready crunch domain test logs down; do echo "$k $(lab_bound "$k")"; done
      echo "work0 $(lab_bound work 0)"; echo "linger0 $(lab_bound linger 0)" ;;
    ""|-h|--help|help) lab_usage ;;
    *) lab_usage >&2; return 2 ;;
  esac
}
