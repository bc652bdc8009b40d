# SPDX-License-Identifier: GPL-2.0
"""What runs in a test guest before, during and after a migration.

A Scenario names the workload (fresh, stale, frag, churn, cache), its
sizes and seed, and how the migration runs (throttled start, postcopy,
downtime limit, hops).  prepare_guest() sets the workload up in the guest
and records the checksums of its data; verify_guest() checks that data on
the destination, stops the helpers (the ticker, the churn processes) and
scans the guest's dmesg.  The data-loss scenarios and drivers shared by
tests/test_30_dataloss.py and scripts/soak.py are here too.  Every
function takes any object with a .guest (hb.channel.Guest): an hb.vm.VM
or an hb.libvirt.Domain.
"""

import time

from .channel import GuestError, SetupError, parse_kv
from .verdicts import KERNEL_ERROR_RE

WORKLOADS = ("fresh", "stale", "frag", "churn", "cache")

# The data-loss scenarios (tests/test_30_dataloss.py, scripts/soak.py):
# stale free memory at normal speed, a throttled start (time to hint before
# the bulk stage), memory churn during the migration ...
DATALOSS_SCENARIOS = {
    "normal": dict(workload="stale"),
    "throttled": dict(workload="stale", throttle_start_s=2.0),
    "churn": dict(workload="churn"),
}
# ... with these guest drivers: name -> (balloon, balloon_args)
DATALOSS_DRIVERS = {
    "intree": ("intree", ""),
    "ours": ("ours", ""),                       # scan mode, the default
    "ours_alloc": ("ours", "hint_mode=alloc"),  # alloc mode
}


# ... and the hint mode each must run its rounds in on our QEMU (None: the
# in-tree driver, which has no mode).
DATALOSS_MODES = {"intree": None, "ours": "scan", "ours_alloc": "alloc"}


# QEMU's default downtime-limit, set explicitly so that every run says so.
DOWNTIME_LIMIT_MS = 300


class Scenario:
    """What runs in the guest before, during and after a migration."""

    def __init__(self, workload="stale", mem_mib=1024, keep_mib=24,
                 hold_mib=16, stale_pct=75, churn_rate=64, settle=1.0,
                 throttle_start_s=0.0, seed=None, ticker=True,
                 postcopy_after_s=0.0, downtime_limit_ms=DOWNTIME_LIMIT_MS,
                 smp=2, churn_procs=1, hops=1):
        assert workload in WORKLOADS, workload
        self.workload = workload
        self.mem_mib = mem_mib
        self.keep_mib = keep_mib
        self.hold_mib = hold_mib
        self.stale_pct = stale_pct
        self.churn_rate = churn_rate
        self.settle = settle
        self.throttle_start_s = throttle_start_s
        self.ticker = ticker
        # > 0: postcopy-ram on both sides, precopy at
        # migration.POSTCOPY_PRECOPY_BW, migrate-start-postcopy this many
        # seconds after `migrate`.
        self.postcopy_after_s = postcopy_after_s
        # migrate-set-parameters downtime-limit for this migration.
        self.downtime_limit_ms = downtime_limit_ms
        # vCPUs of the guest, and how many churn processes run (one per
        # vCPU writes on every vCPU: the guest's scheduler spreads them)
        self.smp = smp
        self.churn_procs = churn_procs
        # migrations in a row (A -> B -> C is 2), the data verified at the
        # last destination
        self.hops = hops
        self.seed = seed if seed is not None else int(time.time()) & 0xffffff


def setup_work(g, args, **expect):
    """Run `hbwork ARGS` as a step of a workload's setup and return its
    result fields.  SetupError, naming the step and what hbwork printed,
    unless it exited 0 with the result line of its own verb and every
    field of `expect` (mib=N: the amount asked for) has that value."""
    try:
        out = g.hbwork(args)
    except GuestError as exc:
        if not str(exc).startswith("no HBWORK line"):
            raise               # the guest or its QEMU, not the step
        raise SetupError(f"workload setup failed: 'hbwork {args}' ended "
                         f"without its result line (killed?): {exc}") \
            from exc
    verb = args.split()[0]
    wrong = {k: out.get(k) for k, v in expect.items() if out.get(k) != v}
    if out.get("rc") != 0 or out.get("verb") != verb or wrong:
        raise SetupError(f"workload setup failed: 'hbwork {args}' "
                         f"(expected rc=0 verb={verb}"
                         + "".join(f" {k}={v}" for k, v in expect.items())
                         + f"): {out}")
    return out


def prepare_guest(vm, sc, res):
    """The scenario's workload in vm's guest.  Every step is checked (its
    exit status, the amount it wrote, the background helpers running): a
    setup that failed raises SetupError rather than migrating a guest that
    holds less than the test thinks.  res["stale_mib"]: the stale data
    the setup freed, from what hbwork reported it wrote (the hints are
    measured against it, testlib.assert_hinted)."""
    g = vm.guest
    stale = sc.mem_mib * sc.stale_pct // 100
    res["stale_mib"] = 0
    if sc.workload in ("stale", "churn") and stale:
        # As a user's guest gets it: page cache full of data, then deleted.
        res["fill"] = setup_work(g, f"stale /data/stale {stale} {sc.seed}",
                                 mib=stale)
        g.run("rm /data/stale")
        res["stale_mib"] = res["fill"]["mib"]
    elif sc.workload == "frag":
        # Half of a tmpfs file of stale data stays resident, with every
        # other 256 KiB punched out: much of the free memory is in holes
        # far smaller than a 4 MiB block (orders 0-5, see buddyinfo).
        res["fill"] = setup_work(g, f"fill {stale // 3} {sc.seed}",
                                 mib=stale // 3)
        res["frag"] = setup_work(g, f"frag /data/frag {stale // 2} 256",
                                 mib=stale // 2, hole_kb=256)
        if not res["frag"].get("holes"):
            raise SetupError(f"workload setup failed: frag punched no "
                             f"hole: {res['frag']}")
        _, res["buddyinfo"] = g.run("cat /proc/buddyinfo")
        res["stale_mib"] = (res["fill"]["mib"] + res["frag"]["holes"] *
                            res["frag"]["hole_kb"] // 1024)
    elif sc.workload == "cache":
        # Clean page cache: a tmpfs file is not reclaimable, so use the
        # initramfs' own files read many times plus anonymous stale data.
        res["fill"] = setup_work(g, f"fill {stale // 2} {sc.seed}",
                                 mib=stale // 2)
        res["stale_mib"] = res["fill"]["mib"]
    res["keep"] = setup_work(g, f"keep /data/keep {sc.keep_mib} {sc.seed}",
                             mib=sc.keep_mib, seed=sc.seed)
    g.run(f"hbwork hold {sc.hold_mib} {sc.seed + 1} /tmp/hold.state "
          "> /tmp/hold.out 2>&1 &")
    deadline = time.time() + 60
    while True:
        _, out = g.run("cat /tmp/hold.state 2>/dev/null", check=False)
        if out and out[0].startswith("HBWORK hold"):
            res["hold"] = parse_kv(out[0])
            break
        _, err = g.run("cat /tmp/hold.out", check=False)
        if time.time() > deadline or any(x.startswith("HBWORK error")
                                         for x in err):
            raise SetupError(f"workload setup failed: the hold daemon "
                             f"(hbwork hold {sc.hold_mib}) did not start: "
                             f"{err}")
        time.sleep(0.2)
    h = res["hold"]
    if h.get("mib") != sc.hold_mib or not h.get("pid") or "sum" not in h:
        raise SetupError(f"workload setup failed: the hold daemon holds "
                         f"other than {sc.hold_mib} MiB: {h}")
    if sc.workload == "churn":
        start_churn(g, sc)
    if sc.ticker:
        start_ticker(g, sc)
    res["meminfo_before"] = setup_work(g, "meminfo")
    time.sleep(sc.settle)


# Guest shell: the PIDs of running `hbwork VERB` processes (busybox-static
# has no pkill/pgrep -f).
HBWORK_PIDS = ("for p in $(pidof hbwork); do "
                "tr '\\0' ' ' < /proc/$p/cmdline | grep -q '^[^ ]*hbwork {verb} ' "
                "&& echo $p; done")


def wait_guest(g, cmd, what, timeout=60):
    """Run `cmd` in the guest until it exits 0; GuestError after timeout."""
    deadline = time.time() + timeout
    while True:
        rc, out = g.run(cmd, check=False)
        if rc == 0:
            return out
        if time.time() > deadline:
            raise GuestError(f"{what}: not after {timeout}s ({out})")
        time.sleep(0.2)


def _churn_out(i):
    return "/tmp/churn.out" if i == 0 else f"/tmp/churn.{i}.out"


def start_churn(g, sc):
    """Memory churn in the guest until stop_churn(): sc.churn_procs
    processes, each at sc.churn_rate MiB/s."""
    for i in range(sc.churn_procs):
        g.run(f"hbwork churn {sc.churn_rate} 0 64 > {_churn_out(i)} 2>&1 &")
    running = f"$({HBWORK_PIDS.format(verb='churn')} | wc -l)"
    try:
        wait_guest(g, f"test {running} -ge {sc.churn_procs}",
                   "hbwork churn not running", timeout=30)
    except GuestError as exc:
        outs = " ".join(_churn_out(i) for i in range(sc.churn_procs))
        _, out = g.run(f"cat {outs}", check=False)
        raise SetupError(f"workload setup failed: {sc.churn_procs} hbwork "
                         f"churn process(es) not running ({exc}); they "
                         f"printed: {out}") from exc


def start_ticker(g, sc):
    """A live guest: re-check the kept data every 2 s until stop_ticker().
    Each pass allocates and frees memory."""
    g.run(": > /tmp/ticker.out; while :; do hbwork verify /data/keep "
          f"{sc.keep_mib} {sc.seed} >> /tmp/ticker.out; sleep 2; done "
          "> /dev/null 2>&1 & echo $! > /tmp/ticker.pid")
    rc, out = g.run("kill -0 $(cat /tmp/ticker.pid)", check=False)
    if rc != 0:
        raise SetupError(f"workload setup failed: the ticker is not "
                         f"running: {out}")


def stop_churn(g, procs=1):
    """Stop the `hbwork churn` processes (started by start_churn): SIGTERM,
    then wait for them to exit and their result lines to be written.
    Returns their combined result fields (None if one printed none: ok=1
    only if every one was ok, bytes and bad pages summed) and their
    HBBADPAGE lines."""
    g.run(f"for p in $({HBWORK_PIDS.format(verb='churn')}); do "
          "kill -TERM $p; done", check=False)
    wait_guest(g, f"test -z \"$({HBWORK_PIDS.format(verb='churn')})\"",
               "hbwork churn did not exit on SIGTERM")
    churn, bad = {}, []
    for i in range(procs):
        _, out = g.run(f"cat {_churn_out(i)}", check=False)
        one = next((parse_kv(x) for x in out if x.startswith("HBWORK")),
                   None)
        bad += [x for x in out if x.startswith("HBBADPAGE")]
        if one is None:
            return None, bad
        for k, v in one.items():
            if k == "ok":
                churn["ok"] = min(churn.get("ok", 1), v)
            elif k in ("mib_written", "verified_bytes", "bad_pages"):
                churn[k] = churn.get(k, 0) + v
            else:
                churn.setdefault(k, v)
    churn["procs"] = procs
    return churn, bad


def stop_ticker(g):
    """Stop the ticker (the loop that re-verifies the kept data every 2 s)
    and wait for its last pass to end.  Returns {"passes", "bad"}: how many
    passes ran (before and after the migration) and the result lines of
    those that found the data damaged."""
    g.run("kill $(cat /tmp/ticker.pid); rm -f /tmp/ticker.pid", check=False)
    wait_guest(g, f"test -z \"$({HBWORK_PIDS.format(verb='verify')})\"",
               "the ticker's last pass did not end")
    _, out = g.run("cat /tmp/ticker.out", check=False)
    lines = [x for x in out if x.startswith("HBWORK")]
    bad = [x for x in out if not x.startswith("HBWORK verify ")
           or parse_kv(x).get("ok") != 1]
    return {"passes": len(lines), "bad": bad[:20]}


def verify_guest(vm, sc, res):
    """Verify on the destination; fill res['verify'] and return ok."""
    g = vm.guest
    v = {"bytes_verified": 0}
    ok = True
    if sc.ticker:
        v["ticker"] = stop_ticker(g)
        if v["ticker"]["bad"]:
            ok = False
    if sc.workload == "churn":
        churn, bad = stop_churn(g, sc.churn_procs)
        v["churn"] = churn
        if bad:
            v["churn_bad_pages"] = bad
        if not churn or churn.get("ok") != 1:
            ok = False
        else:
            v["bytes_verified"] += churn.get("verified_bytes", 0)
    if sc.workload == "frag":
        # the file between its holes: free blocks next to live data, so a
        # hint that reached past a free block would show here
        fr = res["frag"]
        ver = g.hbwork(f"fragverify {fr['path']} {fr['mib']} {fr['hole_kb']}",
                       timeout=300)
        v["frag"] = ver
        if ver.get("ok") != 1:
            ok = False
        else:
            v["bytes_verified"] += ver.get("resident_pages", 0) << 12
    ver = g.hbwork(f"verify /data/keep {sc.keep_mib} {sc.seed}")
    v["keep"] = ver
    if ver.get("ok") != 1 or ver.get("sum") != res["keep"].get("sum"):
        ok = False
    else:
        v["bytes_verified"] += sc.keep_mib << 20
    pid = res["hold"]["pid"]
    g.run(f"rm -f /tmp/hold.state; kill -USR1 {pid}")
    hold = None
    deadline = time.time() + 60
    while time.time() < deadline:
        _, out = g.run("cat /tmp/hold.state 2>/dev/null", check=False)
        if out and out[0].startswith("HBWORK holdcheck"):
            hold = parse_kv(out[0])
            break
        time.sleep(0.2)
    v["hold"] = hold
    _, hold_out = g.run("cat /tmp/hold.out", check=False)
    v["hold_bad_pages"] = [x for x in hold_out if x.startswith("HBBADPAGE")]
    if not hold or hold.get("ok") != 1 or hold.get("sum") != res["hold"]["sum"]:
        ok = False
    else:
        v["bytes_verified"] += sc.hold_mib << 20
    # Walk the page allocator's free lists: corruption that the checksums
    # above cannot see (struct page lists, slab) shows up here.
    v["exercise"] = g.hbwork("pressure 50", timeout=300)
    if v["exercise"].get("ok") != 1:
        ok = False
    _, dmesg = g.run("dmesg", check=False)
    v["dmesg_errors"] = [ln for ln in dmesg if KERNEL_ERROR_RE.search(ln)]
    res["verify"] = v
    return ok
