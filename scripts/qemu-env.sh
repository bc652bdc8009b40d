# SPDX-License-Identifier: GPL-2.0
# Sourced by build-qemu.sh, check-series.sh and run-qtests.sh: the configure flags of our
# QEMU builds and the tools they run with.

cache=${BH_CACHE:-/var/cache/balloon-hint}

# The Debian packages' firmware folders (seabios, ipxe-qemu, qemu-system-data),
# searched by the binary without -L.
QEMU_FIRMWAREPATH=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu

# QEMU 10.0 needs meson >= 1.5; bookworm has 1.0.1, which 7.2 builds with.
# setup.sh unpacks bookworm-backports' meson into the cache; configure's
# Python venv sees it through PYTHONPATH (and, for ninja's re-runs of meson,
# through a .pth file in the venv).
BH_MESON_DIR=$cache/meson/usr/lib/python3/dist-packages

# The QEMU qtests scripts/run-qtests.sh runs, built with our binary.
QTEST_TARGETS=(tests/qtest/qos-test tests/qtest/qom-test
	       tests/qtest/device-introspect-test tests/qtest/migration-test)

qemu_cfg() { # base -> cfg[]
	cfg=(--target-list=x86_64-softmmu --disable-docs --disable-tools --disable-gtk
	     --disable-sdl --disable-vnc --disable-opengl --disable-spice --disable-curses
	     --disable-werror --disable-user --disable-guest-agent --disable-xen
	     --disable-capstone --disable-slirp --enable-trace-backends=log
	     "--firmwarepath=$QEMU_FIRMWAREPATH")
	if [ "$1" = 10.0 ]; then
		# Debian's +ds source carries no firmware blobs.
		cfg+=(--disable-install-blobs)
		[ -d "$BH_MESON_DIR/mesonbuild" ] ||
			{ echo "meson >= 1.5 missing in $BH_MESON_DIR: run scripts/setup.sh" >&2; return 1; }
		export PYTHONPATH=$BH_MESON_DIR${PYTHONPATH:+:$PYTHONPATH}
	fi
	qemu_cc=gcc
	if command -v ccache >/dev/null; then
		qemu_cc="ccache gcc"
		export CCACHE_DIR=$cache/ccache
	fi
}

qemu_venv_fixup() { # build dir
	local sp
	[ -n "${PYTHONPATH:-}" ] || return 0
	for sp in "$1"/pyvenv/lib/python3*/site-packages; do
		[ -d "$sp" ] && echo "$BH_MESON_DIR" > "$sp/balloon-hint-meson.pth"
	done
	return 0
}
