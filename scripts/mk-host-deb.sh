#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build the Debian package of our QEMU, balloon-hint-qemu, from the build
# of `make qemu` (build/qemu/qemu-system-x86_64):
# build/deb/balloon-hint-qemu_<version>_amd64.deb.
#
# It installs beside Debian's qemu-system-x86, never over it: the binary is
# /usr/lib/balloon-hint/qemu-system-x86_64, with the link
# /usr/bin/balloon-hint-qemu-system-x86_64 for the command line; a libvirt
# domain selects it with <emulator> (Documentation/libvirt.md).  No other
# file of the package has a path that a Debian package uses.
#
# Version: the Debian version of the QEMU source it was built from, plus
# "+bh1" (build/qemu/VERSION); the series key of the build is in the
# description and in /usr/share/doc/balloon-hint-qemu/SERIES.
# Depends: the shared libraries the binary links, as dpkg-shlibdeps finds
# them, and the packages of the firmware folders it was configured with
# (--firmwarepath of scripts/qemu-env.sh): qemu-system-data
# (/usr/share/qemu), seabios (/usr/share/seabios) and ipxe-qemu
# (/usr/lib/ipxe/qemu).  Building needs only dpkg-dev
# (scripts/setup-deb.sh) and the QEMU build.
#
#   scripts/mk-host-deb.sh                    (make host-deb)
#   BH_DEB_DIR=dir scripts/mk-host-deb.sh     output into dir
#   BH_HOST_QEMU=dir scripts/mk-host-deb.sh   the build in dir (default build/qemu)
set -euo pipefail

say() { printf '[host-deb] %s\n' "$*"; }
die() { printf 'mk-host-deb.sh: %s\n' "$*" >&2; exit 1; }

top=$(cd "$(dirname "$0")/.." && pwd)
out=${BH_DEB_DIR:-$top/build/deb}
qdir=${BH_HOST_QEMU:-$top/build/qemu}
pkg=balloon-hint-qemu
bin=$qdir/qemu-system-x86_64
[ -x "$bin" ] || die "no $bin: run make qemu"
[ -s "$qdir/VERSION" ] || die "no $qdir/VERSION: run make qemu"
[ -s "$qdir/.key" ] || die "no $qdir/.key: run make qemu"
for t in dpkg-deb dpkg-shlibdeps; do
	command -v "$t" >/dev/null || die "no $t: run scripts/setup-deb.sh"
done
src_copyright=${BH_CACHE:-/var/cache/balloon-hint}/src/qemu-10.0/qemu/debian/copyright
[ -s "$src_copyright" ] || die "no $src_copyright: run make qemu"
qver=$(cat "$qdir/VERSION")
key=$(cat "$qdir/.key")
ver=$qver+bh1
arch=$(dpkg --print-architecture)
[ "$arch" = amd64 ] || die "amd64 only (this is $arch)"

# The firmware folders the binary was built to search, and the Debian
# package of each: every folder must belong to one.
. "$top/scripts/qemu-env.sh"
fw_deps=()
IFS=: read -r -a fw_dirs <<< "$QEMU_FIRMWAREPATH"
for d in "${fw_dirs[@]}"; do
	case $d in
	/usr/share/qemu)	fw_deps+=(qemu-system-data) ;;
	/usr/share/seabios)	fw_deps+=(seabios) ;;
	/usr/lib/ipxe/qemu)	fw_deps+=(ipxe-qemu) ;;
	*)	die "no Debian package known for the firmware folder $d" ;;
	esac
done

work=$out/work-host
root=$work/root
deb=${pkg}_${ver#*:}_$arch.deb
say "staging $pkg $ver (series key $key) in $root"
rm -rf "$work"
mkdir -p "$root/DEBIAN" "$root/usr/lib/balloon-hint" "$root/usr/bin" \
	"$root/usr/share/doc/$pkg" "$work/debian" "$out"
install -m 0755 "$bin" "$root/usr/lib/balloon-hint/qemu-system-x86_64"
ln -s ../lib/balloon-hint/qemu-system-x86_64 \
	"$root/usr/bin/balloon-hint-qemu-system-x86_64"
# The copyright file of the Debian source package it was built from.
install -m 0644 "$src_copyright" "$root/usr/share/doc/$pkg/copyright"
echo "$key" > "$root/usr/share/doc/$pkg/SERIES"

export GIT_OPTIONAL_LOCKS=0
date=$(git -C "$top" log -1 --format=%cD 2>/dev/null || true)
[ -n "$date" ] || date=$(date -R)
maint="balloon-hint project <balloon-hint@example.org>"
cat > "$work/changelog" <<EOF
$pkg ($ver) unstable; urgency=medium

  * QEMU $qver with the balloon-hint series (series key $key).

 -- $maint  $date
EOF
gzip -9n < "$work/changelog" > "$root/usr/share/doc/$pkg/changelog.Debian.gz"

# dpkg-shlibdeps wants a debian/control naming the package.
printf 'Source: %s\n\nPackage: %s\nArchitecture: %s\n' "$pkg" "$pkg" "$arch" \
	> "$work/debian/control"
shlibs=$(cd "$work" && dpkg-shlibdeps -O -e"$root/usr/lib/balloon-hint/qemu-system-x86_64" 2>"$work/shlibdeps.log" |
	sed -n 's/^shlibs:Depends=//p') ||
	{ cat "$work/shlibdeps.log" >&2; die "dpkg-shlibdeps failed"; }
[ -n "$shlibs" ] || die "dpkg-shlibdeps found no library (log: $work/shlibdeps.log)"
fw=$(IFS=,; echo "${fw_deps[*]}")
depends="$shlibs, ${fw//,/, }"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)

cat > "$root/DEBIAN/control" <<EOF
Package: $pkg
Version: $ver
Architecture: $arch
Maintainer: $maint
Installed-Size: $size
Depends: $depends
Section: otherosfs
Priority: optional
Homepage: https://www.qemu.org/
Description: QEMU x86_64 system emulator with balloon-hint free page hinting
 QEMU from Debian's source package $qver,
 with the balloon-hint series (series key $key):
 live migration skips the free memory a guest's virtio-balloon driver
 hints, without losing a write.  Configured as Debian's qemu-system-x86
 is, with the same devices, machine types and network backends, built in
 rather than as modules.
 .
 It installs beside Debian's QEMU, never over it:
 /usr/lib/balloon-hint/qemu-system-x86_64, with the link
 /usr/bin/balloon-hint-qemu-system-x86_64.  A libvirt domain selects it
 with <emulator>/usr/lib/balloon-hint/qemu-system-x86_64</emulator>.  Its
 firmware comes from Debian's qemu-system-data, seabios and ipxe-qemu.
EOF

say "dpkg-deb --build $deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out/$deb" >/dev/null
rm -rf "$work"
say "$out/$deb"
