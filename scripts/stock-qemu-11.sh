#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Debian's newest QEMU, 11.1 (trixie-backports qemu-system-x86 with the
# packages that hold its modules, as `apt install qemu-system-x86` brings
# them), installed into the Debian 13 root (scripts/trixie-root.sh), never
# into the host, as a stock fleet peer: build/stock-qemu-11.1/
# qemu-system-x86_64 is a wrapper that runs it there with its own
# libraries, modules and firmware.  The wrapper execs through, so the
# process that starts it is QEMU's (its PID is QEMU's); the root sees this
# tree and the guest kernels at their own paths, so every path of a test's
# command line means the same inside, and every mount it makes is private
# to that process and ends with it.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${BH_CACHE:-/var/cache/balloon-hint}
out=$top/build/stock-qemu-11.1
suite=trixie-backports
pkgs=(qemu-system-x86 qemu-system-common qemu-system-data qemu-system-gui
      qemu-system-modules-spice qemu-system-modules-opengl qemu-block-extra
      seabios)
say() { printf '[stock-qemu-11.1] %s\n' "$*"; }

bash "$top/scripts/trixie-root.sh" make
root=$(bash "$top/scripts/trixie-root.sh" path)
# With -t: their dependencies too come from the backport's suite where
# it needs newer ones (libcurl and its own dependencies).
if ! bash "$top/scripts/trixie-root.sh" run dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null |
		grep -q '^1:11\.1\.'; then
	say "installing into the Debian 13 root: ${pkgs[*]} ($suite)"
	bash "$top/scripts/trixie-root.sh" run apt-get install -y -q -t "$suite" "${pkgs[@]}" >/dev/null
fi
version=$(bash "$top/scripts/trixie-root.sh" run dpkg-query -W -f='${Version}' qemu-system-x86)
case "$version" in
1:11.1.*) ;;
*) echo "stock-qemu-11.sh: the root's qemu-system-x86 is $version, not 11.1" >&2; exit 1 ;;
esac

mkdir -p "$out.new"
cat > "$out.new/qemu-system-x86_64" <<WRAP
#!/bin/sh
# Debian's qemu-system-x86 $version, run in the Debian 13 root
# (made by scripts/stock-qemu-11.sh).
exec unshare --mount --propagation private -- /bin/sh -c '
	set -e
	r=\$1; shift
	mount -t proc proc "\$r/proc"
	mount -t sysfs sysfs "\$r/sys"
	mount --rbind /dev "\$r/dev"
	for d in "$top" "$cache/kernels"; do
		mkdir -p "\$r\$d"
		mount --bind "\$d" "\$r\$d"
	done
	exec chroot "\$r" /usr/bin/qemu-system-x86_64 "\$@"' sh "$root" "\$@"
WRAP
chmod 0755 "$out.new/qemu-system-x86_64"
echo "$version" > "$out.new/VERSION"
"$out.new/qemu-system-x86_64" --version | head -n1 | grep -q "version 11\.1" ||
	{ echo "stock-qemu-11.sh: the wrapper does not run QEMU 11.1" >&2; exit 1; }
rm -rf "$out"
mv "$out.new" "$out"
say "$out/qemu-system-x86_64 ($version, in $root)"
