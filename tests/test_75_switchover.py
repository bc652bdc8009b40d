# SPDX-License-Identifier: GPL-2.0
"""The hinting device's contract with the migration: when the switch-over
may happen, and which guest ABI each machine type gets.

- Switch-over rule: free page hints taken before the first pass over RAM
  has ended leave little more than the guest's live data pending.  Our QEMU
  does not switch over before that pass has ended and the pages the guest
  wrote during it have been sent once, so both are sent with the guest
  running.  Asserted through state: query-migrate's downtime-bytes, and
  the order of the trace events ram_first_pass_done,
  ram_hinted_resend_done, migration_switchover_hinted_pass_wait and
  migration_thread_low_pending (the switch-over decision).  No timing
  assertion.
- Pre-send wait: for a guest that negotiated HINT_KEEP_WRITES the
  migration sends no RAM until the guest has stopped its round and the
  iothread has cleared the hints of the batch that carried that stop.  gdb
  holds that batch's clear in the iothread: no RAM goes out meanwhile, and
  its hints are cleared, not dropped as stale, once it runs.  Without the
  wait the same hold lets the first pass run (the check shown to fire).
- VIRTIO_BALLOON_F_HINT_KEEP_WRITES (bit 16): off by default on every
  machine type, offered only when the operator opts in
  (free-page-hint-keep-writes=on) and never without free-page-hint.  The
  migrations of opted-in and default guests between our QEMU and stock's
  are in test_81_fleet.py.

Every migration verifies the guest's data on the destination and fails on
any kernel error on its console."""
import os
import re
import subprocess
import time

from hb import env
from hb.env import BUILD
from hb.rigs import IothreadGate, Rig
from hb.testlib import (CURRENT, assert_intact, migrate, need_ours,
                        our_qemu, tag)
from hb.vm import VM, device_counters
from hb.workloads import Scenario

KEEP_WRITES_BIT = 16

# Live data the switch-over test keeps in the guest (MiB): large enough
# that sending it with the guest stopped is plain in downtime-bytes, which
# otherwise only holds what the guest dirtied since the last sync (well
# under a MiB for this guest).
LIVE_MIB = 96


def _trace_events(path, names):
    """(name, args) of the trace lines of `names` in a QEMU log, in order."""
    pat = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r") (.*)$")
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = pat.search(line)
            if m:
                out.append((m.group(1), m.group(2)))
    return out


@tag("migrate", "switchover", "sanitize", "each_stack", "upstream_base")
def test_switchover_waits_for_the_hinted_first_pass():
    """A hinted migration of a guest with live data does not switch over
    before the first pass over RAM, which the hints shrank to that live
    data, has ended: the live data is sent with the guest running.  Our
    driver hints without writing the hinted pages, so little but the live
    data is left after its first round (the in-tree driver zeroes every
    page it takes, and the next sync puts them all back)."""
    binary = our_qemu()
    need_ours()
    sc = Scenario("stale", mem_mib=1024, keep_mib=LIVE_MIB)
    events = ("virtio_balloon_free_page_batch", "ram_first_pass_done",
              "ram_hinted_resend_done",
              "migration_switchover_hinted_pass_wait",
              "migration_thread_low_pending")
    os.environ["HB_TRACE"] = ",".join(events)   # this test's process only
    res = migrate("switchover-hinted-pass", src_bin=binary, balloon="ours",
                  hint=True, scenario=sc, keep_dirs=True)
    assert_intact(res, "switch-over rule")
    dev = res.get("device_src") or {}
    assert dev.get("cleared-pages", 0) > 0, f"host took no hint: {dev}"
    ram = res["migration"]["ram"]
    live = LIVE_MIB << 20
    # The live data went while the guest ran, not in the downtime.
    assert ram["downtime-bytes"] < live // 8, \
        (f"{ram['downtime-bytes']} bytes sent with the guest stopped, "
         f"live data {live}: switched over before the hinted pass "
         f"ended ({res['workdir']})")
    seq = _trace_events(os.path.join(res["workdir"], "src.log"), events)
    names = [n for n, _ in seq]
    assert "migration_thread_low_pending" in names, \
        f"no switch-over decision traced ({res['workdir']})"
    decision = names.index("migration_thread_low_pending")
    cleared_before_pass = False
    for name, args in seq[:decision]:
        if name == "ram_first_pass_done":
            break
        m = re.search(r"cleared_pages (\d+)", args)
        if name == "virtio_balloon_free_page_batch" and m and \
                int(m.group(1)):
            cleared_before_pass = True
    assert cleared_before_pass, \
        f"no hint cleared pages before the first pass ended: {seq[:20]}"
    assert "ram_first_pass_done" in names[:decision], \
        (f"switch-over decided before the first pass ended "
         f"({res['workdir']})")
    # What the guest wrote during that pass was sent once, after it.
    assert "ram_hinted_resend_done" in names[:decision] and \
        names.index("ram_hinted_resend_done") > \
        names.index("ram_first_pass_done"), \
        (f"switch-over decided before the pages written during the first "
         f"pass were sent ({res['workdir']})")
    waits = names[:decision].count("migration_switchover_hinted_pass_wait")
    assert waits > 0, f"no hinted-pass wait traced ({res['workdir']})"
    print(f"    downtime-bytes={ram['downtime-bytes']} "
          f"precopy-bytes={ram['precopy-bytes']} "
          f"hinted-pass waits={waits} "
          f"downtime={res.get('downtime_ms')} ms")
    # Kept when an assertion fails: the trace is in src.log.
    subprocess.call(["rm", "-rf", res["workdir"]])


# The batch that carried the guest's stop is held this long in the
# iothread; the migration is limited to HOLD_BW, so that a first pass that
# did not wait sends far more than HOLD_SEND_LIMIT meanwhile, while one
# that waits sends no RAM page at all (the setup's headers only).
HOLD_S = 3
HOLD_BW = 32 << 20
HOLD_SEND_LIMIT = 8 << 20
# The pre-send wait's bound for the run that waits: far past the hold
WAIT_MS = 30000
# _hold_the_stop_batch(): the first batch's bound (a round of this guest
# queues 9-16 elements), how long that batch is held, and the device's
# default bound (VIRTQUEUE_MAX_SIZE), which its element array is sized for
FIRST_BATCH = 2
FIRST_HOLD_S = 2
BATCH_MAX = 1024


def _batch_max(gate, n):
    """Set the device's batch bound (x-free-page-hint-batch-max) through
    gdb: lowering it, and raising it back to the value its element array
    was allocated for, is safe while the device runs."""
    dev = "((VirtIOBalloon *)'balloon.c'::balloon_opaque)"
    gate.gdb.send(f"set var {dev}->free_page_hint_batch_max = {n}\n"
                  f"print {dev}->free_page_hint_batch_max", f"= {n}\n")


def _hold_the_stop_batch(rig, gate):
    """Hold the clear of the batch that carried the guest's stop, with
    hints in it.  Which batch the stop comes in is up to the guest's and
    the main loop's timing; gdb makes it certain.  The device pops at most
    FIRST_BATCH elements at first (_batch_max), so the round's first batch
    of hints leaves some behind; the gate holds its clear for
    FIRST_HOLD_S, so that the main loop pops nothing more while the guest
    queues the rest of its round and its stop; then the bound is raised
    back and the batch let through: the next one carries the rest of the
    hints and the stop (the device's status is "stop" while its clear is
    held).  That one is held HOLD_S.  Returns the bytes the migration sent
    during that hold."""
    id0 = rig.counters0.get("cmd-id", 0)
    for seen in range(10):
        gate.wait_hit(120, seen)
        c = device_counters(rig.vm) or {}
        if c.get("cmd-id", 0) > id0 and c.get("status") == "stop":
            t0 = rig.mig_status().get("ram", {}).get("transferred", 0)
            time.sleep(HOLD_S)
            st = rig.mig_status()
            t1 = st.get("ram", {}).get("transferred", 0)
            print(f"    batch {seen + 1} carried the stop (status "
                  f"{c.get('status')}, {c.get('batches')} batches, "
                  f"migration {st['status']}): {t1 - t0} bytes sent in the "
                  f"{HOLD_S} s its clear was held", flush=True)
            return t1 - t0
        print(f"    batch {seen + 1}: status {c.get('status')}, "
              f"{c.get('elements')} elements so far", flush=True)
        time.sleep(FIRST_HOLD_S)
        _batch_max(gate, BATCH_MAX)
        gate.let_through()
    raise AssertionError(f"no batch of the round carried the guest's stop "
                         f"in 10: {device_counters(rig.vm)}")


def _held_stop_run(label, wait_ms):
    """A hinted migration (our driver, keep-writes) whose stop batch is
    held (_hold_the_stop_batch); the guest's data verified after it.
    Returns (bytes sent during the hold, ranges dropped as stale, pages
    cleared by hints)."""
    props = f"x-free-page-hint-wait-ms={wait_ms}"
    with Rig(label, device_props=props, keep_writes=True) as rig:
        rig.boot()
        gate = IothreadGate(rig.vm, rig.dir)
        try:
            _batch_max(gate, FIRST_BATCH)
            gate.close_gate()
            rig.start_migration(bw=HOLD_BW)
            sent = _hold_the_stop_batch(rig, gate)
            gate.open_gate()
        finally:
            gate.stop()
        rig.unthrottle()
        info = rig.finish(300)
        rig.verify(f"after the held stop batch, wait {wait_ms} ms")
        stale = (rig.last_counters.get("ignored-stale", 0) -
                 rig.counters0.get("ignored-stale", 0))
        print(f"    wait {wait_ms} ms: {info['status']}, "
              f"{info['ram']['transferred'] / 1e6:.1f} MB sent, "
              f"{rig.hinted_pages()} pages cleared, {stale} ranges dropped "
              f"as stale", flush=True)
        return sent, stale, rig.hinted_pages()


@tag("migrate", "switchover", "each_stack")
def test_presend_wait_lasts_until_the_stop_batch_is_cleared():
    """The pre-send wait ends only once the hints of the batch that carried
    the guest's stop are cleared: with that batch's clear held in the
    iothread for HOLD_S, the migration sends no RAM, and after it the
    batch's hints are cleared, none dropped as stale.  The same hold with
    no pre-send wait (x-free-page-hint-wait-ms=0) lets the first pass send
    RAM meanwhile: the check fires."""
    need_ours()
    sent, stale, cleared = _held_stop_run("presend-held", WAIT_MS)
    assert sent < HOLD_SEND_LIMIT, \
        (f"{sent} bytes sent while the batch that carried the guest's stop "
         f"was being cleared: the pre-send wait ended before its hints "
         f"were cleared")
    assert stale == 0, f"{stale} hint ranges dropped as stale"
    assert cleared > 0, "no page cleared by hints"
    sent0, _, _ = _held_stop_run("presend-held-nowait", 0)
    CURRENT.add("faults")
    assert sent0 >= HOLD_SEND_LIMIT, \
        (f"without the pre-send wait only {sent0} bytes went out during "
         f"the hold: the check cannot tell a wait from none")
    print(f"    the check fires without the wait: {sent0} bytes sent "
          f"during the hold, {sent} with it", flush=True)


def _offered(binary, workdir, name, machine=None, props="",
             keep_writes=False):
    """The balloon's offered (host) device features, as
    x-query-virtio-status reports them: (names, undecoded bitmap, the
    free-page-hint-keep-writes property).  keep_writes=False: the device
    default."""
    vm = VM(workdir, name, binary, mem_mib=256, balloon="intree",
            hint=True, device_props=props, machine=machine,
            keep_writes=keep_writes)
    vm.launch()
    try:
        st = vm.qmp("x-query-virtio-status",
                    path="/machine/peripheral/balloon0/virtio-backend")
        qom = vm.qmp("qom-get", path="/machine/peripheral/balloon0",
                     property="free-page-hint-keep-writes")
    finally:
        vm.end()
    feats = st["host-features"]
    return feats.get("dev-features", []), \
        feats.get("unknown-dev-features", 0), qom


def _has_keep_writes(names, unknown):
    return (any(n.startswith("VIRTIO_BALLOON_F_HINT_KEEP_WRITES")
                for n in names) or bool(unknown >> KEEP_WRITES_BIT & 1))


def _pc_machines(binary):
    """Every versioned i440FX and Q35 machine type the binary has."""
    out = subprocess.run([binary, "-machine", "help"], text=True,
                         capture_output=True, check=True).stdout
    return re.findall(r"^(pc-(?:i440fx|q35)-[0-9.]+)\s", out, re.M)


@tag("compat", "keep_writes", "each_stack")
def test_keep_writes_is_opt_in_on_every_machine_type():
    """Bit 16 is not offered by default on any machine type, is offered
    with free-page-hint-keep-writes=on, and never without free-page-hint.
    The check sees the bit when it is offered."""
    binary = our_qemu()
    workdir = os.path.join(BUILD, "tmp", f"kw-{env.STACK}-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    machines = _pc_machines(binary)
    assert len(machines) > 10, machines
    for m in machines:
        names, unk, prop = _offered(binary, workdir, "def", machine=m)
        assert not _has_keep_writes(names, unk) and prop is False, \
            f"KEEP_WRITES offered by default on {m}: {names} {unk:#x}"
        assert any(n.startswith("VIRTIO_BALLOON_F_FREE_PAGE_HINT")
                   for n in names), (m, names)
    print(f"    {len(machines)} machine types: not offered by default")
    names, unk, prop = _offered(binary, workdir, "optin", keep_writes=True)
    assert _has_keep_writes(names, unk) and prop is True, \
        f"KEEP_WRITES not offered when opted in: {names} {unk:#x}"
    names, unk, _ = _offered(binary, workdir, "nohint", keep_writes=True,
                             props="free-page-hint=off")
    assert not _has_keep_writes(names, unk), \
        f"KEEP_WRITES offered without free-page-hint: {names}"
    subprocess.call(["rm", "-rf", workdir])
