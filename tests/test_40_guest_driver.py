# SPDX-License-Identifier: GPL-2.0
"""Our guest driver: packaging, and everything the in-tree driver does,
driven through QMP and checked inside the guest."""
import os
import re
import tempfile
import time

from hb import harness
from hb.testlib import (BUILD, CURRENT, TOP, Skip, assert_intact,
                        have_ours_driver, migrate, qemu_bin, sh, tag)

KO = os.path.join(TOP, "guest", "virtio_balloon.ko")


def _need_driver():
    if not have_ours_driver():
        raise Skip("our driver is not built")


def _kver():
    return sh(f"{TOP}/scripts/guest-kver.sh").stdout.strip()


class _Guest:
    """A booted guest (not migrated) with the given device properties."""

    def __init__(self, balloon="ours", qemu="stock", hint=True, props="",
                 mem=1024, balloon_args="", kernel_args=""):
        _need_driver()
        d = tempfile.mkdtemp(prefix="hb-drv-", dir=os.path.join(BUILD, "tmp"))
        self.vm = harness.VM(d, "drv", qemu_bin(qemu), mem, balloon, hint,
                             device_props=props, balloon_args=balloon_args,
                             kernel_args=kernel_args)

    def __enter__(self):
        self.vm.boot()
        return self.vm

    def __exit__(self, *exc):
        errs = self.vm.kernel_errors()
        self.vm.kill()
        if exc[0] is None:
            assert not errs, f"guest kernel errors: {errs[:5]}"


def _meminfo(vm):
    return vm.guest.hbwork("meminfo")


def _wait(pred, timeout=60, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _sysfs_dir(vm):
    _, out = vm.guest.run("ls -d /sys/bus/virtio/devices/*/free_page_hint")
    assert out, "no free_page_hint sysfs directory"
    return out[0]


def _stats(vm):
    return harness.balloon_stats(vm)


@tag("driver")
def test_modinfo_identifies_our_module():
    _need_driver()
    r = sh(f"modinfo {KO}")
    assert r.returncode == 0, r.stderr
    info = r.stdout
    for field in ("version:", "description:", "author:", "license:"):
        assert field in info, f"modinfo lacks {field}\n{info}"
    assert re.search(r"license:\s+GPL", info)
    assert re.search(r"alias:\s+virtio:d00000005v\*", info), info
    assert "balloon-hint" in info
    assert f"vermagic:       {_kver()} " in info


@tag("driver")
def test_make_install_makes_modprobe_pick_ours():
    """`make install` puts the module in updates/ and depmod makes modprobe
    resolve virtio_balloon to it rather than to the in-tree one."""
    _need_driver()
    kver = _kver()
    r = sh(f"make -C {TOP}/guest install KVER={kver}")
    assert r.returncode == 0, r.stdout + r.stderr
    r = sh(f"modprobe -S {kver} --show-depends virtio_balloon")
    assert r.returncode == 0, r.stderr
    assert f"/lib/modules/{kver}/updates/virtio_balloon.ko" in r.stdout, r.stdout


@tag("driver")
def test_dkms_builds_the_module():
    _need_driver()
    kver = _kver()
    try:
        r = sh(f"make -C {TOP}/guest dkms-stage && "
               f"dkms build virtio_balloon/$(sed -n 's/^PACKAGE_VERSION=\"\\(.*\\)\"/\\1/p' "
               f"{TOP}/guest/dkms.conf) -k {kver} --force")
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        built = sh(f"ls /var/lib/dkms/virtio_balloon/*/{kver}/*/module/"
                   "virtio_balloon.ko*")
        assert built.returncode == 0 and built.stdout.strip(), built.stderr
    finally:
        sh(f"make -C {TOP}/guest dkms-remove")


@tag("driver")
def test_inflate_deflate_through_qmp():
    with _Guest() as vm:
        before = _meminfo(vm)["total_kb"]
        vm.qmp("balloon", value=512 << 20)
        _wait(lambda: vm.qmp("query-balloon")["actual"] == 512 << 20,
              what="balloon at 512 MiB")
        mid = _meminfo(vm)
        # The driver takes the pages from the guest: MemTotal drops by them
        # (in-tree semantics without DEFLATE_ON_OOM).
        assert before - mid["total_kb"] >= 500 * 1024, (before, mid)
        vm.qmp("balloon", value=1024 << 20)
        _wait(lambda: vm.qmp("query-balloon")["actual"] == 1024 << 20,
              what="balloon back at 1 GiB")
        after = _meminfo(vm)["total_kb"]
        assert after == before, (before, after)


@tag("driver")
def test_stats_queue_reports_guest_memory():
    with _Guest() as vm:
        path = "/machine/peripheral/balloon0"
        vm.qmp("qom-set", path=path, property="guest-stats-polling-interval",
               value=1)

        def stats():
            s = vm.qmp("qom-get", path=path, property="guest-stats")
            st = s.get("stats", {})
            return st if st.get("stat-total-memory", -1) > 0 else None
        st = _wait(stats, 30, "guest-stats")
        mi = _meminfo(vm)
        assert abs(st["stat-total-memory"] / 1024 - mi["total_kb"]) < 4096, \
            (st, mi)
        assert 0 < st["stat-free-memory"] <= st["stat-total-memory"]


@tag("driver")
def test_deflate_on_oom_gives_pages_back():
    with _Guest(props="deflate-on-oom=on") as vm:
        vm.qmp("balloon", value=300 << 20)
        _wait(lambda: vm.qmp("query-balloon")["actual"] == 300 << 20,
              what="balloon at 300 MiB")
        # Ask for more than the balloon left: the OOM notifier must deflate
        # rather than let the OOM killer take the program.
        res = vm.guest.hbwork("pressure 40", timeout=300)
        assert res.get("ok") == 1, res
        _, dmesg = vm.guest.run("dmesg")
        assert not any("Killed process" in l for l in dmesg), dmesg[-20:]
        assert vm.qmp("query-balloon")["actual"] > 300 << 20


@tag("driver")
def test_free_page_reporting_returns_memory_to_host():
    with _Guest(props="free-page-reporting=on", hint=False) as vm:
        _, feats = vm.guest.run("cat /sys/bus/virtio/devices/*/features")
        # Feature bit 5 (REPORTING) negotiated.
        bits = [f for f in feats if len(f) >= 6]
        assert any(f[5] == "1" for f in bits), feats
        pid = vm.machine.get_pid()

        def rss_kb():
            with open(f"/proc/{pid}/status") as f:
                return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        vm.guest.hbwork("fill 600 3")
        high = rss_kb()
        low = _wait(lambda: (lambda r: r if r < high - 200 * 1024 else None)(
            rss_kb()), 60, "host RSS to drop after reporting")
        CURRENT.facts["reporting_rss_drop_mb"] = (high - low) // 1024


@tag("driver")
def test_page_poison_rules():
    """PAGE_POISON is kept only when the guest poisons free pages
    (page_poison=1 or init_on_free=1), and then reporting goes with it; as
    in-tree, without poisoning the bit is dropped and reporting stays."""
    props = "free-page-reporting=on,page-poison=on"
    with _Guest(props=props, hint=False) as vm:
        f = harness.balloon_features(vm)
        assert f[4] == "0" and f[5] == "1", f
    with _Guest(props=props, hint=False, kernel_args="page_poison=1") as vm:
        f = harness.balloon_features(vm)
        assert f[4] == "1" and f[5] == "1", f
    # Poisoning on, but the device cannot keep poison: no reporting.
    with _Guest(props="free-page-reporting=on,page-poison=off", hint=False,
                kernel_args="page_poison=1") as vm:
        f = harness.balloon_features(vm)
        assert f[4] == "0" and f[5] == "0", f


@tag("driver")
def test_hint_round_counters_with_stock_qemu():
    """With stock QEMU the driver answers the host's command, hints
    multi-order blocks, counts them, and gets all of them back on DONE.
    The migration goes to a throttled sink and is cancelled once the round
    is over (stock sends DONE on cancel), so the stock destination bug does
    not get in the way: everything is read in the running source guest."""
    with _Guest(qemu="stock") as vm:
        vm.guest.hbwork("fill 600 5")
        free0 = _meminfo(vm)["free_kb"]
        vm.qmp("migrate-set-parameters", **{"max-bandwidth": 4 << 20})
        vm.qmp("migrate", uri="exec:cat > /dev/null")
        g = _wait(lambda: (lambda st: st if st.get("rounds", 0) >= 1 and
                           st.get("round_bytes", 0) > 0 and
                           st.get("held_pages") == "inflight:0,acked:%d" %
                           (st["bytes_hinted"] >> 12) else None)(_stats(vm)),
                  60, "a finished hint round")
        assert g["bytes_hinted"] >= 400 << 20, g
        assert g["blocks_hinted"] == sum(
            int(x.split(":")[1]) for x in g["blocks_by_order"].split(",")), g
        vm.qmp("migrate_cancel")
        _wait(lambda: _stats(vm).get("held_pages") == "inflight:0,acked:0",
              60, "DONE to give every block back")
        _wait(lambda: _meminfo(vm)["free_kb"] >= free0 - 16 * 1024, 60,
              "MemFree back")


@tag("driver")
def test_our_driver_hints_fragmented_memory_better_than_intree():
    """On fragmented free memory the in-tree driver (order-10 blocks only)
    finds little to hint; ours goes down to min_order.  Counted on our
    QEMU, whose device counters report the bytes each guest hinted."""
    _need_driver()
    got = {}
    for drv in ("intree", "ours"):
        res = migrate(f"frag-{drv}", src_bin=qemu_bin("ours"), balloon=drv,
                      hint=True, scenario=harness.Scenario("frag"))
        assert_intact(res, f"frag/{drv}")
        got[drv] = res
    CURRENT.facts["frag_mb"] = {d: r["transferred_mb"] for d, r in got.items()}
    # Ours hints the holes the in-tree driver cannot see (blocks below
    # order 10) ...
    by_order = dict(map(int, x.split(":")) for x in
                    got["ours"]["guest_hint"]["blocks_by_order"].split(","))
    small = sum(n for o, n in by_order.items() if o < 10)
    CURRENT.facts["frag_small_blocks"] = small
    assert small >= 100, by_order
    # ... and does not send more for it (it keeps reserve_kb of headroom
    # the in-tree driver takes; TCG noise: 5 %).
    assert got["ours"]["transferred_mb"] <= \
        1.05 * got["intree"]["transferred_mb"], CURRENT.facts["frag_mb"]


@tag("driver")
def test_unload_reload_20_times_with_rounds_leaks_nothing():
    """rmmod/insmod 20 times, each with a hint round in between (a migration
    to a sink that is cancelled mid-way): MemFree back, no kernel warning."""
    _need_driver()
    with _Guest(mem=768) as vm:
        vm.guest.hbwork("fill 400 9")
        base = _meminfo(vm)["free_kb"]
        sysd = None
        for i in range(20):
            vm.qmp("migrate-set-parameters", **{"max-bandwidth": 4 << 20})
            vm.qmp("migrate", uri="exec:cat > /dev/null")
            sysd = sysd or _sysfs_dir(vm)
            _wait(lambda: _stats(vm).get("rounds", 0) >= 1, 30,
                  f"hint round {i}")
            vm.qmp("migrate_cancel")
            _wait(lambda: vm.qmp("query-migrate").get("status") ==
                  "cancelled", 30, "cancel")
            vm.guest.run("rmmod virtio_balloon && "
                         "insmod /lib/hb/ours/virtio_balloon.ko")
            sysd = None
        _wait(lambda: _meminfo(vm)["free_kb"] >= base - 16 * 1024, 30,
              "MemFree back to its level")
        _, dmesg = vm.guest.run("dmesg")
        bad = [l for l in dmesg if harness.KERNEL_ERROR_RE.search(l) or
               "WARNING" in l or "leak" in l.lower()]
        assert not bad, bad
