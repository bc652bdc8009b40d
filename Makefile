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

qemu: setup
	@bash scripts/build-qemu.sh

qemu-asan: setup
	@SANITIZE=1 bash scripts/build-qemu.sh

guest: setup
	@$(MAKE) --no-print-directory -C guest KVER=$(KVER)

image: guest
	@bash scripts/mk-initramfs.sh $(INITRD) guest/virtio_balloon.ko

lint: setup qemu
	@$(MAKE) --no-print-directory -C guest lint
	@$(PY) tests/run.py --tag lint

# All tests but the long ones; the runner's last line is
# "N passed, N failed[, N skipped]".  TAG=name: only the tests with that tag.
# SANITIZE=1: the tests tagged `sanitize` (hinting, faults, bad input)
# against the ASan/UBSan build of our QEMU; every test fails on a sanitizer
# report in a QEMU's stderr.
ASAN_QEMU := build/qemu-asan/qemu-system-x86_64
ifeq ($(SANITIZE),1)
CHECK_DEPS := qemu-asan
CHECK_ENV := HB_OUR_QEMU=$(CURDIR)/$(ASAN_QEMU)
CHECK_ARGS := --tag sanitize
else
CHECK_ARGS := $(if $(TAG),--tag $(TAG),--skip-tag long)
endif

check: qemu image $(CHECK_DEPS)
	@mkdir -p build/tmp
	@$(CHECK_ENV) $(PY) tests/run.py $(CHECK_ARGS)

# Long runs kept out of `make check`: the full QEMU migration-test with its
# baseline, the ten back-and-forth migrations, the stock reference runs.
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
	@$(PY) scripts/bench $(if $(QUICK),--quick) $(BENCH_ARGS)

clean:
	-@$(MAKE) --no-print-directory -C guest clean
	rm -rf build
