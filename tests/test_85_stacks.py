# SPDX-License-Identifier: GPL-2.0
"""Our QEMU 10.0 and Debian's own QEMU 10.0: each starts a guest without -L, and a guest whose RAM spans two RAMBlocks migrates intact
on our 10.0 (Documentation/data-safety.md, section 9).

The two-RAMBlock layout: two NUMA nodes, each with its own
memory-backend-ram, node 1 larger than node 0 and holding both vCPUs, so
the guest's data and the pages it writes during the migration (workload
`churn`) are mostly in the second RAMBlock, which does not start at
ram_addr 0.  Runs on stock 10.0 are reference runs: their verdict is
counted (stock_runs/stock_losses), never asserted."""
import os
import subprocess

from hb import env
from hb.env import OUR_QEMU_10, STOCK_QEMU_10, guest_kernel
from hb.testlib import (again, assert_intact, migrate, migrate_hinted,
                        record_reference, reference, tag)
from hb.workloads import Scenario

MEM = 1024
NODE0 = 256              # MiB; node 1 gets the rest
BINARIES = {
    "ours-10.0": OUR_QEMU_10,
    "stock-10.0": STOCK_QEMU_10,
}


def two_ramblocks(node0=NODE0, mem=MEM):
    return ("-object", f"memory-backend-ram,id=m0,size={node0}M",
            "-object", f"memory-backend-ram,id=m1,size={mem - node0}M",
            "-numa", "node,nodeid=0,memdev=m0",
            "-numa", "node,nodeid=1,memdev=m1,cpus=0-1")


def _need(path):
    """A QEMU `make qemu` builds or unpacks: its absence is a build
    failure, not a missing environment."""
    assert os.path.isfile(path) and os.access(path, os.X_OK), \
        f"no QEMU at {path} (make qemu)"
    return path


def _roms(binary, *extra):
    """`info roms` of a machine that was created but never ran."""
    p = subprocess.run([binary, "-M", "pc", "-accel", "tcg", "-S",
                        "-display", "none", "-nodefaults", "-no-user-config",
                        "-monitor", "stdio", *extra],
                       input="info roms\nquit\n", text=True,
                       capture_output=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


@tag("lint", "stacks")
def test_every_qemu_finds_its_firmware_without_L():
    kernel = guest_kernel()
    # the tests' guests start the same kernel at its PVH entry
    # (env.boot_image()): that option ROM too
    pvh = env.boot_image(kernel)
    for name, path in BINARIES.items():
        rc, out = _roms(_need(path), "-kernel", kernel)
        assert rc == 0, f"{name}: {out[-1000:]}"
        assert "bios-256k.bin" in out, f"{name}: no BIOS loaded:\n{out}"
        assert "linuxboot_dma.bin" in out, f"{name}: no linuxboot ROM:\n{out}"
        if pvh != kernel:
            rc, out = _roms(path, "-kernel", pvh)
            assert rc == 0 and "pvh.bin" in out, \
                f"{name}: no PVH option ROM for {pvh}:\n{out[-1000:]}"
    # The check sees a missing firmware: a BIOS name no folder has.
    rc, out = _roms(_need(env.OUR_QEMU), "-bios", "hb-no-such-bios.bin")
    assert rc != 0 and "hb-no-such-bios.bin" in out, out


def _two_blocks(qemu, hint):
    binary = _need(BINARIES[qemu])
    label = f"two-ramblocks-{qemu}-{'hint' if hint else 'nohint'}"

    def run(n):
        res = migrate(label + again(n), src_bin=binary, balloon="intree",
                      hint=hint, scenario=Scenario("churn", mem_mib=MEM),
                      vm_args=two_ramblocks())
        if not qemu.startswith("stock"):
            assert_intact(res, label)
        return res
    if qemu.startswith("stock"):
        res = run(1)
        record_reference(res, label)
        print(f"    reference verdict {label}: ok={res.get('ok')} "
              f"status={res.get('status')} "
              f"data_intact={res.get('data_intact')} "
              f"error={(res.get('error') or '')[:120]}")
        return res
    if hint:
        return migrate_hinted(run, None, label)
    return run(1)


@reference
@tag("stacks", "compat")
def test_two_ramblocks_stock_10_0_reference():
    for hint in (False, True):
        _two_blocks("stock-10.0", hint)


@tag("stacks", "compat")
def test_two_ramblocks_our_10_0_without_hinting():
    _two_blocks("ours-10.0", False)


@tag("stacks", "compat")
def test_two_ramblocks_our_10_0_with_hinting():
    _two_blocks("ours-10.0", True)
