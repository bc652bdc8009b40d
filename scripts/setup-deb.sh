#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Install, by name, what building balloon-hint's Debian packages needs and
# nothing more: debhelper, dh-dkms and dpkg-dev (dpkg-buildpackage,
# dpkg-deb, dpkg-shlibdeps), and dkms.  All are in Debian 12's main
# archive; no apt entry is added, no kernel, header or QEMU build
# dependency is installed.  Idempotent: a second run installs nothing.
#
#   scripts/setup-deb.sh        (make deb runs it; scripts/setup.sh too)
set -euo pipefail

say() { printf '[setup-deb] %s\n' "$*"; }

DEB_PKGS=(debhelper dh-dkms dpkg-dev dkms)

missing=()
for p in "${DEB_PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
if [ "$(id -u)" != 0 ]; then
	echo "setup-deb.sh: ${missing[*]} missing; run as root (apt-get)" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
say "apt-get update"
apt-get update -q >/dev/null
say "installing: ${missing[*]}"
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
