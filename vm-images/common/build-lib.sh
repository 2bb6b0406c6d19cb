#!/bin/bash
# Shared helpers for the vm-images build scripts (sourced, not executed).
# Everything generated goes under $VMI_OUT (default <repo>/build/vm-images).
set -euo pipefail

VMI_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VMI_REPO="$(cd "$VMI_SRC/.." && pwd)"
: "${VMI_OUT:=${MAGNET_BUILD_DIR:-$VMI_REPO/build}/vm-images}"

vmi_log() { printf '[vm-images] %s\n' "$*" >&2; }
vmi_die() { printf '[vm-images] ERROR: %s\n' "$*" >&2; exit 1; }

# Resolve the Debian kernel ABI version (e.g. 6.1.0-56-amd64).
# MAGNET_KERNEL_VERSION overrides; otherwise apt's view of linux-image-amd64;
# otherwise the newest kernel already extracted into the cache.
vmi_kernel_version() {
  if [[ -n "${MAGNET_KERNEL_VERSION:-}" ]]; then echo "$MAGNET_KERNEL_VERSION"; return; fi
  local v
  v="$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: linux-image-\([0-9].*-amd64\)$/\1/p' | head -n1)"
  if [[ -z "$v" ]]; then
    v="$(find "$VMI_OUT/kernel" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort -V | tail -n1)"
  fi
  [[ -n "$v" ]] || vmi_die "cannot resolve the guest kernel version: run 'apt-get update' (apt-cache depends linux-image-amd64 gave nothing) or set MAGNET_KERNEL_VERSION"
  echo "$v"
}

# Download (apt-get download) and extract a Debian kernel into $VMI_OUT/kernel/KVER.
# Prints the extraction root.
vmi_fetch_kernel() {
  local kver="$1" root="$VMI_OUT/kernel/$1"
  if [[ -f "$root/.done" ]]; then echo "$root"; return; fi
  local dl="$VMI_OUT/dl"
  mkdir -p "$dl"
  local deb
  deb="$(find "$dl" -maxdepth 1 -name "linux-image-${kver}_*.deb" | head -n1)"
  if [[ -z "$deb" ]]; then
    vmi_log "downloading linux-image-$kver (apt-get download)"
    (cd "$dl" && apt-get download "linux-image-$kver" >"$dl/apt-download.log" 2>&1) \
      || vmi_die "apt-get download linux-image-$kver failed; log: $dl/apt-download.log"
    deb="$(find "$dl" -maxdepth 1 -name "linux-image-${kver}_*.deb" | head -n1)"
  fi
  [[ -n "$deb" ]] || vmi_die "kernel package for $kver not found in $dl"
  rm -rf "$root"; mkdir -p "$root"
  dpkg-deb -x "$deb" "$root"
  depmod -b "$root" "$kver"
  touch "$root/.done"
  echo "$root"
}

# vmi_copy_file ROOT FILE: copy FILE (dereferenced) to the same path in ROOT.
vmi_copy_file() {
  local root="$1" f="$2"
  [[ -e "$root$f" ]] && return 0
  mkdir -p "$root$(dirname "$f")"
  cp -L "$f" "$root$f"
}

# vmi_copy_bin ROOT BIN...: copy executables/shared objects plus their ldd-resolved libraries.
vmi_copy_bin() {
  local root="$1"; shift
  local b lib
  for b in "$@"; do
    [[ -e "$b" ]] || vmi_die "missing image input: $b (install the Debian package that provides it)"
    vmi_copy_file "$root" "$b"
    while read -r lib; do
      [[ -n "$lib" ]] && vmi_copy_file "$root" "$lib"
    done < <(ldd "$b" 2>/dev/null | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}')
  done
}

# vmi_copy_modules ROOT KROOT KVER MOD...: copy modules with their modules.dep dependencies.
vmi_copy_modules() {
  local root="$1" kroot="$2" kver="$3"; shift 3
  local m line ko compressed=0
  mkdir -p "$root/lib/modules/$kver"
  for m in "$@"; do
    while read -r line; do
      case "$line" in
        insmod\ *)
          ko="${line#insmod }"; ko="${ko%% *}"
          local rel="${ko#"$kroot"}"
          mkdir -p "$root$(dirname "$rel")"
          # Compressed modules (Debian's kernels after 6.1 ship .ko.xz)
          # go in plain: the image's busybox modprobe reads the file itself.
          case "$ko" in
            *.ko.xz) [[ -e "$root${rel%.xz}" ]] || xz -dc "$ko" >"$root${rel%.xz}"; compressed=1 ;;
            *) cp -n "$ko" "$root$rel" ;;
          esac
          ;;
        builtin\ *) ;;
      esac
    done < <(modprobe -d "$kroot" -S "$kver" --show-depends "$m" 2>/dev/null || vmi_die "kernel module $m not found in $kroot")
  done
  cp "$kroot/lib/modules/$kver"/modules.* "$root/lib/modules/$kver/"
  # modules.dep then names the plain files.
  if ((compressed)); then depmod -b "$root" "$kver" || vmi_die "depmod of the image's modules failed"; fi
}

# vmi_copy_libs ROOT BIN: the ldd-resolved libraries of BIN (not BIN itself),
# except the project's own (libmagnet-*, installed separately).
vmi_copy_libs() {
  local root="$1" b="$2" lib
  while read -r lib; do
    [[ -n "$lib" && "$lib" != */libmagnet-* ]] && vmi_copy_file "$root" "$lib"
  done < <(ldd "$b" 2>/dev/null | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}')
}

# vmi_busybox ROOT: busybox-static + applet symlinks.
vmi_busybox() {
  local root="$1" a
  [[ -x /bin/busybox ]] || vmi_die "missing image input: /bin/busybox (apt-get install busybox-static)"
  local lddout; lddout="$(ldd /bin/busybox 2>&1 || true)"
  [[ "$lddout" == *"not a dynamic"* ]] || vmi_die "/bin/busybox is not static (apt-get install busybox-static)"
  mkdir -p "$root/bin" "$root/sbin" "$root/usr/bin" "$root/usr/sbin"
  cp /bin/busybox "$root/bin/busybox"
  for a in $(/bin/busybox --list); do
    [[ -e "$root/bin/$a" ]] || ln -s busybox "$root/bin/$a"
  done
}

# vmi_pack ROOT OUT [compress]: newc cpio archive (gzip -1 unless compress=none).
vmi_pack() {
  local root="$1" out="$2" comp="${3:-gzip}"
  if [[ "$comp" == none ]]; then
    (cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) >"$out.tmp"
  else
    (cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet | gzip -1) >"$out.tmp"
  fi
  mv "$out.tmp" "$out"
}

# vmi_extract_vmlinux BZIMAGE OUT: the uncompressed kernel ELF inside a bzImage
# (its payload: the first xz stream), which QEMU boots through its PVH entry
# point (the ELF note XEN_ELFNOTE_PHYS32_ENTRY) without decompressing it in
# the guest: under TCG that decompression was 3-4 s of a guest's 11 s boot
# here (docs/lab.md).  Fails when the payload is not xz or the ELF has no
# PVH entry.
vmi_extract_vmlinux() {
  local bz="$1" out="$2" off
  off="$(LC_ALL=C grep -obUaP -m1 '\xfd7zXZ\x00' "$bz" | LC_ALL=C sed -n '1s/:.*//p')" || true
  [[ -n "$off" ]] || vmi_die "no xz payload in $bz (cannot extract vmlinux)"
  # xz stops after the stream; tail may then meet a closed pipe.
  (tail -c +"$((off + 1))" "$bz" 2>/dev/null || true) | xz -dc --single-stream >"$out.tmp" 2>/dev/null ||
    vmi_die "decompressing the kernel in $bz failed"
  [[ "$(readelf -n "$out.tmp" 2>/dev/null | grep -c "Unknown note type: (0x00000012)")" -gt 0 ]] ||
    vmi_die "the kernel in $bz has no PVH entry point (ELF note 0x12)"
  mv "$out.tmp" "$out"
}

# vmi_pkg_versions PKG...: "name=version" lines for the cache key.
vmi_pkg_versions() {
  dpkg-query -W -f='${Package}=${Version}\n' "$@" 2>/dev/null || true
}

# vmi_hash_files FILE...: sha256 over file contents (ignores missing).
vmi_hash_files() {
  local f
  for f in "$@"; do
    if [[ -f "$f" ]]; then sha256sum "$f"; else echo "missing $f"; fi
  done | sha256sum | cut -d' ' -f1
}
