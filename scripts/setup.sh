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

# Apt entries balloon-hint needs, each in a file of its own:
# - deb-src for bookworm: 'apt-get source qemu' of Debian 12's QEMU 7.2;
# - bookworm-backports (deb and deb-src): the Linux 6.12 guest kernel and
#   headers, meson >= 1.5 for QEMU 10.0, and Debian's own QEMU 10.0 binary
#   (the stock reference of the 10.0 stack, unpacked under build/, never
#   installed).  Backports has priority 100: nothing is taken from it unless
#   asked for by name or with -t;
# - deb-src for trixie: 'apt-get source qemu' of Debian 13's QEMU 10.0.
add_sources() { # file, content
	local f=/etc/apt/sources.list.d/$1
	if [ ! -e "$f" ] || [ "$(cat "$f")" != "$2" ]; then
		say "adding apt entries: $f"
		printf '%s\n' "$2" > "$f"
		rm -f /var/lib/balloon-hint/apt-updated
	fi
}
# A deb-src entry for bookworm the machine already has is used as it is.
if ! grep -sE '^\s*(deb-src\s.*\sbookworm\s|Suites:.*\bbookworm\b)' \
	$(grep -lsE '^\s*(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/* |
	  grep -v balloon-hint-bp) >/dev/null 2>&1; then
	add_sources balloon-hint-src.sources 'Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg'
fi
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

PKGS=(
	build-essential gcc make bc flex bison libelf-dev kmod cpio
	busybox-static linux-image-amd64 linux-headers-amd64
	linux-source-6.1 sparse dkms
	qemu-system-x86 qemu-utils seabios ipxe-qemu
	dpkg-dev devscripts python3 python3-venv
	ninja-build meson pkg-config ccache libglib2.0-dev libpixman-1-dev
	zlib1g-dev libfdt-dev libslirp-dev libcap-ng-dev libattr1-dev
	python3-matplotlib xz-utils zstd gdb
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
# stays the system one (QEMU 7.2 builds with it).
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
cached_deb qemu-system-x86 1:10.0.2+ds-2+deb13u1~bpo12+1 >/dev/null
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
