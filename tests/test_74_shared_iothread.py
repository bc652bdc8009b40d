# SPDX-License-Identifier: GPL-2.0
"""The balloon's iothread shared with a virtio-blk disk, as libvirt setups
often configure one iothread for several devices, while the guest writes to
that disk during hinted migrations.

At the switch-over the migration thread stops the VM holding the BQL and
drains the disk's requests, which needs the iothread to run.  A free page
hint bottom half that waits for the BQL in that iothread never lets the
drain end: the source hangs.  Ours takes no BQL in the iothread.

- N hinted migrations (HB_SHARED_IOTHREAD_RUNS, default 20), each within
  its limit, with the guest's data and the disk's contents verified after
  each one.
- The switch-over with the iothread held in the hint bottom half by gdb
  while a (throttled) disk write is in flight, then let go: the migration
  must complete.
- The detector: the same hold, let go in the old order (gdb makes the held
  iothread take the BQL first, as the series did before its iothread
  stopped taking it): the switch-over hangs.

The disk's check: the guest writes 64 KiB blocks, each filled with its
block number and a sequence number, and logs every completed write; after
each migration it stops writing, and every block must hold its last logged
write, read back through the guest (page cache dropped) and from the image
file on the host."""
import contextlib
import glob
import gzip
import os
import shutil
import subprocess
import threading
import time

from hb.channel import GuestError
from hb.env import STOCK_QEMU_10_2, guest_initrd, guest_kver
from hb.gdb import NonStopGdb
from hb.rigs import THROTTLE, IothreadGate, Rig
from hb.testlib import (CURRENT, need_ours, record_reference, reference,
                         tag, timeout, wait_for)

BLOCK = 64 << 10
NBLOCKS = 64
# A migration of this guest takes ~10-20 s under TCG: a hang shows as this
MIGRATION_LIMIT_S = 180


def _virtio_blk_module(workdir):
    """virtio_blk.ko of the guest kernel, uncompressed, in workdir."""
    kver = guest_kver()
    cache = os.environ.get("BH_CACHE", "/var/cache/balloon-hint")
    found = glob.glob(f"{cache}/kernels/{kver}/lib/modules/{kver}/kernel/"
                      "drivers/block/virtio_blk.ko*")
    assert found, f"no virtio_blk module for {kver}"
    out = os.path.join(workdir, "virtio_blk.ko")
    src = found[0]
    if src.endswith(".xz"):
        subprocess.run(f"xz -dc {src} > {out}", shell=True, check=True)
    elif src.endswith(".zst"):
        subprocess.run(["zstd", "-qdf", src, "-o", out], check=True)
    else:
        shutil.copy(src, out)
    return out


def _initrd_with_blk(workdir):
    """The test image with virtio_blk.ko appended as a second archive under
    /lib/hb/extra (the kernel unpacks concatenated archives in order)."""
    stage = os.path.join(workdir, "extra")
    os.makedirs(os.path.join(stage, "lib", "hb", "extra"))
    ko = _virtio_blk_module(workdir)
    shutil.move(ko, os.path.join(stage, "lib", "hb", "extra"))
    cpio = subprocess.run("find . | cpio -o -H newc --quiet", shell=True,
                          cwd=stage, check=True, capture_output=True).stdout
    out = os.path.join(workdir, "initrd-blk.cpio.gz")
    with open(out, "wb") as f:
        with open(guest_initrd(), "rb") as base:
            shutil.copyfileobj(base, f)
        f.write(gzip.compress(cpio))
    shutil.rmtree(stage)
    return out


def _disk_args(image, bps_write=None):
    """A raw disk on `image` on the VM's iothread (hbio, the balloon's)."""
    args = ["-blockdev", f"driver=file,filename={image},node-name=hbdf"]
    disk = "hbdf"
    if bps_write:
        args += ["-object", f"throttle-group,id=hbtg,x-bps-write={bps_write}",
                 "-blockdev", "driver=throttle,throttle-group=hbtg,"
                              "file=hbdf,node-name=hbdt"]
        disk = "hbdt"
    args += ["-blockdev", f"driver=raw,file={disk},node-name=hbdisk",
             "-device", "virtio-blk-pci,drive=hbdisk,iothread=hbio,id=hbblk"]
    return args


def _start_writer(vm, first_seq):
    """Write blocks in a loop (block seq % NBLOCKS, filled with
    'blk=B seq=S' lines), logging each completed write, until
    /tmp/blk.stop exists."""
    vm.guest.run("rm -f /tmp/blk.stop /tmp/blk.done")
    vm.guest.run(
        f"(i={first_seq}; while [ ! -e /tmp/blk.stop ]; do "
        f"b=$((i % {NBLOCKS})); "
        f"yes \"blk=$b seq=$i\" | head -c {BLOCK} > /tmp/blk.buf; "
        f"dd if=/tmp/blk.buf of=/dev/vda bs={BLOCK} seek=$b conv=fsync "
        "2>/dev/null && echo \"$b $i\" >> /tmp/blk.log; i=$((i+1)); done; "
        "touch /tmp/blk.done) > /dev/null 2>&1 &")


def _wait_writing(vm, timeout=30):
    """Wait until the writer of _start_writer logged a write since it
    started: the disk is busy when the migration begins."""
    def writes():
        _, out = vm.guest.run("wc -l < /tmp/blk.log 2>/dev/null || echo 0")
        return int(out[-1])
    n0 = writes()
    wait_for(lambda: writes() > n0, timeout, "a write of the disk writer")


def _blk_queues(vm):
    """The disk's request queues as QEMU sees them: what each took from the
    guest and gave back, and whether the guest was told.  A completion the
    guest never heard of shows as a queue with nothing in use while the
    guest still counts a request in flight."""
    keys = ("last-avail-idx", "used-idx", "signalled-used",
            "signalled-used-valid", "inuse")
    try:
        path = next(d["path"] for d in vm.qmp("x-query-virtio")
                    if "hbblk" in d["path"])
        out = []
        for q in range(vm.qmp("x-query-virtio-status",
                              path=path)["num-vqs"]):
            st = vm.qmp("x-query-virtio-queue-status", path=path, queue=q)
            out.append(f"queue {q}: " +
                       ", ".join(f"{k}={st.get(k)}" for k in keys))
        return "QEMU's " + "; ".join(out)
    except Exception as exc:  # pylint: disable=broad-except
        # the diagnostic must not hide the failure it explains
        return f"QEMU's queues not read: {exc}"


def _check_disk(vm, image, what, wait_s=60):
    """Stop the writer (it must stop within wait_s); every block written
    holds its last logged write, in the guest (read past its page cache)
    and in the image file.  Returns the number of writes logged."""
    vm.guest.run("touch /tmp/blk.stop")
    try:
        wait_for(lambda: vm.guest.run("test -e /tmp/blk.done",
                                      check=False)[0] == 0, wait_s,
                 f"[{what}] the disk writer did not stop")
    except AssertionError:
        # what the writer waits for: its stack, the disk's requests
        _, diag = vm.guest.run(
            "cat /sys/block/vda/inflight; for p in $(pidof dd); do "
            "cat /proc/$p/stack; done; tail -2 /tmp/blk.log", check=False)
        raise AssertionError(f"[{what}] the disk writer did not stop: "
                             f"{diag}; {_blk_queues(vm)}") from None
    _, out = vm.guest.run(
        "sync; echo 3 > /proc/sys/vm/drop_caches; "
        "awk '{last[$1]=$2} END {for (b in last) print b, last[b]}' "
        "/tmp/blk.log > /tmp/blk.want; "
        "while read b s; do "
        f"g=$(dd if=/dev/vda bs={BLOCK} skip=$b count=1 2>/dev/null | "
        "head -n1); [ \"$g\" = \"blk=$b seq=$s\" ] || "
        "echo \"BAD $b want=$s got=$g\"; done < /tmp/blk.want; "
        "echo WANT; cat /tmp/blk.want; echo WRITES $(wc -l < /tmp/blk.log)")
    bad = [ln for ln in out if ln.startswith("BAD")]
    assert not bad, f"[{what}] guest reads back other data: {bad[:5]}"
    i = out.index("WANT")
    want = [ln.split() for ln in out[i + 1:] if ln and ln[0].isdigit()]
    writes = int(next(ln for ln in out if ln.startswith("WRITES")).split()[1])
    assert want and writes > 0, f"[{what}] the guest wrote nothing: {out}"
    with open(image, "rb") as f:
        for b, s in want:
            f.seek(int(b) * BLOCK)
            line = f.read(64).split(b"\n", 1)[0].decode(errors="replace")
            assert line == f"blk={b} seq={s}", \
                f"[{what}] image block {b}: {line!r}, want seq {s}"
    return writes


class _DiskRig(Rig):
    """A Rig whose VMs have the shared-iothread disk and virtio_blk."""

    def __init__(self, label, bps_write=None, **kw):
        super().__init__(label, **kw)
        self.image = os.path.join(self.dir, "disk.raw")
        with open(self.image, "wb") as f:
            f.truncate(NBLOCKS * BLOCK)
        self.common["initrd"] = _initrd_with_blk(self.dir)
        self.common["extra_args"] = tuple(_disk_args(self.image, bps_write))

    def boot_with_disk(self):
        self.boot()
        self.vm.guest.run("insmod /lib/hb/extra/virtio_blk.ko && "
                          "for i in $(seq 50); do [ -b /dev/vda ] && break; "
                          "sleep 0.1; done; [ -b /dev/vda ]")


@tag("reliability", "faults", "iothread")
@timeout(1200)
def test_shared_iothread_disk_writes_hinted_migrations():
    """N hinted migrations with the balloon and a busy disk on one
    iothread: each completes within its limit; guest data and disk
    contents verified after each.  A disk write that never completes on
    the destination fails it with the guest's view of the disk
    (/sys/block/vda/inflight, the writer's stack)."""
    need_ours()
    runs = int(os.environ.get("HB_SHARED_IOTHREAD_RUNS", "20"))
    with _DiskRig("shared-io") as rig:
        rig.boot_with_disk()
        times, hinted = [], 0
        for n in range(runs):
            _start_writer(rig.vm, n * 1000000)
            _wait_writing(rig.vm)
            t0 = time.time()
            info = rig.migrate(timeout=MIGRATION_LIMIT_S)
            times.append(time.time() - t0)
            hinted += rig.hinted_pages()
            rig.verify(f"run {n + 1}")
            writes = _check_disk(rig.vm, rig.image, f"run {n + 1}")
            CURRENT.add("bytes_verified", NBLOCKS * BLOCK)
            print(f"    run {n + 1}/{runs}: {info['status']} in "
                  f"{times[-1]:.1f} s, {writes} disk writes logged, "
                  f"{rig.hinted_pages() >> 8} MiB hinted", flush=True)
        # premise: the hint path ran, in the iothread the disk uses
        assert hinted > 0, "no page was hinted in any run"
        print(f"    {runs} migrations, longest {max(times):.1f} s "
              f"(limit {MIGRATION_LIMIT_S} s), {hinted >> 8} MiB hinted",
              flush=True)


@contextlib.contextmanager
def _busy_disk(label, **rig_kw):
    """A booted disk guest (writes throttled to 1 MiB/s) whose writer has
    been busy for 2 s.  Yields the rig."""
    with _DiskRig(label, bps_write=1 << 20, **rig_kw) as rig:
        rig.boot_with_disk()
        _start_writer(rig.vm, 0)
        time.sleep(2)
        yield rig


def _writer_hung(rig, what):
    """The disk check, for a writer that may never have heard of its last
    write: None if it passed, the check's message if the writer did not
    stop within HUNG_WRITER_S (any other failure raises)."""
    try:
        _check_disk(rig.vm, rig.image, what, wait_s=HUNG_WRITER_S)
    except AssertionError as exc:
        if "did not stop" not in str(exc):
            raise
        return str(exc)
    return None


@contextlib.contextmanager
def _held_at_switchover(label):
    """A disk guest whose writer is busy, its hint bottom half held at its
    entry by gdb, and a throttled migration run to its switch-over: the VM
    stops and the disk's in-flight write waits for the held iothread.
    Yields (rig, gate); gdb detaches at the end."""
    need_ours()
    with _busy_disk(label) as rig:
        gate = IothreadGate(rig.vm, rig.dir)
        try:
            gate.close_gate()
            rig.start_migration(bw=THROTTLE)
            gate.wait_hit(120)
            print("    iothread held in the hint bottom half", flush=True)
            rig.unthrottle()
            # no QMP here: while the drain waits, the BQL is taken
            time.sleep(5)
            yield rig, gate
        finally:
            gate.stop()


@tag("reliability", "faults", "iothread")
@timeout(900)
def test_shared_iothread_switchover_while_hint_bh_held():
    """The switch-over while the hint bottom half holds the shared iothread
    and a throttled disk write is in flight: once gdb lets the iothread go,
    the drain ends and the migration completes; data and disk verified.
    The write completes in the iothread just as the VM stop drains it:
    without patch 1 of the series (virtio-blk waits for the iothread's
    deferred guest notification before closing the notifiers) about one
    run in five loses the notification, and the guest's writer hangs on
    the destination with QEMU's queue empty."""
    with _held_at_switchover("shared-io-held") as (rig, gate):
        gate.open_gate()
        try:
            info = rig.finish(MIGRATION_LIMIT_S)
        except (TimeoutError, GuestError) as exc:
            raise AssertionError(
                "the source hung at the switch-over once the hint "
                f"bottom half ran: {type(exc).__name__}: {exc}") from exc
        CURRENT.add("faults")
        stale = (rig.last_counters.get("ignored-stale", 0) -
                 rig.counters0.get("ignored-stale", 0))
        print(f"    completed: {info['status']}, "
              f"{rig.hinted_pages() >> 8} MiB hinted, {stale} ranges of "
              "the held batch dropped as stale", flush=True)
        # premise: the held batch was in flight across the switch-over (its
        # round ended meanwhile, so its hints were dropped, not cleared)
        assert stale > 0, (rig.counters0, rig.last_counters)
        rig.verify("after the held switch-over")
        _check_disk(rig.vm, rig.image, "after the held switch-over")


# How long the old order is watched for its deadlock
OLD_ORDER_WATCH_S = 15


@tag("reliability", "faults", "iothread", "detector")
@timeout(600)
def test_detector_old_lock_order_hangs_the_switchover():
    """The same hold, let go as the hint bottom half did before the series
    stopped taking the BQL in the iothread: gdb makes the held thread take
    the BQL first.  The migration thread holds the BQL in the switch-over's
    drain, which waits for the disk's write in that same iothread: for
    OLD_ORDER_WATCH_S the iothread does not get the BQL and the
    destination stays incoming.  (The test above, letting the thread go in
    today's order, completes.)"""
    with _held_at_switchover("shared-io-old-order") as (rig, gate):
        gate.open_gate_taking_bql()
        time.sleep(OLD_ORDER_WATCH_S)
        taken = gate.bql_taken()
        dst = rig.dst.qmp("query-status")["status"]
        # the source is deadlocked (or not): it goes before its gdb
        rig.migration_fault()
        rig.vm.kill()
    CURRENT.add("faults")
    print(f"    after {OLD_ORDER_WATCH_S} s: the iothread "
          f"{'got' if taken else 'still waits for'} the BQL, the "
          f"destination is {dst}", flush=True)
    assert not taken and dst == "inmigrate", \
        "the old lock order did not hang the switch-over"


# gdb, attached to the VM's QEMU in non-stop mode: once a VM stop has
# begun draining the disk (blk_drain() inside virtio_blk_stop_ioeventfd()),
# the first guest notification the iothread sends for a completed request
# holds that thread at its start.  With SKIP_WAIT, the stop does not wait
# for the iothread after the drain (the wait patch 1 adds is returned from
# at once).
_STOP_HOLD = """set $hb_in_stop = 0
set $hb_armed = 0
break virtio_blk_stop_ioeventfd
commands
silent
set $hb_in_stop = 1
continue
end
break blk_drain if $hb_in_stop == 1
commands
silent
set $hb_in_stop = 0
set $hb_armed = 1
continue
end
break virtio_notify_irqfd_deferred_fn if $hb_armed == 1
"""
_SKIP_WAIT = """break aio_wait_bh_oneshot if cb == virtio_blk_ioeventfd_stop_sync_bh
commands
silent
echo HB-WAIT-SKIPPED\\n
return
continue
end
"""
# How long the held iothread is kept: a stop that does not wait for it
# ends well within this
STOP_HOLD_S = 5
# A writer that has not stopped this long after the VM ran again never
# heard of its write (it stops within a second otherwise)
HUNG_WRITER_S = 15


# stops the detector without patch 1's wait is given to fire in
DETECTOR_TRIES = 3


def _stop_with_held_notification(rig, skip_wait=False, attempts=6):
    """Stop the VM (QMP stop) while its disk's writes are in flight, hold
    the iothread at the notification of a write the stop's drain
    completed, let it go after STOP_HOLD_S, and run the VM again.  Returns
    whether the stop had ended while the iothread was held.  A stop whose
    drain found nothing in flight is undone and tried again."""
    gdb = NonStopGdb(rig.vm.machine.get_pid(), rig.dir,
                     _STOP_HOLD + (_SKIP_WAIT if skip_wait else ""))
    try:
        for n in range(attempts):
            seen = gdb.text().count("hit Breakpoint")
            done = threading.Event()
            stopper = threading.Thread(
                target=lambda: (rig.vm.qmp("stop", qmp_timeout=120),
                                done.set()), daemon=True)
            stopper.start()
            deadline = time.time() + 20
            while (gdb.text().count("hit Breakpoint") == seen and
                   not done.is_set() and time.time() < deadline):
                time.sleep(0.2)
            if gdb.text().count("hit Breakpoint") == seen:
                # nothing completed after the drain began: undo, retry
                stopper.join(60)
                gdb.send("set $hb_armed = 0", None)
                rig.vm.qmp("cont")
                print(f"    attempt {n + 1}: no write completed by the "
                      "stop's drain", flush=True)
                time.sleep(1)
                continue
            ended = done.wait(STOP_HOLD_S)
            gdb.send("set $hb_armed = 0\ncontinue -a &", "Continuing.")
            stopper.join(120)
            assert done.is_set(), "the stop did not end once let go"
            rig.vm.qmp("cont")
            print(f"    attempt {n + 1}: iothread held at a completion's "
                  "notification; the stop "
                  f"{'ended meanwhile' if ended else 'waited for it'}",
                  flush=True)
            if skip_wait:
                assert "HB-WAIT-SKIPPED" in gdb.text(), gdb.text()[-2000:]
            return ended
        raise AssertionError(f"no write completed during {attempts} stops' "
                             "drains")
    finally:
        gdb.detach()


@tag("reliability", "faults", "iothread", "upstream_base")
@timeout(600)
def test_disk_completion_at_a_vm_stop_reaches_the_guest():
    """A VM stop whose drain completes a disk write while the iothread
    still has to send that write's notification: the stop waits for the
    iothread (held 5 s by gdb) before closing the guest notifiers, and the
    guest, run again, hears of the write: its writer stops and the disk
    holds what it wrote."""
    need_ours()
    with _busy_disk("disk-stop") as rig:
        ended = _stop_with_held_notification(rig)
        CURRENT.add("faults")
        assert not ended, "the stop closed the notifiers before the " \
            "iothread sent the notification it owed"
        _check_disk(rig.vm, rig.image, "after the stop")
        rig.verify("after the stop")


@tag("reliability", "faults", "iothread", "detector")
@timeout(900)
def test_detector_stop_without_the_wait_loses_the_completion():
    """The same stop, with gdb making the stop return at once from the
    wait patch 1 adds: the stop ends while the iothread is held, the
    notification it sends once let go finds the notifier closed, and the
    guest's writer never hears of its write (the disk check fires).  A
    later completion on the same queue interrupts the guest and lets it
    find the lost one, so the lost notification is not seen in every
    stop: the detector is given DETECTOR_TRIES stops, each on a fresh
    guest, and must fire in one of them."""
    need_ours()
    for n in range(1, DETECTOR_TRIES + 1):
        with _busy_disk(f"disk-stop-det-{n}") as rig:
            ended = _stop_with_held_notification(rig, skip_wait=True)
            CURRENT.add("faults")
            assert ended, "the stop waited for the iothread without the wait"
            hung = _writer_hung(rig, "detector")
        if hung:
            print(f"    stop {n}: the disk check fires: {hung[:160]}",
                  flush=True)
            return
        print(f"    stop {n}: the guest heard of its write (a later "
              "completion on its queue)", flush=True)
    raise AssertionError(f"in {DETECTOR_TRIES} stops that did not wait, the "
                         "guest always heard of its write")


@reference
@tag("iothread", "reference")
@timeout(600)
def test_stock_vm_stop_with_a_completion_in_flight():
    """Reference: the same stop on the stock build of QEMU 10.2 (its source
    without the series): recorded whether the stop ended while the
    iothread still owed the notification, and whether the guest heard of
    its write."""
    with _busy_disk("disk-stop-stock", binary=STOCK_QEMU_10_2) as rig:
        ended = _stop_with_held_notification(rig)
        hung = _writer_hung(rig, "stock")
        res = {"ok": not hung, "workdir": rig.dir,
               "stop_ended_while_held": ended,
               "error": (f"the guest never heard of its write: {hung[:300]}"
                         if hung else "")}
        record_reference(res, "stock-10.2-vm-stop")
        print(f"    stock 10.2: the stop {'ended' if ended else 'waited'} "
              "while the iothread was held; the guest "
              f"{'heard of' if res['ok'] else 'never heard of'} its write",
              flush=True)
