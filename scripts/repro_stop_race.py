#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Reproduce, on demand, the race fixed in patch 4 (data-safety.md §8).

A batch of free page hints sets S_STOP when it pops the guest's stop, then
clears the ranges it collected, under bitmap_mutex.  If the bitmap sync
that ends the round can run before those clears, it collects the guest's
writes to reported pages and the late clears drop them.  In a normal run
that needs the migration thread to win bitmap_mutex against the waiting
balloon iothread (1 in ~150 migrations).  This script makes it certain:
gdb, in non-stop mode, holds the iothread for HOLD seconds at the entry of
every qemu_guest_free_page_hint_batch() (other threads keep running) while
a guest allocates and writes 64 MiB/s.  A QEMU whose round stop waits for
the batch loses nothing; one that does not loses the writes.

  scripts/repro_stop_race.py QEMU [HOLD_S] [RUNS]

Prints one line per run, then "lost pages: N; runs failed: F of R"; exit 1
if a run lost data, printed a kernel error or did not complete.  Measured
(HOLD 0.06-0.12 s): series key 9da4c3b3b2da2966 (before the fix) failed 6
of 11 runs (548-766 pages lost each, one run with destination kernel
errors); 2ef5a4104a6d501c (fixed) 0 of 9.
"""
import os
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(TOP, "tests"))
from hb import harness  # noqa: E402

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
    mig = os.path.join(wd, "mig.sock")
    src = harness.VM(wd, "src", qemu, 512, "ours", True)
    dst = harness.VM(wd, "dst", qemu, 512, "ours", True,
                     incoming=f"unix:{mig}")
    gdb = None
    try:
        src.boot()
        g = src.guest
        # stale free memory, so the rounds report a lot
        g.hbwork("fill 300 7")
        gdb = harness.NonStopGdb(src.machine.get_pid(), wd,
                                 HOLD_SCRIPT % {"hold": hold})
        g.run("hbwork churn 64 0 64 > /tmp/churn.out 2>&1 &")
        time.sleep(0.3)
        dst.launch()
        harness.start_migration(src, dst, 10 << 30, 300)
        info = harness.wait_migration(src, 300)
        counters = harness.device_counters(src) or {}
        src.kill()
        if info.get("status") != "completed":
            return None, f"migration {info.get('status')}", False
        dst.guest.connect()
        res = harness.stop_churn(dst.guest)[0] or {}
        errs = dst.kernel_errors()
        ok = res.get("ok") == 1 and res.get("bad_pages") == 0 and not errs
        return res.get("bad_pages"), (
            f"{info['ram']['transferred'] // 10**6} MB, "
            f"batches={counters.get('batches')} "
            f"cleared={counters.get('cleared-pages')} "
            f"churn ok={res.get('ok')} written={res.get('mib_written')} MiB"
            f"{' KERNEL ERRORS' if errs else ''}"), ok
    finally:
        src.kill()
        dst.kill()
        if gdb:
            gdb.kill()


def main():
    qemu = sys.argv[1]
    hold = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    lost = failed = 0
    for i in range(runs):
        wd = tempfile.mkdtemp(prefix="hb-race-",
                              dir=os.path.join(harness.BUILD, "tmp"))
        bad, what, ok = one_run(qemu, hold, wd)
        print(f"run {i + 1}: {'ok' if ok else 'FAILED'}: bad pages {bad}: "
              f"{what} ({wd})", flush=True)
        lost += bad or 0
        failed += not ok
        if ok:
            subprocess.call(["rm", "-rf", wd])
    print(f"lost pages: {lost}; runs failed: {failed} of {runs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
