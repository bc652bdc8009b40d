# SPDX-License-Identifier: GPL-2.0
"""The debug guest kernel's reports fail a test.  On the debug kernel
(scripts/debug-kernel.sh: KASAN, lockdep, DEBUG_VM, lkdtm built in) a real
WARNING (lkdtm's WARNING: WARN_ON in kernel code) on the destination's
console, and a real KASAN report (lkdtm's READ_AFTER_FREE: a read of freed
slab memory) on the source's, each fail a hinted migration whose data is
intact.  lockdep's and RCU's splats head with WARNING lines of their own,
which the console scans match too.  These run only on the debug kernel
(tests/run.py: debug_only), as NAME[7.3-hbdebug]."""
import re

from hb.testlib import assert_not_intact, migrate, need_ours, our_qemu, tag
from hb.verdicts import KERNEL_ERROR_RE
from hb.workloads import Scenario

LKDTM = "/sys/kernel/debug/provoke-crash/DIRECT"
# lkdtm's WARN_ON, in 6.12's format ("WARNING: CPU: 0 PID: 1 at
# drivers/misc/lkdtm/bugs.c:N lkdtm_WARNING+...") and in 7.3's ("WARNING:
# drivers/misc/lkdtm/bugs.c:N at lkdtm_WARNING+..., CPU#0: sh/1")
LKDTM_WARNING = r"WARNING: .*lkdtm_WARNING"


def _provoke(vm, what):
    vm.guest.run(f"echo {what} > {LKDTM}", check=False)


def _run(label, **kw):
    need_ours()
    return migrate(label, src_bin=our_qemu(), balloon="ours", hint=True,
                   scenario=Scenario("stale", mem_mib=768), **kw)


@tag("migrate", "detector", "debug_only")
def test_detector_real_warning_on_destination_console():
    """lkdtm WARNING on the destination once its data is verified."""
    def destination(vm, _res):
        _provoke(vm, "WARNING")
        vm.wait_console(LKDTM_WARNING, 60)

    res = _run("debug-dst-warning", on_verified=destination)
    assert res["data_intact"] is True, res.get("verify")
    assert any(re.search(LKDTM_WARNING, ln) for ln in res["kernel_errors"]), \
        res["kernel_errors"]
    assert res["ok"] is False
    assert_not_intact(res, "a real WARNING on the destination")


@tag("migrate", "detector", "debug_only")
def test_detector_real_kasan_report_on_source_console():
    """lkdtm READ_AFTER_FREE on the source before it migrates: KASAN's
    report on its console fails the run."""
    def source(vm, _res):
        _provoke(vm, "READ_AFTER_FREE")
        vm.wait_console("BUG: KASAN: ", 60)

    res = _run("debug-src-kasan", on_source_ready=source)
    assert res["status"] == "completed", res.get("error")
    assert any("BUG: KASAN: " in ln for ln in res["src_console_errors"]), \
        res["src_console_errors"]
    assert res["ok"] is False
    # The report is in the guest's log buffer, which migrates too: the
    # destination's dmesg names it first, the source's console as well
    msg = assert_not_intact(res, "a KASAN report on the source")
    assert "BUG: KASAN: " in msg, msg
    # lockdep's own headers match the same scan
    for line in ("WARNING: possible circular locking dependency detected",
                 "WARNING: inconsistent lock state",
                 "WARNING: suspicious RCU usage",
                 # 7.3's WARN(), with and without the file it is in
                 "WARNING: mm/page_alloc.c:4711 at __alloc_pages+0x1/0x2, "
                 "CPU#1: kworker/1:1/42",
                 "WARNING: at __alloc_pages+0x1/0x2, CPU#1: kworker/1:1/42",
                 "WARNING: guest/vb_fault.c:117 at vb_fault_walk_delay+0x1/0x2 "
                 "[virtio_balloon], CPU#0: cat/173"):
        assert KERNEL_ERROR_RE.search(line), line
