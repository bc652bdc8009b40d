# SPDX-License-Identifier: GPL-2.0
"""A guest backed by hugetlbfs pages is hinted.  A guest's free blocks are
at most a few MiB, so a device that clears hints only in whole host pages
clears nothing on 1 GiB pages and little on 2 MiB ones.  Our QEMU rounds
hints to host pages only when postcopy may run (postcopy places whole host
pages); in precopy it clears the target pages hinted, as stock does.

Each page size the host can reserve: the test reserves the pages
(vm.nr_hugepages), mounts its own hugetlbfs, and restores both after.
The floor is what a fresh guest of the same size, on the same pages, sends
without hinting; a hinted migration of a guest whose free memory is stale
must send at most FLOOR_RATIO times that, its data verified, with our
driver and with the in-tree one.  The in-tree driver runs with
x-free-page-hint-timing=on, the operator's opt-in to the timing policy a
KEEP_WRITES guest gets by itself (the wait for the guest's hints before
RAM is first sent): with the device defaults it runs stock's timing, and
on hugepages the first pass outruns its hints (test_77 holds the defaults
to stock's bytes)."""
import os
import subprocess
import tempfile

from hb.env import BUILD
from hb.testlib import (Skip, assert_intact, migrate, need_ours, our_qemu,
                        tag, timeout)
from hb.workloads import Scenario

MEM = 1024
FLOOR_RATIO = 1.3
# device properties per driver: the in-tree driver opted in to the timing
DRIVER_PROPS = {"ours": "", "intree": "x-free-page-hint-timing=on"}


class HugePages:
    """Reserve `count` pages of `size_kb` and mount a hugetlbfs of them;
    restore the reservation and unmount on exit.  Skip when the host
    cannot reserve them."""

    def __init__(self, size_kb, count):
        self.size_kb = size_kb
        self.count = count
        self.sysfs = (f"/sys/kernel/mm/hugepages/hugepages-{size_kb}kB/"
                      "nr_hugepages")
        self.old = None
        self.mnt = None

    def __enter__(self):
        if not os.path.exists(self.sysfs):
            raise Skip(f"no {self.size_kb} kB huge pages on this host")
        with open(self.sysfs) as f:
            self.old = int(f.read())
        try:
            with open(self.sysfs, "w") as f:
                f.write(str(self.old + self.count))
            with open(self.sysfs) as f:
                got = int(f.read()) - self.old
            if got < self.count:
                raise Skip(f"reserved {got} of {self.count} "
                           f"{self.size_kb} kB pages")
            os.makedirs(os.path.join(BUILD, "tmp"), exist_ok=True)
            self.mnt = tempfile.mkdtemp(prefix="hb-huge-",
                                        dir=os.path.join(BUILD, "tmp"))
            subprocess.run(["mount", "-t", "hugetlbfs", "-o",
                            f"pagesize={self.size_kb}K", "none", self.mnt],
                           check=True)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self.mnt

    def __exit__(self, *_):
        if self.mnt:
            subprocess.call(["umount", self.mnt])
            os.rmdir(self.mnt)
            self.mnt = None
        if self.old is not None:
            with open(self.sysfs, "w") as f:
                f.write(str(self.old))


def _backing(mnt):
    return ("-object", f"memory-backend-file,id=hbmem,size={MEM}M,"
                       f"mem-path={mnt},prealloc=off",
            "-machine", "memory-backend=hbmem")


DEVICE_KEYS = ("rounds", "batches", "hinted-bytes", "presend-waits",
               "presend-timeouts", "presend-wait-ms", "stale-cmd-ids",
               "ignored-stale", "ignored-not-ram", "ignored-cross-block",
               "ignored-unaligned")
GUEST_KEYS = ("mode", "rounds", "round_bytes", "round_pfns",
              "rounds_timed_out", "stop_retries", "ring_full_waits",
              "blocks_by_order")


def _round(res):
    """What the hint round did, seen from both sides: the source device's
    counters, the guest's, and the guest's free memory when the migration
    started, so that a migration that sent more than it should says
    why."""
    dev = res.get("device_src") or {}
    guest = res.get("guest_hint") or {}
    return {"device": {k: dev.get(k) for k in DEVICE_KEYS if k in dev},
            "guest": {k: guest.get(k) for k in GUEST_KEYS if k in guest},
            "free_kb": (res.get("meminfo_before") or {}).get("free_kb")}


def _on_pages(size_kb):
    need_ours()
    # source and destination hold the guest's RAM at once, plus slack
    count = (2 * MEM * 1024) // size_kb + 8
    with HugePages(size_kb, count) as mnt:
        vm_args = _backing(mnt)
        floor = migrate(f"huge-{size_kb}k-fresh", src_bin=our_qemu(),
                        balloon="intree", hint=False, vm_args=vm_args,
                        scenario=Scenario("fresh", mem_mib=MEM))
        assert_intact(floor, f"fresh guest on {size_kb} kB pages")
        out = {"floor": floor["transferred_mb"]}
        rounds = {}
        for driver, props in DRIVER_PROPS.items():
            res = migrate(f"huge-{size_kb}k-{driver}", src_bin=our_qemu(),
                          balloon=driver, hint=True, vm_args=vm_args,
                          device_props=props,
                          scenario=Scenario("stale", mem_mib=MEM))
            assert_intact(res, f"{driver} driver on {size_kb} kB pages")
            dev = res.get("device_src") or {}
            out[driver] = res["transferred_mb"]
            out[driver + "-cleared"] = dev.get("cleared-pages")
            rounds[driver] = _round(res)
            print(f"    {driver} round: {rounds[driver]}", flush=True)
        print(f"    {size_kb} kB pages: {out}", flush=True)
        # Both drivers' hints clear pages of the hugepage-backed guest, and
        # both come before the first pass (the pre-send wait)
        assert out["ours-cleared"] and out["intree-cleared"], out
        limit = FLOOR_RATIO * out["floor"]
        for driver in DRIVER_PROPS:
            assert out[driver] <= limit, (
                f"{driver}: sent more than {FLOOR_RATIO}x the floor of "
                f"{out['floor']} MB: {out}, round {rounds[driver]}")


@tag("reliability", "hugepages")
@timeout(2400)
def test_hugepage_2m_guest_is_hinted():
    _on_pages(2048)


@tag("reliability", "hugepages")
@timeout(2400)
def test_hugepage_1g_guest_is_hinted():
    _on_pages(1048576)
