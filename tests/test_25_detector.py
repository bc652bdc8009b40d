# SPDX-License-Identifier: GPL-2.0
"""The detectors fail a run when they should.  Each test damages one thing
on purpose in a hinted migration of our stack and expects the verdict to
say so: one flipped byte of the kept data on the destination (data check
and the ticker), a kernel error line on the source's console and on the
destination's (console scans), a real kernel crash of the destination, a
migration without hinting or in the other mode (hinting check), a guest
whose setup failed (boot check), a QEMU that aborts during boot (only the
stock reference is launched again, and counted).  The QEMU stderr scan is
shown to fire in test_71 (a command id the device rejects)."""
import os
import signal
import subprocess

from hb import harness
from hb.harness import Scenario
from hb.rigs import tmpdir
from hb.testlib import (assert_hinted, assert_intact, drop_workdir, migrate,
                        need_ours, our_qemu, tag)

MEM = 512
KEEP = "/data/keep"


def _run(label, **kw):
    need_ours()
    return migrate(label, src_bin=our_qemu(), balloon="ours", hint=True,
                   scenario=Scenario("stale", mem_mib=MEM), **kw)


def _fails_intact(res, what):
    try:
        assert_intact(res, what)
    except AssertionError as exc:
        print(f"    assert_intact failed as it should: {str(exc)[:160]}")
        drop_workdir(res)
        return str(exc)
    raise AssertionError(f"assert_intact passed a run with {what}")


def _kmsg(vm, text):
    """Make the guest kernel print `text` on its console at level err."""
    vm.guest.run(f"echo '<3>{text}' > /dev/kmsg")


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
        harness.wait_guest(vm.guest, f"test $(wc -l < /tmp/ticker.out) "
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
    _fails_intact(res, "one flipped byte")


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
    msg = _fails_intact(res, "a destination kernel error")
    assert "destination kernel errors" in msg, msg
    # the hinting check fails on a round in the other mode
    try:
        assert_hinted(res, "alloc", "detector")
    except AssertionError as exc:
        assert "not 'alloc'" in str(exc), exc
    else:
        raise AssertionError("assert_hinted took a scan round for alloc")


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
    vm = harness.VM(d, "hberror", our_qemu(), 256, "ours", hint=True,
                    balloon_args="hint_mode=bogus")
    try:
        vm.boot()
    except harness.GuestError as exc:
        assert "HB ERROR insmod" in str(exc), exc
        print(f"    boot failed as it should: {exc}")
    else:
        raise AssertionError("a guest that printed HB ERROR booted")
    finally:
        vm.kill()
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
    ours = harness.VM(d, "ours", our_qemu(), 256, "ours", hint=True)
    fired = _abort_during_boot(ours)
    try:
        ours.boot()
    except harness.GuestError as exc:
        assert fired and "QEMU exited (-6)" in str(exc), exc
        print(f"    our QEMU: boot failed as it should: {str(exc)[:120]}")
    else:
        raise AssertionError("our QEMU aborted at boot and the boot passed")
    finally:
        ours.kill()
    before = len(harness.STOCK_CRASHES)
    stock = harness.VM(d, "stock", harness.STOCK_QEMU, 256, "ours", hint=True)
    fired = _abort_during_boot(stock)
    try:
        stock.boot()
        assert fired, "the abort was not injected"
        assert len(harness.STOCK_CRASHES) == before + 1, harness.STOCK_CRASHES
        assert harness.STOCK_CRASHES[-1]["signal"] == signal.SIGABRT
        assert os.path.exists(stock.console + ".crashed")
        _, out = stock.guest.run("echo up")
        assert out == ["up"], out
        print("    stock QEMU: crash recorded, launched again, guest up")
    finally:
        stock.kill()
        # the summary counts crashes of stock, not the one injected here
        del harness.STOCK_CRASHES[before:]
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
    _fails_intact(res, "a crashed destination")
