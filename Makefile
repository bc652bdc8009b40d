# SPDX-License-Identifier: GPL-2.0
# balloon-hint: top-level entry points.  `make demo` and `make check` do all
# setup themselves (idempotent apt-get of named packages) on Debian 12.
SHELL := /bin/bash
PY := /usr/bin/python3
INITRD := build/initramfs.cpio.gz
KVER ?= $(shell scripts/guest-kver.sh 2>/dev/null)

.PHONY: all setup qemu qemu-asan guest image lint check demo bench soak \
	reliability long clean

all: qemu guest image

setup:
	@bash scripts/setup.sh

# Our QEMU on both bases (build/qemu: 10.0, the default; build/qemu-7.2) and
# Debian's own QEMU 10.0 as the stock reference (build/stock-qemu-10.0).
qemu: setup
	@bash scripts/build-qemu.sh 10.0
	@bash scripts/build-qemu.sh 7.2
	@bash scripts/stock-qemu.sh

qemu-asan: setup
	@SANITIZE=1 bash scripts/build-qemu.sh 10.0
	@SANITIZE=1 bash scripts/build-qemu.sh 7.2

# make check SANITIZE=1: the hinting and fault tests against an ASan/UBSan
# build of our QEMU.
ifeq ($(SANITIZE),1)
check: qemu-asan
endif

guest: setup
	@$(MAKE) --no-print-directory -C guest KVER=$(shell scripts/guest-kver.sh)

image: guest
	@bash scripts/mk-initramfs.sh $(INITRD) guest/virtio_balloon.ko

lint: setup qemu
	@$(MAKE) --no-print-directory -C guest lint
	@$(PY) tests/run.py --tag lint

# All tests; the runner's last line is "N passed, N failed[, N skipped]".
check: qemu image
	@mkdir -p build/tmp
	@$(PY) tests/run.py $(if $(SANITIZE),--tag sanitize,$(if $(TAG),--tag $(TAG),--skip-tag long --skip-tag sanitize))

# Long runs kept out of `make check`: the full QEMU migration-test, the ten
# back-and-forth migrations.
long: qemu image
	@mkdir -p build/tmp
	@$(PY) tests/run.py --tag long

# The long data-safety soak: every data-loss scenario 20 times in a row.
soak: qemu image
	@mkdir -p build/tmp
	@REPEAT=$${REPEAT:-20} $(PY) scripts/soak.py

reliability: qemu image
	@mkdir -p build/tmp
	@$(PY) tests/run.py --tag reliability

demo: qemu image
	@mkdir -p build/tmp
	@$(PY) scripts/demo.py

bench: qemu image
	@mkdir -p build/tmp
	@$(PY) scripts/bench.py $(if $(QUICK),--quick) $(BENCH_ARGS)

clean:
	-@$(MAKE) --no-print-directory -C guest clean
	rm -rf build
