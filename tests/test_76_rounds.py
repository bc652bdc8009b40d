# SPDX-License-Identifier: GPL-2.0
"""How many free page hint rounds a migration runs (host-qemu.md, "Rounds").

Our QEMU starts a new round after a bitmap sync only when the guest wrote,
since the last round started, at least 1/x-free-page-hint-rehint-ratio of
what that round hinted among the pages hints had cleared: it took back
memory it had reported free.  An idle guest is hinted once, a guest that
only rewrites the memory it already uses is hinted once however many syncs
its writes cause, and memory the guest writes and frees during the
migration is hinted again.  Each test also runs the rule's opposite where
that proves its premise: with the ratio 0 (a round after every sync, as
stock QEMU does) the same guest is hinted again after every sync.  Every
migration verifies the guest's data on the destination and fails on any
kernel error."""
from hb.vm import device_counters
from hb.workloads import Scenario
from hb.rigs import MEM, Rig
from hb.testlib import (assert_hinted, assert_intact, migrate, need_ours,
                        our_qemu, tag, wait_until)

FILL_MIB = 128            # written and freed during the migration
# Live data of the idle guest: a first pass long enough for the syncs that
# check whether to switch over to repeat while it runs.
KEEP_MIB = 192
PASS_BW = 16 << 20        # bytes/s: a first pass of a few seconds
REWRITE_MIB = 64          # the working set the write-heavy guest rewrites
REWRITE_BW = 128 << 20    # bytes/s: a sync every half second or so
REWRITE_SYNCS = 8         # syncs the write-heavy guest's migration runs


def _counters_when(rig, pred, timeout, what):
    """The source device's hint counters, once pred(counters) holds."""
    return wait_until(lambda: device_counters(rig.vm), pred, timeout, what)


def _free_bytes(res):
    return (res.get("meminfo_before") or {}).get("free_kb", 0) << 10


def _idle(ratio):
    props = f"x-free-page-hint-rehint-ratio={ratio}" if ratio is not None \
        else ""
    res = migrate(f"rounds-idle-ratio-{ratio}", src_bin=our_qemu(),
                  balloon="ours", hint=True, device_props=props,
                  scenario=Scenario("stale", mem_mib=1024, smp=1,
                                    stale_pct=50, keep_mib=KEEP_MIB))
    assert_intact(res, f"idle guest, ratio {ratio}")
    assert_hinted(res, "scan", f"idle guest, ratio {ratio}")
    c = res["device_src"]
    free = _free_bytes(res)
    assert free > 0, res.get("meminfo_before")
    print(f"    ratio {ratio}: rounds={c['rounds']} "
          f"skipped={c.get('rounds-skipped')} "
          f"hinted={c['hinted-bytes'] / 1e6:.0f} MB "
          f"free={free / 1e6:.0f} MB cleared={c['cleared-pages']} "
          f"sent={res.get('transferred_mb')} MB")
    return c, free


@tag("rounds", "dataloss", "sanitize", "upstream_base")
def test_idle_guest_is_hinted_once():
    """Default ratio: the idle guest's free memory is hinted at most twice
    (the first round, and at most one more) over the whole migration, and
    rounds were skipped.  Ratio 0: it is hinted in every round, more than
    twice over (the premise: syncs repeat during this migration)."""
    need_ours()
    c, free = _idle(None)
    assert c.get("rounds-skipped", 0) > 0, c
    assert c["hinted-bytes"] <= 2 * free, \
        f"hinted {c['hinted-bytes']} bytes, more than twice the " \
        f"{free} bytes free"
    c0, free0 = _idle(0)
    assert c0.get("rounds-skipped", 0) == 0, c0
    assert c0["rounds"] > c["rounds"] and c0["hinted-bytes"] > 2 * free0, \
        f"ratio 0 did not hint again: {c0} (default: {c})"


@tag("rounds", "dataloss", "sanitize")
def test_memory_freed_during_migration_is_hinted_again():
    """The guest writes FILL_MIB MiB and frees it while the first pass
    runs: a later round hints it, so those pages are cleared again and not
    sent; the data stays intact."""
    need_ours()
    with Rig("rounds-refill", balloon="ours", mem_mib=MEM) as rig:
        rig.boot()
        rig.start_migration(bw=PASS_BW)
        first = _counters_when(
            rig, lambda c: c.get("cleared-pages", 0) > 0
            and c.get("status") in ("stop", "done"),
            120, "the first round's hints")
        r = rig.vm.guest.hbwork(f"fill {FILL_MIB}")
        assert r.get("rc", 0) == 0, r
        want = FILL_MIB * 256 * 8 // 10
        later = _counters_when(
            rig, lambda c: c["cleared-pages"] - first["cleared-pages"] >= want,
            240, f"a later round clearing {want} pages")
        print(f"    first round cleared {first['cleared-pages']} pages; "
              f"later rounds {later['cleared-pages'] - first['cleared-pages']}"
              f" (the {FILL_MIB} MiB written and freed: {FILL_MIB * 256})")
        assert later["rounds"] > first["rounds"], (first, later)
        rig.unthrottle()
        rig.finish()
        rig.verify("after a later round")


def _rewriting(ratio):
    """A guest that rewrites REWRITE_MIB MiB it allocated before the
    migration, over and over, while a throttled migration syncs
    REWRITE_SYNCS times: the source device's counters and the syncs."""
    props = f"x-free-page-hint-rehint-ratio={ratio}" if ratio is not None \
        else ""
    with Rig(f"rounds-rewrite-ratio-{ratio}", balloon="ours", mem_mib=MEM,
             device_props=props) as rig:
        rig.boot()
        g = rig.vm.guest
        g.run(f"hbwork bandwidth {REWRITE_MIB} 3600 >/dev/null 2>&1 & "
              "echo $! > /tmp/rewrite.pid")
        # its whole working set is in use before the first round
        wait_until(lambda: _rss_kb(g), lambda kb: kb >= REWRITE_MIB * 1000,
                   60, "the writer's working set")
        rig.start_migration(bw=REWRITE_BW)
        info = wait_until(rig.mig_status,
                          lambda i: _syncs(i) >= REWRITE_SYNCS, 240,
                          f"{REWRITE_SYNCS} bitmap syncs")
        c = device_counters(rig.vm)
        g.run("kill $(cat /tmp/rewrite.pid)")
        rig.unthrottle()
        rig.finish()
        rig.verify(f"write-heavy guest, ratio {ratio}")
    print(f"    ratio {ratio}: {_syncs(info)} syncs, rounds={c['rounds']} "
          f"skipped={c.get('rounds-skipped')} "
          f"hinted={c['hinted-bytes'] / 1e6:.0f} MB "
          f"cleared={c['cleared-pages']}")
    return c, _syncs(info)


def _rss_kb(g):
    _, out = g.run("grep VmRSS /proc/$(cat /tmp/rewrite.pid)/status",
                   check=False)
    for line in out:
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _syncs(info):
    return (info.get("ram") or {}).get("dirty-sync-count", 0)


@tag("rounds", "dataloss", "sanitize")
def test_write_heavy_guest_is_not_hinted_every_sync():
    """Default ratio: a guest that keeps rewriting its working set gets no
    round after the first one, however many syncs its writes cause: the
    pages it writes were never hinted.  Ratio 0: the same guest gets a
    round after every sync (the premise: the syncs did run, and a test
    that counted rounds per sync would see them)."""
    need_ours()
    c, syncs = _rewriting(None)
    assert c["rounds"] <= 2 and c.get("rounds-skipped", 0) >= syncs - 2, \
        f"{c['rounds']} rounds in {syncs} syncs: {c}"
    c0, syncs0 = _rewriting(0)
    assert c0["rounds"] >= syncs0 - 1, \
        f"ratio 0: {c0['rounds']} rounds in {syncs0} syncs: {c0}"
