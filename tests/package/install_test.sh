#!/usr/bin/env bash
# `cmake --install` into a staging root (DESTDIR), then the installed files
# used as an operator and a guest developer would, with the build and source
# trees hidden (a private mount namespace with empty tmpfs over both), so
# that nothing installed finds its way back into them: `magnet --version`,
# `--help`, `probes`, the daemon started from the installed binary (it loads
# its BPF object and serves the dashboard's files from what is compiled into
# it), the agent's and the guest tools' help, and a C program built with
# `pkg-config --cflags --libs magnet-client` against the installed library.
#
# usage: install_test.sh BUILD SOURCE BINDIR LIBDIR   (the FULL install dirs)
# Root: the daemon loads probes, and the trees are hidden with mounts.
set -euo pipefail

build=$1 src=$2 bindir=$3 libdir=$4
datadir=${bindir%/bin}/share
if [[ $(id -u) -ne 0 ]]; then
  echo "install_test: needs root (the daemon loads probes; mounts hide the trees)" >&2
  exit 1
fi
stage=$(mktemp -d /tmp/magnet-install.XXXXXX)
trap 'rm -rf "$stage"' EXIT
fail() {
  echo "install_test: FAIL: $*" >&2
  exit 1
}

DESTDIR=$stage/root cmake --install "$build" >"$stage/install.log" || {
  cat "$stage/install.log" >&2
  fail "cmake --install"
}
root=$stage/root
for f in "$bindir/magnet" "$bindir/magnet-agent" "$bindir/magnet-watch" "$bindir/magnet-poll" \
  "$bindir/magnet-adapt" "$libdir/libmagnet-client.so.0" "$libdir/libmagnet-client.so" \
  "$libdir/pkgconfig/magnet-client.pc" "$datadir/man/man1/magnet.1" "$datadir/man/man1/magnet-agent.1" \
  "$datadir/bash-completion/completions/magnet"; do
  [[ -e $root$f ]] || fail "$f is not installed (install log: $(tr '\n' ' ' <"$stage/install.log"))"
done

# Everything below runs with the trees hidden.
cat >"$stage/inside.sh" <<'EOF'
set -euo pipefail
root=$1 bindir=$2 libdir=$3 stage=$4
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
daemon=
trap '[[ -n $daemon ]] && kill "$daemon" 2>/dev/null; wait' EXIT
magnet=$root$bindir/magnet
export LD_LIBRARY_PATH=$root$libdir

[[ $("$magnet" --version) == "magnet "* ]] || fail "magnet --version"
"$magnet" --help | grep -q "^Usage: magnet" || fail "magnet --help"
"$magnet" probes >"$stage/probes.txt" || fail "magnet probes: $(cat "$stage/probes.txt")"
grep -Eq '^net\.dev\.recv +device +(tp_btf|raw_tp)' "$stage/probes.txt" ||
  fail "magnet probes lists net.dev.recv as attachable: $(cat "$stage/probes.txt")"
for p in magnet-agent magnet-watch magnet-poll magnet-adapt; do
  "$root$bindir/$p" --help >"$stage/help.txt" || fail "$p --help exits $?"
  grep -qi "usage" "$stage/help.txt" || fail "$p --help: $(cat "$stage/help.txt")"
done

# The daemon: the probes from the BPF object compiled in, the dashboard's
# files from the binary.
"$magnet" host --uri test:///default --no-deliver --probes net.dev --socket "$stage/host.sock" \
  --http 127.0.0.1:0 --duration 60 2>"$stage/daemon.log" &
daemon=$!
port=
for _ in $(seq 1 200); do
  port=$(sed -n 's|.*\[http\] dashboard on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$stage/daemon.log")
  [[ -n $port ]] && grep -q '\[started\]' "$stage/daemon.log" && break
  kill -0 "$daemon" 2>/dev/null || fail "the installed daemon exited: $(cat "$stage/daemon.log")"
  sleep 0.1
done
[[ -n $port ]] || fail "no [http] dashboard line: $(cat "$stage/daemon.log")"
grep -q '\[started\] probes .*net\.dev\.recv' "$stage/daemon.log" ||
  fail "the daemon attached no net.dev probe: $(cat "$stage/daemon.log")"
for path in / /assets/dashboard.js /assets/dashboard.css /assets/uPlot.iife.min.js /assets/uPlot.min.css; do
  code=$(curl -s -o "$stage/asset" -w '%{http_code}' "http://127.0.0.1:$port$path")
  [[ $code == 200 && -s $stage/asset ]] || fail "GET $path: HTTP $code"
done
grep -qi "uplot" "$stage/asset" || fail "/assets/uPlot.min.css is not uPlot's"
"$magnet" top --socket "$stage/host.sock" --json --count 1 >/dev/null || fail "magnet top against the installed daemon"
kill -TERM "$daemon"
rc=0
wait "$daemon" || rc=$?
daemon=
((rc == 0)) || fail "the daemon's exit status $rc on SIGTERM: $(cat "$stage/daemon.log")"

# A guest application against the installed library and its pkg-config file.
export PKG_CONFIG_PATH=$root$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
flags=$(pkg-config --cflags --libs magnet-client) || fail "pkg-config magnet-client"
cat >"$stage/app.c" <<'APP'
#include <magnet/client.h>
#include <magnet/usdt.h>
#include <stdio.h>
int main(void) {
  MAGNET_ADD(1, 2, 3);  /* the installed USDT header compiles into a C program */
  magnet_client *c = magnet_client_new("/nonexistent/agent.sock");
  if (!c) return 3;
  int r = magnet_client_poll(c, 0);
  printf("poll %d: %s\n", r, magnet_client_error(c));
  magnet_client_free(c);
  return r == -1 ? 0 : 4;
}
APP
# shellcheck disable=SC2086
cc -o "$stage/app" "$stage/app.c" $flags || fail "cc app.c $flags"
"$stage/app" >"$stage/app.txt" || fail "the app: $(cat "$stage/app.txt")"
grep -q "nonexistent" "$stage/app.txt" || fail "the app's error names no socket: $(cat "$stage/app.txt")"

# The installed man pages render, and bash completes from the installed script.
datadir=${bindir%/bin}/share
for page in magnet magnet-agent; do
  out=$(LC_ALL=C MANWIDTH=80 man -l -P cat "$root$datadir/man/man1/$page.1" 2>&1) || fail "man $page: $out"
  grep -q "^NAME" <<<"$out" || fail "man $page has no NAME section: $out"
done
got=$(bash --norc -c "source '$root$datadir/bash-completion/completions/magnet' && COMP_WORDS=(magnet recor) &&
  COMP_CWORD=1 && _magnet && printf '%s\n' \"\${COMPREPLY[@]}\"") || fail "the installed completion: $got"
[[ $got == record ]] || fail "bash completes 'magnet recor' to '$got', not record"
EOF

unshare -m --propagation private bash -c '
  mount -t tmpfs magnet-hidden "$1" && mount -t tmpfs magnet-hidden "$2" || exit 9
  shift 2
  exec bash "$@"' hide "$build" "$src" "$stage/inside.sh" "$root" "$bindir" "$libdir" "$stage"
echo "install_test: ok (staged in $root: $(cd "$root" && find . -type f | wc -l) files)"
