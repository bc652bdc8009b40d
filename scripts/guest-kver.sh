#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Print the version of a Debian guest kernel (linux-image-*-amd64), never the
# host's 'uname -r'.
#
#   guest-kver.sh         the newest installed kernel that has its headers
#                         (the default guest kernel: 6.12 once setup ran),
#                         else the newest installed kernel image
#   guest-kver.sh 6.1     the newest installed 6.1.x kernel (likewise 6.12)
set -euo pipefail
series=${1:-}
imgs=$(ls /boot/vmlinuz-*-amd64 2>/dev/null | sed 's|/boot/vmlinuz-||' | sort -V)
if [ -n "$series" ]; then
	imgs=$(printf '%s\n' $imgs | grep -E "^${series//./\\.}[.-]" || true)
fi
best=
for v in $imgs; do
	[ -e "/lib/modules/$v/build/Makefile" ] && best=$v
done
[ -n "$best" ] || best=$(printf '%s\n' $imgs | tail -n1)
[ -n "$best" ] || { echo "guest-kver.sh: no linux-image-${series:+$series*}-amd64 installed" >&2; exit 1; }
echo "$best"
