#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build our module for a Debian 13 kernel inside the Debian 13 root
# (scripts/trixie-root.sh), with that kernel's own compiler (gcc-14) and
# kbuild, which Debian 12's cannot run.
#
#   root-module.sh KVER MODDIR [KBUILD ARGS...]
#
# MODDIR holds guest/ and include/ as the Makefile's image target stages
# them (build/mod-KVER).  They are copied into the root (only the files that
# changed, so kbuild recompiles only what they touch), built there against
# /lib/modules/KVER/build of the root, and the module is copied back to
# MODDIR/guest/virtio_balloon.ko.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
kver=${1:?usage: root-module.sh KVER MODDIR [KBUILD ARGS...]}
moddir=$(cd "${2:?usage: root-module.sh KVER MODDIR [KBUILD ARGS...]}" && pwd)
shift 2
tr=$top/scripts/trixie-root.sh
root=$("$tr" path)
[ -e "$root/lib/modules/$kver/build/Makefile" ] || {
	echo "root-module.sh: no headers of $kver in the Debian 13 root (run scripts/setup.sh)" >&2
	exit 1
}
# One copy per work tree and kernel: several clones share the root
key=$(printf '%s' "$top" | md5sum | cut -c1-8)
rel=/build/balloon-hint/$key/mod-$kver
dst=$root$rel
mkdir -p "$dst/guest" "$dst/include"
for d in guest include; do
	for f in "$moddir/$d"/*; do
		[ -f "$f" ] || continue
		case "$f" in *.o | *.ko | *.mod | *.mod.c | *.cmd | *.symvers | *.order) continue ;; esac
		cmp -s "$f" "$dst/$d/${f##*/}" || cp "$f" "$dst/$d/"
	done
done
rm -f "$dst/guest/virtio_balloon.ko"
# The compiler the kernel was built with, as its configuration names it:
# Debian's headers set it in their Makefile, a kernel built here (the debug
# kernel) does not, and the root has no plain "gcc"
cc=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\{0,1\}\([^ ]*\) .*/\1/p' \
	"$root/lib/modules/$kver/build/include/config/auto.conf")
[ -n "$cc" ] || {
	echo "root-module.sh: $kver's configuration names no compiler (CONFIG_CC_VERSION_TEXT)" >&2
	exit 1
}
"$tr" run make -C "/lib/modules/$kver/build" M="$rel/guest" CC="$cc" "$@" modules
cp "$dst/guest/virtio_balloon.ko" "$moddir/guest/virtio_balloon.ko"
