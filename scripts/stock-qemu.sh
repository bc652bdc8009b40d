#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Debian's own QEMU 10.0 binary (bookworm-backports qemu-system-x86, the
# stock reference), unpacked with the packages that hold its modules from
# the .debs that setup.sh keeps in the machine cache into
# build/stock-qemu-10.0/, never installed.  build/stock-qemu-10.0/
# qemu-system-x86_64 is the binary; its modules are in
# build/stock-qemu-10.0/modules (QEMU_MODULE_DIR).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${BH_CACHE:-/var/cache/balloon-hint}
out=$top/build/stock-qemu-10.0
pkgs=(qemu-system-x86 qemu-system-common qemu-system-gui
      qemu-system-modules-spice qemu-system-modules-opengl qemu-block-extra)
debs=()
for p in "${pkgs[@]}"; do
	d=$(ls "$cache/debs/${p}_"*.deb 2>/dev/null | head -n1)
	[ -n "$d" ] || { echo "stock-qemu.sh: no $p .deb in $cache/debs: run scripts/setup.sh" >&2; exit 1; }
	debs+=("$d")
done
stamp=$(for d in "${debs[@]}"; do basename "$d"; done)
if [ -x "$out/qemu-system-x86_64" ] && [ "$(cat "$out/DEB" 2>/dev/null)" = "$stamp" ]; then
	exit 0
fi
rm -rf "$out.new"
mkdir -p "$out.new"
for d in "${debs[@]}"; do dpkg -x "$d" "$out.new/root"; done
ln -s root/usr/bin/qemu-system-x86_64 "$out.new/qemu-system-x86_64"
ln -s root/usr/lib/x86_64-linux-gnu/qemu "$out.new/modules"
dpkg-deb -f "${debs[0]}" Version > "$out.new/VERSION"
printf '%s\n' "$stamp" > "$out.new/DEB"
if ldd "$out.new/qemu-system-x86_64" | grep -q 'not found'; then
	ldd "$out.new/qemu-system-x86_64" | grep 'not found' >&2
	echo "stock-qemu.sh: libraries missing: run scripts/setup.sh" >&2
	exit 1
fi
rm -rf "$out"
mv "$out.new" "$out"
echo "[stock-qemu] $out/qemu-system-x86_64 ($(cat "$out/VERSION"))"
