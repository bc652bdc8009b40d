# SPDX-License-Identifier: GPL-2.0
"""The detectors fail a run when they should.  Each test damages one thing
on purpose in a hinted migration of our stack and expects the verdict to
say so: one flipped byte of the kept data on the destination (data check),
a kernel error line on the source's console and on the destination's
(console scans), a real kernel crash of the destination."""
from hb.harness import Scenario
from hb.testlib import (assert_hinted, assert_intact, migrate, need_ours,
                        our_qemu, tag)

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

    res = _run("detector-poke", on_source_ready=source,
               on_destination=destination)
    assert_hinted(res, "scan", "detector")
    assert res["status"] == "completed", res.get("error")
    assert res["data_intact"] is False, f"verdict not damaged: {res['verify']}"
    keep = res["verify"]["keep"]
    assert keep.get("bad_pages") == 1, keep
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
