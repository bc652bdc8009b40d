# SPDX-License-Identifier: GPL-2.0
"""Compatibility: {in-tree driver, our driver} x {stock QEMU, our QEMU},
migration between stock and patched QEMU in both directions with the
balloon's device state in the stream, and our driver on the other guest
kernel.

Pairs with stock QEMU and hinting on are reference runs: stock's own
hinting is what they measure, so their verdict is recorded
(stock_runs/stock_losses) and not asserted.  Every other run must be
intact."""
import os

from hb import env
from hb.env import use_stack
from hb.rigs import MEM, Rig, held
from hb.testlib import (again, assert_hinted, assert_intact, migrate,
                        migrate_hinted, need_ours, our_qemu, record_reference,
                        reference, tag)
from hb.vm import balloon_features
from hb.workloads import Scenario

FREE_PAGE_HINT_BIT = 3


def _pair(driver, qemu):
    if driver == "ours":
        need_ours()
    binary = env.STOCK_QEMU if qemu == "stock" else our_qemu()
    seen = {}

    def negotiated(vm, _res):
        seen["features"] = balloon_features(vm)

    def run(n):
        res = migrate(f"compat-{driver}-{qemu}" + again(n), src_bin=binary,
                      balloon=driver, hint=True,
                      scenario=Scenario("stale", mem_mib=MEM),
                      on_source_ready=negotiated)
        f = seen.get("features", "")
        assert len(f) > FREE_PAGE_HINT_BIT and f[FREE_PAGE_HINT_BIT] == "1", \
            f"FREE_PAGE_HINT not negotiated: features={f!r} ({res['workdir']})"
        if qemu != "stock":
            assert_intact(res, f"{driver} driver on our QEMU")
        return res
    if qemu == "stock":
        res = run(1)
        record_reference(res, f"compat-{driver}-stock")
        print(f"    reference verdict {driver}/stock: ok={res.get('ok')} "
              f"data_intact={res.get('data_intact')} "
              f"kernel_errors={len(res.get('kernel_errors') or [])}")
        return res
    res = migrate_hinted(run, "scan" if driver == "ours" else None,
                         f"{driver} driver on our QEMU")
    if driver == "ours":
        g = res.get("guest_hint") or {}
        assert held(g) == 0, f"hinted blocks still held: {g}"
    return res


@tag("reliability", "compat", "upstream_base")
def test_compat_intree_driver_our_qemu():
    _pair("intree", "ours")


@tag("reliability", "compat")
def test_compat_our_driver_our_qemu():
    _pair("ours", "ours")


@reference
@tag("reliability", "compat", "upstream_base")
def test_compat_intree_driver_stock_qemu_reference():
    _pair("intree", "stock")


@reference
@tag("reliability", "compat")
def test_compat_our_driver_stock_qemu_reference():
    _pair("ours", "stock")


@tag("reliability", "compat")
def test_cross_version_stock_to_ours_and_back_with_hinting():
    """Device state with free-page-hint=on on both sides: boot on stock
    QEMU (guest hinting disabled there, to keep clear of stock's bug),
    migrate to our QEMU, enable hinting, migrate back to stock (our QEMU is
    the source and takes the hints).  Data intact both ways; the stock
    destination delivers DONE (nothing stays held)."""
    need_ours()
    knob = "/sys/bus/virtio/devices/virtio0/free_page_hint/enabled"
    with Rig("x-hint", binary=env.STOCK_QEMU) as rig:
        rig.boot(prepare=False)
        rig.vm.guest.run(f"echo 0 > {knob}")
        rig.prepare()
        rig.migrate(binary=our_qemu())
        rig.verify("stock -> ours")
        assert rig.vm.qmp("query-balloon")["actual"] == MEM << 20
        rig.vm.guest.run(f"echo 1 > {knob}")
        rig.migrate(binary=env.STOCK_QEMU)
        # The guest negotiated no HINT_KEEP_WRITES (it booted on stock), so
        # the round runs on stock's timing and may lose the race with the
        # sending: the pages it cleared are printed, not asserted.
        print(f"    ours -> stock: {rig.hinted_pages()} pages hinted away")
        rig.verify("ours -> stock")
        s = rig.stats()
        assert s.get("bytes_hinted", 0) > 0 and held(s) == 0, s
        assert rig.vm.qmp("query-balloon")["actual"] == MEM << 20


@tag("reliability", "compat")
def test_cross_version_stock_to_ours_and_back_without_hinting():
    """The same with the in-tree driver and free-page-hint=off."""
    with Rig("x-nohint", balloon="intree", hint=False,
             binary=env.STOCK_QEMU) as rig:
        rig.boot()
        rig.migrate(binary=our_qemu())
        rig.verify("stock -> ours")
        rig.migrate(binary=env.STOCK_QEMU)
        rig.verify("ours -> stock")




def _other_kernel(stack, series):
    """Our driver on the guest kernel of the other stack, on our QEMU of
    `stack`, hinting in scan mode (our QEMU offers HINT_KEEP_WRITES)."""
    need_ours()
    use_stack(stack)
    os.environ["HB_GUEST"] = series          # this test's process only
    res = migrate(f"compat-linux-{series}-on-qemu-{stack}", src_bin=our_qemu(),
                  balloon="ours", hint=True,
                  scenario=Scenario("stale", mem_mib=MEM))
    assert_intact(res, f"Linux {series} on our QEMU {stack}")
    assert_hinted(res, "scan", f"Linux {series} on our QEMU {stack}")


@tag("reliability", "compat")
def test_compat_linux_6_1_guest_on_qemu_10_0():
    _other_kernel("10.0", "6.1")

