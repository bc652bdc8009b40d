#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""make bench: what free page hinting saves a live migration, and what it costs.

Matrix (one cell = configuration x workload x guest size, N repeats):

  a  stock QEMU, in-tree driver, no hinting           (baseline without hints)
  b  stock QEMU, in-tree driver, free-page-hint=on    (today's upstream)
  c  stock QEMU, our driver, free-page-hint=on
  d  our QEMU,   our driver, free-page-hint=on
  c-alloc, d-alloc: c, d with the driver in alloc mode (hint_mode=alloc)
  c+drop, d+drop: c, d with the driver's drop_cache knob (hint_drop_cache=1)

Workloads are the harness's (tests/hb/harness.py prepare_guest): fresh, stale,
frag, churn, cache.  "stale+bw" is stale with a memory-bandwidth probe
(hbwork bandwidth) running in the guest before and during the migration.

Every run goes through harness.migrate_once(); nothing here talks QMP except
through the harness' VM objects handed to the hooks.  Results:
  build/bench/results.json  every run, raw (incl. query-migrate, counters)
  build/bench/table.md      Markdown tables (ratios to configuration b)
  build/bench/*.png         plots (scripts/plot_bench.py)

Usage:
  scripts/bench.py [--quick] [--repeats N] [--only-report] [--cells SPEC]
All timings are TCG timings.
"""

import argparse
import atexit
import glob
import json
import mmap
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(TOP, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hb import harness  # noqa: E402  pylint: disable=C0413

OUT = os.path.join(TOP, "build", "bench")
RESULTS = os.path.join(OUT, "results.json")
TABLE = os.path.join(OUT, "table.md")
OUR_COPY_DIR = os.path.join(OUT, "qemu")

CONFIGS = {
    # name: (qemu, balloon, hint, balloon_args, description)
    "a": ("stock", "intree", False, "", "stock QEMU, in-tree driver, no hinting"),
    "b": ("stock", "intree", True, "", "stock QEMU, in-tree driver, free-page-hint=on (upstream today)"),
    "c": ("stock", "ours", True, "", "stock QEMU, our driver, hinting"),
    "d": ("ours", "ours", True, "", "our QEMU, our driver, hinting"),
    "c-alloc": ("stock", "ours", True, "hint_mode=alloc", "c with the driver in alloc mode"),
    "d-alloc": ("ours", "ours", True, "hint_mode=alloc", "d with the driver in alloc mode (+ HINT_HOLD)"),
    "c+drop": ("stock", "ours", True, "hint_drop_cache=1", "c with drop_cache=1"),
    "d+drop": ("ours", "ours", True, "hint_drop_cache=1", "d with drop_cache=1"),
}
CONFIG_ORDER = ["a", "b", "c", "d", "c-alloc", "d-alloc", "c+drop", "d+drop"]
WORKLOAD_ORDER = ["fresh", "stale", "frag", "churn", "cache", "stale+bw"]
REF = "b"


def full_matrix():
    """The reduced full matrix that fits one hour on 2 cores (see
    Documentation/benchmarks.md)."""
    cells = []
    for mem in (1024, 2048, 4096):
        for wl in ("fresh", "stale"):
            for cfg in ("abcd" if mem < 4096 else "abd"):
                cells.append((cfg, wl, mem))
    for wl in ("frag", "churn"):
        for cfg in "abcd":
            cells.append((cfg, wl, 1024))
    # the driver's two hint modes side by side
    for wl in ("fresh", "stale", "frag"):
        cells.append(("d-alloc", wl, 1024))
    for wl in ("stale", "frag"):
        cells.append(("c-alloc", wl, 1024))
    # "cache" is not in the full matrix: the test guest has no disk page
    # cache, so c+drop/d+drop cannot show a benefit (run it with --cells)
    for cfg in "abd":
        cells.append((cfg, "stale+bw", 1024))
    return cells


def quick_matrix():
    cells = []
    for wl in ("fresh", "stale"):
        for cfg in "abd":
            cells.append((cfg, wl, 1024))
    for cfg in "bd":
        cells.append((cfg, "stale+bw", 1024))
    return cells


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------
# Wrappers for what the harness does not provide (see the doc's wish list).

class CpuSampler(threading.Thread):
    """Per-thread CPU time of a QEMU, sampled every 20 ms.

    harness.migrate_once() reads /proc after the migration has completed,
    when the 'live_migration' thread has already exited, so its CPU time is
    lost there.  This sampler remembers the last value of every thread it
    saw."""

    def __init__(self, pid, interval=0.02):
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.base = {}
        self.last = {}
        self.stop = threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK")
        self._sample(first=True)

    def _sample(self, first=False):
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return False
        for tid in tids:
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                    comm = f.read().strip()
                with open(f"/proc/{self.pid}/task/{tid}/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            t = (int(st[11]) + int(st[12])) / self.tick
            if tid not in self.base:
                self.base[tid] = t if first else 0.0
            self.last[tid] = (comm, t)
        return True

    def run(self):
        while not self.stop.is_set():
            if not self._sample():
                break
            time.sleep(self.interval)

    def finish(self):
        self.stop.set()
        self.join(2)
        res = {}
        for tid, (comm, t) in self.last.items():
            res[comm] = round(res.get(comm, 0) + t - self.base[tid], 3)
        return res


_ORIG_WAIT = harness.wait_migration
_LAST_WAIT = {}


def _wait_migration_timed(src, timeout, on_tick=None):
    """harness.wait_migration (which waits for final figures), timed from
    the host's side."""
    t0 = time.time()
    info = _ORIG_WAIT(src, timeout, on_tick)
    _LAST_WAIT["host_ms"] = round((time.time() - t0) * 1000)
    return info


harness.wait_migration = _wait_migration_timed

BW_MIB, BW_SLICE_S, BW_IDLE_SLICES = 16, 1, 3
KERNEL_ERR_GRACE_S = 30


HINT_POLL = ("( d=$(ls -d /sys/bus/virtio/devices/*/free_page_hint | head -1);"
             " while :; do echo \"R $(cut -d' ' -f1 /proc/uptime) $(cat "
             "$d/rounds $d/last_round_ns $d/round_bytes | tr '\\n' ' ')\";"
             " usleep 200000;"
             " done ) > /tmp/hintpoll.out 2>&1 & echo $! > /tmp/hintpoll.pid")


def make_hooks(cell_wl, balloon, state):
    """on_source_ready / on_destination hooks for one run."""

    def on_source_ready(vm, res):
        if balloon == "ours":
            # last_round_ns only keeps the last round; the first round of a
            # migration is the one that hints everything, so watch it.
            vm.guest.run(HINT_POLL, check=False)
        if cell_wl == "stale+bw":
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
            time.sleep(1.5)   # one slice before the migration starts
        _, out = vm.guest.run("cut -d' ' -f1 /proc/uptime", check=False)
        try:
            res["guest_uptime_at_migrate"] = float(out[0])
        except (IndexError, ValueError):
            pass
        try:
            state["sampler"] = CpuSampler(vm.machine.get_pid())
            state["sampler"].start()
        except Exception as exc:  # pylint: disable=broad-except
            res["sampler_error"] = str(exc)

    def on_destination(dst, res):
        if "sampler" in state:
            res["cpu_s_sampled"] = state.pop("sampler").finish()
        if balloon == "ours":
            dst.guest.run("kill $(cat /tmp/hintpoll.pid)", check=False)
            _, out = dst.guest.run("cat /tmp/hintpoll.out", check=False)
            res["hint_poll"] = out[-400:]
        if cell_wl == "stale+bw":
            dst.guest.run("kill $(cat /tmp/bw.pid); sleep 1.5", check=False)
            _, out = dst.guest.run("cat /tmp/bw.out", check=False)
            res["bw_slices"] = out
    return on_source_ready, on_destination


def run_one(cfg, wl, mem, rep, our_bin, seed, dst_args=(),
            downtime_limit_ms=harness.DOWNTIME_LIMIT_MS):
    qemu, balloon, hint, bargs, _ = CONFIGS[cfg]
    binary = harness.STOCK_QEMU if qemu == "stock" else our_bin
    workload = "stale" if wl == "stale+bw" else wl
    sc = harness.Scenario(workload=workload, mem_mib=mem, seed=seed,
                          downtime_limit_ms=downtime_limit_ms)
    state = {}
    src_ready, on_dst = make_hooks(wl, balloon, state)
    # Watchdog: a guest corrupted by a bad migration can hang in the
    # verification for minutes (harness timeouts are up to 300 s per
    # command); end the QEMUs instead, which makes the harness return.
    # The harness' own dead-guest check does not match every oops (e.g.
    # "kernel BUG ... invalid opcode" without "Oops"), so a guest whose
    # kernel broke can also sit there until a command times out: end it
    # once a kernel error has stayed on a console for KERNEL_ERR_GRACE_S.
    limit = 240 + 60 * (mem // 1024)
    fired = []
    stop = threading.Event()

    def watchdog():
        start, seen = time.time(), None
        while not stop.wait(2):
            live = list(harness._LIVE)  # pylint: disable=protected-access
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
                                   on_destination=on_dst,
                                   dst_args=dst_args)
    except Exception as exc:  # pylint: disable=broad-except
        # The harness only catches GuestError; a QMP call cut off by the
        # watchdog lands here without the harness' dict.  Keep at least the
        # work directory and the destination's kernel errors.
        res = {"ok": False, "status": "exception", "error": repr(exc)}
        dirs = [d for d in glob.glob(os.path.join(TOP, "build", "tmp",
                                                  "hb-mig-*"))
                if os.path.getmtime(d) >= t0]
        if dirs:
            res["workdir"] = max(dirs, key=os.path.getmtime)
            try:
                with open(os.path.join(res["workdir"], "dst-console.log"),
                          "rb") as f:
                    text = f.read().decode(errors="replace")
                res["kernel_errors"] = [
                    ln for ln in text.splitlines()
                    if harness.KERNEL_ERROR_RE.search(ln)][:20]
            except OSError:
                pass
    finally:
        stop.set()
        timer.join(5)
    if "sampler" in state:   # on_destination was not reached
        res.setdefault("cpu_s_sampled", state.pop("sampler").finish())
    res["wall_s"] = round(time.time() - t0, 1)
    res["host_wait_ms"] = _LAST_WAIT.pop("host_ms", None)
    if res.get("migration"):   # the harness copied these before we settled
        res["total_ms"] = res["migration"].get("total-time")
        res["downtime_ms"] = res["migration"].get("downtime")
    res["loadavg_start"] = load0
    if fired:
        res["watchdog"] = fired[0]
        res["ok"] = False
        res["error"] = f"{fired[0]} ({res.get('error')})"
    res["cell"] = {"config": cfg, "workload": wl, "mem_mib": mem, "rep": rep}
    return res


# --------------------------------------------------------------------------
# Figures, statistics, table

def _num(x):
    return x if isinstance(x, (int, float)) else None


def figures(run):
    """Derived per-run figures (None where not applicable)."""
    f = {}
    ram = (run.get("migration") or {}).get("ram", {})
    f["transferred_mb"] = _num(run.get("transferred_mb"))
    f["total_ms"] = _num(run.get("total_ms"))
    f["downtime_ms"] = _num(run.get("downtime_ms"))
    f["normal_pages"] = _num(ram.get("normal"))
    f["zero_pages"] = _num(ram.get("duplicate"))
    f["dirty_syncs"] = _num(ram.get("dirty-sync-count"))
    cpu = dict(run.get("cpu_s") or {})
    sampled = run.get("cpu_s_sampled") or {}
    for k, v in sampled.items():   # threads gone by the harness' reading
        if k not in cpu:
            cpu[k] = v

    def cpu_sum(pred):
        vals = [v for k, v in cpu.items() if pred(k)]
        return round(sum(vals), 3) if vals else None
    if cpu:
        f["cpu_main_s"] = cpu_sum(lambda k: k.startswith("qemu-system"))
        f["cpu_mig_s"] = cpu_sum(lambda k: k == "live_migration") or 0.0
        f["cpu_io_s"] = cpu_sum(lambda k: k == "IO hbio") or 0.0
        f["cpu_vcpu_s"] = cpu_sum(lambda k: "/TCG" in k)
    gh, ghb = run.get("guest_hint"), run.get("guest_hint_before") or {}
    if gh:
        if _num(gh.get("last_round_ns")) is not None:
            f["hint_round_ms"] = round(gh["last_round_ns"] / 1e6, 2)
        if _num(gh.get("bytes_hinted")) is not None:
            f["hinted_mb"] = round((gh["bytes_hinted"] -
                                    (ghb.get("bytes_hinted") or 0)) / 1e6, 1)
        if _num(gh.get("rounds")) is not None:
            f["hint_rounds"] = gh["rounds"] - (ghb.get("rounds") or 0)
    rounds = hint_rounds_polled(run)
    if rounds:
        f["first_round_ms"] = round(rounds[0] / 1e6, 2)
        f["max_round_ms"] = round(max(rounds) / 1e6, 2)
    dev = run.get("device_src")
    if isinstance(dev, dict) and "clear-ns" in dev:
        pages = (dev.get("hinted-bytes") or 0) / 4096
        f["host_ns_per_page"] = (round(dev["clear-ns"] / pages, 1)
                                 if pages else None)
        f["cleared_mb"] = round((dev.get("cleared-pages") or 0) * 4096 / 1e6,
                                1)
        f["presend_wait_ms"] = dev.get("presend-wait-ms")
        f["presend_timeouts"] = dev.get("presend-timeouts")
    idle = [x for x in run.get("bw_idle") or [] if _num(x)]
    if idle:
        f["bw_idle_mib_s"] = round(statistics.mean(idle), 1)
        during = bw_during(run)
        if during:
            f["bw_during_mib_s"] = round(statistics.mean(during), 1)
            f["bw_worst_mib_s"] = round(min(during), 1)
            f["bw_slowdown_pct"] = round(
                100 * (1 - min(during) / f["bw_idle_mib_s"]), 1)
    return f


def hint_rounds_polled(run):
    """Durations (ns) of the hint rounds completed during the migration,
    from the in-guest poll of rounds/last_round_ns."""
    last_ns = (run.get("guest_hint_before") or {}).get("last_round_ns")
    out = []
    for line in run.get("hint_poll") or []:
        p = line.split()
        if len(p) < 4 or p[0] != "R":
            continue
        try:
            ns = int(p[3])
        except ValueError:
            continue
        if ns and ns != last_ns:
            out.append(ns)
            last_ns = ns
    gh = run.get("guest_hint") or {}
    if gh.get("last_round_ns") and gh["last_round_ns"] != last_ns:
        out.append(gh["last_round_ns"])
    return out


def bw_during(run):
    """MiB/s of the bandwidth slices that overlap the migration."""
    u0 = run.get("guest_uptime_at_migrate")
    tot = run.get("total_ms")
    if u0 is None or tot is None:
        return []
    end = u0 + tot / 1000 + 0.5
    vals = []
    for line in run.get("bw_slices") or []:
        parts = line.split()
        if len(parts) < 2 or parts[0] != "T":
            continue
        try:
            t = float(parts[1])
        except ValueError:
            continue
        kv = harness.parse_kv(" ".join(parts[2:]))
        if _num(kv.get("mib_s")) is None:
            continue
        if t < end and t + BW_SLICE_S > u0:
            vals.append(kv["mib_s"])
    return vals


# figure key, column title, unit, in ratio table
FIGS = [
    ("transferred_mb", "bytes sent", "MB", True),
    ("total_ms", "total time", "ms", True),
    ("downtime_ms", "downtime", "ms", True),
    ("normal_pages", "normal pages", "", True),
    ("zero_pages", "zero pages", "", True),
    ("dirty_syncs", "dirty syncs", "", True),
    ("cpu_main_s", "CPU main", "s", True),
    ("cpu_mig_s", "CPU migration", "s", True),
    ("cpu_io_s", "CPU iothread", "s", True),
    ("first_round_ms", "first hint round", "ms", False),
    ("hint_round_ms", "last hint round", "ms", False),
    ("hinted_mb", "hinted", "MB", False),
    ("host_ns_per_page", "host ns/4K page", "ns", False),
    ("presend_wait_ms", "host pre-send wait", "ms", False),
    ("bw_idle_mib_s", "bw idle", "MiB/s", False),
    ("bw_worst_mib_s", "bw worst during", "MiB/s", False),
    ("bw_slowdown_pct", "bw slowdown", "%", False),
]


def cell_key(run):
    c = run["cell"]
    return (c["workload"], c["mem_mib"], c["config"])


def summarize(runs):
    """{(wl, mem, cfg): {n, fails, ok_stats{fig: (med,min,max)},
    all_stats{...}}}"""
    cells = {}
    for r in runs:
        cells.setdefault(cell_key(r), []).append(r)
    out = {}
    for key, rs in cells.items():
        s = {"n": len(rs), "fails": sum(1 for r in rs if not r.get("ok")),
             "errors": sorted({(r.get("error") or
                                ("kernel errors" if r.get("kernel_errors")
                                 else "data check failed"))[:80]
                               for r in rs if not r.get("ok")})}
        for label, sel in (("ok", [r for r in rs if r.get("ok")]),
                           ("completed", [r for r in rs
                                          if r.get("status") == "completed"])):
            st = {}
            for fig, *_ in FIGS + [("hint_rounds", "", "", False),
                                   ("cpu_vcpu_s", "", "", False),
                                   ("cleared_mb", "", "", False)]:
                vals = [v for v in (figures(r).get(fig) for r in sel)
                        if v is not None]
                if vals:
                    st[fig] = (statistics.median(vals), min(vals), max(vals))
            s[label] = st
        out[key] = s
    return out


def _fmt(x):
    if x is None:
        return "–"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _size(mem):
    return f"{mem // 1024} GiB"


def sorted_keys(summ):
    return sorted(summ, key=lambda k: (WORKLOAD_ORDER.index(k[0]), k[1],
                                       CONFIG_ORDER.index(k[2])))


def make_table(results):
    runs = results["runs"]
    summ = summarize(runs)
    meta = results.get("meta", {})
    lines = []
    lines.append(f"Matrix: {meta.get('mode', '?')} run, {len(runs)} runs, "
                 f"{meta.get('repeats', '?')} repeat(s) per cell, "
                 f"started {meta.get('started', '?')}; **TCG timings**.")
    lines.append("")
    lines.append("### Ratios to configuration (b) — TCG timings")
    lines.append("")
    lines.append("Each figure is the cell's median divided by the median of "
                 "configuration (b) (stock QEMU + in-tree driver with "
                 "free-page-hint=on) for the same workload and size; in "
                 "brackets the cell's min–max over the same denominator.  "
                 "Lower is better for every column.  A cell with a failed "
                 "data check shows **FAIL n/N** instead of numbers.  Because "
                 "stock hinting corrupts guests, (b)'s reference medians are "
                 "taken over all of its *completed* migrations, including "
                 "those whose data check failed (the raw numbers are in "
                 "results.json only).")
    lines.append("")
    rfigs = [x for x in FIGS if x[3]]
    lines.append("| workload | size | config | " +
                 " | ".join(f"{t}" for _, t, _, _ in rfigs) + " |")
    lines.append("|---|---|---|" + "---|" * len(rfigs))
    for key in sorted_keys(summ):
        wl, mem, cfg = key
        s = summ[key]
        ref = summ.get((wl, mem, REF), {}).get("completed", {})
        row = [wl, _size(mem), cfg]
        if s["fails"]:
            row += [f"**FAIL {s['fails']}/{s['n']}**"] + [""] * (len(rfigs) - 1)
        else:
            for fig, *_ in rfigs:
                v = s["ok"].get(fig)
                r = ref.get(fig)
                if v is None or r is None or not r[0]:
                    row.append("–")
                else:
                    row.append(f"{v[0] / r[0]:.2f}" +
                               ("" if v[1] == v[2] else
                                f" ({v[1] / r[0]:.2f}–{v[2] / r[0]:.2f})"))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("### Absolute values, median (min–max) — TCG timings")
    lines.append("")
    lines.append("First hint round = the first round completed during "
                 "the migration (in-guest poll of `rounds`/`last_round_ns` "
                 "every 200 ms); last hint round = `last_round_ns` after "
                 "it; host pre-send wait = our QEMU's `presend-wait-ms` "
                 "(how long RAM sending waited for the guest's first "
                 "round, at most 2000 ms); hinted = "
                 "`bytes_hinted` during the migration (our driver only); "
                 "host ns/4K page = device `clear-ns` / (`hinted-bytes` / "
                 "4096) (our QEMU only); bw = `hbwork bandwidth 16 1` slices "
                 "in the guest: idle before the migration, worst slice "
                 "overlapping the migration, slowdown = 1 - worst/idle "
                 "(stale+bw cells only).  CPU = source QEMU threads during "
                 "the migration.")
    lines.append("")
    lines.append("| workload | size | config | runs | " +
                 " | ".join(f"{t}{' (' + u + ')' if u else ''}"
                            for _, t, u, _ in FIGS) + " |")
    lines.append("|---|---|---|---|" + "---|" * len(FIGS))
    for key in sorted_keys(summ):
        wl, mem, cfg = key
        s = summ[key]
        row = [wl, _size(mem), cfg]
        if s["fails"]:
            row += [f"**FAIL {s['fails']}/{s['n']}**"] + [""] * len(FIGS)
        else:
            row.append(f"{s['n']} ok")
            for fig, *_ in FIGS:
                v = s["ok"].get(fig)
                if v is None:
                    row.append("–")
                elif v[1] == v[2]:
                    row.append(_fmt(v[0]))
                else:
                    row.append(f"{_fmt(v[0])} ({_fmt(v[1])}–{_fmt(v[2])})")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    fails = {}
    for key, s in summ.items():
        f = fails.setdefault(key[2], [0, 0])
        f[0] += s["fails"]
        f[1] += s["n"]
    lines.append("### Failures per configuration")
    lines.append("")
    lines.append("| config | failed runs | what |")
    lines.append("|---|---|---|")
    for cfg in CONFIG_ORDER:
        if cfg in fails:
            errs = sorted({e for k, s in summ.items() if k[2] == cfg
                           for e in s["errors"]})
            lines.append(f"| {cfg} | {fails[cfg][0]}/{fails[cfg][1]} | "
                         f"{'; '.join(errs)[:300].replace('|', '/')} |")
    lines.append("")
    return "\n".join(lines)


def headline(results):
    """d vs b: bytes and total time per workload and size."""
    summ = summarize(results["runs"])
    out = []
    for key in sorted_keys(summ):
        wl, mem, cfg = key
        if cfg != "d":
            continue
        ref = summ.get((wl, mem, REF), {}).get("completed", {})
        s = summ[key]
        if s["fails"]:
            out.append(f"{wl} {_size(mem)}: d FAIL {s['fails']}/{s['n']}")
            continue
        parts = []
        for fig, name in (("transferred_mb", "bytes"), ("total_ms", "time")):
            v, r = s["ok"].get(fig), ref.get(fig)
            if v and r and r[0]:
                parts.append(f"{name} {v[0] / r[0]:.2f}x")
        line = f"{wl} {_size(mem)}: d/b " + ", ".join(parts)
        ca = summ.get((wl, mem, "a"), {})
        if ca and not ca["fails"]:
            parts = []
            for fig, name in (("transferred_mb", "bytes"),
                              ("total_ms", "time")):
                v, r = s["ok"].get(fig), ca["ok"].get(fig)
                if v and r and r[0]:
                    parts.append(f"{name} {v[0] / r[0]:.2f}x")
            line += "; d/a " + ", ".join(parts)
        out.append(line)
    return out


# --------------------------------------------------------------------------
# Machine and QEMU

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=30).stdout.rstrip()
    except Exception:  # pylint: disable=broad-except
        return ""


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def host_thp():
    """The host's transparent huge page mode (the bracketed word)."""
    try:
        with open(THP_ENABLED) as f:
            return f.read().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        return None


def set_host_thp(mode):
    with open(THP_ENABLED, "w") as f:
        f.write(mode)
    if host_thp() != mode:
        raise SystemExit(f"could not set {THP_ENABLED} to {mode}")


def until_exit(what, restore):
    """Run restore() when this process ends, however it ends."""
    def once():
        if restore():
            log(f"{what}: restored")
    atexit.register(once)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        prev = signal.getsignal(sig)

        def on_signal(signum, frame, prev=prev):
            once()
            if callable(prev):
                prev(signum, frame)
            raise SystemExit(128 + signum)
        signal.signal(sig, on_signal)


def keep_thp(mode):
    """Set the host's THP mode until this process ends."""
    before = host_thp()
    set_host_thp(mode)
    log(f"host transparent huge pages: {mode} for this run (was {before})")

    def restore():
        if host_thp() == before:
            return False
        set_host_thp(before)
        return True
    until_exit(f"host transparent huge pages {before}", restore)


# A host that is itself a guest may hand the memory it frees back to its
# own host (virtio-balloon free page reporting, mm/page_reporting.c); this
# machine's kernel does, every 2 MiB block within seconds of its freeing.
# Its next first touch then faults in the outer host too: ~10 us per 4 KiB
# instead of ~0.5 us (fault_probe()), which makes a destination's load, not
# the stream, the pace of a 1 GiB migration.  This kernel has two knobs
# mainline lacks that hold freed memory back from reporting.  Measured
# here: with both set, 2 GiB freed stayed unreported for 40 s, but of 4 and
# 9 GiB freed all except ~2.2 GiB was reported within 20 s whatever
# max_waiting_mib said.  So --host-warm-memory makes the host behave like
# one that keeps its memory for guests up to ~1 GiB (source and destination
# together fit); larger guests' destinations still fault partly cold, and
# every run records how much was reported meanwhile (host_reported_mib).
# The option touches 4 GiB once before the first run: after touching 2 GiB
# the first 1 GiB migration of a bench still loaded partly cold (404 and
# 437 ms, against 77-87 ms for the next).
REPORTING = "/sys/module/page_reporting/parameters"
REPORTING_HOLD = (("min_free_ms", "300000"), ("max_waiting_mib", "16384"))
HOLD_WARM_MIB = 4096


def host_reporting():
    """The page_reporting knobs this host has, name -> value."""
    out = {}
    for path in sorted(glob.glob(os.path.join(REPORTING, "*"))):
        try:
            with open(path) as f:
                out[os.path.basename(path)] = f.read().strip()
        except OSError:
            pass
    return out


def reported_kib():
    """KiB this host has reported to its own host since boot, or None."""
    try:
        with open(os.path.join(REPORTING, "reported_kib")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def hold_freed_memory(warm_mib):
    """Hold freed memory back from the outer host until this process ends,
    then touch warm_mib of it once so the first run finds it warm."""
    before = host_reporting()
    missing = [k for k, _ in REPORTING_HOLD if k not in before]
    if missing:
        raise SystemExit(
            f"--host-warm-memory: {REPORTING} has no {', '.join(missing)}: "
            "this kernel either reports no free memory to an outer host or "
            "cannot be told to hold it back")

    def write(values):
        for k, v in values:
            with open(os.path.join(REPORTING, k), "w") as f:
                f.write(v)

    def restore():
        now = host_reporting()
        if all(now[k] == before[k] for k, _ in REPORTING_HOLD):
            return False
        write((k, before[k]) for k, _ in REPORTING_HOLD)
        return True
    until_exit("page_reporting " + " ".join(
        f"{k}={before[k]}" for k, _ in REPORTING_HOLD), restore)
    try:
        write(REPORTING_HOLD)
    except OSError as e:
        raise SystemExit(f"--host-warm-memory: {REPORTING}: {e}") from e
    log("page_reporting: " + " ".join(f"{k}={v}" for k, v in REPORTING_HOLD)
        + f" for this run; warming {warm_mib} MiB")
    touch_fresh(warm_mib)


def touch_fresh(mib, advice=None):
    """Map mib MiB of fresh anonymous memory, write each 4 KiB page once,
    unmap it; the seconds the writes took."""
    size = mib << 20
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        if advice is not None:
            m.madvise(advice)
        t = time.perf_counter()
        for off in range(0, size, 4096):
            m[off] = 1
        return time.perf_counter() - t
    finally:
        m.close()


def fault_probe(mib=128):
    """ns per 4 KiB page to fault in fresh anonymous memory: advised huge
    twice (the first touch takes memory the host has not used recently,
    the second reuses what the first freed) and advised small.  On a
    machine that is itself a VM, the first figure includes the outer
    host's faults; the destination QEMU pays it for every huge page it
    loads into."""
    return {key: round(touch_fresh(mib, adv) / (mib << 8) * 1e9)
            for key, adv in (("huge_cold", mmap.MADV_HUGEPAGE),
                             ("huge_warm", mmap.MADV_HUGEPAGE),
                             ("small", mmap.MADV_NOHUGEPAGE))}


def machine_info(our_bin):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": sh("nproc"),
        "free_g": sh("free -g"),
        "cpu_model": cpu,
        "kernel": platform.release(),
        "host": sh("uname -a"),
        "stock_qemu": sh(f"{harness.STOCK_QEMU} --version | head -1"),
        "our_qemu": sh(f"{our_bin} --version | head -1"),
        "our_qemu_key": sh(f"cat {os.path.dirname(harness.OUR_QEMU)}/.key"),
        "our_qemu_patched": "free-page-hint-wait-ms" in sh(
            f"{our_bin} -device virtio-balloon-pci,help 2>&1"),
        "guest_kernel": harness.guest_kernel(),
        "host_thp": host_thp(),
        "host_reporting": host_reporting(),
        "fault_ns_per_4k": fault_probe(),
        "git": sh(f"git -C {TOP} rev-parse --short HEAD"),
        "git_dirty": bool(sh(f"git -C {TOP} status --porcelain guest "
                             "host-qemu-patch tests")),
    }


def snapshot_our_qemu(wait_s=900):
    """Copy build/qemu/qemu-system-x86_64 so that a rebuild during the run
    does not change the binary under test (the name stays
    qemu-system-x86_64: the main thread's name is the CPU-time key)."""
    deadline = time.time() + wait_s
    while not os.access(harness.OUR_QEMU, os.X_OK):
        if time.time() > deadline:
            raise SystemExit(f"{harness.OUR_QEMU} missing; run make qemu")
        log(f"{harness.OUR_QEMU} missing (being rebuilt?), waiting")
        time.sleep(10)
    os.makedirs(OUR_COPY_DIR, exist_ok=True)
    dst = os.path.join(OUR_COPY_DIR, "qemu-system-x86_64")
    for _ in range(30):
        try:
            shutil.copy2(harness.OUR_QEMU, dst + ".tmp")
            os.replace(dst + ".tmp", dst)
            subprocess.run([dst, "--version"], check=True,
                           capture_output=True, timeout=30)
            return dst
        except (OSError, subprocess.SubprocessError):
            time.sleep(10)
    raise SystemExit("could not snapshot our QEMU")


# --------------------------------------------------------------------------

def parse_cells(spec):
    """'cfg,cfg:wl,wl:mem,mem' (each part optional, '*' = all)."""
    cfgs, wls, mems = (spec.split(":") + ["*", "*"])[:3]
    cfgs = CONFIG_ORDER if cfgs in ("", "*") else cfgs.split(",")
    wls = WORKLOAD_ORDER if wls in ("", "*") else wls.split(",")
    mems = [1024] if mems in ("", "*") else [int(m) for m in mems.split(",")]
    return [(c, w, m) for m in mems for w in wls for c in cfgs]


def estimate(cell, history):
    """Seconds one run of cell takes: observed mean of the same
    (workload, size), else a size-based prior."""
    _, wl, mem = cell
    same = [h for (w, m, h) in history if w == wl and m == mem]
    if same:
        return statistics.mean(same)
    size = [h * 1024 / m for (w, m, h) in history if m]
    base = statistics.mean(size) if size else 30.0
    return base * (0.6 + 0.4 * mem / 1024)


def write_outputs(results):
    harness.save_json(RESULTS, results)
    table = make_table(results)
    with open(TABLE, "w") as f:
        f.write(table)
    try:
        import plot_bench  # pylint: disable=import-outside-toplevel
        return plot_bench.plot(results, OUT)
    except Exception as exc:  # pylint: disable=broad-except
        log(f"plots failed: {exc!r}")
        return []


DOC = os.path.join(TOP, "Documentation", "benchmarks.md")
DOC_BEGIN, DOC_END = "<!-- bench:begin -->", "<!-- bench:end -->"


def update_doc(results, pngs):
    """Replace the generated part of Documentation/benchmarks.md and copy
    the plots to Documentation/bench/."""
    meta = results.get("meta", {})
    figdir = os.path.join(TOP, "Documentation", "bench")
    os.makedirs(figdir, exist_ok=True)
    for p in pngs:
        shutil.copy2(p, figdir)
    summ = summarize(results["runs"])
    mode = meta.get("mode", "?")
    lines = [DOC_BEGIN, "",
             f"## Latest results ({mode} run) — TCG timings", ""]
    if mode != "full":
        lines += [f"**This is the {mode} run, not the full matrix.**", ""]
    lines += ["Command:", "", "```",
              *((["make bench" + (" QUICK=1" if mode == "quick" else ""),
                   f"# runs: {meta.get('command', '?')}"])
                if mode in ("quick", "full") else
                [meta.get("command", "?")]), "```", "",
              f"Started {meta.get('started')}, finished "
              f"{meta.get('finished')} ({meta.get('elapsed_min')} min), "
              f"{len(results['runs'])} runs in {len(summ)} cells, "
              f"{meta.get('repeats')} repeat(s) per cell, tree at "
              f"`{meta.get('git')}`"
              f"{' (with uncommitted changes by others)' if meta.get('git_dirty') else ''}.",
              ""]
    if meta.get("skipped_runs"):
        lines += [f"{len(meta['skipped_runs'])} runs were skipped by the "
                  "time budget.", ""]
    lines += ["Machine:", "", "```",
              f"nproc: {meta.get('nproc')}",
              f"CPU: {meta.get('cpu_model')}",
              f"kernel: {meta.get('host')}",
              "free -g:", meta.get("free_g", ""),
              f"stock QEMU: {meta.get('stock_qemu')} (/usr/bin)",
              f"our QEMU: {meta.get('our_qemu')}, series key "
              f"{meta.get('our_qemu_key')}, patched="
              f"{meta.get('our_qemu_patched')}",
              f"guest kernel: {meta.get('guest_kernel')}",
              f"host THP: {meta.get('host_thp')}, first touch ns per 4 KiB: "
              f"{meta.get('fault_ns_per_4k')}",
              "page_reporting: " + " ".join(
                  f"{k}={v}" for k, v in
                  (meta.get("host_reporting") or {}).items()
                  if k in ("page_reporting_order", "min_free_ms",
                           "max_waiting_mib")),
              "```", "",
              "The machine was shared with other jobs while the benchmark "
              "ran (load average at each run start is in results.json); "
              "the spreads include that noise.", "",
              "### Headline: (d) vs (b) and vs (a) — TCG timings", ""]
    lines += [f"- {h}" for h in headline(results)] + [""]
    lines += [make_table(results).replace("### ", "### "), ""]
    for p in pngs:
        name = os.path.basename(p)
        lines += [f"![{name}](bench/{name})", ""]
    lines.append(DOC_END)
    block = "\n".join(lines)
    try:
        with open(DOC) as f:
            text = f.read()
    except OSError:
        text = f"# Benchmarks\n\n{DOC_BEGIN}\n{DOC_END}\n"
    if DOC_BEGIN in text and DOC_END in text:
        head, rest = text.split(DOC_BEGIN, 1)
        tail = rest.split(DOC_END, 1)[1]
        text = head + block + tail
    else:
        text += "\n" + block + "\n"
    with open(DOC, "w") as f:
        f.write(text)
    log(f"updated {DOC}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="1 GiB, configs a b d, fresh+stale(+bw), 1 repeat")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--cells", default=None,
                    help="CFGS:WORKLOADS:MEMS, e.g. 'b,d:stale:1024,2048'")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="stop starting runs after this many minutes")
    ap.add_argument("--only-report", action="store_true",
                    help="redo table and plots from results.json")
    ap.add_argument("--update-doc", action="store_true",
                    help="write the results into Documentation/benchmarks.md")
    ap.add_argument("--append", action="store_true",
                    help="add to the existing results.json")
    ap.add_argument("--dst-prealloc", action="store_true",
                    help="start every destination with -mem-prealloc, so "
                    "the load writes into RAM that is already there")
    ap.add_argument("--host-thp", choices=("always", "madvise", "never"),
                    help="set the host's transparent huge page mode for "
                    "the run (both QEMUs, every config); restored after")
    ap.add_argument("--host-warm-memory", action="store_true",
                    help="on a host that reports its free memory to an "
                    "outer host (a nested VM), hold freed memory back for "
                    "the run, so first touches cost what they cost on a "
                    "host that keeps its memory; restored after")
    ap.add_argument("--downtime-limit", type=int, metavar="MS",
                    default=harness.DOWNTIME_LIMIT_MS,
                    help="migration downtime-limit for every run "
                    f"(default {harness.DOWNTIME_LIMIT_MS}, QEMU's own)")
    a = ap.parse_args()
    if not 1 <= a.downtime_limit <= 2000000:
        ap.error("--downtime-limit must be 1..2000000 ms (QEMU takes up "
                 "to 2000 s)")
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(os.path.join(TOP, "build", "tmp"), exist_ok=True)

    if a.only_report:
        with open(RESULTS) as f:
            results = json.load(f)
        pngs = write_outputs(results)
        print(make_table(results))
        log(f"wrote {TABLE} {' '.join(pngs)}")
        if a.update_doc:
            update_doc(results, pngs)
        return 0

    if a.cells:
        cells, mode = parse_cells(a.cells), "custom"
    elif a.quick:
        cells, mode = quick_matrix(), "quick"
    else:
        cells, mode = full_matrix(), "full"
    repeats = a.repeats or (1 if a.quick else 3)
    if a.host_thp:
        keep_thp(a.host_thp)
    if a.host_warm_memory:
        hold_freed_memory(HOLD_WARM_MIB)
    dst_args = harness.PREALLOC_DST if a.dst_prealloc else ()
    our_bin = snapshot_our_qemu()
    meta = machine_info(our_bin)
    if not meta["our_qemu_patched"]:
        log("WARNING: build/qemu/qemu-system-x86_64 has no "
            "free-page-hint-wait-ms property: not the patched QEMU")
    meta.update(mode=mode, repeats=repeats,
                started=time.strftime("%Y-%m-%d %H:%M:%S"),
                command=" ".join([sys.executable] + sys.argv),
                cells=[list(c) for c in cells], dst_args=list(dst_args),
                downtime_limit_ms=a.downtime_limit,
                configs={k: v[4] for k, v in CONFIGS.items()})
    results = {"meta": meta, "runs": []}
    if a.append and os.path.exists(RESULTS):
        with open(RESULTS) as f:
            old = json.load(f)
        results["runs"] = old.get("runs", [])
        meta["previous"] = old.get("meta")
    # Round-robin over repeats: every cell gets its first run before any
    # gets its second, so noise from other load on the machine spreads over
    # all cells, and a budget cut leaves a complete (shorter) matrix.
    plan = [(c, r) for r in range(repeats) for c in cells]
    log(f"{mode} matrix: {len(cells)} cells x {repeats} = {len(plan)} runs; "
        f"our QEMU {meta['our_qemu']} (patched={meta['our_qemu_patched']}); "
        "TCG timings")
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
        cfg, wl, mem = cell
        log(f"run {i + 1}/{len(plan)}: config {cfg} workload {wl} "
            f"{_size(mem)} repeat {rep + 1}/{repeats} — {len(left) - 1} left "
            f"after this, ETA {eta / 60:.1f} min "
            f"(~{time.strftime('%H:%M', time.localtime(time.time() + eta))})")
        reported0 = reported_kib()
        res = run_one(cfg, wl, mem, rep, our_bin, seed0 + i, dst_args,
                      a.downtime_limit)
        if reported0 is not None:
            # Memory this host handed its own host during the run: what a
            # later first touch pays the outer host's fault for.
            res["host_reported_mib"] = (reported_kib() - reported0) >> 10
        history.append((wl, mem, res["wall_s"]))
        results["runs"].append(res)
        fg = figures(res)
        log(f"  -> {'ok' if res.get('ok') else 'FAIL'} "
            f"{res.get('status')} sent {fg.get('transferred_mb')} MB in "
            f"{fg.get('total_ms')} ms, downtime {fg.get('downtime_ms')} ms"
            + (f", hinted {fg['hinted_mb']} MB" if "hinted_mb" in fg else "")
            + f" (wall {res['wall_s']} s)"
            + ("" if res.get("ok") else f"; {str(res.get('error'))[:160]}"
               f" {res.get('kernel_errors', [])[:1]}"))
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        meta["elapsed_min"] = round((time.time() - t_start) / 60, 1)
        harness.save_json(RESULTS, results)
    pngs = write_outputs(results)
    print(make_table(results))
    for line in headline(results):
        log(line)
    log(f"wrote {RESULTS}, {TABLE}, {' '.join(pngs)} in "
        f"{(time.time() - t_start) / 60:.1f} min")
    if a.update_doc:
        update_doc(results, pngs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
