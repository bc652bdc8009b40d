# SPDX-License-Identifier: GPL-2.0
"""Faults during a hint round: cancel, a killed destination, a reset, rmmod,
memory pressure, a late give-back, a feature dropped by a legacy driver,
postcopy, guests that never answer.

Every fault test ends with the guest's data verified on the VM that runs it
at the end and its free memory back: MemFree near its level before the
round and, with our driver, no hinted page still held (`held_inflight_pages`, `held_acked_pages`
inflight:0 acked:0).  The tests of a held round run our driver in alloc
mode (HELD): after the pre-send wait the guest holds every hinted block
until DONE, and the migration stays active long enough to inject the
fault.  Scan mode (the default) holds nothing; its exit paths are tested
without that (test_scan_mode_exit_paths).

Tags: `reliability` (make check), `long` (the 10-migration run),
`sanitize` (make check SANITIZE=1 runs these against the ASan/UBSan build).
"""
import re
import time

from hb import stop_race
from hb.rigs import (HELD, MEM, THROTTLE, IothreadGate, Rig, final_migration,
                     held, held_parts, held_round)
from hb.testlib import (CURRENT, again, assert_intact, migrate,
                        migrate_hinted, need_ours, our_keep_writes_qemu,
                        our_qemu, tag, timeout)
from hb.verdicts import KERNEL_ERROR_RE
from hb.vm import device_counters
from hb.workloads import Scenario


@tag("reliability", "faults", "sanitize", "each_stack", "each_kernel",
     "debug_kernel")
def test_cancel_during_round_then_migrate_again():
    """migrate_cancel twice (during the pre-send wait while the guest is
    still hinting, then while it holds the round); memory comes back each
    time; a third migration to a new destination hints and keeps data."""
    need_ours()
    with Rig("cancel", balloon_args=HELD) as rig:
        rig.boot()
        # 1: cancel as soon as the device has asked the guest for a round
        # (pre-send wait / round being filled)
        before = rig.meminfo()
        rig.start_migration(bw=THROTTLE)
        id0 = rig.counters0.get("cmd-id", 0)
        deadline = time.time() + 60
        while (device_counters(rig.vm) or {}).get("cmd-id", 0) <= id0:
            assert time.time() < deadline, "the device started no round"
            time.sleep(0.05)
        rig.cancel()
        rig.wait_memory_back(before)
        # 2: cancel while the round is held
        before, _ = held_round(rig)
        rig.cancel()
        rig.wait_memory_back(before)
        assert rig.vm.machine.is_running()
        final_migration(rig, "after cancel")


@tag("reliability", "faults", "sanitize", "each_stack", "each_kernel")
def test_destination_killed_mid_migration():
    """SIGKILL the destination QEMU while the source guest holds a round:
    the migration fails, the source keeps running and gets every hinted
    block back; a second migration to a new destination succeeds."""
    need_ours()
    with Rig("dstkill", balloon_args=HELD) as rig:
        rig.boot()
        before, _ = held_round(rig)
        rig.migration_fault()
        rig.dst.kill()
        rig.dst = None
        CURRENT.add("faults")
        info = rig.wait_end(120)
        assert info["status"] == "failed", info
        assert rig.vm.qmp("query-status")["status"] == "running"
        rig.wait_memory_back(before)
        final_migration(rig, "after destination killed")


@tag("reliability", "faults", "sanitize", "each_stack")
def test_system_reset_during_round():
    """system_reset of the source while the guest holds a round: the guest
    reboots cleanly (HB READY again), no kernel error, and the next
    migration hints and keeps data."""
    need_ours()
    with Rig("reset", balloon_args=HELD) as rig:
        rig.boot()
        held_round(rig)
        rig.vm.qmp("system_reset")
        CURRENT.add("faults")
        deadline = time.time() + 180
        while rig.vm.console_text().count("HB READY") < 2:
            assert time.time() < deadline, "guest did not reboot"
            assert rig.vm.machine.is_running(), "QEMU died on reset"
            time.sleep(0.5)
        assert not rig.vm.kernel_errors(), rig.vm.kernel_errors()
        rig.vm.guest.close()
        rig.vm.guest.buf = b""
        rig.vm.guest.connect()
        s = rig.stats()
        assert s.get("rounds", 0) == 0 and held(s) == 0, s
        rig.prepare()
        # the migration that was running while the guest rebooted
        rig.cancel()
        final_migration(rig, "after system_reset")


@tag("reliability", "faults", "sanitize", "each_stack", "each_kernel")
def test_rmmod_during_round():
    """rmmod virtio_balloon while it holds a round: no crash, every held
    block freed (MemFree back); reload it and hint again."""
    need_ours()
    with Rig("rmmod", balloon_args=HELD) as rig:
        rig.boot()
        before, s = held_round(rig)
        rc, out = rig.vm.guest.run("rmmod virtio_balloon", check=False)
        CURRENT.add("faults")
        assert rc == 0, out
        m = rig.meminfo()
        tol = max(32 << 10, before["free_kb"] // 20)
        assert m["free_kb"] >= before["free_kb"] - tol, \
            f"leak after rmmod: before={before} after={m} held={s}"
        assert not rig.vm.kernel_errors(), rig.vm.kernel_errors()
        _, dmesg = rig.vm.guest.run("dmesg", check=False)
        assert not [ln for ln in dmesg
                    if KERNEL_ERROR_RE.search(ln)], dmesg[-20:]
        rig.vm.guest.run("insmod /lib/hb/ours/virtio_balloon.ko")
        s = rig.stats()
        assert "rounds" in s and held(s) == 0, s
        rig.cancel()
        rig.wait_memory_back(before)
        final_migration(rig, "after rmmod/insmod")


@tag("reliability", "faults", "sanitize", "each_stack", "each_kernel")
def test_memory_pressure_during_round():
    """hbwork pressure while the guest holds nearly all free memory in a
    round: the shrinker hands acked blocks back, nothing is OOM-killed,
    the migration completes with data intact and nothing stays held."""
    need_ours()
    with Rig("pressure", balloon_args=HELD) as rig:
        rig.boot()
        before, s = held_round(rig)
        total = before["total_kb"]
        # as much as was available before the round, minus a margin
        pct = min(90, (before["avail_kb"] - (48 << 10)) * 100 // total)
        CURRENT.add("faults")
        p = rig.vm.guest.hbwork(f"pressure {pct}", timeout=300)
        assert p.get("ok") == 1, p
        rig.no_oom()
        s2 = rig.stats()
        assert s2["blocks_returned_early"] > 0, \
            f"pressure {pct}% got nothing back early: {s2}"
        rig.unthrottle()
        rig.finish()
        rig.verify("after pressure")
        rig.no_oom()
        rig.wait_memory_back(rig.res["meminfo_before"])


@tag("reliability", "faults", "sanitize", "each_stack")
def test_scan_mode_exit_paths():
    """Scan mode: a round takes no memory (MemFree unchanged while the
    migration is throttled); cancel, then a destination killed mid-way:
    each time the source keeps running with its memory, and a final
    migration hints and keeps data.  Scan needs a QEMU offering
    HINT_KEEP_WRITES (bit 16), as ours does."""
    need_ours()
    our_keep_writes_qemu()
    with Rig("scan-exit") as rig:
        rig.boot()
        for fault in ("cancel", "kill"):
            before = rig.meminfo()
            r0 = rig.stats().get("rounds", 0)
            rig.start_migration(bw=THROTTLE)
            deadline = time.time() + 60
            while rig.stats().get("rounds", 0) <= r0:
                assert time.time() < deadline, rig.stats()
                time.sleep(0.2)
            s = rig.stats()
            m = rig.meminfo()
            assert s["mode"] == "scan" and held(s) == 0, s
            assert s["round_bytes"] > 0, s
            assert m["free_kb"] >= before["free_kb"] - (32 << 10), (before, m)
            if fault == "cancel":
                rig.cancel()
            else:
                rig.migration_fault()
                rig.dst.kill()
                rig.dst = None
                CURRENT.add("faults")
                assert rig.wait_end(120)["status"] == "failed"
            assert rig.vm.qmp("query-status")["status"] == "running"
            rig.wait_memory_back(before)
        final_migration(rig, "scan mode after cancel and kill")


def _back_and_forth(n):
    need_ours()
    with Rig(f"pingpong{n}", workload="churn") as rig:
        rig.boot()
        for i in range(n):
            rig.migrate()
            assert rig.hinted_pages() > 0, \
                f"migration {i + 1}: no hint taken {rig.last_counters}"
            rig.verify(f"migration {i + 1}/{n}")
            s = rig.stats()
            assert held(s) == 0, f"migration {i + 1}: still held {s}"


@tag("reliability", "faults", "sanitize", "each_stack")
def test_back_and_forth_with_churn_3():
    """Three migrations in a row (a -> b -> c -> d, each a new QEMU) with
    churn running; data verified after each."""
    _back_and_forth(3)


@tag("soak", "long")
@timeout(3600)
def test_back_and_forth_with_churn_10():
    """The same, ten times in a row."""
    _back_and_forth(10)


def _never_answers(label, balloon, on_source_ready=None):
    res = migrate(label, src_bin=our_qemu(), balloon=balloon, hint=True,
                  scenario=Scenario("stale", mem_mib=MEM),
                  on_source_ready=on_source_ready)
    assert_intact(res, label)
    c = res.get("device_src") or {}
    assert c.get("cleared-pages", 0) == 0, c
    print(f"    {label}: total {res.get('total_ms')} ms, presend-waits="
          f"{c.get('presend-waits')} presend-timeouts="
          f"{c.get('presend-timeouts')} wait {c.get('presend-wait-ms')} ms")
    return res


# The runs at most: until a held batch came after its round's sync (about
# two runs in three have one), and the detector's, until one lost pages
# (about half of them do)
RACE_RUNS = 6
RACE_FORGED_RUNS = 8


@tag("reliability", "faults", "sanitize", "each_stack")
def test_round_stop_waits_for_a_batch_in_flight():
    """data-safety.md, section 8: a batch whose round was stopped by the
    bitmap sync that ends it must not clear its ranges after that sync.
    The hb.stop_race fixture makes that interleaving likely (gdb holds the
    balloon iothread 90 ms at every batch clear while the guest writes
    64 MiB/s of fresh allocations).  Three runs, more until one had a held
    batch come after its round's sync (dropped as stale): the holds
    happened, the host took hints, no page lost, no kernel or QEMU error.
    Then the detector: with the device's check forged away by gdb, runs
    lose the churn's pages (up to RACE_FORGED_RUNS, until one does)."""
    need_ours()
    qemu = our_qemu()
    lines, stale = [], 0
    # three runs, and more (RACE_RUNS at most) until a held batch came
    # after its round's sync
    while len(lines) < 3 or (not stale and len(lines) < RACE_RUNS):
        lost, failed, more, unheld, st = stop_race.run(
            qemu, 0.09, 1, first=len(lines) + 1)
        lines += more
        stale += st
        CURRENT.add("migrations")
        CURRENT.add("faults")
        assert not unheld, f"a run held no batch: {lines}"
        assert not failed, f"lost pages: {lost}: {lines}"
    assert stale > 0, \
        (f"no held batch came after its round's sync in {len(lines)} runs "
         f"(premise): {lines}")
    lost, _, lines, _, _ = stop_race.run(qemu, 0.09, RACE_FORGED_RUNS,
                                         forge=True, until_lost=True)
    CURRENT.add("migrations", len(lines))
    CURRENT.add("faults", len(lines))
    assert lost > 0, \
        (f"with the round check forged away no page was lost in "
         f"{len(lines)} runs: the test cannot see the race: {lines}")
    print(f"    the check fires with the round check forged away: {lost} "
          f"pages lost in run {len(lines)}", flush=True)


@tag("reliability", "faults", "sanitize", "each_stack")
def test_done_frees_chains_the_device_returns_late():
    """DONE arrives while the device still has the round's chains (its
    bottom half is held by gdb, before free_page_lock): the driver frees
    the acked blocks, and the held ones as soon as the device gives them
    back, however late (here 14 s after DONE; the driver used to retry for
    ~10 s and then keep them until the next round or a reset).  DONE is
    sent only once the bottom half has stopped at the gate with a batch.
    Then a full migration hints and keeps the data."""
    need_ours()
    with Rig("lateback", balloon_args=HELD) as rig:
        rig.boot()
        before = rig.meminfo()
        gate = IothreadGate(rig.vm, rig.dir)
        try:
            gate.close_gate()
            r0 = rig.stats().get("rounds", 0)
            rig.start_migration(bw=THROTTLE)
            deadline = time.time() + 60
            while True:
                s = rig.stats()
                if (s.get("rounds", 0) > r0
                        and held_parts(s).get("inflight", 0) > 0):
                    break
                assert time.time() < deadline, f"no chain in flight: {s}"
                time.sleep(0.5)
            # the premise: the device holds a batch of this round's hints
            # (a chain the guest queued but the device had not popped yet
            # would come back at DONE as stale, without the iothread)
            gate.wait_hit()
            rig.cancel()                  # CLEANUP: DONE to the guest
            time.sleep(14)
            s = rig.stats()
            print(f"    14 s after DONE, device still holding: "
                  f"held={held_parts(s)}", flush=True)
            assert held(s) > 0, f"chains came back with the gate shut: {s}"
            gate.open_gate()
            rig.wait_memory_back(before, 30)
        finally:
            gate.stop()
        CURRENT.add("faults")
        assert rig.vm.machine.is_running()
        final_migration(rig, "after a late give-back")


@tag("reliability", "faults", "sanitize", "each_stack")
def test_source_quits_while_a_clear_is_held():
    """The source QEMU quits while a batch's clear waits in the iothread,
    after its migration ended: migration_shutdown() then drops the last
    reference to the MigrationState before QEMU joins the iothread, so the
    clear runs after that object is freed and must read nothing of it
    (under make check SANITIZE=1 such a read is a heap-use-after-free
    report, which fails the test).  gdb holds the iothread at the clear,
    the migration is cancelled, the guest's data is verified, QEMU is asked
    to quit, and gdb lets the clear go (and detaches) once the main thread
    has passed migration_shutdown(): it stops the main thread at
    user_creatable_cleanup(), later in qemu_cleanup(), which joins the
    iothread.  The premise: when QEMU is asked to quit, the MigrationState
    has no reference but the one migration_shutdown() drops, and the main
    thread passes migration_shutdown() with the clear still held.  QEMU
    then exits with status 0."""
    need_ours()
    with Rig("quitheld") as rig:
        rig.boot()
        gate = IothreadGate(rig.vm, rig.dir)
        gdb = gate.gdb
        try:
            gate.close_gate()
            rig.start_migration(bw=THROTTLE)
            gate.wait_hit()
            rig.cancel()
            rig.verify("after the cancel")
            held_at = gate.held_thread()
            # the reference the migration's cleanup bottom half takes is
            # dropped once it has run: wait for the last one but QEMU's own
            refs = None
            for _ in range(20):
                gdb.send(f"thread {held_at}\n"
                         "printf \"HB-REF %d\\n\", "
                         "((Object *)current_migration)->ref", "HB-REF")
                refs = re.findall(r"HB-REF (\d+)", gdb.text())[-1]
                if refs == "1":
                    break
                time.sleep(0.5)
            assert refs == "1", f"MigrationState references: {refs}"
            gdb.send("break user_creatable_cleanup", "Breakpoint")
            rig.vm.qmp("quit")
            gdb._await(  # pylint: disable=protected-access
                lambda: re.search(r"hit Breakpoint \d+, "
                                  r"user_creatable_cleanup", gdb.text()),
                60, "QEMU did not reach user_creatable_cleanup()")
            assert gate.hits() == 2, \
                f"the clear was not held until then: {gdb.text()[-2000:]}"
            # let the clear go without gdb: LeakSanitizer checks QEMU at its
            # exit, and does not run under ptrace
            gate.stop()
            try:
                rig.vm.machine.wait(timeout=60)
            except Exception:  # pylint: disable=broad-except
                pass        # it did not exit in time, and was killed
            code = rig.vm.machine.exitcode()
        finally:
            if gdb.proc.poll() is None:
                gate.stop()
        CURRENT.add("faults")
        assert code == 0, f"QEMU exited with {code}: {rig.vm.log_tail(3000)}"
        print(f"    the clear ran after migration_shutdown(); QEMU exited "
              f"with {code}", flush=True)


@tag("reliability", "faults", "sanitize", "each_stack")
def test_alloc_round_caps_what_it_keeps_in_flight():
    """A device that does not use the buffers (its bottom half held by
    gdb): an alloc round keeps at most alloc_max_inflight_kb (here 16 MiB,
    four 4 MiB blocks) in flight, waits for the device (inflight_waits),
    and ends after 2 s without a buffer back (rounds_timed_out); nothing
    else is taken.  Once the gate opens and DONE comes, every block goes
    back, and a full migration hints and keeps the data."""
    need_ours()
    cap_kb = 16 << 10
    with Rig("inflightcap", balloon_args=HELD +
             f" hint_alloc_max_inflight_kb={cap_kb}") as rig:
        rig.boot()
        before = rig.meminfo()
        gate = IothreadGate(rig.vm, rig.dir)
        try:
            gate.close_gate()
            s0 = rig.stats()
            assert s0["alloc_max_inflight_kb"] == cap_kb, s0
            rig.start_migration(bw=THROTTLE)
            deadline = time.time() + 90
            while True:
                s = rig.stats()
                if s.get("rounds_timed_out", 0) > s0["rounds_timed_out"]:
                    break
                assert time.time() < deadline, f"the round did not end: {s}"
                time.sleep(0.5)
            parts = held_parts(s)
            print(f"    device stalled: held={parts} "
                  f"inflight_waits={s['inflight_waits']}", flush=True)
            assert 0 < parts["inflight"] <= cap_kb >> 2, s
            assert parts["acked"] == 0, s
            assert s["inflight_waits"] > s0["inflight_waits"], s
            rig.cancel()                  # CLEANUP: DONE to the guest
            gate.open_gate()
            rig.wait_memory_back(before, 60)
        finally:
            gate.stop()
        CURRENT.add("faults")
        final_migration(rig, "after a stalled device")


# Legacy virtio-pci: the driver writes GUEST_FEATURES (BAR0 + 4) and may
# rewrite it at any time (it never sets FEATURES_OK).  A 1-byte write there
# sets the device's guest features to that byte.
LEGACY_FEATURES = ('d=$(grep -l 0x1002 /sys/bus/pci/devices/*/device); '
                   'd=${d%/device}; '
                   'io=$(( $(head -1 $d/resource | cut -d" " -f1) + 4 )); ')


@tag("reliability", "faults", "sanitize", "each_stack")
def test_round_ends_after_a_legacy_driver_drops_the_feature():
    """A legacy (disable-modern=on) device: the guest holds a round, then
    rewrites its feature bits without FREE_PAGE_HINT (byte 0 of
    GUEST_FEATURES through /dev/port), and the migration is cancelled.  The
    round must still end with DONE: the guest gets its memory back.  (QEMU
    used to ignore every migration event once the feature was gone, so the
    round stayed open and the blocks stayed held.)  A plain migration then
    keeps the data."""
    need_ours()
    with Rig("legacyfeat", balloon_args=HELD,
             device_props="disable-modern=on") as rig:
        rig.boot()
        before, _ = held_round(rig)
        _, out = rig.vm.guest.run(
            LEGACY_FEATURES + 'f=$(dd if=/dev/port bs=1 skip=$io count=1 '
            '2>/dev/null | od -An -tu1); echo old=$f; '
            'n=$(( f & ~8 )); printf "\\\\$(printf %o $n)" | '
            'dd of=/dev/port bs=1 seek=$io count=1 conv=notrunc 2>/dev/null; '
            'echo new=$(dd if=/dev/port bs=1 skip=$io count=1 2>/dev/null '
            '| od -An -tu1)')
        vals = dict(ln.replace(" ", "").split("=") for ln in out
                    if "=" in ln)
        print(f"    guest features byte 0: {vals}", flush=True)
        assert int(vals["old"]) & 8 and int(vals["new"]) == \
            int(vals["old"]) & ~8, f"feature bit 3 not dropped: {out}"
        CURRENT.add("faults")
        rig.cancel()
        rig.wait_memory_back(before, 30)
        st = device_counters(rig.vm) or {}
        assert st.get("status") == "done", st
        rig.migrate()
        rig.verify("after the feature was dropped")


@tag("reliability", "faults", "sanitize", "each_stack")
def test_postcopy_with_hinting():
    """postcopy-ram on both sides, hinting opted in for it
    (x-free-page-hint-postcopy=on; off by default, as stock turns hinting
    off with postcopy-ram): the round runs in the precopy phase, migrate-start-postcopy switches over
    while most of RAM is unsent, and the destination runs (the ticker
    re-reads its data every 2 s) while the rest arrives.  Hinted pages are
    not sent, nothing stays held, data intact, no kernel error."""
    need_ours()
    stale = MEM * 75 // 100
    for driver, args in (("ours", ""), ("intree", "")):
        def run(n, driver=driver, args=args):
            res = migrate(f"postcopy-{driver}" + again(n), src_bin=our_qemu(),
                          balloon=driver, hint=True, balloon_args=args,
                          device_props="x-free-page-hint-postcopy=on",
                          scenario=Scenario("stale", mem_mib=MEM,
                                            postcopy_after_s=3))
            assert_intact(res, f"postcopy, {driver} driver")
            assert "postcopy-active" in res["states"], res["states"]
            return res
        res = migrate_hinted(run, "scan" if driver == "ours" else None,
                             f"postcopy, {driver} driver")
        c = res.get("device_src") or {}
        ram = res["migration"].get("ram", {})
        print(f"    postcopy {driver}: switched at {res['postcopy']} s, "
              f"{res['transferred_mb']} MB sent, "
              f"{ram.get('postcopy-requests')} page requests, "
              f"{c.get('cleared-pages')} pages cleared by hints")
        # The stale data (75 % of RAM) was hinted: far less than it is sent.
        assert res["transferred_mb"] < stale / 2, res["transferred_mb"]
        if driver == "ours":
            g = res.get("guest_hint") or {}
            assert g.get("bytes_hinted", 0) > 0, g
            assert held(g) == 0, f"hinted blocks still held: {g}"


@tag("reliability", "faults", "sanitize", "each_stack")
def test_guest_without_driver_never_answers():
    """hb.balloon=none: nobody answers the command id; the migration still
    completes (after the bounded pre-send wait) with data intact."""
    CURRENT.add("faults")
    res = _never_answers("rel-nodriver", "none")
    # FREE_PAGE_HINT was never negotiated: no round, no wait at all
    c = res.get("device_src") or {}
    assert c.get("presend-waits", 0) == 0, c


@tag("reliability", "faults", "sanitize", "each_stack")
def test_guest_with_hinting_disabled_never_answers():
    """Our driver with `enabled`=0 declines every round at once (id, STOP,
    nothing hinted): the host does not wait for it."""
    need_ours()

    def disable(vm, _res):
        vm.guest.run("echo 0 > /sys/bus/virtio/devices/virtio0/"
                     "free_page_hint/enabled")
    CURRENT.add("faults")
    res = _never_answers("rel-disabled", "ours", disable)
    assert res["guest_hint"].get("rounds", 0) == 0, res["guest_hint"]
    assert res["guest_hint"].get("bytes_hinted", 0) == 0, res["guest_hint"]
    # negotiated, answered at once with an empty round: no wait ran out
    c = res.get("device_src") or {}
    assert c.get("presend-timeouts", 1) == 0, c
    assert c.get("hinted-bytes", 1) == 0, c
