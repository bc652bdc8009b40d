# SPDX-License-Identifier: GPL-2.0
"""The benchmark matrix: configurations, workloads, guest sizes, vCPUs.

A cell is one (configuration, workload, guest MiB, vCPUs); each runs N
times.  Configurations:

  a  stock QEMU, in-tree driver, no hinting           (baseline without hints)
  b  stock QEMU, in-tree driver, free-page-hint=on    (today's upstream)
  c  stock QEMU, our driver, free-page-hint=on
  d  our QEMU,   our driver, free-page-hint=on
  c-alloc, d-alloc: c, d with the driver in alloc mode (hint_mode=alloc)
  r  stock QEMU, in-tree driver, no hinting, free-page-reporting=on
  d+r  d with free-page-reporting=on
  a+mf, d+mf: a, d with multifd, 2 channels (zero pages found by the
     multifd threads: zero-page-detection=multifd, QEMU's default)

With free page reporting on (r, d+r) a migration starts only once the
guest's reporting has settled (hb.vm.settle_reporting()), except in
"recent", whose point is that it has not run yet.

Workloads are the harness's (tests/hb/workloads.py prepare_guest): fresh,
stale, frag, churn, cache; "stale+bw" is stale with a memory-bandwidth
probe (hbwork bandwidth) running in the guest before and during the
migration; "churn-all" is churn with one churn process per vCPU;
"fresh+churn-all" is churn-all without the stale data (the writers alone,
nothing stale to hint); "stale-abc" is stale migrated A -> B -> C
(hinting on every hop), the data verified at C.  Against free page
reporting: "recent" is stale whose data is freed right before the
migration starts (reporting has not had its 2 s yet); "snapshot" is stale
saved to a file with mapped-ram and restored from it; "reuse" migrates
nothing: once reporting has settled, the guest writes the memory it freed
again, timed in the guest (what reporting's discarded pages cost a guest
that reuses them).
"""
import collections

from hb.workloads import DOWNTIME_LIMIT_MS, Scenario

CONFIGS = {
    # name: (qemu, balloon, hint, balloon_args, description)
    "a": ("stock", "intree", False, "", "stock QEMU, in-tree driver, no hinting"),
    "b": ("stock", "intree", True, "", "stock QEMU, in-tree driver, free-page-hint=on (upstream today)"),
    "c": ("stock", "ours", True, "", "stock QEMU, our driver, hinting"),
    "d": ("ours", "ours", True, "", "our QEMU, our driver, hinting"),
    "c-alloc": ("stock", "ours", True, "hint_mode=alloc", "c with the driver in alloc mode"),
    "d-alloc": ("ours", "ours", True, "hint_mode=alloc", "d with the driver in alloc mode"),
    "r": ("stock", "intree", False, "", "stock QEMU, in-tree driver, free-page-reporting=on, no hinting"),
    "d+r": ("ours", "ours", True, "", "d with free-page-reporting=on"),
    "a+mf": ("stock", "intree", False, "", "a with multifd, 2 channels"),
    "d+mf": ("ours", "ours", True, "", "d with multifd, 2 channels"),
}
# What a configuration sets besides the above: more balloon properties,
# multifd channels, and whether its migrations wait for free page
# reporting to settle first.
REPORTING = "free-page-reporting=on"
CONFIG_EXTRAS = {
    "r": {"device_props": REPORTING, "settle": True},
    "d+r": {"device_props": REPORTING, "settle": True},
    "a+mf": {"multifd_channels": 2},
    "d+mf": {"multifd_channels": 2},
}
CONFIG_ORDER = ["a", "b", "c", "d", "c-alloc", "d-alloc",
                "r", "d+r", "a+mf", "d+mf"]
WORKLOAD_ORDER = ["fresh", "stale", "frag", "churn", "churn-all",
                  "fresh+churn-all", "cache", "stale+bw", "stale-abc",
                  "recent", "snapshot", "reuse"]
# Repeats of the comparison with free page reporting and multifd (every
# cell of a workload, size and vCPU count that has r, d+r, a+mf or d+mf,
# and the recent, snapshot and reuse cells) when --repeats is not given:
# their point is time, which spreads more than bytes.
COMPARE_CONFIGS = ("r", "d+r", "a+mf", "d+mf")
COMPARE_WORKLOADS = ("recent", "snapshot", "reuse")
COMPARE_REPEATS = 5
REF = "b"
# workloads without stale data: nothing for the hints to skip
NOTHING_STALE = ("fresh", "fresh+churn-all")
SMP = 2          # the harness's default guest: 2 vCPUs

Cell = collections.namedtuple("Cell", "config workload mem_mib smp")
Cell.__new__.__defaults__ = (SMP,)


def extras(config):
    """CONFIG_EXTRAS of a configuration, {} if none."""
    return CONFIG_EXTRAS.get(config, {})


def settles(cell):
    """Whether the cell's migration waits for free page reporting to
    settle first: configurations with reporting, except in "recent"."""
    return bool(extras(cell.config).get("settle")) and \
        cell.workload != "recent"


def scenario(cell, seed, downtime_limit_ms=DOWNTIME_LIMIT_MS):
    """The harness Scenario of a cell.  "recent" is the harness's fresh:
    the bench writes its stale data after the guest is prepared and frees
    it right before the migration (engine.py)."""
    wl = cell.workload
    workload = {"stale+bw": "stale", "churn-all": "churn",
                "fresh+churn-all": "churn", "stale-abc": "stale",
                "recent": "fresh", "snapshot": "stale",
                "reuse": "stale"}.get(wl, wl)
    extra = {"stale_pct": 0} if wl == "fresh+churn-all" else {}
    per_vcpu = wl in ("churn-all", "fresh+churn-all")
    return Scenario(workload=workload, mem_mib=cell.mem_mib,
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
    # "cache" is not in the full matrix (run it with --cells)
    for cfg in "abd":
        cells.append(Cell(cfg, "stale+bw", 1024))
    # Against what is run instead of hinting: free page reporting (r),
    # both (d+r), multifd with its zero-page detection (a+mf, d+mf).
    # 8 GiB fits as above; a snapshot's file of a 8 GiB guest takes up
    # to 8 GB of build/tmp while it exists.
    for mem in (1024, 4096, 8192):
        for wl in ("fresh", "stale"):
            for cfg in COMPARE_CONFIGS:
                cells.append(Cell(cfg, wl, mem))
        for cfg in ("a", "b", "r", "d", "d+r"):
            cells.append(Cell(cfg, "recent", mem))
        for cfg in ("a", "b", "r", "d"):
            cells.append(Cell(cfg, "snapshot", mem))
        for cfg in ("a", "r", "d") + (("d+r",) if mem == 1024 else ()):
            cells.append(Cell(cfg, "reuse", mem))
    cells.append(Cell("r", "frag", 1024))
    # one vCPU
    for cfg in ("r", "d+r"):
        cells.append(Cell(cfg, "stale", 1024, 1))
    for cfg in ("a", "b", "r", "d", "d+r"):
        cells.append(Cell(cfg, "recent", 1024, 1))
    return cells


def quick_matrix():
    cells = []
    for wl in ("fresh", "stale"):
        for cfg in "abd":
            cells.append(Cell(cfg, wl, 1024))
    cells.append(Cell("r", "stale", 1024))
    for cfg in "bd":
        cells.append(Cell(cfg, "stale+bw", 1024))
    for cfg in ("r", "d"):
        cells.append(Cell(cfg, "recent", 1024))
    return cells


def compare_groups(cells):
    """The (workload, MiB, vCPUs) groups of `cells` that are part of the
    comparison with reporting and multifd (COMPARE_REPEATS)."""
    return {(c.workload, c.mem_mib, c.smp) for c in cells
            if c.config in COMPARE_CONFIGS
            or c.workload in COMPARE_WORKLOADS}


def repeats_of(cells, repeats, compare_repeats=None):
    """{cell: repeats}: `repeats` for each cell, at least compare_repeats
    for those in compare_groups() (not raised when None)."""
    groups = compare_groups(cells) if compare_repeats else set()
    return {c: max(repeats, compare_repeats)
            if (c.workload, c.mem_mib, c.smp) in groups else repeats
            for c in cells}


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
    """Orders of n items (their indices): the rows of a Williams design,
    n orders for an even n, 2n for an odd n (each row followed by its
    mirror).  Over all of them, every item runs in every position equally
    often and right after each other item equally often; the rotations of
    one order would leave each item after the same one for n repeats."""
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)] if n else [[]]
    if n % 2:
        return [o for row in rows for o in (row, row[::-1])]
    return rows


def run_plan(cells, repeats):
    """The order of the runs: (cell, repeat) pairs, round-robin over
    repeats (every cell gets its first run before any gets its second, so
    load from other jobs spreads over all cells, and a budget cut leaves a
    complete shorter matrix).  Within each repeat, the configurations of a
    workload, size and vCPU count run next to each other, in an order that
    changes from repeat to repeat (_balanced_orders()): a run takes over
    the host from the one before it (memory the host has not handed back
    yet makes a destination's first touch cheaper), so no configuration
    may keep following the same one.  `repeats`: a number for every cell,
    or {cell: number} (repeats_of()); a group runs as often as its cell
    with the most repeats."""
    groups = collections.OrderedDict()
    for c in cells:
        groups.setdefault((c.workload, c.mem_mib, c.smp), []).append(c)
    each = repeats if isinstance(repeats, dict) else {}
    n_of = {k: max(each.get(c, repeats if not each else 1) for c in g)
            for k, g in groups.items()}
    plan = []
    for r in range(max(n_of.values(), default=0)):
        for key, group in groups.items():
            if r >= n_of[key]:
                continue
            orders = _balanced_orders(len(group))
            plan += [(group[i], r) for i in orders[r % len(orders)]]
    return plan
