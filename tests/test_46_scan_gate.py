# SPDX-License-Identifier: GPL-2.0
"""Where our guest driver may read mm's free lists (scan mode), and that it
stops reading them while memory goes away.

Scan is used only on the kernels guest/scan-validated-kernels lists (the
module build, these tests and the docs read that one file) and only while
the module's self-check of the free lists agrees with mm's counters;
anywhere else the driver hints in alloc mode and says why (sysfs
free_page_hint/scan_refusal, one kernel log line).  Both refusals are
shown: a module built with a list that lacks the guest's kernel, and a
self-check fed a wrong count (fault_self_check of the test build).  A
per-CPU list walk held inside its window (fault_walk_delay_ms) while the
guest offlines the last memory of ZONE_MOVABLE shows the offline fence:
with it the offline waits for the walk, without it (fault_no_offline_fence)
the offline frees the zone's pagesets under the walk, which the test
build's check after the delay reports as a WARNING splat.  Walks during
an offline that isolates pageblocks take nothing of them.  And what a scan
round hints covers the memory that stays free through it, with churn
running (the test build's hinted_pfns and stayed_free).

The tests that boot each guest kernel run on 6.1 and 6.12, or on the
kernel HB_GUEST names (tests/run.py each_kernel: the debug kernel among
them); the coverage test also on every 7.3 flavour (generic, -rt,
-cloud), and the list's test on every 7.3 flavour (cloud_kernel)."""
import contextlib
import fnmatch
import os
import re
import shutil
import subprocess
import tempfile

from hb import env
from hb.env import guest_initrd, guest_kernel
from hb.rigs import BootedGuest
from hb.migration import migrate_to_sink
from hb.testlib import (BUILD, CURRENT, TOP, assert_intact, migrate,
                        need_ours, our_keep_writes_qemu, sh, tag, timeout,
                        wait_until)
from hb.testlib import wait_for as _wait
from hb.vm import VM, balloon_stats, write_sysfs
from hb.workloads import Scenario, start_churn, stop_churn

LIST = os.path.join(TOP, "guest", "scan-validated-kernels")
DEBUGFS = "/sys/kernel/debug/virtio_balloon"
PARAMS = "/sys/module/virtio_balloon/parameters"
LOG_LINE = "free page hinting uses alloc, not scan: "


def _series():
    """The guest kernels a test boots: 6.1 and 6.12, or the one kernel
    HB_GUEST names (tests/run.py sets it for an each_kernel run, after
    the tests were loaded: read it when the test runs)."""
    g = os.environ.get("HB_GUEST")
    return (g,) if g else ("6.1", "6.12")


def _scan_series():
    """The guest kernels scan is validated on that this machine has a test
    image of: 6.1, 6.12 and, once setup made the Debian 13 root, 7.3 in
    its three flavours; or the one kernel HB_GUEST names."""
    if os.environ.get("HB_GUEST"):
        return _series()
    out = list(_series())
    for series in ("7.3", "7.3-rt", "7.3-cloud"):
        try:
            if os.path.exists(guest_initrd(series)):
                out.append(series)
        except subprocess.CalledProcessError:
            pass    # no 7.3 guest kernel unpacked
    return tuple(out)


def validated_patterns(path=LIST):
    """The globs of a list of validated kernels, in order."""
    pats = []
    with open(path) as f:
        for ln in f:
            ln = ln.split("#", 1)[0].split()
            if ln:
                pats.append(ln[0])
    return pats


def validated(kver, path=LIST):
    """The first glob of the list that matches release `kver`, or None:
    what the module build (guest/Kbuild) passes as VB_SCAN_VALIDATED."""
    return next((p for p in validated_patterns(path)
                 if fnmatch.fnmatchcase(kver, p)), None)


class _Guest(BootedGuest):
    def __init__(self, series=None, binary=None, balloon_args="fault_inject=1",
                 initrd=None, **kw):
        need_ours()
        super().__init__("gate", binary or our_keep_writes_qemu(), 1024,
                         "ours", True, kernel=guest_kernel(series),
                         initrd=initrd or guest_initrd(series),
                         balloon_args=balloon_args, **kw)


def _dir(vm):
    _, out = vm.guest.run("ls -d /sys/bus/virtio/devices/*/free_page_hint")
    assert out, "no free_page_hint sysfs directory"
    return out[0]


def _refusal(vm):
    _, out = vm.guest.run(f"cat {_dir(vm)}/scan_refusal")
    return out[0] if out else ""


def _dmesg(vm, pattern):
    _, out = vm.guest.run(f"dmesg | grep -E '{pattern}'", check=False)
    return out


def _check_refused(vm, why_re):
    """Scan is refused on this guest for a reason matching `why_re`: sysfs
    says it, one log line said it, auto is alloc, writing scan fails with
    EINVAL and leaves alloc.  Returns the reason."""
    why = _refusal(vm)
    assert re.fullmatch(why_re, why), (why_re, why)
    lines = _dmesg(vm, LOG_LINE)
    assert len(lines) == 1 and lines[0].endswith(LOG_LINE + why), lines
    assert balloon_stats(vm)["mode"] == "alloc"
    rc, _, after, err = write_sysfs(vm, f"{_dir(vm)}/mode", "scan")
    CURRENT.add("bad_inputs")
    assert rc != 0 and "Invalid argument" in err and after == "alloc", \
        (rc, after, err)
    assert _dmesg(vm, "hint mode scan refused: " + re.escape(why)), why
    return why


@contextlib.contextmanager
def _initrd(path):
    """Guests booted inside use the test image at `path` (hb.vm.VM reads
    HB_INITRD when no initrd is given: migrate() boots both sides so)."""
    old = os.environ.get("HB_INITRD")
    os.environ["HB_INITRD"] = path
    try:
        yield
    finally:
        if old is None:
            del os.environ["HB_INITRD"]
        else:
            os.environ["HB_INITRD"] = old


def _hinted_migration_verifies(label, balloon_args=""):
    """A migration of a guest whose driver refuses scan, on our QEMU that
    offers HINT_KEEP_WRITES: the guest ran a round in alloc mode that
    hinted memory, the device cleared pages because of it, and the
    destination has every byte.  (How much of the stale data alloc mode
    covers depends on how fast the guest zeroes the blocks it takes; that
    is the data-loss and benchmark suites' business.)"""
    res = migrate(label, src_bin=our_keep_writes_qemu(), balloon="ours",
                  hint=True, balloon_args=balloon_args, scenario=Scenario())
    assert_intact(res, label)
    g0, g = res.get("guest_hint_before") or {}, res.get("guest_hint") or {}
    assert g.get("mode") == "alloc", g
    assert g.get("rounds", 0) > g0.get("rounds", 0) and \
        g.get("bytes_hinted", 0) > g0.get("bytes_hinted", 0), (g0, g)
    assert (res.get("device_src") or {}).get("cleared-pages", 0) > 0, \
        res.get("device_src")
    return res


@tag("driver", "contract", "cloud_kernel")
def test_validated_kernels_get_scan():
    """Each guest kernel: the list names 6.1 and 6.12 in their generic
    flavour only (their -rt and -cloud flavours, which no test runs, do
    not match) and 7.3 in its generic, -rt and -cloud flavours (the runs
    [7.3], [7.3-rt] and [7.3-cloud]); the test build of each carries the
    pattern that matched (modinfo scan_validated, what Kbuild read).  On
    our QEMU a listed kernel's driver has nothing against scan:
    scan_refusal is "none", auto is scan, and no refusal was logged.
    (A kernel the list lacks refuses: test_unlisted_kernel_refuses_scan.)"""
    need_ours()
    pats = validated_patterns()
    assert pats, "guest/scan-validated-kernels lists no kernel"
    for series in _series():
        kver = env.guest_kver(series)
        want = validated(kver)
        ko = os.path.join(BUILD, f"mod-{kver}", "guest", "virtio_balloon.ko")
        got = sh(f"modinfo -F scan_validated {ko}").stdout.strip()
        assert got == (want or ""), (kver, got, want)
        assert want, f"{kver} is not in guest/scan-validated-kernels"
        if not series.startswith("7.3"):
            for flavour in ("rt", "cloud"):
                other = kver.replace("-amd64", f"-{flavour}-amd64")
                assert validated(other) is None, (other, pats)
        with _Guest(series) as vm:
            assert _refusal(vm) == "none", series
            assert balloon_stats(vm)["mode"] == "scan", series
            assert not _dmesg(vm, LOG_LINE), series
        CURRENT.facts[f"scan_validated_{series}"] = want


@tag("driver", "contract", "faults")
@timeout(1500)
def test_unlisted_kernel_refuses_scan():
    """The test build of the default guest kernel built with a list that
    lacks that kernel (VB_SCAN_KERNELS: the list without the lines that
    match it) carries no pattern, and on our QEMU, which offers
    HINT_KEEP_WRITES, refuses scan: "kernel <release> not validated" in
    scan_refusal and in one log line, auto is alloc, writing scan fails;
    a hinted migration of that guest hints in alloc mode and verifies."""
    need_ours()
    kver = env.guest_kver()
    assert validated(kver), f"{kver} is not listed: nothing to take away"
    work = tempfile.mkdtemp(prefix="hb-gate-", dir=os.path.join(BUILD, "tmp"))
    try:
        src = os.path.join(work, "src")
        os.makedirs(src)
        shutil.copytree(os.path.join(TOP, "guest"), os.path.join(src, "guest"),
                        ignore=shutil.ignore_patterns(
                            "*.o", "*.ko", "*.mod*", ".*", "Module.symvers",
                            "modules.order"))
        shutil.copytree(os.path.join(TOP, "include"),
                        os.path.join(src, "include"))
        unlisted = os.path.join(work, "scan-validated-kernels")
        with open(LIST) as f, open(unlisted, "w") as out:
            for ln in f:
                pat = ln.split("#", 1)[0].split()
                if not (pat and fnmatch.fnmatchcase(kver, pat[0])):
                    out.write(ln)
        assert validated(kver, unlisted) is None
        r = sh(f"make -C {src}/guest KVER={kver} VB_FAULT_INJECT=y "
               f"VB_SCAN_KERNELS={unlisted} >{work}/build.log 2>&1",
               check=False)
        assert r.returncode == 0, open(f"{work}/build.log").read()[-3000:]
        ko = os.path.join(src, "guest", "virtio_balloon.ko")
        assert sh(f"modinfo -F scan_validated {ko}").stdout.strip() == ""
        initrd = os.path.join(work, "initramfs.cpio.gz")
        r = sh(f"KVER={kver} bash {TOP}/scripts/mk-initramfs.sh {initrd} {ko}"
               f" >{work}/initrd.log 2>&1", check=False)
        assert r.returncode == 0, open(f"{work}/initrd.log").read()[-3000:]
        with _Guest(initrd=initrd) as vm:
            why = _check_refused(
                vm, rf"kernel {re.escape(kver)} not validated")
        CURRENT.facts["unlisted_refusal"] = why
        with _initrd(initrd):
            _hinted_migration_verifies("unlisted-kernel")
    finally:
        shutil.rmtree(work, ignore_errors=True)


@tag("driver", "contract", "faults", "each_kernel")
@timeout(1200)
def test_self_check_disagreement_refuses_scan():
    """Each guest kernel, our QEMU: the self-check at probe fed a count one
    block off (fault_self_check=1 counts one order-3 block more than the
    lists hold) refuses scan, naming the zone, the order and both counts
    ("self-check: <zone> order 3 nr_free N != N+1 counted"), in sysfs and
    in one log line; auto is alloc and scan cannot be written.  The same
    guest without the fault scans (test_validated_kernels_get_scan), so
    the fault is what the check caught.  A hinted migration of the 6.12
    guest with the fault hints in alloc mode and verifies."""
    check_re = r"self-check: \w+ order 3 nr_free \d+ != \d+ counted"
    for series in _series():
        with _Guest(series,
                    balloon_args="fault_inject=1 fault_self_check=1") as vm:
            lines = [ln.split(LOG_LINE, 1)[1]
                     for ln in _dmesg(vm, LOG_LINE + "self-check")]
            assert len(lines) == 1 and re.fullmatch(check_re, lines[0]), \
                lines
            why = lines[0]
            nr_free, counted = map(int, re.findall(r"\d+", why)[1:])
            assert counted == nr_free + 1, why
            # on a kernel not listed (yet) the kernel is the first reason
            if validated(env.guest_kver(series)):
                assert _check_refused(vm, re.escape(why)) == why
        CURRENT.facts[f"self_check_refusal_{series}"] = why
    _hinted_migration_verifies("self-check-fault", "fault_self_check=1")


# The DIMM's memory blocks (it is plugged at 4 GiB, above the boot RAM)
_DIMM_BLOCKS = ("bs=$((0x$(cat /sys/devices/system/memory/block_size_bytes)));"
                " for m in /sys/devices/system/memory/memory*; do"
                " i=${m##*memory}; [ $((i * bs)) -ge $((1 << 32)) ] &&"
                " echo $m; done; true")
DELAY_S = 6


def _movable_present(vm):
    """Pages present in ZONE_MOVABLE (0: the zone is empty, its per-CPU
    pagesets freed)."""
    _, out = vm.guest.run("awk '/^Node/ { z = $4 } z == \"Movable\" && "
                          "$1 == \"present\" { print $2 }' /proc/zoneinfo")
    return int(out[0]) if out else 0


@contextlib.contextmanager
def _dimm_guest(series, label):
    """Boot `series` with a 512 MiB DIMM onlined movable (the only memory
    of ZONE_MOVABLE); yields (vm, the DIMM's memory block directories)."""
    extra = ["-m", "1024,slots=2,maxmem=2048M"]
    need_ours()
    d = tempfile.mkdtemp(prefix="hb-gate-", dir=os.path.join(BUILD, "tmp"))
    vm = VM(d, label, our_keep_writes_qemu(), 1024, "ours", True,
            kernel=guest_kernel(series), initrd=guest_initrd(series),
            balloon_args="fault_inject=1", extra_args=extra,
            kernel_args="memhp_default_state=online_movable")
    vm.boot()
    try:
        vm.qmp("object-add", **{"qom-type": "memory-backend-ram",
                                "id": "hpm0", "size": 512 << 20})
        vm.qmp("device_add", driver="pc-dimm", id="hpd0", memdev="hpm0")
        _wait(lambda: vm.guest.run(_DIMM_BLOCKS)[1], 60, "the DIMM's blocks")
        _, blocks = vm.guest.run(_DIMM_BLOCKS)
        assert len(blocks) >= 2, blocks
        yield vm, blocks
    finally:
        vm.end()
        sh(f"rm -rf {d}")


def _offline_during_walk(series, fence):
    """Boot `series` with a 512 MiB DIMM onlined movable (the only memory of
    ZONE_MOVABLE), offline all its blocks but the last, hold a per-CPU walk
    inside its window in ZONE_MOVABLE (fault_walk_delay_ms) and offline the
    last block meanwhile.  Returns (seconds the offline took, the walk
    still in the window when it ended, the console's kernel errors, the
    test build's warning that the walk found its pagesets freed)."""
    with _dimm_guest(series, "fence") as (vm, blocks):
        rc, out = vm.guest.run(" && ".join(f"echo offline > {b}/state"
                                           for b in blocks[:-1]), check=False)
        assert rc == 0, out
        assert _movable_present(vm) > 0, "ZONE_MOVABLE empty before the test"
        if not fence:
            vm.guest.run(f"echo 1 > {PARAMS}/fault_no_offline_fence")
        vm.guest.run(f"echo {DELAY_S * 1000} > {PARAMS}/fault_walk_delay_ms")
        vm.guest.run(f"cat {DEBUGFS}/*/scan_walk > /tmp/walk.out 2>&1 & "
                     "echo $! > /tmp/walk.pid")

        def sleeping():
            _, w = vm.guest.run("cat /proc/$(cat /tmp/walk.pid)/wchan; echo",
                                check=False)
            return bool(w) and w[0] == "msleep"
        # the walk sits in a ZONE_MOVABLE hold's delay: it found the zone's
        # pagesets and has not locked them yet
        _wait(sleeping, 60, "the walk to sit in its ZONE_MOVABLE window")
        rc, out = vm.guest.run(
            "a=$(cut -d' ' -f1 /proc/uptime); "
            f"echo offline > {blocks[-1]}/state; r=$?; "
            "b=$(cut -d' ' -f1 /proc/uptime); echo \"T $r $a $b\"",
            timeout=120, check=False)
        line = next(x for x in out if x.startswith("T "))
        r, a, b = line.split()[1:]
        assert r == "0", out
        in_window = sleeping()
        assert _movable_present(vm) == 0, "ZONE_MOVABLE not emptied"
        _wait(lambda: vm.guest.run("kill -0 $(cat /tmp/walk.pid)",
                                   check=False)[0] != 0,
              3 * DELAY_S + 60, "the walk to end")
        vm.guest.run(f"echo 0 > {PARAMS}/fault_walk_delay_ms; "
                      f"echo 0 > {PARAMS}/fault_no_offline_fence")
        _, walk = vm.guest.run("cat /tmp/walk.out")
        assert walk and walk[0].startswith("pfns="), walk
        return (float(b) - float(a), in_window, vm.kernel_errors(),
                "about to lock pagesets the zone freed" in vm.console_text())


@tag("driver", "contract", "faults", "each_kernel", "debug_kernel")
@timeout(1800)
def test_offline_waits_for_per_cpu_walk():
    """Each guest kernel: offlining the last memory of
    ZONE_MOVABLE frees the zone's per-CPU pagesets.  A per-CPU walk held
    for DELAY_S seconds after it found them (the premise: its task sleeps
    in msleep, and the zone is empty afterwards): with the offline fence
    the offline waits for the walk (it takes more than half the delay, the
    walk is out of its window when it ends) and the console stays clean;
    with the fence switched off (fault_no_offline_fence) the offline ends
    while the walk still sits in its window, and the walk, waking, finds
    its pagesets freed: a WARNING splat on the console."""
    for series in _series():
        took, in_window, errs, freed = _offline_during_walk(series, True)
        assert took >= DELAY_S / 2 and not in_window, (series, took)
        assert not errs and not freed, (series, errs[:5])
        CURRENT.facts[f"offline_fenced_s_{series}"] = round(took, 1)
        took, in_window, errs, freed = _offline_during_walk(series, False)
        assert took < DELAY_S / 2 and in_window, (series, took)
        assert freed and any("WARNING: " in e for e in errs), \
            (series, errs[:5])
        CURRENT.facts[f"offline_unfenced_s_{series}"] = round(took, 1)


def _walks_during_offline(vm, block, walk_isolated):
    """Offline `block` (its pages in use, so the offline isolates its
    pageblocks and migrates them for a while) with the offline fence off,
    while a shell loop walks every free list over and over (debugfs
    scan_walk); fault_walk_isolated as given.  Returns the walks' lines
    and whether the offline succeeded."""
    vm.guest.run(f"echo 1 > {PARAMS}/fault_no_offline_fence; "
                 f"echo {int(walk_isolated)} > {PARAMS}/fault_walk_isolated")
    vm.guest.run("rm -f /tmp/w.stop /tmp/w.out; "
                 "while [ ! -e /tmp/w.stop ]; do "
                 f"cat {DEBUGFS}/*/scan_walk >> /tmp/w.out || break; done "
                 "> /dev/null 2>&1 & echo $! > /tmp/w.pid")
    _wait(lambda: vm.guest.run("cat /tmp/w.out 2>/dev/null | wc -l")[1]
          [0] != "0", 60, "the first walk")
    rc, out = vm.guest.run(f"echo offline > {block}/state", timeout=300,
                           check=False)
    vm.guest.run("touch /tmp/w.stop; "
                 "while kill -0 $(cat /tmp/w.pid) 2>/dev/null; do "
                 "sleep 0.1; done")
    vm.guest.run(f"echo 0 > {PARAMS}/fault_no_offline_fence; "
                 f"echo 0 > {PARAMS}/fault_walk_isolated")
    _, walks = vm.guest.run("cat /tmp/w.out")
    return [_kv(w) for w in walks if w.startswith("pfns=")], rc == 0


@tag("driver", "contract", "faults", "each_kernel", "debug_kernel")
@timeout(1800)
def test_walk_leaves_isolated_pageblocks_alone():
    """Each guest kernel: the walk never takes a free block of an
    isolated pageblock (on its way out of the allocator).  A DIMM block
    full of tmpfs pages is offlined, which isolates its pageblocks and
    migrates their pages (freeing them into MIGRATE_ISOLATE's lists),
    while the test build walks every free list over and over, the offline
    fence off so that the walks read during the offline.  The premise: the
    walks passed free pages on MIGRATE_ISOLATE's lists (isolated_free).
    None of the pages they took was of an isolated pageblock
    (isolated_taken, checked under the lock as each page is staged), and
    the console stays clean.  The check can fail: a walk told to take
    MIGRATE_ISOLATE's lists too (fault_walk_isolated) takes such pages
    during the offline of the next block."""
    for series in _series():
        with _dimm_guest(series, "isolate") as (vm, blocks):
            # fill the DIMM (the movable zone takes user pages first)
            vm.guest.run("dd if=/dev/zero of=/data/fill bs=1M count=640 "
                         "2>/dev/null",
                         timeout=300)
            walks, ok = _walks_during_offline(vm, blocks[0], False)
            assert ok, (series, "the offline failed")
            iso_free = sum(int(w["isolated_free"]) for w in walks)
            taken = sum(int(w["isolated_taken"]) for w in walks)
            # the longest holds of the lists' locks, the walks racing
            # the offline's isolation and migration
            hold_us = max(int(w["max_hold_ns"]) for w in walks) // 1000
            pcp_us = max(int(w["max_pcp_hold_ns"]) for w in walks) // 1000
            print(f"    {series}: {len(walks)} walks, isolated pages passed "
                  f"{iso_free}, taken {taken}; longest hold of zone->lock "
                  f"{hold_us} us, of a per-CPU list lock {pcp_us} us",
                  flush=True)
            assert len(walks) >= 2 and iso_free > 0, \
                (series, "no walk met an isolated free page", len(walks))
            assert taken == 0, (series, taken)
            CURRENT.facts[f"isolated_taken_{series}"] = taken
            walks, ok = _walks_during_offline(vm, blocks[1], True)
            assert ok, (series, "the detector's offline failed")
            taken = sum(int(w["isolated_taken"]) for w in walks)
            print(f"    {series}, walking MIGRATE_ISOLATE's lists too: "
                  f"{len(walks)} walks, isolated pages taken {taken}",
                  flush=True)
            assert taken > 0, (series, "the detector did not fire")
            errs = vm.kernel_errors()
            assert not errs, (series, errs[:5])
            CURRENT.facts[f"isolated_passed_{series}"] = iso_free
            CURRENT.facts[f"walk_max_hold_us_{series}"] = hold_us
            CURRENT.facts[f"walk_max_pcp_hold_us_{series}"] = pcp_us


def _kv(line):
    return dict(x.split("=", 1) for x in line.split() if "=" in x)


FRAG_MIB = 256


def _coverage(series, balloon_args="fault_inject=1", frag_mib=FRAG_MIB):
    """Boot `series` (scan mode), leave free memory in 4 KiB holes (a
    frag_mib MiB tmpfs file with every other page punched out: half of it
    free, in order-0 blocks) and keep churn running, record the pages a
    scan round hints (debugfs hinted_pfns of the test build) and sample,
    from before the round starts until after it ends, the pages that stay
    free (debugfs stayed_free, written over and over by a shell loop).
    Returns (stayed_free's counts, the round's counters, churn's result)."""
    with _Guest(series, balloon_args=balloon_args) as vm:
        assert balloon_stats(vm)["mode"] == "scan", series
        d = f"{DEBUGFS}/{os.path.basename(os.path.dirname(_dir(vm)))}"
        frag = vm.guest.hbwork(f"frag /data/frag {frag_mib} 4")
        assert frag.get("holes", 0) * 4 >= (frag_mib << 10) // 3, frag
        start_churn(vm.guest, Scenario(churn_rate=64))
        vm.guest.run(f"echo 1 > {d}/hinted_pfns")
        vm.guest.run("n=0; while [ ! -e /tmp/sf.stop ]; do "
                     f"echo 1 > {d}/stayed_free || break; n=$((n+1)); "
                     "echo $n > /tmp/sf.n; done > /dev/null 2>&1 & "
                     "echo $! > /tmp/sf.pid")

        def samples():
            _, out = vm.guest.run("cat /tmp/sf.n", check=False)
            return int(out[0]) if out and out[0].isdigit() else 0
        _wait(lambda: samples() >= 2, 60, "stayed_free's first samples")
        s0 = balloon_stats(vm)
        migrate_to_sink(vm)
        s1 = wait_until(lambda: balloon_stats(vm),
                        lambda st: st["rounds"] > s0["rounds"] and
                        st["rounds_cpu_ns"] > s0["rounds_cpu_ns"], 120,
                        "a scan round to end")
        after = samples()
        _wait(lambda: samples() >= after + 2, 60,
              "stayed_free's samples after the round")
        vm.guest.run("touch /tmp/sf.stop; "
                     "while kill -0 $(cat /tmp/sf.pid) 2>/dev/null; do "
                     "sleep 0.1; done")
        _, out = vm.guest.run(f"cat {d}/stayed_free")
        sf = {k: int(v) for k, v in _kv(out[0]).items()}
        _, out = vm.guest.run(f"tail -1 {d}/hinted_pfns")
        sf["beyond"] = int(_kv(out[0])["beyond"])
        s2 = balloon_stats(vm)
        sf["rounds"] = s2["rounds"] - s0["rounds"]
        vm.qmp("migrate_cancel")
        churn, _ = stop_churn(vm.guest)
        sf["meminfo"] = vm.guest.hbwork("meminfo")
        return sf, s1, churn or {}


@tag("driver", "contract")
@timeout(1200)
def test_scan_round_covers_the_memory_that_stays_free_under_churn():
    """On each kernel scan is validated on, with 128 MiB of the free
    memory left in 4 KiB holes and memory churn running (64 MiB/s within
    64 MiB, allocated, written, checked and freed): what a
    scan round hinted (the test build's record of every chain it queued)
    against the pages that stayed free from before the round started
    until after it ended (debugfs stayed_free: free in every sample of
    the memory map, the buddy and per-CPU lists alike, taken over and over
    while the round runs).  The premise: samples before and after the
    round, most of the guest's memory stayed free, exactly one round ran
    and hinted, churn ran and its data was intact.  The round hints at
    least 90 % of what stayed free.  A page churn allocated after the
    round hinted it does not count (it did not stay free); one allocated
    and freed again between two samples counts as free although the round
    may have found it in use: the figure is a floor.  The check can fail:
    on 6.12, with twice the holes, a round that leaves blocks under 4 MiB
    alone (min_order 10) covers less than 90 %."""
    for series in _scan_series():
        sf, s1, churn = _coverage(series)
        print(f"    {series}: {sf}", flush=True)
        assert sf["samples"] >= 4, sf
        assert sf["free"] >= (256 << 20) >> 12, sf
        assert sf["rounds"] == 1 and s1["round_bytes"] > 0, (sf, s1)
        assert sf["beyond"] == 0, sf
        assert churn.get("ok") == 1 and churn.get("mib_written", 0) > 0, \
            churn
        cover = sf["covered"] / sf["free"]
        CURRENT.facts[f"scan_coverage_{series}"] = round(cover, 3)
        CURRENT.facts[f"scan_stayed_free_mib_{series}"] = sf["free"] >> 8
        CURRENT.facts[f"scan_hinted_mib_{series}"] = sf["hinted"] >> 8
        assert cover >= 0.9, (series, cover, sf)
    sf, s1, _ = _coverage("6.12", "fault_inject=1 hint_min_order=10",
                          2 * FRAG_MIB)
    cover = sf["covered"] / sf["free"]
    print(f"    6.12, min_order 10: {sf}", flush=True)
    assert sf["rounds"] == 1 and s1["round_bytes"] > 0, (sf, s1)
    assert cover < 0.9, (cover, sf)
    CURRENT.facts["scan_coverage_min_order_10_6.12"] = round(cover, 3)
