# SPDX-License-Identifier: GPL-2.0
"""Reliability suite (issue 7): faults during a hint round, bad input.

Every fault test ends with the guest's data verified on the VM that runs it
at the end and its free memory back: MemFree near its level before the
round and, with our driver, no hinted page still held (`held_pages`
inflight:0 acked:0).  Rounds are caught "in flight" by throttling the
migration (max-bandwidth a few MB/s).  The tests of a held round run our
driver in alloc mode (HELD): after the pre-send wait the guest holds every
hinted block until DONE, and the migration stays active long enough to
inject the fault.  Scan mode (the default) holds nothing; its exit paths
are tested without that (test_scan_mode_exit_paths).

HB_OUR_QEMU=/path overrides the patched QEMU binary (e.g. the sanitizer
build in build/qemu-asan/).  Tags: `reliability` (make check), `long` (the
10-migration soak; make check skips it), `sanitize` (the same fault tests
against build/qemu-asan/, with a scan of QEMU's stderr for ASan/UBSan
reports).
"""
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

from hb import harness
from hb.harness import (GuestError, Scenario, VM, balloon_stats,
                        device_counters, prepare_guest, verify_guest)
from hb.testlib import (BUILD, CURRENT, Skip, assert_intact,
                        have_ours_driver, migrate, tag)

MEM = 512                 # MiB: TCG migrations of 512 MiB take ~10-15 s
HELD = "hint_mode=alloc"  # our driver holding hinted blocks until DONE
THROTTLE = 2 << 20        # bytes/s while a round is held open
FAST = 10 << 30
SANITIZER_RE = re.compile(r"(ERROR: AddressSanitizer|runtime error:|"
                          r"ERROR: LeakSanitizer|SUMMARY: \w+Sanitizer)")
OOM_RE = re.compile(r"(Out of memory|oom-kill|invoked oom-killer)")

_OVERRIDE = {}            # set by the sanitizer run
SANITIZER_REPORTS = []


def our_qemu():
    """The patched QEMU (HB_OUR_QEMU overrides); waits while others rebuild
    it (the file is briefly missing during `install`)."""
    path = (_OVERRIDE.get("qemu") or os.environ.get("HB_OUR_QEMU")
            or harness.OUR_QEMU)
    deadline = time.time() + 600
    while not (os.path.isfile(path) and os.access(path, os.X_OK)):
        if time.time() > deadline:
            raise Skip(f"no QEMU at {path}")
        time.sleep(5)
    return path


def need_ours():
    if not have_ours_driver():
        raise Skip("our driver is not built")


def tmpdir(label):
    base = os.path.join(BUILD, "tmp")
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"hb-rel-{label}-", dir=base)


def held_parts(stats):
    """'inflight:N,acked:M' -> {"inflight": N, "acked": M} (pages)."""
    h = stats.get("held_pages", "")
    return {k: int(v) for k, v in (x.split(":") for x in str(h).split(",")
                                   if ":" in x)}


def held(stats):
    """Pages held, in flight or acked."""
    return sum(held_parts(stats).values())


class Rig:
    """A guest that moves between QEMUs: boot, migrate (possibly throttled,
    cancelled, failed), verify.  Every VM it starts ends in close()."""

    def __init__(self, label, balloon="ours", mem_mib=MEM, hint=True,
                 balloon_args="", device_props="", binary=None,
                 workload="stale", ticker=True):
        self.label = label
        self.binary = binary or our_qemu()
        self.dir = tmpdir(label)
        self.balloon = balloon
        self.common = dict(mem_mib=mem_mib, balloon=balloon, hint=hint,
                           balloon_args=balloon_args,
                           device_props=device_props)
        self.sc = Scenario(workload, mem_mib=mem_mib, settle=0.5,
                           ticker=ticker)
        self.res = {}
        self.n = 0
        self.vm = None
        self.dst = None
        self.vms = []
        self.passed = False

    # -- VMs -------------------------------------------------------------
    def new_vm(self, binary=None, incoming=False, **over):
        self.n += 1
        uri = f"unix:{self.dir}/mig{self.n}.sock" if incoming else None
        kw = dict(self.common, **over)
        vm = VM(self.dir, f"vm{self.n}", binary or self.binary,
                incoming=uri, **kw)
        self.vms.append(vm)
        return vm

    def boot(self, binary=None, prepare=True, **over):
        self.vm = self.new_vm(binary, **over)
        self.vm.boot()
        if prepare:
            self.prepare()
        return self.vm

    def prepare(self):
        self.res = {}
        prepare_guest(self.vm, self.sc, self.res)

    def close(self):
        for vm in self.vms:
            vm.kill()
        for log in glob.glob(os.path.join(self.dir, "*.log")):
            with open(log, errors="replace") as f:
                hits = [ln.rstrip() for ln in f if SANITIZER_RE.search(ln)]
            if hits:
                SANITIZER_REPORTS.append((log, hits[:20]))
        if self.passed and not SANITIZER_REPORTS:
            subprocess.call(["rm", "-rf", self.dir])

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        self.passed = exc_type is None
        self.close()
        return False

    # -- migration -------------------------------------------------------
    def start_migration(self, bw=FAST, binary=None, **over):
        dst = self.new_vm(binary, incoming=True, **over)
        dst.launch()
        self.counters0 = device_counters(self.vm) or {}
        harness.start_migration(self.vm, dst, bw, harness.DOWNTIME_LIMIT_MS)
        CURRENT.add("migrations")
        self.dst = dst
        return dst

    def mig_status(self):
        return self.vm.qmp("query-migrate")

    def unthrottle(self):
        self.vm.qmp("migrate-set-parameters", **{"max-bandwidth": FAST})

    def wait_end(self, timeout=300):
        return harness.wait_migration(self.vm, timeout)

    def cancel(self):
        """migrate_cancel; the destination is left to die."""
        self.vm.qmp("migrate_cancel")
        info = self.wait_end(60)
        assert info["status"] == "cancelled", info
        if self.dst:
            self.dst.kill()
            self.dst = None
        CURRENT.add("faults")
        return info

    def finish(self, timeout=300):
        """Wait for completion; the destination becomes the VM."""
        info = self.wait_end(timeout)
        assert info["status"] == "completed", \
            f"migration {info['status']}: {info.get('error-desc')}"
        self.last_counters = device_counters(self.vm) or {}
        harness.wait_running(self.dst)
        self.vm.kill()
        self.vm, self.dst = self.dst, None
        self.vm.guest.connect()
        return info

    def migrate(self, binary=None, timeout=300, **over):
        self.start_migration(binary=binary, **over)
        return self.finish(timeout)

    def hinted_pages(self):
        """Pages the source QEMU cleared because of hints in the last
        migration (0 on stock QEMU)."""
        c0 = getattr(self, "counters0", {}) or {}
        c1 = getattr(self, "last_counters", {}) or {}
        return c1.get("cleared-pages", 0) - c0.get("cleared-pages", 0)

    # -- guest checks ----------------------------------------------------
    def stats(self):
        return balloon_stats(self.vm)

    def meminfo(self):
        return self.vm.guest.hbwork("meminfo")

    def wait_round_held(self, rounds_before, timeout=90):
        """Wait until the guest holds hinted blocks of a new round."""
        deadline = time.time() + timeout
        last = -1
        while True:
            s = self.stats()
            h = held(s)
            # a new round, and it is complete: what it holds stops growing
            if s.get("rounds", 0) > rounds_before and h > 0 and h == last:
                return s
            last = h
            if time.time() > deadline:
                raise AssertionError(f"no hint round held after {timeout}s:"
                                     f" {s} migration={self.mig_status()}")
            time.sleep(0.5)

    def wait_memory_back(self, before, timeout=60):
        """MemFree back near `before` and (our driver) nothing held."""
        tol = max(32 << 10, before["free_kb"] // 20)
        deadline = time.time() + timeout
        while True:
            m = self.meminfo()
            s = self.stats() if self.balloon == "ours" else {}
            ok = m["free_kb"] >= before["free_kb"] - tol and \
                (self.balloon != "ours" or held(s) == 0)
            if ok:
                print(f"    memory back: free {before['free_kb'] >> 10} -> "
                      f"{m['free_kb'] >> 10} MiB, held="
                      f"{s.get('held_pages', '-')}", flush=True)
                return m, s
            if time.time() > deadline:
                raise AssertionError(
                    f"free memory not back: before={before} now={m} "
                    f"held={s.get('held_pages')}")
            time.sleep(0.5)

    def verify(self, what=""):
        """Data check + kernel error check on the current VM."""
        ok = verify_guest(self.vm, self.sc, self.res)
        v = self.res["verify"]
        errs = self.vm.kernel_errors() + v.get("dmesg_errors", [])
        assert not errs, f"[{what}] kernel errors: {errs[:5]} ({self.dir})"
        assert ok, f"[{what}] guest data not intact: {v} ({self.dir})"
        CURRENT.add("bytes_verified", v.get("bytes_verified", 0))
        if self.sc.workload == "churn":     # verify_guest stopped it
            self.vm.guest.run(f"hbwork churn {self.sc.churn_rate} 0 64 "
                              "> /tmp/churn.out 2>&1 &")
        return v

    def no_oom(self):
        _, dmesg = self.vm.guest.run("dmesg", check=False)
        hits = [ln for ln in dmesg + self.vm.console_text().splitlines()
                if OOM_RE.search(ln)]
        assert not hits, f"OOM: {hits[:5]}"


def _held_round(rig):
    """Start a throttled migration and wait until the guest holds a round.
    Returns (meminfo before the round, guest stats during it)."""
    before = rig.meminfo()
    r0 = rig.stats().get("rounds", 0) if rig.balloon == "ours" else 0
    rig.start_migration(bw=THROTTLE)
    s = rig.wait_round_held(r0)
    m = rig.meminfo()
    # the round took real memory away: otherwise the fault tests nothing
    assert m["free_kb"] < before["free_kb"] - (64 << 10), (before, m)
    print(f"    round held: rounds={s.get('rounds')} held={s.get('held_pages')}"
          f" free {before['free_kb'] >> 10} -> {m['free_kb'] >> 10} MiB",
          flush=True)
    return before, s


def _final_migration(rig, what):
    """A full migration to a new destination that must hint and keep data."""
    r0 = rig.stats().get("rounds", 0)
    rig.migrate()
    s = rig.stats()
    assert s.get("rounds", 0) > r0 or s.get("bytes_hinted", 0) > 0, \
        f"[{what}] guest did not hint: {s}"
    assert rig.hinted_pages() > 0, \
        f"[{what}] host cleared no page: {rig.last_counters}"
    print(f"    final migration: host cleared {rig.hinted_pages() >> 8} MiB, "
          f"guest rounds={s.get('rounds')}", flush=True)
    rig.verify(what)
    rig.wait_memory_back(rig.res["meminfo_before"])


# ---------------------------------------------------------------------------
# Faults during a round
# ---------------------------------------------------------------------------

@tag("reliability", "faults")
def test_cancel_during_round_then_migrate_again():
    """migrate_cancel twice (during the pre-send wait while the guest is
    still hinting, then while it holds the round); memory comes back each
    time; a third migration to a new destination hints and keeps data."""
    need_ours()
    with Rig("cancel", balloon_args=HELD) as rig:
        rig.boot()
        # 1: cancel right away (pre-send wait / round being filled)
        before = rig.meminfo()
        rig.start_migration(bw=THROTTLE)
        time.sleep(0.5)
        rig.cancel()
        rig.wait_memory_back(before)
        # 2: cancel while the round is held
        before, _ = _held_round(rig)
        rig.cancel()
        rig.wait_memory_back(before)
        assert rig.vm.machine.is_running()
        _final_migration(rig, "after cancel")


@tag("reliability", "faults")
def test_destination_killed_mid_migration():
    """SIGKILL the destination QEMU while the source guest holds a round:
    the migration fails, the source keeps running and gets every hinted
    block back; a second migration to a new destination succeeds."""
    need_ours()
    with Rig("dstkill", balloon_args=HELD) as rig:
        rig.boot()
        before, _ = _held_round(rig)
        rig.dst.kill()
        rig.dst = None
        CURRENT.add("faults")
        info = rig.wait_end(120)
        assert info["status"] == "failed", info
        assert rig.vm.qmp("query-status")["status"] == "running"
        rig.wait_memory_back(before)
        _final_migration(rig, "after destination killed")


@tag("reliability", "faults")
def test_system_reset_during_round():
    """system_reset of the source while the guest holds a round: the guest
    reboots cleanly (HB READY again), no kernel error, and the next
    migration hints and keeps data."""
    need_ours()
    with Rig("reset", balloon_args=HELD) as rig:
        rig.boot()
        _held_round(rig)
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
        _final_migration(rig, "after system_reset")


@tag("reliability", "faults")
def test_rmmod_during_round():
    """rmmod virtio_balloon while it holds a round: no crash, every held
    block freed (MemFree back); reload it and hint again."""
    need_ours()
    with Rig("rmmod", balloon_args=HELD) as rig:
        rig.boot()
        before, s = _held_round(rig)
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
                    if harness.KERNEL_ERROR_RE.search(ln)], dmesg[-20:]
        rig.vm.guest.run("insmod /lib/hb/ours/virtio_balloon.ko")
        s = rig.stats()
        assert "rounds" in s and held(s) == 0, s
        rig.cancel()
        rig.wait_memory_back(before)
        _final_migration(rig, "after rmmod/insmod")


@tag("reliability", "faults")
def test_memory_pressure_during_round():
    """hbwork pressure while the guest holds nearly all free memory in a
    round: the shrinker hands acked blocks back, nothing is OOM-killed,
    the migration completes with data intact and nothing stays held."""
    need_ours()
    with Rig("pressure", balloon_args=HELD) as rig:
        rig.boot()
        before, s = _held_round(rig)
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


@tag("reliability", "faults")
def test_scan_mode_exit_paths():
    """Scan mode: a round takes no memory (MemFree unchanged while the
    migration is throttled); cancel, then a destination killed mid-way:
    each time the source keeps running with its memory, and a final
    migration hints and keeps data.  Scan needs a QEMU offering
    HINT_KEEP_WRITES (bit 16)."""
    need_ours()
    from test_45_guest_contract import _offers_keep_writes
    if not _offers_keep_writes(our_qemu()):
        raise Skip("our QEMU does not offer free-page-hint-keep-writes")
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
                rig.dst.kill()
                rig.dst = None
                CURRENT.add("faults")
                assert rig.wait_end(120)["status"] == "failed"
            assert rig.vm.qmp("query-status")["status"] == "running"
            rig.wait_memory_back(before)
        _final_migration(rig, "scan mode after cancel and kill")


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


@tag("reliability", "faults")
def test_back_and_forth_with_churn_3():
    """Three migrations in a row (a -> b -> c -> d, each a new QEMU) with
    churn running; data verified after each."""
    _back_and_forth(3)


@tag("soak", "long")
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


@tag("reliability", "faults")
def test_round_stop_waits_for_a_batch_in_flight():
    """data-safety.md section 8: the bitmap sync that ends a round must not
    run while a batch that already popped the guest's stop is still to
    clear its ranges.  scripts/repro_stop_race.py makes that interleaving
    likely (gdb holds the balloon iothread 90 ms at every range clear while
    the guest writes 64 MiB/s of fresh allocations); the series before the
    fix lost 548-766 pages in 6 of 11 such runs.  Three runs: no page lost,
    no kernel error."""
    need_ours()
    r = subprocess.run([sys.executable,
                        os.path.join(harness.TOP, "scripts",
                                     "repro_stop_race.py"),
                        our_qemu(), "0.09", "3"],
                       capture_output=True, text=True, timeout=900)
    lines = [ln for ln in r.stdout.splitlines()
             if ln.startswith(("run ", "lost pages"))]
    for ln in lines:
        print(f"    {ln}")
    CURRENT.add("migrations", 3)
    CURRENT.add("faults", 3)
    assert r.returncode == 0, (lines or r.stderr[-2000:])


class IothreadGate:
    """Hold a QEMU's free page hint bottom half at its entry (before it
    takes free_page_lock) with a breakpoint that stops only the balloon's
    iothread.  gdb stays free to serve the other threads (a breakpoint that
    sleeps inside gdb would leave every thread that gets a signal
    stopped)."""

    def __init__(self, vm, workdir):
        self.gdb = harness.NonStopGdb(vm.machine.get_pid(), workdir)

    def close_gate(self):
        self.gdb.send("break virtio_balloon_get_free_page_hints",
                      "Breakpoint")

    def open_gate(self):
        self.gdb.send("delete\ncontinue -a &", "Continuing.")

    def stop(self):
        self.gdb.detach()


@tag("reliability", "faults")
def test_done_frees_chains_the_device_returns_late():
    """DONE arrives while the device still has the round's chains (its
    bottom half is held by gdb, before free_page_lock): the driver frees
    the acked blocks, and the held ones as soon as the device gives them
    back, however late (here 14 s after DONE; the driver used to retry for
    ~10 s and then keep them until the next round or a reset).  Then a
    full migration hints and keeps the data."""
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
            rig.cancel()                  # CLEANUP: DONE to the guest
            time.sleep(14)
            s = rig.stats()
            print(f"    14 s after DONE, device still holding: "
                  f"held_pages={s.get('held_pages')}", flush=True)
            assert held(s) > 0, f"chains came back with the gate shut: {s}"
            gate.open_gate()
            rig.wait_memory_back(before, 30)
        finally:
            gate.stop()
        CURRENT.add("faults")
        assert rig.vm.machine.is_running()
        _final_migration(rig, "after a late give-back")


# Legacy virtio-pci: the driver writes GUEST_FEATURES (BAR0 + 4) and may
# rewrite it at any time (it never sets FEATURES_OK).  A 1-byte write there
# sets the device's guest features to that byte.
LEGACY_FEATURES = ('d=$(grep -l 0x1002 /sys/bus/pci/devices/*/device); '
                   'd=${d%/device}; '
                   'io=$(( $(head -1 $d/resource | cut -d" " -f1) + 4 )); ')


@tag("reliability", "faults")
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
        before, _ = _held_round(rig)
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


@tag("reliability", "faults")
def test_postcopy_with_hinting():
    """postcopy-ram on both sides (stock 7.2 turns hinting off then): the
    round runs in the precopy phase, migrate-start-postcopy switches over
    while most of RAM is unsent, and the destination runs (the ticker
    re-reads its data every 2 s) while the rest arrives.  Hinted pages are
    not sent, nothing stays held, data intact, no kernel error."""
    need_ours()
    stale = MEM * 75 // 100
    for driver, args in (("ours", ""), ("intree", "")):
        res = migrate(f"postcopy-{driver}", src_bin=our_qemu(),
                      balloon=driver, hint=True, balloon_args=args,
                      scenario=Scenario("stale", mem_mib=MEM,
                                        postcopy_after_s=3))
        assert_intact(res, f"postcopy, {driver} driver")
        assert "postcopy-active" in res["states"], res["states"]
        c = res.get("device_src") or {}
        assert c.get("cleared-pages", 0) > 0, f"host took no hint: {c}"
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


@tag("reliability", "faults")
def test_guest_without_driver_never_answers():
    """hb.balloon=none: nobody answers the command id; the migration still
    completes (after the bounded pre-send wait) with data intact."""
    CURRENT.add("faults")
    res = _never_answers("rel-nodriver", "none")
    # FREE_PAGE_HINT was never negotiated: no round, no wait at all
    c = res.get("device_src") or {}
    assert c.get("presend-waits", 0) == 0, c


@tag("reliability", "faults")
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


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------

KNOB_DIR = "/sys/bus/virtio/devices/virtio0/free_page_hint"
COMMON_BAD = ["\n", "abc", "-1", "5x", "1 2", "0x10", "1\n\n", " 1",
              "1.5", "99999999999999999999", "4294967296", "18446744073709551616"]
KNOB_BAD = {
    "enabled": ["2", "100"],
    "drop_cache": ["2"],
    "min_order": ["11", "64"],
    "alloc_min_order": ["11", "64"],
    "blocks_per_chain": ["0", "65", "1024"],
    "chains_per_kick": ["0", "257"],
    "reserve_kb": ["4294967295"],          # > total RAM in KiB
    "mode": ["0", "1", "Auto", "Scan", "allocx", "scan alloc", "+scan"],
}
KNOB_GOOD = {"enabled": "1", "drop_cache": "0", "min_order": "3",
             "alloc_min_order": "3",
             "blocks_per_chain": "8", "chains_per_kick": "4",
             "reserve_kb": "0", "mode": "alloc"}


def _write_knob(vm, knob, value):
    return harness.write_sysfs(vm, f"{KNOB_DIR}/{knob}", value)


@tag("reliability", "bad_input")
def test_sysfs_knobs_reject_bad_values():
    """Every knob: empty, non-numeric, negative, zero (where out of range),
    huge, out-of-range, trailing garbage -> EINVAL, value unchanged; valid
    values (with and without one newline, leading '+') are taken.  Bad
    module parameters make insmod fail."""
    need_ours()
    with Rig("sysfs", ticker=False) as rig:
        rig.boot(prepare=False)
        vm = rig.vm
        bad_ok = []
        for knob, extra in KNOB_BAD.items():
            for v in COMMON_BAD + extra:
                rc, b, a, err = _write_knob(vm, knob, v)
                CURRENT.add("bad_inputs")
                if rc == 0 or a != b or "Invalid argument" not in err:
                    bad_ok.append((knob, v, rc, b, a, err))
            # the zero-length write(2) never reaches ->store (sysfs)
            rc, b, a, _ = _write_knob(vm, knob, "")
            assert a == b, (knob, "empty", b, a)
            good = KNOB_GOOD[knob]
            signed = [] if knob == "mode" else ["+" + good]
            for v in [good, good + "\n"] + signed:
                rc, b, a, err = _write_knob(vm, knob, v)
                assert rc == 0 and a == good, (knob, repr(v), rc, a, err)
        assert not bad_ok, f"bad values accepted or changed: {bad_ok}"
        # cross-knob constraint after valid writes: still a working device
        assert not vm.kernel_errors()
        # module parameters: validated with the same function at load time
        vm.guest.run("rmmod virtio_balloon")
        bad_params = ["hint_min_order=11", "hint_alloc_min_order=11",
                      "hint_blocks_per_chain=0",
                      "hint_blocks_per_chain=65", "hint_chains_per_kick=0",
                      "hint_chains_per_kick=257", "hint_enabled=2",
                      "hint_drop_cache=7", "hint_reserve_kb=4294967295",
                      "hint_mode=bogus", "hint_mode="]
        loaded = []
        for p in bad_params:
            rc, out = vm.guest.run(
                f"insmod /lib/hb/ours/virtio_balloon.ko {p}", check=False)
            CURRENT.add("bad_inputs")
            if rc == 0:
                loaded.append(p)
                vm.guest.run("rmmod virtio_balloon", check=False)
        vm.guest.run("insmod /lib/hb/ours/virtio_balloon.ko")
        assert not loaded, f"insmod accepted bad parameters: {loaded}"
        assert not vm.kernel_errors(), vm.kernel_errors()


FAULTS = ("out_of_ram", "stale_id", "misaligned", "oversized_chain")
# host counter that must increase for each injected fault
FAULT_COUNTER = {"zero_len": ["ignored-zero-length"],
                 "out_of_ram": ["ignored-not-ram", "ignored-cross-block"],
                 "stale_id": ["stale-cmd-ids", "ignored-stale"],
                 "misaligned": ["ignored-unaligned"],
                 "oversized_chain": ["ranges"]}
VIRTIO_ERROR_RE = re.compile(r"virtio: |virtio-balloon: |Assertion|"
                             r"Segmentation|core dumped")
DEBUGFS = "/sys/kernel/debug/virtio_balloon/virtio0/inject_bad_hints"


def _qemu_errors(rig, vm):
    """virtio/sanitizer errors in one QEMU's stderr log."""
    lg = os.path.join(rig.dir, f"{vm.name}.log")
    try:
        with open(lg, errors="replace") as f:
            return [ln.strip() for ln in f if VIRTIO_ERROR_RE.search(ln)
                    or SANITIZER_RE.search(ln)]
    except OSError:
        return []


def _injected(vm):
    """The driver's fault injection counts: {fault name: its debugfs line}."""
    _, out = vm.guest.run(f"cat {DEBUGFS}")
    return {ln.split()[0]: ln for ln in out if ln.split()}


def _bad_hints(label, groups):
    """For each group of faults: arm them, migrate, and check: injected,
    each counted by the host by reason, no virtio error in the source
    QEMU's log, data intact, and the destination guest gets every hinted
    block back.  One fault group per migration: a stale command id stops
    the host's round (as in stock), so hints after it count as stale."""
    need_ours()
    with Rig(label, balloon_args="fault_inject=1") as rig:
        rig.boot()
        for faults in groups:
            for f in faults:
                rig.vm.guest.run(f"echo {f} > {DEBUGFS}")
            src = rig.vm
            rig.migrate()
            CURRENT.add("bad_inputs", len(faults))
            c0, c1 = rig.counters0, rig.last_counters
            delta = {k: c1[k] - c0.get(k, 0) for k in c1
                     if isinstance(c1[k], int) and k != "cmd-id"}
            print(f"    {'+'.join(faults)}: host counters {delta}",
                  flush=True)
            errs = _qemu_errors(rig, src)
            injected = _injected(rig.vm)
            try:
                m, s = rig.wait_memory_back(rig.res["meminfo_before"], 30)
            except AssertionError as exc:
                m, s = None, str(exc)
            assert not errs, f"QEMU reported errors: {errs} ({rig.dir})"
            missing = [f for f in faults
                       if "injected=0" in injected.get(f, "injected=0")]
            assert not missing, f"driver did not inject {missing}: {injected}"
            not_counted = [f for f in faults if not any(
                delta.get(k, 0) > 0 for k in FAULT_COUNTER[f])]
            assert not not_counted, \
                f"host did not count {not_counted}: {delta}"
            assert delta.get("cleared-pages", 0) > 0, delta
            assert m is not None, f"destination guest: {s}"
            rig.verify("+".join(faults))
            assert rig.vm.machine.is_running()


@tag("reliability", "bad_input")
def test_malformed_hints_are_ignored_and_counted():
    """Our driver with fault_inject=1 sends out-of-RAM, misaligned and
    oversized-chain hints in one migration's first round, then a stale
    command id in the next migration's: the host ignores each and counts
    it by reason, QEMU reports no error, the data is intact and the
    destination guest gets all its hinted memory back."""
    _bad_hints("badhints", [("out_of_ram", "misaligned", "oversized_chain"),
                            ("stale_id",)])


@tag("reliability", "bad_input")
def test_zero_length_hint_is_ignored_and_counted():
    """The same for a zero-length hint (`zero_len`)."""
    _bad_hints("zerolen", [("zero_len",)])


@tag("reliability", "bad_input")
def test_short_command_id_breaks_only_the_device():
    """A command id of 2 bytes instead of 4 (`short_cmd`) in a migration's
    round: the source QEMU breaks the balloon device (virtio_error,
    "received an incorrect cmd id", raised once free_page_lock is released)
    and nothing else.  QMP keeps answering, the migration completes, the
    guest's data is intact on the destination with no kernel error, and the
    destination guest has its free memory back."""
    need_ours()
    with Rig("shortcmd", balloon_args="fault_inject=1") as rig:
        rig.boot()
        rig.vm.guest.run(f"echo short_cmd > {DEBUGFS}")
        src = rig.vm
        rig.migrate()
        CURRENT.add("bad_inputs")
        with open(os.path.join(rig.dir, f"{src.name}.log"),
                  errors="replace") as f:
            log = f.read()
        injected = _injected(rig.vm)
        assert "injected=0" not in injected.get("short_cmd", "injected=0"), \
            f"driver did not inject short_cmd: {injected}"
        assert log.count("received an incorrect cmd id") == 1, \
            f"source QEMU did not break the device once ({rig.dir}): {log}"
        errs = _qemu_errors(rig, src)
        assert not errs, f"QEMU reported other errors: {errs} ({rig.dir})"
        rig.wait_memory_back(rig.res["meminfo_before"], 30)
        rig.verify("short_cmd")
        assert rig.vm.machine.is_running()


def _qemu_cmdline(binary, device):
    return [binary, "-accel", "tcg", "-nodefaults", "-no-user-config",
            "-machine", "pc-i440fx-7.2", "-display", "none", "-m", "128",
            "-L", "/usr/share/qemu", "-L", "/usr/share/seabios",
            "-L", "/usr/lib/ipxe/qemu", "-S", "-qmp", "null",
            "-object", "iothread,id=io0", "-device", device]


BAD_PROPS = [
    ("free-page-hint-wait-ms=60001", "free-page-hint-wait-ms"),
    ("free-page-hint-wait-ms=4294967296", "free-page-hint-wait-ms"),
    ("free-page-hint-wait-ms=-1", "free-page-hint-wait-ms"),
    ("free-page-hint-wait-ms=abc", "free-page-hint-wait-ms"),
    ("free-page-hint-batch-max=0", "free-page-hint-batch-max"),
    ("free-page-hint-batch-max=1025", "free-page-hint-batch-max"),
    ("free-page-hint-batch-max=x1", "free-page-hint-batch-max"),
    ("free-page-hint-postcopy=maybe", "free-page-hint-postcopy"),
    ("free-page-hint-stats=1", "free-page-hint-stats"),
    ("iothread=nosuch", "nosuch"),
]


@tag("reliability", "bad_input")
def test_invalid_device_properties_on_command_line():
    """Each invalid property value: QEMU exits non-zero at once with an
    error naming the property; valid boundary values start."""
    qemu = our_qemu()
    base = "virtio-balloon-pci,id=balloon0,free-page-hint=on,iothread=io0"
    problems = []
    for prop, word in BAD_PROPS + [("free-page-hint=on", "iothread")]:
        dev = (base + "," + prop if not prop.startswith("free-page-hint=")
               else "virtio-balloon-pci,id=balloon0," + prop)
        CURRENT.add("bad_inputs")
        try:
            p = subprocess.run(_qemu_cmdline(qemu, dev), capture_output=True,
                               text=True, timeout=30)
        except subprocess.TimeoutExpired:
            problems.append((prop, "QEMU started"))
            continue
        if p.returncode == 0 or word not in p.stderr:
            problems.append((prop, p.returncode, p.stderr.strip()[:200]))
    # valid boundaries must start (QEMU still running after 3 s)
    for prop in ("free-page-hint-wait-ms=60000", "free-page-hint-wait-ms=0",
                 "free-page-hint-batch-max=1",
                 "free-page-hint-batch-max=1024"):
        p = subprocess.Popen(_qemu_cmdline(qemu, base + "," + prop),
                             stderr=subprocess.PIPE, text=True)
        try:
            p.wait(timeout=3)
            problems.append((prop, "valid value rejected",
                             p.stderr.read()[:200]))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert not problems, problems


@tag("reliability", "bad_input")
def test_invalid_device_properties_via_qom_set():
    """qom-set of the hint properties on a running VM: error, value
    unchanged; the stats property is read-only."""
    qemu = our_qemu()
    d = tmpdir("qomset")
    vm = VM(d, "qom", qemu, 256, "none", hint=True)
    problems = []
    try:
        vm.launch()
        paths = ["/machine/peripheral/balloon0",
                 "/machine/peripheral/balloon0/virtio-backend"]
        for path in paths:
            for prop, val in [("free-page-hint-wait-ms", 60001),
                              ("free-page-hint-wait-ms", 5),
                              ("free-page-hint-wait-ms", "abc"),
                              ("free-page-hint-batch-max", 0),
                              ("free-page-hint-batch-max", 2048),
                              ("free-page-hint-postcopy", "maybe"),
                              ("free-page-hint", False),
                              ("free-page-hint-stats", {"rounds": 5})]:
                try:
                    before = vm.qmp("qom-get", path=path, property=prop)
                except Exception as exc:  # pylint: disable=broad-except
                    before = f"<{exc}>"
                CURRENT.add("bad_inputs")
                try:
                    vm.qmp("qom-set", path=path, property=prop, value=val)
                    problems.append((path, prop, val, "accepted"))
                except Exception:  # pylint: disable=broad-except
                    pass
                try:
                    after = vm.qmp("qom-get", path=path, property=prop)
                except Exception as exc:  # pylint: disable=broad-except
                    after = f"<{exc}>"
                if isinstance(before, dict):
                    before.pop("status", None)
                    after.pop("status", None) if isinstance(after, dict) \
                        else None
                if before != after:
                    problems.append((path, prop, val, before, after))
        assert vm.machine.is_running()
        vm.kill()
    finally:
        vm.kill()
    assert not problems, problems
    subprocess.call(["rm", "-rf", d])


# ---------------------------------------------------------------------------
# Sanitizer run: the fault tests once against build/qemu-asan/
# ---------------------------------------------------------------------------

@tag("sanitize")
def test_faults_against_sanitizer_build():
    """Run the hinting and fault tests above against the ASan/UBSan QEMU
    (`SANITIZE=1 scripts/build-qemu.sh`) and fail on any sanitizer report
    in QEMU's stderr."""
    asan = os.environ.get("HB_ASAN_QEMU",
                          os.path.join(BUILD, "qemu-asan",
                                       "qemu-system-x86_64"))
    if not os.access(asan, os.X_OK):
        raise Skip(f"no sanitizer build at {asan} "
                   "(SANITIZE=1 bash scripts/build-qemu.sh)")
    _OVERRIDE["qemu"] = asan
    del SANITIZER_REPORTS[:]
    failed = []
    try:
        for t in (test_cancel_during_round_then_migrate_again,
                  test_destination_killed_mid_migration,
                  test_system_reset_during_round,
                  test_rmmod_during_round,
                  test_memory_pressure_during_round,
                  test_back_and_forth_with_churn_3,
                  test_malformed_hints_are_ignored_and_counted,
                  test_zero_length_hint_is_ignored_and_counted,
                  test_short_command_id_breaks_only_the_device,
                  test_invalid_device_properties_via_qom_set):
            try:
                t()
            except (AssertionError, GuestError) as exc:
                failed.append((t.__name__, str(exc)[:300]))
    finally:
        _OVERRIDE.pop("qemu", None)
    # migrate_once's directories of passing runs are deleted: their QEMU
    # logs were clean or the run failed (and its directory is kept)
    assert not SANITIZER_REPORTS, SANITIZER_REPORTS
    assert not failed, failed
