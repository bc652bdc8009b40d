# SPDX-License-Identifier: GPL-2.0
# balloon-hint: top-level entry points.  `make demo` and `make check` do all
# setup themselves (idempotent apt-get of named packages) on Debian 12.
SHELL := /bin/bash
PY := /usr/bin/python3
INITRD := build/initramfs.cpio.gz
KVER ?= $(shell scripts/guest-kver.sh 2>/dev/null)

.PHONY: all setup qemu qemu-10.2 qemu-asan guest image images debug-kernel deb host-deb \
	lint check demo bench soak reliability long kernels debug-check clean

all: qemu guest images

setup:
	@bash scripts/setup.sh

# Our QEMU 10.0 (build/qemu), Debian's own QEMU 10.0 as the stock
# reference (build/stock-qemu-10.0) and Debian's newest QEMU, 11.1, as a
# stock fleet peer run in the Debian 13 root (build/stock-qemu-11.1).
# SANITIZE is the ASan build's (qemu-asan): these are the plain builds.
qemu: setup
	@SANITIZE= bash scripts/build-qemu.sh 10.0
	@bash scripts/stock-qemu.sh
	@bash scripts/stock-qemu-11.sh

# The series on QEMU 10.2, the base it is posted against upstream
# (build/qemu-10.2), and the stock build of the same Debian source
# (build/stock-qemu-10.2); `make check` runs the tests tagged
# upstream_base on them.
qemu-10.2: setup
	@SANITIZE= bash scripts/build-qemu.sh 10.2
	@SANITIZE= bash scripts/build-qemu.sh stock-10.2

qemu-asan: setup
	@SANITIZE=1 bash scripts/build-qemu.sh 10.0

# guest/virtio_balloon.ko for KVER (default: the newest guest kernel with
# headers), as `make install` and DKMS build it: no fault injection.
guest: setup
	@$(MAKE) --no-print-directory -C guest KVER=$(KVER)

# The test image of KVER: build/initramfs-KVER.cpio.gz with the test build
# of our driver (fault injection on), built in its own copy of the source
# (build/mod-KVER) so both kernels' modules coexist.  Only the files that
# changed are copied there, so kbuild recompiles only what they touch.  The
# default kernel's image is also build/initramfs.cpio.gz.  `make image
# KVER=$(scripts/guest-kver.sh 6.1)` builds the 6.1 one; `make images` both
# series, and guest/virtio_balloon.ko for the default kernel.
DEFAULT_KVER := $(shell scripts/guest-kver.sh 2>/dev/null)
MODDIR = build/mod-$(KVER)
MODSRC = guest/Kbuild guest/Makefile guest/dkms.conf guest/scan-validated-kernels \
	$(filter-out %.mod.c,$(wildcard guest/*.c)) $(wildcard guest/*.h) \
	$(wildcard include/*.h)
# A kernel whose headers this machine cannot use (Debian 13's 7.3: gcc-14,
# its kbuild) has none here: its module is built in the Debian 13 root
# (scripts/root-module.sh).
BH_CACHE ?= /var/cache/balloon-hint
HOST_KBUILD = $(firstword $(wildcard /lib/modules/$(KVER)/build/Makefile \
	$(BH_CACHE)/kernels/$(KVER)/build/Makefile))
image: setup
	@mkdir -p $(MODDIR)/guest $(MODDIR)/include
	@for f in $(MODSRC); do \
		cmp -s $$f $(MODDIR)/$$f || cp $$f $(MODDIR)/$$f || exit 1; \
	done
	@if [ -n "$(HOST_KBUILD)" ]; then \
		nice -n 10 $(MAKE) --no-print-directory -C $(MODDIR)/guest KVER=$(KVER) \
			VB_FAULT_INJECT=y >/dev/null; \
	else \
		nice -n 10 bash scripts/root-module.sh $(KVER) $(MODDIR) \
			VB_FAULT_INJECT=y >/dev/null; \
	fi
	@KVER=$(KVER) bash scripts/mk-initramfs.sh build/initramfs-$(KVER).cpio.gz \
		$(MODDIR)/guest/virtio_balloon.ko
	@bash scripts/mk-boot-image.sh $(KVER) build/vmlinux-$(KVER)
	@if [ "$(KVER)" = "$(DEFAULT_KVER)" ]; then \
		ln -sf initramfs-$(KVER).cpio.gz $(INITRD); fi

# Debian 13's 7.3 flavours when setup made the Debian 13 root, and the
# debug kernel (which `images` builds first), both looked up when the
# recipe runs.
IMAGE_SERIES = 6.1 6.12 \
	$(if $(wildcard $(BH_CACHE)/trixie-root/.balloon-hint-root),7.3 7.3-rt 7.3-cloud) \
	$(if $(wildcard $(BH_CACHE)/kernels/*-hbdebug*/.complete),7.3-hbdebug)
images: setup guest debug-kernel
	@for s in $(IMAGE_SERIES); do \
		$(MAKE) --no-print-directory image KVER=$$(scripts/guest-kver.sh $$s) || exit 1; \
	done

# The debug guest kernel from Debian's linux-source-7.3 (KASAN, lockdep,
# DEBUG_VM, fault injection, memory hot-remove, CMA, page reporting:
# scripts/debug-kernel.config), built in the Debian 13 root with ccache at
# nice 19, once per source version and fragment (scripts/debug-kernel.sh);
# then `make images` builds its test image and the runner its runs.
debug-kernel: setup
	@bash scripts/debug-kernel.sh

# The guest driver as a DKMS package, built with dh-dkms in a scratch copy
# (build/deb/work): build/deb/balloon-hint-dkms_<version>_all.deb, the
# version being PACKAGE_VERSION of guest/dkms.conf (scripts/mk-deb.sh).
# It needs only the packaging tools (scripts/setup-deb.sh), not setup.
deb:
	@bash scripts/setup-deb.sh
	@bash scripts/mk-deb.sh

# Our QEMU as a Debian package that installs beside Debian's QEMU:
# build/deb/balloon-hint-qemu_<version>_amd64.deb, the binary in
# /usr/lib/balloon-hint/ (scripts/mk-host-deb.sh, Documentation/libvirt.md).
host-deb: setup
	@bash scripts/build-qemu.sh 10.0
	@bash scripts/mk-host-deb.sh

lint: setup qemu
	@for s in 6.1 6.12; do \
		$(MAKE) --no-print-directory -C guest lint \
			KVER=$$(scripts/guest-kver.sh $$s) || exit 1; done
	@$(PY) tests/run.py --tag lint

# All tests but the long ones and the build of every prefix of the QEMU
# series (`make lint`); the runner's last line is
# "N passed, N failed[, N skipped]".  TAG=name: only the tests with that tag.
# SANITIZE=1: the tests tagged `sanitize` (faults, bad input, properties,
# the switch-over rule, later rounds, a cancel with the destination stopped,
# the sanitizer detector) against the ASan/UBSan build of our QEMU 10.0;
# every QEMU quits gracefully at the end of its test, so that
# LeakSanitizer checks it, and a test fails on any sanitizer report.
ASAN_QEMU := build/qemu-asan/qemu-system-x86_64
ifeq ($(SANITIZE),1)
CHECK_DEPS := qemu-asan
CHECK_ENV := HB_SANITIZE=1 HB_OUR_QEMU=$(CURDIR)/$(ASAN_QEMU)
CHECK_ARGS := --tag sanitize
else
CHECK_ARGS := $(if $(TAG),--tag $(TAG),--skip-tag long --skip-tag series)
# A publishing run writes check.json itself: tests/test_01_results.py then
# checks that the summary it will write is of HEAD (a clean tree).
ifeq ($(PUBLISH)$(TAG),1)
CHECK_ENV := HB_PUBLISH_CHECK=1
endif
endif

# PUBLISH=1 (a whole run, no TAG): summarise it into
# Documentation/results/check.json and README.md's result block.
check: qemu qemu-10.2 images $(CHECK_DEPS)
	@mkdir -p build/tmp
	@$(CHECK_ENV) $(PY) tests/run.py $(CHECK_ARGS); rc=$$?; \
	if [ "$(PUBLISH)" = 1 ] && [ -z "$(TAG)$(SANITIZE)" ]; then \
		$(PY) scripts/results.py publish-check || rc=1; fi; exit $$rc

# Long runs kept out of `make check`: the full QEMU migration-test with its
# baseline, the ten back-and-forth migrations, the stock reference runs.
long: qemu images
	@mkdir -p build/tmp
	@$(PY) tests/run.py --tag long

# The long data-safety soak: every data-loss scenario 20 times in a row.
soak: qemu images
	@mkdir -p build/tmp
	@REPEAT=$${REPEAT:-20} $(PY) scripts/soak.py

# Every each_kernel test on Linux 7.3 and 7.3-rt (make check runs the
# kernel subset there), on the debug kernel once it is built, and the
# driver contract of test_45 on 6.1 as well as 6.12 (make check runs its
# hinted migration and modes on 6.1).
kernels: qemu images
	@mkdir -p build/tmp
	@HB_KERNEL_MATRIX=full $(PY) tests/run.py --tag each_kernel --tag debug_only -k '[7.3' -k 'test_45_guest_contract.'

# The debug kernel's subset (`make debug-kernel` builds it): a round in
# each mode, memory offline during a walk, suspend, a fault, bad input and
# a migration with churn, KASAN and lockdep watching, and the detectors
# that show a splat fails a test.
debug-check: qemu images
	@mkdir -p build/tmp
	@test -n "$$(bash scripts/debug-kernel.sh kver)" || \
		{ echo "no debug kernel: make debug-kernel" >&2; exit 1; }
	@HB_KERNEL_MATRIX=debug $(PY) tests/run.py --tag debug_kernel --tag debug_only -k '[7.3-hbdebug]'

reliability: qemu images
	@mkdir -p build/tmp
	@$(PY) tests/run.py --tag reliability

demo: qemu images
	@mkdir -p build/tmp
	@$(PY) scripts/demo.py

# Each stack side by side with its stock pair; STACKS=10.0 for one.
STACKS ?= 10.0
bench: qemu $(if $(filter 10.2,$(STACKS)),qemu-10.2) images
	@mkdir -p build/tmp
	@for s in $(STACKS); do \
		$(PY) scripts/bench --stack $$s $(if $(QUICK),--quick) $(BENCH_ARGS) || exit 1; \
	done

clean:
	-@$(MAKE) --no-print-directory -C guest clean
	rm -rf build
