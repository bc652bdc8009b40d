# SPDX-License-Identifier: GPL-2.0
# Sourced by build-qemu.sh, check-series.sh and run-qtests.sh: the configure flags of our
# QEMU builds and the tools they run with.

cache=${BH_CACHE:-/var/cache/balloon-hint}

# The Debian packages' firmware folders (seabios, ipxe-qemu, qemu-system-data),
# searched by the binary without -L.
QEMU_FIRMWAREPATH=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu

# QEMU 10.0 needs meson >= 1.5; bookworm has 1.0.1.
# setup.sh unpacks bookworm-backports' meson into the cache; configure's
# Python venv sees it through PYTHONPATH (and, for ninja's re-runs of meson,
# through a .pth file in the venv).
BH_MESON_DIR=$cache/meson/usr/lib/python3/dist-packages

# The QEMU qtests scripts/run-qtests.sh runs, built with our binary.
QTEST_TARGETS=(tests/qtest/qos-test tests/qtest/qom-test
	       tests/qtest/device-introspect-test tests/qtest/migration-test)

# Configure flags of Debian's own qemu-system build of the same source
# package, so that our binary is a drop-in replacement for Debian's: the
# same devices, network backends, block drivers, displays and audio
# drivers.  Debian keeps them as comments in debian/control, read by its
# debian/extract-config-opts for linux-amd64; they are read here the same
# way from the source being built.  Left out, with the reason:
#   --enable-blkio   libblkio is not in Debian 12 (block drivers
#                    virtio-blk-vhost-user/-vdpa and io_uring via blkio only)
DEBIAN_CFG_DROP=(--enable-blkio)

debian_cfg() { # unpacked Debian source tree -> the flags on stdout
	local f
	[ -f "$1/debian/extract-config-opts" ] ||
		{ echo "no debian/extract-config-opts in $1" >&2; return 1; }
	sh "$1/debian/extract-config-opts" linux-amd64 "$1/debian/control" | tr ' ' '\n' |
	while read -r f; do
		[ -n "$f" ] || continue
		case " ${DEBIAN_CFG_DROP[*]} " in *" $f "*) continue ;; esac
		printf '%s\n' "$f"
	done
}

qemu_cfg() { # base, unpacked Debian source tree -> cfg[]
	local deb
	deb=$(debian_cfg "$2") || return 1
	# Debian's options for what the binary contains; ours for how it is
	# built: x86_64-softmmu only, devices built in rather than loadable
	# modules (one self-contained binary, the same device list as Debian's
	# binary with all its module packages), no tools, docs or guest agent.
	# shellcheck disable=SC2206
	cfg=(--target-list=x86_64-softmmu $deb
	     --disable-modules --disable-tools --disable-docs --disable-user
	     --disable-guest-agent --disable-xen --disable-xkbcommon
	     --disable-download --disable-werror --enable-trace-backends=log
	     --disable-install-blobs "--firmwarepath=$QEMU_FIRMWAREPATH")
	[ -d "$BH_MESON_DIR/mesonbuild" ] ||
		{ echo "meson >= 1.5 missing in $BH_MESON_DIR: run scripts/setup.sh" >&2; return 1; }
	export PYTHONPATH=$BH_MESON_DIR${PYTHONPATH:+:$PYTHONPATH}
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
