#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The test guests' kernel as QEMU can start it directly: the uncompressed
# ELF of a guest kernel's bzImage, when the kernel has a PVH entry point
# (Xen's PHYS32_ENTRY ELF note, CONFIG_PVH: Debian's amd64 kernels have
# one, the debug kernel's configuration does not).  QEMU then jumps to
# that entry (-kernel with an ELF), which skips the bzImage's real-mode
# setup and decompression: about 0.9 s of every boot under TCG.  The
# kernel is the same one, byte for byte; tests/hb/env.py boot_image()
# picks this file when it exists and is newer than the bzImage.
# Usage: mk-boot-image.sh KVER OUT
set -euo pipefail
kver=${1:?usage: mk-boot-image.sh KVER OUT}
out=${2:?usage: mk-boot-image.sh KVER OUT}
src=${BH_CACHE:-/var/cache/balloon-hint}/kernels/$kver/boot/vmlinuz-$kver
# the kernel's own extractor (setup unpacks linux-source-6.1's scripts/)
extract=/usr/src/linux-source-6.1/scripts/extract-vmlinux
say() { printf '[boot image] %s\n' "$*"; }

[ -f "$src" ] || { echo "mk-boot-image.sh: no $src" >&2; exit 1; }
if [ -f "$out" ] && [ "$out" -nt "$src" ]; then
	exit 0
fi
[ -x "$extract" ] || { echo "mk-boot-image.sh: no $extract (scripts/setup.sh)" >&2; exit 1; }
rm -f "$out"
"$extract" "$src" > "$out.tmp"
# 0x12: XEN_ELFNOTE_PHYS32_ENTRY, the PVH entry point
if ! readelf -n "$out.tmp" | grep -q 'Unknown note type: (0x00000012)'; then
	rm -f "$out.tmp"
	say "$kver has no PVH entry: its guests boot the bzImage"
	exit 0
fi
mv "$out.tmp" "$out"
say "wrote $out ($(du -m "$out" | cut -f1) MiB, PVH entry)"
