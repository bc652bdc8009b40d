#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build the patched QEMU: Debian 12's qemu source package + host-qemu-patch/qemu-7.2/series,
# a minimal x86_64-softmmu build, placed at build/qemu/qemu-system-x86_64.
#
# The build is cached, keyed by the hash of the series and its patches (and of
# the configure flags); it is redone only when one of them changes.
#
# Environment:
#   SANITIZE=1   build with --enable-sanitizers into build/qemu-asan/ instead
#   QEMU_SRC_VERSION  Debian version to fetch (default: the pinned one)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
say() { printf '[build-qemu] %s\n' "$*"; }
die() { printf '[build-qemu] ERROR: %s\n' "$*" >&2; exit 1; }

PINNED=${QEMU_SRC_VERSION:-1:7.2+dfsg-7+deb12u18}
outname=qemu
extra_cfg=()
if [ "${SANITIZE:-0}" = 1 ]; then
	outname=qemu-asan
	extra_cfg+=(--enable-sanitizers)
fi
out=$top/build/$outname
srcroot=$top/build/src
# Machine-wide cache shared by every clone: the fetched source, ccache, and
# finished binaries keyed by the series hash.
cache=${BH_CACHE:-/var/cache/balloon-hint}
mkdir -p "$srcroot" "$out" "$cache"
# One build at a time per tree.
exec 9> "$top/build/.build-qemu.lock"
flock 9

cfg=(--target-list=x86_64-softmmu --disable-docs --disable-tools --disable-gtk
     --disable-sdl --disable-vnc --disable-opengl --disable-spice --disable-curses
     --disable-werror --disable-user --disable-guest-agent --disable-xen
     --disable-capstone --disable-slirp --enable-trace-backends=log
    )
cfg+=("${extra_cfg[@]}")

series=$top/host-qemu-patch/qemu-7.2/series
key=$( { echo "$PINNED"; echo "${cfg[*]}";
	 if [ -f "$series" ]; then
		 cat "$series"
		 { grep -vE "^\s*(#|$)" "$series" || true; } | while read -r p; do cat "$top/host-qemu-patch/qemu-7.2/$p"; done
	 fi; } | sha256sum | cut -c1-16)

# 1. Fetch and unpack the Debian source package (once per version, cached).
upver=${PINNED#*:}; upver=${upver%%-*}       # 7.2+dfsg
pkgdir=$srcroot/qemu-${upver%%+*}              # qemu-7.2
tarcache=$srcroot/pristine
if [ ! -d "$tarcache/qemu-${upver%%+*}" ] && [ -d "$cache/pristine/qemu-${upver%%+*}" ]; then
	say "source from cache $cache/pristine"
	mkdir -p "$tarcache"
	cp -a "$cache/pristine/." "$tarcache/"
fi
if [ ! -d "$tarcache/qemu-${upver%%+*}" ]; then
	say "fetching Debian source qemu=$PINNED (apt-get source)"
	rm -rf "$tarcache"; mkdir -p "$tarcache"
	if ! (cd "$tarcache" && apt-get source -q --only-source "qemu=$PINNED" >fetch.log 2>&1); then
		say "pinned $PINNED not in the archive; fetching the current bookworm version"
		(cd "$tarcache" && apt-get source -q --only-source qemu >fetch.log 2>&1) ||
			die "apt-get source qemu failed; see $tarcache/fetch.log"
	fi
	d=$(find "$tarcache" -maxdepth 1 -mindepth 1 -type d -name 'qemu-*' | head -n1)
	[ -n "$d" ] || die "no unpacked source in $tarcache"
	[ "$d" = "$tarcache/qemu-${upver%%+*}" ] || mv "$d" "$tarcache/qemu-${upver%%+*}"
	dpkg-parsechangelog -l "$tarcache/qemu-${upver%%+*}/debian/changelog" -S Version > "$tarcache/VERSION"
	rm -rf "$cache/pristine"; mkdir -p "$cache/pristine"
	cp -a "$tarcache/qemu-${upver%%+*}" "$tarcache/VERSION" "$cache/pristine/"
fi
say "source version $(cat "$tarcache/VERSION")"
if [ ! -d "$cache/pristine/qemu-${upver%%+*}" ]; then
	mkdir -p "$cache/pristine"
	cp -a "$tarcache/qemu-${upver%%+*}" "$tarcache/VERSION" "$cache/pristine/"
fi

# BH_NEED_TREE=1: also leave a configured build tree (for QEMU's qtests),
# even when the binary itself is up to date or cached.
tree_ok=1
if [ "${BH_NEED_TREE:-0}" = 1 ] &&
   [ "$(cat "$pkgdir/build-$outname/.key" 2>/dev/null)" != "$key" ]; then
	tree_ok=0
fi
if [ "$tree_ok" = 1 ] && [ -x "$out/qemu-system-x86_64" ] && [ "$(cat "$out/.key" 2>/dev/null)" = "$key" ]; then
	say "up to date ($out/qemu-system-x86_64, key $key)"
	exit 0
fi
if [ "$tree_ok" = 1 ] && [ -x "$cache/bin/$key/qemu-system-x86_64" ]; then
	install -m 0755 "$cache/bin/$key/qemu-system-x86_64" "$out/qemu-system-x86_64"
	cp "$cache/bin/$key/VERSION" "$out/VERSION"
	echo "$key" > "$out/.key"
	say "from cache: $out/qemu-system-x86_64 ($(cat "$out/VERSION"), key $key)"
	exit 0
fi

# 2. A fresh copy with the series applied in order.
rm -rf "$pkgdir"
cp -a "$tarcache/qemu-${upver%%+*}" "$pkgdir"
if [ -f "$series" ]; then
	n=0
	while read -r p; do
		case "$p" in ''|'#'*) continue ;; esac
		n=$((n + 1))
		say "applying [$n] $p"
		patch -d "$pkgdir" -p1 --forward --batch --quiet < "$top/host-qemu-patch/qemu-7.2/$p" ||
			die "patch $p does not apply to $(cat "$tarcache/VERSION")"
	done < "$series"
	say "applied $n patch(es)"
fi

# 3. Configure and build (ccache if present).
bdir=$pkgdir/build-$outname
mkdir -p "$bdir"
cc=gcc
command -v ccache >/dev/null && cc="ccache gcc"
export CCACHE_DIR=$cache/ccache
say "configure ${cfg[*]}"
(cd "$bdir" && ../configure --cc="$cc" --host-cc=gcc "${cfg[@]}" > configure.log 2>&1) ||
	{ tail -30 "$bdir/configure.log"; die "configure failed"; }
say "ninja (this takes a few minutes on 2 cores)"
ninja -C "$bdir" qemu-system-x86_64 2>&1 | awk '/^\[/ { if (++n % 200 == 0) { print "[build-qemu] " $1; fflush() } next } { print }' 
[ "${PIPESTATUS[0]}" = 0 ] || die "build failed"

install -m 0755 "$bdir/qemu-system-x86_64" "$out/qemu-system-x86_64"
echo "$key" > "$bdir/.key"
cp "$tarcache/VERSION" "$out/VERSION"
echo "$key" > "$out/.key"
mkdir -p "$cache/bin/$key"
cp "$out/qemu-system-x86_64" "$out/VERSION" "$cache/bin/$key/"
say "built $out/qemu-system-x86_64 ($(cat "$out/VERSION"), key $key)"
