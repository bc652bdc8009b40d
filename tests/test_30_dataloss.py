# SPDX-License-Identifier: GPL-2.0
"""The data-loss scenarios on our QEMU, with the in-tree driver and ours (in
its scan and alloc modes): stale free memory at normal speed, a throttled
start (time to hint before the bulk stage), and memory churn during
migration.  Every run must complete with data intact and no kernel error on
the destination.  REPEAT=N repeats each (the soak run uses 20)."""
from hb import harness
from hb.harness import DATALOSS_DRIVERS, DATALOSS_SCENARIOS
from hb.testlib import (REPEAT, Skip, assert_intact, have_ours_driver,
                        migrate, qemu_bin, tag)


def _run(driver, name):
    balloon, args = DATALOSS_DRIVERS[driver]
    if balloon == "ours" and not have_ours_driver():
        raise Skip("our driver is not built")
    for i in range(REPEAT):
        res = migrate(f"ours-{driver}-{name}-{i}", src_bin=qemu_bin("ours"),
                      balloon=balloon, hint=True, balloon_args=args,
                      scenario=harness.Scenario(**DATALOSS_SCENARIOS[name]))
        assert_intact(res, f"{driver}/{name} run {i + 1}/{REPEAT}")


def _make(driver, name):
    @tag("dataloss", "soak")
    def t():
        _run(driver, name)
    t.__name__ = f"test_our_qemu_{driver}_driver_{name}"
    return t


for _d in DATALOSS_DRIVERS:
    for _n in DATALOSS_SCENARIOS:
        _t = _make(_d, _n)
        globals()[_t.__name__] = _t
