#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Print the version of the newest installed Debian guest kernel
# (linux-image-*-amd64) that also has its headers installed, else the newest
# installed kernel image.  Never the host's 'uname -r'.
set -euo pipefail
best=
for img in /boot/vmlinuz-*-amd64; do
	[ -e "$img" ] || continue
	v=${img#/boot/vmlinuz-}
	if [ -e "/lib/modules/$v/build/Makefile" ]; then
		best=$v
	fi
done
if [ -z "$best" ]; then
	best=$(ls /boot/vmlinuz-*-amd64 2>/dev/null | sed 's|/boot/vmlinuz-||' | sort -V | tail -n1)
fi
[ -n "$best" ] || { echo "guest-kver.sh: no linux-image-*-amd64 installed" >&2; exit 1; }
echo "$best"
