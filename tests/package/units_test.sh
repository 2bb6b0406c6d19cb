#!/usr/bin/env bash
# The systemd units as `cmake --install` puts them (DESTDIR), checked by
# systemd's own `systemd-analyze verify`: their syntax, every setting known,
# the programs they start present and executable in the staged tree; and
# `systemd-analyze security` prints their exposure scores.
# usage: units_test.sh BUILD BINDIR
set -euo pipefail
build=$1 bindir=$2
stage=$(mktemp -d /tmp/magnet-units.XXXXXX)
trap 'rm -rf "$stage"' EXIT
for c in host agent client; do
  DESTDIR=$stage cmake --install "$build" --component "$c" >/dev/null
done
mapfile -t units < <(cd "$stage" && find . -name '*.service' | sed 's|^\.||')
((${#units[@]} == 2)) || { echo "units_test: FAIL: installed units: ${units[*]:-none}" >&2; exit 1; }
for u in "${units[@]}"; do
  grep -q "^ExecStart=$bindir/" "$stage$u" || { echo "units_test: FAIL: $u: ExecStart not in $bindir" >&2; exit 1; }
  # Verified as a copy whose programs are the staged ones (the staged tree
  # has no systemd of its own for --root= to load the units it orders
  # itself against): systemd-analyze checks that they are executable.
  copy=$stage/verify/$(basename "$u")
  mkdir -p "$stage/verify"
  sed "s|^ExecStart=$bindir/|ExecStart=$stage$bindir/|" "$stage$u" >"$copy"
  out=$(systemd-analyze verify "$copy" 2>&1) || { echo "units_test: FAIL: $u: $out" >&2; exit 1; }
  [[ -z $out ]] || { echo "units_test: FAIL: $u: systemd-analyze verify warns: $out" >&2; exit 1; }
  echo "units_test: $u verified; $(systemd-analyze security --offline=yes "$copy" 2>/dev/null | grep -i 'overall exposure')"
done
