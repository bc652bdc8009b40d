#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""balloon-hint test runner.

Collects `test_*` functions from tests/test_*.py, runs them in file order,
prints progress, writes build/results/check.json and ends with the line
`N passed, N failed[, N skipped]`.  Exit status is non-zero on any failure.

Each test runs in a child process of its own, in a process group of its
own, under a time limit (DEFAULT_TIMEOUT_S, or the test's
@testlib.timeout(SECONDS)).  A test that runs over gets the verdict TIMEOUT,
which counts as failed, and everything it started (QEMUs, gdb, guests'
helpers) is killed with its process group.  A skip means the environment
lacks something the test needs; a build or product failure is a failure.

A test tagged `each_stack` runs once per supported stack (QEMU 10.0 with
Linux 6.12, QEMU 7.2 with Linux 6.1), as NAME[10.0] and NAME[7.2]; every
other test runs on the default stack (HB_STACK, else 10.0).

  run.py                     all tests
  run.py --tag reliability   only tests carrying a tag
  run.py -k migrate          only tests whose name contains a string
  run.py -k '[7.2]'          only the 7.2 runs of the each_stack tests
  REPEAT=20 run.py --tag soak
"""
import argparse
import importlib.util
import json
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hb import testlib  # noqa: E402

DEFAULT_TIMEOUT_S = 1200
EACH_STACK_TAG = "each_stack"
STACKS = ("10.0", "7.2")


def load_tests(where=HERE):
    tests = []
    for fn in sorted(os.listdir(where)):
        if not (fn.startswith("test_") and fn.endswith(".py")):
            continue
        spec = importlib.util.spec_from_file_location(fn[:-3],
                                                      os.path.join(where, fn))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        funcs = [getattr(mod, n) for n in vars(mod)
                 if n.startswith("test_") and callable(getattr(mod, n))]
        funcs.sort(key=lambda f: f.__code__.co_firstlineno)
        tests += [(f"{fn[:-3]}.{f.__name__}", f) for f in funcs]
    return tests


def _child(name, f, stack, wfd):
    """Run one test in this (forked) process, on `stack` (None: the
    default one), and write its outcome to wfd as one JSON object."""
    testlib.CURRENT.reset(name)
    try:
        if stack:
            from hb import harness  # pylint: disable=import-outside-toplevel
            harness.use_stack(stack)
        f()
        verdict, msg = "passed", ""
    except testlib.Skip as exc:
        verdict, msg = "skipped", str(exc)
    except BaseException as exc:  # pylint: disable=broad-except
        verdict = "failed"
        msg = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    channel = None
    hb_harness = sys.modules.get("hb.harness")
    if hb_harness:
        hb_harness.kill_all()
        channel = hb_harness.CHANNEL
        testlib.CURRENT.add("stock_boot_crashes",
                            len(hb_harness.STOCK_CRASHES))
    out = json.dumps({"verdict": verdict, "message": msg,
                      "facts": testlib.CURRENT.facts,
                      "channel": channel}, default=str).encode()
    while out:
        out = out[os.write(wfd, out):]
    os.close(wfd)


def run_one(name, f, limit, stack=None):
    """Fork, run the test in a new process group, wait at most `limit`
    seconds, then kill the whole group.  Returns (verdict, message, facts,
    channel)."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        os.setpgid(0, 0)
        code = 0
        try:
            _child(name, f, stack, wfd)
        except BaseException:  # pylint: disable=broad-except
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # pylint: disable=protected-access
    os.close(wfd)
    pgid = pid
    try:
        os.setpgid(pid, pgid)
    except OSError:
        pass                    # the child did it first
    data = b""
    deadline = time.time() + limit
    timed_out = False
    reaped = False
    os.set_blocking(rfd, False)
    while True:
        try:
            chunk = os.read(rfd, 65536)
        except BlockingIOError:
            chunk = None
        if chunk:
            data += chunk
            continue
        if not reaped and os.waitpid(pid, os.WNOHANG)[0]:
            reaped = True
        if chunk == b"" or reaped:
            if chunk is None:   # reaped: whatever is left in the pipe
                try:
                    data += os.read(rfd, 1 << 20)
                except BlockingIOError:
                    pass
            break
        if time.time() > deadline:
            timed_out = True
            break
        time.sleep(0.2)
    os.close(rfd)
    # Whatever the outcome, nothing the test started survives it.
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if not reaped:
        os.waitpid(pid, 0)
    if timed_out:
        return ("timeout", f"no verdict after {limit} s; its process group "
                "was killed", {}, None)
    try:
        rec = json.loads(data.decode())
    except ValueError:
        return "failed", "the test process died without a verdict", {}, None
    return rec["verdict"], rec["message"], rec["facts"], rec["channel"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tag", action="append", default=[])
    ap.add_argument("--skip-tag", action="append", default=[])
    ap.add_argument("-k", dest="substr", default=None)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--dir", default=HERE,
                    help="where the test_*.py files are (default: tests/)")
    ap.add_argument("--results", default=None,
                    help="JSON file to write (default: "
                    "build/results/check.json)")
    a = ap.parse_args()

    selected = []
    for name, f in load_tests(a.dir):
        tags = set(getattr(f, "tags", ()))
        if a.tag and not tags & set(a.tag):
            continue
        if tags & set(a.skip_tag):
            continue
        runs = ([(f"{name}[{st}]", st) for st in STACKS]
                if EACH_STACK_TAG in tags else [(name, None)])
        for run_name, stack in runs:
            if a.substr and a.substr not in run_name:
                continue
            selected.append((run_name, f, tags, stack))
    if a.list:
        for name, f, tags, _ in selected:
            limit = getattr(f, "timeout_s", DEFAULT_TIMEOUT_S)
            print(f"{name}  [{','.join(sorted(tags))}] {limit}s")
        return 0

    results = []
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    channel = {"resent": 0, "damaged": 0, "unacked": 0}
    t_all = time.time()
    for i, (name, f, tags, stack) in enumerate(selected, 1):
        print(f"[{i}/{len(selected)}] {name} ...", flush=True)
        t0 = time.time()
        limit = getattr(f, "timeout_s", DEFAULT_TIMEOUT_S)
        verdict, msg, facts, ch = run_one(name, f, limit, stack)
        for k, v in (ch or {}).items():
            channel[k] = channel.get(k, 0) + v
        dt = time.time() - t0
        counts["failed" if verdict == "timeout" else verdict] += 1
        rec = {"name": name, "verdict": verdict, "message": msg,
               "seconds": round(dt, 1), "tags": sorted(tags),
               "timeout_s": limit, "facts": facts}
        results.append(rec)
        print(f"[{i}/{len(selected)}] {name} {verdict.upper()} ({dt:.1f}s)"
              + (f": {msg}" if msg else ""), flush=True)
    summary = testlib.summary(results)
    out = a.results or os.path.join(testlib.BUILD, "results", "check.json")
    testlib.save_json(out, {"results": results, "summary": summary,
                            "seconds": round(time.time() - t_all, 1)})
    print(f"results: {out}")
    for line in testlib.summary_lines(summary):
        print(line)
    print(f"summary: guest command lines resent={channel['resent']} "
          f"(damaged={channel['damaged']} unacknowledged={channel['unacked']})")
    tail = f"{counts['passed']} passed, {counts['failed']} failed"
    if counts["skipped"]:
        tail += f", {counts['skipped']} skipped"
    print(tail)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
