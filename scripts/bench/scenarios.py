# SPDX-License-Identifier: GPL-2.0
"""The benchmark matrix: configurations, workloads, guest sizes, vCPUs.

A cell is one (configuration, workload, guest MiB, vCPUs); each runs N
times.  Configurations:

  a  stock QEMU, in-tree driver, no hinting           (baseline without hints)
  b  stock QEMU, in-tree driver, free-page-hint=on    (today's upstream)
  c  stock QEMU, our driver, free-page-hint=on
  d  our QEMU,   our driver, free-page-hint=on
  c-alloc, d-alloc: c, d with the driver in alloc mode (hint_mode=alloc)
  c+drop, d+drop: c, d with the driver's drop_cache knob (hint_drop_cache=1)

Workloads are the harness's (tests/hb/harness.py prepare_guest): fresh,
stale, frag, churn, cache; "stale+bw" is stale with a memory-bandwidth
probe (hbwork bandwidth) running in the guest before and during the
migration; "churn-all" is churn with one churn process per vCPU;
"fresh+churn-all" is churn-all without the stale data (the writers alone,
nothing stale to hint); "stale-abc" is stale migrated A -> B -> C
(hinting on every hop), the data verified at C.
"""
import collections

from hb import harness

CONFIGS = {
    # name: (qemu, balloon, hint, balloon_args, description)
    "a": ("stock", "intree", False, "", "stock QEMU, in-tree driver, no hinting"),
    "b": ("stock", "intree", True, "", "stock QEMU, in-tree driver, free-page-hint=on (upstream today)"),
    "c": ("stock", "ours", True, "", "stock QEMU, our driver, hinting"),
    "d": ("ours", "ours", True, "", "our QEMU, our driver, hinting"),
    "c-alloc": ("stock", "ours", True, "hint_mode=alloc", "c with the driver in alloc mode"),
    "d-alloc": ("ours", "ours", True, "hint_mode=alloc", "d with the driver in alloc mode"),
    "c+drop": ("stock", "ours", True, "hint_drop_cache=1", "c with drop_cache=1"),
    "d+drop": ("ours", "ours", True, "hint_drop_cache=1", "d with drop_cache=1"),
}
CONFIG_ORDER = ["a", "b", "c", "d", "c-alloc", "d-alloc", "c+drop", "d+drop"]
WORKLOAD_ORDER = ["fresh", "stale", "frag", "churn", "churn-all",
                  "fresh+churn-all", "cache", "stale+bw", "stale-abc"]
REF = "b"
# workloads without stale data: nothing for the hints to skip
NOTHING_STALE = ("fresh", "fresh+churn-all")
SMP = 2          # the harness's default guest: 2 vCPUs

Cell = collections.namedtuple("Cell", "config workload mem_mib smp")
Cell.__new__.__defaults__ = (SMP,)


def scenario(cell, seed, downtime_limit_ms=harness.DOWNTIME_LIMIT_MS):
    """The harness Scenario of a cell."""
    wl = cell.workload
    workload = {"stale+bw": "stale", "churn-all": "churn",
                "fresh+churn-all": "churn", "stale-abc": "stale"}.get(wl, wl)
    extra = {"stale_pct": 0} if wl == "fresh+churn-all" else {}
    per_vcpu = wl in ("churn-all", "fresh+churn-all")
    return harness.Scenario(workload=workload, mem_mib=cell.mem_mib,
                            seed=seed, downtime_limit_ms=downtime_limit_ms,
                            smp=cell.smp,
                            churn_procs=cell.smp if per_vcpu else 1,
                            hops=2 if wl == "stale-abc" else 1, **extra)


def full_matrix():
    """The full matrix (see Documentation/benchmarks.md for its run time
    on 2 cores)."""
    cells = []
    for mem in (1024, 2048, 4096):
        for wl in ("fresh", "stale"):
            for cfg in ("abcd" if mem < 4096 else "abd"):
                cells.append(Cell(cfg, wl, mem))
    # 8 GiB: source and destination take 16 GiB of host RAM
    for wl in ("fresh", "stale"):
        for cfg in "abd":
            cells.append(Cell(cfg, wl, 8192))
    for wl in ("frag", "churn"):
        for cfg in "abcd":
            cells.append(Cell(cfg, wl, 1024))
    # churn writing on every vCPU, and the same without stale data
    for mem in (1024, 4096):
        for wl in ("churn-all", "fresh+churn-all"):
            for cfg in "abd":
                cells.append(Cell(cfg, wl, mem))
    # A -> B -> C
    for cfg in "abd":
        cells.append(Cell(cfg, "stale-abc", 1024))
    # one vCPU against the default two
    for cfg in "abd":
        cells.append(Cell(cfg, "stale", 1024, 1))
    # the driver's two hint modes side by side
    for wl in ("fresh", "stale", "frag"):
        cells.append(Cell("d-alloc", wl, 1024))
    for wl in ("stale", "frag"):
        cells.append(Cell("c-alloc", wl, 1024))
    # "cache" is not in the full matrix: the test guest has no disk page
    # cache, so c+drop/d+drop cannot show a benefit (run it with --cells)
    for cfg in "abd":
        cells.append(Cell(cfg, "stale+bw", 1024))
    return cells


def quick_matrix():
    cells = []
    for wl in ("fresh", "stale"):
        for cfg in "abd":
            cells.append(Cell(cfg, wl, 1024))
    for cfg in "bd":
        cells.append(Cell(cfg, "stale+bw", 1024))
    return cells


def parse_cells(spec):
    """'CFGS:WORKLOADS:MEMS[:SMPS]' (each part optional, '*' = all; MEMS
    default 1024, SMPS default the harness's 2); several such specs
    separated by ';' add up."""
    if ";" in spec:
        cells = []
        for part in spec.split(";"):
            cells += [c for c in parse_cells(part) if c not in cells]
        return cells
    cfgs, wls, mems, smps = (spec.split(":") + ["*", "*", "*"])[:4]
    cfgs = CONFIG_ORDER if cfgs in ("", "*") else cfgs.split(",")
    wls = WORKLOAD_ORDER if wls in ("", "*") else wls.split(",")
    mems = [1024] if mems in ("", "*") else [int(m) for m in mems.split(",")]
    smps = [SMP] if smps in ("", "*") else [int(n) for n in smps.split(",")]
    for c in cfgs:
        if c not in CONFIGS:
            raise ValueError(f"unknown configuration {c!r}")
    for w in wls:
        if w not in WORKLOAD_ORDER:
            raise ValueError(f"unknown workload {w!r}")
    return [Cell(c, w, m, n) for n in smps for m in mems for w in wls
            for c in cfgs]


def _balanced_orders(n):
    """2n orders of n items (their indices): the n rotations of the given
    order and the n rotations of its reverse.  Over the 2n, every item
    runs in every position equally often, and runs right after each of its
    neighbours in the given order as often as right before it."""
    fwd = list(range(n))
    rev = fwd[::-1]
    return ([fwd[k:] + fwd[:k] for k in range(n)] +
            [rev[k:] + rev[:k] for k in range(n)])


def run_plan(cells, repeats):
    """The order of the runs: (cell, repeat) pairs, round-robin over
    repeats (every cell gets its first run before any gets its second, so
    load from other jobs spreads over all cells, and a budget cut leaves a
    complete shorter matrix).  Within each repeat, the configurations of a
    workload, size and vCPU count run next to each other, in an order that
    changes from repeat to repeat (_balanced_orders()): a run takes over
    the host from the one before it (memory the host has not handed back
    yet makes a destination's first touch cheaper), so no configuration
    may always follow the same one."""
    groups = collections.OrderedDict()
    for c in cells:
        groups.setdefault((c.workload, c.mem_mib, c.smp), []).append(c)
    plan = []
    for r in range(repeats):
        for group in groups.values():
            orders = _balanced_orders(len(group))
            plan += [(group[i], r) for i in orders[r % len(orders)]]
    return plan
