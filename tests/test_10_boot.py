# SPDX-License-Identifier: GPL-2.0
"""Boot the test guest on stock and patched QEMU with either driver."""
import os
import tempfile

from hb import harness
from hb.testlib import BUILD, Skip, have_ours_driver, qemu_bin, tag


def _boot(qemu, balloon):
    if balloon == "ours" and not have_ours_driver():
        raise Skip("our driver is not built")
    d = tempfile.mkdtemp(prefix="hb-boot-", dir=os.path.join(BUILD, "tmp"))
    vm = harness.VM(d, "boot", qemu_bin(qemu), 1024, balloon, hint=True)
    try:
        vm.boot()
        _, mods = vm.guest.run("cat /proc/modules")
        assert any(m.startswith("virtio_balloon ") for m in mods), mods
        _, out = vm.guest.run("for d in /sys/bus/virtio/devices/*; do "
                              "cat $d/device; readlink $d/driver; done")
        assert "0x0005" in out, out
        assert any("virtio_balloon" in l for l in out), out
        info = vm.qmp("query-balloon")
        assert info["actual"] == 1024 << 20, info
        assert not vm.kernel_errors(), vm.kernel_errors()
    finally:
        vm.kill()


@tag("boot")
def test_boot_stock_qemu_intree_driver():
    _boot("stock", "intree")


@tag("boot")
def test_boot_our_qemu_our_driver():
    _boot("ours", "ours")
