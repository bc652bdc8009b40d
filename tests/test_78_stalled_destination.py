# SPDX-License-Identifier: GPL-2.0
"""A destination that stops reading in the middle of a hint round must not
freeze the source's monitor.  The migration thread holds bitmap_mutex
across socket writes; whatever waits for it with a lock the monitor needs
(the BQL, free_page_lock under the BQL) would stall query-balloon, the
statistics, query-migrate and migrate_cancel until the destination reads
again.

The destination is stopped with SIGSTOP while a round runs and the
migration is unthrottled, so the source blocks on a full socket; then each
command must answer within MONITOR_LIMIT_S, migrate_cancel must end the
migration, and the guest must get all its memory back, its data verified
on the source."""
import os
import signal
import subprocess
import time

from hb.rigs import FAST, THROTTLE, Rig
from hb.testlib import CURRENT, need_ours, our_qemu, tag, wait_until
from hb.vm import device_counters
from hb.workloads import DOWNTIME_LIMIT_MS

# How long a monitor command that takes no lock the stalled migration
# holds may take to answer; a frozen monitor does not answer at all.
MONITOR_LIMIT_S = 0.2


def _timed(vm, cmd, **kw):
    t0 = time.monotonic()
    r = vm.qmp(cmd, qmp_timeout=30, **kw)
    return r, time.monotonic() - t0


def _answered_and_cancelled(rig, lat):
    """Every monitor command of `lat` (name: seconds) answered within
    MONITOR_LIMIT_S, and the migration ended cancelled."""
    slow = {k: v for k, v in lat.items() if v > MONITOR_LIMIT_S}
    assert not slow, f"monitor commands over {MONITOR_LIMIT_S} s: {slow}"
    info = rig.wait_end(60)
    assert info["status"] == "cancelled", info


def _source_whole_after_cancel(rig, before):
    """The stopped destination ended: the source guest has all the memory
    it had `before` the migration, and its data."""
    rig.dst.end()
    rig.dst = None
    CURRENT.add("faults")
    rig.wait_memory_back(before)
    rig.verify("after the cancel with the destination stopped")


@tag("reliability", "faults", "monitor", "sanitize")
def test_monitor_answers_while_the_destination_is_stopped():
    need_ours()
    with Rig("stalled-dst") as rig:
        rig.boot()
        before = rig.meminfo()
        id0 = (device_counters(rig.vm) or {}).get("cmd-id", 0)
        dst = rig.start_migration(bw=THROTTLE)
        # the round of this migration was issued (our driver ends it soon)
        wait_until(lambda: device_counters(rig.vm),
                   lambda c: c.get("cmd-id", 0) > id0, 60, "a hint round")
        pid = dst.machine.get_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            rig.unthrottle()
            # the source fills the socket and blocks in a write
            t_end = time.time() + 30
            last = None
            while time.time() < t_end:
                ram = rig.mig_status().get("ram", {})
                if last is not None and ram.get("transferred") == last:
                    break
                last = ram.get("transferred")
                time.sleep(1)
            time.sleep(2)
            lat = {}
            _, lat["query-balloon"] = _timed(rig.vm, "query-balloon")
            _, lat["qom-get stats"] = _timed(
                rig.vm, "qom-get", path="/machine/peripheral/balloon0",
                property="x-free-page-hint-stats")
            st, lat["query-migrate"] = _timed(rig.vm, "query-migrate")
            # premise: the migration is stuck on the stopped destination
            assert st["status"] in ("active", "pre-switchover", "device"), st
            rig.migration_fault()
            _, lat["migrate_cancel"] = _timed(rig.vm, "migrate_cancel")
            print("    with the destination stopped: " +
                  ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in
                            lat.items()), flush=True)
            _answered_and_cancelled(rig, lat)
        finally:
            os.kill(pid, signal.SIGKILL)
        _source_whole_after_cancel(rig, before)


def _wait_ms_prop(binary):
    """The pre-send wait property of `binary` (its name before the x-
    rename, for builds that predate it), set to 0."""
    r = subprocess.run([binary, "-device", "virtio-balloon-pci,help"],
                       capture_output=True, text=True, check=False)
    name = ("x-free-page-hint-wait-ms" if "x-free-page-hint-wait-ms"
            in r.stdout else "free-page-hint-wait-ms")
    return f"{name}=0"


@tag("reliability", "faults", "monitor", "sanitize")
def test_monitor_answers_while_hints_wait_for_a_stopped_destination():
    """The destination is stopped before the migration starts and the
    source sends at once (no pre-send wait): the migration thread blocks
    in its first socket write with bitmap_mutex held while the guest still
    hints its first round, so the hint path waits for bitmap_mutex.  Each
    monitor command must answer within MONITOR_LIMIT_S, the cancel must
    end the migration, and the guest must keep all its memory.  A build
    whose hint path holds free_page_lock while it waits, and whose
    statistics take that lock, freezes the monitor here."""
    need_ours()
    binary = our_qemu()
    with Rig("stalled-dst-first", device_props=_wait_ms_prop(binary),
             binary=binary) as rig:
        rig.boot()
        before = rig.meminfo()
        dst = rig.new_vm(incoming=True)
        dst.launch()
        rig.counters0 = device_counters(rig.vm) or {}
        caps = [{"capability": "events", "state": True}]
        for vm in (rig.vm, dst):
            vm.qmp("migrate-set-capabilities", capabilities=caps)
        rig.vm.qmp("migrate-set-parameters", **{
            "max-bandwidth": FAST, "downtime-limit": DOWNTIME_LIMIT_MS})
        pid = dst.machine.get_pid()
        os.kill(pid, signal.SIGSTOP)
        rig.dst = dst
        try:
            rig.vm.qmp("migrate", uri=dst.incoming)
            CURRENT.add("migrations")
            time.sleep(3)      # the guest hints its round meanwhile
            rig.migration_fault()
            lat = {}
            try:
                _, lat["query-balloon"] = _timed(rig.vm, "query-balloon")
                _, lat["qom-get stats"] = _timed(
                    rig.vm, "qom-get", path="/machine/peripheral/balloon0",
                    property="x-free-page-hint-stats")
                st, lat["query-migrate"] = _timed(rig.vm, "query-migrate")
                _, lat["migrate_cancel"] = _timed(rig.vm, "migrate_cancel")
            except TimeoutError as exc:
                raise AssertionError(f"the monitor froze: answered {lat}, "
                                     "then nothing for 30 s") from exc
            c = device_counters(rig.vm) or {}
            print("    destination stopped from the start: " +
                  ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in
                            lat.items()) +
                  f"; rounds {c.get('rounds')} batches {c.get('batches')}",
                  flush=True)
            assert st["status"] in ("active", "setup"), st
            # premise: the guest sent hints during the stall
            assert c.get("batches", 0) > rig.counters0.get("batches", 0), c
            _answered_and_cancelled(rig, lat)
        finally:
            os.kill(pid, signal.SIGKILL)
        _source_whole_after_cancel(rig, before)
