#!/usr/bin/env bash
# Installs everything magnet needs to build, test and run its lab, from
# Debian 12 packages.  Idempotent: installs only what is missing.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang llvm libclang-rt-14-dev
  libbpf-dev bpftool libelf-dev zlib1g-dev
  libboost-dev libgtest-dev libgmock-dev libbenchmark-dev
  libyaml-cpp-dev nlohmann-json3-dev libvirt-dev libxml2-dev libcap-dev libseccomp-dev
  libpcap-dev  # magnet reconstruct reads pcap files
  systemtap-sdt-dev  # sys/sdt.h: MAGNET_ADD in <magnet/usdt.h> (docs/instrumentation.md)
  # run and test: traffic, capture comparison, namespaces
  iproute2 iperf3 tcpdump procps util-linux python3
  # unit tests: the generated man pages (groff, man -l) and bash completion
  groff-base man-db bash
  # unit tests: decode `magnet dump --format perfetto` (magnet itself does not link it)
  protobuf-compiler libprotobuf-dev
  # magnet host --http: promtool checks /metrics, a real Prometheus scrapes it
  prometheus
  # bench/adapt and tools/demo: the plot of rates over time
  gnuplot-nox
  # magnet host's dashboard: tested in a real browser (tests/e2e/browser/)
  chromium chromium-driver
  # lab: VMs and their images
  libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils
  busybox-static cpio kmod socat
  # tests/package: a clean Debian 12 root to install the .deb packages into
  debootstrap
)
# The dashboard's front end (uPlot) and its browser test (playwright-core)
# come from npm at build time: Debian's nodejs and npm, unless a node with
# its own npm is installed already (e.g. NodeSource's nodejs, which
# conflicts with Debian's npm).
if ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
if [[ -n "${MAGNET_EXTRA_PACKAGES:-}" ]]; then
  read -r -a extra <<<"$MAGNET_EXTRA_PACKAGES"
  packages+=("${extra[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages: ${missing[*]}; run as root to install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The nested lab's host VM runs under QEMU from bookworm-backports (Debian
# 12's backports archive; 10.0 when this was written), unpacked into
# $labhost_qemu and not installed: libvirt, the direct lab and the KVM
# guests inside the lab host keep Debian 12's QEMU 7.2.  7.2's TCG
# emulation of nested SVM killed the lab host's kernel within minutes of
# traffic (docs/lab.md has the measurements).  Its own apt lists, so the
# machine's sources are not touched.
labhost_qemu=${MAGNET_LABHOST_QEMU_DIR:-/opt/magnet/labhost-qemu}
if [[ ! -x $labhost_qemu/usr/bin/qemu-system-x86_64 || ! -s $labhost_qemu/.version ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: the nested lab host's QEMU is not in $labhost_qemu; run as root to fetch it" >&2
    exit 1
  fi
  bpo=/var/cache/magnet/apt-bookworm-backports
  mkdir -p "$bpo/lists/partial" "$bpo/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main" \
    >"$bpo/sources.list"
  apt_bpo=(-o Dir::Etc::SourceList="$bpo/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o Dir::State::Lists="$bpo/lists" -o APT::Sandbox::User=root)
  echo "setup: fetching the lab host's QEMU from bookworm-backports into $labhost_qemu" >&2
  apt-get "${apt_bpo[@]}" update -qq
  rm -f "$bpo"/debs/*.deb
  (cd "$bpo/debs" && apt-get "${apt_bpo[@]}" download -qq \
    qemu-system-x86/bookworm-backports qemu-system-common/bookworm-backports qemu-system-data/bookworm-backports)
  rm -rf "$labhost_qemu.new"
  mkdir -p "$labhost_qemu.new"
  for deb in "$bpo"/debs/*.deb; do dpkg -x "$deb" "$labhost_qemu.new"; done
  if libs=$(ldd "$labhost_qemu.new/usr/bin/qemu-system-x86_64" | grep 'not found'); then
    echo "setup: the lab host's QEMU lacks libraries this machine does not have:" >&2
    echo "$libs" >&2
    exit 1
  fi
  "$labhost_qemu.new/usr/bin/qemu-system-x86_64" --version | head -n1 >"$labhost_qemu.new/.version"
  rm -rf "$labhost_qemu"
  mv "$labhost_qemu.new" "$labhost_qemu"
  echo "setup: lab host QEMU: $(cat "$labhost_qemu/.version")" >&2
fi
