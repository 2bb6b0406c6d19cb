#!/bin/bash
# Build the lab host image: <out>/labhost/{vmlinuz,initrd.img,stamp}.
# Assembled as an initramfs (binaries + ldd-resolved libraries), see vm-images/README.md.
# Usage: vm-images/labhost/build.sh [OUT_DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ $# -ge 1 ]] && VMI_OUT="$1"
# shellcheck source=SCRIPTDIR/../common/build-lib.sh
source "$here/../common/build-lib.sh"

# The lab host carries the guest image: build (or reuse) it first.
"$here/../guest/build.sh" "$VMI_OUT"

# MAGNET_LABHOST_KERNEL_VERSION: another kernel for the lab host only (its
# package in $VMI_OUT/dl or apt's sources); the guests keep theirs.
kver="${MAGNET_LABHOST_KERNEL_VERSION:-$(vmi_kernel_version)}"
out="$VMI_OUT/labhost"
pkgs=(busybox-static bash iperf3 libiperf0 socat bpftool iproute2 qemu-system-x86 qemu-system-data
      seabios ipxe-qemu libvirt-daemon libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients
      libvirt0 libbpf1 libelf1 zlib1g libyaml-cpp0.7 libpcap0.8 libstdc++6 libgcc-s1 libc6)
bins=(/bin/bash /usr/bin/iperf3 /usr/bin/socat /usr/sbin/bpftool /usr/bin/ip /usr/sbin/bridge
      /usr/bin/qemu-system-x86_64 /usr/sbin/libvirtd /usr/sbin/virtlogd /usr/bin/virsh
      /usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so
      /usr/lib/libvirt/libvirt_iohelper /usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so
      /usr/lib/x86_64-linux-gnu/libbpf.so.1 /usr/lib/x86_64-linux-gnu/libelf.so.1
      /usr/lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libyaml-cpp.so.0.7
      /usr/lib/x86_64-linux-gnu/libvirt.so.0 /usr/lib/x86_64-linux-gnu/libpcap.so.0.8
      /usr/lib/x86_64-linux-gnu/libstdc++.so.6
      /usr/lib/x86_64-linux-gnu/libgcc_s.so.1)
key="$( { echo "kernel=$kver compress=${MAGNET_LABHOST_COMPRESS:-none}"; vmi_pkg_versions "${pkgs[@]}"; cat "$VMI_OUT/guest/stamp"; \
          vmi_hash_files "$here/build.sh" "$here/init" "$here/../common/build-lib.sh" "$here/../common/magnet-ctl"; \
        } | sha256sum | cut -d' ' -f1)"
if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$key" && -f "$out/initrd.img" && -f "$out/vmlinuz" ]]; then
  vmi_log "labhost image up to date: $out"
  exit 0
fi
for d in /usr/share/qemu /usr/share/seabios /usr/lib/ipxe/qemu /usr/share/libvirt; do
  [[ -d "$d" ]] || vmi_die "missing image input: $d"
done
t0=$(date +%s)
kroot="$(vmi_fetch_kernel "$kver")"
root="$VMI_OUT/.work/labhost-root"
rm -rf "$root"; mkdir -p "$root"/{proc,sys,dev,run,tmp,etc,root,mnt,var/lib,var/log,var/cache,usr/lib,usr/lib64}
ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"; ln -s ../run "$root/var/run"
vmi_busybox "$root"
vmi_copy_modules "$root" "$kroot" "$kver" virtio_pci virtio_console virtio_rng virtio_net 9pnet_virtio 9p \
  kvm_amd vhost_net vhost_vsock vsock_loopback vmw_vsock_virtio_transport tun bridge veth overlay
vmi_copy_bin "$root" "${bins[@]}"
# Firmware and data QEMU / libvirt need (symlinks dereferenced).
for d in /usr/share/qemu /usr/share/seabios /usr/lib/ipxe/qemu /usr/share/libvirt; do
  mkdir -p "$root$d"; cp -rL "$d/." "$root$d/"
done
# libvirt configuration: QEMU driver only (no network driver -> no 'default' NAT network ever).
mkdir -p "$root/etc/libvirt/qemu" "$root/var/lib/libvirt/qemu" "$root/var/log/libvirt/qemu"
cat >"$root/etc/libvirt/libvirtd.conf" <<'CONF'
unix_sock_group = "root"
unix_sock_rw_perms = "0770"
auth_unix_rw = "none"
auth_unix_ro = "none"
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
CONF
cat >"$root/etc/libvirt/qemu.conf" <<'CONF'
user = "root"
group = "root"
dynamic_ownership = 0
security_driver = "none"
stdio_handler = "logd"
CONF
: >"$root/etc/libvirt/virtlogd.conf"
printf 'uri_default = "qemu:///system"\n' >"$root/etc/libvirt/libvirt.conf"
cat >"$root/etc/passwd" <<'CONF'
root:x:0:0:root:/root:/bin/sh
libvirt-qemu:x:64055:994:Libvirt Qemu:/var/lib/libvirt:/bin/false
CONF
cat >"$root/etc/group" <<'CONF'
root:x:0:
kvm:x:994:
libvirt:x:993:
libvirt-qemu:x:64055:
CONF
printf 'passwd: files\ngroup: files\nhosts: files\n' >"$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
printf 'export PS1="\\h:\\w# "\nexport PATH=/usr/sbin:/usr/bin:/sbin:/bin\n' >"$root/etc/profile"
install -m 0755 "$here/init" "$root/init"
install -m 0755 "$here/../common/magnet-ctl" "$root/sbin/magnet-ctl"
mkdir -p "$root/opt/magnet/guest"
cp "$VMI_OUT/guest/vmlinuz" "$VMI_OUT/guest/initrd.img" "$VMI_OUT/guest/cmdline-base" "$root/opt/magnet/guest/"
ldconfig -r "$root" 2>/dev/null || true
mkdir -p "$out"
cp "$kroot/boot/vmlinuz-$kver" "$out/vmlinuz.tmp" && mv "$out/vmlinuz.tmp" "$out/vmlinuz"
vmi_pack "$root" "$out/initrd.img" "${MAGNET_LABHOST_COMPRESS:-none}"
echo "console=ttyS0 panic=-1 quiet" >"$out/cmdline-base"
echo "$kver" >"$out/kernel-version"
echo "$key" >"$out/stamp"
du -sh "$root" | cut -f1 >"$out/rootfs-size"
rm -rf "$root"
vmi_log "labhost image built in $(( $(date +%s) - t0 )) s: $out ($(du -h "$out/initrd.img" | cut -f1) initrd, $(cat "$out/rootfs-size") unpacked)"
