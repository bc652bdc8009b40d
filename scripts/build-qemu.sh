#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build the patched QEMU for one base: Debian's qemu source package of that
# base + host-qemu-patch/qemu-BASE/series, an x86_64-softmmu build with the
# configure options of Debian's own package (scripts/qemu-env.sh); or, for
# stock-BASE, the same source and options without the series.
#
#   scripts/build-qemu.sh [10.0|10.2|stock-10.2]      (default 10.0)
#
#   10.0:       Debian 13's 1:10.0.x (apt-get source from trixie)
#               -> build/qemu/qemu-system-x86_64
#   10.2:       Debian's 1:10.2.2+ds-1 (apt-get source from unstable, whose
#               deb-src index is fetched into the cache, apart from the
#               host's apt lists) -> build/qemu-10.2/qemu-system-x86_64
#   stock-10.2: the same source, no series
#               -> build/stock-qemu-10.2/qemu-system-x86_64
#
# Each version is pinned; when the pinned version has left the archive, the
# current one of the same Debian release is taken instead.  (The stock
# reference of 10.0 is Debian's own binary: scripts/stock-qemu.sh.)
#
# The binary finds the firmware of the Debian packages seabios and ipxe-qemu
# and of qemu-system-data without -L (--firmwarepath).
#
# The build is cached machine-wide in /var/cache/balloon-hint, keyed by the
# source version, the configure flags and the series with its patches; it is
# redone only when one of them changes.  Clones on one machine share the
# cache: fetching the source is serialized by a lock on the cache, a build of
# one key by a lock of that key, and every file lands in place by rename.
#
# Environment:
#   SANITIZE=1        --enable-asan --enable-ubsan build into build/qemu-asan/
#   QEMU_SRC_VERSION  Debian version to fetch (default: the pinned one)
#   BH_NEED_TREE=1    also leave a configured build tree
#
# A build also makes the qtest binaries scripts/run-qtests.sh runs and caches
# them under the same key (not for SANITIZE=1).
#   BH_CACHE          cache directory (default /var/cache/balloon-hint)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-${BASE:-10.0}}
say() { printf '[build-qemu %s] %s\n' "$base" "$*"; }
die() { printf '[build-qemu %s] ERROR: %s\n' "$base" "$*" >&2; exit 1; }

stock=0
case "$base" in
10.0)	pinned=${QEMU_SRC_VERSION:-1:10.0.13+ds-0+deb13u1}; suite=trixie; outname=qemu ;;
10.2)	pinned=${QEMU_SRC_VERSION:-1:10.2.2+ds-1}; suite=sid; outname=qemu-10.2 ;;
stock-10.2)
	pinned=${QEMU_SRC_VERSION:-1:10.2.2+ds-1}; suite=sid
	outname=stock-qemu-10.2; stock=1 ;;
*)	die "unknown base '$base' (10.0, 10.2, stock-10.2)" ;;
esac
srcbase=${base#stock-}
patchdir=$top/host-qemu-patch/qemu-$srcbase
series=$patchdir/series
[ "$stock" = 0 ] || series=/nonexistent
extra_cfg=()
if [ "${SANITIZE:-0}" = 1 ]; then
	outname=$outname-asan
	extra_cfg+=(--enable-asan --enable-ubsan)
fi
out=$top/build/$outname
srcroot=$top/build/src
cache=${BH_CACHE:-/var/cache/balloon-hint}
mkdir -p "$srcroot" "$out" "$cache/bin" "$cache/src"
# One build per output at a time in this tree.
exec 9> "$top/build/.build-$outname.lock"
flock 9

# shellcheck source=scripts/qemu-env.sh
. "$top/scripts/qemu-env.sh"

# 1. The Debian source package, unpacked once per base into the cache.
csrc=$cache/src/qemu-$srcbase
# apt options for a suite whose deb-src the host's apt does not list: its
# own sources list and lists directory in the cache.  Its Sources index is
# checked against Debian's archive keys like any other; only Valid-Until is
# waived (the mirror serves unstable's Release past it).
apt_opts=()
if [ "$suite" = sid ]; then
	adir=$cache/apt-sid
	mkdir -p "$adir/lists/partial"
	echo "deb-src http://deb.debian.org/debian sid main" > "$adir/sources.list"
	apt_opts=(-o "Dir::Etc::SourceList=$adir/sources.list"
		  -o Dir::Etc::SourceParts=/dev/null
		  -o "Dir::State::Lists=$adir/lists"
		  -o Acquire::Check-Valid-Until=false -o APT::Sandbox::User=root)
fi
fetch_source() {
	local tmp
	tmp=$(mktemp -d "$cache/src/.fetch.XXXXXX")
	if [ ${#apt_opts[@]} -gt 0 ]; then
		say "fetching the $suite source index (apt-get update, lists in $adir)"
		apt-get -q "${apt_opts[@]}" update > "$tmp/update.log" 2>&1 ||
			{ cat "$tmp/update.log" >&2; rm -rf "$tmp"; die "apt-get update of $suite failed"; }
	fi
	say "fetching Debian source qemu=$pinned (apt-get source)"
	if ! (cd "$tmp" && apt-get source -q "${apt_opts[@]}" --only-source "qemu=$pinned" >fetch.log 2>&1); then
		say "pinned $pinned not in the archive; fetching the current $suite version"
		(cd "$tmp" && apt-get source -q "${apt_opts[@]}" --only-source "qemu/$suite" >fetch.log 2>&1) ||
			{ cat "$tmp/fetch.log" >&2; rm -rf "$tmp"; die "apt-get source qemu/$suite failed"; }
	fi
	local d
	d=$(find "$tmp" -maxdepth 1 -mindepth 1 -type d -name 'qemu-*' | head -n1)
	[ -n "$d" ] || die "no unpacked source in $tmp"
	mkdir -p "$tmp/tree"
	mv "$d" "$tmp/tree/qemu"
	dpkg-parsechangelog -l "$tmp/tree/qemu/debian/changelog" -S Version > "$tmp/tree/VERSION"
	rm -rf "$csrc"
	echo "$pinned" > "$tmp/tree/.tried"
	mv "$tmp/tree" "$csrc"
	rm -rf "$tmp"
}
(
	flock 8
	if [ ! -f "$csrc/VERSION" ]; then
		fetch_source
	elif [ "$(cat "$csrc/VERSION")" != "$pinned" ] &&
	     [ "$(cat "$csrc/.tried" 2>/dev/null)" != "$pinned" ]; then
		# Another version is cached: try the pinned one once more.
		fetch_source
	fi
) 8> "$cache/.src.lock"
version=$(cat "$csrc/VERSION")
say "source version $version"
qemu_cfg "$srcbase" "$csrc/qemu"
cfg+=("${extra_cfg[@]}")

key=$( { echo "$version"; echo "${cfg[*]}";
	 if [ -f "$series" ]; then
		 cat "$series"
		 { grep -vE '^\s*(#|$)' "$series" || true; } | while read -r p; do cat "$patchdir/$p"; done
	 fi; } | sha256sum | cut -c1-16)

pkgdir=$srcroot/qemu-$base
bdir=$pkgdir/build-$outname

install_from() { # dir with qemu-system-x86_64 and VERSION
	install -m 0755 "$1/qemu-system-x86_64" "$out/.qemu-system-x86_64.$$"
	mv -f "$out/.qemu-system-x86_64.$$" "$out/qemu-system-x86_64"
	cp "$1/VERSION" "$out/.VERSION.$$" && mv -f "$out/.VERSION.$$" "$out/VERSION"
	echo "$key" > "$out/.key.$$" && mv -f "$out/.key.$$" "$out/.key"
}

tree_ok=1
if [ "${BH_NEED_TREE:-0}" = 1 ] && [ "$(cat "$bdir/.key" 2>/dev/null)" != "$key" ]; then
	tree_ok=0
fi
if [ "$tree_ok" = 1 ] && [ -x "$out/qemu-system-x86_64" ] && [ "$(cat "$out/.key" 2>/dev/null)" = "$key" ]; then
	say "up to date ($out/qemu-system-x86_64, key $key)"
	exit 0
fi

# One build of a key at a time on the machine: a second clone waits here and
# then takes the binary from the cache.
exec 7> "$cache/bin/.$key.lock"
flock 7
if [ "$tree_ok" = 1 ] && [ -x "$cache/bin/$key/qemu-system-x86_64" ]; then
	install_from "$cache/bin/$key"
	say "from cache: $out/qemu-system-x86_64 ($(cat "$out/VERSION"), key $key)"
	exit 0
fi

# 2. A fresh copy with the series applied in order.
rm -rf "$pkgdir.new"
cp -a "$csrc/qemu" "$pkgdir.new"
if [ -f "$series" ]; then
	n=0
	while read -r p; do
		case "$p" in ''|'#'*) continue ;; esac
		n=$((n + 1))
		say "applying [$n] $p"
		patch -d "$pkgdir.new" -p1 --forward --batch --quiet < "$patchdir/$p" ||
			die "patch $p does not apply to $version"
	done < "$series"
	say "applied $n patch(es)"
fi
rm -rf "$pkgdir"
mv "$pkgdir.new" "$pkgdir"

# 3. Configure and build (ccache if present), at a lower priority.
mkdir -p "$bdir"
say "configure ${cfg[*]}"
(cd "$bdir" && nice -n 10 ../configure --cc="$qemu_cc" --host-cc=gcc "${cfg[@]}" > configure.log 2>&1) ||
	{ tail -30 "$bdir/configure.log"; die "configure failed"; }
qemu_venv_fixup "$bdir"
# QEMU's qtests (scripts/run-qtests.sh) come from the same tree: built here
# with the binary, they never need a second build of the tree.
qtests=()
[ "${SANITIZE:-0}" = 1 ] || qtests=("${QTEST_TARGETS[@]}")
say "ninja (this takes a while on 2 cores)"
nice -n 10 ninja -C "$bdir" qemu-system-x86_64 "${qtests[@]}" 2>&1 |
	awk '/^\[/ { if (++n % 200 == 0) { print "[build-qemu] " $1; fflush() } next } { print }'
[ "${PIPESTATUS[0]}" = 0 ] || die "build failed"
echo "$key" > "$bdir/.key"

# 4. Into the cache (a directory renamed into place), then into build/.
tmp=$(mktemp -d "$cache/bin/.new.XXXXXX")
cp "$bdir/qemu-system-x86_64" "$tmp/"
echo "$version" > "$tmp/VERSION"
chmod 0755 "$tmp"
if ! mv -T "$tmp" "$cache/bin/$key" 2>/dev/null; then
	rm -rf "$cache/bin/$key.old"
	mv -T "$cache/bin/$key" "$cache/bin/$key.old" 2>/dev/null || true
	mv -T "$tmp" "$cache/bin/$key"
	rm -rf "$cache/bin/$key.old"
fi
if [ ${#qtests[@]} -gt 0 ] && [ ! -d "$cache/qtests/$key" ]; then
	mkdir -p "$cache/qtests"
	tmp=$(mktemp -d "$cache/qtests/.tmp-$key-XXXXXX")
	for t in "${qtests[@]}"; do cp "$bdir/$t" "$tmp/"; done
	chmod 0755 "$tmp"
	mv -T "$tmp" "$cache/qtests/$key" 2>/dev/null || rm -rf "$tmp"
fi
install_from "$cache/bin/$key"
say "built $out/qemu-system-x86_64 ($version, key $key)"
