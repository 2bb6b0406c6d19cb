#!/bin/bash
# Build the lab guest image: <out>/guest/{vmlinuz,initrd.img,vmlinux,initrd.cpio,cmdline-base,stamp}.
# vmlinux and initrd.cpio: the same kernel and initramfs uncompressed, which the direct lab
# boots (faster under TCG); the nested lab host carries the compressed pair.
# Usage: vm-images/guest/build.sh [OUT_DIR]
#   OUT_DIR defaults to $MAGNET_BUILD_DIR/vm-images or <repo>/build/vm-images.
#   MAGNET_GUEST_EXTRA="path1 path2 ..." copies extra guest programs (plus ldd-resolved
#   libraries) into the image at the same paths; an executable rc script placed at
#   /etc/magnet/rc.d/*.sh among them is started at boot.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ $# -ge 1 ]] && VMI_OUT="$1"
# shellcheck source=SCRIPTDIR/../common/build-lib.sh
source "$here/../common/build-lib.sh"

kver="$(vmi_kernel_version)"
out="$VMI_OUT/guest"
pkgs=(busybox-static iperf3 libiperf0 socat)
read -r -a extra <<<"${MAGNET_GUEST_EXTRA:-}"
for f in "${extra[@]}"; do [[ -e "$f" ]] || vmi_die "missing image input: MAGNET_GUEST_EXTRA file $f"; done
# The project's guest programs (the agent, the client library and its
# examples), from the build tree, installed in /usr/bin and /usr/lib.
gbuild="${MAGNET_BUILD_DIR:-$VMI_REPO/build}/guest"
gbins=(magnet-agent magnet-watch magnet-poll magnet-adapt magnet-adversary magnet-marker-echo)
glib=libmagnet-client.so.0
for f in "${gbins[@]}" "$glib"; do
  [[ -e "$gbuild/$f" ]] || vmi_die "missing image input: $gbuild/$f (build the project first: tools/build.sh)"
done
key="$( { echo "kernel=$kver"; vmi_pkg_versions "${pkgs[@]}"; \
          vmi_hash_files "$here/build.sh" "$here/init" "$here/../common/build-lib.sh" "$here/../common/magnet-ctl"; \
          for f in "${gbins[@]}" "$glib"; do vmi_hash_files "$gbuild/$f"; done; \
          for f in "${extra[@]}"; do echo "extra=$f"; done; \
          [[ ${#extra[@]} -gt 0 ]] && vmi_hash_files "${extra[@]}"; true; } | sha256sum | cut -d' ' -f1)"
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$key" && -f "$out/initrd.img" && -f "$out/vmlinuz" &&
      -f "$out/initrd.cpio" && -f "$out/vmlinux" ]]; then
  vmi_log "guest image up to date: $out"
  exit 0
fi
for p in /usr/bin/iperf3 /usr/bin/socat; do
  [[ -x "$p" ]] || vmi_die "missing image input: $p (apt-get install ${p##*/})"
done
t0=$(date +%s)
kroot="$(vmi_fetch_kernel "$kver")"
root="$VMI_OUT/.work/guest-root"
rm -rf "$root"; mkdir -p "$root"/{proc,sys,dev,run,tmp,etc,root,lib64,mnt}
vmi_busybox "$root"
vmi_copy_modules "$root" "$kroot" "$kver" virtio_pci virtio_net virtio_console vmw_vsock_virtio_transport virtio_rng virtio_blk
vmi_copy_bin "$root" /usr/bin/iperf3 /usr/bin/socat
[[ ${#extra[@]} -gt 0 ]] && vmi_copy_bin "$root" "${extra[@]}"
mkdir -p "$root/usr/lib/x86_64-linux-gnu" "$root/etc/magnet/rc.d"
# Without debug information: the initramfs is unpacked at every boot.
strip --strip-debug -o "$root/usr/lib/x86_64-linux-gnu/$glib" "$gbuild/$glib"
for b in "${gbins[@]}"; do
  strip --strip-debug -o "$root/usr/bin/$b" "$gbuild/$b"
  chmod 0755 "$root/usr/bin/$b"
  vmi_copy_libs "$root" "$gbuild/$b"
done
# The agent starts at boot (before readiness), logging to /run/magnet-agent.log.
cat >"$root/etc/magnet/rc.d/agent.sh" <<'RC'
mkdir -p /run/magnet
/usr/bin/magnet-agent >/run/magnet-agent.log 2>&1 </dev/null &
echo $! >/run/magnet-agent.pid
RC
install -m 0755 "$here/init" "$root/init"
install -m 0755 "$here/../common/magnet-ctl" "$root/sbin/magnet-ctl"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf 'export PS1="\\h:\\w# "\nexport PATH=/usr/sbin:/usr/bin:/sbin:/bin\n' >"$root/etc/profile"
mkdir -p "$out"
cp "$kroot/boot/vmlinuz-$kver" "$out/vmlinuz.tmp" && mv "$out/vmlinuz.tmp" "$out/vmlinuz"
vmi_extract_vmlinux "$out/vmlinuz" "$out/vmlinux"
vmi_pack "$root" "$out/initrd.cpio" none
gzip -1 -c "$out/initrd.cpio" >"$out/initrd.img.tmp" && mv "$out/initrd.img.tmp" "$out/initrd.img"
echo "console=ttyS0 panic=-1 quiet" >"$out/cmdline-base"
echo "$kver" >"$out/kernel-version"
echo "$key" >"$out/stamp"
rm -rf "$root"
vmi_log "guest image built in $(( $(date +%s) - t0 )) s: $out ($(du -h "$out/initrd.img" | cut -f1) initrd)"
