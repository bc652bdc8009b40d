# SPDX-License-Identifier: GPL-2.0
"""Statistics and Markdown tables of benchmark results: per-run figures,
per-cell median (min-max), ratios to configuration (b), failures, and
d's targets.  A cell is (workload, guest MiB, configuration, vCPUs,
destination memory state, link); runs recorded before the last two were
measured count as cold and unlimited.  Runs taken on a tuned host (meta
"host_tuned") are labelled so in every heading."""
import json
import math
import re
import statistics

from hb.channel import parse_kv

from engine import BW_SLICE_S
from scenarios import (CONFIG_ORDER, LINKS, NOTHING_STALE, REF, SMP,
                       WORKLOAD_ORDER, link_name, link_order)

DST_ORDER = ("warm", "cold")


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
    # ... and its longest lock holds (zone lock, per-CPU list lock) since
    # the guest booted, which in a bench run is this migration's rounds
    for key, fig in (("max_hold_ns", "max_hold_us"),
                     ("max_pcp_hold_ns", "max_pcp_hold_us")):
        if gh and _num(gh.get(key)) is not None:
            f[fig] = round(gh[key] / 1e3, 1)
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


def _records(lines, tag, nfields):
    """The fields of each line of `lines` (a guest's tagged output) whose
    first field is `tag` and that has at least `nfields` fields."""
    for line in lines or []:
        fields = line.split()
        if len(fields) >= nfields and fields[0] == tag:
            yield fields


def hint_rounds_polled(run):
    """Durations (ns) of the hint rounds completed during the migration,
    from the in-guest poll of rounds/last_round_ns."""
    last_ns = (run.get("guest_hint_before") or {}).get("last_round_ns")
    out = []
    for p in _records(run.get("hint_poll"), "R", 4):
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
    for parts in _records(run.get("bw_slices"), "T", 2):
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
    ("max_hold_us", "guest's longest zone lock hold", "µs", False),
    ("max_pcp_hold_us", "guest's longest per-CPU list lock hold", "µs",
     False),
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
    """(workload, guest MiB, configuration, vCPUs, destination memory
    state, link Gbit/s or None); a run without the last two (recorded
    before they were measured) was cold and unlimited."""
    c = run["cell"]
    dst = c.get("dst_memory") or (run.get("config") or {}).get(
        "dst_memory") or "cold"
    return (c["workload"], c["mem_mib"], c["config"], c.get("smp", SMP),
            dst, c.get("link_gbit"))


# figures whose every run summarize() keeps (for the rank test)
RUN_FIGS = ("total_ms", "transferred_mb", "downtime_ms")


def summarize(runs):
    """{(wl, mem, cfg, smp, dst, link): {n, fails, errors,
    ok{fig: (med, min, max)}, completed{...}, vals{fig: [ok runs' values]}}}"""
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
        s["vals"] = {fig: [v for v in (figures(r).get(fig) for r in rs
                                       if r.get("ok")) if v is not None]
                     for fig in RUN_FIGS}
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


def _where(dst, link):
    """'warm, 10 Gbit/s'."""
    return f"{dst}, {link_name(link)}"


def _dst_rank(dst):
    return DST_ORDER.index(dst) if dst in DST_ORDER else len(DST_ORDER)


def sorted_keys(summ):
    """Workload, size, vCPUs, link, destination state, configuration."""
    return sorted(summ, key=lambda k: (WORKLOAD_ORDER.index(k[0]), k[1],
                                       k[3], link_order(k[5]),
                                       _dst_rank(k[4]),
                                       CONFIG_ORDER.index(k[2])))


def _other(key, cfg, wl=None):
    """The key of configuration cfg (on workload wl) in key's size, vCPUs,
    destination state and link."""
    k = list(key)
    k[2] = cfg
    if wl:
        k[0] = wl
    return tuple(k)


def prealloc_label(meta):
    """A sentence for runs whose destinations had extra arguments
    (--dst-prealloc), else ''."""
    extra = meta.get("dst_args")
    return (f"  **Every destination started with {' '.join(extra)}** "
            "(an extra on top of its warm or cold memory)." if extra else "")


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
                 f"started {meta.get('started', '?')}; **TCG timings**{tuned}."
                 + prealloc_label(meta)
                 + "  Destination memory: warm = the host's free memory "
                 "made resident (touched and freed outside QEMU) right "
                 "before the destination starts, as on two real hosts; "
                 "cold = as the run before left it, as on a nested host "
                 "that takes freed memory back.  Link = the migration's "
                 "max-bandwidth (Gbit/s x 1e9 / 8 bytes/s); unlimited = "
                 "10 GiB/s.")
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
                 "free-page-hint=on) for the same workload, size, "
                 "destination memory and link; in "
                 "brackets the cell's min–max over the same denominator.  "
                 "Lower is better for every column.  A cell with a failed "
                 "data check shows **FAIL n/N** instead of numbers.  Because "
                 "stock hinting corrupts guests, (b)'s reference medians are "
                 "taken over all of its *completed* migrations, including "
                 "those whose data check failed (the raw numbers are in "
                 "results.json only).")
    lines.append("")
    rfigs = [x for x in FIGS if x[3]]
    lines.append("| workload | size | dest. | link | config | " +
                 " | ".join(f"{t}" for _, t, _, _ in rfigs) + " |")
    lines.append("|---|---|---|---|---|" + "---|" * len(rfigs))
    for key in sorted_keys(summ):
        wl, mem, cfg, smp, dst, link = key
        s = summ[key]
        ref = summ.get(_other(key, REF), {}).get("completed", {})
        row = [wl, _size(mem, smp), dst, link_name(link), cfg]
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
    lines.append("| workload | size | dest. | link | config | runs | " +
                 " | ".join(f"{t}{' (' + u + ')' if u else ''}"
                            for _, t, u, _ in FIGS) + " |")
    lines.append("|---|---|---|---|---|---|" + "---|" * len(FIGS))
    for key in sorted_keys(summ):
        wl, mem, cfg, smp, dst, link = key
        s = summ[key]
        row = [wl, _size(mem, smp), dst, link_name(link), cfg]
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
    lines += dst_link_table(summ)
    lines += targets_table(summ)
    lines += overview_table(summ)
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


# What our stack (d) is held to, per cell (workload, size, vCPUs,
# destination memory, link), against the configurations of the same run in
# the same destination state and link.  Medians; (b) over its completed
# runs.
#
# Against the stock pair: downtime no longer than without hinting (a) and
# at most 10 ms above stock hinting (b); bytes within 1.15x of the floor,
# the same guest fresh from boot (d, fresh: the live data and nothing to
# hint); total time at most half of stock hinting's (not on the workloads
# without stale data, which have nothing to hint).
DOWNTIME_SLACK_MS = 10
FLOOR_FACTOR = 1.15
TIME_FACTOR = 0.5
# Against free page reporting (r): on fresh, stale and recent, total time
# and bytes no more than r's; on frag and recent, bytes at most
# R_BYTES_FACTOR x r's; hinting and reporting together (d+r) no slower
# than the better of d and r within noise (rank_test()); on reuse, d's
# rewrite of its freed memory within noise of a's (at most the larger of
# a's slowest run and REUSE_NOISE x a's median), r's shown next to it;
# bytes hinted during a migration at most HINT_FREE_FACTOR x the guest's
# free memory.
R_BYTES_FACTOR = 0.7
REUSE_NOISE = 1.10
HINT_FREE_FACTOR = 2
# On fresh, stale and recent: total time at most TIME_FLOOR_FACTOR x the
# time of the same guest with nothing stale and no hinting (a on fresh of
# the same size and vCPUs: the same live data), the time floor.
TIME_FLOOR_FACTOR = 1.2
# d's downtime, everywhere.
DOWNTIME_MAX_MS = 5
# The rank test's level, two-sided.
RANK_ALPHA = 0.05
# Workloads of the targets against r and the time floor.
R_WORKLOADS = ("fresh", "stale", "recent")
# Time targets: in a cold cell (the destination's first touch of memory
# the outer host took back) they are measured, not held to a bound.
TIME_CHECKS = ("time<=r", "time<=0.5b", "time<=1.2floor", "d+r<=min(d,r)")
# d-vs-r targets held in warm cells only (measured in cold ones).
WARM_ONLY = TIME_CHECKS + ("bytes<=r",)
# The targets the overview sums up per link (warm, and downtime also
# cold).
OVERVIEW = ("time<=r", "bytes<=r", "time<=1.2floor", "d+r<=min(d,r)",
            "downtime<=5")
NAMES = ["downtime<=5", "time<=r", "bytes<=r", "time<=1.2floor",
         "d+r<=min(d,r)", "downtime<=a", "downtime<=b+10",
         "bytes<=1.15floor", "time<=0.5b", "bytes<=0.7r", "reuse~a",
         "hinted<=2free"]

# A check is (value, bound, met[, note]): met True or False for a target;
# None with a value: measured, no target (cold) or not testable (note
# says); None without a value: not measured (its reference cell or figure
# is missing).
NOT_MEASURED = (None, None, None)


def _med(summ, key, label="ok"):
    s = summ.get(key)
    if not s or (label == "ok" and s["fails"]):
        return {}
    return {f: v[0] for f, v in s[label].items()}


def rank_test(x, y):
    """Rank test (Mann-Whitney) of whether x's values run larger than
    y's: (u, p, p_min).  u: the pairs (xi, yj) with xi > yj, ties counted
    half; p: the chance of a u at least this large if x and y came from
    one distribution, exact over every split of the pooled values (ties
    as mid-ranks; a normal approximation above 60 values); p_min: the
    smallest p these values can give (no test when it exceeds the
    level)."""
    n, m = len(x), len(y)
    if not n or not m:
        return None, 1.0, 1.0
    u = sum((a > b) + 0.5 * (a == b) for a in x for b in y)
    pooled = sorted(list(x) + list(y))
    ranks2 = []            # mid-ranks, doubled to stay integers
    i = 0
    while i < len(pooled):
        j = i
        while j < len(pooled) and pooled[j] == pooled[i]:
            j += 1
        ranks2 += [i + j + 1] * (j - i)
        i = j
    obs = int(round(2 * u)) + n * (n + 1)   # x's doubled rank sum
    if n + m > 60:
        mean = n * m / 2
        ties = sum(t ** 3 - t for t in (ranks2.count(r) for r in
                                        set(ranks2)))
        var = n * m / 12 * ((n + m + 1) - ties / ((n + m) * (n + m - 1)))
        z = (u - 0.5 - mean) / math.sqrt(var) if var > 0 else 0
        return u, 0.5 * math.erfc(z / math.sqrt(2)), 0.0
    dp = [dict() for _ in range(n + 1)]
    dp[0][0] = 1
    for r in ranks2:
        for k in range(n, 0, -1):
            row = dp[k]
            for sm, c in dp[k - 1].items():
                row[sm + r] = row.get(sm + r, 0) + c
    total = math.comb(n + m, n)
    p = sum(c for sm, c in dp[n].items() if sm >= obs) / total
    return u, p, dp[n][max(dp[n])] / total


def _rank_check(summ, drkey, bestkey):
    """d+r's total time against the better of d and r (bestkey): met when
    d+r's median is no larger, or the rank test cannot tell d+r slower
    (two-sided, RANK_ALPHA); not testable when the runs are too few for
    the test to reach its level."""
    dr = _med(summ, drkey).get("total_ms")
    best = _med(summ, bestkey).get("total_ms")
    if dr is None or best is None:
        return NOT_MEASURED
    if dr <= best:
        return (dr, best, True, f"better: {bestkey[2]}")
    x = summ[drkey]["vals"].get("total_ms") or []
    y = summ[bestkey]["vals"].get("total_ms") or []
    u, p, p_min = rank_test(x, y)
    if p_min > RANK_ALPHA / 2:
        return (dr, best, None, f"better: {bestkey[2]}; {len(x)}+{len(y)} "
                "runs, too few for the rank test")
    return (dr, best, p > RANK_ALPHA / 2,
            f"better: {bestkey[2]}; rank test U={u:g}/{len(x) * len(y)}, "
            f"p={min(1.0, 2 * p):.3f}")


def targets(summ):
    """[(key, {check: (value, bound, met[, note])})] for every cell of d;
    key as summarize()'s."""
    out = []
    for key in sorted_keys(summ):
        wl, mem, cfg, smp, dst, link = key
        if cfg != "d":
            continue
        d = _med(summ, key)
        a = _med(summ, _other(key, "a"))
        b = _med(summ, _other(key, REF), "completed")
        floor = _med(summ, _other(key, "d", "fresh")).get("transferred_mb")
        checks = {}
        if summ[key]["fails"]:
            checks["data"] = (summ[key]["fails"], 0, False)
        dt = d.get("downtime_ms")
        if dt is not None:
            checks["downtime<=5"] = (dt, DOWNTIME_MAX_MS,
                                     dt <= DOWNTIME_MAX_MS)
        elif wl != "reuse":
            checks["downtime<=5"] = NOT_MEASURED
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
        if wl in R_WORKLOADS:
            fl = _med(summ, _other(key, "a", "fresh")).get("total_ms")
            if t is not None and fl is not None:
                bound = round(fl * TIME_FLOOR_FACTOR)
                checks["time<=1.2floor"] = (t, bound, t <= bound)
            else:
                checks["time<=1.2floor"] = NOT_MEASURED
        checks.update(reporting_checks(summ, key, d))
        if dst != "warm":
            for n in WARM_ONLY:
                c = checks.get(n)
                if c and c[0] is None:
                    del checks[n]      # no target: nothing to miss
                elif c:
                    checks[n] = (c[0], c[1], None, f"{dst}: no target")
        out.append((key, checks))
    return out


def _failed(summ, key):
    """(value, bound, met) of a check whose reference cell lost data."""
    s = summ[key]
    return (f"{key[2]} FAIL {s['fails']}/{s['n']}", None, False)


def reporting_checks(summ, key, d):
    """d's checks against free page reporting in cell `key` (see
    R_BYTES_FACTOR); a reference cell with a failed data check makes its
    checks missed; on fresh, stale and recent a missing reference cell
    makes them not measured."""
    wl = key[0]
    checks = {}
    rkey, drkey, akey = (_other(key, c) for c in ("r", "d+r", "a"))
    r = _med(summ, rkey)
    t, mb = d.get("total_ms"), d.get("transferred_mb")
    if wl in R_WORKLOADS:
        if rkey in summ and summ[rkey]["fails"]:
            checks["time<=r"] = checks["bytes<=r"] = _failed(summ, rkey)
        else:
            checks["time<=r"] = checks["bytes<=r"] = NOT_MEASURED
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
    if wl != "reuse" and (drkey in summ or wl in R_WORKLOADS):
        if drkey in summ and summ[drkey]["fails"]:
            checks["d+r<=min(d,r)"] = _failed(summ, drkey)
        else:
            best = [k for k in (key, rkey) if _med(summ, k).get("total_ms")
                    is not None]
            best.sort(key=lambda k: _med(summ, k)["total_ms"])
            checks["d+r<=min(d,r)"] = (_rank_check(summ, drkey, best[0])
                                       if best else NOT_MEASURED)
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


def _check_text(c):
    """A check as a table cell."""
    if c is None:
        return "–"
    if c[0] is None:
        return "not measured"
    if isinstance(c[0], str):
        return f"**{c[0]}**"
    note = c[3] if len(c) > 3 and c[3] else None
    text = f"{_fmt(c[0])} / {_fmt(c[1])}" + (f" ({note})" if note else "")
    if c[2] is None:
        return text if note else text + " (no target)"
    return text + ("" if c[2] else " **no**")


def targets_table(summ):
    rows = targets(summ)
    if not rows:
        return []
    names = [n for n in NAMES if any(n in c for _, c in rows)] or NAMES[:4]
    lines = ["### Targets of configuration (d)", "",
             "Per cell, d's median against its bound from the same run, "
             "in the same destination state and link.  Everywhere: "
             f"downtime ≤ {DOWNTIME_MAX_MS} ms, ≤ (a)'s median and ≤ "
             f"(b)'s + {DOWNTIME_SLACK_MS} ms; bytes ≤ {FLOOR_FACTOR}x "
             "the floor (d on the same size fresh from boot; stale only).  "
             "On fresh, stale and recent: total time and bytes ≤ (r)'s; "
             f"total time ≤ {TIME_FLOOR_FACTOR}x the time floor (a on the "
             "same size fresh: the same live data, no hinting); d+r's "
             "total time ≤ the better of d's and r's, or not slower by a "
             f"two-sided rank test at {RANK_ALPHA:g} (within noise).  "
             f"Total time ≤ {TIME_FACTOR}x (b)'s (not for fresh and "
             "fresh+churn-all, which have nothing to hint); bytes ≤ "
             f"{R_BYTES_FACTOR}x (r)'s on frag and recent; on reuse, d's "
             "time to rewrite its freed memory ≤ (a)'s slowest run or "
             f"{REUSE_NOISE}x (a)'s median, whichever is larger (noise), "
             "r's median next to it; bytes hinted during the migration ≤ "
             f"{HINT_FREE_FACTOR}x the guest's free memory when it "
             "started.  Cold cells: the time targets and bytes ≤ (r)'s "
             "are measured, not held (no target).  **no** marks a target "
             "missed; *not measured*: the cell or figure it needs did not "
             "run.", "",
             "| workload | size | dest. | link | " + " | ".join(
                 n.replace("<=", " ≤ ") for n in names) + " |",
             "|---|---|---|---|" + "---|" * len(names)]
    for key, checks in rows:
        wl, mem, _, smp, dst, link = key
        row = [wl, _size(mem, smp), dst, link_name(link)]
        if "data" in checks:
            row += [f"**FAIL {checks['data'][0]} run(s)**"] + \
                [""] * (len(names) - 1)
        else:
            row += [_check_text(checks.get(n)) for n in names]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


def overview(summ):
    """Per target of OVERVIEW, destination state and link (every link of
    scenarios.LINKS and any other measured): how many cells of d met it,
    missed it, or left it unmeasured or untested, and a verdict: "met"
    (every cell measured and met), "missed", "not measured" (no cell
    measured), "partly measured" (met where measured)."""
    rows = targets(summ)
    links = sorted({k[5] for k, _ in rows} | set(LINKS), key=link_order)
    out = []
    for name in OVERVIEW:
        for dst in (("warm", "cold") if name == "downtime<=5" else
                    ("warm",)):
            for link in links:
                cs = [(k, c) for k, c in rows if k[4] == dst and
                      k[5] == link and (k[0] in R_WORKLOADS or
                                        name == "downtime<=5")]
                met = missed = unknown = 0
                for _, c in cs:
                    if "data" in c:
                        missed += 1
                        continue
                    x = c.get(name)
                    if x is None:
                        continue
                    if x[2] is True:
                        met += 1
                    elif x[2] is False:
                        missed += 1
                    else:
                        unknown += 1
                verdict = ("missed" if missed else
                           "not measured" if not met else
                           "met" if not unknown else "partly measured")
                out.append({"target": name, "dst_memory": dst,
                            "link_gbit": link, "cells": len(cs), "met": met,
                            "missed": missed, "not_measured": unknown,
                            "verdict": verdict})
    return out


def _verdict_text(o):
    """An overview() entry as a table cell."""
    v = o["verdict"]
    if v == "met":
        return f"met ({o['met']})"
    if v == "missed":
        return f"**missed** ({o['missed']} of {o['cells']})"
    if v == "not measured":
        return "not measured"
    return f"met {o['met']}, not measured {o['not_measured']}"


def overview_table(summ):
    ov = overview(summ)
    if not ov:
        return []
    links = sorted({o["link_gbit"] for o in ov}, key=link_order)
    cold = [k for k, _ in targets(summ) if k[4] == "cold"
            and k[0] in R_WORKLOADS]
    lines = ["### Targets of (d) per link", "",
             "Per target, destination state and link, over the cells of d "
             "on fresh, stale and recent (downtime: every cell): met (in "
             "how many cells), **missed** (in how many), or not measured "
             "(no cell measured it, or its runs were too few to test).  A "
             "target is met only where every cell measured it.", "",
             "| target | dest. | " + " | ".join(link_name(g) for g in links)
             + " |", "|---|---|" + "---|" * len(links)]
    rows = {}
    for o in ov:
        rows.setdefault((o["target"], o["dst_memory"]), {})[
            o["link_gbit"]] = o
    for (name, dst), per in rows.items():
        cols = [_verdict_text(per[g]) if g in per else "–" for g in links]
        lines.append(f"| {name.replace('<=', ' ≤ ')} | {dst} | "
                     + " | ".join(cols) + " |")
    lines.append("")
    if cold:
        lines.append(f"Cold destination: {len(cold)} cell(s) of d on "
                     "fresh, stale and recent measured against r and the "
                     "time floor, no target (targets table above).")
        lines.append("")
    return lines


def dst_link_table(summ):
    """a, b, r, d, d+r per workload, size and link: bytes and total time
    with a warm and a cold destination side by side."""
    groups = {}
    for key in summ:
        wl, mem, cfg, smp, dst, link = key
        if cfg in ("a", "b", "r", "d", "d+r"):
            groups.setdefault((wl, mem, smp, link, cfg), {})[dst] = summ[key]
    if not any("warm" in g for g in groups.values()):
        return []
    lines = ["### Destination memory and link: bytes and total time",
             "", "Median (min–max) over intact runs; cold/warm = the "
             "ratio of the medians of total time.", "",
             "| workload | size | link | config | warm MB | warm ms | "
             "cold MB | cold ms | cold/warm time |",
             "|---|---|---|---|---|---|---|---|---|"]

    def fig(s, f):
        if s is None:
            return "–"
        if s["fails"]:
            return f"**FAIL {s['fails']}/{s['n']}**"
        v = s["ok"].get(f)
        if v is None:
            return "–"
        return _fmt(v[0]) if v[1] == v[2] else \
            f"{_fmt(v[0])} ({_fmt(v[1])}–{_fmt(v[2])})"
    for k in sorted(groups, key=lambda k: (WORKLOAD_ORDER.index(k[0]), k[1],
                                           k[2], link_order(k[3]),
                                           CONFIG_ORDER.index(k[4]))):
        wl, mem, smp, link, cfg = k
        w, c = groups[k].get("warm"), groups[k].get("cold")
        ratio = "–"
        if w and c and not w["fails"] and not c["fails"]:
            tw, tc = w["ok"].get("total_ms"), c["ok"].get("total_ms")
            if tw and tc and tw[0]:
                ratio = f"{tc[0] / tw[0]:.2f}"
        lines.append(f"| {wl} | {_size(mem, smp)} | {link_name(link)} | "
                     f"{cfg} | {fig(w, 'transferred_mb')} | "
                     f"{fig(w, 'total_ms')} | {fig(c, 'transferred_mb')} | "
                     f"{fig(c, 'total_ms')} | {ratio} |")
    lines.append("")
    return lines


def headline(results):
    """d vs b (and a, r): bytes and total time per cell."""
    summ = summarize(results["runs"])
    out = []
    for key in sorted_keys(summ):
        wl, mem, cfg, smp, dst, link = key
        if cfg != "d":
            continue
        name = f"{wl} {_size(mem, smp)} {_where(dst, link)}"
        ref = summ.get(_other(key, REF), {}).get("completed", {})
        s = summ[key]
        if s["fails"]:
            out.append(f"{name}: d FAIL {s['fails']}/{s['n']}")
            continue
        parts = []
        for fig, what in (("transferred_mb", "bytes"), ("total_ms", "time")):
            v, r = s["ok"].get(fig), ref.get(fig)
            if v and r and r[0]:
                parts.append(f"{what} {v[0] / r[0]:.2f}x")
        line = f"{name}: d/b " + ", ".join(parts)
        for other in ("a", "r"):
            ca = summ.get(_other(key, other), {})
            if ca and not ca["fails"]:
                parts = []
                for fig, what in (("transferred_mb", "bytes"),
                                  ("total_ms", "time"),
                                  ("file_mb", "file"),
                                  ("reuse_ms", "rewrite")):
                    v, r = s["ok"].get(fig), ca["ok"].get(fig)
                    if v and r and r[0]:
                        parts.append(f"{what} {v[0] / r[0]:.2f}x")
                line += f"; d/{other} " + ", ".join(parts)
        out.append(line)
    return out


# What summary() keeps of each cell.
SUMMARY_FIGS = ("transferred_mb", "total_ms", "downtime_ms", "setup_ms",
                "normal_pages", "zero_pages", "dirty_syncs", "cpu_mig_s",
                "cpu_dst_s", "hinted_mb", "host_hinted_mb", "free_mb", "pcp_mb",
                "presend_wait_ms", "settle_s", "reported_mb", "file_mb",
                "restore_ms", "reuse_ms", "reuse_first_ms",
                "reuse_refault_mb", "guest_cpu_ms", "max_hold_us",
                "max_pcp_hold_us")


def summary(results):
    """A small record of a run to keep with the docs: what ran (no paths,
    no host names), every cell's median [min, max] of SUMMARY_FIGS over its
    intact runs, d's targets per cell and their overview.  Each cell and
    target names its destination memory state (dst_memory) and link
    (link_gbit, null: unlimited).  A target's "checks" hold only targets
    (met true or false); "measured": figures with no target (cold) or too
    few runs to test; "not_measured": targets whose reference did not
    run."""
    meta = results.get("meta", {})
    summ = summarize(results["runs"])
    out = {"what": "make bench (scripts/bench): medians [min, max] per "
                   "cell over its intact runs; TCG timings",
           "meta": {k: meta.get(k) for k in (
               "stack", "guest_kernel", "stock_qemu", "stock_qemu_11",
               "our_qemu",
               "our_qemu_key", "mode", "repeats", "compare_repeats",
               "started", "elapsed_min", "downtime_limit_ms", "dst_args",
               "host_tuned", "nproc", "fault_ns_per_4k", "git", "git_dirty",
               "driver_hash", "dst_memory", "links")},
           "cells": [], "targets": [], "overview": overview(summ)}
    cmd = meta.get("command") or ""
    # the arguments, without the output folder (a path of this machine)
    out["meta"]["args"] = re.sub(r"\s*--out(=|\s+)\S+", "", cmd.split(
        "scripts/bench", 1)[-1]).strip()
    for key in sorted_keys(summ):
        wl, mem, cfg, smp, dst, link = key
        s = summ[key]
        cell = {"workload": wl, "mem_mib": mem, "config": cfg, "smp": smp,
                "dst_memory": dst, "link_gbit": link,
                "runs": s["n"], "failed": s["fails"]}
        for fig in SUMMARY_FIGS:
            v = s["ok"].get(fig)
            if v is not None:
                cell[fig] = [v[0], v[1], v[2]]
        out["cells"].append(cell)
    for key, checks in targets(summ):
        wl, mem, _, smp, dst, link = key
        t = {"workload": wl, "mem_mib": mem, "smp": smp, "dst_memory": dst,
             "link_gbit": link, "checks": {}}
        for n, c in checks.items():
            note = {"note": c[3]} if len(c) > 3 and c[3] else {}
            if c[0] is None:
                t.setdefault("not_measured", []).append(n)
            elif c[2] is None:
                t.setdefault("measured", {})[n] = dict(
                    {"value": c[0], "bound": c[1]}, **note)
            else:
                t["checks"][n] = dict(
                    {"value": c[0], "bound": c[1], "met": c[2]}, **note)
        out["targets"].append(t)
    return out


def compact_json(obj):
    """JSON text with every cell and target of a summary() on one line."""
    def one_line(x):
        return json.dumps(x, sort_keys=True, separators=(", ", ": "))

    def dump(x, ind):
        pad = " " * ind
        if isinstance(x, dict) and x and not ("config" in x or
                                              "checks" in x or
                                              "target" in x):
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
