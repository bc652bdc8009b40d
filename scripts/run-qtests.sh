#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Build QEMU's own qtests from the patched source tree that
# scripts/build-qemu.sh prepared (build/src/qemu-BASE/build-*) and run them
# against our QEMU binary of that base, under TCG: a private mount namespace hides /dev/kvm
# (bind-mounts /dev/null over it where it exists), so every "kvm:tcg" falls
# back to TCG.
#
#   scripts/run-qtests.sh [--base 10.0] [--quick|--full|--build-only] [--baseline]
#                         [--stock] [--match REGEX]
#
#   --base        the QEMU base (default 10.0: build/qemu; 10.2: build/qemu-10.2)
#   --quick       (default) qos-test restricted to the virtio-balloon graph
#                 paths, qom-test, device-introspect-test (properties of
#                 every device, including virtio-balloon-*)
#   --full        --quick plus the whole migration-test (long under TCG)
#   --build-only  build and stash the qtest binaries, run nothing
#   --baseline    also run the same binaries against the unpatched Debian
#                 build of the same QEMU version (build/stock-qemu-BASE)
#   --stock       run them against that unpatched build only
#   --match       only qos-test, and only its virtio-balloon paths that
#                 match REGEX (grep -E)
#
# Environment:
#   HB_OUR_QEMU   binary under test (default build/<base's dir>/qemu-system-x86_64)
#   QTEST_TIMEOUT seconds per qtest binary (default 900; migration-test 3600)
#
# The qtest binaries are copied to build/qtests-BASE/bin (keyed by build-qemu's
# .key) so a later rebuild of the tree by build-qemu.sh does not lose them.
# Logs: build/results/qtests-BASE/<label>-<test>.log; summary in
# build/results/qtests-BASE/summary.txt.  Exit status: 1 if a qtest failed (of
# our binary, or of the baseline with --baseline), 2 if the qtests could not be
# built or run at all.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
say() { printf '[qtests] %s\n' "$*"; }
die() { printf '[qtests] ERROR: %s\n' "$*" >&2; exit 2; }

mode=quick
baseline=0
stock_only=0
match=
base=10.0
while [ $# -gt 0 ]; do
	a=$1; shift
	case "$a" in
	--base) base=${1:?--base needs 10.0 or 10.2}; shift ;;
	--quick) mode=quick ;;
	--full) mode=full ;;
	--build-only) mode=build ;;
	--baseline) baseline=1 ;;
	--stock) stock_only=1 ;;
	--match) match=${1:?--match needs a regex}; shift ;;
	-h|--help) sed -n '2,/^set /p' "$0" | sed 's/^# \{0,1\}//;/^set /d'; exit 0 ;;
	*) die "unknown argument $a" ;;
	esac
done

case "$base" in
10.0) outname=qemu; stock=$top/build/stock-qemu-10.0/qemu-system-x86_64 ;;
10.2) outname=qemu-10.2; stock=$top/build/stock-qemu-10.2/qemu-system-x86_64 ;;
*) die "unknown base $base" ;;
esac
ours=${HB_OUR_QEMU:-$top/build/$outname/qemu-system-x86_64}
bdir=$top/build/src/qemu-$base/build-$outname
stash=$top/build/qtests-$base
qcache=${BH_CACHE:-/var/cache/balloon-hint}/qtests
logs=$top/build/results/qtests-$base
scratch=$top/build/tmp/qtests
mkdir -p "$stash/bin" "$logs" "$scratch"
# what a qtest leaves in its working directory goes with it
trap 'rm -rf "$scratch"' EXIT

# shellcheck source=scripts/qemu-env.sh
. "$top/scripts/qemu-env.sh"
targets=("${QTEST_TARGETS[@]}")

# 1. Build (under build-qemu.sh's lock: it may rm -rf the tree otherwise).
key=$(cat "$top/build/$outname/.key" 2>/dev/null || echo none)
have=1
for t in "${targets[@]}"; do [ -x "$stash/bin/${t##*/}" ] || have=0; done
if [ "$have" = 1 ] && [ "$(cat "$stash/.key" 2>/dev/null)" = "$key" ]; then
	say "qtest binaries up to date ($stash/bin, key $key)"
elif [ -x "$qcache/$key/migration-test" ]; then
	cp "$qcache/$key/"* "$stash/bin/"
	echo "$key" > "$stash/.key"
	say "qtest binaries from cache $qcache/$key"
else
	if [ "$(cat "$bdir/.key" 2>/dev/null)" != "$key" ]; then
		# A binary served from the cache leaves no tree: make one.
		say "no build tree for key $key: building it (scripts/build-qemu.sh)"
		BH_NEED_TREE=1 bash "$top/scripts/build-qemu.sh" "$base" ||
			die "scripts/build-qemu.sh failed"
	fi
	exec 9> "$top/build/.build-$outname.lock"
	say "waiting for build-qemu.sh's lock"
	flock 9
	key=$(cat "$top/build/$outname/.key" 2>/dev/null || echo none)
	[ -f "$bdir/build.ninja" ] || die "$bdir not configured"
	# Check the target names this tree knows.
	known=$(ninja -C "$bdir" -t targets all 2>/dev/null)
	for t in "${targets[@]}"; do
		grep -q "^$t:" <<< "$known" ||
			die "ninja target $t unknown in $bdir (configure flags?)"
	done
	say "building ${targets[*]} in $bdir"
	export CCACHE_DIR=${BH_CACHE:-/var/cache/balloon-hint}/ccache
	qemu_cfg "$base" "${BH_CACHE:-/var/cache/balloon-hint}/src/qemu-$base/qemu"    # meson
	nice -n 10 ninja -C "$bdir" "${targets[@]}" > "$logs/build.log" 2>&1 ||
		{ tail -30 "$logs/build.log"; die "qtest build failed (see $logs/build.log)"; }
	for t in "${targets[@]}"; do install -m 0755 "$bdir/$t" "$stash/bin/"; done
	echo "$key" > "$stash/.key"
	# Into the machine-wide cache in one rename: another clone sees the
	# whole set or none of it (if one got there first, keep theirs).
	if [ ! -d "$qcache/$key" ] && mkdir -p "$qcache" &&
	   tmp=$(mktemp -d "$qcache/.tmp-$key-XXXXXX"); then
		cp "$stash/bin/"* "$tmp/" && chmod 0755 "$tmp" &&
			mv -T "$tmp" "$qcache/$key" 2>/dev/null || rm -rf "$tmp"
	fi
	flock -u 9
	say "built; binaries in $stash/bin"
fi
[ "$mode" = build ] && exit 0

# 2. The binaries find their firmware themselves (--firmwarepath); libqtest
# takes the arch from the name, which ends in -system-x86_64.

# qos-test paths that go through virtio-balloon (graph of x86_64/pc).
balloon_paths() { # qemu
	QTEST_QEMU_BINARY=$1 "$stash/bin/qos-test" -l 2>/dev/null |
		grep -E '^/.*virtio-balloon' | grep -E "${match:-.}" || true
}

summary=$logs/summary.txt
: > "$summary"
fail=0

run_one() { # label qemu name timeout cmd...
	local label=$1 qemu=$2 name=$3 tmo=$4; shift 4
	local log=$logs/$label-$name.log t0 rc
	t0=$(date +%s)
	# Some qtests make scratch directories in the current directory (the
	# 9p ones: qtest-9p-local-*); one killed mid-run would leave them in
	# the source tree.  Those under $TMPDIR (g_dir_make_tmp()) go there
	# too: a qtest that fails may leave them behind.
	(cd "$scratch" && export TMPDIR="$scratch" &&
	 unshare -m sh -c 'if [ -e /dev/kvm ]; then
		mount --bind /dev/null /dev/kvm || exit; fi; exec "$@"' sh \
		env QTEST_QEMU_BINARY="$qemu" timeout -k 10 "$tmo" "$@") > "$log" 2>&1
	rc=$?
	local ok nok skip
	ok=$(grep -c '^ok ' "$log")
	nok=$(grep -c '^not ok ' "$log")
	skip=$(grep -c '^ok .*# SKIP' "$log")
	local line
	line=$(printf '%-6s %-28s rc=%-3s ok=%-4s not_ok=%-3s skip=%-3s %4ss' \
		"$label" "$name" "$rc" "$ok" "$nok" "$skip" "$(( $(date +%s) - t0 ))")
	echo "$line" | tee -a "$summary"
	if [ "$rc" != 0 ] || [ "$nok" != 0 ]; then
		grep -E '^not ok |ERROR|Bail out' "$log" | head -5 | sed 's/^/    /'
		return 1
	fi
	return 0
}

suite() { # label qemu
	local label=$1 qemu=$2 rc=0 p args=()
	# -p takes one path each; the virtio-balloon paths of the graph
	while read -r p; do [ -n "$p" ] && args+=(-p "$p"); done < <(balloon_paths "$qemu")
	[ ${#args[@]} -gt 0 ] || { echo "$label: no virtio-balloon path in qos-test -l" | tee -a "$summary"; rc=1; }
	[ ${#args[@]} -gt 0 ] && { run_one "$label" "$qemu" qos-test-virtio-balloon "${QTEST_TIMEOUT:-900}" \
		"$stash/bin/qos-test" --tap -k "${args[@]}" || rc=1; }
	[ -z "$match" ] || return $rc
	run_one "$label" "$qemu" qom-test "${QTEST_TIMEOUT:-900}" \
		"$stash/bin/qom-test" --tap -k || rc=1
	run_one "$label" "$qemu" device-introspect-test "${QTEST_TIMEOUT:-900}" \
		"$stash/bin/device-introspect-test" --tap -k || rc=1
	if [ "$mode" = full ]; then
		run_one "$label" "$qemu" migration-test "${QTEST_TIMEOUT:-3600}" \
			"$stash/bin/migration-test" --tap -k || rc=1
	fi
	return $rc
}

if [ "$stock_only" = 1 ]; then
	[ -x "$stock" ] || die "no QEMU at $stock"
	say "mode=$mode${match:+ match=$match} binary=$stock (unpatched)"
	suite stock "$stock" || fail=1
else
	[ -x "$ours" ] || die "no QEMU at $ours"
	say "mode=$mode${match:+ match=$match} binary=$ours"
	suite ours "$ours" || fail=1
fi
if [ "$baseline" = 1 ] && [ "$stock_only" = 0 ]; then
	say "baseline: unpatched Debian build $stock"
	suite stock "$stock" || fail=1
fi
say "summary ($summary):"
cat "$summary"
[ "$fail" = 0 ] && say "PASS" || say "FAIL"
exit $fail
