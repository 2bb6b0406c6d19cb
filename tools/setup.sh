#!/usr/bin/env bash
# Installs everything magnet needs to build, test and run its lab, from
# Debian 12 packages.  Idempotent: installs only what is missing.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang llvm libclang-rt-14-dev
  libbpf-dev bpftool libelf-dev zlib1g-dev
  libboost-dev libgtest-dev libgmock-dev libbenchmark-dev
  libyaml-cpp-dev nlohmann-json3-dev libvirt-dev libcap-dev
  # run and test: traffic, capture comparison, namespaces
  iproute2 iperf3 tcpdump procps util-linux python3
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
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
