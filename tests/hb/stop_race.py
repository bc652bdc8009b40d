# SPDX-License-Identifier: GPL-2.0
"""Fixture: make the race between a hint batch and the end of its round
certain.

A batch of free page hints sets S_STOP when it pops the guest's stop, then
clears the ranges it collected, under bitmap_mutex.  If the bitmap sync
that ends the round could run before those clears, it would collect the
guest's writes to hinted pages and the late clears would drop them.  In a
normal run that needs the migration thread to win bitmap_mutex against the
waiting balloon iothread (rare).  Here gdb, in non-stop mode, holds the
iothread for `hold` seconds at the entry of every
qemu_guest_free_page_hint_batch() (the other threads keep running) while
the guest allocates and writes 64 MiB/s.  A QEMU whose round stop waits for
the batch loses nothing; one that does not loses the writes
(Documentation/data-safety.md).
"""
import os
import subprocess
import tempfile

from .env import BUILD
from .gdb import NonStopGdb
from .migration import start_migration, wait_migration
from .vm import VM, device_counters
from .workloads import (HBWORK_PIDS, Scenario, start_churn, stop_churn,
                        wait_guest)

HOLD_SCRIPT = '''python
import gdb, time
class Hold(gdb.Breakpoint):
    def stop(self):
        time.sleep(%(hold)s)
        return False
Hold("qemu_guest_free_page_hint_batch")
end
'''


def one_run(qemu, hold, wd):
    """One migration under the held batches.  Returns (bad pages or None,
    description, ok)."""
    mig = os.path.join(wd, "mig.sock")
    src = VM(wd, "src", qemu, 512, "ours", True)
    dst = VM(wd, "dst", qemu, 512, "ours", True, incoming=f"unix:{mig}")
    gdb = None
    try:
        src.boot()
        g = src.guest
        # stale free memory, so the rounds report a lot
        g.hbwork("fill 300 7")
        gdb = NonStopGdb(src.machine.get_pid(), wd,
                         HOLD_SCRIPT % {"hold": hold})
        start_churn(g, Scenario("churn", mem_mib=512))
        # the churn runs before the migration starts
        pids = HBWORK_PIDS.format(verb="churn")
        wait_guest(g, f'test -n "$({pids})"', "hbwork churn did not start")
        dst.launch()
        start_migration(src, dst, 10 << 30, 300)
        info = wait_migration(src, 300)
        counters = device_counters(src) or {}
        src.end()
        if info.get("status") != "completed":
            return None, f"migration {info.get('status')}", False
        dst.guest.connect()
        res = stop_churn(dst.guest)[0] or {}
        errs = (dst.kernel_errors() + src.kernel_errors() +
                src.qemu_errors() + dst.qemu_errors())
        hinted = counters.get("cleared-pages", 0) > 0
        ok = (res.get("ok") == 1 and res.get("bad_pages") == 0
              and not errs and hinted)
        return res.get("bad_pages"), (
            f"{info['ram']['transferred'] // 10**6} MB, "
            f"batches={counters.get('batches')} "
            f"cleared={counters.get('cleared-pages')} "
            f"churn ok={res.get('ok')} written={res.get('mib_written')} MiB"
            f"{' ERRORS: ' + str(errs[:3]) if errs else ''}"), ok
    finally:
        src.end()
        dst.end()
        if gdb:
            gdb.kill()


def run(qemu, hold, runs):
    """`runs` migrations; returns (pages lost, runs failed, report lines)."""
    lost = failed = 0
    lines = []
    for i in range(runs):
        wd = tempfile.mkdtemp(prefix="hb-race-",
                              dir=os.path.join(BUILD, "tmp"))
        bad, what, ok = one_run(qemu, hold, wd)
        lines.append(f"run {i + 1}: {'ok' if ok else 'FAILED'}: bad pages "
                     f"{bad}: {what} ({wd})")
        print("    " + lines[-1], flush=True)
        lost += bad or 0
        failed += not ok
        if ok:
            subprocess.call(["rm", "-rf", wd])
    return lost, failed, lines
