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
  b11, r11: b, r on Debian's newest QEMU, 11.1 (trixie-backports, run in
     the Debian 13 root: env.STOCK_QEMU_11), as reference rows

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

Two more dimensions name every cell:

  destination memory  warm: the host's free memory is made resident right
      before the destination starts (touched and freed outside QEMU,
      hb.hostmem), as on two real hosts; cold: left as the run before left
      it, as on a nested host whose own host takes freed memory back.
      Default both, each configuration's warm and cold runs interleaved in
      the run order (run_plan()).  "reuse" has no destination: cold only.
  link  the migration's max-bandwidth: 1, 10 or 25 Gbit/s (Gbit * 1e9 / 8
      bytes/s), or unlimited (10 GiB/s, more than a migration here
      reaches).  The quick run and --cells: unlimited unless --links says
      otherwise; the full matrix: every link for its link cells
      (link_matrix()), unlimited for the rest.
"""
import collections

from hb.hostmem import DST_MEMORY
from hb.workloads import DOWNTIME_LIMIT_MS, Scenario

CONFIGS = {
    # name: (qemu, balloon, hint, balloon_args, description)
    "a": ("stock", "intree", False, "", "stock QEMU, in-tree driver, no hinting"),
    "b": ("stock", "intree", True, "", "stock QEMU, in-tree driver, free-page-hint=on (upstream today)"),
    "c": ("stock", "ours", True, "", "stock QEMU, our driver, hinting"),
    "d": ("ours", "ours", True, "", "our QEMU, our driver, hinting"),
    "c-alloc": ("stock", "ours", True, "hint_mode=alloc", "c with the driver in alloc mode"),
    "c-kick1": ("stock", "ours", True, "hint_blocks_per_chain=1 hint_chains_per_kick=1", "c with one block per chain and a kick per chain, as the in-tree driver sends them"),
    "c-res0": ("stock", "ours", True, "hint_reserve_kb=0", "c with reserve_kb 0: alloc leaves each zone its high watermark and lowmem reserve only"),
    "d-alloc": ("ours", "ours", True, "hint_mode=alloc", "d with the driver in alloc mode"),
    "r": ("stock", "intree", False, "", "stock QEMU, in-tree driver, free-page-reporting=on, no hinting"),
    "d+r": ("ours", "ours", True, "", "d with free-page-reporting=on"),
    "a+mf": ("stock", "intree", False, "", "a with multifd, 2 channels"),
    "d+mf": ("ours", "ours", True, "", "d with multifd, 2 channels"),
    "b11": ("stock11", "intree", True, "", "b on Debian's QEMU 11.1"),
    "r11": ("stock11", "intree", False, "", "r on Debian's QEMU 11.1"),
}
# What a configuration sets besides the above: more balloon properties,
# multifd channels, and whether its migrations wait for free page
# reporting to settle first.
REPORTING = "free-page-reporting=on"
CONFIG_EXTRAS = {
    "r": {"device_props": REPORTING, "settle": True},
    "d+r": {"device_props": REPORTING, "settle": True},
    "r11": {"device_props": REPORTING, "settle": True},
    "a+mf": {"multifd_channels": 2},
    "d+mf": {"multifd_channels": 2},
}
CONFIG_ORDER = ["a", "b", "c", "d", "c-alloc", "c-res0", "c-kick1", "d-alloc",
                "r", "d+r", "a+mf", "d+mf", "b11", "r11"]
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

# Link speeds in Gbit/s; None: unlimited.
LINKS = (1, 10, 25, None)
# Workloads without a destination: they run cold (nothing warmed), unlimited.
NO_DESTINATION = ("reuse",)

Cell = collections.namedtuple(
    "Cell", "config workload mem_mib smp dst_memory link_gbit")
Cell.__new__.__defaults__ = (SMP, "cold", None)


def link_bytes(gbit):
    """max-bandwidth in bytes/s of a link of gbit Gbit/s; None: unlimited
    (migrate_once()'s own)."""
    return None if gbit is None else int(gbit * 1e9 / 8)


def link_name(gbit):
    return "unlimited" if gbit is None else f"{gbit:g} Gbit/s"


def link_order(gbit):
    """Sort key: slowest link first, unlimited last."""
    return (gbit is None, gbit or 0)


def parse_links(spec):
    """'1,10,25,unlimited' -> [1, 10, 25, None]."""
    out = []
    for part in spec.split(","):
        part = part.strip().lower()
        if part in ("unlimited", "none", "inf"):
            g = None
        else:
            try:
                g = float(part.removesuffix("g").removesuffix("gbit"))
            except ValueError:
                raise ValueError(f"link {part!r}: Gbit/s (e.g. 1, 10, 25) "
                                 "or 'unlimited'") from None
            if not 0.001 <= g <= 1000:
                raise ValueError(f"link {part!r}: 0.001..1000 Gbit/s")
            g = int(g) if g == int(g) else g
        if g not in out:
            out.append(g)
    if not out:
        raise ValueError("no link given")
    return out


def parse_dst_memory(spec):
    """'warm,cold' -> ["warm", "cold"]."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        if part not in DST_MEMORY:
            raise ValueError(f"destination memory {part!r}: one of "
                             f"{', '.join(DST_MEMORY)}")
        if part not in out:
            out.append(part)
    return out


def expand(cells, dst_memory=DST_MEMORY, links=(None,)):
    """Every cell at every destination memory state and link, except
    those without a destination (cold, unlimited only); duplicates
    dropped.  Cells are (config, workload, MiB, vCPUs) or full Cells
    (their own state and link replaced)."""
    out = []
    for c in cells:
        c = Cell(*c[:4])
        if c.workload in NO_DESTINATION:
            combos = [("cold", None)]
        else:
            combos = [(m, g) for g in links for m in dst_memory]
        for m, g in combos:
            x = c._replace(dst_memory=m, link_gbit=g)
            if x not in out:
                out.append(x)
    return out


def cell_name(cell):
    """'d stale 1 GiB warm 10 Gbit/s' (vCPUs when not the default)."""
    return (f"{cell.config} {cell.workload} {cell.mem_mib >> 10} GiB"
            + ("" if cell.smp == SMP else f" {cell.smp} vCPU")
            + f" {cell.dst_memory} {link_name(cell.link_gbit)}")


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


def link_matrix():
    """The cells measured at every link speed: a, b, r, d and d+r on
    stale and recent, and a, r, d and d+r on fresh (a's fresh is the
    floor: the same size and live data, nothing to skip), at 1, 4 and
    8 GiB, with 1 and 2 vCPUs."""
    cells = []
    for mem in (1024, 4096, 8192):
        for smp in (1, 2):
            for wl in ("fresh", "stale", "recent"):
                for cfg in (("a", "r", "d", "d+r") if wl == "fresh" else
                            ("a", "b", "r", "d", "d+r")):
                    cells.append(Cell(cfg, wl, mem, smp))
    return cells


def full_matrix(dst_memory=DST_MEMORY, links=LINKS):
    """The full matrix: base_matrix() at an unlimited link, link_matrix()
    at every link of `links`, each at every state of `dst_memory` (see
    Documentation/benchmarks.md for its run time on 2 cores)."""
    return expand(base_matrix(), dst_memory) + [
        c for c in expand(link_matrix(), dst_memory, links)
        if c not in expand(base_matrix(), dst_memory)]


def base_matrix():
    """The cells of the full matrix, without state or link."""
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


def quick_matrix(dst_memory=DST_MEMORY, links=(None,)):
    """1 GiB: a, b, d and r on fresh and stale, r and d on recent, b and
    d on stale+bw; every cell at each state of dst_memory and link."""
    cells = []
    for wl in ("fresh", "stale"):
        for cfg in ("a", "b", "d", "r"):
            cells.append(Cell(cfg, wl, 1024))
    for cfg in "bd":
        cells.append(Cell(cfg, "stale+bw", 1024))
    for cfg in ("r", "d"):
        cells.append(Cell(cfg, "recent", 1024))
    return expand(cells, dst_memory, links)


def group_key(cell):
    """The cells whose runs alternate in run_plan(): one workload, size,
    vCPU count and link, every configuration and destination state."""
    return (cell.workload, cell.mem_mib, cell.smp, cell.link_gbit)


def compare_groups(cells):
    """The groups (group_key()) of `cells` that are part of the
    comparison with reporting and multifd (COMPARE_REPEATS)."""
    return {group_key(c) for c in cells
            if c.config in COMPARE_CONFIGS
            or c.workload in COMPARE_WORKLOADS}


def repeats_of(cells, repeats, compare_repeats=None):
    """{cell: repeats}: `repeats` for each cell, at least compare_repeats
    for those in compare_groups() (not raised when None)."""
    groups = compare_groups(cells) if compare_repeats else set()
    return {c: max(repeats, compare_repeats)
            if group_key(c) in groups else repeats
            for c in cells}


def parse_cells(spec, dst_memory=DST_MEMORY, links=(None,)):
    """'CFGS:WORKLOADS:MEMS[:SMPS[:DSTS[:LINKS]]]' (each part optional,
    '*' = all configurations/workloads, MEMS default 1024, SMPS default
    the harness's 2, DSTS default `dst_memory` (warm,cold), LINKS default
    `links` (Gbit/s or 'unlimited'), e.g.
    'd,r:stale:1024:2:warm,cold:unlimited,10'); several such specs
    separated by ';' add up."""
    if ";" in spec:
        cells = []
        for part in spec.split(";"):
            cells += [c for c in parse_cells(part, dst_memory, links)
                      if c not in cells]
        return cells
    parts = spec.split(":")
    if len(parts) > 6:
        raise ValueError(f"{spec!r}: at most 6 parts, "
                         "CFGS:WORKLOADS:MEMS:SMPS:DSTS:LINKS")
    cfgs, wls, mems, smps, dsts, lks = (parts + ["*"] * 6)[:6]
    cfgs = CONFIG_ORDER if cfgs in ("", "*") else cfgs.split(",")
    wls = WORKLOAD_ORDER if wls in ("", "*") else wls.split(",")
    try:
        mems = [1024] if mems in ("", "*") else [int(m) for m in
                                                 mems.split(",")]
        smps = [SMP] if smps in ("", "*") else [int(n) for n in
                                                smps.split(",")]
    except ValueError:
        raise ValueError(f"{spec!r}: MEMS and SMPS are numbers "
                         "(MiB, vCPUs)") from None
    dsts = dst_memory if dsts in ("", "*") else parse_dst_memory(dsts)
    lks = links if lks in ("", "*") else parse_links(lks)
    for c in cfgs:
        if c not in CONFIGS:
            raise ValueError(f"unknown configuration {c!r}")
    for w in wls:
        if w not in WORKLOAD_ORDER:
            raise ValueError(f"unknown workload {w!r}")
    for m in mems:
        if m < 256 or m % 256:
            raise ValueError(f"guest size {m} MiB: a multiple of 256")
    for n in smps:
        if not 1 <= n <= 64:
            raise ValueError(f"{n} vCPUs: 1..64")
    return expand([Cell(c, w, m, n) for n in smps for m in mems
                   for w in wls for c in cfgs], dsts, lks)


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
    changes from repeat to repeat (_balanced_orders()); a group's items
    are its configurations at each destination memory state (warm, cold),
    so both states of a configuration see the same machine state on
    average, and a link is a group of its own.  A run takes over
    the host from the one before it (memory the host has not handed back
    yet makes a destination's first touch cheaper), so no configuration
    may keep following the same one.  `repeats`: a number for every cell,
    or {cell: number} (repeats_of()); a group runs as often as its cell
    with the most repeats."""
    groups = collections.OrderedDict()
    for c in cells:
        groups.setdefault(group_key(c), []).append(c)
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
