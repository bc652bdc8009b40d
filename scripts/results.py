#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The committed summaries of results and the README block made from them.

Documentation/results/demo.json is the summary of the last published
`make demo` (PUBLISH=1): its date, the key of the QEMU series build, the
hash of the driver sources, the guest kernel, and per configuration the
bytes sent, total time, downtime and the data verdict.  README.md's block
between `<!-- results -->` and `<!-- /results -->` is made from it:

  scripts/results.py readme      rewrite README.md's block from the file
  scripts/results.py check       exit 1 if the block differs from the file
"""
import datetime
import glob
import hashlib
import json
import os
import re
import sys
import textwrap

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(TOP, "Documentation", "results", "demo.json")
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


def readme_block(s):
    """README.md's result block, from a demo summary."""
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
    return "\n".join(parts) + "\n"


def render_readme(s, path=README):
    with open(path) as f:
        text = f.read()
    if not BLOCK_RE.search(text):
        raise SystemExit(f"{path}: no <!-- results --> block")
    new = BLOCK_RE.sub(lambda m: m.group(1) + readme_block(s) + m.group(2),
                       text)
    return text, new


def publish_demo(s):
    os.makedirs(os.path.dirname(DEMO), exist_ok=True)
    with open(DEMO, "w") as f:
        json.dump(s, f, indent=1, sort_keys=True)
        f.write("\n")
    _, new = render_readme(s)
    with open(README, "w") as f:
        f.write(new)


def main(argv):
    if len(argv) != 2 or argv[1] not in ("readme", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    with open(DEMO) as f:
        s = json.load(f)
    old, new = render_readme(s)
    if argv[1] == "check":
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
