# SPDX-License-Identifier: GPL-2.0
"""Bad input from the guest: invalid sysfs knob values and module
parameters, malformed hints (out of RAM, misaligned, oversized chains, a
stale or short command id, zero length, a buffer the host cannot map).
The host ignores and counts each, or breaks only the balloon device where
virtio requires it; QEMU reports no error other than the one a test
provokes, the data is intact and the guest gets its memory back."""
import re

from hb.rigs import Rig
from hb.testlib import CURRENT, need_ours, tag
from hb.vm import write_sysfs


KNOB_DIR = "/sys/bus/virtio/devices/virtio0/free_page_hint"
COMMON_BAD = ["\n", "abc", "-1", "5x", "1 2", "0x10", "1\n\n", " 1",
              "1.5", "99999999999999999999", "4294967296", "18446744073709551616"]
KNOB_BAD = {
    "enabled": ["2", "100"],
    "min_order": ["11", "64"],
    "alloc_min_order": ["11", "64"],
    "blocks_per_chain": ["0", "65", "1024"],
    "chains_per_kick": ["0", "257"],
    "reserve_kb": ["4294967295"],          # > total RAM in KiB
    "alloc_max_inflight_kb": ["0", "4095"],  # < one 4 MiB block
    "pcp_max_pages": ["1048577", "4294967295"],
    "mode": ["0", "1", "Auto", "Scan", "allocx", "scan alloc", "+scan"],
}
KNOB_GOOD = {"enabled": "1", "min_order": "3",
             "alloc_min_order": "3",
             "blocks_per_chain": "8", "chains_per_kick": "4",
             "reserve_kb": "0", "alloc_max_inflight_kb": "8192",
             "pcp_max_pages": "4096", "mode": "alloc"}


def _write_knob(vm, knob, value):
    return write_sysfs(vm, f"{KNOB_DIR}/{knob}", value)


@tag("reliability", "bad_input", "sanitize", "each_stack", "each_kernel")
def test_sysfs_knobs_reject_bad_values():
    """Every knob: empty, non-numeric, negative, zero (where out of range),
    huge, out-of-range, trailing garbage -> EINVAL, value unchanged; valid
    values (with and without one newline, leading '+') are taken.  Bad
    module parameters make insmod fail."""
    need_ours()
    with Rig("sysfs", ticker=False) as rig:
        rig.boot(prepare=False)
        vm = rig.vm
        bad_ok = []
        for knob, extra in KNOB_BAD.items():
            for v in COMMON_BAD + extra:
                rc, b, a, err = _write_knob(vm, knob, v)
                CURRENT.add("bad_inputs")
                if rc == 0 or a != b or "Invalid argument" not in err:
                    bad_ok.append((knob, v, rc, b, a, err))
            # a zero-length write(2) returns 0 and never reaches ->store
            rc, b, a, err = _write_knob(vm, knob, "")
            assert rc == 0 and a == b, (knob, "empty", rc, b, a, err)
            good = KNOB_GOOD[knob]
            signed = [] if knob == "mode" else ["+" + good]
            for v in [good, good + "\n"] + signed:
                rc, b, a, err = _write_knob(vm, knob, v)
                assert rc == 0 and a == good, (knob, repr(v), rc, a, err)
        assert not bad_ok, f"bad values accepted or changed: {bad_ok}"
        # cross-knob constraint after valid writes: still a working device
        assert not vm.kernel_errors()
        # module parameters: validated with the same function at load time
        vm.guest.run("rmmod virtio_balloon")
        bad_params = ["hint_min_order=11", "hint_alloc_min_order=11",
                      "hint_blocks_per_chain=0",
                      "hint_blocks_per_chain=65", "hint_chains_per_kick=0",
                      "hint_chains_per_kick=257", "hint_enabled=2",
                      "hint_reserve_kb=4294967295",
                      "hint_alloc_max_inflight_kb=4095",
                      "hint_pcp_max_pages=1048577",
                      "hint_mode=bogus", "hint_mode="]
        loaded = []
        for p in bad_params:
            rc, out = vm.guest.run(
                f"insmod /lib/hb/ours/virtio_balloon.ko {p}", check=False)
            CURRENT.add("bad_inputs")
            if rc == 0:
                loaded.append(p)
                vm.guest.run("rmmod virtio_balloon", check=False)
        vm.guest.run("insmod /lib/hb/ours/virtio_balloon.ko")
        assert not loaded, f"insmod accepted bad parameters: {loaded}"
        assert not vm.kernel_errors(), vm.kernel_errors()


# host counter that must increase for each injected fault
FAULT_COUNTER = {"zero_len": ["ignored-zero-length"],
                 "out_of_ram": ["ignored-not-ram", "ignored-cross-block"],
                 "stale_id": ["stale-cmd-ids", "ignored-stale"],
                 "misaligned": ["ignored-unaligned"],
                 "oversized_chain": ["ranges"]}
DEBUGFS = "/sys/kernel/debug/virtio_balloon/virtio0/inject_bad_hints"


def _injected(vm):
    """The driver's fault injection counts: {fault name: its debugfs line}."""
    _, out = vm.guest.run(f"cat {DEBUGFS}")
    return {ln.split()[0]: ln for ln in out if ln.split()}


def _bad_hints(label, groups):
    """For each group of faults: arm them, migrate, and check: injected,
    each counted by the host by reason, no virtio error in the source
    QEMU's log, data intact, and the destination guest gets every hinted
    block back.  One fault group per migration: a stale command id stops
    the host's round (as in stock), so hints after it count as stale."""
    need_ours()
    with Rig(label, balloon_args="fault_inject=1") as rig:
        rig.boot()
        for faults in groups:
            for f in faults:
                rig.vm.guest.run(f"echo {f} > {DEBUGFS}")
            src = rig.vm
            rig.migrate()
            CURRENT.add("bad_inputs", len(faults))
            c0, c1 = rig.counters0, rig.last_counters
            delta = {k: c1[k] - c0.get(k, 0) for k in c1
                     if isinstance(c1[k], int) and k != "cmd-id"}
            print(f"    {'+'.join(faults)}: host counters {delta}",
                  flush=True)
            errs = src.qemu_errors()
            injected = _injected(rig.vm)
            try:
                m, s = rig.wait_memory_back(rig.res["meminfo_before"], 30)
            except AssertionError as exc:
                m, s = None, str(exc)
            assert not errs, f"QEMU reported errors: {errs} ({rig.dir})"
            missing = [f for f in faults
                       if "injected=0" in injected.get(f, "injected=0")]
            assert not missing, f"driver did not inject {missing}: {injected}"
            not_counted = [f for f in faults if not any(
                delta.get(k, 0) > 0 for k in FAULT_COUNTER[f])]
            assert not not_counted, \
                f"host did not count {not_counted}: {delta}"
            assert delta.get("cleared-pages", 0) > 0, delta
            assert m is not None, f"destination guest: {s}"
            rig.verify("+".join(faults))
            assert rig.vm.machine.is_running()


@tag("reliability", "bad_input", "sanitize", "each_stack", "each_kernel",
     "debug_kernel")
def test_malformed_hints_are_ignored_and_counted():
    """Our driver with fault_inject=1 sends out-of-RAM, misaligned and
    oversized-chain hints in one migration's first round, then a stale
    command id in the next migration's: the host ignores each and counts
    it by reason, QEMU reports no error, the data is intact and the
    destination guest gets all its hinted memory back."""
    _bad_hints("badhints", [("out_of_ram", "misaligned", "oversized_chain"),
                            ("stale_id",)])


@tag("reliability", "bad_input", "sanitize", "each_stack", "each_kernel")
def test_zero_length_hint_is_ignored_and_counted():
    """The same for a zero-length hint (`zero_len`)."""
    _bad_hints("zerolen", [("zero_len",)])


def _breaks_only_the_device(label, fault, message):
    """Arm `fault`, migrate: the source QEMU breaks the balloon device
    (virtio_error() printing `message`, once) and nothing else.  QMP keeps
    answering, the migration completes, the guest's data is intact on the
    destination with no kernel error, and the destination guest has its
    free memory back."""
    need_ours()
    with Rig(label, balloon_args="fault_inject=1") as rig:
        rig.boot()
        rig.vm.guest.run(f"echo {fault} > {DEBUGFS}")
        src = rig.vm
        rig.migrate()
        CURRENT.add("bad_inputs")
        rig.allow_qemu_errors = [re.escape(message)]
        with open(src.log_path(), errors="replace") as f:
            log = f.read()
        # the stderr scan sees the error this test provokes ...
        assert any(message in ln for ln in src.qemu_errors()), \
            src.qemu_errors()
        injected = _injected(rig.vm)
        assert "injected=0" not in injected.get(fault, "injected=0"), \
            f"driver did not inject {fault}: {injected}"
        assert log.count(message) == 1, \
            f"source QEMU did not break the device once ({rig.dir}): {log}"
        # ... and nothing else
        errs = src.qemu_errors(rig.allow_qemu_errors)
        assert not errs, f"QEMU reported other errors: {errs} ({rig.dir})"
        rig.wait_memory_back(rig.res["meminfo_before"], 30)
        rig.verify(fault)
        assert rig.vm.machine.is_running()


@tag("reliability", "bad_input", "sanitize", "each_stack")
def test_short_command_id_breaks_only_the_device():
    """A command id of 2 bytes instead of 4 (`short_cmd`) in a migration's
    round: virtio_error() "received an incorrect cmd id", raised once
    free_page_lock is released; see _breaks_only_the_device()."""
    _breaks_only_the_device("shortcmd", "short_cmd",
                            "received an incorrect cmd id")


@tag("reliability", "bad_input", "sanitize", "each_stack")
def test_unmappable_buffer_breaks_only_the_device():
    """A hint buffer the host cannot map (`unmappable`: two pages past the
    end of RAM) in a migration's round: virtqueue_pop() breaks the device
    itself ("virtio: bogus descriptor or out of resources"), with the BQL
    held and before free_page_lock is taken; see
    _breaks_only_the_device()."""
    _breaks_only_the_device("unmappable", "unmappable",
                            "virtio: bogus descriptor or out of resources")
