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
Selecting no test at all (a --tag or -k that matches nothing) is an error:
exit status 2.

On SIGTERM, SIGINT (Ctrl-C) or SIGHUP the runner stops the running test:
SIGTERM to its process group (the test gets testlib.Interrupted, so its
`finally` blocks run), SIGKILL HB_GRACE_S seconds later (default 10) to
whatever is left, also to what the test started outside its group (the
runner adopts orphans: PR_SET_CHILD_SUBREAPER).  Its verdict is
INTERRUPTED (counted as failed), the tests after it do not run, the results
so far are written and the closing lines printed; the exit status is 128
plus the signal's number.  A test past its time limit is stopped the same
way.  After every test, whatever its outcome, the runner calls the
cleanups it registered (testlib.cleanup) and did not run itself, so that
what the test changed on the host is undone even if it was killed.

A test marked @testlib.reference only records stock parts' reference
measurements: its verdict is REFERENCE, counted on the line before the
closing one (`N reference (recorded, not asserted)`), not as passed.  It
still fails if it raises (the harness or the test breaking) or records no
reference run.

A test tagged `each_stack` runs once per stack of STACKS (QEMU 10.0 with
Linux 6.12, the drop-in), as NAME[10.0]; one tagged `upstream_base` also
runs on the series' upstream base, QEMU 10.2 against its stock build of the
same source, as NAME[10.2] (with HB_STACK_MATRIX=full every each_stack
test does); every other test runs on the default stack (HB_STACK, else
10.0).

A test tagged `cloud_kernel` (the kernel subset: boots, a hinted
migration in each mode, the data-loss subset) also runs on Debian 13's
Linux 7.3 guests, generic, PREEMPT_RT and -cloud, as NAME[7.3],
NAME[7.3-rt] and NAME[7.3-cloud] (HB_GUEST set to the series, so the
harness boots that kernel and its test image).  With
HB_KERNEL_MATRIX=full (`make kernels`) every test tagged `each_kernel`
runs on 7.3 and 7.3-rt.  On the debug kernel (scripts/debug-kernel.sh:
KASAN, lockdep, ...) a test tagged `debug_kernel` runs as
NAME[7.3-hbdebug] (HB_KERNEL_MATRIX=full: every `each_kernel` test), and
one tagged `debug_only` there alone.  Those runs are selected when the
kernel is on this machine (scripts/guest-kver.sh finds it).
Every verdict line and record names the guest kernel the test ran on.

  run.py                     all tests
  run.py --tag reliability   only tests carrying a tag
  run.py -k migrate          only tests whose name contains a string
  run.py -k a -k b           only tests whose name contains either
  run.py -k '[10.0]'         only the 10.0 runs of the each_stack tests
  run.py -k '[7.3-rt]'       only the runs on Linux 7.3-rt
"""
import argparse
import ctypes
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hb import env, testlib  # noqa: E402
from hb.channel import CHANNEL  # noqa: E402
from hb.vm import (SANITIZER_REPORTS, STOCK_CRASHES, end_all,  # noqa: E402
                   ending_hard)

DEFAULT_TIMEOUT_S = 1200
# Where tests make their work folders (hb.rigs.tmpdir() and the like).
SCRATCH = os.path.join(env.BUILD, "tmp")
# SIGTERM to a stopped test, then SIGKILL this many seconds later.
GRACE_S = float(os.environ.get("HB_GRACE_S", "10"))
# The registered cleanups of one test, all together, at most.
CLEANUP_TIMEOUT_S = 600
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_CHILD_SUBREAPER = 36
_STOP = []              # the stop signals the runner got, in order
EACH_STACK_TAG = "each_stack"
STACKS = ("10.0",)
# The upstream base and the tag of the tests that also run on it (make
# check: qtests, the switch-over and rounds tests, a data-loss subset)
UPSTREAM_STACK = "10.2"
UPSTREAM_TAG = ("each_stack" if os.environ.get("HB_STACK_MATRIX") == "full"
                else "upstream_base")
# Guest kernels besides the stack's own: (tag, series)
# `make check` runs the subset (tagged cloud_kernel) on every 7.3 flavour,
# to stay within its time; `make kernels` (HB_KERNEL_MATRIX=full) runs
# every each_kernel test on 7.3 and 7.3-rt.
# The debug kernel (KASAN and lockdep under TCG), once built: `make check`
# and HB_KERNEL_MATRIX=debug (`make debug-check`, that alone) run the
# subset tagged debug_kernel (a round in each mode, offline during a walk,
# suspend, a fault, bad input, migrations with churn) and the detectors
# tagged debug_only there; `make kernels` every each_kernel test and the
# detectors.
_MATRIX = os.environ.get("HB_KERNEL_MATRIX", "")
_MATRIX_7_3 = "each_kernel" if _MATRIX == "full" else "cloud_kernel"
_MATRIX_DEBUG = ("each_kernel", "debug_only") if _MATRIX == "full" else \
    ("debug_kernel", "debug_only")
KERNEL_RUNS = ((_MATRIX_7_3, "7.3"), (_MATRIX_7_3, "7.3-rt"),
               ("cloud_kernel", "7.3-cloud")) + \
    tuple((t, "7.3-hbdebug") for t in _MATRIX_DEBUG)
_KVERS = {}


def _kver(series, stack=None):
    """The guest kernel a run of (series, stack) boots; None when this
    machine has none of that series."""
    key = (series, stack)
    if key not in _KVERS:
        if not series and stack:
            series = env.STACKS[stack]["guest"]
        try:
            _KVERS[key] = (subprocess.check_output(
                [os.path.join(env.TOP, "scripts", "guest-kver.sh"), series],
                text=True, stderr=subprocess.DEVNULL).strip()
                if series else env.guest_kver())
        except (OSError, subprocess.CalledProcessError):
            _KVERS[key] = None
    return _KVERS[key]


def load_tests(where=HERE):
    tests = []
    for fn in sorted(os.listdir(where)):
        if not (fn.startswith("test_") and fn.endswith(".py")):
            continue
        spec = importlib.util.spec_from_file_location(fn[:-3],
                                                      os.path.join(where, fn))
        mod = importlib.util.module_from_spec(spec)
        # by name, for the cleanups a test of it registers (pickled)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        funcs = [getattr(mod, n) for n in vars(mod)
                 if n.startswith("test_") and callable(getattr(mod, n))]
        funcs.sort(key=lambda f: f.__code__.co_firstlineno)
        tests += [(f"{fn[:-3]}.{f.__name__}", f) for f in funcs]
    return tests


def _on_stop(signum, _frame):
    """SIGTERM, SIGINT, SIGHUP to the runner: noted; _collect() stops the
    running test, main() runs no further one.  A second one cuts the
    test's grace period short (not its cleanups)."""
    _STOP.append(signum)
    if len(_STOP) == 1:
        print(f"run.py: {signal.Signals(signum).name}: stopping the running "
              f"test (SIGTERM, SIGKILL {GRACE_S:g} s later), then its "
              "cleanups and the results so far", file=sys.stderr, flush=True)


def _catch_stops():
    for s in STOP_SIGNALS:
        signal.signal(s, _on_stop)


def _stopped_in_test(signum, _frame):
    """The test process's handler: unwind the test (its `finally` blocks
    run); further stop signals are ignored, SIGKILL ends it."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    ending_hard()
    raise testlib.Interrupted(f"stopped by {signal.Signals(signum).name}")


def _set_subreaper():
    """Make the runner the parent of the orphans of its tests (a helper
    that left the test's process group, once its parent died), so that
    _end_test() finds them."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _children():
    """The live (not zombie) processes whose parent is the runner."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(st[1]) == me and st[0] != "Z":
            out.append(int(d))
    return out


def _reap():
    """Reap every child of the runner that has ended."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _signal_all(pgid, sig):
    """Send sig to process group pgid and to every process the runner
    adopted (with its own process group, if it leads one); True if there
    was any."""
    _reap()
    anyone = False
    try:
        os.killpg(pgid, sig)
        anyone = True
    except ProcessLookupError:
        pass
    for pid in _children():
        try:
            pg = os.getpgid(pid)
            if pg not in (os.getpgrp(), pgid):
                os.killpg(pg, sig)
            os.kill(pid, sig)
            anyone = True
        except (ProcessLookupError, PermissionError):
            pass
    return anyone


def _end_test(pgid, grace):
    """End everything of a test: SIGTERM once to its process group and to
    what the runner adopted, then, after at most `grace` seconds, SIGKILL
    until nothing is left (orphans surface one generation at a time)."""
    if grace > 0 and _signal_all(pgid, signal.SIGTERM):
        deadline = time.time() + grace
        while time.time() < deadline and _signal_all(pgid, 0):
            time.sleep(0.1)
    for _ in range(100):
        if not _signal_all(pgid, signal.SIGKILL):
            return
        time.sleep(0.1)
    print(f"run.py: processes of group {pgid} survive SIGKILL",
          file=sys.stderr, flush=True)


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _read_all(fd):
    out, off = b"", 0
    while True:
        chunk = os.pread(fd, 1 << 20, off)
        if not chunk:
            return out
        out += chunk
        off += len(chunk)


def _spawn(target):
    """Fork a process, in a process group of its own, that runs
    target(wfd) and exits; returns (pid, the read end of wfd)."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(rfd)
            os.setpgid(0, 0)
            target(wfd)
        except BaseException:  # pylint: disable=broad-except
            code = 1
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # pylint: disable=protected-access
    os.close(wfd)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass                    # the child did it first
    return pid, rfd


def _collect(pid, rfd, limit, stoppable=True):
    """What process `pid` (of _spawn) writes, until it ends.  Past `limit`
    seconds, or once the runner got a stop signal (if `stoppable`):
    SIGTERM to its process group, and GRACE_S later (at once on a second
    stop signal) stop waiting.  Returns (data, why): why is None if it
    ended on its own, else "timeout" or the name of the runner's signal."""
    data, why, term_deadline, reaped = b"", None, None, False
    deadline = time.time() + limit
    os.set_blocking(rfd, False)
    while True:
        try:
            chunk = os.read(rfd, 65536)
        except BlockingIOError:
            chunk = None
        if chunk:
            data += chunk
            continue
        while not reaped:       # it, and orphans the runner adopted
            try:
                p = os.waitpid(-1, os.WNOHANG)[0]
            except ChildProcessError:
                reaped = True
                break
            if p == 0:
                break
            reaped = p == pid
        if chunk == b"" or reaped:
            while chunk is None:   # reaped: whatever is left in the pipe
                try:
                    chunk = os.read(rfd, 1 << 20)
                except BlockingIOError:
                    break
                data += chunk
            break
        now = time.time()
        if why is None:
            if stoppable and _STOP:
                why = signal.Signals(_STOP[0]).name
            elif now > deadline:
                why = "timeout"
            if why:
                try:
                    os.killpg(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                term_deadline = now + GRACE_S
        elif now > term_deadline or (stoppable and len(_STOP) > 1):
            break
        time.sleep(0.1)
    os.close(rfd)
    return data, why


def _reference_verdict(facts):
    runs = facts.get("stock_runs", 0)
    if not runs:
        return "failed", "a reference test that recorded no reference run"
    return ("reference", f"{facts.get('stock_losses', 0)} of {runs} stock "
            "runs not ok (recorded, not asserted)")


def _child(name, f, stack, wfd, cfd, series=None):
    """Run one test in this (forked) process, on `stack` (None: the
    default one) and guest kernel `series` (None: the stack's), note its
    cleanups in cfd, and write its outcome to wfd as one JSON object."""
    testlib.CURRENT.reset(name)
    testlib.record_cleanups_to(cfd)
    for s in STOP_SIGNALS:
        signal.signal(s, _stopped_in_test)
    try:
        if stack:
            env.use_stack(stack)
        if series:
            os.environ["HB_GUEST"] = series
        f()
        verdict, msg = "passed", ""
        if getattr(f, "reference", False):
            verdict, msg = _reference_verdict(testlib.CURRENT.facts)
    except testlib.Skip as exc:
        verdict, msg = "skipped", str(exc)
    except testlib.Interrupted as exc:
        verdict, msg = "interrupted", str(exc)
    except BaseException as exc:  # pylint: disable=broad-except
        verdict = "failed"
        msg = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    end_all()
    if SANITIZER_REPORTS:
        # make check SANITIZE=1: a QEMU's sanitizer report (at run time,
        # or LeakSanitizer's at its graceful quit) fails the test.
        testlib.CURRENT.facts["sanitizer_reports"] = SANITIZER_REPORTS
        if verdict in ("passed", "reference"):
            verdict = "failed"
            msg = "sanitizer report: " + "; ".join(
                f"{r['vm']}: {r['lines'][0]}" for r in SANITIZER_REPORTS)
    testlib.CURRENT.add("stock_boot_crashes", len(STOCK_CRASHES))
    _write_all(wfd, json.dumps({"verdict": verdict, "message": msg,
                                "facts": testlib.CURRENT.facts,
                                "channel": CHANNEL}, default=str).encode())
    os.close(wfd)


def _run_cleanups(name, blobs):
    """Call the cleanups a test registered and did not run itself, newest
    first, in a process of their own (its own process group, at most
    CLEANUP_TIMEOUT_S; the runner's stop signals do not cut them short).
    Returns the errors."""
    if not blobs:
        return []
    print(f"    {name}: {len(blobs)} registered cleanup(s) to run",
          flush=True)

    def target(wfd):
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        _write_all(wfd, json.dumps(testlib.call_cleanups(blobs)).encode())
        os.close(wfd)

    pid, rfd = _spawn(target)
    data, why = _collect(pid, rfd, CLEANUP_TIMEOUT_S, stoppable=False)
    _end_test(pid, GRACE_S)
    if why:
        return [f"the cleanups did not end within {CLEANUP_TIMEOUT_S} s"]
    try:
        return json.loads(data.decode())
    except ValueError:
        return ["the cleanup process died without a report"]


def _scratch():
    """What the scratch folder, where tests make their work folders, holds
    now."""
    try:
        return set(os.listdir(SCRATCH))
    except FileNotFoundError:
        return set()


def run_one(name, f, limit, stack=None, series=None):
    """Run the test in a child process, in a process group of its own, for
    at most `limit` seconds or until the runner is stopped; end everything
    it started; call the cleanups it left.  Returns (verdict, message,
    facts, channel)."""
    cfd, cpath = tempfile.mkstemp(prefix="hb-cleanups-")
    os.unlink(cpath)
    scratch_before = _scratch()
    try:
        pid, rfd = _spawn(lambda wfd: _child(name, f, stack, wfd, cfd,
                                             series))
        data, why = _collect(pid, rfd, limit)
        # Whatever the outcome, nothing the test started survives it (a
        # stopped test's group had its SIGTERM and grace period already).
        _end_test(pid, 0 if why or len(_STOP) > 1 else GRACE_S)
        errors = _run_cleanups(name,
                               testlib.pending_cleanups(_read_all(cfd)))
    finally:
        os.close(cfd)
    try:
        rec = json.loads(data.decode())
    except ValueError:
        rec = None
    if why == "timeout":
        verdict, msg = ("timeout", f"no verdict after {limit} s; its "
                        "process group was killed")
    elif why:
        verdict, msg = ("interrupted", f"the runner got {why}; the test "
                        "was stopped and its process group killed")
    elif rec is None:
        verdict, msg = "failed", "the test process died without a verdict"
    else:
        verdict, msg = rec["verdict"], rec["message"]
    if errors:
        if verdict in ("passed", "skipped", "reference"):
            verdict = "failed"
        msg = (msg + "; " if msg else "") + "cleanup failed: " + \
            "; ".join(errors)
    # A test that did not fail leaves nothing in the scratch folder (one
    # that failed keeps its work folder, which its message names).
    left = sorted(_scratch() - scratch_before)
    if left and verdict in ("passed", "skipped", "reference"):
        verdict = "failed"
        msg = (msg + "; " if msg else "") + "left behind in " + \
            f"{SCRATCH}: {', '.join(left)}"
    rec = rec or {}
    return verdict, msg, rec.get("facts") or {}, rec.get("channel")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tag", action="append", default=[])
    ap.add_argument("--skip-tag", action="append", default=[])
    ap.add_argument("-k", dest="substr", action="append", default=[],
                    help="only tests whose name contains this string "
                    "(repeated: any of them)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--dir", default=HERE,
                    help="where the test_*.py files are (default: tests/)")
    ap.add_argument("--results", default=None,
                    help="JSON file to write (default: "
                    "build/results/check.json)")
    a = ap.parse_args()
    _set_subreaper()
    _catch_stops()

    selected = []
    known_tags = set()
    for name, f in load_tests(a.dir):
        tags = set(getattr(f, "tags", ()))
        known_tags |= tags
        if a.tag and not tags & set(a.tag):
            continue
        if tags & set(a.skip_tag):
            continue
        runs = ([(f"{name}[{st}]", st) for st in STACKS]
                if EACH_STACK_TAG in tags else [(name, None)])
        runs = [(n, st, None) for n, st in runs
                if "debug_only" not in tags] + [
            (f"{n}[{se}]", st, se) for n, st in runs
            for ktag, se in KERNEL_RUNS
            if ktag in tags and _kver(se, st)]
        # the upstream base with the stack's own guest kernel only (not in
        # a sanitizer run: that build is of 10.0)
        if UPSTREAM_TAG in tags and "debug_only" not in tags and \
                not env.SANITIZE:
            runs.append((f"{name}[{UPSTREAM_STACK}]", UPSTREAM_STACK, None))
        for run_name, stack, series in runs:
            if a.substr and not any(k in run_name for k in a.substr):
                continue
            selected.append((run_name, f, tags, stack, series))
    if not selected:
        print(f"run.py: no test selected by {' '.join(sys.argv[1:])!r} "
              f"in {a.dir}; tags known there: "
              f"{', '.join(sorted(known_tags)) or 'none'}", file=sys.stderr,
              flush=True)
        return 2
    if a.list:
        for name, f, tags, *_ in selected:
            limit = getattr(f, "timeout_s", DEFAULT_TIMEOUT_S)
            print(f"{name}  [{','.join(sorted(tags))}] {limit}s")
        return 0

    results = []
    counts = {"passed": 0, "failed": 0, "skipped": 0, "reference": 0}
    channel = {"resent": 0, "damaged": 0, "unacked": 0}
    not_run = []
    t_all = time.time()
    for i, (name, f, tags, stack, series) in enumerate(selected, 1):
        if _STOP:
            not_run = [n for n, *_ in selected[i - 1:]]
            break
        print(f"[{i}/{len(selected)}] {name} ...", flush=True)
        t0 = time.time()
        limit = getattr(f, "timeout_s", DEFAULT_TIMEOUT_S)
        verdict, msg, facts, ch = run_one(name, f, limit, stack, series)
        kver = _kver(series, stack) or "none"
        for k, v in (ch or {}).items():
            channel[k] = channel.get(k, 0) + v
        dt = time.time() - t0
        counts["failed" if verdict in ("timeout", "interrupted")
               else verdict] += 1
        rec = {"name": name, "verdict": verdict, "message": msg,
               "seconds": round(dt, 1), "tags": sorted(tags),
               "timeout_s": limit, "facts": facts, "guest_kernel": kver}
        results.append(rec)
        print(f"[{i}/{len(selected)}] {name} {verdict.upper()} ({dt:.1f}s, "
              f"guest {kver})"
              + (f": {msg}" if msg else ""), flush=True)
    stopped = signal.Signals(_STOP[0]).name if _STOP else None
    summary = testlib.summary(results)
    out = a.results or os.path.join(testlib.BUILD, "results", "check.json")
    testlib.save_json(out, {"results": results, "summary": summary,
                            "counts": counts, "stopped_by": stopped,
                            "not_run": not_run,
                            "seconds": round(time.time() - t_all, 1)})
    print(f"results: {out}")
    for line in testlib.summary_lines(summary):
        print(line)
    print(f"summary: guest command lines resent={channel['resent']} "
          f"(damaged={channel['damaged']} unacknowledged={channel['unacked']})")
    if stopped:
        print(f"run.py: stopped by {stopped}; {len(not_run)} selected "
              "test(s) not run")
    # The closing line is `N passed, N failed[, N skipped]` (CI parses
    # it); the reference tests are counted on the line before it.
    print(f"{counts['reference']} reference (recorded, not asserted)")
    tail = f"{counts['passed']} passed, {counts['failed']} failed"
    if counts["skipped"]:
        tail += f", {counts['skipped']} skipped"
    print(tail, flush=True)
    if stopped:
        return 128 + _STOP[0]
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
