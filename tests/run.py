#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""balloon-hint test runner.

Collects `test_*` functions from tests/test_*.py, runs them in file order,
prints progress, writes build/results/check.json and ends with the line
`N passed, N failed[, N skipped]`.  Exit status is non-zero on any failure.

  run.py                     all tests
  run.py --tag reliability   only tests carrying a tag
  run.py -k migrate          only tests whose name contains a string
  REPEAT=20 run.py --tag soak
"""
import argparse
import importlib.util
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hb import testlib  # noqa: E402


def load_tests():
    tests = []
    for fn in sorted(os.listdir(HERE)):
        if not (fn.startswith("test_") and fn.endswith(".py")):
            continue
        spec = importlib.util.spec_from_file_location(fn[:-3],
                                                      os.path.join(HERE, fn))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        funcs = [getattr(mod, n) for n in vars(mod)
                 if n.startswith("test_") and callable(getattr(mod, n))]
        funcs.sort(key=lambda f: f.__code__.co_firstlineno)
        tests += [(f"{fn[:-3]}.{f.__name__}", f) for f in funcs]
    return tests


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tag", action="append", default=[])
    ap.add_argument("--skip-tag", action="append", default=[])
    ap.add_argument("-k", dest="substr", default=None)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()

    selected = []
    for name, f in load_tests():
        tags = set(getattr(f, "tags", ()))
        if a.tag and not tags & set(a.tag):
            continue
        if tags & set(a.skip_tag):
            continue
        if a.substr and a.substr not in name:
            continue
        selected.append((name, f, tags))
    if a.list:
        for name, _, tags in selected:
            print(f"{name}  [{','.join(sorted(tags))}]")
        return 0

    results = []
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    t_all = time.time()
    for i, (name, f, tags) in enumerate(selected, 1):
        print(f"[{i}/{len(selected)}] {name} ...", flush=True)
        t0 = time.time()
        testlib.CURRENT.reset(name)
        try:
            f()
            verdict, msg = "passed", ""
        except testlib.Skip as exc:
            verdict, msg = "skipped", str(exc)
        except Exception as exc:  # pylint: disable=broad-except
            verdict = "failed"
            msg = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        dt = time.time() - t0
        counts[verdict] += 1
        rec = {"name": name, "verdict": verdict, "message": msg,
               "seconds": round(dt, 1), "tags": sorted(tags),
               "facts": testlib.CURRENT.facts}
        results.append(rec)
        print(f"[{i}/{len(selected)}] {name} {verdict.upper()} ({dt:.1f}s)"
              + (f": {msg}" if msg else ""), flush=True)
    summary = testlib.summary(results)
    out = os.path.join(testlib.BUILD, "results", "check.json")
    testlib.save_json(out, {"results": results, "summary": summary,
                            "seconds": round(time.time() - t_all, 1)})
    print(f"results: {out}")
    for line in testlib.summary_lines(summary):
        print(line)
    hb_harness = sys.modules.get("hb.harness")
    if hb_harness:
        ch = hb_harness.CHANNEL
        print(f"summary: guest command lines resent={ch['resent']} "
              f"(damaged={ch['damaged']} unacknowledged={ch['unacked']})")
    tail = f"{counts['passed']} passed, {counts['failed']} failed"
    if counts["skipped"]:
        tail += f", {counts['skipped']} skipped"
    print(tail)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
