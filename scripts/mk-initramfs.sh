#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build the test guest's initramfs: busybox-static, the guest kernel's virtio
# modules, both balloon drivers (in-tree and ours, chosen at boot with
# hb.balloon=), the in-guest tools.  Usage: mk-initramfs.sh OUT.cpio.gz [OURS.ko]
# The kernel is $KVER (default: scripts/guest-kver.sh); modules it has built
# in (6.12: virtio, virtio_pci) are not needed and not looked for.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: mk-initramfs.sh OUT.cpio.gz [ours.ko]}
ours=${2:-$top/guest/virtio_balloon.ko}
kver=${KVER:-$("$top/scripts/guest-kver.sh")}
# The kernel's modules, as setup unpacked its linux-image .deb
kroot=${BH_CACHE:-/var/cache/balloon-hint}/kernels/$kver/lib/modules/$kver
mdir=$kroot/kernel
say() { printf '[initramfs] %s\n' "$*"; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,sbin,dev,proc,sys,etc,hb,lib/hb/mod,lib/hb/intree,lib/hb/ours}
cp /bin/busybox "$stage/bin/busybox"

# Path of module $1 of $kver as a file, empty when it is built in or absent
modfile() {
	find "$mdir" \( -name "$1.ko" -o -name "$1.ko.xz" -o -name "$1.ko.zst" \) |
		head -n1
}
builtin() { # module-name: is it built into the kernel?
	grep -qE "/$1\.ko$" "$kroot/modules.builtin" 2>/dev/null
}
getko() { # module-name dest-dir
	local f
	f=$(modfile "$1")
	[ -n "$f" ] || { echo "module $1 not found for $kver" >&2; exit 1; }
	case "$f" in
	*.xz) xz -dc "$f" > "$2/$1.ko" ;;
	*.zst) zstd -qdc "$f" > "$2/$1.ko" ;;
	*) cp "$f" "$2/$1.ko" ;;
	esac
}
# Load order: every module after its dependencies (modinfo -F depends).
# Built-in ones are skipped; a module neither built in nor found is an error.
order=()
add_with_deps() {
	local m=$1 d f
	case " ${order[*]} " in *" $m "*) return ;; esac
	f=$(modfile "$m")
	if [ -z "$f" ]; then
		builtin "$m" && return
		echo "module $m neither built into $kver nor found" >&2
		exit 1
	fi
	for d in $(modinfo -F depends "$f" | tr ',' ' '); do
		add_with_deps "$d"
	done
	order+=("$m")
}
for m in virtio_pci virtio_balloon; do
	add_with_deps $m
done
: > "$stage/lib/hb/mod/order"
for m in "${order[@]}"; do
	[ "$m" = virtio_balloon ] && continue
	getko "$m" "$stage/lib/hb/mod"
	echo "$m" >> "$stage/lib/hb/mod/order"
done
say "virtio modules: $(tr '\n' ' ' < "$stage/lib/hb/mod/order")(others built in)"
getko virtio_balloon "$stage/lib/hb/intree"
if [ -f "$ours" ]; then
	v=$(modinfo -F vermagic "$ours" | cut -d' ' -f1)
	[ "$v" = "$kver" ] || { echo "$ours is built for $v, not $kver" >&2; exit 1; }
	cp "$ours" "$stage/lib/hb/ours/virtio_balloon.ko"
	say "our driver: $ours"
else
	say "our driver not built ($ours): hb.balloon=ours unavailable"
fi

gcc -static -O2 -Wall -Wextra -o "$stage/hb/hbwork" "$top/tests/guest/hbwork.c"
install -m 0755 "$top/tests/guest/init" "$stage/init"
mkdir -p "$(dirname "$out")"
(cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -1) > "$out.tmp"
mv "$out.tmp" "$out"
say "wrote $out ($(du -k "$out" | cut -f1) KiB, kernel $kver)"
