#!/usr/bin/env bash
# The .deb packages, built from the tree and installed into a clean Debian 12
# root as an operator would install them (apt resolves their Depends from
# deb.debian.org), then used there: the programs run, the units verified,
# the configuration a conffile.
#
# usage: deb_test.sh SOURCE WORKDIR [HOST_TREE]
#   WORKDIR keeps the two package trees (a host tree for `magnet`, a
#   guest-only tree, -DMAGNET_HOST=OFF, for magnet-agent, libmagnet-client
#   and libmagnet-client-dev) so that later runs build incrementally, and
#   the debootstrap'ed minbase root as a tarball (bookworm-minbase.tar): each
#   run unpacks a fresh copy of it.  MAGNET_DEB_FRESH_ROOT=1 debootstraps
#   again.
#   HOST_TREE: a build tree configured with -DCMAKE_INSTALL_PREFIX=/usr whose
#   `magnet` is built already (tools/test's own): `magnet` is packaged from
#   it instead of a host tree built here (8 minutes at idle priority beside
#   the e2e tier).  Its optimisation and debug information do not show in
#   the package: cpack strips the binary.
# Root: debootstrap, chroot, mounts.
set -euo pipefail
src=$1 work=$2 host_tree=${3:-}
mirror=${MAGNET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [[ $(id -u) -ne 0 ]]; then
  echo "deb_test: needs root (debootstrap, chroot)" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { echo "deb_test: no debootstrap (tools/setup.sh installs it)" >&2; exit 1; }
fail() {
  echo "deb_test: FAIL: $*" >&2
  exit 1
}
step() { echo "deb_test: [$(date +%T)] $*"; }
mkdir -p "$work"
root=$(mktemp -d /tmp/magnet-debroot.XXXXXX)
trap 'rm -rf "$root"' EXIT

# A clean Debian 12 root: debootstrap once (timed), a fresh copy each run.
base=$work/bookworm-minbase.tar
if [[ ! -s $base || -n ${MAGNET_DEB_FRESH_ROOT:-} ]]; then
  step "debootstrap --variant=minbase bookworm"
  t0=$(date +%s)
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap"; }
  echo "deb_test: debootstrap took $(($(date +%s) - t0)) s"
  tar -C "$root" -cf "$base.tmp" . && mv "$base.tmp" "$base"
else
  step "unpack the cached minbase root"
  tar -C "$root" -xf "$base"
fi

# Build: only the packaged programs (CMAKE_SKIP_INSTALL_ALL_DEPENDENCY: cpack
# would otherwise build every target, tests and benches included).
# No debug information: the packages are stripped (CPACK_STRIP_FILES), and
# compiling it at -O2 is a fifth or more of the build (tools/build.sh).
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG"
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON)
if command -v ccache >/dev/null; then
  args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
step "configure and build the guest-only tree"
cmake -S "$src" -B "$work/guest" "${args[@]}" -DMAGNET_HOST=OFF >"$work/guest.log"
grep -qi "libvirt" "$work/guest/CMakeCache.txt" && fail "the guest-only tree looked for libvirt"
cmake --build "$work/guest" -j2 --target magnet-agent magnet-watch magnet-poll magnet-adapt magnet_client magnet_cli_docs \
  >>"$work/guest.log" || { tail -30 "$work/guest.log" >&2; fail "building the guest side"; }

if [[ -n $host_tree ]]; then
  step "the host tree: $host_tree, built already"
  grep -qx "CMAKE_INSTALL_PREFIX:PATH=/usr" "$host_tree/CMakeCache.txt" 2>/dev/null ||
    fail "$host_tree is not a tree configured with -DCMAKE_INSTALL_PREFIX=/usr"
  [[ -x $host_tree/host/magnet ]] || fail "$host_tree has no magnet built"
else
  host_tree=$work/host
  step "configure and build the host tree"
  cmake -S "$src" -B "$host_tree" "${args[@]}" -DMAGNET_UNIT_TESTS=OFF >"$work/host.log"
  cmake --build "$host_tree" -j2 --target magnet magnet_cli_docs >>"$work/host.log" ||
    { tail -30 "$work/host.log" >&2; fail "building magnet"; }
fi
step "cpack"
rm -rf "$work/debs" && mkdir -p "$work/debs"
(cd "$host_tree" && cpack -G DEB -D CPACK_COMPONENTS_ALL=host -B "$work/cpack-host" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log" >&2; fail "cpack (host)"; }
(cd "$work/guest" && cpack -G DEB -B "$work/cpack-guest" >>"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log" >&2; fail "cpack (guest)"; }
cp "$work"/cpack-host/*.deb "$work"/cpack-guest/*.deb "$work/debs/"
ls "$work/debs"
declare -A want=(
  [magnet]="./usr/bin/magnet ./usr/lib/systemd/system/magnet.service ./etc/magnet/magnet.conf ./usr/share/man/man1/magnet.1 ./usr/share/bash-completion/completions/magnet"
  [magnet-agent]="./usr/bin/magnet-agent ./usr/bin/magnet-watch ./usr/bin/magnet-poll ./usr/bin/magnet-adapt ./usr/lib/systemd/system/magnet-agent.service ./usr/share/man/man1/magnet-agent.1"
  [libmagnet-client]="./usr/lib/x86_64-linux-gnu/libmagnet-client.so.0"
  [libmagnet-client-dev]="./usr/include/magnet/client.h ./usr/include/magnet/client.hpp ./usr/include/magnet/usdt.h ./usr/lib/x86_64-linux-gnu/libmagnet-client.so ./usr/lib/x86_64-linux-gnu/pkgconfig/magnet-client.pc"
)
for p in "${!want[@]}"; do
  deb=$(ls "$work"/debs/"${p}"_*.deb 2>/dev/null | head -1)
  [[ -n $deb ]] || fail "no package $p"
  contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
  for f in ${want[$p]}; do
    grep -qx "$f" <<<"$contents" || fail "$p lacks $f: $contents"
  done
  echo "deb_test: $p: $(dpkg-deb -f "$deb" Depends)"
done
dpkg-deb -f "$work"/debs/magnet-agent_*.deb Depends | grep -q "libmagnet-client (= " ||
  fail "magnet-agent does not depend on its libmagnet-client"
dpkg-deb -f "$work"/debs/magnet-agent_*.deb Depends | grep -q "libvirt" && fail "magnet-agent depends on libvirt"
dpkg-deb -f "$work"/debs/libmagnet-client-dev_*.deb Depends | grep -q "systemtap-sdt-dev" ||
  fail "libmagnet-client-dev does not depend on systemtap-sdt-dev (magnet/usdt.h includes sys/sdt.h)"

step "apt install the packages in the root"
mkdir -p "$root/tmp/debs"
cp "$work"/debs/*.deb "$root/tmp/debs/"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cat >"$root/tmp/inside.sh" <<'EOF'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
fail() { echo "deb_test: FAIL (in the root): $*" >&2; exit 1; }
apt-get update -qq
apt-get install -y -qq --no-install-recommends /tmp/debs/*.deb >/tmp/apt.log 2>&1 || { tail -30 /tmp/apt.log >&2; fail "apt-get install"; }
for p in magnet magnet-agent libmagnet-client libmagnet-client-dev; do
  dpkg-query -W -f='${Status}\n' "$p" | grep -q "install ok installed" || fail "$p is not installed"
done
dpkg-query -W -f='${Conffiles}\n' magnet | grep -q "/etc/magnet/magnet.conf" || fail "magnet.conf is not a conffile"
magnet --version | grep -q "^magnet " || fail "magnet --version"
magnet --help | grep -q "^Usage: magnet" || fail "magnet --help"
magnet host --help | grep -q -- "--config FILE" || fail "magnet host --help"
# The shipped settings, read as the daemon reads them at start.
magnet host --print-default-views >/tmp/views.yaml
magnet host --config /etc/magnet/magnet.conf --check-views /tmp/views.yaml || fail "magnet host --config /etc/magnet/magnet.conf"
magnet probes >/tmp/probes.txt || fail "magnet probes: $(cat /tmp/probes.txt)"
magnet-agent --help | grep -q "Usage: magnet-agent" || fail "magnet-agent --help"
for t in magnet-watch magnet-poll magnet-adapt; do "$t" --help >/dev/null || fail "$t --help"; done
ldd /usr/bin/magnet-agent | grep -q "libmagnet-client.so.0 => /" || fail "magnet-agent's library: $(ldd /usr/bin/magnet-agent)"
ldd /usr/bin/magnet-agent | grep -q "libvirt" && fail "magnet-agent links libvirt"
echo "deb_test: in the root: every program runs"
EOF
t0=$(date +%s)
unshare -m --propagation private bash -c '
  root=$1
  mount -t proc proc "$root/proc" && mount --rbind /dev "$root/dev" && mount --rbind /sys "$root/sys" || exit 9
  chroot "$root" bash /tmp/inside.sh' inside "$root"
echo "deb_test: apt install and the checks in the root took $(($(date +%s) - t0)) s"

# As installed, but with the root's programs in ExecStart= (a minbase root
# has no systemd for --root= to load the targets the units order against).
step "systemd-analyze verify the installed units"
mkdir -p "$root/tmp/verify"
for u in magnet.service magnet-agent.service; do
  sed "s|^ExecStart=/|ExecStart=$root/|" "$root/usr/lib/systemd/system/$u" >"$root/tmp/verify/$u"
  out=$(systemd-analyze verify "$root/tmp/verify/$u" 2>&1) || fail "$u: $out"
  [[ -z $out ]] || fail "$u: systemd-analyze verify warns: $out"
  echo "deb_test: $u verified in the root"
done
echo "deb_test: ok"
