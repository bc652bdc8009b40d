#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The committed summaries of results and the README block made from them.

Three small files in Documentation/results/, each with its date, the key
of the QEMU series build and the hash of the driver sources:

  demo.json             the last published `make demo` (PUBLISH=1): the
                        guest kernel and, per configuration, bytes sent,
                        total time, downtime and the data verdict
  check.json            the last published `make check` (PUBLISH=1): the
                        verdict counts, what the tests did (migrations,
                        data verified, faults, bad inputs, stock reference
                        runs and their losses) and how long it took
  bench-reporting.json  the published `make bench` runs (sets), each the
                        bench's summary.json with a note
  soak.json             the published `make soak` runs (sets): per driver
                        and scenario the runs intact and failed, and the
                        bytes sent

README.md's block between `<!-- results -->` and `<!-- /results -->` is
made from demo.json and check.json, its configuration table (`<!--
configs -->`) and cost sentence (`<!-- cost -->`) from named cells of
bench-reporting.json, data-safety.md's soak sentence (`<!-- soak -->`)
from soak.json; benchmarks.md's tables list the bench sets of HEAD's
code.  check-head tells whether demo.json and
check.json are of HEAD's driver and series.  The subcommands below write,
check and print them.
"""
import argparse
import datetime
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(TOP, "Documentation", "results")
DEMO = os.path.join(RESULTS, "demo.json")
CHECK = os.path.join(RESULTS, "check.json")
BENCH = os.path.join(RESULTS, "bench-reporting.json")
SOAK = os.path.join(RESULTS, "soak.json")
SOAK_RUN = os.path.join(TOP, "build", "soak", "soak.json")
DATA_SAFETY = os.path.join(TOP, "Documentation", "data-safety.md")
CHECK_RUN = os.path.join(TOP, "build", "results", "check.json")
README = os.path.join(TOP, "README.md")
BLOCK_RE = re.compile(r"(<!-- results[^>]*-->\n).*?(<!-- /results -->)",
                      re.S)


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _git(*args, text=True):
    """Output of a read-only git command in TOP (no index refresh)."""
    return subprocess.run(["git", "-C", TOP, *args], check=True,
                          capture_output=True, text=text,
                          env=dict(os.environ, GIT_OPTIONAL_LOCKS="0")).stdout


def _driver_file(rel):
    """Is rel (a path relative to TOP) one of the driver's sources?"""
    d, name = os.path.split(rel)
    if d == "guest":
        return name in ("Kbuild", "scan-validated-kernels") or (
            name.endswith((".c", ".h")) and not name.endswith(".mod.c"))
    return d == "include" and name.endswith(".h")


def built_series_key():
    """The series key of build/qemu, the QEMU build the tests and the
    demo run (scripts/build-qemu.sh writes it)."""
    return _read(os.path.join(TOP, "build", "qemu", ".key"))


def driver_hash(rev=None):
    """The first 16 hex digits of the SHA-256 of the driver's sources
    (guest/*.[ch], guest/Kbuild, guest/scan-validated-kernels and
    include/*.h, in name order): of the work tree, or of commit rev."""
    h = hashlib.sha256()
    if rev:
        files = sorted(f for f in _git("ls-tree", "-r", "--name-only", rev,
                                       "--", "guest", "include").split()
                       if _driver_file(f))
        for rel in files:
            h.update(rel.encode())
            h.update(_git("show", f"{rev}:{rel}", text=False))
        return h.hexdigest()[:16]
    files = sorted(p for p in glob.glob(os.path.join(TOP, "guest", "*")) +
                   glob.glob(os.path.join(TOP, "include", "*"))
                   if _driver_file(os.path.relpath(p, TOP)))
    for p in files:
        h.update(os.path.relpath(p, TOP).encode())
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


# What the series key of scripts/build-qemu.sh hashes, besides the source
# version: the configure flags (scripts/qemu-env.sh) and the series.
SERIES_SOURCES = ("scripts/qemu-env.sh", "host-qemu-patch/qemu-10.0")


def series_key(rev=None, base="10.0"):
    """The key scripts/build-qemu.sh gives the build of base (not
    SANITIZE): the first 16 hex digits of the SHA-256 of the Debian source
    version, the configure flags and the series file followed by each
    patch it names, of the work tree or of commit rev.  The version and
    Debian's flags come from the source build-qemu.sh unpacked into the
    cache; None when it is not there."""
    cache = os.environ.get("BH_CACHE", "/var/cache/balloon-hint")
    csrc = os.path.join(cache, "src", f"qemu-{base}")
    version = _read(os.path.join(csrc, "VERSION"))
    if not version:
        return None

    def text(rel):
        if rev:
            return _git("show", f"{rev}:{rel}", text=False)
        with open(os.path.join(TOP, rel), "rb") as f:
            return f.read()
    with tempfile.NamedTemporaryFile("wb", suffix=".sh") as env_sh:
        env_sh.write(text("scripts/qemu-env.sh"))
        env_sh.flush()
        cfg = subprocess.run(
            ["bash", "-c", '. "$1" && qemu_cfg "$2" "$3" && echo "${cfg[*]}"',
             "qemu-env", env_sh.name, base, os.path.join(csrc, "qemu")],
            check=True, capture_output=True).stdout
    h = hashlib.sha256(version.encode() + b"\n" + cfg)
    pdir = f"host-qemu-patch/qemu-{base}"
    series = text(f"{pdir}/series")
    h.update(series)
    for line in series.decode().splitlines():
        name = line.strip()
        if name and not name.startswith("#"):
            h.update(text(f"{pdir}/{name}"))
    return h.hexdigest()[:16]


def source_clean():
    """Do the driver's sources and the QEMU series match HEAD (nothing
    changed, added or removed under them)?  None outside a git tree."""
    try:
        return not _git("status", "--porcelain", "--", "guest", "include",
                        *SERIES_SOURCES).strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def code_of(rev="HEAD", base="10.0"):
    """Commit rev's driver hash and the series key of base, as a summary
    names them."""
    return {"driver_hash": driver_hash(rev),
            "series_key": series_key(rev, base)}


def not_of(summary, name, rev="HEAD", want=None):
    """What makes the summary `name` (demo.json, check.json) not a result
    of commit rev (whose code_of() `want` is, when the caller has it):
    another driver hash or series key, or a tree that differed from its
    commit; [] when it is of rev."""
    out = []
    for key, val in (want or code_of(rev)).items():
        if val is None:
            out.append(f"{name}: cannot compute {rev}'s {key} (make qemu "
                       "fetches the QEMU source)")
        elif summary.get(key) != val:
            out.append(f"{name}: {key} {summary.get(key)}, {rev}'s is {val}")
    if summary.get("source_clean") is not True:
        out.append(f"{name}: not recorded from a clean tree "
                   f"(source_clean: {summary.get('source_clean')})")
    return out


def demo_summary(rows, guest_kernel):
    """rows: (config key, description, dst_memory, migrate_once() result).
    The warm runs are the summary's rows, the cold ones its cold_rows."""
    build = os.path.join(TOP, "build")
    out = {"date": datetime.date.today().isoformat(),
           "series_key": built_series_key(),
           "our_qemu": _read(os.path.join(build, "qemu", "VERSION")),
           "stock_qemu": _read(os.path.join(build, "stock-qemu-10.0",
                                            "VERSION")),
           "driver_hash": driver_hash(),
           "source_clean": source_clean(),
           "guest_kernel": guest_kernel,
           "workload": "stale: 1 GiB guest, 2 vCPUs, 75 % of RAM written "
                       "and freed, 24 MiB kept and 16 MiB held, verified",
           "rows": [], "cold_rows": []}
    for key, name, mem, r in rows:
        out["rows" if mem == "warm" else "cold_rows"].append({
            "config": key, "name": name, "dst_memory": mem,
            "transferred_mb": r.get("transferred_mb"),
            "total_ms": r.get("total_ms"),
            "downtime_ms": r.get("downtime_ms"),
            "data_intact": r.get("data_intact"),
            "kernel_errors": len(r.get("kernel_errors") or []),
            "ok": bool(r.get("ok"))})
    return out


def _damaged(r):
    return "no" if r["data_intact"] and not r["kernel_errors"] else "**yes**"


def demo_table(s):
    """The Markdown table of a demo summary (its warm runs), and one line
    of its cold runs under it."""
    lines = ["| configuration (warm destination) | bytes sent | total time | "
             "downtime | destination damaged |", "|---|---|---|---|---|"]
    for r in s["rows"]:
        lines.append(f"| {r['config']}: {r['name']} | "
                     f"{r['transferred_mb']} MB | {r['total_ms']} ms | "
                     f"{r['downtime_ms']} ms | {_damaged(r)} |")
    cold = s.get("cold_rows") or []
    if cold:
        lines += ["", "Cold destination (bytes, total time, downtime): " +
                  "; ".join(f"{r['config']} {r['transferred_mb']} MB, "
                            f"{r['total_ms']} ms, {r['downtime_ms']} ms" +
                            ("" if _damaged(r) == "no" else ", damaged")
                            for r in cold) + "."]
    return "\n".join(lines)


def _ratio(s, what, a, b):
    rows = {r["config"]: r for r in s["rows"]}
    try:
        return rows[a][what] / rows[b][what]
    except (KeyError, TypeError, ZeroDivisionError):
        return None


# The figures of a check that the documentation quotes: a test's facts,
# by the names it gives them (tests/run.py keeps them in check.json).
CHECK_FIGURES = ("scan_coverage_", "scan_stayed_free_mib_",
                 "scan_hinted_mib_", "offline_fenced_s_",
                 "offline_unfenced_s_", "isolated_", "walk_max_")


def check_figures(run):
    """The facts named by CHECK_FIGURES of every test of a run."""
    out = {}
    for t in run.get("results", []):
        for k, v in (t.get("facts") or {}).items():
            if k.startswith(CHECK_FIGURES):
                out[k] = v
    return dict(sorted(out.items()))


# The guest kernels a check's figures are named after, in the order the
# docs give them
KERNELS = ("6.1", "6.12", "7.3", "7.3-rt", "7.3-cloud", "7.3-hbdebug")


def _kernels(f, prefix):
    """The kernels of KERNELS that figures `f` have a `prefix`KERNEL of."""
    return [k for k in KERNELS if f"{prefix}{k}" in f]


def _and(items):
    """Items of a sentence: "a", "a and b", "a, b and c"."""
    return " and ".join(filter(None, [", ".join(items[:-1])] + items[-1:]))


def coverage_sentence(c):
    """Documentation/guest-driver.md's sentence on a scan round's coverage,
    from a published check summary."""
    f = c.get("figures", {})
    per = _and([
        f"{f[f'scan_coverage_{k}']:.1%} of the "
        f"{f[f'scan_stayed_free_mib_{k}']} MiB that stayed free through it "
        f"on {k} (it hinted {f[f'scan_hinted_mib_{k}']} MiB)"
        for k in _kernels(f, "scan_coverage_")])
    return textwrap.fill(
        f"In the published check ({c['date']}, driver "
        f"`{c['driver_hash']}`), a round covered {per}.", 75)


def holds_sentence(c):
    """Documentation/guest-driver.md's sentence on the walk's longest
    holds and the isolated pageblocks it passed, from a published check
    summary (tests/test_46_scan_gate.py's walks during memory offline)."""
    f = c.get("figures", {})
    per = "; ".join(
        f"on {k}, `zone->lock` at most {f[f'walk_max_hold_us_{k}']:,} µs "
        f"and a per-CPU list lock at most "
        f"{f[f'walk_max_pcp_hold_us_{k}']:,} µs (they passed "
        f"{f[f'isolated_passed_{k}']:,} free pages of isolated pageblocks "
        f"and took {f[f'isolated_taken_{k}']:,})"
        for k in _kernels(f, "walk_max_hold_us_"))
    return textwrap.fill(
        f"In the published check ({c['date']}, driver "
        f"`{c['driver_hash']}`), walks run over and over while a DIMM "
        f"block went offline held, {per}.", 75, break_on_hyphens=False)


def check_summary(run):
    """The summary of a runner's results (tests/run.py's check.json): no
    test names or messages, only what a reader of the README needs."""
    f = run.get("summary", {})
    return {"date": datetime.date.today().isoformat(),
            "series_key": built_series_key(),
            "driver_hash": driver_hash(),
            "source_clean": source_clean(),
            "counts": run.get("counts", {}),
            "minutes": round(run.get("seconds", 0) / 60),
            "migrations": f.get("migrations", 0),
            "verified_mib": f.get("bytes_verified", 0) >> 20,
            "faults": f.get("faults", 0),
            "bad_inputs": f.get("bad_inputs", 0),
            "failures": f.get("failures", 0),
            "stock_runs": f.get("stock_runs", 0),
            "stock_not_ok": f.get("stock_losses", 0),
            "figures": check_figures(run),
            "stopped_by": run.get("stopped_by")}


def check_sentence(c):
    n = c["counts"]
    tail = f", {n['skipped']} skipped" if n.get("skipped") else ""
    return (f"`make check` of {c['date']} (series key `{c['series_key']}`, "
            f"driver `{c['driver_hash']}`): {n.get('passed', 0)} passed, "
            f"{n.get('failed', 0)} failed{tail}, {n.get('reference', 0)} "
            f"stock reference verdicts; {c['migrations']} migrations, "
            f"{c['verified_mib']:,} MiB of guest data verified, "
            f"{c['faults']} faults injected, {c['bad_inputs']} bad inputs, "
            f"{c['failures']} failures; {c['stock_runs']} stock reference "
            f"runs, {c['stock_not_ok']} of them not ok; {c['minutes']} min.")


def readme_block(s, check=None):
    """README.md's result block, from a demo summary and the summary of
    the last check."""
    parts = [textwrap.fill(
             f"`make demo` of {s['date']} on the default stack: our QEMU "
             f"{s.get('our_qemu')} (series key `{s.get('series_key')}`), "
             f"Debian's QEMU {s.get('stock_qemu')}, our driver "
             f"`{s.get('driver_hash')}`, guest Linux {s.get('guest_kernel')}; "
             f"{s['workload']}; TCG on a 2-core VM.  Warm: the "
             f"destination host's free memory is resident when it starts, "
             f"as on two real hosts; cold: as this nested VM leaves it, "
             f"taken back by its own host.", 75), "",
             demo_table(s), ""]
    facts = []
    for other, label in (("b", "stock hinting"),
                         ("r", "free page reporting")):
        rb = _ratio(s, "transferred_mb", "d", other)
        rt = _ratio(s, "total_ms", "d", other)
        if rb is not None and rt is not None:
            facts.append(f"{rb:.2f}x the bytes and {rt:.2f}x the time of "
                         f"{label}")
    if facts:
        parts.append(textwrap.fill(
            "Ours (d) sends " + "; ".join(facts) + ".  One run each: "
            "absolute times on this VM swing from run to run, bytes are "
            "the steadier figure; the benchmark "
            "([benchmarks.md](Documentation/benchmarks.md)) repeats each "
            "configuration.", 75))
    # The bench's sets are of the drivers and series they name, which may
    # not be HEAD's: README cites them in its configuration table, with
    # their keys, not here among the results of HEAD.
    if check:
        parts += ["", textwrap.fill(check_sentence(check), 75)]
    return "\n".join(parts) + "\n"


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        return None


def render_readme(s, path=README):
    block = readme_block(s, _load(CHECK))
    with open(path) as f:
        text = f.read()
    if not BLOCK_RE.search(text):
        raise SystemExit(f"{path}: no <!-- results --> block")
    new = BLOCK_RE.sub(lambda m: m.group(1) + block + m.group(2), text)
    return text, new


def publish_demo(s):
    os.makedirs(os.path.dirname(DEMO), exist_ok=True)
    with open(DEMO, "w") as f:
        json.dump(s, f, indent=1, sort_keys=True)
        f.write("\n")
    _, new = render_readme(s)
    with open(README, "w") as f:
        f.write(new)


def publish_check(path=CHECK_RUN):
    """Summarise a whole run into check.json; a run that was stopped
    before its last test is refused, and nothing is written."""
    run = _load(path)
    if not run:
        raise SystemExit(f"{path}: no results of a run")
    if run.get("stopped_by") or run.get("not_run"):
        raise SystemExit(f"{path}: the run was stopped by "
                         f"{run.get('stopped_by')} with "
                         f"{len(run.get('not_run') or [])} test(s) not run; "
                         "not published")
    with open(CHECK, "w") as f:
        json.dump(check_summary(run), f, indent=1, sort_keys=True)
        f.write("\n")


def _bench_text(b):
    """bench-reporting.json as committed: indented, each cell and each
    target on one line."""
    def block(key, val):
        if key in ("cells", "targets"):
            rows = ",\n".join("    " + json.dumps(c, sort_keys=True)
                              for c in val)
            return f'   "{key}": [\n{rows}\n   ]'
        text = json.dumps(val, indent=1, sort_keys=True)
        return f'   "{key}": ' + text.replace("\n", "\n   ")
    sets = ",\n".join(
        "  {\n" + ",\n".join(block(k, x[k]) for k in sorted(x)) + "\n  }"
        for x in b["sets"])
    rest = "".join(f',\n "{k}": {json.dumps(v, sort_keys=True)}'
                   for k, v in sorted(b.items()) if k != "sets")
    return '{\n "sets": [\n' + sets + "\n ]" + rest + "\n}\n"


def publish_bench(summary_path, note):
    summary = _load(summary_path)
    if not summary or "cells" not in summary:
        raise SystemExit(f"{summary_path}: not a bench summary.json")
    b = _load(BENCH) or {"sets": []}
    summary["note"] = note
    b["sets"].append(summary)
    text = _bench_text(b)
    assert json.loads(text) == b
    with open(BENCH, "w") as f:
        f.write(text)


TARGET_COLUMNS = ("time<=r", "bytes<=r", "bytes<=0.7r", "d+r<=min(d,r)",
                  "reuse~a", "bytes<=1.15floor", "downtime<=a",
                  "downtime<=b+10", "time<=0.5b", "hinted<=2free")


def set_not_of_head(b, n, rev="HEAD", want=None):
    """Why set `n` of bench-reporting.json `b` is not of commit rev's
    code (not_of(): its driver hash and the series key of its stack's
    base, from a tree that did not differ from its commit); empty when it
    is."""
    meta = b["sets"][n - 1].get("meta", {})
    stack = meta.get("stack") or "10.0"
    if stack != "10.0":
        # a set of the series on another base: that base's key
        want = code_of(rev, stack)
    return not_of({"driver_hash": meta.get("driver_hash"),
                   "series_key": meta.get("our_qemu_key"),
                   "source_clean": meta.get("git_dirty") is False},
                  f"bench set {n}", rev, want)


def head_sets(b, rev="HEAD"):
    """The sets of `b` that are of commit rev's code, as (set number,
    set): the only ones the docs show.  The others stay in the file, each
    naming its code."""
    want = code_of(rev)
    return [(i, x) for i, x in enumerate(b["sets"], 1)
            if not set_not_of_head(b, i, rev, want)]


def bench_targets(b):
    """A markdown table: per set of HEAD's code (head_sets()) and cell,
    d's median / its bound for each target the bench checked
    (report.py), **no** where it missed."""
    def fig(v):
        return f"{v:,.0f}" if abs(v) >= 10 else f"{v:g}"
    # the targets added with the destination state and link, as columns
    # only once a set has them
    sets = head_sets(b)
    names = list(TARGET_COLUMNS) + [
        n for n in ("time<=1.2floor", "downtime<=5")
        if any(n in t["checks"] for _, x in sets
               for t in x.get("targets", []))]
    head = ["set", "cell"] + names
    rows = ["| " + " | ".join(head) + " |",
            "|" + "---|" * len(head)]
    for i, x in sets:
        meta = x.get("meta", {})
        label = str(i) + (" (prealloc)" if meta.get("dst_args") else "") + \
            (" (host-tuned)" if meta.get("host_tuned") else "")
        for t in x.get("targets", []):
            cell = (f"{t['workload']}, {t['mem_mib'] >> 10} GiB"
                    + (f", {t['smp']} vCPU" if t["smp"] != 2 else "")
                    + (f", {t['dst_memory']}" if "dst_memory" in t else "")
                    + ("" if t.get("link_gbit") is None else
                       f", {t['link_gbit']:g} Gbit/s"))
            cols = []
            for name in names:
                c = t["checks"].get(name)
                if not c:
                    cols.append("")
                    continue
                cols.append(f"{fig(c['value'])} / {fig(c['bound'])}"
                            + ("" if c["met"] else " **no**"))
            rows.append(f"| {label} | {cell} | " + " | ".join(cols) + " |")
    return "\n".join(rows)


def bench_sets(b):
    """A markdown table of the published bench sets of HEAD's code
    (head_sets()): when, of which code (driver hash, series key, whether
    the tree differed from its commit), with which host tuning, what it
    ran."""
    rows = ["| set | date | driver | series key | tree | tuning | "
            "what it ran |", "|---|---|---|---|---|---|---|"]
    for i, x in head_sets(b):
        meta = x.get("meta", {})
        dirty = meta.get("git_dirty")
        tree = {True: "dirty", False: "clean"}.get(dirty, "unknown")
        tuning = ", ".join(["`--dst-prealloc`"] * bool(meta.get("dst_args"))
                           + ["host-tuned"] * bool(meta.get("host_tuned"))
                           ) or "none"
        rows.append(f"| {i} | {str(meta.get('started', ''))[:10]} | "
                    f"`{meta.get('driver_hash')}` | "
                    f"`{meta.get('our_qemu_key')}` | {tree} | {tuning} | "
                    f"{x.get('note', '')} |")
    return "\n".join(rows)


def _set_cells(b, n, wl, mem, smp, link=None):
    """Set `n`'s cells of workload `wl`, `mem` MiB, `smp` vCPUs and link
    `link` (Gbit/s; None: unlimited), by configuration."""
    return {c["config"]: c for c in b["sets"][n - 1]["cells"]
            if (c["workload"], c["mem_mib"], c["smp"], c.get("link_gbit"))
            == (wl, mem, smp, link)}


def _dst_text(cells):
    """", warm destination" (and the like) for the destination memory
    states of `cells`."""
    dst = {c.get("dst_memory") for c in cells} - {None}
    return "".join(f", {d} destination" for d in dst)


# README.md's table of which configuration to run: per fleet, what to run
# and the bench cells (set, workload, MiB, vCPUs, configurations and, for
# a limited link, its Gbit/s) whose medians it quotes,
# d's configuration first, then the ones it is compared with.
CONFIG_ROWS = (
    ("every host runs our QEMU",
     "our QEMU, the VM opted in (`free-page-hint-keep-writes=on`), our "
     "driver: scan mode (d)",
     ((73, "stale", 1024, 2, ("d", "r")),
      (73, "stale", 1024, 2, ("d", "r"), 10))),
    ("some hosts run Debian's QEMU",
     "our QEMU with the device defaults (no opt-in); on Debian's QEMU our "
     "driver hints in alloc mode (c) and saves little or nothing over the "
     "in-tree driver with stock hinting (b): its rounds lose the race with "
     "the first pass, so guests that move to stock hosts keep the in-tree "
     "driver",
     ((73, "stale", 1024, 2, ("c", "b")),)),
    ("free page reporting already on",
     "keep it and add ours (d+r): reporting gives memory back between "
     "migrations, hinting skips what is free when one starts",
     ((73, "stale", 1024, 2, ("d+r", "r")),)),
)
CONFIGS_RE = re.compile(r"(<!-- configs[^>]*-->\n).*?(<!-- /configs -->)",
                        re.S)


def configs_table(b):
    """README.md's configuration table, each figure a median of the cell
    it names in bench-reporting.json."""
    rows = ["| your fleet | run | bench medians: bytes sent, total time, "
            "downtime |", "|---|---|---|"]
    for fleet, run, cells in CONFIG_ROWS:
        parts = []
        for n, wl, mem, smp, cfgs, *link in cells:
            link = link[0] if link else None
            got = _set_cells(b, n, wl, mem, smp, link)
            figs = []
            for cfg in cfgs:
                c = got[cfg]
                figs.append(f"{cfg} {c['transferred_mb'][0]:.0f} MB, "
                            f"{c['total_ms'][0]:.0f} ms, "
                            f"{c['downtime_ms'][0]:g} ms")
            parts.append(f"set {n}, {wl}, {mem >> 10} GiB, {smp} vCPU"
                         f"{'s' * (smp > 1)}" + _dst_text(got.values())
                         + ("" if link is None else f", {link:g} Gbit/s")
                         + ": " + "; ".join(figs))
        rows.append(f"| {fleet} | {run} | " + "; ".join(parts) + " |")
    drivers = []
    for n in sorted({c[0] for _, _, cells in CONFIG_ROWS for c in cells}):
        meta = b["sets"][n - 1]["meta"]
        drivers.append(f"set {n}: driver `{meta.get('driver_hash')}`, "
                       f"series key `{meta.get('our_qemu_key')}`")
    return "\n".join(rows) + "\n\n" + textwrap.fill(
        "b: stock hinting, r: free page reporting (Debian's QEMU, in-tree "
        "driver); c: our driver on Debian's QEMU; d: ours.  Medians of 5 "
        "alternated runs; a warm destination's free memory is resident when "
        "it starts, as on two real hosts.  From "
        "`Documentation/results/bench-reporting.json` "
        "([benchmarks.md](Documentation/benchmarks.md)), TCG on a 2-core "
        "VM; " + "; ".join(drivers) + ".  Each figure is of the driver "
        "and series its set names, not necessarily this tree's "
        "(`scripts/results.py check-head`).", 75,
        break_on_hyphens=False) + "\n"


# README.md's sentence on what hinting costs the guest: the set, workload,
# MiB and vCPUs of the bench cells (d: scan mode on our QEMU, c: alloc mode
# on Debian's) whose medians and ranges it quotes.
COST_CELL = (73, "stale", 1024, 2)
COST_RE = re.compile(r"(<!-- cost[^>]*-->\n).*?(<!-- /cost -->)", re.S)


def cost_text(b):
    """README.md's sentence on the guest's cost of a migration's rounds,
    each figure a median (and range) of the cell it names in
    bench-reporting.json."""
    n, wl, mem, smp = COST_CELL
    s = b["sets"][n - 1]
    got = _set_cells(b, n, wl, mem, smp)
    d, c = got["d"], got["c"]

    def rng(v, fmt):
        return f"{fmt(v[0])} ({fmt(v[1])}-{fmt(v[2])})"

    return textwrap.fill(
        f"Bench set {n} (driver `{s['meta'].get('driver_hash')}`, "
        f"{mem >> 10} GiB, {wl}, {smp} vCPU{'s' * (smp > 1)}"
        + _dst_text((c, d))
        + f", medians and ranges of {d['runs']} runs): the rounds of one "
        f"migration took {rng(d['guest_cpu_ms'], lambda x: f'{x:.1f}')} ms "
        f"of vCPU time in scan mode (d) and "
        f"{rng(c['guest_cpu_ms'], lambda x: f'{x:.0f}')} ms in alloc mode "
        f"on Debian's QEMU (c); in scan mode the longest zone lock hold was "
        f"{rng(d['max_hold_us'], lambda x: f'{x:.0f}')} µs and the longest "
        f"per-CPU list hold {rng(d['max_pcp_hold_us'], lambda x: f'{x:.0f}')}"
        f" µs.", 75, break_on_hyphens=False) + "\n"


def publish_soak(path, note):
    """Add the soak run at `path` (scripts/soak.py's tally) to soak.json
    as a set: date, driver hash, series key, clean tree, repeats, minutes
    and per driver/scenario the runs intact and failed and the bytes
    sent (min, max)."""
    run = _load(path)
    if not run or "tally" not in run:
        raise SystemExit(f"{path}: not a soak tally (scripts/soak.py)")
    if run.get("dst_args") or os.path.basename(path) != "soak.json":
        raise SystemExit(f"{path}: only soaks of our QEMU with default "
                         "destinations are published")
    runs = {}
    for key, v in sorted(run["tally"].items()):
        mb = [r["transferred_mb"] for r in v["runs"]
              if r.get("transferred_mb") is not None]
        runs[key] = {"ok": v["ok"], "failed": v["failed"],
                     "bytes_mb": [min(mb), max(mb)] if mb else []}
    done = [v["ok"] + v["failed"] for v in run["tally"].values()]
    if min(done, default=0) < run["repeat"]:
        raise SystemExit(f"{path}: a soak cut short ({min(done)} of "
                         f"{run['repeat']} repeats): not published")
    soak = _load(SOAK) or {"sets": []}
    soak["sets"].append({
        "date": datetime.date.today().isoformat(),
        "driver_hash": driver_hash(),
        "series_key": built_series_key(),
        "source_clean": source_clean(),
        "qemu": "ours 10.0 series", "repeat": run["repeat"],
        "minutes": round(run.get("seconds", 0) / 60), "note": note,
        "runs": runs})
    with open(SOAK, "w") as f:
        f.write(json.dumps(soak, indent=1, sort_keys=True) + "\n")


# data-safety.md's sentence on the last published soak
SOAK_RE = re.compile(r"(<!-- soak[^>]*-->\n).*?(<!-- /soak -->)", re.S)
SOAK_DRIVERS = (("intree", "the in-tree driver"),
                ("ours", "ours in scan mode"),
                ("ours_alloc", "ours in alloc mode"))


def soak_text(soak):
    """data-safety.md's sentence on the last soak of soak.json: its code,
    and per driver the runs intact of those run and the bytes sent."""
    s = soak["sets"][-1]
    runs = s["runs"]
    scen = sorted({k.split("/", 1)[1] for k in runs})
    per = []
    for drv, name in SOAK_DRIVERS:
        cells = [runs[f"{drv}/{sc}"] for sc in scen if f"{drv}/{sc}" in runs]
        if not cells:
            continue
        ok = sum(c["ok"] for c in cells)
        n = ok + sum(c["failed"] for c in cells)
        mb = [m for c in cells for m in c["bytes_mb"]]
        per.append(f"{name} {ok} of {n} intact ({min(mb):.0f}-"
                   f"{max(mb):.0f} MB sent)")
    code = (f"driver `{s['driver_hash']}`, series key `{s['series_key']}`"
            if s.get("driver_hash") else
            f"series key `{s['series_key']}`, a driver before the driver "
            "hash was recorded")
    return textwrap.fill(
        f"The last published soak ({s.get('date', 'undated')}, {code}, "
        f"our QEMU, {s['repeat']} rounds of the {_and(scen)} scenarios, "
        f"{s['minutes']} min): {_and(per)}.", 75,
        break_on_hyphens=False) + "\n"


def rewrite_block(name, path, rx, make, source):
    """Rewrite the generated block `name` of `path` that `rx` finds
    (between its markers) with what `make` makes of the summary at
    `source`."""
    with open(path) as f:
        text = f.read()
    m = rx.search(text)
    if not m:
        raise SystemExit(f"{path}: no <!-- {name} --> block")
    block = make(_load(source))
    with open(path, "w") as f:
        f.write(text[:m.end(1)] + block + text[m.start(2):])


def _readme_texts():
    """README.md as it is and as demo.json, check.json and
    bench-reporting.json make it."""
    with open(DEMO) as f:
        return render_readme(json.load(f))


def main(argv):
    ap = argparse.ArgumentParser(
        prog="results.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("readme", help="rewrite README.md's block")
    sub.add_parser("check", help="exit 1 if the block differs")
    sub.add_parser("check-head",
                   help="exit 1 if demo.json or check.json is not of HEAD "
                   "(driver hash, series key, clean tree)")
    sub.add_parser("publish-check",
                   help="summarise build/results/check.json into "
                   "check.json and rewrite the block")
    sub.add_parser("coverage",
                   help="print guest-driver.md's sentence on a scan "
                   "round's coverage, from check.json")
    sub.add_parser("holds",
                   help="print guest-driver.md's sentence on the walk's "
                   "longest holds, from check.json")
    sub.add_parser("configs",
                   help="rewrite README.md's configuration table")
    sub.add_parser("cost",
                   help="rewrite README.md's sentence on what the rounds "
                   "cost the guest")
    sub.add_parser("bench-sets",
                   help="print the published bench sets (date, driver, "
                   "series, tree, tuning, note) as a markdown table")
    sub.add_parser("bench-targets",
                   help="print the targets of d in every cell of every "
                   "set, as a markdown table")
    pb = sub.add_parser("publish-bench",
                        help="add a bench run's summary.json to "
                        "bench-reporting.json and rewrite the block")
    pb.add_argument("summary", help="the bench run's summary.json")
    pb.add_argument("note", help="what it ran, any tuning")
    ps = sub.add_parser("publish-soak",
                        help="add build/soak/soak.json to soak.json and "
                        "rewrite data-safety.md's soak sentence")
    ps.add_argument("note", help="what it ran")
    sub.add_parser("soak", help="rewrite data-safety.md's soak sentence")
    a = ap.parse_args(argv[1:])
    if a.command == "check-head":
        bad = []
        for path in (DEMO, CHECK):
            bad += not_of(_load(path) or {}, os.path.basename(path))
        for line in bad:
            print(line, file=sys.stderr)
        return 1 if bad else 0
    printers = {"coverage": (coverage_sentence, CHECK),
                "holds": (holds_sentence, CHECK),
                "bench-sets": (bench_sets, BENCH),
                "bench-targets": (bench_targets, BENCH)}
    if a.command in printers:
        make, path = printers[a.command]
        print(make(_load(path)))
        return 0
    if a.command == "publish-soak":
        publish_soak(SOAK_RUN, a.note)
    blocks = {"configs": (README, CONFIGS_RE, configs_table, BENCH),
              "cost": (README, COST_RE, cost_text, BENCH),
              "soak": (DATA_SAFETY, SOAK_RE, soak_text, SOAK)}
    name = a.command.removeprefix("publish-")
    if name in blocks:
        rewrite_block(name, *blocks[name])
        return 0
    if a.command == "publish-check":
        publish_check()
    elif a.command == "publish-bench":
        publish_bench(a.summary, a.note)
    old, new = _readme_texts()
    if a.command == "check":
        if old != new:
            print("README.md's result block differs from "
                  "Documentation/results/demo.json", file=sys.stderr)
            return 1
        return 0
    with open(README, "w") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
