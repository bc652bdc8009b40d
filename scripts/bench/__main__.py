#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""make bench: what free page hinting saves a live migration, and what it
costs.

  scripts/bench [--stack 10.0] [--quick] [--repeats N] [--cells SPEC]
                [--dst-memory warm,cold] [--links 1,10,25,unlimited] ...

A run measures one stack side by side with its stock pair: our QEMU and
driver against Debian's QEMU of the same version with the in-tree driver of
the same guest kernel (10.0 + Linux 6.12).  Our QEMU runs opted in to
free-page-hint-keep-writes, as a fleet whose hosts all run it.

Every timed cell names the destination's memory state and the link:
  warm/cold   warm: the host's free memory made resident (touched and
              freed outside QEMU) right before the destination starts, as
              on two real hosts; cold: as the run before left it, as on a
              nested host that takes freed memory back.  --dst-memory
              (default warm,cold); a configuration's warm and cold runs
              alternate in the run order.  --dst-prealloc (-mem-prealloc
              on every destination) is a labelled extra on top.
  link        the migration's max-bandwidth: N Gbit/s = N * 1e9 / 8
              bytes/s, or unlimited.  --links (default: unlimited for
              --quick and --cells; all of 1,10,25,unlimited for the full
              matrix's link cells: a, b, r, d, d+r on stale and recent,
              a, r, d, d+r on fresh, at 1, 4 and 8 GiB, 1 and 2 vCPUs).
--cells takes both too: CFGS:WORKLOADS:MEMS:SMPS:DSTS:LINKS, e.g.
'd,r:stale:1024:2:warm,cold:unlimited,10'.

The matrix is scenarios.py's; each run goes through engine.py (one
hb.migration.migrate_once() under a watchdog); report.py turns the runs into
statistics and Markdown tables, plot.py into plots.  Output in
build/bench/STACK/ (DIR/STACK/ with --out DIR):
  results.json  every run, raw (incl. query-migrate, counters)
  table.md      Markdown tables (ratios to configuration b)
  summary.json  per cell: medians and ranges, the targets; nothing that
                names this machine's paths (fit to be kept with the docs)
  *.png         plots
All timings are TCG timings.  Runs with --host-thp or --host-warm-memory
are recorded as host-tuned and labelled so in the tables and plots.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests"))
sys.path.insert(0, HERE)
from hb import env  # noqa: E402  pylint: disable=C0413
from hb.env import (DEFAULT_STACK, STACKS,  # noqa: E402  pylint: disable=C0413
                    guest_kver, save_json)
from hb.hostmem import DST_MEMORY  # noqa: E402  pylint: disable=C0413
from hb.migration import PREALLOC_DST  # noqa: E402  pylint: disable=C0413
from hb.vm import install_cleanup  # noqa: E402  pylint: disable=C0413
from hb.workloads import DOWNTIME_LIMIT_MS  # noqa: E402  pylint: disable=C0413

import engine  # noqa: E402  pylint: disable=C0413
import host  # noqa: E402  pylint: disable=C0413
import report  # noqa: E402  pylint: disable=C0413
import scenarios  # noqa: E402  pylint: disable=C0413

OUT = RESULTS = TABLE = None
log = host.log


def use_stack(stack, out=None):
    """Run the bench on `stack`: its QEMUs and guest kernel, its own
    output folder, OUT/STACK (OUT: `out`, else build/bench)."""
    global OUT, RESULTS, TABLE  # pylint: disable=global-statement
    env.use_stack(stack)
    base = os.path.abspath(out) if out else os.path.join(TOP, "build", "bench")
    OUT = os.path.join(base, stack)
    RESULTS = os.path.join(OUT, "results.json")
    TABLE = os.path.join(OUT, "table.md")


def estimate(cell, history):
    """Seconds one run of cell takes: observed mean of the same
    (workload, size, link), else a size-based prior (plus the guest's RAM
    once over the link)."""
    wl, mem, link = cell.workload, cell.mem_mib, cell.link_gbit
    same = [h for (w, m, g, h) in history
            if w == wl and m == mem and g == link]
    if same:
        return statistics.mean(same)
    size = [h * 1024 / m for (w, m, g, h) in history if m and g is None]
    base = statistics.mean(size) if size else 30.0
    bw = scenarios.link_bytes(link)
    return base * (0.6 + 0.4 * mem / 1024) + \
        ((mem << 20) / bw if bw else 0)


def write_outputs(results):
    save_json(RESULTS, results)
    with open(TABLE, "w") as f:
        f.write(report.make_table(results))
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        f.write(report.summary_json(results))
    try:
        import plot  # pylint: disable=import-outside-toplevel
        return plot.plot(results, OUT)
    except Exception as exc:  # pylint: disable=broad-except
        log(f"plots failed: {exc!r}")
        return []


def main():
    install_cleanup()
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stack", choices=sorted(STACKS),
                    default=DEFAULT_STACK,
                    help="the stack to measure against its stock pair "
                    f"(default {DEFAULT_STACK})")
    ap.add_argument("--quick", action="store_true",
                    help="1 GiB: a b d r on fresh and stale, b d on "
                    "stale+bw, r d on recent; warm and cold, unlimited "
                    "link (or --links); 1 repeat")
    ap.add_argument("--repeats", type=int, default=None,
                    help="repeats of every cell (default 3, and "
                    f"{scenarios.COMPARE_REPEATS} for the comparison with "
                    "free page reporting and multifd; 1 with --quick)")
    ap.add_argument("--cells", default=None,
                    help="CFGS:WORKLOADS:MEMS[:SMPS[:DSTS[:LINKS]]], "
                    "';' between several, e.g. 'b,d:stale:1024,2048', "
                    "'a,b,d:churn-all:4096:2' or "
                    "'d,r:stale:1024:2:warm,cold:unlimited,10'; DSTS and "
                    "LINKS default to --dst-memory and --links")
    ap.add_argument("--dst-memory", default=",".join(DST_MEMORY),
                    metavar="STATES",
                    help="the destination's memory state(s), 'warm', "
                    "'cold' or 'warm,cold' (default): warm = the host's "
                    "free memory made resident right before the "
                    "destination starts (hb.hostmem), cold = as left")
    ap.add_argument("--links", default=None, metavar="GBITS",
                    help="link speed(s) as the migration's max-bandwidth, "
                    "Gbit/s or 'unlimited', e.g. '1,10,25,unlimited' "
                    "(default: unlimited; the full matrix: all four for "
                    "its link cells)")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="stop starting runs after this many minutes")
    ap.add_argument("--only-report", action="store_true",
                    help="redo table and plots from results.json")
    ap.add_argument("--append", action="store_true",
                    help="add to the existing results.json")
    ap.add_argument("--out", metavar="DIR",
                    help="write to DIR/STACK/ instead of build/bench/STACK/, "
                    "so that a run keeps another's results")
    ap.add_argument("--dst-prealloc", action="store_true",
                    help="start every destination with -mem-prealloc, so "
                    "the load writes into RAM that is already there (an "
                    "extra on top of warm/cold, labelled in the tables)")
    ap.add_argument("--host-thp", choices=("always", "madvise", "never"),
                    help="set the host's transparent huge page mode for "
                    "the run (both QEMUs, every config); restored after; "
                    "the results are labelled host-tuned")
    ap.add_argument("--host-warm-memory", action="store_true",
                    help="on a host whose kernel reports its free memory to "
                    "an outer host and has page_reporting knobs to hold it "
                    "back (not Debian 12's), hold freed memory back for the "
                    "run; fails where the knobs are missing; restored "
                    "after; the results are labelled host-tuned")
    ap.add_argument("--downtime-limit", type=int, metavar="MS",
                    default=DOWNTIME_LIMIT_MS,
                    help="migration downtime-limit for every run "
                    f"(default {DOWNTIME_LIMIT_MS}, QEMU's own)")
    a = ap.parse_args()
    use_stack(a.stack, a.out)
    if not 1 <= a.downtime_limit <= 2000000:
        ap.error("--downtime-limit must be 1..2000000 ms (QEMU takes up "
                 "to 2000 s)")
    try:
        dsts = scenarios.parse_dst_memory(a.dst_memory)
        links = scenarios.parse_links(a.links) if a.links else None
        if a.cells:
            cells, mode = scenarios.parse_cells(
                a.cells, dsts, links or [None]), "custom"
        elif a.quick:
            cells, mode = scenarios.quick_matrix(dsts, links or [None]), \
                "quick"
        else:
            cells, mode = scenarios.full_matrix(
                dsts, links or scenarios.LINKS), "full"
    except ValueError as exc:
        ap.error(str(exc))
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(os.path.join(TOP, "build", "tmp"), exist_ok=True)

    if a.only_report:
        with open(RESULTS) as f:
            results = json.load(f)
        pngs = write_outputs(results)
        print(report.make_table(results))
        log(f"wrote {TABLE} {' '.join(pngs)}")
        return 0

    repeats = a.repeats or (1 if a.quick else 3)
    # the comparison with reporting and multifd: at least COMPARE_REPEATS
    # unless --repeats or --quick says otherwise
    compare = None if (a.repeats or a.quick) else scenarios.COMPARE_REPEATS
    each = scenarios.repeats_of(cells, repeats, compare)
    tuned = []
    if a.host_thp:
        host.keep_thp(a.host_thp)
        tuned.append(f"host THP {a.host_thp}")
    if a.host_warm_memory:
        host.hold_freed_memory(host.HOLD_WARM_MIB)
        tuned.append("--host-warm-memory: page_reporting " + " ".join(
            f"{k}={v}" for k, v in host.REPORTING_HOLD))
    dst_args = PREALLOC_DST if a.dst_prealloc else ()
    our_bin = host.snapshot_our_qemu(os.path.join(OUT, "qemu"))
    meta = host.machine_info(our_bin)
    if not meta["our_qemu_patched"]:
        log(f"WARNING: {env.OUR_QEMU} has no "
            "free-page-hint-wait-ms property: not the patched QEMU")
    meta.update(stack=a.stack, guest_kernel=guest_kver(),
                mode=mode, repeats=repeats, compare_repeats=compare,
                started=time.strftime("%Y-%m-%d %H:%M:%S"),
                command=" ".join([sys.executable] + sys.argv),
                cells=[list(c) for c in cells], dst_args=list(dst_args),
                dst_memory=sorted({c.dst_memory for c in cells},
                                  key=DST_MEMORY.index),
                links=sorted({c.link_gbit for c in cells},
                             key=scenarios.link_order),
                downtime_limit_ms=a.downtime_limit,
                host_tuned="; ".join(tuned) or None,
                configs={k: v[4] for k, v in scenarios.CONFIGS.items()})
    results = {"meta": meta, "runs": []}
    if a.append and os.path.exists(RESULTS):
        with open(RESULTS) as f:
            old = json.load(f)
        results["runs"] = old.get("runs", [])
        meta["previous"] = old.get("meta")
    plan = scenarios.run_plan(cells, each)
    log(f"{mode} matrix: {len(cells)} cells x {repeats}"
        + (f" ({compare} for the comparison with reporting and multifd)"
           if compare and any(n != repeats for n in each.values()) else "")
        + f" = {len(plan)} runs; "
        f"our QEMU {meta['our_qemu']} (patched={meta['our_qemu_patched']}); "
        "TCG timings" + (f"; HOST-TUNED: {meta['host_tuned']}"
                         if tuned else ""))
    history = []
    t_start = time.time()
    seed0 = int(time.time()) & 0xfffff
    for i, (cell, rep) in enumerate(plan):
        left = plan[i:]
        eta = sum(estimate(c, history) for c, _ in left)
        if a.budget_min and time.time() - t_start > a.budget_min * 60:
            log(f"budget of {a.budget_min} min used up: {len(left)} runs "
                "skipped")
            meta["skipped_runs"] = [[*c, r] for c, r in left]
            break
        log(f"run {i + 1}/{len(plan)}: {scenarios.cell_name(cell)} "
            f"repeat {rep + 1}/{each[cell]} — {len(left) - 1} left after this, "
            f"ETA {eta / 60:.1f} min "
            f"(~{time.strftime('%H:%M', time.localtime(time.time() + eta))})")
        reported0 = host.reported_kib()
        res = engine.run_one(cell, rep, our_bin, seed0 + i, dst_args,
                             a.downtime_limit)
        if reported0 is not None:
            # Memory this host handed its own host during the run: what a
            # later first touch pays the outer host's fault for.
            res["host_reported_mib"] = (host.reported_kib() - reported0) >> 10
        if tuned:
            res["host_tuned"] = meta["host_tuned"]
        history.append((cell.workload, cell.mem_mib, cell.link_gbit,
                        res["wall_s"]))
        results["runs"].append(res)
        fg = report.figures(res)
        log(f"  -> {'ok' if res.get('ok') else 'FAIL'} "
            f"{res.get('status')}"
            + ("" if res.get("status") == "no migration" else
               f" sent {fg.get('transferred_mb')} MB in "
               f"{fg.get('total_ms')} ms, downtime {fg.get('downtime_ms')} "
               "ms")
            + (f", warmed {res['dst_warm_mib']} MiB first"
               if "dst_warm_mib" in res else "")
            + (f", hinted {fg['hinted_mb']} MB" if "hinted_mb" in fg else "")
            + (f", settled in {fg['settle_s']} s" if "settle_s" in fg else "")
            + (f", file {fg['file_mb']} MB, restored in "
               f"{fg.get('restore_ms')} ms" if "file_mb" in fg else "")
            + (f", rewrite {fg['reuse_ms']} ms" if "reuse_ms" in fg else "")
            + (f", guest CPU {fg['guest_cpu_ms']} ms, "
               f"{fg.get('guest_vcpu_pct')} % of a vCPU"
               if "guest_cpu_ms" in fg else "")
            + f" (wall {res['wall_s']} s)"
            + ("" if res.get("ok") else f"; {str(res.get('error'))[:160]}"
               f" {res.get('kernel_errors', [])[:1]}"))
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        meta["elapsed_min"] = round((time.time() - t_start) / 60, 1)
        save_json(RESULTS, results)
    pngs = write_outputs(results)
    print(report.make_table(results))
    for line in report.headline(results):
        log(line)
    log(f"wrote {RESULTS}, {TABLE}, {' '.join(pngs)} in "
        f"{(time.time() - t_start) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
