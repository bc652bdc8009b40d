# SPDX-License-Identifier: GPL-2.0
"""Small helpers shared by the test files: tags, skips, facts, migrations."""
import json
import os
import subprocess
import time

from . import harness
from .harness import (BUILD, TOP, drop_workdir,  # noqa: F401  (re-exported)
                      save_json)

REPEAT = int(os.environ.get("REPEAT", "1"))


class Skip(Exception):
    """The environment lacks something the test needs (never raised for a
    build or product failure); says what."""


def tag(*tags):
    def deco(f):
        f.tags = tuple(tags)
        return f
    return deco


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


def summary(results):
    tot = {}
    for r in results:
        for k, v in r.get("facts", {}).items():
            if isinstance(v, int):
                tot[k] = tot.get(k, 0) + v
    tot["failures"] = sum(r["verdict"] in ("failed", "timeout")
                         for r in results)
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
    return {"stock": harness.STOCK_QEMU, "ours": harness.OUR_QEMU}[which]


def ours_driver_path():
    """Our driver as the test guests load it: the test build in the image
    of the guest kernel (`make images`)."""
    return os.path.join(BUILD, f"mod-{harness.guest_kver()}", "guest",
                        "virtio_balloon.ko")


def have_ours_driver():
    return os.path.exists(ours_driver_path())


def log_result(res, label):
    d = os.path.join(BUILD, "results", "runs")
    os.makedirs(d, exist_ok=True)
    n = len(os.listdir(d))
    save_json(os.path.join(d, f"{n:04d}-{label}.json"), res)
    brief = {k: res.get(k) for k in ("status", "transferred_mb", "total_ms",
                                     "downtime_ms", "data_intact")}
    brief["kernel_errors"] = len(res.get("kernel_errors") or [])
    if res.get("error"):
        brief["error"] = res["error"][:200]
    print(f"    {label}: {json.dumps(brief)}", flush=True)


def migrate(label, **kw):
    """One migration; counts it; returns the result dict."""
    res = harness.migrate_once(**kw)
    CURRENT.add("migrations")
    CURRENT.add("bytes_verified",
                (res.get("verify") or {}).get("bytes_verified", 0)
                if res.get("ok") else 0)
    log_result(res, label)
    return res


def record_reference(res, label):
    """A stock reference run: count it, count it as a loss unless it was ok
    (completed, data intact, no kernel error), and append its verdict to
    build/results/reference.json.  Never asserts what stock did."""
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


def assert_hinted(res, mode=None, label=""):
    """The migration hinted: the source device of every hop cleared pages
    from the dirty bitmap because of hints and, with our driver, the guest
    ran a new round in `mode` ("scan" or "alloc"; None: either)."""
    where = f" [{label}] (details: {res.get('workdir')})"
    c = res.get("device_src") or {}
    assert c.get("cleared-pages", 0) > 0, \
        f"the source device cleared no page because of hints: {c}{where}"
    for i, h in enumerate(res.get("hops") or [], 2):
        hc = h.get("device_src") or {}
        assert hc.get("cleared-pages", 0) > 0, \
            f"hop {i}: the source device cleared no page: {hc}{where}"
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


def need_ours():
    """Our driver is built by `make images`: its absence is a build
    failure, not a missing environment."""
    path = ours_driver_path()
    assert os.path.exists(path), f"our driver is not built ({path})"


def our_qemu():
    """The patched QEMU (HB_OUR_QEMU overrides)."""
    path = os.environ.get("HB_OUR_QEMU") or harness.OUR_QEMU
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


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, text=True, capture_output=True,
                          **kw)
