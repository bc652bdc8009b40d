# SPDX-License-Identifier: GPL-2.0
"""Our guest driver's contract with the device, on both guest kernels:
which hint mode each host of a stack gets (stock QEMU: alloc; our QEMU,
which offers VIRTIO_BALLOON_F_HINT_KEEP_WRITES, bit 16: scan),
sleep with hinting in progress (freeze/restore and a restore that fails),
memory hot-add/remove while free memory is searched, and migrations of our
driver on each guest kernel, data verified on the destination."""
import os
import time

from hb import env
from hb.env import guest_initrd, guest_kernel
from hb.migration import migrate_to_sink
from hb.rigs import (BootedGuest, IothreadGate, held, held_parts,
                     nothing_held)
from hb.testlib import (CURRENT, assert_intact, keep_writes_mode, migrate,
                        need_ours, our_keep_writes_qemu, tag, timeout)
from hb.testlib import wait_for as _wait
from hb.testlib import wait_until
from hb.vm import (balloon_features, balloon_stats, device_counters,
                   write_sysfs)
from hb.workloads import Scenario

KEEP_WRITES_BIT = 16
FREE_PAGE_HINT_BIT = 3
DEBUGFS = "/sys/kernel/debug/virtio_balloon"


def _series(every=False):
    """The guest kernels a test boots: the one kernel HB_GUEST names
    (tests/run.py each_kernel: Debian 13's 7.3 flavours); else 6.1 and
    6.12 for a test that `make check` runs on both (every=True: the
    hinted migration and the mode each kernel gets) and, under
    HB_KERNEL_MATRIX=full (`make kernels`), for every test; else 6.12,
    the default stack's guest.  The runner sets HB_GUEST after the tests
    were loaded: read it when the test runs."""
    g = os.environ.get("HB_GUEST")
    if g:
        return (g,)
    if every or os.environ.get("HB_KERNEL_MATRIX") == "full":
        return ("6.1", "6.12")
    return ("6.12",)


def _need(series):
    """`make images` builds the driver and both test images: a missing one
    is a build failure, not a missing environment."""
    need_ours()
    assert os.path.exists(guest_initrd(series)), \
        f"no test image for {series} (make images)"


def _hosts():
    """The hosts of this process's stack and the hint mode `auto` must pick
    on each: stock QEMU offers no HINT_KEEP_WRITES (alloc), ours offers it
    (scan).  Our build lacking the property is a failure."""
    return [("stock", env.STOCK_QEMU, "alloc"),
            ("ours", our_keep_writes_qemu(), keep_writes_mode())]


class Guest(BootedGuest):
    """A booted guest (not migrated) of one guest kernel series with our
    driver's test build; fails on any kernel error on its console."""

    def __init__(self, series, binary=None, mem=1024,
                 balloon_args="fault_inject=1", extra_args=(),
                 kernel_args="", hint=True, props="", smp=2):
        _need(series)
        super().__init__("ct", binary or env.STOCK_QEMU, mem, "ours", hint,
                         kernel=guest_kernel(series),
                         initrd=guest_initrd(series),
                         balloon_args=balloon_args, extra_args=extra_args,
                         kernel_args=kernel_args, device_props=props,
                         smp=smp)


def _dir(vm):
    _, out = vm.guest.run("ls -d /sys/bus/virtio/devices/*/free_page_hint")
    assert out, "no free_page_hint sysfs directory"
    return out[0]


def _mode(vm):
    return balloon_stats(vm)["mode"]


def _write(vm, path, value):
    rc, _, after, err = write_sysfs(vm, path, value)
    return rc, after, err


def _dmesg(vm, pattern):
    _, out = vm.guest.run(f"dmesg | grep -E '{pattern}'", check=False)
    return out


def _check_refuses_scan(vm, why):
    """Writing scan fails with EINVAL, leaves alloc, and says why."""
    d = _dir(vm)
    rc, after, err = _write(vm, f"{d}/mode", "scan")
    CURRENT.add("bad_inputs")
    assert rc != 0 and "Invalid argument" in err and after == "alloc", \
        (rc, after, err)
    msg = _dmesg(vm, "hint mode scan refused")
    assert msg and why in msg[-1], msg
    rc, after, err = _write(vm, f"{d}/mode", "auto")
    assert rc == 0 and after == "alloc", (rc, after, err)


@tag("driver", "contract", "each_stack")
def test_mode_without_keep_writes_is_alloc():
    """Stock QEMU of the stack, each guest kernel: free page hinting is
    negotiated, HINT_KEEP_WRITES (bit 16) is not, auto picks alloc, and
    forcing scan gives EINVAL with the reason in the kernel log."""
    hosts = [(n, b) for n, b, want in _hosts() if want == "alloc"]
    for series in _series(every=True):
        for name, binary in hosts:
            with Guest(series, binary) as vm:
                f = balloon_features(vm)
                assert f[FREE_PAGE_HINT_BIT] == "1", (series, name, f)
                assert len(f) <= KEEP_WRITES_BIT or \
                    f[KEEP_WRITES_BIT] == "0", (series, name, f)
                assert _mode(vm) == "alloc", (series, name)
                _check_refuses_scan(vm, "HINT_KEEP_WRITES")
                CURRENT.facts[f"mode_{env.STACK}_{name}_{series}"] = \
                    "alloc"
    # The module parameter cannot ask for scan either: it loads, says why,
    # and uses alloc.
    with Guest("6.12", balloon_args="hint_mode=scan") as vm:
        assert _mode(vm) == "alloc"
        assert _dmesg(vm, "hint_mode=scan refused, using alloc")


@tag("driver", "contract", "each_stack")
def test_mode_with_keep_writes_is_scan():
    """Our QEMU of the stack offers HINT_KEEP_WRITES: bit 16 is negotiated,
    auto picks scan, alloc can be asked for and auto goes back to scan; a
    guest whose free pages keep a content (page_poison=1) still gets
    alloc."""
    hosts = [(n, b) for n, b, want in _hosts() if want == "scan"]
    for series in _series(every=True):
        for name, binary in hosts:
            with Guest(series, binary) as vm:
                f = balloon_features(vm)
                assert len(f) > KEEP_WRITES_BIT and \
                    f[KEEP_WRITES_BIT] == "1", (series, name, f)
                assert _mode(vm) == "scan", (series, name)
                d = _dir(vm)
                rc, after, err = _write(vm, f"{d}/mode", "alloc")
                assert rc == 0 and after == "alloc", (rc, after, err)
                rc, after, err = _write(vm, f"{d}/mode", "auto")
                assert rc == 0 and after == "scan", (rc, after, err)
                CURRENT.facts[f"mode_{env.STACK}_{name}_{series}"] = \
                    "scan"
    for _, binary in hosts:
        with Guest("6.12", binary, kernel_args="page_poison=1") as vm:
            assert _mode(vm) == "alloc"
            _check_refuses_scan(vm, "poisoned")


def _start_round(vm):
    """A throttled migration to a sink: the host issues a command id and a
    round runs; return once one has started."""
    r0 = balloon_stats(vm).get("rounds", 0)
    migrate_to_sink(vm)
    _wait(lambda: balloon_stats(vm).get("rounds", 0) > r0, 60, "a hint round")


def _cancel(vm):
    vm.qmp("migrate_cancel")
    _wait(lambda: vm.qmp("query-migrate").get("status") in
          ("cancelled", "failed"), 60, "migration cancelled")


# How long the PM test path keeps the devices frozen (the kernel's
# suspend.pm_test_delay, 5 s unless set)
PM_TEST_DELAY_S = 1


def _sleep_cycle(vm):
    """Suspend to idle through the kernel's PM test path: tasks frozen,
    devices frozen (our freeze), PM_TEST_DELAY_S, devices restored (our
    restore)."""
    rc, out = vm.guest.run(f"echo {PM_TEST_DELAY_S} > "
                           "/sys/module/suspend/parameters/pm_test_delay && "
                           "echo devices > /sys/power/pm_test && "
                           "echo freeze > /sys/power/state; echo rc=$?; "
                           "echo none > /sys/power/pm_test", timeout=180,
                           check=False)
    return out


def _balloon_works(vm, label):
    """The balloon inflates and deflates through QMP, and a new hint round
    runs and hints memory."""
    vm.qmp("balloon", value=512 << 20)
    _wait(lambda: vm.qmp("query-balloon")["actual"] == 512 << 20, 120,
          f"{label}: balloon at 512 MiB")
    vm.qmp("balloon", value=1024 << 20)
    _wait(lambda: vm.qmp("query-balloon")["actual"] == 1024 << 20, 120,
          f"{label}: balloon back at 1 GiB")
    b0 = balloon_stats(vm).get("bytes_hinted", 0)
    _start_round(vm)
    _wait(lambda: balloon_stats(vm).get("bytes_hinted", 0) > b0, 60,
          f"{label}: hinting after restore")
    _cancel(vm)


@tag("driver", "contract", "each_kernel", "debug_kernel")
def test_freeze_restore_with_round_in_flight():
    """Suspend to idle (PM test path, devices level) while a hint round runs
    and its blocks are held: tasks freeze (the PM notifier ended the
    round), the device goes down and comes back, the console stays clean,
    and the balloon still inflates, deflates and hints."""
    for series in _series():
        with Guest(series) as vm:
            vm.guest.hbwork("fill 600 5")
            _start_round(vm)
            out = _sleep_cycle(vm)
            assert "rc=0" in out, (series, out)
            assert _dmesg(vm, "PM: suspend exit"), series
            assert not _dmesg(vm, "Freezing .* failed|restore failed"), series
            _cancel(vm)
            _wait(lambda: nothing_held(balloon_stats(vm)), 60,
                  "no block held")
            _balloon_works(vm, series)


@tag("driver", "contract", "faults", "each_kernel")
def test_sleep_while_the_host_holds_buffers_does_not_spin():
    """Each guest kernel, our QEMU, alloc mode with at most one 4 MiB block
    in flight: with the device's hint bottom half held (IothreadGate: the
    host uses no buffer), a round queues its block and waits for the
    device (inflight_waits, the premise).  Sleep (PM test path) pauses
    hinting meanwhile: the round ends at once, and the STOP id and the
    drain after it do not wait either (a wait would not sleep while the
    PM notifier waits for the round: it would spin, kicking the device,
    for up to 3 s).  The round's CPU time stays far below the 1 s its
    drain alone would spin (a fifth of it), the sleep cycle succeeds,
    and once the device runs again everything comes back."""
    args = ("fault_inject=1 hint_mode=alloc "
            "hint_alloc_max_inflight_kb=4096")
    for series in _series():
        with Guest(series, our_keep_writes_qemu(), balloon_args=args) as vm:
            vm.guest.hbwork("fill 600 5")
            gate = IothreadGate(vm, os.path.dirname(vm.log_path()))
            try:
                gate.close_gate()
                s0 = balloon_stats(vm)
                migrate_to_sink(vm)
                s1 = wait_until(
                    lambda: balloon_stats(vm),
                    lambda st: st["rounds"] > s0["rounds"] and
                    st["inflight_waits"] > s0["inflight_waits"] and
                    held_parts(st)["inflight"] > 0,
                    60, "a round waiting for the held device")
                out = _sleep_cycle(vm)
                assert "rc=0" in out, (series, out)
                s2 = wait_until(lambda: balloon_stats(vm),
                                lambda st: st["last_round_ns"] > 0, 30,
                                "the round to end")
                assert s2["rounds"] == s1["rounds"], (s1, s2)
                assert s2["last_round_cpu_ns"] < 200 * 10**6, s2
                CURRENT.facts[f"paused_round_cpu_ms_{series}"] = \
                    s2["last_round_cpu_ns"] / 1e6
                CURRENT.facts[f"paused_round_ms_{series}"] = \
                    s2["last_round_ns"] / 1e6
                gate.open_gate()
            finally:
                gate.stop()
            _cancel(vm)
            _wait(lambda: nothing_held(balloon_stats(vm)), 60,
                  "no block held")


@tag("driver", "contract", "each_kernel")
def test_failed_restore_leaves_no_dangling_queue():
    """A restore that fails after the queues were found (fault injection)
    leaves no queue behind: the console stays clean through the failure,
    the next sleep cycle restores the device, and the balloon inflates,
    deflates and hints again."""
    for series in _series():
        with Guest(series) as vm:
            vm.guest.run(f"for d in {DEBUGFS}/*/fail_restore; do "
                         "echo 100 > $d/probability; echo 1 > $d/times; "
                         "done")
            _start_round(vm)
            _sleep_cycle(vm)
            assert _dmesg(vm, "restore failed: -5"), series
            # the balloon target changes while the device is down: a
            # pending size change must not touch a deleted queue
            vm.qmp("balloon", value=768 << 20)
            time.sleep(2)
            _cancel(vm)
            out = _sleep_cycle(vm)
            assert "rc=0" in out, (series, out)
            _, cnt = vm.guest.run(f"cat {DEBUGFS}/*/fail_restore/times")
            assert cnt == ["0"], cnt
            _balloon_works(vm, series)


def _fault_point(vm, name, times):
    """Fail the next `times` passes through fault point `name` of the test
    build (-1: every pass; 0: none), as the kernel's fault-inject
    framework reads probability and times."""
    vm.guest.run(f"for d in {DEBUGFS}/*/{name}; do "
                 f"echo 100 > $d/probability; echo {times} > $d/times; done")


@tag("driver", "contract", "faults")
def test_stop_is_sent_again_when_it_cannot_be_queued():
    """A round's STOP id that cannot be queued (fault point fail_stop: the
    way a ring full of buffers the device keeps, or a failed allocation,
    fails it) is sent again while the round's id is the device's.  Our
    QEMU waits for STOP before it sends RAM (pre-send wait): with one
    failed attempt the wait ends without timing out and stop_retries
    counts the round; with every attempt failing, the detector this test
    relies on fires: the wait runs into its timeout and the kernel log
    says the STOP is owed."""
    binary = our_keep_writes_qemu()
    for series in _series():
        with Guest(series, binary) as vm:
            _fault_point(vm, "fail_stop", 1)
            _start_round(vm)
            s = wait_until(lambda: balloon_stats(vm),
                           lambda st: st.get("last_round_ns", 0), 60,
                           "the round to end")
            c = wait_until(lambda: device_counters(vm),
                           lambda d: d.get("presend-waits", 0), 60,
                           "the pre-send wait to end")
            assert s["stop_retries"] == 1 and s["rounds_timed_out"] == 0, \
                (series, s)
            assert c["presend-timeouts"] == 0, (series, c)
            _, left = vm.guest.run(f"cat {DEBUGFS}/*/fail_stop/times")
            assert left == ["0"], (series, left)
            assert not _dmesg(vm, "cannot send stop id"), series
            _cancel(vm)

            # every attempt fails: nothing tells the device the round ended
            _fault_point(vm, "fail_stop", -1)
            r0 = s["rounds"]
            _start_round(vm)
            c = wait_until(lambda: device_counters(vm),
                           lambda d: d["presend-timeouts"] > 0, 60,
                           "the pre-send wait to time out")
            s = balloon_stats(vm)
            assert s["rounds"] == r0 + 1 and s["stop_retries"] >= 2, \
                (series, s)
            assert _dmesg(vm, "cannot send stop id: -12, sending it later"), \
                series
            _fault_point(vm, "fail_stop", 0)
            _cancel(vm)
            _wait(lambda: nothing_held(balloon_stats(vm)), 60,
                  "DONE to end hinting")
            CURRENT.add("faults", 2)


@tag("driver", "contract", "faults")
def test_cancel_ends_the_wait_for_a_round():
    """Our QEMU waits, before it sends RAM, for the guest to end the hint
    round it asked for, up to x-free-page-hint-wait-ms (60 s here).  A guest
    that never ends it (every STOP fails) holds the migration in that wait;
    migrate_cancel ends the wait at once: the migration is cancelled within
    5 s and the device counts one wait that did not run out."""
    binary = our_keep_writes_qemu()
    with Guest("6.12", binary, props="x-free-page-hint-wait-ms=60000") as vm:
        _fault_point(vm, "fail_stop", -1)
        _start_round(vm)
        time.sleep(1)
        st = vm.qmp("query-migrate")["status"]
        c = device_counters(vm)
        # the premise: the round still runs and the wait has not ended
        # (a wait is counted when it ends)
        assert st in ("setup", "active") and c["status"] == "start" and \
            c["presend-waits"] == 0, (st, c)
        t0 = time.time()
        vm.qmp("migrate_cancel")
        _wait(lambda: vm.qmp("query-migrate")["status"] == "cancelled", 30,
              "the migration to be cancelled")
        took = time.time() - t0
        c = device_counters(vm)
        print(f"    cancelled in {took:.1f} s, {c['presend-wait-ms']} ms "
              "in the wait", flush=True)
        assert took < 5, took
        assert c["presend-waits"] == 1 and c["presend-timeouts"] == 0 and \
            c["presend-wait-ms"] < 5000, c
        _fault_point(vm, "fail_stop", 0)
        CURRENT.add("faults")


@tag("driver", "contract")
def test_sysfs_group_only_with_hinting():
    """The free_page_hint group is one of the driver's dev_groups: on a
    device with hinting every file holds one value on one line (a word or
    a number; scan_refusal a reason in words); on a
    device without it the group shows no file (6.12 hides the directory
    too; 6.1, which cannot hide a named group, shows it empty).  The
    blocks hinted per order are in debugfs, one order per line."""
    for series in _series():
        with Guest(series, hint=False) as vm:
            f = balloon_features(vm)
            assert f[FREE_PAGE_HINT_BIT] == "0", (series, f)
            _, out = vm.guest.run(
                "d=$(ls -d /sys/bus/virtio/devices/*/free_page_hint "
                "2>/dev/null); echo \"dir=$d\"; [ -n \"$d\" ] && ls -A $d; "
                f"ls {DEBUGFS}/*/; true")
            if series == "6.1":
                assert out[0].startswith("dir=/sys/") and \
                    not [x for x in out[1:] if x and not x.startswith(
                        ("fail_restore", DEBUGFS))], (series, out)
            else:
                assert out[0] == "dir=", (series, out)
            assert not [x for x in out if "blocks_by_order" in x], out
        with Guest(series) as vm:
            d = _dir(vm)
            _, out = vm.guest.run(f"for f in {d}/*; do "
                                  "echo \"$(wc -l < $f) $(wc -w < $f) $f\"; "
                                  "done")
            # scan_refusal is one reason on one line, in words
            bad = [x for x in out if not x.startswith("1 1 ") and not (
                x.startswith("1 ") and x.endswith("/scan_refusal"))]
            assert len(out) > 20 and not bad, (series, bad)
            _, lines = vm.guest.run(f"cat {DEBUGFS}/*/blocks_by_order")
            assert [x.split()[0] for x in lines] == \
                [str(o) for o in range(len(lines))] and \
                len(lines) == 11, (series, lines)


@tag("driver", "contract")
def test_balloon_target_holds_the_wakeup_source():
    """A new balloon target holds the device's wakeup source until the
    inflate work has run (system sleep waits for it), then lets it go: the
    device is wakeup capable, and once wakeup is enabled each change of
    target activates the source once and leaves it inactive."""
    for series in _series():
        with Guest(series) as vm:
            def power(cmd):
                """Run cmd with $p the balloon's power/ directory."""
                return vm.guest.run(
                    "for p in /sys/bus/virtio/devices/*/power; do "
                    f"[ $(cat $p/../device) = 0x0005 ] && {cmd}; done; true")

            _, out = power("cat $p/wakeup")
            assert out == ["disabled"], (series, out)
            power("echo enabled > $p/wakeup")

            def wake():
                _, o = power("echo $(cat $p/wakeup_active_count) "
                             "$(cat $p/wakeup_active)")
                return tuple(int(x) for x in o[0].split())
            n0, _ = wake()
            for i, target in enumerate((768, 1024)):
                vm.qmp("balloon", value=target << 20)
                _wait(lambda t=target: vm.qmp("query-balloon")["actual"] ==
                      t << 20, 60, f"balloon at {target} MiB")
                n, active = wait_until(
                    wake, lambda w, k=i: w[1] == 0 and w[0] > n0 + k, 30,
                    "the wakeup source to be let go")
                assert n >= n0 + i + 1 and active == 0, (series, n0, n)


# The DIMM's memory blocks (it is plugged at 4 GiB, above the boot RAM)
_DIMM_BLOCKS = ("bs=$((0x$(cat /sys/devices/system/memory/block_size_bytes)));"
                " for m in /sys/devices/system/memory/memory*; do"
                " i=${m##*memory}; [ $((i * bs)) -ge $((1 << 32)) ] &&"
                " echo $m; done; true")


@tag("driver", "contract")
def test_memory_hotplug_while_searching():
    """Each guest kernel: hot-add a 512 MiB DIMM, then search free memory
    (scan walks of the test build, in a loop, and alloc rounds of a
    migration) while its memory is used, taken offline by the guest, and
    hot-removed: the walk finds the DIMM's free memory while it is there
    and none of it after, and the guest logs no error.  (QEMU refuses device_del during a
    migration, so the rounds run while the guest offlines the memory, the
    walks during the removal too.)"""
    extra = ["-m", "1024,slots=2,maxmem=2048M"]
    for series in _series():
        with Guest(series, extra_args=extra,
                   kernel_args="memhp_default_state=online_movable") as vm:
            walk = f"cat {DEBUGFS}/*/scan_walk"

            def walk_pfns():
                _, out = vm.guest.run(walk)
                kv = dict(w.split("=", 1) for w in out[0].split())
                return int(kv["pfns"])
            before = walk_pfns()
            vm.qmp("object-add", **{"qom-type": "memory-backend-ram",
                                    "id": "hpm0", "size": 512 << 20})
            vm.qmp("device_add", driver="pc-dimm", id="hpd0", memdev="hpm0")
            # the walk counts the pages of the free blocks it took; the
            # DIMM's memmap comes out of the boot memory
            _wait(lambda: walk_pfns() >= before + (400 << 8), 60,
                  "the walk to find the new DIMM's free memory")
            _, blocks = vm.guest.run(_DIMM_BLOCKS)
            assert blocks, "no memory block of the DIMM"
            vm.guest.run(f"(while :; do {walk}; done) > /dev/null 2>&1 & "
                         "echo $! > /tmp/walker")
            _start_round(vm)
            vm.guest.hbwork("fill 900 7")
            rc, out = vm.guest.run(" ; ".join(f"echo offline > {b}/state"
                                              for b in blocks), check=False)
            _, states = vm.guest.run(
                "cat " + " ".join(b + "/state" for b in blocks))
            assert states.count("offline") >= 1, (rc, out, states)
            _cancel(vm)
            vm.qmp("device_del", id="hpd0")
            _wait(lambda: not vm.qmp("query-memory-devices"), 120,
                  "the DIMM to be removed")
            vm.qmp("object-del", id="hpm0")
            vm.guest.run("kill $(cat /tmp/walker)")
            _wait(lambda: walk_pfns() < before + (256 << 8), 60,
                  "the walk to skip the removed DIMM")
            CURRENT.facts[f"hotplug_offlined_{series}"] = \
                states.count("offline")


def _kv(line):
    return {k: int(v) for k, v in (w.split("=", 1) for w in line.split())}


def _zoneinfo(vm):
    """The guest's zones: {name: {"free", "high", "protection"}} (pages;
    protection: the lowmem reserve against each zone's requests)."""
    _, out = vm.guest.run("grep -E '^Node|^ +(pages free|high) |protection:'"
                          " /proc/zoneinfo")
    zones, cur = {}, None
    for ln in out:
        w = ln.split()
        if w[0] == "Node":
            cur = zones.setdefault(w[3], {})
        elif w[0] == "pages":
            cur["free"] = int(w[2])
        elif w[0] == "high":
            cur["high"] = int(w[1])
        elif w[0] == "protection:":
            cur["protection"] = [int(x.strip("(),")) for x in w[1:]]
    return zones


def _wait_held(vm):
    """The first alloc round of a fresh guest has ended (last_round_ns is
    set) and holds blocks."""
    def ended():
        s = balloon_stats(vm)
        h = held(s)
        return s if s.get("last_round_ns", 0) > 0 and h > 0 else None
    return _wait(ended, 180, "an alloc round to end holding its blocks")


# Every zone's free pages, counters folded first (vm.stat_refresh), as
# "zone pages" lines, over and over until /tmp/zstop exists
_ZONE_SAMPLER = ("(while [ ! -e /tmp/zstop ]; do"
                 " echo 1 > /proc/sys/vm/stat_refresh;"
                 " awk '/^Node/ { z = $4 } $1 == \"pages\" && $2 == \"free\""
                 " { print z, $3 }' /proc/zoneinfo; done) > /tmp/zsamples"
                 " 2>/dev/null & echo $! > /tmp/zsampler")


@tag("driver", "contract")
@timeout(1200)
def test_alloc_round_with_8_vcpus_keeps_every_zone_above_its_floor():
    """8 vCPUs (the most this machine runs well), where mm's per-CPU
    counter drift (up to the stat threshold per CPU) is largest: an alloc
    round, which reads every zone's free pages with that drift folded in
    and counts the highatomic reserve, CMA and unaccepted memory out,
    takes the free memory of the zones down to their floor (high
    watermark + lowmem reserve + reserve_kb: the premise, it took at
    least 400 MiB) and, sampled with the counters folded throughout the
    round, no zone it took from is ever below its floor by more than one
    block of the largest order."""
    reserve = 65536 >> 2                       # reserve_kb's default, pages
    with Guest("6.12", balloon_args="fault_inject=1 hint_mode=alloc",
               smp=8) as vm:
        vm.guest.hbwork("fill 600 5")
        z0 = _zoneinfo(vm)
        vm.guest.run(_ZONE_SAMPLER)
        _start_round(vm)
        st = _wait_held(vm)
        vm.guest.run("touch /tmp/zstop; while kill -0 $(cat /tmp/zsampler)"
                     " 2>/dev/null; do sleep 0.2; done")
        _, out = vm.guest.run("cat /tmp/zsamples")
        z1 = _zoneinfo(vm)
        low = {}
        for ln in out:
            w = ln.split()
            if len(w) == 2 and w[1].isdigit():
                low[w[0]] = min(low.get(w[0], 1 << 62), int(w[1]))
        assert held(st) >= 400 << 8, st
        assert len(out) > 10 * len(z0), ("too few samples", len(out))
        block = 1 << 10                         # pages of an order-10 block
        took = []
        for name, z in z1.items():
            if name in ("DMA32", "Normal") and \
                    z["free"] < z0[name]["free"] - (64 << 8):
                floor = z["high"] + z["protection"][2] + reserve
                took.append(name)
                assert low[name] >= floor - block, (name, low[name], floor)
                CURRENT.facts[f"alloc_8cpu_{name}_min_above_floor_pages"] = \
                    low[name] - floor
        assert took, (z0, z1)
        _cancel(vm)
        _wait(lambda: nothing_held(balloon_stats(vm)), 60,
              "DONE to give every block back")


@tag("driver", "contract", "each_kernel")
def test_alloc_round_leaves_movable_memory_offlinable():
    """Alloc mode never holds movable memory.  Each guest kernel, stock
    QEMU (alloc mode), a 512 MiB DIMM onlined movable (ZONE_MOVABLE) and
    mostly free: an alloc round takes the free memory of the other zones
    down to each zone's floor (high watermark + lowmem reserve +
    reserve_kb) and holds it; none of its blocks is in ZONE_MOVABLE or in a
    movable or CMA pageblock (debugfs held_blocks of the test build), the
    DIMM's free memory is left alone, and the DIMM's memory blocks go
    offline while the round still holds its blocks."""
    extra = ["-m", "1024,slots=2,maxmem=2048M"]
    reserve = 65536 >> 2                       # reserve_kb's default, pages
    for series in _series():
        with Guest(series, extra_args=extra,
                   balloon_args="fault_inject=1 hint_mode=alloc",
                   kernel_args="memhp_default_state=online_movable") as vm:
            vm.qmp("object-add", **{"qom-type": "memory-backend-ram",
                                    "id": "hpm0", "size": 512 << 20})
            vm.qmp("device_add", driver="pc-dimm", id="hpd0", memdev="hpm0")
            blocks = _wait(lambda: vm.guest.run(_DIMM_BLOCKS)[1], 60,
                           "the DIMM's memory blocks")
            _, zones = vm.guest.run(
                "cat " + " ".join(b + "/valid_zones" for b in blocks))
            assert zones == ["Movable"] * len(blocks), (series, zones)
            vm.guest.hbwork("fill 600 5")
            z0 = _zoneinfo(vm)
            assert z0["Movable"]["free"] >= 400 << 8, (series, z0)
            assert balloon_stats(vm)["rounds"] == 0, series
            _start_round(vm)
            st = _wait_held(vm)
            _, out = vm.guest.run(f"cat {DEBUGFS}/*/held_blocks")
            hb = _kv(out[0])
            z1 = _zoneinfo(vm)
            print(f"    {series}: held {hb['pages'] >> 8} MiB in "
                  f"{hb['blocks']} blocks, {held_parts(st)}; {out[0]}",
                  flush=True)
            assert hb["pages"] >= 400 << 8, (series, hb, st)
            assert hb["zone_movable_pages"] == 0, (series, hb)
            assert hb["pb_movable"] == 0 and hb.get("pb_cma", 0) == 0 \
                and hb["pb_unknown"] == 0, (series, hb)
            # the free memory of ZONE_MOVABLE was not taken ...
            assert z1["Movable"]["free"] >= z0["Movable"]["free"] - (8 << 8), \
                (series, z0["Movable"], z1["Movable"])
            # ... and no zone the round took from went below its floor
            # (the lowmem reserve against ZONE_NORMAL requests: index 2)
            for name, z in z1.items():
                if name in ("DMA32", "Normal") and \
                        z["free"] < z0[name]["free"] - (64 << 8):
                    floor = z["high"] + z["protection"][2] + reserve
                    assert z["free"] >= floor - (4 << 8), (series, name, z)
            rc, out = vm.guest.run(
                " ; ".join(f"timeout 120 sh -c 'echo offline > {b}/state'"
                           for b in blocks), timeout=600, check=False)
            _, states = vm.guest.run(
                "cat " + " ".join(b + "/state" for b in blocks))
            assert states == ["offline"] * len(blocks), (series, rc, out,
                                                         states)
            s = balloon_stats(vm)
            assert held_parts(s) == held_parts(st), (series, st, s)
            CURRENT.facts[f"offline_while_held_{series}"] = {
                "held_mib": hb["pages"] >> 8, "blocks_offlined": len(blocks),
                "pageblocks": {k: v for k, v in hb.items()
                               if k.startswith("pb_")}}
            _cancel(vm)
            _wait(lambda: nothing_held(balloon_stats(vm)), 60,
                  "DONE to give every block back")


@tag("driver", "contract", "migrate", "each_kernel", "cloud_kernel")
def test_migrate_our_driver_each_kernel():
    """Our driver on each guest kernel, migrated with hinting by the stock
    and our QEMU of the stack: ours (scan mode, HINT_KEEP_WRITES) keeps the
    data intact with both consoles clean; the stock run is a reference
    (stock's own hinting is measured, not asserted), in alloc mode, and only counted."""
    hosts = _hosts()
    for series in _series(every=True):
        _need(series)
        old = os.environ.get("HB_GUEST")
        os.environ["HB_GUEST"] = series
        try:
            for name, binary, want in hosts:
                res = migrate(f"ct-{env.STACK}-{series}-{name}",
                              src_bin=binary, balloon="ours", hint=True,
                              scenario=Scenario("stale"))
                if name == "stock":
                    CURRENT.add("stock_runs")
                    if not res.get("ok"):
                        CURRENT.add("stock_losses")
                    assert res["status"] == "completed", res.get("error")
                    continue
                assert_intact(res, f"our driver on {series}, {name} QEMU")
                g = res.get("guest_hint") or {}
                assert g.get("bytes_hinted", 0) > 0, g
                assert g.get("mode") == want, (name, g)
        finally:
            if old is None:
                os.environ.pop("HB_GUEST", None)
            else:
                os.environ["HB_GUEST"] = old
