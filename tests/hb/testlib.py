# SPDX-License-Identifier: GPL-2.0
"""Small helpers shared by the test files: tags, skips, facts, migrations."""
import json
import os
import subprocess

from . import harness
from .harness import BUILD, TOP, save_json  # noqa: F401  (re-exported)

REPEAT = int(os.environ.get("REPEAT", "1"))


class Skip(Exception):
    """The test cannot run here; says why."""


def tag(*tags):
    def deco(f):
        f.tags = tuple(tags)
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
    tot["failures"] = sum(r["verdict"] == "failed" for r in results)
    return tot


def summary_lines(s):
    return [
        f"summary: migrations run={s.get('migrations', 0)} "
        f"guest data verified={s.get('bytes_verified', 0) / 2**20:.0f} MiB "
        f"faults injected={s.get('faults', 0)} "
        f"bad inputs tried={s.get('bad_inputs', 0)} "
        f"failures={s.get('failures', 0)}",
        f"summary: stock reference runs={s.get('stock_runs', 0)} "
        f"stock runs that lost data or oopsed={s.get('stock_losses', 0)}",
    ]


def qemu_bin(which):
    return {"stock": harness.STOCK_QEMU, "ours": harness.OUR_QEMU}[which]


def have_ours_driver():
    return os.path.exists(os.path.join(TOP, "guest", "virtio_balloon.ko"))


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


def assert_intact(res, label=""):
    """Every run of our stack must pass: completed, running, data intact, no
    kernel error on the destination."""
    where = f" [{label}] (details: {res.get('workdir')})"
    assert res.get("status") == "completed", \
        f"migration {res.get('status')}: {res.get('error')}{where}"
    assert res.get("dst_status") == "running", f"destination not running{where}"
    assert not res.get("kernel_errors"), \
        f"destination kernel errors: {res['kernel_errors'][:5]}{where}"
    assert res.get("data_intact") is True, \
        f"guest data not intact: {res.get('verify') or res.get('error')}{where}"


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, text=True, capture_output=True,
                          **kw)
