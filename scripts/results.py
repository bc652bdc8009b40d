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

README.md's block between `<!-- results -->` and `<!-- /results -->` is
made from them.  The subcommands below write, check and print them.
"""
import argparse
import datetime
import glob
import hashlib
import json
import os
import re
import sys
import textwrap

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(TOP, "Documentation", "results")
DEMO = os.path.join(RESULTS, "demo.json")
CHECK = os.path.join(RESULTS, "check.json")
BENCH = os.path.join(RESULTS, "bench-reporting.json")
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


def driver_hash():
    """The first 16 hex digits of the SHA-256 of the driver's sources
    (guest/ and include/, in name order)."""
    h = hashlib.sha256()
    files = sorted(glob.glob(os.path.join(TOP, "guest", "*.[ch]")) +
                   [os.path.join(TOP, "guest", "Kbuild")] +
                   glob.glob(os.path.join(TOP, "include", "*.h")))
    for p in files:
        if p.endswith(".mod.c"):
            continue
        h.update(os.path.relpath(p, TOP).encode())
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def demo_summary(rows, guest_kernel):
    """rows: (config key, description, migrate_once() result)."""
    build = os.path.join(TOP, "build")
    out = {"date": datetime.date.today().isoformat(),
           "series_key": _read(os.path.join(build, "qemu", ".key")),
           "our_qemu": _read(os.path.join(build, "qemu", "VERSION")),
           "stock_qemu": _read(os.path.join(build, "stock-qemu-10.0",
                                            "VERSION")),
           "driver_hash": driver_hash(),
           "guest_kernel": guest_kernel,
           "workload": "stale: 1 GiB guest, 2 vCPUs, 75 % of RAM written "
                       "and freed, 24 MiB kept and 16 MiB held, verified",
           "rows": []}
    for key, name, r in rows:
        out["rows"].append({
            "config": key, "name": name,
            "transferred_mb": r.get("transferred_mb"),
            "total_ms": r.get("total_ms"),
            "downtime_ms": r.get("downtime_ms"),
            "data_intact": r.get("data_intact"),
            "kernel_errors": len(r.get("kernel_errors") or []),
            "ok": bool(r.get("ok"))})
    return out


def demo_table(s):
    """The Markdown table of a demo summary."""
    lines = ["| configuration | bytes sent | total time | downtime | "
             "destination damaged |", "|---|---|---|---|---|"]
    for r in s["rows"]:
        damaged = "no" if r["data_intact"] and not r["kernel_errors"] \
            else "**yes**"
        lines.append(f"| {r['config']}: {r['name']} | "
                     f"{r['transferred_mb']} MB | {r['total_ms']} ms | "
                     f"{r['downtime_ms']} ms | {damaged} |")
    return "\n".join(lines)


def _ratio(s, what, a, b):
    rows = {r["config"]: r for r in s["rows"]}
    try:
        return rows[a][what] / rows[b][what]
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def check_summary(run):
    """The summary of a runner's results (tests/run.py's check.json): no
    test names or messages, only what a reader of the README needs."""
    build = os.path.join(TOP, "build")
    f = run.get("summary", {})
    return {"date": datetime.date.today().isoformat(),
            "series_key": _read(os.path.join(build, "qemu", ".key")),
            "driver_hash": driver_hash(),
            "counts": run.get("counts", {}),
            "minutes": round(run.get("seconds", 0) / 60),
            "migrations": f.get("migrations", 0),
            "verified_mib": f.get("bytes_verified", 0) >> 20,
            "faults": f.get("faults", 0),
            "bad_inputs": f.get("bad_inputs", 0),
            "failures": f.get("failures", 0),
            "stock_runs": f.get("stock_runs", 0),
            "stock_not_ok": f.get("stock_losses", 0),
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


def _named(what, vals):
    """'what v1' or 'whats v1, v2'."""
    return f"{what}{'s' * (len(vals) > 1)} {', '.join(vals)}"


def bench_sentence(b):
    """The stale cells of the bench sets measured as the bench measures by
    default (no --dst-prealloc, no host tuning): d against r of the same
    set, per size and vCPUs, each from the newest set that has it."""
    newest = {}
    for x in b["sets"]:
        meta = x.get("meta", {})
        if meta.get("dst_args") or meta.get("host_tuned"):
            continue
        cells = {(c["workload"], c["mem_mib"], c["smp"], c["config"]): c
                 for c in x["cells"]}
        for (wl, mem, smp, cfg), c in cells.items():
            r = cells.get((wl, mem, smp, "r"))
            if wl == "stale" and cfg == "d" and r:
                newest[(mem, smp)] = (c, r, meta)
    if not newest:
        return None
    parts, dates, keys, drivers = [], [], [], []
    for (mem, smp), (c, r, meta) in sorted(newest.items()):
        parts.append(f"{mem >> 10} GiB, {smp} vCPU{'s' * (smp > 1)}: "
                     f"{c['transferred_mb'][0]:.0f} against "
                     f"{r['transferred_mb'][0]:.0f} MB, "
                     f"{c['total_ms'][0]:.0f} against "
                     f"{r['total_ms'][0]:.0f} ms")
        for seen, val in ((dates, str(meta.get("started", ""))[:10]),
                          (keys, f"`{meta.get('our_qemu_key')}`"),
                          (drivers, f"`{meta.get('driver_hash')}`")):
            if val not in seen:
                seen.append(val)
    return (f"`make bench` of {', '.join(dates)} ("
            f"{_named('series key', keys)}; {_named('driver', drivers)}; "
            f"each cell from the newest run that has it), stale cells, "
            f"medians of d against free page reporting (r) in the same run: "
            + "; ".join(parts) + ".")


def readme_block(s, check=None, bench=None):
    """README.md's result block, from a demo summary and the summaries of
    the last check and bench."""
    parts = [textwrap.fill(
             f"`make demo` of {s['date']} on the default stack: our QEMU "
             f"{s.get('our_qemu')} (series key `{s.get('series_key')}`), "
             f"Debian's QEMU {s.get('stock_qemu')}, our driver "
             f"`{s.get('driver_hash')}`, guest Linux {s.get('guest_kernel')}; "
             f"{s['workload']}; TCG on a 2-core VM.", 75), "",
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
    for sentence in (bench_sentence(bench) if bench else None,
                     check_sentence(check) if check else None):
        if sentence:
            parts += ["", textwrap.fill(sentence, 75)]
    return "\n".join(parts) + "\n"


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        return None


def render_readme(s, path=README):
    block = readme_block(s, _load(CHECK), _load(BENCH))
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
    run = _load(path)
    if not run:
        raise SystemExit(f"{path}: no results of a run")
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


def bench_targets(b):
    """A markdown table: per set and cell, d's median / its bound for each
    target the bench checked (report.py), **no** where it missed."""
    def fig(v):
        return f"{v:,.0f}" if abs(v) >= 10 else f"{v:g}"
    head = ["set", "cell"] + list(TARGET_COLUMNS)
    rows = ["| " + " | ".join(head) + " |",
            "|" + "---|" * len(head)]
    for i, x in enumerate(b["sets"], 1):
        meta = x.get("meta", {})
        label = str(i) + (" (prealloc)" if meta.get("dst_args") else "") + \
            (" (host-tuned)" if meta.get("host_tuned") else "")
        for t in x.get("targets", []):
            cell = (f"{t['workload']}, {t['mem_mib'] >> 10} GiB"
                    + (f", {t['smp']} vCPU" if t["smp"] != 2 else ""))
            cols = []
            for name in TARGET_COLUMNS:
                c = t["checks"].get(name)
                if not c:
                    cols.append("")
                    continue
                cols.append(f"{fig(c['value'])} / {fig(c['bound'])}"
                            + ("" if c["met"] else " **no**"))
            rows.append(f"| {label} | {cell} | " + " | ".join(cols) + " |")
    return "\n".join(rows)


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
    sub.add_parser("publish-check",
                   help="summarise build/results/check.json into "
                   "check.json and rewrite the block")
    sub.add_parser("bench-targets",
                   help="print the targets of d in every cell of every "
                   "set, as a markdown table")
    pb = sub.add_parser("publish-bench",
                        help="add a bench run's summary.json to "
                        "bench-reporting.json and rewrite the block")
    pb.add_argument("summary", help="the bench run's summary.json")
    pb.add_argument("note", help="what it ran, any tuning")
    a = ap.parse_args(argv[1:])
    if a.command == "bench-targets":
        print(bench_targets(_load(BENCH)))
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
