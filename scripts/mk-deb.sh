#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build the DKMS package of the guest driver, balloon-hint-dkms, with
# dh-dkms: build/deb/balloon-hint-dkms_<version>_all.deb.
#
# The version is PACKAGE_VERSION of guest/dkms.conf (the driver's
# VB_VERSION in guest/vb.h must match it).  The build happens in a scratch
# copy, build/deb/work/balloon-hint-dkms-<version>/: guest/debian/ as
# debian/, guest/dkms.conf on top, the driver's sources in guest/ and
# include/, and a debian/changelog written from the version; the source
# tree is never written to.  lintian, when installed, checks the result.
#
# The package depends on dkms and on kernel headers (linux-headers-amd64 |
# linux-headers); its description lists the kernels scan mode is validated
# on, each pattern of guest/scan-validated-kernels with its comment (6.1.*
# and 6.12.* when the file is absent).  Building it needs only
# debhelper, dh-dkms and dpkg-dev (scripts/setup-deb.sh): no kernel,
# headers or QEMU.
#
#   scripts/mk-deb.sh            (make deb)
#   BH_DEB_DIR=dir scripts/mk-deb.sh   output into dir instead of build/deb
set -euo pipefail

say() { printf '[deb] %s\n' "$*"; }
die() { printf 'mk-deb.sh: %s\n' "$*" >&2; exit 1; }

top=$(cd "$(dirname "$0")/.." && pwd)
out=${BH_DEB_DIR:-$top/build/deb}
pkg=$(sed -n 's/^Source: *//p' "$top/guest/debian/control")
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$top/guest/dkms.conf")
vb_ver=$(sed -n 's/^#define[[:space:]]\+VB_VERSION[[:space:]]\+"\(.*\)"/\1/p' \
	"$top/guest/vb.h")
[ -n "$pkg" ] || die "no Source: in guest/debian/control"
[ -n "$ver" ] || die "no PACKAGE_VERSION in guest/dkms.conf"
[ "$ver" = "$vb_ver" ] ||
	die "PACKAGE_VERSION of guest/dkms.conf ($ver) is not" \
	    "VB_VERSION of guest/vb.h ($vb_ver)"
for t in dpkg-buildpackage dh dh_dkms; do
	command -v "$t" >/dev/null || die "no $t: run scripts/setup-deb.sh"
done

work=$out/work
src=$work/$pkg-$ver
deb=${pkg}_${ver}_all.deb
log=$work/build.log

say "staging $pkg $ver in $src"
rm -rf "$work"
mkdir -p "$src/guest" "$src/include" "$out"
cp -r "$top/guest/debian" "$src/debian"
cp "$top/guest/dkms.conf" "$src/dkms.conf"
cp "$top/guest/Kbuild" "$top/guest/Makefile" "$src/guest/"
for f in "$top"/guest/*.c "$top"/guest/*.h; do
	case $f in *.mod.c) continue ;; esac
	cp "$f" "$src/guest/"
done
cp "$top"/include/*.h "$src/include/"
# The description's list of the kernels scan mode is validated on: each
# pattern of guest/scan-validated-kernels with its comment, one verbatim
# line each, in place of the line " ${bh:ScanKernels}" of debian/control.
validated=$top/guest/scan-validated-kernels
if [ -f "$validated" ]; then
	cp "$validated" "$src/guest/"
	list=$(awk '/^[ \t]*#/ || NF == 0 { next }
		{ c = ""; i = index($0, "#"); if (i) c = substr($0, i + 1)
		  sub(/^[ \t]+/, "", c); printf "   %-20s %s\n", $1, c }' "$validated")
	[ -n "$list" ] || die "guest/scan-validated-kernels lists no kernel"
else
	list=$(printf '   %-20s %s\n' '6.1.*' 'Linux 6.1' '6.12.*' 'Linux 6.12')
fi
# shellcheck disable=SC2016 # the literal substvar line
grep -qx ' ${bh:ScanKernels}' "$src/debian/control" ||
	die "guest/debian/control has no line \" \${bh:ScanKernels}\""
printf '%s\n' "$list" > "$work/scan-kernels"
awk -v f="$work/scan-kernels" '$0 == " ${bh:ScanKernels}" {
	while ((getline l < f) > 0) print l; next } { print }' \
	"$src/debian/control" > "$src/debian/control.new"
mv "$src/debian/control.new" "$src/debian/control"

# debian/changelog: one entry, the version of dkms.conf, dated by the last
# commit when the tree is a git checkout (a reproducible date), else now;
# it names that commit, "+changes" when guest/ or include/ differ from it.
# Read-only git commands only (GIT_OPTIONAL_LOCKS=0: no index refresh).
export GIT_OPTIONAL_LOCKS=0
maint=$(sed -n 's/^Maintainer: *//p' "$src/debian/control")
date=$(git -C "$top" log -1 --format=%cD 2>/dev/null || true)
[ -n "$date" ] || date=$(date -R)
rev=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || true)
changed=$(git -C "$top" status --porcelain -- guest include 2>/dev/null || true)
[ -z "$rev" ] || [ -z "$changed" ] || rev=$rev+changes
cat > "$src/debian/changelog" <<EOF
$pkg ($ver) unstable; urgency=medium

  * balloon-hint guest driver $ver${rev:+ (commit $rev)}.

 -- $maint  $date
EOF

say "dpkg-buildpackage -b (log: $log)"
if ! (cd "$src" && dpkg-buildpackage -b --no-sign) > "$log" 2>&1; then
	tail -n 40 "$log" >&2
	die "dpkg-buildpackage failed (full log: $log)"
fi
[ -f "$work/$deb" ] || die "dpkg-buildpackage made no $deb (log: $log)"
mv -f "$work/$deb" "$out/$deb"

if command -v lintian >/dev/null; then
	say "lintian $deb"
	lintian --info --display-info "$out/$deb" | tee "$work/lintian.log" || true
	if grep -q '^E: ' "$work/lintian.log"; then
		die "lintian reports errors"
	fi
fi
say "$out/$deb"
