# SPDX-License-Identifier: GPL-2.0
"""Run one benchmark cell once through hb.migration.migrate_once(), under a
watchdog, with the in-guest probes the report needs: a poll of the hint
round counters, and for "stale+bw" a memory-bandwidth probe.  With free
page reporting, the wait for it to settle (settle_reporting()); "recent"
frees its stale data right before the migration; "reuse" migrates
nothing (reuse_once()).  The cell's destination memory state and link go
to migrate_once() as dst_memory and max_bandwidth."""
import os
import shutil
import tempfile
import threading
import time

from hb import env
from hb.channel import parse_kv
from hb.env import BUILD, STOCK_BINARIES
from hb.migration import drop_workdir, migrate_once
from hb.vm import (SETTLE_MAX_S, VM, live_vms, rss_anon_kib,
                   settle_reporting)
from hb.workloads import (DOWNTIME_LIMIT_MS, prepare_guest, verify_guest,
                          wait_guest)

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


# reuse: passes of (settle, write the freed memory again) per run
REUSE_PASSES = 3


def _stop_probe(g, name):
    """Stop an in-guest probe loop started with `& echo $! > /tmp/NAME.pid`
    and wait until the loop is gone; returns its output lines."""
    g.run(f"kill $(cat /tmp/{name}.pid)", check=False)
    wait_guest(g, f"! kill -0 $(cat /tmp/{name}.pid) 2>/dev/null",
               f"the {name} probe did not stop")
    _, out = g.run(f"cat /tmp/{name}.out", check=False)
    return out


def make_hooks(workload, balloon, settle=False, multifd=False, stale_mib=0,
               seed=0):
    """on_source_ready / before_migrate / on_destination hooks for one
    run.  settle: wait for free page reporting to settle before the
    destination starts (and its memory is warmed); multifd: record the
    source's zero-page-detection; stale_mib, seed: "recent"'s stale data,
    freed right before the migration starts (after any warming)."""

    def on_source_ready(vm, res):
        if workload == "recent":
            # stale data written now, freed in before_migrate()
            res["fill"] = vm.guest.hbwork(
                f"stale /data/stale {stale_mib} {seed}")
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
            wait_guest(vm.guest, "grep -q '^T ' /tmp/bw.out",
                       "no bandwidth slice")
        if settle:
            # Here, before the destination starts, not in before_migrate():
            # a warm destination's memory is made resident right before
            # the destination starts (hb.hostmem), and this host hands
            # freed memory back to its own host within seconds, so a
            # settle between the two would leave it cold again.
            res["settle"] = settle_reporting(vm)
        _, out = vm.guest.run("cut -d' ' -f1 /proc/uptime", check=False)
        try:
            res["guest_uptime_at_migrate"] = float(out[0])
        except (IndexError, ValueError):
            pass

    def before_migrate(src, _dst, res):
        if workload == "recent":
            # one command: free the stale data and read what is free; the
            # migration starts as soon as it returns
            t = time.time()
            _, out = src.guest.run("rm /data/stale && hbwork meminfo")
            res["freed_before_migrate_ms"] = round((time.time() - t) * 1000)
            for line in out:
                if line.startswith("HBWORK "):
                    res["meminfo_at_migrate"] = parse_kv(line)
        if multifd:
            res["zero_page_detection"] = src.qmp(
                "query-migrate-parameters").get("zero-page-detection")

    def on_destination(dst, res):
        if balloon == "ours":
            res["hint_poll"] = _stop_probe(dst.guest, "hintpoll")[-400:]
        if workload == "stale+bw":
            res["bw_slices"] = _stop_probe(dst.guest, "bw")
    return on_source_ready, before_migrate, on_destination


def run_one(cell, rep, our_bin, seed, dst_args=(),
            downtime_limit_ms=DOWNTIME_LIMIT_MS):
    """One migration of `cell`; returns the harness's result dict with the
    cell, the watchdog's verdict and the wall time added."""
    qemu, balloon, hint, bargs, _ = scenarios.CONFIGS[cell.config]
    extra = scenarios.extras(cell.config)
    binary = {"stock": env.STOCK_QEMU,
              "stock11": env.STOCK_QEMU_11}.get(qemu, our_bin)
    sc = scenarios.scenario(cell, seed, downtime_limit_ms)
    settle = scenarios.settles(cell)
    multifd = extra.get("multifd_channels", 0)
    src_ready, before_mig, on_dst = make_hooks(
        cell.workload, balloon, settle=settle, multifd=bool(multifd),
        stale_mib=sc.mem_mib * sc.stale_pct // 100, seed=sc.seed)
    # Watchdog: a guest corrupted by a bad migration can hang in the
    # verification for minutes; end the QEMUs instead, which makes the
    # harness return.  The harness' own dead-guest check does not match
    # every oops, so a guest whose kernel broke can also sit there until a
    # command times out: end it once a kernel error has stayed on a
    # console for KERNEL_ERR_GRACE_S.
    limit = 240 + 60 * (cell.mem_mib // 1024)
    max_bw = scenarios.link_bytes(cell.link_gbit)
    if max_bw:
        # the whole guest twice over the link, every hop
        limit += 2 * sc.hops * (cell.mem_mib << 20) // max_bw
    if settle:
        limit += SETTLE_MAX_S
    if cell.workload == "reuse":
        limit += REUSE_PASSES * (SETTLE_MAX_S + 30 * (cell.mem_mib // 1024))
    fired = []
    stop = threading.Event()

    def watchdog():
        start, seen = time.time(), None
        while not stop.wait(2):
            live = live_vms()
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
        if cell.workload == "reuse":
            res = reuse_once(binary, balloon, hint, bargs,
                             extra.get("device_props", ""), sc)
        else:
            res = migrate_once(
                binary, binary, balloon=balloon, hint=hint, scenario=sc,
                balloon_args=bargs, device_props=extra.get("device_props", ""),
                timeout=limit, on_source_ready=src_ready,
                on_destination=on_dst, dst_args=dst_args,
                before_migrate=before_mig, multifd_channels=multifd,
                to_file=cell.workload == "snapshot",
                dst_memory=cell.dst_memory, max_bandwidth=max_bw)
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
    if not res.get("ok") and binary in STOCK_BINARIES:
        drop_workdir(res)   # counted in the report, not debugged
    return res


def reuse_once(binary, balloon, hint, balloon_args, device_props, sc):
    """The "reuse" cell: boot a guest and prepare it as for stale (its
    stale data freed), then REUSE_PASSES times: wait until free page
    reporting has settled (settle_reporting(), for every configuration
    alike), and write as much memory as the stale data took again (`hbwork
    fill`: allocate, write every page, free), timed in the guest.  With
    reporting, the host has discarded that memory, so each write faults it
    in again; without it, the memory is still there.  No migration; the
    guest's data is verified in place at the end.  Returns a record like
    migrate_once()'s, with "reuse": one dict per pass."""
    workdir = tempfile.mkdtemp(prefix="hb-reuse-",
                               dir=os.path.join(BUILD, "tmp"))
    res = {"config": {"src": binary, "balloon": balloon, "hint": hint,
                      "workload": sc.workload, "mem_mib": sc.mem_mib,
                      "seed": sc.seed, "smp": sc.smp,
                      "device_props": device_props,
                      "balloon_args": balloon_args},
           "ok": False, "data_intact": None, "kernel_errors": [],
           "workdir": workdir, "status": "no migration"}
    vm = VM(workdir, "src", binary, sc.mem_mib, balloon, hint,
            balloon_args=balloon_args, device_props=device_props,
            smp=sc.smp)
    mib = sc.mem_mib * sc.stale_pct // 100
    try:
        t0 = time.time()
        vm.boot()
        res["boot_s"] = round(time.time() - t0, 1)
        prepare_guest(vm, sc, res)
        passes = []
        for i in range(REUSE_PASSES):
            st = settle_reporting(vm)
            rss0 = rss_anon_kib(vm)
            f = vm.guest.hbwork(f"fill {mib} {sc.seed + 7 + i}",
                                timeout=120 + 30 * (sc.mem_mib >> 10))
            rss1 = rss_anon_kib(vm)
            passes.append({"settle": st, "mib": mib, "ms": f.get("ms"),
                           "rss_before_mib": (rss0 or 0) >> 10,
                           "rss_after_mib": (rss1 or 0) >> 10})
        res["reuse"] = passes
        res["data_intact"] = verify_guest(vm, sc, res)
        res["kernel_errors"] = (vm.kernel_errors() +
                                res["verify"].get("dmesg_errors", []))
        res["ok"] = bool(res["data_intact"] and not res["kernel_errors"])
    except Exception as exc:  # pylint: disable=broad-except
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["kernel_errors"] = res.get("kernel_errors") or vm.kernel_errors()
    finally:
        vm.kill()
        res["qemu_errors"] = {vm.name: vm.qemu_errors()}
        if any(res["qemu_errors"].values()):
            res["ok"] = False
        if res.get("ok"):
            shutil.rmtree(workdir, ignore_errors=True)
    return res
