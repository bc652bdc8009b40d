# SPDX-License-Identifier: GPL-2.0
"""Statistics and Markdown tables of benchmark results: per-run figures,
per-cell median (min-max), ratios to configuration (b), failures.  Runs
taken on a tuned host (meta "host_tuned") are labelled so in every
heading."""
import json
import statistics

from hb.channel import parse_kv

from engine import BW_SLICE_S
from scenarios import CONFIG_ORDER, NOTHING_STALE, REF, SMP, WORKLOAD_ORDER


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
        # the migration thread: "mig/src/main" in 10.0 ("live_migration"
        # in older QEMUs)
        f["cpu_mig_s"] = cpu_sum(lambda k: k in ("live_migration",
                                                 "mig/src/main")) or 0.0
        f["cpu_io_s"] = cpu_sum(lambda k: k == "IO hbio") or 0.0
        f["cpu_vcpu_s"] = cpu_sum(lambda k: "/TCG" in k)
    dst_cpu = run.get("cpu_dst_s")
    if dst_cpu:
        f["cpu_dst_s"] = round(sum(dst_cpu.values()), 3)
    host = run.get("host_cpu_s")
    if host and host.get("busy_s", 0) + host.get("idle_s", 0) > 0:
        f["host_idle_pct"] = round(100 * host["idle_s"] /
                                   (host["busy_s"] + host["idle_s"]), 1)
    gh, ghb = run.get("guest_hint"), run.get("guest_hint_before") or {}
    if gh:
        if _num(gh.get("last_round_ns")) is not None:
            f["hint_round_ms"] = round(gh["last_round_ns"] / 1e6, 2)
        if _num(gh.get("bytes_hinted")) is not None:
            f["hinted_mb"] = round((gh["bytes_hinted"] -
                                    (ghb.get("bytes_hinted") or 0)) / 1e6, 1)
        if _num(gh.get("rounds")) is not None:
            f["hint_rounds"] = gh["rounds"] - (ghb.get("rounds") or 0)
    gib = (run.get("cell") or {}).get("mem_mib", 0) / 1024
    # every hop's total time (the figures above are the first hop's)
    hops = run.get("hops") or []
    all_hops_ms = (f["total_ms"] or 0) + sum(h.get("total_ms") or 0
                                             for h in hops)
    rounds = hint_rounds_polled(run)
    if rounds:
        f["first_round_ms"] = round(rounds[0] / 1e6, 2)
        f["max_round_ms"] = round(max(rounds) / 1e6, 2)
        # the first round seen per GiB of guest RAM (wall time)
        if gib:
            f["round_ms_per_gib"] = round(f["first_round_ms"] / gib, 2)
    # The guest's cost: the vCPU time its rounds took during the migration
    # (every hop's), from the driver's rounds_cpu_ns, per GiB of guest RAM
    # and as a share of one vCPU over the migration's total time.
    if gh and _num(gh.get("rounds_cpu_ns")) is not None:
        f["guest_cpu_ms"] = round((gh["rounds_cpu_ns"] -
                                   (ghb.get("rounds_cpu_ns") or 0)) / 1e6, 2)
        if gib:
            f["guest_cpu_ms_per_gib"] = round(f["guest_cpu_ms"] / gib, 2)
        if all_hops_ms:
            f["guest_vcpu_pct"] = round(
                100 * f["guest_cpu_ms"] / all_hops_ms, 2)
    dev = run.get("device_src")
    if isinstance(dev, dict) and "clear-ns" in dev:
        pages = (dev.get("hinted-bytes") or 0) / 4096
        f["host_ns_per_page"] = (round(dev["clear-ns"] / pages, 1)
                                 if pages else None)
        f["cleared_mb"] = round((dev.get("cleared-pages") or 0) * 4096 / 1e6,
                                1)
        f["presend_wait_ms"] = dev.get("presend-wait-ms")
        f["presend_timeouts"] = dev.get("presend-timeouts")
    if hops and f["transferred_mb"] is not None:
        # every hop together (the figures above are the first hop's)
        f["hops_transferred_mb"] = round(f["transferred_mb"] + sum(
            h.get("transferred_mb") or 0 for h in hops), 1)
        f["hops_total_ms"] = all_hops_ms
        f["hops_max_downtime_ms"] = max(
            [f["downtime_ms"] or 0] + [h.get("downtime_ms") or 0
                                       for h in hops])
    # what the migration started with: the setup phase (our QEMU's
    # pre-send wait for the first hint round is in it), the guest's free
    # memory ("recent": read right after its stale data was freed)
    f["setup_ms"] = _num((run.get("migration") or {}).get("setup-time"))
    mem = run.get("meminfo_at_migrate") or run.get("meminfo_before") or {}
    if _num(mem.get("free_kb")) is not None:
        f["free_mb"] = round(mem["free_kb"] * 1024 / 1e6, 1)
    # free pages on the guest's per-CPU lists, which MemFree leaves out and
    # neither hinting nor reporting reaches (benchmarks.md, frag)
    if _num(mem.get("pcp_kb")) is not None:
        f["pcp_mb"] = round(mem["pcp_kb"] * 1024 / 1e6, 1)
    if isinstance(dev, dict) and _num(dev.get("hinted-bytes")) is not None:
        f["host_hinted_mb"] = round(dev["hinted-bytes"] / 1e6, 1)
    # free page reporting: the wait for it to settle before the migration,
    # and how much guest RAM the source QEMU gave back meanwhile
    st = run.get("settle") or {}
    if _num(st.get("settle_s")) is not None:
        f["settle_s"] = st["settle_s"]
        if _num(st.get("rss_start_mib")) is not None:
            f["reported_mb"] = round((st["rss_start_mib"] -
                                      st["rss_end_mib"]) * 1.048576, 1)
    snap = run.get("snapshot") or {}
    if _num(snap.get("allocated_bytes")) is not None:
        f["file_mb"] = round(snap["allocated_bytes"] / 1e6, 1)
        f["restore_ms"] = _num(snap.get("restore_ms"))
    passes = [p["ms"] for p in run.get("reuse") or [] if _num(p.get("ms"))]
    if passes:
        f["reuse_ms"] = statistics.median(passes)
        f["reuse_first_ms"] = passes[0]
        grew = [p["rss_after_mib"] - p["rss_before_mib"]
                for p in run["reuse"] if _num(p.get("rss_after_mib"))]
        if grew:
            f["reuse_refault_mb"] = round(statistics.median(grew) * 1.048576,
                                          1)
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
        kv = parse_kv(" ".join(parts[2:]))
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
    ("cpu_vcpu_s", "CPU vCPUs", "s", True),
    ("cpu_dst_s", "CPU destination", "s", True),
    ("host_idle_pct", "host CPUs idle", "%", False),
    ("first_round_ms", "first hint round", "ms", False),
    ("round_ms_per_gib", "guest round per GiB", "ms", False),
    ("guest_cpu_ms", "guest CPU in rounds", "ms", False),
    ("guest_cpu_ms_per_gib", "guest CPU per GiB", "ms", False),
    ("guest_vcpu_pct", "guest rounds, share of a vCPU", "%", False),
    ("hint_round_ms", "last hint round", "ms", False),
    ("hinted_mb", "hinted", "MB", False),
    ("host_ns_per_page", "host ns/4K page", "ns", False),
    ("presend_wait_ms", "host pre-send wait", "ms", False),
    ("hops_transferred_mb", "all hops: bytes sent", "MB", False),
    ("hops_total_ms", "all hops: total time", "ms", False),
    ("hops_max_downtime_ms", "all hops: worst downtime", "ms", False),
    ("bw_idle_mib_s", "bw idle", "MiB/s", False),
    ("bw_worst_mib_s", "bw worst during", "MiB/s", False),
    ("bw_slowdown_pct", "bw slowdown", "%", False),
    ("setup_ms", "setup", "ms", False),
    ("free_mb", "guest free", "MB", False),
    ("pcp_mb", "guest per-CPU lists", "MB", False),
    ("host_hinted_mb", "host hinted", "MB", False),
    ("settle_s", "reporting settle", "s", False),
    ("reported_mb", "reported before", "MB", False),
    ("file_mb", "snapshot file", "MB", True),
    ("restore_ms", "restore", "ms", True),
    ("reuse_ms", "rewrite freed", "ms", False),
    ("reuse_refault_mb", "rewrite refaulted", "MB", False),
]


def cell_key(run):
    """(workload, guest MiB, configuration, vCPUs)."""
    c = run["cell"]
    return (c["workload"], c["mem_mib"], c["config"], c.get("smp", SMP))


def summarize(runs):
    """{(wl, mem, cfg, smp): {n, fails, errors, ok{fig: (med, min, max)},
    completed{...}}}"""
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


def _size(mem, smp=SMP):
    return f"{mem // 1024} GiB" + ("" if smp == SMP else f", {smp} vCPU")


def sorted_keys(summ):
    return sorted(summ, key=lambda k: (WORKLOAD_ORDER.index(k[0]), k[1],
                                       k[3], CONFIG_ORDER.index(k[2])))


def tuned_label(meta):
    """' — host-tuned (...)' for runs on a tuned host, else ''."""
    t = meta.get("host_tuned")
    return f" — **host-tuned ({t})**" if t else ""


def zero_page_params(meta):
    """The host kernel's command-line parameters about its zero page (a
    kernel can be told not to map it for reads), as " (host kernel: ...)",
    or ""."""
    params = [p for p in (meta.get("host_cmdline") or "").split()
              if "zero_page" in p]
    return f" (host kernel: {' '.join(params)})" if params else ""


def make_table(results):
    runs = results["runs"]
    summ = summarize(runs)
    meta = results.get("meta", {})
    lines = []
    tuned = tuned_label(meta)
    lines.append(f"Matrix: {meta.get('mode', '?')} run, {len(runs)} runs, "
                 f"{meta.get('repeats', '?')} repeat(s) per cell"
                 + (f" ({meta['compare_repeats']} in the comparison with "
                    "free page reporting and multifd)"
                    if meta.get("compare_repeats") else "") + ", "
                 f"started {meta.get('started', '?')}; **TCG timings**{tuned}.")
    probe = meta.get("fault_ns_per_4k", {})
    if "read_resident_pct" in probe:
        lines.append("")
        lines.append(
            f"Host fault probe, ns per 4 KiB of fresh memory: write "
            f"{probe['huge_cold']} (huge, cold), {probe['huge_warm']} "
            f"(huge, warm); read {probe['read']} (huge, warm) with "
            f"{probe['read_resident_pct']} % made resident" +
            (" — reads allocate here" + zero_page_params(meta) +
             ": a and b pay a first touch for every zero page, so time "
             "ratios against them mostly measure the host."
             if probe["read_resident_pct"] >= 50 else "."))
    lines.append("")
    lines.append(f"### Ratios to configuration (b) — TCG timings{tuned}")
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
        wl, mem, cfg, smp = key
        s = summ[key]
        ref = summ.get((wl, mem, REF, smp), {}).get("completed", {})
        row = [wl, _size(mem, smp), cfg]
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
    lines.append(f"### Absolute values, median (min–max) — TCG timings{tuned}")
    lines.append("")
    lines.append("First hint round = the first round completed during "
                 "the migration (in-guest poll of `rounds`/`last_round_ns` "
                 "every 200 ms); last hint round = `last_round_ns` after "
                 "it; guest round per GiB = the first round / guest GiB "
                 "(wall time: a round lasts until the device returned its "
                 "chains); guest CPU in rounds = the vCPU time of every "
                 "round during the migration (all hops), from our driver's "
                 "`rounds_cpu_ns`; per GiB = over the guest's GiB; share of "
                 "a vCPU = over the migration's total time; host pre-send wait "
                 "= our QEMU's `presend-wait-ms` "
                 "(how long RAM sending waited for the guest's first "
                 "round, at most 2000 ms); hinted = "
                 "`bytes_hinted` during the migration (our driver only); "
                 "host ns/4K page = device `clear-ns` (waits for "
                 "`bitmap_mutex` included) / (`hinted-bytes` / 4096) (our "
                 "QEMU only); bw = `hbwork bandwidth 16 1` slices "
                 "in the guest: idle before the migration, worst slice "
                 "overlapping the migration, slowdown = 1 - worst/idle "
                 "(stale+bw cells only); setup = `setup-time` (our QEMU's "
                 "pre-send wait is in it); guest free = MemFree when the "
                 "migration starts (recent: right after its data was "
                 "freed); host hinted = our QEMU's `hinted-bytes`; "
                 "reporting settle = the wait until free page reporting "
                 "settled (r, d+r: the source's RssAnon fell by less "
                 "than 16 MiB in 4 s), reported before = what the source's "
                 "RssAnon fell by meanwhile; snapshot file = the mapped-ram "
                 "file's allocated bytes (st_blocks), its save time is the "
                 "total time, restore = `migrate-incoming` until the "
                 "load completed; rewrite freed = the guest's time to "
                 "write its freed memory again once reporting settled "
                 "(reuse; median of its passes), rewrite refaulted = "
                 "what the source's RssAnon grew by meanwhile.  "
                 "CPU main, migration, iothread, "
                 "vCPUs = source QEMU threads during the migration; CPU "
                 "destination = all threads of the destination QEMU over "
                 "the same time; host CPUs idle = idle share of all the "
                 "host's CPUs over the same time.")
    lines.append("")
    lines.append("| workload | size | config | runs | " +
                 " | ".join(f"{t}{' (' + u + ')' if u else ''}"
                            for _, t, u, _ in FIGS) + " |")
    lines.append("|---|---|---|---|" + "---|" * len(FIGS))
    for key in sorted_keys(summ):
        wl, mem, cfg, smp = key
        s = summ[key]
        row = [wl, _size(mem, smp), cfg]
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
    lines += targets_table(summ)
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


# What our stack (d) is held to, per cell, against the stock pair of the
# same run: downtime no longer than without hinting (a) and at most 10 ms
# above stock hinting (b); bytes within 1.15x of the floor, the same guest
# fresh from boot (d, fresh: the live data and nothing to hint); total time
# at most half of stock hinting's (not on the workloads without stale data,
# which have nothing to hint).  Medians; (b) over its completed runs.
DOWNTIME_SLACK_MS = 10
FLOOR_FACTOR = 1.15
TIME_FACTOR = 0.5
# Against free page reporting (r), medians of the same run: on fresh and
# stale, total time and bytes no more than r's; on frag and recent, bytes
# at most R_BYTES_FACTOR x r's; hinting and reporting together (d+r) no
# slower than the better of d and r; on reuse, d's rewrite of its freed
# memory within noise of a's (at most the larger of a's slowest run and
# REUSE_NOISE x a's median), r's shown next to it; bytes hinted during a
# migration at most HINT_FREE_FACTOR x the guest's free memory.
R_BYTES_FACTOR = 0.7
REUSE_NOISE = 1.10
HINT_FREE_FACTOR = 2


def _med(summ, key, label="ok"):
    s = summ.get(key)
    if not s or (label == "ok" and s["fails"]):
        return {}
    return {f: v[0] for f, v in s[label].items()}


def targets(summ):
    """[(wl, mem, smp, {check: (value, bound, met)})] for every cell of d."""
    out = []
    for key in sorted_keys(summ):
        wl, mem, cfg, smp = key
        if cfg != "d":
            continue
        d = _med(summ, key)
        a = _med(summ, (wl, mem, "a", smp))
        b = _med(summ, (wl, mem, REF, smp), "completed")
        floor = _med(summ, ("fresh", mem, "d", smp)).get("transferred_mb")
        checks = {}
        if summ[key]["fails"]:
            checks["data"] = (summ[key]["fails"], 0, False)
        dt = d.get("downtime_ms")
        if dt is not None and a.get("downtime_ms") is not None:
            checks["downtime<=a"] = (dt, a["downtime_ms"],
                                     dt <= a["downtime_ms"])
        if dt is not None and b.get("downtime_ms") is not None:
            bound = b["downtime_ms"] + DOWNTIME_SLACK_MS
            checks["downtime<=b+10"] = (dt, bound, dt <= bound)
        mb = d.get("transferred_mb")
        if mb is not None and floor and wl == "stale":
            bound = round(floor * FLOOR_FACTOR, 1)
            checks["bytes<=1.15floor"] = (mb, bound, mb <= bound)
        t = d.get("total_ms")
        if (t is not None and b.get("total_ms") is not None and
                wl not in NOTHING_STALE):
            bound = round(b["total_ms"] * TIME_FACTOR)
            checks["time<=0.5b"] = (t, bound, t <= bound)
        checks.update(reporting_checks(summ, key, d))
        out.append((wl, mem, smp, checks))
    return out


def _failed(summ, key):
    """(value, bound, met) of a check whose reference cell lost data."""
    s = summ[key]
    return (f"{key[2]} FAIL {s['fails']}/{s['n']}", None, False)


def reporting_checks(summ, key, d):
    """d's checks against free page reporting in cell `key` (see
    R_BYTES_FACTOR); a reference cell with a failed data check makes its
    checks missed."""
    wl, mem, _, smp = key
    checks = {}
    rkey, drkey, akey = ((wl, mem, c, smp) for c in ("r", "d+r", "a"))
    r = _med(summ, rkey)
    t, mb = d.get("total_ms"), d.get("transferred_mb")
    if wl in ("fresh", "stale") and rkey in summ:
        if summ[rkey]["fails"]:
            checks["time<=r"] = checks["bytes<=r"] = _failed(summ, rkey)
        else:
            if t is not None and r.get("total_ms") is not None:
                checks["time<=r"] = (t, r["total_ms"], t <= r["total_ms"])
            if mb is not None and r.get("transferred_mb") is not None:
                checks["bytes<=r"] = (mb, r["transferred_mb"],
                                      mb <= r["transferred_mb"])
    if wl in ("frag", "recent") and rkey in summ:
        if summ[rkey]["fails"]:
            checks["bytes<=0.7r"] = _failed(summ, rkey)
        elif mb is not None and r.get("transferred_mb") is not None:
            bound = round(r["transferred_mb"] * R_BYTES_FACTOR, 1)
            checks["bytes<=0.7r"] = (mb, bound, mb <= bound)
    if drkey in summ and wl != "reuse":
        if summ[drkey]["fails"]:
            checks["d+r<=min(d,r)"] = _failed(summ, drkey)
        else:
            dr = _med(summ, drkey).get("total_ms")
            best = [x for x in (t, r.get("total_ms")) if x is not None]
            if dr is not None and best:
                checks["d+r<=min(d,r)"] = (dr, min(best), dr <= min(best))
    if wl == "reuse" and akey in summ and not summ[akey]["fails"]:
        a = summ[akey]["ok"].get("reuse_ms")
        v = d.get("reuse_ms")
        if a and v is not None:
            bound = max(a[2], a[0] * REUSE_NOISE)
            note = r.get("reuse_ms")
            checks["reuse~a"] = (v, bound, v <= bound,
                                 None if note is None else f"r {_fmt(note)}")
    hinted, free = d.get("hinted_mb"), d.get("free_mb")
    if hinted is not None and free:
        bound = round(free * HINT_FREE_FACTOR, 1)
        checks["hinted<=2free"] = (hinted, bound, hinted <= bound)
    return checks


def targets_table(summ):
    rows = targets(summ)
    if not rows:
        return []
    names = ["downtime<=a", "downtime<=b+10", "bytes<=1.15floor",
             "time<=0.5b", "time<=r", "bytes<=r", "bytes<=0.7r",
             "d+r<=min(d,r)", "reuse~a", "hinted<=2free"]
    names = [n for n in names if any(n in c for *_, c in rows)] or names[:4]
    lines = ["### Targets of configuration (d)", "",
             "Per cell, d's median against its bound from the same run: "
             "downtime ≤ (a)'s median and ≤ (b)'s + "
             f"{DOWNTIME_SLACK_MS} ms; bytes ≤ {FLOOR_FACTOR}x the floor "
             "(d on the same size fresh from boot; stale only); total "
             f"time ≤ {TIME_FACTOR}x (b)'s (not for fresh and "
             "fresh+churn-all, which have nothing to hint).  Against free "
             "page reporting (r): total time and bytes ≤ (r)'s on fresh "
             f"and stale; bytes ≤ {R_BYTES_FACTOR}x (r)'s on frag and "
             "recent; d+r's total time ≤ the better of d's and r's; on "
             "reuse, d's time to rewrite its freed memory ≤ (a)'s slowest "
             f"run or {REUSE_NOISE}x (a)'s median, whichever is larger "
             "(noise), r's median next to it; bytes hinted during the "
             f"migration ≤ {HINT_FREE_FACTOR}x the guest's free memory "
             "when it started.  **no** marks a target missed.", "",
             "| workload | size | " + " | ".join(
                 n.replace("<=", " ≤ ") for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for wl, mem, smp, checks in rows:
        row = [wl, _size(mem, smp)]
        if "data" in checks:
            row += [f"**FAIL {checks['data'][0]} run(s)**"] + \
                [""] * (len(names) - 1)
        else:
            for n in names:
                c = checks.get(n)
                if c is None:
                    row.append("–")
                elif isinstance(c[0], str):
                    row.append(f"**{c[0]}**")
                else:
                    row.append(f"{_fmt(c[0])} / {_fmt(c[1])}"
                               + (f" ({c[3]})" if len(c) > 3 and c[3]
                                  else "")
                               + ("" if c[2] else " **no**"))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


def headline(results):
    """d vs b: bytes and total time per workload and size."""
    summ = summarize(results["runs"])
    out = []
    for key in sorted_keys(summ):
        wl, mem, cfg, smp = key
        if cfg != "d":
            continue
        ref = summ.get((wl, mem, REF, smp), {}).get("completed", {})
        s = summ[key]
        if s["fails"]:
            out.append(f"{wl} {_size(mem, smp)}: d FAIL {s['fails']}/{s['n']}")
            continue
        parts = []
        for fig, name in (("transferred_mb", "bytes"), ("total_ms", "time")):
            v, r = s["ok"].get(fig), ref.get(fig)
            if v and r and r[0]:
                parts.append(f"{name} {v[0] / r[0]:.2f}x")
        line = f"{wl} {_size(mem, smp)}: d/b " + ", ".join(parts)
        for other in ("a", "r"):
            ca = summ.get((wl, mem, other, smp), {})
            if ca and not ca["fails"]:
                parts = []
                for fig, name in (("transferred_mb", "bytes"),
                                  ("total_ms", "time"),
                                  ("file_mb", "file"),
                                  ("reuse_ms", "rewrite")):
                    v, r = s["ok"].get(fig), ca["ok"].get(fig)
                    if v and r and r[0]:
                        parts.append(f"{name} {v[0] / r[0]:.2f}x")
                line += f"; d/{other} " + ", ".join(parts)
        out.append(line)
    return out


# What summary() keeps of each cell.
SUMMARY_FIGS = ("transferred_mb", "total_ms", "downtime_ms", "setup_ms",
                "normal_pages", "zero_pages", "dirty_syncs", "cpu_mig_s",
                "cpu_dst_s", "hinted_mb", "host_hinted_mb", "free_mb", "pcp_mb",
                "presend_wait_ms", "settle_s", "reported_mb", "file_mb",
                "restore_ms", "reuse_ms", "reuse_first_ms",
                "reuse_refault_mb")


def summary(results):
    """A small record of a run to keep with the docs: what ran (no paths,
    no host names), every cell's median [min, max] of SUMMARY_FIGS over its
    intact runs, and d's targets."""
    meta = results.get("meta", {})
    summ = summarize(results["runs"])
    out = {"what": "make bench (scripts/bench): medians [min, max] per "
                   "cell over its intact runs; TCG timings",
           "meta": {k: meta.get(k) for k in (
               "stack", "guest_kernel", "stock_qemu", "our_qemu",
               "our_qemu_key", "mode", "repeats", "compare_repeats",
               "started", "elapsed_min", "downtime_limit_ms", "dst_args",
               "host_tuned", "nproc", "fault_ns_per_4k", "git", "git_dirty",
               "driver_hash")},
           "cells": [], "targets": []}
    cmd = meta.get("command") or ""
    out["meta"]["args"] = cmd.split("scripts/bench", 1)[-1].strip()
    for key in sorted_keys(summ):
        wl, mem, cfg, smp = key
        s = summ[key]
        cell = {"workload": wl, "mem_mib": mem, "config": cfg, "smp": smp,
                "runs": s["n"], "failed": s["fails"]}
        for fig in SUMMARY_FIGS:
            v = s["ok"].get(fig)
            if v is not None:
                cell[fig] = [v[0], v[1], v[2]]
        out["cells"].append(cell)
    for wl, mem, smp, checks in targets(summ):
        out["targets"].append({
            "workload": wl, "mem_mib": mem, "smp": smp,
            "checks": {n: dict({"value": c[0], "bound": c[1], "met": c[2]},
                               **({"note": c[3]} if len(c) > 3 and c[3]
                                  else {}))
                       for n, c in checks.items()}})
    return out


def compact_json(obj):
    """JSON text with every cell and target of a summary() on one line."""
    def one_line(x):
        return json.dumps(x, sort_keys=True, separators=(", ", ": "))

    def dump(x, ind):
        pad = " " * ind
        if isinstance(x, dict) and x and not ("config" in x or
                                              "checks" in x):
            return "{\n" + ",\n".join(
                f"{pad} {json.dumps(k)}: {dump(v, ind + 1)}"
                for k, v in sorted(x.items())) + f"\n{pad}}}"
        if isinstance(x, list) and any(isinstance(v, dict) for v in x):
            return "[\n" + ",\n".join(f"{pad} {dump(v, ind + 1)}"
                                       for v in x) + f"\n{pad}]"
        return one_line(x)
    return dump(obj, 0) + "\n"


def summary_json(results):
    """summary() as JSON text, one line per cell and target."""
    return compact_json(summary(results))
