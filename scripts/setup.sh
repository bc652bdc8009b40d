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
# - deb-src for trixie: 'apt-get source qemu' of Debian 13's QEMU 10.0.
add_sources() { # file, content
	local f=/etc/apt/sources.list.d/$1
	if [ ! -e "$f" ] || [ "$(cat "$f")" != "$2" ]; then
		say "adding apt entries: $f"
		printf '%s\n' "$2" > "$f"
		rm -f /var/lib/balloon-hint/apt-updated
	fi
}
add_sources balloon-hint-bp.sources 'Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
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
	busybox-static linux-image-amd64 linux-headers-amd64
	linux-source-6.1 sparse dkms
	qemu-system-data qemu-utils seabios ipxe-qemu
	dpkg-dev devscripts debhelper dh-dkms python3 python3-venv
	ninja-build meson pkg-config ccache libglib2.0-dev zlib1g-dev
	python3-matplotlib xz-utils zstd gdb
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

# Guest kernels: Debian 12's 6.1 (linux-image-amd64 above) and 6.12 from
# bookworm-backports, each with its headers.  6.12, the newest, is the
# default guest kernel (scripts/guest-kver.sh).
if ! ls /boot/vmlinuz-6.12.*-amd64 >/dev/null 2>&1 ||
   ! ls -d /usr/src/linux-headers-6.12.*-amd64 >/dev/null 2>&1; then
	say "installing the 6.12 guest kernel and headers (bookworm-backports)"
	apt-get install -y -q --no-install-recommends -t bookworm-backports \
		linux-image-amd64 linux-headers-amd64 >/dev/null
fi
for series in 6.1 6.12; do
	kver=$("$(dirname "$0")/guest-kver.sh" "$series")
	if [ ! -e "/lib/modules/$kver/build/Makefile" ]; then
		say "installing headers for guest kernel $kver"
		apt-get install -y -q --no-install-recommends "linux-headers-$kver" >/dev/null
	fi
done
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
cache=${BH_CACHE:-/var/cache/balloon-hint}
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
