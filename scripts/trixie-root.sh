#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The Debian 13 (trixie) root: a debootstrap of trixie, with
# trixie-backports enabled, kept in the cache ($BH_CACHE/trixie-root).  It
# builds modules for Debian 13's kernels with their own compiler (gcc-14)
# and kbuild, which Debian 12's cannot, and runs Debian 13's programs.  It
# is a directory tree only: nothing of it is installed into the host, and
# the host's /proc, /sys and /dev are mounted into it only for the duration
# of one command, in a private mount namespace, so that every mount goes
# away with the command whatever way it ends.
#
#   trixie-root.sh make            debootstrap the root (once; a stamp)
#   trixie-root.sh install PKG...  apt-get install PKG... in the root
#                                  (PKG/trixie-backports for a backport);
#                                  installs only what is missing
#   trixie-root.sh unpack PKG SUITE
#                                  unpack PKG of another suite (sid) at
#                                  /opt/PKG-SUITE of the root, not
#                                  installed (once)
#   trixie-root.sh run CMD...      run CMD in the root (as root, cwd /)
#   trixie-root.sh path            print the root's directory
#
# TRIXIE_ROOT_BINDS="HOSTDIR:DIR ...": also bind-mount each HOSTDIR at DIR
# of the root for the command (a cache kept outside the root).
set -euo pipefail
cache=${BH_CACHE:-/var/cache/balloon-hint}
root=$cache/trixie-root
mirror=http://deb.debian.org/debian
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
stamp=$root/.balloon-hint-root
say() { printf '[trixie-root] %s\n' "$*"; }

# The root's own apt entries: trixie, its updates and security, and
# trixie-backports (priority 100, as on any Debian: only taken when asked).
sources="Types: deb
URIs: $mirror
Suites: trixie trixie-updates trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"

# What the stamp records: a root made by another version of this script's
# recipe is made again.
recipe="trixie minbase 1 $(printf '%s' "$sources" | md5sum | cut -c1-8)"

need_root() {
	[ "$(id -u)" = 0 ] || { echo "trixie-root.sh: must run as root" >&2; exit 1; }
}

# run_in DIR CMD...: CMD chrooted into DIR, with /proc, /sys, /dev (and
# /dev/pts), a private /tmp and the host's name resolution (resolv.conf,
# hosts: the archive may be reached through names only the host's hosts
# file gives) mounted for it alone
run_in() {
	local dir=$1
	shift
	unshare --mount --propagation private -- /bin/bash -c '
		set -e
		d=$1; shift
		mount -t proc proc "$d/proc"
		mount -t sysfs sysfs "$d/sys"
		mount --rbind /dev "$d/dev"
		mount -t tmpfs tmpfs "$d/tmp"
		if [ -e "$d/etc/resolv.conf" ] || [ -L "$d/etc/resolv.conf" ]; then
			rm -f "$d/etc/resolv.conf"
		fi
		touch "$d/etc/resolv.conf"
		mount --bind /etc/resolv.conf "$d/etc/resolv.conf"
		[ -e "$d/etc/hosts" ] || touch "$d/etc/hosts"
		mount --bind /etc/hosts "$d/etc/hosts"
		for b in ${TRIXIE_ROOT_BINDS:-}; do
			mkdir -p "${b%%:*}" "$d/${b#*:}"
			mount --bind "${b%%:*}" "$d/${b#*:}"
		done
		exec chroot "$d" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
	' run_in "$dir" "$@"
}

do_make() {
	need_root
	if [ -e "$stamp" ] && [ "$(cat "$stamp")" = "$recipe" ]; then
		say "ready: $root"
		return 0
	fi
	local new=$root.new t0=$SECONDS
	# its messages go through the filter below, which would hide this one
	command -v debootstrap >/dev/null ||
		{ echo "trixie-root.sh: debootstrap is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
	say "debootstrap of trixie into $new (a few minutes, once per machine)"
	rm -rf "$new"
	mkdir -p "$cache"
	# debootstrap mounts /proc and /sys in the target while it works: a
	# private mount namespace keeps those mounts from the host, and they
	# end with it even when debootstrap fails.
	unshare --mount --propagation private -- \
		debootstrap --variant=minbase --keyring="$keyring" \
		--include=ca-certificates trixie "$new" "$mirror" 2>&1 |
		awk '/^I: (Retrieving (Release|Packages)$|Resolving|Found|Installing|Unpacking (required|the base)|Configuring (required|the base)|Base system)/ ||
		     /^[EW]: / { sub(/^I: /, ""); print "[trixie-root] debootstrap: " $0; fflush() }'
	[ "${PIPESTATUS[0]}" = 0 ] || { echo "trixie-root.sh: debootstrap failed (see above)" >&2; exit 1; }
	printf '%s\n' "$sources" > "$new/etc/apt/sources.list.d/debian.sources"
	rm -f "$new/etc/apt/sources.list"
	# Nothing installed into the root starts a service
	printf '#!/bin/sh\n# balloon-hint: no daemon starts in this root\nexit 101\n' \
		> "$new/usr/sbin/policy-rc.d"
	chmod 755 "$new/usr/sbin/policy-rc.d"
	printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
		> "$new/etc/apt/apt.conf.d/90balloon-hint"
	say "apt-get update in the root"
	run_in "$new" apt-get update -q >/dev/null
	printf '%s\n' "$recipe" > "$new/.balloon-hint-root"
	rm -rf "$root"
	mv "$new" "$root"
	say "ready: $root ($(du -sh "$root" | cut -f1), $((SECONDS - t0)) s)"
}

do_install() {
	need_root
	[ -e "$stamp" ] || do_make
	local p name missing=()
	for p in "$@"; do
		name=${p%%/*}
		name=${name%%=*}
		run_in "$root" dpkg-query -W -f='${Status}' "$name" 2>/dev/null |
			grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	say "installing in the root: ${missing[*]}"
	if ! run_in "$root" apt-get install -y -q "${missing[@]}" >/dev/null; then
		# The lists may be older than the archive: refresh them once.
		run_in "$root" apt-get update -q >/dev/null
		run_in "$root" apt-get install -y -q "${missing[@]}" >/dev/null
	fi
}

# A tool newer than trixie has, from another suite, when what the root
# needs of it depends on nothing trixie lacks: sid's sparse, one
# that Linux 7.3 accepts (scripts/checker-valid.sh asks for
# __typeof_unqual__, which trixie's 0.6.4 lacks), needs only the C
# library of its own binary.  The package is downloaded and unpacked, not
# installed, so its dependencies (sid's gcc) never come in; the suite's
# lists live apart from the root's own, which stay trixie's.  Their
# signature is checked, their Valid-Until is not: a mirror that is a
# snapshot serves sid's Release past its few days of validity.
do_unpack() {
	need_root
	local pkg=$1 suite=$2 dest=/opt/$1-$2 ver
	local conf=/etc/apt/hb-$suite.conf
	[ -e "$stamp" ] || do_make
	[ -e "$root$dest/.complete" ] && return 0
	mkdir -p "$root/etc/apt/hb-$suite.sources.d" \
		"$root/var/lib/apt/lists-hb-$suite/partial"
	printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
		"$mirror" "$suite" "$keyring" \
		> "$root/etc/apt/hb-$suite.sources.d/debian.sources"
	cat > "$root$conf" <<-EOF
	Dir::Etc::SourceList "/dev/null";
	Dir::Etc::SourceParts "/etc/apt/hb-$suite.sources.d";
	Dir::State::Lists "/var/lib/apt/lists-hb-$suite";
	Dir::Cache::pkgcache "";
	Dir::Cache::srcpkgcache "";
	Acquire::Check-Valid-Until "false";
	APT::Sandbox::User "root";
	EOF
	say "unpacking $pkg of $suite at $dest in the root (not installed)"
	run_in "$root" apt-get -c "$conf" update -q >/dev/null
	rm -rf "$root$dest"
	mkdir -p "$root$dest"
	run_in "$root" sh -c "cd $dest && apt-get -c $conf download -q $pkg >/dev/null &&
		dpkg-deb -x ${pkg}_*.deb . && rm ${pkg}_*.deb"
	ver=$(run_in "$root" apt-cache -c "$conf" show "$pkg" | sed -n 's/^Version: //p' | head -1)
	printf '%s\n' "$ver" > "$root$dest/.complete"
	say "$pkg $ver of $suite at $dest"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
make)	do_make ;;
install) do_install "$@" ;;
unpack)	[ $# = 2 ] || { echo "usage: trixie-root.sh unpack PKG SUITE" >&2; exit 2; }
	do_unpack "$@" ;;
run)	need_root
	[ -e "$stamp" ] || { echo "trixie-root.sh: no root at $root (trixie-root.sh make)" >&2; exit 1; }
	[ $# -gt 0 ] || { echo "usage: trixie-root.sh run CMD..." >&2; exit 2; }
	run_in "$root" "$@" ;;
path)	echo "$root" ;;
*)	echo "usage: trixie-root.sh make | install PKG... | unpack PKG SUITE | run CMD... | path" >&2
	exit 2 ;;
esac
