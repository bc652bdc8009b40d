# SPDX-License-Identifier: GPL-2.0
"""What fails a run when a console or a QEMU's output shows it: the
patterns of kernel errors, QEMU errors, the errors of a migration broken
on purpose, sanitizer reports and the test guest's own setup errors.
hb.vm.GuestOutput reads a guest's console and its QEMU's output with
them; a destination's dmesg is scanned with KERNEL_ERROR_RE too
(hb.workloads.verify_guest)."""

import re

# Anything the destination kernel prints that means its memory is not what
# the source's was.  A single match fails a migration test.
KERNEL_ERROR_RE = re.compile(
    r"(BUG:|kernel BUG|Oops|list_del corruption|list_add corruption|"
    r"Kernel panic|general protection fault|WARNING: CPU|Bad page state|"
    r"Bad page map|unable to handle|Unable to handle|slab.*corrupt|"
    r"double fault|invalid opcode:|stack-protector|Corrupted low memory|"
    # lockdep's and RCU's reports (a debug kernel's: PROVE_LOCKING) head
    # their splat with a WARNING line of their own, without "CPU"
    r"WARNING: (?:possible |inconsistent lock|suspicious RCU|bad unlock|"
    r"held lock|lock held|[A-Z]+IRQ-)|UBSAN:|"
    # a WARN() since 7.x: "WARNING: FILE:LINE at FUNC+OFF/LEN, CPU#N: ...",
    # or "WARNING: at FUNC+OFF/LEN, CPU#N: ..." where it knows no file; a
    # module's function is "FUNC+OFF/LEN [MODULE]"
    r"WARNING: (?:\S+:\d+ )?at \S+(?: \[\S+\])?, CPU#)")

# What QEMU prints on stderr when a device or QEMU itself went wrong: any
# error_report() line ("qemu-system-x86_64: ...", virtio_error() among
# them; not warnings), a virtio ring error, an assertion, a crash, an
# ASan/UBSan report.  A single match fails a migration test; tests that
# provoke one on purpose say which lines they expect (VM.allow_errors).
QEMU_ERROR_RE = re.compile(
    # a warning, also one about an option ("...: -mon ...: warning: ...",
    # as QEMU 11.1 prints for the -mon that QEMU's Python package passes)
    r"(^qemu-system-[^:\s]+: (?!(?:-[^:]*: )?warning: |terminating on signal)|"
    r"virtio: |Assertion|Segmentation|core dumped|"
    r"ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|"
    r"SUMMARY: \w+Sanitizer)")
# What a QEMU prints when its migration was cancelled, failed, or lost its
# peer: expected on both ends of a migration a test breaks on purpose.
MIGRATION_FAULT_RE = (r"migration|[Ss]ocket|Broken pipe|Connection reset|"
                      r"Input/output error|load of migration failed|"
                      r"Unable to write|Failed to load|error while loading "
                      r"state|Early end of file|[Ss]ection|savevm|loadvm|"
                      r"vmstate|failed to save SaveStateEntry")
SANITIZER_RE = re.compile(r"(ERROR: AddressSanitizer|runtime error:|"
                          r"ERROR: LeakSanitizer|SUMMARY: \w+Sanitizer)")

# What the test guest's /init prints when its own setup went wrong (a
# module that did not load): the boot fails.
GUEST_ERROR_RE = re.compile(r"HB ERROR")
