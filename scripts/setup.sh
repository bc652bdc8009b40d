#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Install, by name, everything balloon-hint needs on a Debian 12 machine.
# Idempotent: a second run installs nothing and changes nothing.
set -euo pipefail

say() { printf '[setup] %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
	echo "setup.sh: must run as root (apt-get)" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive

# Apt entries balloon-hint needs, in a file of its own:
# - bookworm-backports (deb and deb-src): the Linux 6.12 guest kernel and
#   headers, meson >= 1.5 for QEMU 10.0, and Debian's own QEMU 10.0 binary
#   (the stock reference, unpacked under build/, never installed).
#   Backports has priority 100: nothing is taken from it unless asked for
#   by name or with -t;
# - deb-src for trixie: 'apt-get source qemu' of Debian 13's QEMU 10.0;
# - deb for trixie-backports: only to download Debian 13's 7.3 guest
#   kernels (unpacked under the cache, never installed).  It is pinned to
#   -1 (balloon-hint-trixie-bp in preferences.d): nothing on this machine
#   is ever installed or upgraded from it, and the candidate of every
#   host package stays what bookworm gives.  Debian 13's packages are
#   installed only into the Debian 13 root (scripts/trixie-root.sh).
add_sources() { # file, content
	local f=/etc/apt/sources.list.d/$1
	if [ ! -e "$f" ] || [ "$(cat "$f")" != "$2" ]; then
		say "adding apt entries: $f"
		printf '%s\n' "$2" > "$f"
		rm -f /var/lib/balloon-hint/apt-updated
	fi
}
add_pin() { # file, content
	local f=/etc/apt/preferences.d/$1
	if [ ! -e "$f" ] || [ "$(cat "$f")" != "$2" ]; then
		say "pinning: $f"
		printf '%s\n' "$2" > "$f"
	fi
}
add_pin balloon-hint-trixie-bp '# balloon-hint setup.sh: trixie-backports is listed only to download Debian
# 13'"'"'s guest kernels (unpacked, never installed); nothing on this machine is
# ever installed or upgraded from it.
Package: *
Pin: release n=trixie-backports
Pin-Priority: -1'
add_sources balloon-hint-bp.sources 'Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg'

# The libraries of the features Debian's qemu-system build enables
# (debian/control of the qemu source package, Build-Depends), so that our
# QEMU is configured as Debian's is (scripts/qemu-env.sh).  libblkio-dev is
# not in Debian 12.
QEMU_BUILD_DEPS=(
	libgnutls28-dev libaio-dev libasound2-dev libbpf-dev libbrlapi-dev
	libcacard-dev libcap-ng-dev libcapstone-dev libcurl4-gnutls-dev libdrm-dev
	libepoxy-dev libfdt-dev libfuse3-dev libgbm-dev libglusterfs-dev
	libgtk-3-dev libibumad-dev libibverbs-dev libiscsi-dev libjack-dev
	libjpeg-dev libncurses-dev libnfs-dev libnuma-dev libpipewire-0.3-dev
	libpixman-1-dev libpmem-dev libpng-dev libpulse-dev librbd-dev
	librdmacm-dev libsasl2-dev libsdl2-dev libseccomp-dev libslirp-dev
	libspice-server-dev libssh-dev libudev-dev liburing-dev
	libusb-1.0-0-dev libusbredirparser-dev libvdeplug-dev
	libvirglrenderer-dev libvte-2.91-dev libzstd-dev nettle-dev libattr1-dev
)

PKGS=(
	build-essential gcc make bc flex bison libelf-dev kmod cpio
	busybox-static linux-source-6.1 sparse pahole
	qemu-system-data qemu-utils seabios ipxe-qemu
	devscripts python3 python3-venv
	ninja-build meson pkg-config ccache libglib2.0-dev zlib1g-dev
	python3-matplotlib xz-utils zstd gdb debootstrap debian-archive-keyring
	"${QEMU_BUILD_DEPS[@]}"
)

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

stamp=/var/lib/balloon-hint/apt-updated
mkdir -p /var/lib/balloon-hint
if [ ${#missing[@]} -gt 0 ] || [ ! -e "$stamp" ]; then
	say "apt-get update"
	apt-get update -q >/dev/null
	touch "$stamp"
fi
if [ ${#missing[@]} -gt 0 ]; then
	say "installing: ${missing[*]}"
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
# The packaging tools, dkms and dpkg-dev (make deb needs only these):
# scripts/setup-deb.sh.
bash "$(dirname "$0")/setup-deb.sh"

# Guest kernels: Debian 12's 6.1 and 6.12 from bookworm-backports.  Nothing
# of them is installed: each kernel's linux-image, linux-headers (with its
# -common part) and linux-kbuild .debs are unpacked together under
# $cache/kernels/KVER (boot/vmlinuz-KVER, lib/modules/KVER, usr/src,
# usr/lib/linux-kbuild-*), so the host's /boot, bootloader, /lib/modules
# and package list stay as they were (Debian's linux-headers packages
# depend on their linux-image).  The headers' two absolute references
# (the -common Makefile include, lib/modules/KVER/build) are pointed into
# that tree; guest/Makefile builds against $cache/kernels/KVER/build when
# the kernel has no installed headers.  6.12, the newest, is the default guest kernel
# (scripts/guest-kver.sh).
cache=${BH_CACHE:-/var/cache/balloon-hint}
kernels=$cache/kernels
mkdir -p "$kernels"
dep_of() { # suite, package, prefix -> the first dependency with that prefix
	apt-cache show "$2/$1" 2>/dev/null | sed -n 's/^Depends: //p' | head -n1 |
		tr ',|' '\n\n' | sed -n "s/^ *\($3[^ ]*\).*/\1/p" | head -n1
}
unpack_kernel() { # suite
	local img kver tmp hdr common kbuild d
	img=$(dep_of "$1" linux-image-amd64 linux-image-)
	[ -n "$img" ] || { echo "setup.sh: no linux-image-amd64 in $1" >&2; exit 1; }
	kver=${img#linux-image-}
	[ -e "$kernels/$kver/.complete" ] && return
	hdr=linux-headers-$kver
	common=$(dep_of "$1" "$hdr" linux-headers-)
	kbuild=$(dep_of "$1" "$hdr" linux-kbuild-)
	say "unpacking guest kernel $kver ($1: $img $hdr $common $kbuild) into $kernels/$kver"
	tmp=$(mktemp -d "$kernels/.dl.XXXXXX")
	chown _apt "$tmp" 2>/dev/null || true
	(cd "$tmp" && apt-get download -q "$img/$1" "$hdr/$1" "$common/$1" "$kbuild/$1" >/dev/null)
	for d in "$tmp"/*.deb; do dpkg -x "$d" "$tmp/root"; done
	sed -i "s|^include /usr/src/|include $kernels/$kver/usr/src/|" \
		"$tmp/root/usr/src/linux-headers-$kver/Makefile"
	ln -sfn "$kernels/$kver/usr/src/linux-headers-$kver" "$tmp/root/lib/modules/$kver/build"
	ln -sfn "$kernels/$kver/usr/src/$common" "$tmp/root/lib/modules/$kver/source"
	ln -sfn "lib/modules/$kver/build" "$tmp/root/build"
	touch "$tmp/root/.complete"
	rm -rf "$kernels/$kver"
	mv "$tmp/root" "$kernels/$kver"
	rm -rf "$tmp"
}
unpack_kernel bookworm
unpack_kernel bookworm-backports

# Debian 13's Linux 7.3 from trixie-backports, in its three amd64
# flavours: generic, -rt (PREEMPT_RT) and -cloud.  Their images are
# unpacked like the others (downloaded only: the host's apt pins
# trixie-backports to -1); a 7.3 image is split into linux-base-KVER,
# linux-binary-KVER (the vmlinuz) and linux-modules-KVER, installed under
# /usr/lib/modules/KVER, which are laid out here as the others are
# (boot/vmlinuz-KVER, lib/modules/KVER).  Their headers need Debian 13's
# gcc-14 and kbuild: they are installed in the Debian 13 root
# (scripts/trixie-root.sh), where the 7.3 modules are built; no 7.3 kernel
# has a build/ here, so 6.12 stays the default guest kernel.
unpack_kernel_13() { # flavour: amd64, rt-amd64, cloud-amd64
	local suite=trixie-backports img kver tmp p pkgs d
	img=$(dep_of $suite "linux-image-$1" linux-image-)
	[ -n "$img" ] || { echo "setup.sh: no linux-image-$1 in $suite" >&2; exit 1; }
	kver=${img#linux-image-}
	if [ ! -e "$kernels/$kver/.complete" ]; then
		pkgs=("$img/$suite")
		for p in linux-base- linux-binary- linux-modules-; do
			d=$(dep_of $suite "$img" "$p")
			[ -z "$d" ] || pkgs+=("$d/$suite")
		done
		say "unpacking guest kernel $kver ($suite: ${pkgs[*]%/*}) into $kernels/$kver"
		tmp=$(mktemp -d "$kernels/.dl.XXXXXX")
		chown _apt "$tmp" 2>/dev/null || true
		(cd "$tmp" && apt-get download -q "${pkgs[@]}" >/dev/null)
		for d in "$tmp"/*.deb; do dpkg -x "$d" "$tmp/root"; done
		if [ -d "$tmp/root/usr/lib/modules/$kver" ]; then
			mkdir -p "$tmp/root/lib/modules"
			mv "$tmp/root/usr/lib/modules/$kver" "$tmp/root/lib/modules/$kver"
		fi
		if [ -e "$tmp/root/lib/modules/$kver/vmlinuz" ]; then
			mkdir -p "$tmp/root/boot"
			mv "$tmp/root/lib/modules/$kver/vmlinuz" "$tmp/root/boot/vmlinuz-$kver"
		fi
		[ -e "$tmp/root/boot/vmlinuz-$kver" ] ||
			{ echo "setup.sh: no vmlinuz in ${pkgs[*]}" >&2; exit 1; }
		touch "$tmp/root/.complete"
		rm -rf "$kernels/$kver"
		mv "$tmp/root" "$kernels/$kver"
		rm -rf "$tmp"
	fi
	root_pkgs+=("linux-headers-$kver/$suite")
}
root_pkgs=(gcc-14 make kmod)
for f in amd64 rt-amd64 cloud-amd64; do
	unpack_kernel_13 "$f"
done
bash "$(dirname "$0")/trixie-root.sh" make
bash "$(dirname "$0")/trixie-root.sh" install "${root_pkgs[@]}"
# sparse for Linux 7.3 (the lint of tests/test_00_lint.py): sid's, unpacked
# at /opt/sparse-sid of the root, since 7.3 refuses trixie's 0.6.4
bash "$(dirname "$0")/trixie-root.sh" unpack sparse sid
kver=$("$(dirname "$0")/guest-kver.sh")

# libvirt 11.3 (Debian 13's, from bookworm-backports) for the libvirt test
# (tests/test_82_libvirt.py): libvirtd (Debian packages the monolithic
# daemon only), its QEMU driver and virsh.  Each is asked for as
# PACKAGE/bookworm-backports, so that only libvirt's own packages come from
# backports and every other dependency from bookworm (-t bookworm-backports
# would also upgrade systemd).  The test runs private daemons of its own
# (tests/hb/libvirt.py), never the system's, so when this script is what
# brings libvirtd to the machine it keeps the packages' system daemons from
# running, now and at boot: nothing is started while the packages install
# (a policy-rc.d that denies, unless the machine has one of its own), and
# the units and init scripts they enable are disabled and masked.  To use
# the system libvirt afterwards: `systemctl unmask` the units of
# LIBVIRT_UNITS, then `systemctl enable --now libvirtd.socket`.  A machine
# that already had libvirtd keeps its units as they were.
LIBVIRT_PKGS=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients)
LIBVIRT_UNITS=(libvirtd.service libvirtd.socket libvirtd-ro.socket
	libvirtd-admin.socket libvirtd-tcp.socket libvirtd-tls.socket
	virtlogd.service virtlogd.socket virtlogd-admin.socket
	libvirt-guests.service)
LIBVIRT_INITSCRIPTS=(libvirtd virtlogd libvirt-guests)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=()
for p in "${LIBVIRT_PKGS[@]}"; do
	installed "$p" || missing+=("$p/bookworm-backports")
done
if [ ${#missing[@]} -gt 0 ]; then
	had_libvirtd=no
	installed libvirt-daemon && had_libvirtd=yes
	say "installing libvirt (bookworm-backports), its system daemons masked: ${missing[*]}"
	policy=/usr/sbin/policy-rc.d
	own_policy=no
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\n# balloon-hint setup.sh: no service starts while libvirt installs\nexit 101\n' > "$policy"
		chmod 755 "$policy"
		own_policy=yes
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
	if [ "$own_policy" = yes ]; then
		rm -f "$policy"
		trap - EXIT
	fi
	if [ "$had_libvirtd" = no ]; then
		if [ -d /run/systemd/system ]; then
			systemctl stop "${LIBVIRT_UNITS[@]}" >/dev/null 2>&1 || true
		fi
		systemctl disable "${LIBVIRT_UNITS[@]}" >/dev/null 2>&1 || true
		systemctl mask "${LIBVIRT_UNITS[@]}" >/dev/null 2>&1 || true
		for s in "${LIBVIRT_INITSCRIPTS[@]}"; do
			update-rc.d "$s" disable >/dev/null 2>&1 || true
		done
	fi
fi

# Debian packages used without being installed, kept in the machine-wide
# cache (/var/cache/balloon-hint): each is pinned, and when the pinned
# version has left the archive the current bookworm-backports one is taken.
mkdir -p "$cache/debs"
cached_deb() { # package, pinned version -> path of the .deb in the cache
	local f tmp
	f=$(ls "$cache/debs/$1"_*.deb 2>/dev/null | head -n1 || true)
	if [ -z "$f" ]; then
		tmp=$(mktemp -d "$cache/debs/.dl.XXXXXX")
		chown _apt "$tmp" 2>/dev/null || true
		if ! (cd "$tmp" && apt-get download -q "$1=$2" >/dev/null 2>&1); then
			say "$1 $2 not in the archive; taking the current bookworm-backports one" >&2
			(cd "$tmp" && apt-get download -q "$1/bookworm-backports" >/dev/null) ||
				{ rm -rf "$tmp"; echo "setup.sh: cannot download $1" >&2; return 1; }
		fi
		f=$(ls "$tmp"/*.deb)
		mv "$f" "$cache/debs/"
		rm -rf "$tmp"
		f=$cache/debs/$(basename "$f")
	fi
	echo "$f"
}
# meson >= 1.5 for QEMU 10.0, unpacked privately: bookworm's meson 1.0.1
# stays the system one.
if [ ! -d "$cache/meson/usr/lib/python3/dist-packages/mesonbuild" ]; then
	deb=$(cached_deb meson 1.7.0-1~bpo12+1)
	say "unpacking $(basename "$deb") into $cache/meson"
	rm -rf "$cache/meson.new"
	dpkg -x "$deb" "$cache/meson.new"
	rm -rf "$cache/meson"
	mv "$cache/meson.new" "$cache/meson"
fi
# Debian's own QEMU 10.0 (the stock reference of the 10.0 stack), unpacked
# under build/ by scripts/stock-qemu.sh, never installed.  Its libraries are
# installed by name; it finds its firmware in the folders of the seabios,
# ipxe-qemu and qemu-system-data packages above.
# With the packages it recommends that hold its modules (devices, displays,
# audio and block drivers), as `apt install qemu-system-x86` brings them.
for p in qemu-system-x86 qemu-system-common qemu-system-gui \
	 qemu-system-modules-spice qemu-system-modules-opengl qemu-block-extra; do
	cached_deb "$p" 1:10.0.2+ds-2+deb13u1~bpo12+1 >/dev/null
done
STOCK10_LIBS=(libaio1 libbpf1 libcapstone4 libfdt1 libfuse3-3 libgmp10 libgnutls30
	libibverbs1 libjpeg62-turbo libnuma1 libpixman-1-0 libpmem1 libpng16-16
	librdmacm1 libsasl2-2 libseccomp2 libslirp0 libudev1 liburing2
	libvdeplug2 libzstd1)
missing=()
for p in "${STOCK10_LIBS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing libraries of the stock QEMU 10.0: ${missing[*]}"
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# checkpatch.pl comes from the kernel source tarball.
if [ ! -x /usr/src/linux-source-6.1/scripts/checkpatch.pl ]; then
	tarball=$(ls /usr/src/linux-source-6.1.tar.* 2>/dev/null | head -n1)
	say "unpacking scripts/ from $tarball"
	tar -C /usr/src -xf "$tarball" linux-source-6.1/scripts linux-source-6.1/.clang-format 2>/dev/null ||
		tar -C /usr/src -xf "$tarball" linux-source-6.1/scripts
fi
say "ready (guest kernel $kver)"
