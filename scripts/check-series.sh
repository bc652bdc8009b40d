#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Check that every prefix of a QEMU series builds and that every patch
# passes QEMU's scripts/checkpatch.pl.
#
#   scripts/check-series.sh [10.0|10.2]     (default 10.0)
#
# The patches are applied one at a time, each as a commit, onto a git copy of
# the Debian source that scripts/build-qemu.sh fetched into the machine cache;
# after each one qemu-system-x86_64 is rebuilt incrementally (ninja, ccache,
# the configure flags of build-qemu.sh).  The first patch that does not
# apply, does not build or fails checkpatch stops the check (exit status 1).
# A prefix that built once is remembered (by the hash of the source version,
# the configure flags and the patches) and not built again.
#
# Environment: CHECKPATCH_ONLY=1 runs checkpatch only.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-10.0}
say() { printf '[check-series %s] %s\n' "$base" "$*"; }
die() { printf '[check-series %s] FAIL: %s\n' "$base" "$*" >&2; exit 1; }

# shellcheck source=scripts/qemu-env.sh
. "$top/scripts/qemu-env.sh"
patchdir=$top/host-qemu-patch/qemu-$base
series=$patchdir/series
csrc=$cache/src/qemu-$base
[ -f "$series" ] || die "no $series"
[ -f "$csrc/VERSION" ] || die "no source in $csrc: run scripts/build-qemu.sh $base first"
qemu_cfg "$base" "$csrc/qemu"
version=$(cat "$csrc/VERSION")
mapfile -t patches < <(grep -vE '^\s*(#|$)' "$series")
[ ${#patches[@]} -gt 0 ] || die "empty series"

case "$base" in
10.0) outname=qemu ;;
10.2) outname=qemu-10.2 ;;
*) die "unknown base $base (10.0, 10.2)" ;;
esac
work=$top/build/check-series-$base
mkdir -p "$work"
# The tree and build directory of scripts/build-qemu.sh, so that ccache
# serves every object a patch does not change; its lock, too.
src=$top/build/src/qemu-$base
bld=$src/build-$outname
exec 9> "$top/build/.build-$outname.lock"
flock 9

# 1. checkpatch, every patch
rc=0
for p in "${patches[@]}"; do
	[ -f "$patchdir/$p" ] || die "$p listed in series but missing"
	if ! out=$(cd "$csrc/qemu" && perl scripts/checkpatch.pl "$patchdir/$p" 2>&1); then
		printf '%s\n' "$out" | tail -20 >&2
		say "checkpatch: $p FAILED"
		rc=1
	fi
done
[ $rc = 0 ] || die "checkpatch"
say "checkpatch: ${#patches[@]} patches clean"
[ "${CHECKPATCH_ONLY:-0}" = 1 ] && exit 0

# 2. a git copy of the Debian source, configured as build-qemu.sh does
if [ "$(cat "$work/.version" 2>/dev/null)" != "$version ${cfg[*]}" ] ||
   ! git -C "$src" rev-parse -q --verify base >/dev/null 2>&1; then
	say "preparing a git copy of $version in $src"
	# $work/ok stays: its keys chain the version, the flags and the
	# patches, so a prefix that built once builds in any fresh copy
	rm -rf "$src"
	cp -a "$csrc/qemu" "$src"
	(cd "$src" && git init -q && git add -A --force && git -c user.name=check -c user.email=check@localhost \
		commit -q -m "Debian qemu $version" && git tag base)
	mkdir -p "$bld"
	(cd "$bld" && nice -n 10 ../configure --cc="$qemu_cc" --host-cc=gcc "${cfg[@]}" \
		> configure.log 2>&1) || { tail -30 "$bld/configure.log"; die "configure"; }
	qemu_venv_fixup "$bld"
	echo "$version ${cfg[*]}" > "$work/.version"
fi
touch "$work/ok"

# 3. each prefix: apply, commit, build
(cd "$src" && git reset -q --hard base && git clean -qfd -e "build-*")
h=$(printf '%s\n' "$version" "${cfg[*]}" | sha256sum | cut -c1-16)
n=0
for p in "${patches[@]}"; do
	n=$((n + 1))
	h=$( { echo "$h"; cat "$patchdir/$p"; } | sha256sum | cut -c1-16)
	(cd "$src" && git apply --index "$patchdir/$p" &&
	 git -c user.name=check -c user.email=check@localhost commit -q -m "$p") ||
		die "[$n] $p does not apply"
	if grep -qx "$h" "$work/ok"; then
		say "[$n/${#patches[@]}] $p: built before"
		continue
	fi
	say "[$n/${#patches[@]}] $p: building"
	if ! nice -n 10 ninja -C "$bld" qemu-system-x86_64 > "$work/ninja.log" 2>&1; then
		grep -E 'error|Error' "$work/ninja.log" | head -20 >&2
		die "[$n] $p does not build (log: $work/ninja.log)"
	fi
	echo "$h" >> "$work/ok"
done
rm -f "$bld/.key"    # the tree is no longer the one build-qemu.sh made
say "all ${#patches[@]} prefixes build"
