# SPDX-License-Identifier: GPL-2.0
"""Small helpers shared by the test files: tags, skips, facts, migrations,
cleanups of the host."""
import atexit
import itertools
import json
import os
import pickle
import re
import struct
import subprocess
import time
import traceback

from . import env
from .env import (BUILD, TOP,  # noqa: F401  (re-exported)
                  STOCK_BINARIES, guest_kver, save_json)
from .migration import drop_workdir, migrate_once


class Skip(Exception):
    """The environment lacks something the test needs (never raised for a
    build or product failure); says what."""


class Interrupted(BaseException):
    """The runner stopped the test (it was interrupted, or the test overran
    its time limit): raised in the test by the runner's SIGTERM, so that
    its `finally` blocks run; a BaseException, which `except Exception`
    does not swallow."""


def tag(*tags):
    def deco(f):
        f.tags = tuple(dict.fromkeys(tuple(tags) + getattr(f, "tags", ())))
        return f
    return deco


def reference(f):
    """A test that only records stock parts' reference measurements
    (record_reference): its verdict is REFERENCE, not PASSED, and the
    runner counts it apart.  It still fails on any exception (the harness,
    the test or our build breaking: record_reference raises on a run that
    broke on our side) and when it recorded no reference run at all.
    Adds the tag `reference`."""
    f.reference = True
    f.tags = tuple(dict.fromkeys(getattr(f, "tags", ()) + ("reference",)))
    return f


def timeout(seconds):
    """The test's time limit in the runner (default run.DEFAULT_TIMEOUT_S);
    past it the test's verdict is TIMEOUT and its processes are killed."""
    def deco(f):
        f.timeout_s = seconds
        return f
    return deco


class _Current:
    """Facts a test records for the summary (migrations, bytes verified)."""

    def __init__(self):
        self.name = None
        self.facts = {}

    def reset(self, name):
        self.name = name
        self.facts = {"migrations": 0, "bytes_verified": 0, "faults": 0,
                      "bad_inputs": 0, "stock_losses": 0, "stock_runs": 0}

    def add(self, key, n=1):
        self.facts[key] = self.facts.get(key, 0) + n


CURRENT = _Current()


# Cleanups: what a test changes on the host (files outside the tree, a
# module in /lib/modules, depmod's tables, a temporary folder) it undoes
# through a registered cleanup, which runs even when the test does not get
# to its own `finally` (killed after its time limit, or the runner
# interrupted by SIGTERM or Ctrl-C).
_CLEANUP_FD = None      # where the runner reads this test's registrations
_CLEANUPS = {}          # handle -> pickled (fn, args, kwargs), not run yet
_HANDLES = itertools.count(1)


def cleanup(fn, *args, **kwargs):
    """Register fn(*args, **kwargs), which undoes a change the test made to
    the host; returns a handle for run_cleanup().  The runner calls every
    cleanup the test did not run itself, newest first, once the test and
    everything it started have ended, whatever the outcome (passed,
    failed, TIMEOUT, runner interrupted); an error in one fails the test.
    fn must be a module-level function and the arguments picklable (they
    are pickled here: TypeError or pickle.PicklingError otherwise), and
    calling it twice must be harmless: a test killed while running it gets
    it run again.  Outside the runner, pending cleanups run at exit."""
    blob = pickle.dumps((fn, args, kwargs))
    handle = next(_HANDLES)
    _CLEANUPS[handle] = blob
    _note(("add", handle, blob))
    return handle


def run_cleanup(handle):
    """Run a registered cleanup now (a `finally` of the test, to undo its
    change before the test goes on); once it returned, the runner does not
    call it again.  If it raises, it stays registered."""
    blob = _CLEANUPS.get(handle)
    if blob is None:
        return
    fn, args, kwargs = pickle.loads(blob)
    fn(*args, **kwargs)
    del _CLEANUPS[handle]
    _note(("done", handle))


def record_cleanups_to(fd):
    """The runner: have this (test) process note its cleanups in fd."""
    global _CLEANUP_FD  # pylint: disable=global-statement
    _CLEANUP_FD = fd
    _CLEANUPS.clear()


def _note(rec):
    if _CLEANUP_FD is None:
        return
    data = pickle.dumps(rec)
    data = struct.pack("<I", len(data)) + data
    while data:
        data = data[os.write(_CLEANUP_FD, data):]


def pending_cleanups(data):
    """The runner: the pickled cleanups the notes in `data` registered and
    did not mark done, in registration order."""
    added = {}
    while len(data) >= 4:
        (n,) = struct.unpack("<I", data[:4])
        if len(data) < 4 + n:
            break               # a note cut short by a kill
        rec, data = pickle.loads(data[4:4 + n]), data[4 + n:]
        if rec[0] == "add":
            added[rec[1]] = rec[2]
        else:
            added.pop(rec[1], None)
    return list(added.values())


def call_cleanups(blobs):
    """Call pickled cleanups, newest first, each whatever the others did;
    returns the errors, one line each."""
    errors = []
    for blob in reversed(blobs):
        what = "cleanup"
        try:
            fn, args, kwargs = pickle.loads(blob)
            what = getattr(fn, "__qualname__", repr(fn))
            fn(*args, **kwargs)
        except Exception as exc:  # pylint: disable=broad-except
            traceback.print_exc()
            errors.append(f"{what}: {type(exc).__name__}: {exc}")
    return errors


@atexit.register
def _cleanups_at_exit():
    if _CLEANUP_FD is None and _CLEANUPS:
        call_cleanups(list(_CLEANUPS.values()))
        _CLEANUPS.clear()


def summary(results):
    tot = {}
    for r in results:
        for k, v in r.get("facts", {}).items():
            if isinstance(v, int):
                tot[k] = tot.get(k, 0) + v
    tot["failures"] = sum(r["verdict"] in ("failed", "timeout",
                                           "interrupted") for r in results)
    return tot


def summary_lines(s):
    return [
        f"summary: migrations run={s.get('migrations', 0)} "
        f"guest data verified={s.get('bytes_verified', 0) / 2**20:.0f} MiB "
        f"faults injected={s.get('faults', 0)} "
        f"bad inputs tried={s.get('bad_inputs', 0)} "
        f"failures={s.get('failures', 0)}",
        f"summary: stock reference runs={s.get('stock_runs', 0)} "
        f"stock runs not ok (data lost, kernel error or QEMU died)="
        f"{s.get('stock_losses', 0)} "
        f"stock QEMUs that crashed at boot and were launched again="
        f"{s.get('stock_boot_crashes', 0)}",
    ]


def qemu_bin(which):
    return {"stock": env.STOCK_QEMU, "ours": env.OUR_QEMU}[which]


def ours_driver_path():
    """Our driver as the test guests load it: the test build in the image
    of the guest kernel (`make images`)."""
    return os.path.join(BUILD, f"mod-{guest_kver()}", "guest",
                        "virtio_balloon.ko")


def have_ours_driver():
    return os.path.exists(ours_driver_path())


def log_result(res, label):
    d = os.path.join(BUILD, "results", "runs")
    os.makedirs(d, exist_ok=True)
    n = len(os.listdir(d))
    # which test, on which guest kernel (HB_GUEST: tests/run.py each_kernel)
    res.setdefault("test", CURRENT.name)
    res.setdefault("guest_kernel", guest_kver())
    save_json(os.path.join(d, f"{n:04d}-{label}.json"), res)
    brief = {k: res.get(k) for k in ("status", "transferred_mb", "total_ms",
                                     "downtime_ms", "data_intact")}
    brief["kernel_errors"] = len(res.get("kernel_errors") or [])
    if res.get("error"):
        brief["error"] = res["error"][:200]
    print(f"    {label}: {json.dumps(brief)}", flush=True)


def migrate(label, **kw):
    """One migration; counts it; returns the result dict."""
    res = migrate_once(**kw)
    CURRENT.add("migrations")
    CURRENT.add("bytes_verified",
                (res.get("verify") or {}).get("bytes_verified", 0)
                if res.get("ok") else 0)
    log_result(res, label)
    return res


# Errors in a run's record (migrate_once() keeps every exception there)
# that mean our side broke (a bug in the harness or the test, a missing
# build or image, a workload setup that failed: hb.channel.SetupError), not a
# stock part: the run is no reference measurement.
# A QEMU that died or hung (VMLaunchFailure, GuestError, QMP cut off or
# timed out) is stock's doing in a reference run.
MACHINERY_ERRORS = re.compile(
    r"^(TypeError|NameError|AttributeError|KeyError|IndexError|ValueError|"
    r"UnboundLocalError|ImportError|ModuleNotFoundError|FileNotFoundError|"
    r"PermissionError|NotImplementedError|RecursionError|ZeroDivisionError|"
    r"AssertionError|QEMUMachineError|SetupError):")


def record_reference(res, label):
    """A stock reference run: count it, count it as a loss unless it was ok
    (completed, data intact, no kernel error), and append its verdict to
    build/results/reference.json.  Never asserts what stock did; raises
    (the test fails) if the run broke on our side (MACHINERY_ERRORS)."""
    err = res.get("error") or ""
    assert not MACHINERY_ERRORS.match(err), \
        (f"{label}: the run broke on our side, not stock's: {err} "
         f"(details: {res.get('workdir')})")
    CURRENT.add("stock_runs")
    lost = not res.get("ok")
    if lost:
        CURRENT.add("stock_losses")
    path = os.path.join(BUILD, "results", "reference.json")
    try:
        with open(path) as f:
            runs = json.load(f)
    except (OSError, ValueError):
        runs = []
    runs.append({"label": label, "test": CURRENT.name,
                 "config": res.get("config"), "status": res.get("status"),
                 "data_intact": res.get("data_intact"),
                 "kernel_errors": len(res.get("kernel_errors") or []),
                 "transferred_mb": res.get("transferred_mb"),
                 "total_ms": res.get("total_ms"),
                 "downtime_ms": res.get("downtime_ms"), "lost": lost,
                 "error": (res.get("error") or "")[:300] or None})
    save_json(path, runs)
    drop_workdir(res)


def assert_intact(res, label=""):
    """Every run of our stack must pass: completed, the destination running,
    guest data intact (kept file, held memory, churn, every ticker pass), no
    kernel error on the destination's or the source's console, no error in
    either QEMU's stderr (virtio_error, assertion, sanitizer report)."""
    where = f" [{label}] (details: {res.get('workdir')})"
    assert res.get("status") == "completed", \
        f"migration {res.get('status')}: {res.get('error')}{where}"
    assert res.get("dst_status") == "running", f"destination not running{where}"
    assert not res.get("kernel_errors"), \
        f"destination kernel errors: {res['kernel_errors'][:5]}{where}"
    assert not res.get("src_console_errors"), \
        f"source kernel errors: {res['src_console_errors'][:5]}{where}"
    qerr = res.get("qemu_errors") or {}
    assert not any(qerr.values()), f"QEMU stderr reports errors: {qerr}{where}"
    v = res.get("verify") or {}
    assert not (v.get("ticker") or {}).get("bad"), \
        f"the ticker saw damaged data: {v['ticker']}{where}"
    assert res.get("data_intact") is True, \
        f"guest data not intact: {v or res.get('error')}{where}"
    assert res.get("ok") is True, f"run not ok: {res.get('error')}{where}"


def assert_not_intact(res, what):
    """A detector's own run: assert_intact(res) must fail, for `what` the
    test provoked.  Returns its message and drops the run's work folder,
    which migrate() keeps for a run that was not ok."""
    try:
        assert_intact(res, what)
    except AssertionError as exc:
        print(f"    assert_intact failed as it should ({what}): "
              f"{str(exc)[:300]}")
        drop_workdir(res)
        return str(exc)
    raise AssertionError(f"assert_intact passed a run with {what}")


# assert_hinted(): the share of the stale data the scenario freed that the
# pages the source device cleared because of hints must at least come to,
# and the most bytes a hinted migration may send, as a factor of its floor
# (hint_figures()).
HINT_COVERAGE = 0.8
FLOOR_FACTOR = 1.2


def hint_figures(res):
    """What assert_hinted() measures a hinted migration (its first hop)
    against, in MiB; None where it is not known, with the reason:

    stale_mib: the stale data the scenario freed before the migration, as
      prepare_guest() recorded it from what hbwork wrote (res["stale_mib"]).
    cleared_mib: the pages the source device cleared from the dirty bitmap
      because of hints (our QEMU's x-free-page-hint-stats).  A count, not a
      set: it takes free memory that was never stale as well, so it can
      pass for stale data it did not cover; the bytes check below is the
      stricter one.
    floor_mib: what a migration that skipped every page free at its start
      must still send: the guest's RAM (mem_mib, kernel-reserved memory
      included, which MemTotal leaves out) minus MemFree at migration start
      (res["meminfo_before"]); in alloc mode plus the guest's reserve_kb,
      which that mode leaves free and unhinted by design.  Nothing is added
      for what the guest writes during the migration (the ticker, the
      kernel: a few MiB), so only workloads without churn have a floor.
      Not a strict lower bound: a page in use that holds zeros costs a
      header only, so good runs send 0.75-1.1x of it (the in-tree driver,
      which leaves free blocks under 4 MiB unhinted, the most).
    sent_mib: the bytes the migration sent (res["transferred_mb"]).
    why_no_coverage: why cleared_mib is not held to HINT_COVERAGE of
      stale_mib (None: it is).  An alloc round under churn takes what the
      zones can spare while the churn allocates too, and gives a zone up
      for the round once the churn dips it below its floor (vb_alloc.c),
      so what it covers depends on the churn's timing."""
    cfg = res.get("config") or {}
    page = ((res.get("migration") or {}).get("ram") or {}).get(
        "page-size") or 4096
    out = {"why_no_cleared": None, "why_no_floor": None,
           "why_no_coverage": None}
    out["stale_mib"] = res.get("stale_mib")
    if cfg.get("src") in STOCK_BINARIES:
        out["cleared_mib"] = None
        out["why_no_cleared"] = ("a stock source QEMU reports no "
                                 "x-free-page-hint-stats")
    else:
        c = res.get("device_src") or {}
        out["cleared_mib"] = c.get("cleared-pages", 0) * page / 2**20
    m = res.get("meminfo_before") or {}
    g = res.get("guest_hint") or {}
    if cfg.get("workload") == "churn" and g.get("mode") == "alloc":
        out["why_no_coverage"] = ("an alloc round under churn gives zones "
                                  "up as the churn dips them")
    if cfg.get("workload") == "churn":
        out["floor_mib"] = None
        out["why_no_floor"] = ("churn: what it rewrites during the migration "
                               "depends on how many dirty passes it takes")
    elif "free_kb" not in m or not cfg.get("mem_mib"):
        out["floor_mib"] = None
        out["why_no_floor"] = f"no MemFree at migration start: {m}"
    else:
        floor_kb = (cfg["mem_mib"] << 10) - m["free_kb"]
        if g.get("mode") == "alloc":
            floor_kb += g.get("reserve_kb", 0)
        out["floor_mib"] = floor_kb / 1024
    sent = res.get("transferred_mb")
    out["sent_mib"] = sent * 1e6 / 2**20 if sent is not None else None
    return out


def assert_hinted(res, mode=None, label=""):
    """The migration hinted, and the hints did what they are for.  The
    source device of every hop cleared pages from the dirty bitmap because
    of hints; with our driver (whose rounds the device waits for), on the
    first hop those pages come to at least HINT_COVERAGE of the stale data
    the scenario freed (but for an alloc round under churn) and it sent at
    most FLOOR_FACTOR times its floor;
    with our driver, the guest ran a new round in `mode`
    ("scan" or "alloc"; None: either).  hint_figures() defines each
    figure and says which runs have none (stock source, churn)."""
    where = f" [{label}] (details: {res.get('workdir')})"
    f = hint_figures(res)
    # A driver that does not negotiate HINT_KEEP_WRITES (the in-tree one)
    # gets stock's timing on our QEMU too: no pre-send wait, so how much
    # its hints cover before the pages are sent is a race, as on stock.
    # Only that its hints cleared pages is asserted for it.
    timed = res["config"].get("balloon") == "ours"
    print(f"    hints [{label}]: stale {f['stale_mib']} MiB, cleared "
          + (f"{f['cleared_mib']:.0f} MiB" if f["cleared_mib"] is not None
             else f"- ({f['why_no_cleared']})")
          + f", sent {f['sent_mib'] or 0:.0f} MiB, floor "
          + (f"{f['floor_mib']:.0f} MiB" if f["floor_mib"] is not None
             else f"- ({f['why_no_floor']})"), flush=True)
    c = res.get("device_src") or {}
    if f["cleared_mib"] is not None:
        assert c.get("cleared-pages", 0) > 0, \
            f"the source device cleared no page because of hints: {c}{where}"
        for i, h in enumerate(res.get("hops") or [], 2):
            hc = h.get("device_src") or {}
            assert hc.get("cleared-pages", 0) > 0, \
                f"hop {i}: the source device cleared no page: {hc}{where}"
        # The first hop only: a later hop's source got no stale data (its
        # pages never came over), so its hints cover free memory that
        # costs a zero page, not stale data.
        assert f["stale_mib"] is not None, \
            f"no record of the stale data the scenario freed{where}"
        # A workload that freed no stale data (fresh, churn with
        # stale_pct=0) gives the hints nothing to cover.
        if timed and f["why_no_coverage"]:
            print(f"    covered {f['cleared_mib'] / f['stale_mib']:.0%} of "
                  f"the stale data, not asserted: {f['why_no_coverage']}",
                  flush=True)
        assert not timed or f["why_no_coverage"] or \
            f["cleared_mib"] >= HINT_COVERAGE * f["stale_mib"], \
            (f"the hints covered too little stale data: the source device "
             f"cleared {f['cleared_mib']:.0f} MiB because of hints, less "
             f"than {HINT_COVERAGE:.0%} of the {f['stale_mib']} MiB of stale "
             f"data the scenario freed: {c}{where}")
    if f["floor_mib"] is not None and timed:
        assert f["sent_mib"] is not None, f"no bytes sent recorded{where}"
        assert f["sent_mib"] <= FLOOR_FACTOR * f["floor_mib"], \
            (f"the migration sent {f['sent_mib']:.0f} MiB, more than "
             f"{FLOOR_FACTOR}x its floor of {f['floor_mib']:.0f} MiB (RAM "
             f"not free at migration start): free memory went over the "
             f"wire unhinted, or pages went more than once{where}")
    if res["config"]["balloon"] != "ours":
        return
    g0 = res.get("guest_hint_before") or {}
    g = res.get("guest_hint") or {}
    assert g.get("rounds", 0) > g0.get("rounds", 0), \
        f"the guest ran no hint round: before={g0} after={g}{where}"
    assert g.get("bytes_hinted", 0) > g0.get("bytes_hinted", 0), \
        f"the guest hinted nothing: before={g0} after={g}{where}"
    if mode:
        assert g.get("mode") == mode, \
            f"the guest hinted in mode {g.get('mode')!r}, not {mode!r}{where}"


# A driver that does not negotiate HINT_KEEP_WRITES (the in-tree one) gets
# stock's timing on our QEMU: no pre-send wait, and the hints of a round
# count only until the first bitmap sync after it started (the device drops
# them from then on: the sync has collected the writes the guest made after
# hinting, and a clear would lose them).  When the bulk stage is quick (a
# preallocated destination, hugepages, a fast host) every hint may come
# after that sync: the migration is then as good as unhinted, and what a
# test meant to show of hints did not happen.  That is a premise that
# failed, not the product: the run is made again, up to LATE_HINT_RUNS
# runs in all, the data of every one checked by the caller.
LATE_HINT_RUNS = 3


def hints_came_late(res):
    """Why every hint of `res` came too late to clear a page, or None:
    a driver on stock's timing whose round the source device (ours) took
    hints of, or none at all, and dropped them all as stale, none for a
    reason of its own (unaligned, not RAM, ...), which would be a fault."""
    cfg = res.get("config") or {}
    c = res.get("device_src") or {}
    if cfg.get("balloon") == "ours" or cfg.get("src") in STOCK_BINARIES \
            or not c or c.get("cleared-pages", 0):
        return None
    other = {k: v for k, v in c.items()
             if k.startswith("ignored-") and k != "ignored-stale" and v}
    if other:
        return None
    return (f"{c.get('ignored-stale', 0)} hints came after the first sync "
            f"and were dropped as stale, none cleared a page")


def again(n):
    """The suffix of the n-th run's name: none for the first."""
    return f"-run{n}" if n > 1 else ""


def migrate_hinted(run, mode=None, label=""):
    """run(n) makes the n-th run (1, 2, ...) of a hinted migration and
    checks its data; returns its record.  Made again while hints_came_late()
    (LATE_HINT_RUNS runs at most), then held to assert_hinted(res, mode,
    label).  Returns the last record."""
    for n in range(1, LATE_HINT_RUNS + 1):
        res = run(n)
        late = hints_came_late(res)
        if not late or n == LATE_HINT_RUNS:
            break
        print(f"    [{label}] run {n}: {late} (stock's timing races the "
              f"bulk stage): run again", flush=True)
    if n > 1:
        res["hint_runs"] = n
        print(f"    [{label}] {n} runs: the premise (hints cleared pages) "
              f"{'held' if not late else 'never held'}", flush=True)
    assert_hinted(res, mode, label if n == 1 else f"{label}, run {n} of {n}")
    return res


def keep_writes_mode():
    """The hint mode our driver must pick (auto) on a host that offers
    HINT_KEEP_WRITES: scan when its build for the guest kernel says the
    kernel is one scan is validated on (modinfo scan_validated, the line of
    guest/scan-validated-kernels Kbuild matched), else alloc (scan refused:
    a kernel the list lacks)."""
    need_ours()
    r = subprocess.run(["modinfo", "-F", "scan_validated", ours_driver_path()],
                       capture_output=True, text=True, check=True)
    return "scan" if r.stdout.strip() else "alloc"


def need_ours():
    """Our driver is built by `make images`: its absence is a build
    failure, not a missing environment."""
    path = ours_driver_path()
    assert os.path.exists(path), f"our driver is not built ({path})"


def our_qemu():
    """The patched QEMU (HB_OUR_QEMU overrides)."""
    path = os.environ.get("HB_OUR_QEMU") or env.OUR_QEMU
    assert os.path.isfile(path) and os.access(path, os.X_OK), \
        f"no QEMU at {path} (make qemu)"
    return path


def offers_keep_writes(binary):
    """Does this QEMU have the free-page-hint-keep-writes property?"""
    r = subprocess.run([binary, "-device", "virtio-balloon-pci,help"],
                       capture_output=True, text=True, check=False)
    return "free-page-hint-keep-writes" in r.stdout


def our_keep_writes_qemu():
    """Our QEMU of the stack, which must offer HINT_KEEP_WRITES: a build
    without it is a failure."""
    ours = our_qemu()
    assert offers_keep_writes(ours), \
        f"{ours} does not offer free-page-hint-keep-writes"
    return ours


def wait_for(pred, timeout=60, what="condition"):
    """pred()'s first true value, polled every 0.5 s; AssertionError
    naming `what` after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def wait_until(fetch, cond, timeout=60, what="condition"):
    """The first value of fetch() for which cond(value) holds (a falsy
    value never does), polled as wait_for() polls."""
    def ready():
        v = fetch()
        return v if v and cond(v) else None
    return wait_for(ready, timeout, what)


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, text=True, capture_output=True,
                          **kw)
