# SPDX-License-Identifier: GPL-2.0
"""The detectors fail a run when they should.  Each test damages one thing
on purpose in a hinted migration of our stack and expects the verdict to
say so: one flipped byte of the kept data on the destination (data check
and the ticker), a zeroed word in the hold region and in the churn
buffers (data check), a kernel error line on the source's console alone
and on the destination's (console scans), an error line in the source
QEMU's stderr (stderr scan), a real kernel crash of the destination, a
migration without hinting, in the other mode, or whose hints covered too
little or sent too much (hinting check, the last two on doctored copies of
a real record; so are an in-tree driver's hints that all came late, run
again up to three times), a hook's failed assert (propagates), a workload whose
setup failed (setup check), a guest whose setup failed (boot check), a
QEMU that aborts during boot (only the stock reference is launched again,
and counted), a leak and a run-time error in an ASan build of our QEMU
(sanitizer reports; `make check SANITIZE=1`).  test_71 shows the stderr scan on a device error too (a
command id the device rejects)."""
import copy
import os
import re
import signal
import subprocess

from hb import env
from hb.channel import GuestError, SetupError
from hb.migration import wait_migration
from hb.rigs import BootedGuest, tmpdir
from hb.testlib import (FLOOR_FACTOR, HINT_COVERAGE, LATE_HINT_RUNS, Skip,
                        assert_hinted, assert_intact, assert_not_intact,
                        drop_workdir, hint_figures, migrate, migrate_hinted,
                        need_ours, our_qemu, record_reference, tag)
from hb.vm import SANITIZER_REPORTS, STOCK_CRASHES, VM, live_vms
from hb.workloads import HBWORK_PIDS, Scenario, prepare_guest, wait_guest

MEM = 512
KEEP = "/data/keep"


def _run(label, **kw):
    need_ours()
    return migrate(label, src_bin=our_qemu(), balloon="ours", hint=True,
                   scenario=Scenario("stale", mem_mib=MEM), **kw)


def _kmsg(vm, text):
    """Make the guest kernel print `text` on its console at level err."""
    vm.guest.run(f"echo '<3>{text}' > /dev/kmsg")


def _fails(check, what, *args):
    """check(*args) must raise AssertionError; returns its message."""
    try:
        check(*args)
    except AssertionError as exc:
        print(f"    {check.__name__} failed as it should ({what}): "
              f"{str(exc)[:300]}")
        return str(exc)
    raise AssertionError(f"{check.__name__} passed a run with {what}")


def _zero_words(vm, verb, quarters=(2,)):
    """Damage the data of the running `hbwork VERB` process (the hold
    daemon's region, the churn ring): zero one 8-byte word (hbwork's data
    never has one) at each of `quarters` quarters of its largest anonymous
    mapping, through /proc/PID/mem, the process stopped meanwhile."""
    pid = f"$({HBWORK_PIDS.format(verb=verb)} | head -1)"
    _, out = vm.guest.run(
        f"p={pid}; kill -STOP $p; best=0; size=0; "
        "while read r perm off dev inode path; do "
        '[ "$perm" = rw-p ] && [ -z "$path" ] || continue; '
        "s=$((0x${r%-*})); e=$((0x${r#*-})); "
        "[ $((e - s)) -gt $size ] && { size=$((e - s)); best=$s; }; "
        "done < /proc/$p/maps; "
        f"for q in {' '.join(map(str, quarters))}; do "
        "at=$(((best + size * q / 4 + 4096 * 3 + 64) / 8)); "
        "dd if=/dev/zero of=/proc/$p/mem bs=8 count=1 seek=$at "
        "conv=notrunc 2>/dev/null && echo ZEROED pid=$p word=$at "
        "mapping=$size; done; kill -CONT $p")
    zeroed = [x for x in out if x.startswith("ZEROED")]
    assert len(zeroed) == len(quarters), f"not every word zeroed: {out}"
    return zeroed


@tag("migrate", "detector")
def test_detector_one_flipped_byte_on_destination_is_damage():
    """Flip one byte in the middle of the kept file on the destination
    before verification: verdict "damaged" (data_intact False), exactly one
    bad page; the source console's kernel error line is reported apart
    from the data verdict."""
    def source(vm, _res):
        _kmsg(vm, "BUG: detector self-test line on the source")

    def destination(vm, _res):
        out = vm.guest.hbwork(f"poke {KEEP} {5 << 20 | 1234}")
        assert out.get("ok") == 1, out
        # let the ticker run one pass over the damaged file
        _, n = vm.guest.run("wc -l < /tmp/ticker.out")
        wait_guest(vm.guest, f"test $(wc -l < /tmp/ticker.out) "
                   f"-gt {n[0]}", "no ticker pass after the poke")

    res = _run("detector-poke", on_source_ready=source,
               on_destination=destination)
    assert_hinted(res, "scan", "detector")
    assert res["status"] == "completed", res.get("error")
    assert res["data_intact"] is False, f"verdict not damaged: {res['verify']}"
    keep = res["verify"]["keep"]
    assert keep.get("bad_pages") == 1, keep
    assert res["verify"]["ticker"]["bad"], \
        f"the ticker did not see the damage: {res['verify']['ticker']}"
    # (the destination's dmesg holds the source's line too: the kernel log
    # buffer is guest memory and migrates with it)
    assert any("detector self-test" in ln
               for ln in res["src_console_errors"]), res["src_console_errors"]
    assert res["ok"] is False
    assert_not_intact(res, "one flipped byte")


@tag("migrate", "detector")
def test_detector_kernel_error_on_destination_console():
    """A kernel error line on the destination console (printed once the
    data was verified, so that verification itself runs to its end) fails
    the run although every byte of data is intact."""
    def destination(vm, _res):
        _kmsg(vm, "BUG: detector self-test line on the destination")

    res = _run("detector-dst-bug", on_verified=destination)
    assert_hinted(res, "scan", "detector")
    assert res["data_intact"] is True, res.get("verify")
    assert any("detector self-test" in ln for ln in res["kernel_errors"]), \
        res["kernel_errors"]
    assert not res["src_console_errors"], res["src_console_errors"]
    assert res["ok"] is False
    msg = assert_not_intact(res, "a destination kernel error")
    assert "destination kernel errors" in msg, msg
    # the hinting check fails on a round in the other mode
    try:
        assert_hinted(res, "alloc", "detector")
    except AssertionError as exc:
        assert "not 'alloc'" in str(exc), exc
    else:
        raise AssertionError("assert_hinted took a scan round for alloc")


@tag("migrate", "detector")
def test_detector_hints_that_cover_too_little_or_send_too_much():
    """A clean hinted migration passes assert_hinted(); copies of its
    record doctored to what a weak hinter would give fail it: cleared
    pages cut to half the stale data the scenario freed (coverage check),
    bytes sent raised to twice the floor (floor check).  Copies made the
    in-tree driver's show migrate_hinted() run again a run whose hints all
    came late, and only such a run (_late_hints_run_again)."""
    res = _run("detector-hint-figures")
    assert_intact(res, "clean run")
    assert_hinted(res, "scan", "clean run")
    f = hint_figures(res)
    assert f["stale_mib"] > 0 and f["floor_mib"] > 0, f
    low = copy.deepcopy(res)
    low["device_src"]["cleared-pages"] = f["stale_mib"] * 256 // 2
    msg = _fails(assert_hinted, "hints that covered half the stale data",
                 low, "scan", "doctored")
    assert "covered too little stale data" in msg, msg
    assert f"less than {HINT_COVERAGE:.0%}" in msg, msg
    big = copy.deepcopy(res)
    big["transferred_mb"] = round(2 * f["floor_mib"] * 2**20 / 1e6, 1)
    msg = _fails(assert_hinted, "twice the floor sent", big, "scan",
                 "doctored")
    assert f"more than {FLOOR_FACTOR}x its floor" in msg, msg
    _late_hints_run_again(res)


def _late_hints_run_again(res):
    """migrate_hinted() on copies of `res` made the in-tree driver's: a run
    whose hints all came after the first sync is made again, and the next
    one that cleared pages passes; three such runs fail; a run whose hints
    the device dropped for a reason of its own is not made again."""
    intree = copy.deepcopy(res)
    intree["config"]["balloon"] = "intree"
    late = copy.deepcopy(intree)
    late["device_src"].update({"cleared-pages": 0, "ignored-stale": 62})
    bad = copy.deepcopy(late)
    bad["device_src"]["ignored-unaligned"] = 1
    for records, want_runs, passes in (((late, intree), 2, True),
                                       ((late,) * 3, LATE_HINT_RUNS, False),
                                       ((bad, intree), 1, False)):
        runs = []

        def run(n, records=records, runs=runs):
            runs.append(n)
            return copy.deepcopy(records[n - 1])
        if passes:
            out = migrate_hinted(run, None, "doctored")
            assert out.get("hint_runs") == want_runs, out.get("hint_runs")
        else:
            msg = _fails(migrate_hinted, "hints that never cleared a page",
                         run, None, "doctored")
            assert "cleared no page" in msg, msg
        assert runs == list(range(1, want_runs + 1)), (runs, want_runs)


@tag("migrate", "detector")
def test_detector_migration_without_hinting_is_not_hinted():
    """Our QEMU and driver with the device's free-page-hint off: the data
    is intact, and the hinting check fails."""
    need_ours()
    res = migrate("detector-nohint", src_bin=our_qemu(), balloon="ours",
                  hint=False, scenario=Scenario("stale", mem_mib=MEM))
    assert_intact(res, "no hinting")
    try:
        assert_hinted(res, "scan", "no hinting")
    except AssertionError as exc:
        print(f"    assert_hinted failed as it should: {str(exc)[:120]}")
    else:
        raise AssertionError("assert_hinted passed a migration without "
                             "hinting")


@tag("boot", "detector")
def test_detector_guest_setup_error_fails_the_boot():
    """A guest whose /init reports an error (our module refusing a bad
    parameter: HB ERROR insmod) fails its boot."""
    need_ours()
    d = tmpdir("hberror")
    vm = VM(d, "hberror", our_qemu(), 256, "ours", hint=True,
            balloon_args="hint_mode=bogus")
    try:
        vm.boot()
    except GuestError as exc:
        assert "HB ERROR insmod" in str(exc), exc
        print(f"    boot failed as it should: {exc}")
    else:
        raise AssertionError("a guest that printed HB ERROR booted")
    finally:
        vm.end()
    subprocess.call(["rm", "-rf", d])


def _abort_during_boot(vm):
    """Make vm's first launch end by SIGABRT, as a QEMU assertion does,
    before its guest is up."""
    launch = vm.launch
    fired = []

    def launch_then_abort():
        launch()
        if not fired:
            fired.append(vm.machine.get_pid())
            os.kill(fired[0], signal.SIGABRT)
    vm.launch = launch_then_abort
    return fired


@tag("boot", "detector")
def test_detector_qemu_crash_at_boot():
    """A QEMU that aborts before its guest is up: our QEMU fails the boot;
    the stock QEMU (the reference) is recorded and launched once more."""
    need_ours()
    d = tmpdir("hbabort")
    ours = VM(d, "ours", our_qemu(), 256, "ours", hint=True)
    fired = _abort_during_boot(ours)
    try:
        ours.boot()
    except GuestError as exc:
        assert fired and "QEMU exited (-6)" in str(exc), exc
        print(f"    our QEMU: boot failed as it should: {str(exc)[:120]}")
    else:
        raise AssertionError("our QEMU aborted at boot and the boot passed")
    finally:
        ours.end()
    before = len(STOCK_CRASHES)
    stock = VM(d, "stock", env.STOCK_QEMU, 256, "ours", hint=True)
    fired = _abort_during_boot(stock)
    try:
        stock.boot()
        assert fired, "the abort was not injected"
        assert len(STOCK_CRASHES) == before + 1, STOCK_CRASHES
        assert STOCK_CRASHES[-1]["signal"] == signal.SIGABRT
        assert os.path.exists(stock.console + ".crashed")
        _, out = stock.guest.run("echo up")
        assert out == ["up"], out
        print("    stock QEMU: crash recorded, launched again, guest up")
    finally:
        stock.end()
        # the summary counts crashes of stock, not the one injected here
        del STOCK_CRASHES[before:]
    subprocess.call(["rm", "-rf", d])


@tag("migrate", "detector")
def test_detector_destination_kernel_crash():
    """The destination kernel crashes (sysrq c) right after switch-over:
    the run fails with the panic recorded as a kernel error."""
    def crash(dst, _res):
        dst.guest.send("echo c > /proc/sysrq-trigger")
        dst.wait_console(r"Kernel panic|sysrq triggered crash", 60)

    res = _run("detector-crash", on_destination=crash)
    assert res["status"] == "completed", res.get("error")
    assert not res["ok"]
    assert res["kernel_errors"], "detector saw no kernel error"
    assert_not_intact(res, "a crashed destination")


@tag("migrate", "detector")
def test_detector_damaged_hold_region_is_damage():
    """One zeroed word in the hold daemon's region on the destination
    (before verification): its SIGUSR1 check reports one bad page, the
    verdict is "damaged"."""
    def destination(vm, res):
        res["zeroed"] = _zero_words(vm, "hold")

    res = _run("detector-hold", on_destination=destination)
    print(f"    {res['zeroed']}")
    hold = res["verify"]["hold"]
    assert hold and hold.get("ok") == 0 and hold.get("bad_pages") == 1, hold
    assert res["data_intact"] is False, res["verify"]
    msg = assert_not_intact(res, "a damaged hold region")
    assert "guest data not intact" in msg, msg


@tag("migrate", "detector")
def test_detector_damaged_churn_buffers_are_damage():
    """Zeroed words in the churn ring on the destination (three buffers:
    the one churn may be rewriting at that moment can only hide one):
    churn's own check reports bad pages, the verdict is "damaged"."""
    def destination(vm, res):
        res["zeroed"] = _zero_words(vm, "churn", (1, 2, 3))

    need_ours()
    res = migrate("detector-churn", src_bin=our_qemu(), balloon="ours",
                  hint=True, scenario=Scenario("churn", mem_mib=MEM),
                  on_destination=destination)
    print(f"    {res['zeroed']}")
    churn = res["verify"]["churn"]
    assert churn and churn.get("ok") == 0 and churn.get("bad_pages", 0) >= 1, \
        churn
    assert res["verify"].get("churn_bad_pages"), res["verify"]
    assert res["data_intact"] is False, res["verify"]
    msg = assert_not_intact(res, "damaged churn buffers")
    assert "guest data not intact" in msg, msg


@tag("migrate", "detector")
def test_detector_kernel_error_on_the_source_console_alone():
    """A kernel error line on the source console only: printed before the
    migration, then taken out of the kernel's log buffer (dmesg -c), so
    that neither the destination's console nor its dmesg has it.  The data
    is intact, the destination clean, and the run still fails."""
    line = "BUG: detector self-test line on the source console only"

    def source(vm, _res):
        _kmsg(vm, line)
        vm.guest.run("dmesg -c > /dev/null")
        vm.wait_console(line, 30)

    res = _run("detector-src-bug", on_source_ready=source)
    assert res["status"] == "completed", res.get("error")
    assert res["data_intact"] is True, res.get("verify")
    assert not res["kernel_errors"], res["kernel_errors"]
    assert any(line in ln for ln in res["src_console_errors"]), \
        res["src_console_errors"]
    assert res["ok"] is False
    msg = assert_not_intact(res, "a kernel error on the source console")
    assert "source kernel errors" in msg, msg


@tag("migrate", "detector")
def test_detector_qemu_stderr_error_fails_the_run():
    """The source QEMU prints an error on stderr during the run (a first
    migration to a socket nobody listens on fails: error_report() "Failed
    to connect"); the real migration then completes with the data intact,
    and the run fails on the stderr line."""
    def broken_first_try(src, _dst, res):
        src.qmp("migrate", uri="unix:/nonexistent/hb-detector.sock")
        info = wait_migration(src, 60)
        assert info.get("status") == "failed", info
        res["first_try"] = info

    res = _run("detector-stderr", before_migrate=broken_first_try)
    assert res["status"] == "completed", res.get("error")
    assert res["data_intact"] is True, res.get("verify")
    errs = res["qemu_errors"]["src"]
    assert any("Failed to connect" in ln for ln in errs), res["qemu_errors"]
    assert not res["qemu_errors"]["dst"], res["qemu_errors"]
    assert res["ok"] is False
    msg = assert_not_intact(res, "an error in the source QEMU's stderr")
    assert "QEMU stderr reports errors" in msg, msg


@tag("migrate", "detector")
def test_detector_hook_assertion_fails_the_test():
    """A hook's failed assert reaches the test (migrate_once does not turn
    it into a record the test might not look at), once every VM has
    ended; the record rides on the exception."""
    text = "detector self-test: a hook's own check failed"

    def source(_vm, _res):
        assert False, text

    try:
        _run("detector-hook", on_source_ready=source)
    except AssertionError as exc:
        assert text in str(exc), exc
        res = exc.res
        print(f"    the hook's AssertionError propagated: {exc}; record "
              f"error: {res.get('error')}")
    else:
        raise AssertionError("migrate_once kept a hook's AssertionError "
                             "in its record")
    assert not live_vms(), live_vms()
    assert res["error"].startswith("AssertionError: " + text), res["error"]
    drop_workdir(res)


@tag("boot", "detector")
def test_detector_failed_workload_setup_fails_the_run():
    """prepare_guest() checks every step of the workload's setup: the
    stale fill that cannot write its file (/data/stale is a directory)
    and the kept file that cannot be written either raise SetupError.
    Through migrate_once(), a fill that fails (an argument hbwork rejects)
    ends the run before the migration: assert_intact() fails on it, and
    record_reference() does not count it as stock's doing."""
    need_ours()
    with BootedGuest("hbsetup", our_qemu(), 256, "ours", True) as vm:
        # (what, the path made a directory, workload, the failing verb)
        for what, path, workload, verb in (
                ("stale fill", "/data/stale", "stale", "stale"),
                ("kept file", "/data/keep", "fresh", "keep")):
            vm.guest.run(f"mkdir {path}")
            try:
                prepare_guest(vm, Scenario(workload, mem_mib=256), {})
            except SetupError as exc:
                assert f"workload setup failed: 'hbwork {verb} {path}" \
                    in str(exc), exc
                print(f"    {what}: prepare_guest failed as it should: "
                      f"{exc}")
            else:
                raise AssertionError(f"prepare_guest went on after a {what}"
                                     " that failed")
            vm.guest.run(f"rmdir {path}")
    res = migrate("detector-setup", src_bin=our_qemu(), balloon="ours",
                  hint=True, scenario=Scenario("stale", mem_mib=256,
                                               seed="bad"))
    assert res["error"].startswith("SetupError: workload setup failed"), \
        res.get("error")
    assert "migration" not in res, "the run migrated after a failed setup"
    msg = _fails(assert_intact, "a failed workload setup", res)
    assert "SetupError" in msg, msg
    msg = _fails(record_reference, "a failed workload setup", res, "setup")
    assert "broke on our side" in msg, msg
    drop_workdir(res)


def _asan_build(binary):
    """Whether `binary` links the AddressSanitizer runtime (`make
    qemu-asan`)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True,
                         check=False).stdout
    return "libasan" in out


def _gdb_call(pid, *calls):
    """Attach gdb to `pid`, make each call in turn on one of its threads
    and detach; gdb's own output."""
    args = ["gdb", "-nx", "-batch", "-p", str(pid)]
    for c in calls:
        args += ["-ex", f"call {c}"]
    return subprocess.run(args, capture_output=True, text=True,
                          timeout=120, check=False).stdout


LEAK_BYTES = 54321


@tag("boot", "detector", "sanitize", "each_stack")
def test_detector_sanitizer_reports_fail_the_test():
    """Under `make check SANITIZE=1` every QEMU quits gracefully at the end
    of its test (VM.end()) and the test fails on its sanitizer reports
    (the runner, on hb.vm.SANITIZER_REPORTS).  Made to fire twice on the
    ASan/UBSan build of our QEMU: gdb has a running QEMU allocate memory
    and drop the pointer, and LeakSanitizer reports the leak when the QEMU
    quits; gdb has another call ASan's report function for a read of
    address 4096, which ASan reports at run time and ends the QEMU.  A
    third boots without the UBSan suppressions (tests/hb/ubsan.supp): its
    UBSan report of upstream code shows that each entry is still needed
    and that UBSan's reports reach the test too."""
    binary = our_qemu()
    if not _asan_build(binary):
        raise Skip(f"{binary} is not the ASan build (make check SANITIZE=1)")
    sanitize, env.SANITIZE = env.SANITIZE, True
    before = len(SANITIZER_REPORTS)
    d = tmpdir("hbsan")
    vms = []

    def fires(name, expect, *calls, suppress=True):
        """Boot a VM, have gdb make `calls` in its QEMU, end it; its
        report lines, which must have one with `expect`."""
        vm = VM(d, name, binary, 256, "ours", hint=True)
        vms.append(vm)
        os.environ["UBSAN_OPTIONS"] = env.ubsan_options(suppress)
        try:
            vm.boot()
        finally:
            os.environ["UBSAN_OPTIONS"] = env.ubsan_options()
        n = len(SANITIZER_REPORTS)
        _gdb_call(vm.machine.get_pid(), *calls)
        vm.end()
        lines = [ln for r in SANITIZER_REPORTS[n:] for ln in r["lines"]]
        assert any(expect in ln for ln in lines), \
            f"{name}: no {expect!r}: {lines}; it printed " \
            f"{vm.log_tail(1500)!r}"
        print(f"    {name}: {lines[-1]}")
        return vm

    try:
        # Three objects, so that a stale copy of one pointer in a register
        # or on a stack does not hide all of them.
        leaky = fires("leaky", "ERROR: LeakSanitizer",
                      *[f"(void *) g_malloc({LEAK_BYTES})"] * 3)
        # LeakSanitizer adds up the leaks of one stack: n objects, n times
        # LEAK_BYTES
        leaks = re.findall(r"leak of (\d+) byte\(s\) in (\d+) object",
                           leaky.log_text())
        assert any(int(b) == LEAK_BYTES * int(n) for b, n in leaks), \
            leaky.log_tail(3000)
        fires("broken", "ERROR: AddressSanitizer",
              "(void) __asan_report_load8(4096)")
        # the one entry of ubsan.supp (read_pvh_start_addr()), reported
        # at every boot of a PVH boot image, and only without the file
        pvh = "x86-common.c"
        fires("unsuppressed", pvh, suppress=False)
        seen = [r for r in SANITIZER_REPORTS[before:]
                if r["vm"] != "unsuppressed" and
                any(pvh in ln for ln in r["lines"])]
        assert not seen, f"reported despite ubsan.supp: {seen}"
    finally:
        for vm in vms:
            vm.end()
        env.SANITIZE = sanitize
        # the reports made here on purpose do not fail this test
        del SANITIZER_REPORTS[before:]
    subprocess.call(["rm", "-rf", d])
