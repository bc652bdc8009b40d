# SPDX-License-Identifier: GPL-2.0
"""Fixture: make the race between a hint batch and the end of its round
certain.

The iothread clears a batch of free page hints under bitmap_mutex, which
the migration thread holds while it sends.  If the bitmap sync that ends
the batch's round ran before that clear and the clear still went ahead, the
sync would collect the guest's writes to hinted pages and the late clear
would drop them.  Our QEMU stops the round (bumping its generation) before
the sync, and the clear, under bitmap_mutex, drops a batch whose round
generation moved on (virtio_balloon_free_page_batch_valid()).  In a normal
run a clear that late needs the migration thread to win bitmap_mutex
against the waiting iothread (rare).  Here gdb, in non-stop mode, holds
the iothread for `hold` seconds at the entry of every batch clear (the
function of CLEAR_FUNCS the binary has; the other threads keep running)
while the guest allocates and writes 64 MiB/s.  Every run proves its
premise: the holds happened (HB-HOLD lines in gdb's log) and, over the
runs, a held batch came after the sync that ended its round (the device
counted its hints as stale).

`forge=True` turns the check off: gdb makes the batch's generation the
round's each time the check runs, so a late clear goes ahead, as in a
device without it.  The same runs then lose the churn's writes
(Documentation/data-safety.md, section 8).
"""
import os
import subprocess
import tempfile

from .env import BUILD
from .gdb import NonStopGdb, first_symbol
from .migration import start_migration, wait_migration
from .vm import VM, device_counters
from .workloads import (HBWORK_PIDS, Scenario, start_churn, stop_churn,
                        wait_guest)

# The function that clears a batch's ranges (its entry holds no lock), in
# the order looked for: the series' checked clear, then the older one.
CLEAR_FUNCS = ("qemu_guest_free_page_hint_batch_checked",
               "qemu_guest_free_page_hint_batch")
# The device's check of a batch's round, run under bitmap_mutex
VALID_FUNC = "virtio_balloon_free_page_batch_valid"

HOLD_SCRIPT = '''python
import gdb, time
class Hold(gdb.Breakpoint):
    def stop(self):
        gdb.write("HB-HOLD\\n")
        time.sleep(%(hold)s)
        return False
class Forge(gdb.Breakpoint):
    def stop(self):
        s = "((VirtIOBalloon *)opaque)"
        gdb.execute(f"set var {s}->free_page_batch_gen = "
                    f"{s}->free_page_round_gen")
        gdb.write("HB-FORGED\\n")
        return False
Hold("%(clear)s")
if %(forge)s:
    Forge("%(valid)s")
end
'''


def one_run(qemu, hold, wd, forge=False):
    """One migration under the held batches.  Returns (bad pages or None,
    description, ok, holds, ranges dropped as stale)."""
    mig = os.path.join(wd, "mig.sock")
    src = VM(wd, "src", qemu, 512, "ours", True)
    dst = VM(wd, "dst", qemu, 512, "ours", True, incoming=f"unix:{mig}")
    gdb = None
    try:
        src.boot()
        g = src.guest
        # stale free memory, so the rounds report a lot
        g.hbwork("fill 300 7")
        script = HOLD_SCRIPT % {"hold": hold, "clear": first_symbol(
            qemu, CLEAR_FUNCS, "batch clear function"),
                                "forge": forge, "valid": VALID_FUNC}
        gdb = NonStopGdb(src.machine.get_pid(), wd, script)
        start_churn(g, Scenario("churn", mem_mib=512))
        # the churn runs before the migration starts
        pids = HBWORK_PIDS.format(verb="churn")
        wait_guest(g, f'test -n "$({pids})"', "hbwork churn did not start")
        dst.launch()
        start_migration(src, dst, 10 << 30, 300)
        info = wait_migration(src, 300)
        counters = device_counters(src) or {}
        src.end()
        log = gdb.text()
        holds = log.count("HB-HOLD")
        stale = counters.get("ignored-stale", 0)
        if forge:
            assert "HB-FORGED" in log or not holds, \
                f"the check was not forged: {log[-1000:]}"
        if info.get("status") != "completed":
            return (None, f"migration {info.get('status')}", False, holds,
                    stale)
        dst.guest.connect()
        res = stop_churn(dst.guest)[0] or {}
        errs = (dst.kernel_errors() + src.kernel_errors() +
                src.qemu_errors() + dst.qemu_errors())
        hinted = counters.get("cleared-pages", 0) > 0
        ok = (res.get("ok") == 1 and res.get("bad_pages") == 0
              and not errs and hinted)
        return res.get("bad_pages"), (
            f"{info['ram']['transferred'] // 10**6} MB, "
            f"batches={counters.get('batches')} holds={holds} "
            f"cleared={counters.get('cleared-pages')} stale={stale} "
            f"churn ok={res.get('ok')} written={res.get('mib_written')} MiB"
            f"{' ERRORS: ' + str(errs[:3]) if errs else ''}"), ok, holds, \
            stale
    finally:
        src.end()
        dst.end()
        if gdb:
            gdb.kill()


def run(qemu, hold, runs, forge=False, until_lost=False, first=1):
    """`runs` migrations, numbered from `first` (until_lost: stop after
    the first that lost pages); returns (pages lost, runs failed, report
    lines, runs whose batches were never held, ranges dropped as stale in
    all)."""
    lost = failed = unheld = stale = 0
    lines = []
    for i in range(runs):
        wd = tempfile.mkdtemp(prefix="hb-race-",
                              dir=os.path.join(BUILD, "tmp"))
        bad, what, ok, holds, st = one_run(qemu, hold, wd, forge)
        unheld += not holds
        stale += st
        lines.append(f"run {first + i}: {'ok' if ok else 'FAILED'}: bad pages "
                     f"{bad}: {what} ({wd})")
        print("    " + lines[-1], flush=True)
        lost += bad or 0
        failed += not ok
        if ok or forge:
            subprocess.call(["rm", "-rf", wd])
        if until_lost and bad:
            break
    return lost, failed, lines, unheld, stale
