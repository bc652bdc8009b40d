#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""make soak, the one soak: the data-loss scenarios of test_30_dataloss on
our QEMU, with the in-tree driver and ours (scan and alloc modes), REPEAT
times each (default 20), round-robin so that every scenario advances
together.  Each run is held to what the test holds it to: completed, data
intact, no kernel or QEMU error (testlib.assert_intact), and on our QEMU
hinted in the driver's mode (testlib.assert_hinted).  The tally, with the
reason of every failure, is written to build/soak/soak.json after every
run.  Ends with "N passed, N failed".

DRIVERS=intree,ours,ours_alloc picks the drivers (workloads.DATALOSS_DRIVERS);
QEMU=stock runs the same on Debian's QEMU (a reference: stock QEMU has the
write-tracking bug our series fixes), writing build/soak/soak-stock.json.
DST_PREALLOC=1 starts every destination with -mem-prealloc: the load no
longer waits for the destination's page faults, so a 1 GiB migration takes
~70 ms instead of ~450 ms and the hint round overlaps RAM sending more
tightly (writes -prealloc.json)."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests"))
from hb import env  # noqa: E402
from hb.env import BUILD, log, save_json  # noqa: E402
from hb.migration import PREALLOC_DST, migrate_once  # noqa: E402
from hb.testlib import assert_hinted, assert_intact  # noqa: E402
from hb.vm import install_cleanup  # noqa: E402
from hb.workloads import (DATALOSS_DRIVERS, DATALOSS_MODES,  # noqa: E402
                          DATALOSS_SCENARIOS, Scenario)


def main():
    install_cleanup()
    repeat = int(os.environ.get("REPEAT", "20"))
    drivers = os.environ.get("DRIVERS", ",".join(DATALOSS_DRIVERS)).split(",")
    cells = [(d, s) for d in drivers for s in DATALOSS_SCENARIOS]
    tally = {f"{d}/{s}": {"ok": 0, "failed": 0, "runs": []} for d, s in cells}
    stock = os.environ.get("QEMU", "ours") == "stock"
    qemu = env.STOCK_QEMU if stock else env.OUR_QEMU
    prealloc = os.environ.get("DST_PREALLOC") == "1"
    dst_args = list(PREALLOC_DST) if prealloc else []
    out = os.path.join(BUILD, "soak",
                       ("soak-stock" if stock else "soak") +
                       ("-prealloc" if prealloc else "") + ".json")
    t0 = time.time()
    for i in range(repeat):
        for d, s in cells:
            key = f"{d}/{s}"
            balloon, args = DATALOSS_DRIVERS[d]
            res = migrate_once(
                src_bin=qemu, balloon=balloon, hint=True,
                balloon_args=args, dst_args=dst_args,
                scenario=Scenario(**DATALOSS_SCENARIOS[s]))
            try:
                assert_intact(res, key)
                if not stock:
                    assert_hinted(res, DATALOSS_MODES[d], key)
                good = True
            except AssertionError as exc:
                good = False
                res["error"] = str(exc)[:500]
            tally[key]["ok" if good else "failed"] += 1
            tally[key]["runs"].append({
                k: res.get(k) for k in ("ok", "transferred_mb", "total_ms",
                                        "downtime_ms", "data_intact",
                                        "kernel_errors", "error", "workdir")})
            done = sum(v["ok"] + v["failed"] for v in tally.values())
            log(f"soak {i + 1}/{repeat} {key}: "
                f"{'ok' if good else 'FAILED'} "
                f"{res.get('transferred_mb')} MB; {done} runs, "
                f"{sum(v['failed'] for v in tally.values())} failed, "
                f"{time.time() - t0:.0f}s")
            save_json(out, {"repeat": repeat, "qemu": qemu,
                            "dst_args": dst_args, "tally": tally,
                            "seconds": round(time.time() - t0)})
    for key, v in tally.items():
        print(f"{key}: {v['ok']} of {v['ok'] + v['failed']} intact")
    passed = sum(v["ok"] for v in tally.values())
    failed = sum(v["failed"] for v in tally.values())
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
