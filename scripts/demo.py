#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""make demo: migrate one guest with stale free memory five ways and print
the comparison.  TCG timings; bytes are the steadier figure.

The stack is the default one (QEMU 10.0, Linux 6.12), or the one HB_STACK
names.  Against Debian's QEMU of that version with the in-tree driver of
the same guest kernel: without hinting (a), with stock hinting (b), with
free page reporting (r, what operators run instead: the migration starts
once the guest's reporting has settled); ours (d, our QEMU and driver,
opted in to free-page-hint-keep-writes as a fleet of our hosts is) and
ours with reporting also on (d+r).  Each configuration migrates twice,
alternated: to a warm destination (the host's free memory resident, as
on two real hosts; the table) and to a cold one (as on a nested host
that takes back freed memory; one line under the table): hb.hostmem.

The summary goes to build/results/demo.json; with PUBLISH=1 also to
Documentation/results/demo.json, and README.md's result block is made
from it (scripts/results.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hb import env  # noqa: E402
from hb.env import BUILD, guest_kver, log, save_json  # noqa: E402
from hb.hostmem import DST_MEMORY  # noqa: E402
from hb.migration import migrate_once  # noqa: E402
from hb.vm import install_cleanup, settle_reporting  # noqa: E402
from hb.workloads import Scenario  # noqa: E402
import results  # noqa: E402  pylint: disable=wrong-import-position

REPORTING = "free-page-reporting=on"


def _settle(src, res):
    # Before the destination's memory is warmed: the settling takes
    # seconds, in which this host hands freed memory back to its own host.
    res["reporting_settle"] = settle_reporting(src)


CONFIGS = [
    ("a", "no hinting (Debian's QEMU, in-tree driver)",
     dict(src_bin=env.STOCK_QEMU, hint=False, balloon="intree")),
    ("b", "stock hinting (Debian's QEMU, in-tree driver)",
     dict(src_bin=env.STOCK_QEMU, hint=True, balloon="intree")),
    ("r", "free page reporting (Debian's QEMU, in-tree driver)",
     dict(src_bin=env.STOCK_QEMU, hint=False, balloon="intree",
          device_props=REPORTING, on_source_ready=_settle)),
    ("d", "ours (our QEMU, our driver)",
     dict(src_bin=env.OUR_QEMU, hint=True, balloon="ours")),
    ("d+r", "ours with free page reporting also on",
     dict(src_bin=env.OUR_QEMU, hint=True, balloon="ours",
          device_props=REPORTING, on_source_ready=_settle)),
]


def main():
    install_cleanup()
    log(f"stack: QEMU {env.STACK} (ours: {env.OUR_QEMU}; "
        f"stock: {env.STOCK_QEMU}), guest Linux {guest_kver()}")
    rows = []
    runs = [(c, mem) for c in CONFIGS for mem in DST_MEMORY]
    for i, ((key, name, kw), mem) in enumerate(runs, 1):
        log(f"demo {i}/{len(runs)}: {key}, {name}, {mem} destination: "
            "boot, fill 75% of 1 GiB with stale data, migrate, verify on "
            "the destination")
        res = migrate_once(scenario=Scenario("stale"), dst_memory=mem, **kw)
        rows.append((key, name, mem, res))
        save_json(os.path.join(BUILD, "results", f"demo-{i}.json"), res)
    summary = results.demo_summary(rows, guest_kver())
    save_json(os.path.join(BUILD, "results", "demo.json"), summary)
    print()
    print(results.demo_table(summary))
    print("\n(TCG timings on this machine; every run in "
          "build/results/demo-*.json, the summary in build/results/demo.json)")
    if os.environ.get("PUBLISH") == "1":
        results.publish_demo(summary)
        print("published: Documentation/results/demo.json, README.md")
    ours = [r for k, _, _, r in rows if k.startswith("d")]
    return 0 if all(r.get("ok") for r in ours) else 1


if __name__ == "__main__":
    sys.exit(main())
