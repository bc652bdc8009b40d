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

# A deb-src entry is needed for 'apt-get source qemu'.
need_src=1
if grep -rqsE '^\s*deb-src\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null; then
	need_src=0
fi
if grep -rqsE '^\s*Types:.*deb-src' /etc/apt/sources.list.d/*.sources 2>/dev/null; then
	need_src=0
fi
if [ "$need_src" = 1 ]; then
	say "adding a deb-src entry for bookworm"
	cat > /etc/apt/sources.list.d/balloon-hint-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	rm -f /var/lib/balloon-hint/apt-updated
fi

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

# The guest kernel and its headers must be the same version.
kver=$("$(dirname "$0")/guest-kver.sh")
if [ ! -e "/lib/modules/$kver/build/Makefile" ]; then
	say "installing headers for guest kernel $kver"
	apt-get install -y -q --no-install-recommends "linux-headers-$kver" >/dev/null
fi

# checkpatch.pl comes from the kernel source tarball.
if [ ! -x /usr/src/linux-source-6.1/scripts/checkpatch.pl ]; then
	tarball=$(ls /usr/src/linux-source-6.1.tar.* 2>/dev/null | head -n1)
	say "unpacking scripts/ from $tarball"
	tar -C /usr/src -xf "$tarball" linux-source-6.1/scripts linux-source-6.1/.clang-format 2>/dev/null ||
		tar -C /usr/src -xf "$tarball" linux-source-6.1/scripts
fi
say "ready (guest kernel $kver)"
