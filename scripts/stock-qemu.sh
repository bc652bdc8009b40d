#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Debian's own QEMU 10.0 binary (bookworm-backports qemu-system-x86, the
# stock reference of the 10.0 stack), unpacked from the .deb that setup.sh
# keeps in the machine cache into build/stock-qemu-10.0/; the system's QEMU
# 7.2 is left alone.  build/stock-qemu-10.0/qemu-system-x86_64 is the binary.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${BH_CACHE:-/var/cache/balloon-hint}
out=$top/build/stock-qemu-10.0
deb=$(ls "$cache"/debs/qemu-system-x86_*.deb 2>/dev/null | head -n1)
[ -n "$deb" ] || { echo "stock-qemu.sh: no qemu-system-x86 .deb in $cache/debs: run scripts/setup.sh" >&2; exit 1; }
if [ -x "$out/qemu-system-x86_64" ] && [ "$(cat "$out/DEB" 2>/dev/null)" = "$(basename "$deb")" ]; then
	exit 0
fi
rm -rf "$out.new"
mkdir -p "$out.new"
dpkg -x "$deb" "$out.new/root"
ln -s root/usr/bin/qemu-system-x86_64 "$out.new/qemu-system-x86_64"
dpkg-deb -f "$deb" Version > "$out.new/VERSION"
basename "$deb" > "$out.new/DEB"
if ldd "$out.new/qemu-system-x86_64" | grep -q 'not found'; then
	ldd "$out.new/qemu-system-x86_64" | grep 'not found' >&2
	echo "stock-qemu.sh: libraries missing: run scripts/setup.sh" >&2
	exit 1
fi
rm -rf "$out"
mv "$out.new" "$out"
echo "[stock-qemu] $out/qemu-system-x86_64 ($(cat "$out/VERSION"))"
