#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Print the version of a Debian guest kernel, never the host's 'uname -r'.
# Guest kernels are linux-image-* packages unpacked by setup under
# $BH_CACHE/kernels/KVER (never installed into the host).
#
#   guest-kver.sh         the newest guest kernel that has its headers
#                         (the default guest kernel: 6.12 once setup ran),
#                         else the newest guest kernel
#   guest-kver.sh 6.1     the newest 6.1.x guest kernel (likewise 6.12, 7.3, 7.3-rt,
#                         7.3-cloud, 7.3-hbdebug: the debug kernel)
set -euo pipefail
series=${1:-}
kernels=${BH_CACHE:-/var/cache/balloon-hint}/kernels
imgs=$(ls "$kernels"/*/boot/vmlinuz-* 2>/dev/null | sed 's|.*/boot/vmlinuz-||' | sort -V)
case "$series" in
*-*)	flavour=${series#*-}; series=${series%%-*} ;;
*)	flavour= ;;
esac
# A flavour (rt, cloud, hbdebug) is asked for by name; without one, the
# generic amd64.
if [ -n "$flavour" ]; then
	imgs=$(printf '%s\n' $imgs | grep -E -- "-$flavour(-amd64)?\$" || true)
else
	imgs=$(printf '%s\n' $imgs | grep -vE -- '-(rt|cloud)-amd64$|-hbdebug(-amd64)?$' || true)
fi
if [ -n "$series" ]; then
	imgs=$(printf '%s\n' $imgs | grep -E "^${series//./\\.}[.-]" || true)
fi
best=
for v in $imgs; do
	[ -e "$kernels/$v/build/Makefile" ] || [ -e "/lib/modules/$v/build/Makefile" ] && best=$v
done
[ -n "$best" ] || best=$(printf '%s\n' $imgs | tail -n1)
[ -n "$best" ] || { echo "guest-kver.sh: no ${series:+$series }guest kernel under $kernels (run scripts/setup.sh)" >&2; exit 1; }
echo "$best"
