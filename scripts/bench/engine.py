# SPDX-License-Identifier: GPL-2.0
"""Run one benchmark cell once through harness.migrate_once(), under a
watchdog, with the in-guest probes the report needs: a poll of the hint
round counters, and for "stale+bw" a memory-bandwidth probe."""
import os
import threading
import time

from hb import harness

import scenarios

BW_MIB, BW_SLICE_S, BW_IDLE_SLICES = 16, 1, 3
KERNEL_ERR_GRACE_S = 30

# rounds, the last round's duration and bytes, every 200 ms, with the
# guest's uptime (our driver only)
HINT_POLL = ("( d=$(ls -d /sys/bus/virtio/devices/*/free_page_hint | head -1);"
             " while :; do echo \"R $(cut -d' ' -f1 /proc/uptime) $(cat "
             "$d/rounds $d/last_round_ns $d/round_bytes | tr '\\n' ' ')\";"
             " usleep 200000;"
             " done ) > /tmp/hintpoll.out 2>&1 & echo $! > /tmp/hintpoll.pid")


def _stop_probe(g, name):
    """Stop an in-guest probe loop started with `& echo $! > /tmp/NAME.pid`
    and wait until the loop is gone; returns its output lines."""
    g.run(f"kill $(cat /tmp/{name}.pid)", check=False)
    harness.wait_guest(g, f"! kill -0 $(cat /tmp/{name}.pid) 2>/dev/null",
                       f"the {name} probe did not stop")
    _, out = g.run(f"cat /tmp/{name}.out", check=False)
    return out


def make_hooks(workload, balloon):
    """on_source_ready / on_destination hooks for one run."""

    def on_source_ready(vm, res):
        if balloon == "ours":
            # last_round_ns keeps only the last round; the first round of a
            # migration is the one that hints everything, so watch it.
            vm.guest.run(HINT_POLL, check=False)
        if workload == "stale+bw":
            idle = []
            for _ in range(BW_IDLE_SLICES):
                f = vm.guest.hbwork(f"bandwidth {BW_MIB} {BW_SLICE_S}",
                                    timeout=60)
                idle.append(f.get("mib_s"))
            res["bw_idle"] = idle
            vm.guest.run(
                "( while :; do echo \"T $(cut -d' ' -f1 /proc/uptime) "
                f"$(hbwork bandwidth {BW_MIB} {BW_SLICE_S})\"; done ) "
                "> /tmp/bw.out 2>&1 & echo $! > /tmp/bw.pid")
            # one slice before the migration starts
            harness.wait_guest(vm.guest, "grep -q '^T ' /tmp/bw.out",
                               "no bandwidth slice")
        _, out = vm.guest.run("cut -d' ' -f1 /proc/uptime", check=False)
        try:
            res["guest_uptime_at_migrate"] = float(out[0])
        except (IndexError, ValueError):
            pass

    def on_destination(dst, res):
        if balloon == "ours":
            res["hint_poll"] = _stop_probe(dst.guest, "hintpoll")[-400:]
        if workload == "stale+bw":
            res["bw_slices"] = _stop_probe(dst.guest, "bw")
    return on_source_ready, on_destination


def run_one(cell, rep, our_bin, seed, dst_args=(),
            downtime_limit_ms=harness.DOWNTIME_LIMIT_MS):
    """One migration of `cell`; returns the harness's result dict with the
    cell, the watchdog's verdict and the wall time added."""
    qemu, balloon, hint, bargs, _ = scenarios.CONFIGS[cell.config]
    binary = harness.STOCK_QEMU if qemu == "stock" else our_bin
    sc = scenarios.scenario(cell, seed, downtime_limit_ms)
    src_ready, on_dst = make_hooks(cell.workload, balloon)
    # Watchdog: a guest corrupted by a bad migration can hang in the
    # verification for minutes; end the QEMUs instead, which makes the
    # harness return.  The harness' own dead-guest check does not match
    # every oops, so a guest whose kernel broke can also sit there until a
    # command times out: end it once a kernel error has stayed on a
    # console for KERNEL_ERR_GRACE_S.
    limit = 240 + 60 * (cell.mem_mib // 1024)
    fired = []
    stop = threading.Event()

    def watchdog():
        start, seen = time.time(), None
        while not stop.wait(2):
            live = harness.live_vms()
            why = None
            if time.time() - start > limit:
                why = f"watchdog: run exceeded {limit}s"
            elif any(vm.kernel_errors() for vm in live):
                seen = seen or time.time()
                if time.time() - seen > KERNEL_ERR_GRACE_S:
                    why = ("watchdog: kernel error on the console, guest "
                           f"stuck for {KERNEL_ERR_GRACE_S}s")
            if why:
                fired.append(why)
                for vm in live:
                    vm.kill()
                return
    timer = threading.Thread(target=watchdog, daemon=True)
    timer.start()
    t0 = time.time()
    load0 = os.getloadavg()[0]
    try:
        res = harness.migrate_once(binary, binary, balloon=balloon, hint=hint,
                                   scenario=sc, balloon_args=bargs,
                                   timeout=limit, on_source_ready=src_ready,
                                   on_destination=on_dst, dst_args=dst_args)
    finally:
        stop.set()
        timer.join(5)
    res["wall_s"] = round(time.time() - t0, 1)
    if res.get("migration"):   # the harness copied these before they settled
        res["total_ms"] = res["migration"].get("total-time")
        res["downtime_ms"] = res["migration"].get("downtime")
    res["loadavg_start"] = load0
    if fired:
        res["watchdog"] = fired[0]
        res["ok"] = False
        res["error"] = f"{fired[0]} ({res.get('error')})"
    res["cell"] = dict(cell._asdict(), rep=rep)
    if not res.get("ok") and binary in harness.STOCK_BINARIES:
        harness.drop_workdir(res)   # counted in the report, not debugged
    return res
