# SPDX-License-Identifier: GPL-2.0
"""Reference measurements on stock parts (Debian's QEMU, the in-tree
driver): how often stock migrations lose data.  Their verdicts are recorded
and counted (summary: stock reference runs / stock runs not ok), never
asserted: these runs neither skip nor fail on what stock does.  A run
fails only if the harness reached no verdict at all.  Tagged `long` (make
long)."""
from hb.migration import PREALLOC_DST
from hb.testlib import (CURRENT, migrate, record_reference, reference, tag,
                        timeout)
from hb.workloads import Scenario

RUNS = 8


@reference
@tag("migrate", "long", "reference")
@timeout(4 * 3600)
def test_stock_reference_runs():
    """Without hinting (1 GiB stale), then with hinting: even tries 2 GiB
    at full speed into a preallocated destination, odd tries 1 GiB with a
    throttled start (time to hint first)."""
    runs = [("stock-nohint-stale", {}, Scenario("stale"))]
    for i in range(RUNS):
        fast = i % 2 == 0
        runs.append((f"stock-hint-{i}",
                     dict(hint=True,
                          dst_args=PREALLOC_DST if fast else ()),
                     Scenario("stale", mem_mib=2048 if fast else 1024,
                              throttle_start_s=0.0 if fast else 2.0)))
    for label, kw, sc in runs:
        res = migrate(label, scenario=sc, **kw)
        record_reference(res, label)
    print(f"    stock reference: {CURRENT.facts['stock_losses']} of "
          f"{CURRENT.facts['stock_runs']} runs not ok")
