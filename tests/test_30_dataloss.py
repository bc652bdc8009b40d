# SPDX-License-Identifier: GPL-2.0
"""The data-loss scenarios on our QEMU, with the in-tree driver and ours (in
its scan and alloc modes): stale free memory at normal speed, a throttled
start (time to hint before the bulk stage), and memory churn during
migration.  Every run must complete with data intact and no kernel error on
the destination.  `make soak` (scripts/soak.py) runs the same scenarios
and checks many times over.  Each also runs on Debian 13's Linux 7.3 and
7.3-rt guests (each_kernel), the churn ones and A -> B -> C on 7.3-cloud;
on a kernel where scan is refused (one guest/scan-validated-kernels
lacks) our driver's default is alloc."""
from hb.migration import PREALLOC_DST
from hb.testlib import (again, assert_hinted, assert_intact,
                        keep_writes_mode, migrate, migrate_hinted, need_ours,
                        our_qemu, tag, timeout)
from hb.workloads import (DATALOSS_DRIVERS, DATALOSS_MODES,
                          DATALOSS_SCENARIOS, Scenario)


def _mode(driver):
    """The mode the rounds of `driver` must run in on our QEMU."""
    if DATALOSS_MODES[driver] == "scan":
        return keep_writes_mode()
    return DATALOSS_MODES[driver]


def _run(driver, name, dst_args=(), label="", scenario=None):
    """A hinted migration of scenario `name` (DATALOSS_SCENARIOS, or the
    Scenario arguments `scenario`) with `driver` on our QEMU, its data and
    hints checked."""
    balloon, args = DATALOSS_DRIVERS[driver]
    if balloon == "ours":
        need_ours()
    what = f"{driver}/{name}{label}"
    scenario = scenario or DATALOSS_SCENARIOS[name]

    def run(n):
        res = migrate(f"ours-{driver}-{name}{label}" + again(n),
                      src_bin=our_qemu(), balloon=balloon, hint=True,
                      balloon_args=args, dst_args=dst_args,
                      scenario=Scenario(**scenario))
        assert_intact(res, what)
        return res
    res = migrate_hinted(run, _mode(driver), what)
    if dst_args:
        # The regime this test is for: the load did not wait for the
        # destination's page faults (~70 ms instead of ~450 ms at 1 GiB).
        ram = res.get("dst_ram") or {}
        assert ram.get("rss_kb", 0) >= res["config"]["mem_mib"] << 10, \
            f"destination RAM not preallocated: {ram}"
    return res


# On the debug kernel (make debug-check): a migration with churn in each
# mode
DEBUG_KERNEL_RUNS = (("ours", "churn"), ("ours_alloc", "churn"))
# On QEMU 10.2, the upstream base: our driver at normal speed and under
# churn, the in-tree one at normal speed
UPSTREAM_RUNS = (("ours", "normal"), ("ours", "churn"), ("intree", "normal"))


def _make(driver, name):
    @tag("dataloss", "each_stack", "each_kernel",
         *(("cloud_kernel",) if name == "normal" else ()),
         *(("debug_kernel",) if (driver, name) in DEBUG_KERNEL_RUNS
           else ()),
         *(("upstream_base",) if (driver, name) in UPSTREAM_RUNS else ()))
    @timeout(900)
    def t():
        _run(driver, name)
    t.__name__ = f"test_our_qemu_{driver}_driver_{name}"
    return t


for _d in DATALOSS_DRIVERS:
    for _n in DATALOSS_SCENARIOS:
        _t = _make(_d, _n)
        globals()[_t.__name__] = _t


@tag("dataloss", "each_stack", "each_kernel")
@timeout(1800)
def test_our_qemu_churn_into_preallocated_destination():
    """Churn during a migration whose destination has its RAM preallocated
    (-mem-prealloc): the load no longer waits for page faults, so the
    guest's hint round, the pre-send wait and the bulk stage overlap far
    more tightly than in the other tests.  Both drivers."""
    for driver in ("ours", "intree"):
        _run(driver, "churn", dst_args=PREALLOC_DST, label="-prealloc")


@tag("dataloss", "each_stack", "each_kernel")
def test_our_qemu_churn_on_every_vcpu():
    """Churn on both vCPUs of a 2-vCPU guest (one churn process each, the
    scheduler spreads them), our driver and the in-tree one."""
    for driver in ("ours", "intree"):
        res = _run(driver, "churn", label="-smp2",
                   scenario={"workload": "churn", "smp": 2,
                             "churn_procs": 2})
        assert res["verify"]["churn"]["procs"] == 2, res["verify"]["churn"]


@tag("dataloss", "each_stack", "each_kernel", "cloud_kernel")
def test_our_qemu_a_to_b_to_c():
    """A -> B -> C with hinting on every hop (each hop's source device
    clears hinted pages), the data verified at C."""
    need_ours()
    res = migrate("ours-ours-abc", src_bin=our_qemu(), balloon="ours",
                  hint=True, scenario=Scenario("stale", hops=2))
    assert_intact(res, "A -> B -> C")
    assert_hinted(res, keep_writes_mode(), "A -> B -> C")
    assert len(res["hops"]) == 1, res["hops"]
    g0, g = res["guest_hint_before"], res["guest_hint"]
    assert g["rounds"] - g0.get("rounds", 0) >= 2, (g0, g)
