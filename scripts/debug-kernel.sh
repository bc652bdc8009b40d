#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The debug guest kernel: Debian's linux-source-7.3 (trixie-backports),
# configured as `make defconfig` + kernel/configs/kvm_guest.config +
# scripts/debug-kernel.config (KASAN, lockdep, DEBUG_VM, the fault-inject
# framework, memory hot-remove, CMA, page reporting, lkdtm), built in the
# Debian 13 root with its gcc-14 and ccache ($BH_CACHE/ccache-debug-kernel)
# at nice 19, and laid out like the Debian guest kernels setup unpacks:
# $BH_CACHE/kernels/KVER/{boot/vmlinuz-KVER,lib/modules/KVER}, KVER being
# 7.3.N-hbdebug, after its CONFIG_LOCALVERSION (scripts/guest-kver.sh
# 7.3-hbdebug).  Its build tree stays in the root (/lib/modules/KVER/build
# there), where scripts/root-module.sh builds our module against it.
#
# The build is cached by a key of the source package's version and the
# fragment: a second run with both unchanged does nothing.  Its time is
# printed and kept in $BH_CACHE/debug-kernel/KEY/build-seconds.
#   debug-kernel.sh          build (or reuse) the debug kernel
#   debug-kernel.sh config   only configure it, and check the fragment
#   debug-kernel.sh kver     print its KVER (empty when not built)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${BH_CACHE:-/var/cache/balloon-hint}
tr=$top/scripts/trixie-root.sh
frag=$top/scripts/debug-kernel.config
say() { printf '[debug-kernel] %s\n' "$*"; }

if [ "${1:-}" = kver ]; then
	ls -d "$cache"/kernels/*-hbdebug*/.complete 2>/dev/null | sort -V |
		tail -n1 | sed 's|.*/kernels/\([^/]*\)/.complete|\1|'
	exit 0
fi

"$tr" make
"$tr" install gcc-14 make flex bison bc libelf-dev libssl-dev ccache \
	xz-utils cpio kmod python3-minimal dwarves linux-source-7.3/trixie-backports
root=$("$tr" path)
ver=$("$tr" run dpkg-query -W -f='${Version}' linux-source-7.3)
key=$( { echo "$ver"; cat "$frag"; echo recipe 1; } | md5sum | cut -c1-16)
out=$cache/debug-kernel/$key
if [ "${1:-}" != config ] && [ -e "$out/kver" ] && [ -e "$cache/kernels/$(cat "$out/kver")/.complete" ]; then
	say "cached: $(cat "$out/kver") (key $key, linux-source-7.3 $ver, built in $(cat "$out/build-seconds") s)"
	exit 0
fi

# The source, unpacked in the root once per source version
src=/build/debug-kernel/src-$ver
if [ ! -e "$root$src/.unpacked" ]; then
	say "unpacking linux-source-7.3 $ver in the root"
	rm -rf "$root$src"
	mkdir -p "$root$src"
	tar -C "$root$src" --strip-components=1 -xf "$root/usr/src/linux-source-7.3.tar.xz"
	touch "$root$src/.unpacked"
fi
obj=/build/debug-kernel/$key/obj
mkdir -p "$root$obj"
cp "$frag" "$root$obj/../debug-kernel.config"
kmake=(make -C "$src" O="$obj" CC="ccache gcc-14" HOSTCC=gcc-14 -j"$(nproc)")
export TRIXIE_ROOT_BINDS="$cache/ccache-debug-kernel:/var/cache/ccache"

say "configuring (defconfig + kvm_guest.config + scripts/debug-kernel.config)"
"$tr" run env CCACHE_DIR=/var/cache/ccache "${kmake[@]}" defconfig >/dev/null
"$tr" run "$src/scripts/kconfig/merge_config.sh" \
	-m -O "$obj" "$obj/.config" "$src/kernel/configs/kvm_guest.config" \
	"$obj/../debug-kernel.config" >/dev/null
"$tr" run env CCACHE_DIR=/var/cache/ccache "${kmake[@]}" olddefconfig >/dev/null
# Every option the fragment asks for must have come out as asked.
bad=$(grep -E '^(CONFIG_[A-Z0-9_]+=.*|# CONFIG_[A-Z0-9_]+ is not set)$' "$frag" |
	while read -r line; do
		grep -qxF -- "$line" "$root$obj/.config" || echo "$line"
	done)
if [ -n "$bad" ]; then
	echo "debug-kernel.sh: options of scripts/debug-kernel.config not taken:" >&2
	echo "$bad" >&2
	exit 1
fi
say "configured: $root$obj/.config"
[ "${1:-}" != config ] || exit 0

say "building (KASAN, lockdep: long the first time; ccache afterwards)"
t0=$SECONDS
# about 2,400 objects: a line every 250 of them
"$tr" run env CCACHE_DIR=/var/cache/ccache nice -n 19 "${kmake[@]}" bzImage modules |
	awk '/^  CC / && ++n % 250 == 0 {
		printf "[debug-kernel] %d files compiled\n", n; fflush() }'
secs=$((SECONDS - t0))
kver=$("$tr" run make -s -C "$src" O="$obj" kernelrelease)
say "built $kver in $secs s"

inst=/build/debug-kernel/$key/inst
rm -rf "$root$inst"
"$tr" run "${kmake[@]}" INSTALL_MOD_PATH="$inst" modules_install >/dev/null
# our module is built against the build tree in the root; the link is
# relative, so that it resolves from the host too (scripts/root-module.sh)
mkdir -p "$root/lib/modules/$kver"
ln -sfn "$(realpath -m --relative-to="$(realpath "$root/lib/modules/$kver")" \
	"$root$obj")" "$root/lib/modules/$kver/build"

tmp=$(mktemp -d "$cache/kernels/.dbg.XXXXXX")
mkdir -p "$tmp/boot" "$tmp/lib/modules"
cp "$root$obj/arch/x86/boot/bzImage" "$tmp/boot/vmlinuz-$kver"
cp -a "$root$inst/lib/modules/$kver" "$tmp/lib/modules/"
rm -f "$tmp/lib/modules/$kver/build" "$tmp/lib/modules/$kver/source"
cp "$root$obj/.config" "$tmp/lib/modules/$kver/config"
touch "$tmp/.complete"
rm -rf "$cache/kernels/$kver"
mv "$tmp" "$cache/kernels/$kver"
mkdir -p "$out"
echo "$secs" > "$out/build-seconds"
cp "$root$obj/.config" "$out/config"
echo "$kver" > "$out/kver"
say "ready: $cache/kernels/$kver (key $key, built in $secs s)"
