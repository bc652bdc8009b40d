# SPDX-License-Identifier: GPL-2.0
"""Rigs shared by the fault, bad-input, property and compatibility tests.

A Rig is a guest that moves between QEMUs: boot, migrate (possibly
throttled, cancelled, failed), verify.  Every VM it starts ends when the
`with` block does, and the test fails on an error in any of its QEMUs'
stderr or on any of its consoles.  Rounds are caught "in flight" by
throttling the migration (THROTTLE bytes/s); HELD runs our driver in alloc
mode, where the guest holds every hinted block until DONE.
"""
import os
import re
import subprocess
import tempfile
import time

from . import migration
from .gdb import NonStopGdb, first_symbol
from .testlib import BUILD, CURRENT, our_qemu
from .verdicts import MIGRATION_FAULT_RE
from .vm import VM, balloon_stats, device_counters
from .workloads import (DOWNTIME_LIMIT_MS, Scenario, prepare_guest,
                        start_churn, start_ticker, verify_guest)

MEM = 512                 # MiB: TCG migrations of 512 MiB take ~10-15 s
HELD = "hint_mode=alloc"  # our driver holding hinted blocks until DONE
THROTTLE = 2 << 20        # bytes/s while a round is held open
FAST = 10 << 30
OOM_RE = re.compile(r"(Out of memory|oom-kill|invoked oom-killer)")


def held_parts(stats):
    """{"inflight": N, "acked": M}: pages of hinted blocks our driver holds
    (held_inflight_pages, held_acked_pages); {} for the in-tree driver."""
    return {k: int(stats[f"held_{k}_pages"]) for k in ("inflight", "acked")
            if f"held_{k}_pages" in stats}


def nothing_held(stats):
    """Our driver's sysfs says it holds no hinted block (false when the
    files are not there)."""
    return held_parts(stats) == {"inflight": 0, "acked": 0}


def held(stats):
    """Pages held, in flight or acked."""
    return sum(held_parts(stats).values())


def tmpdir(label):
    base = os.path.join(BUILD, "tmp")
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"hb-rel-{label}-", dir=base)


class Rig:
    """A guest that moves between QEMUs: boot, migrate (possibly throttled,
    cancelled, failed), verify.  Every VM it starts ends in close()."""

    def __init__(self, label, balloon="ours", mem_mib=MEM, hint=True,
                 balloon_args="", device_props="", binary=None,
                 workload="stale", ticker=True, keep_writes=None,
                 defaults=False):
        self.label = label
        self.binary = binary or our_qemu()
        self.dir = tmpdir(label)
        self.balloon = balloon
        self.common = dict(mem_mib=mem_mib, balloon=balloon, hint=hint,
                           balloon_args=balloon_args,
                           device_props=device_props,
                           keep_writes=keep_writes, defaults=defaults)
        self.sc = Scenario(workload, mem_mib=mem_mib, settle=0.5,
                           ticker=ticker)
        self.res = {}
        self.n = 0
        self.vm = None
        self.dst = None
        self.vms = []
        self.passed = False
        # QEMU stderr lines a test provokes on purpose (regexes)
        self.allow_qemu_errors = []

    # -- VMs -------------------------------------------------------------
    def new_vm(self, binary=None, incoming=False, **over):
        self.n += 1
        uri = f"unix:{self.dir}/mig{self.n}.sock" if incoming else None
        kw = dict(self.common, **over)
        vm = VM(self.dir, f"vm{self.n}", binary or self.binary,
                incoming=uri, **kw)
        self.vms.append(vm)
        return vm

    def boot(self, binary=None, prepare=True, **over):
        self.vm = self.new_vm(binary, **over)
        self.vm.boot()
        if prepare:
            self.prepare()
        return self.vm

    def prepare(self):
        self.res = {}
        prepare_guest(self.vm, self.sc, self.res)

    def qemu_errors(self):
        """Error lines in the stderr of every QEMU the rig started, except
        the expected ones (self.allow_qemu_errors): {vm name: lines}."""
        errs = {vm.name: vm.qemu_errors(self.allow_qemu_errors)
                for vm in self.vms}
        return {k: v for k, v in errs.items() if v}

    def console_errors(self):
        """Kernel errors on the console of every VM the rig started."""
        errs = {vm.name: vm.kernel_errors() for vm in self.vms}
        return {k: v for k, v in errs.items() if v}

    def close(self):
        """End every VM (VM.end()); the test fails on an error in any
        QEMU's stderr (virtio_error, sanitizer report) or a kernel error on
        any console (source ones included); the work directory stays
        unless it passed."""
        for vm in self.vms:
            vm.end()
        problems = {}
        if self.passed:
            problems = {"qemu": self.qemu_errors(),
                        "console": self.console_errors()}
            problems = {k: v for k, v in problems.items() if v}
            if not problems:
                subprocess.call(["rm", "-rf", self.dir])
        return problems

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        self.passed = exc_type is None
        problems = self.close()
        assert not problems, f"errors after the test ({self.dir}): {problems}"
        return False

    # -- migration -------------------------------------------------------
    def start_migration(self, bw=FAST, binary=None, extra_caps=(), **over):
        dst = self.new_vm(binary, incoming=True, **over)
        dst.launch()
        self.counters0 = device_counters(self.vm) or {}
        migration.start_migration(self.vm, dst, bw, DOWNTIME_LIMIT_MS,
                                  extra_caps=extra_caps)
        CURRENT.add("migrations")
        self.dst = dst
        return dst

    def mig_status(self):
        return self.vm.qmp("query-migrate")

    def unthrottle(self):
        self.vm.qmp("migrate-set-parameters", **{"max-bandwidth": FAST})

    def wait_end(self, timeout=300):
        return migration.wait_migration(self.vm, timeout)

    def migration_fault(self):
        """The current migration is broken on purpose: both ends may report
        it on stderr."""
        for vm in (self.vm, self.dst):
            if vm:
                vm.allow_errors.append(MIGRATION_FAULT_RE)

    def cancel(self):
        """migrate_cancel; the destination is left to die."""
        self.migration_fault()
        self.vm.qmp("migrate_cancel")
        info = self.wait_end(60)
        assert info["status"] == "cancelled", info
        if self.dst:
            self.dst.end()
            self.dst = None
        CURRENT.add("faults")
        return info

    def finish(self, timeout=300):
        """Wait for completion; the destination becomes the VM."""
        info = self.wait_end(timeout)
        assert info["status"] == "completed", \
            f"migration {info['status']}: {info.get('error-desc')}"
        self.last_counters = device_counters(self.vm) or {}
        migration.wait_running(self.dst)
        self.vm.end()
        self.vm, self.dst = self.dst, None
        self.vm.guest.connect()
        return info

    def migrate(self, binary=None, timeout=300, **over):
        self.start_migration(binary=binary, **over)
        return self.finish(timeout)

    def hinted_pages(self):
        """Pages the source QEMU cleared because of hints in the last
        migration (0 on stock QEMU)."""
        c0 = getattr(self, "counters0", {}) or {}
        c1 = getattr(self, "last_counters", {}) or {}
        return c1.get("cleared-pages", 0) - c0.get("cleared-pages", 0)

    # -- guest checks ----------------------------------------------------
    def stats(self):
        return balloon_stats(self.vm)

    def meminfo(self):
        return self.vm.guest.hbwork("meminfo")

    def wait_round_held(self, rounds_before, timeout=90):
        """Wait until the guest holds hinted blocks of a new round."""
        deadline = time.time() + timeout
        last = -1
        while True:
            s = self.stats()
            h = held(s)
            # a new round, and it is complete: what it holds stops growing
            if s.get("rounds", 0) > rounds_before and h > 0 and h == last:
                return s
            last = h
            if time.time() > deadline:
                raise AssertionError(f"no hint round held after {timeout}s:"
                                     f" {s} migration={self.mig_status()}")
            time.sleep(0.5)

    def wait_memory_back(self, before, timeout=60):
        """MemFree back near `before` and (our driver) nothing held."""
        tol = max(32 << 10, before["free_kb"] // 20)
        deadline = time.time() + timeout
        while True:
            m = self.meminfo()
            s = self.stats() if self.balloon == "ours" else {}
            ok = m["free_kb"] >= before["free_kb"] - tol and \
                (self.balloon != "ours" or held(s) == 0)
            if ok:
                print(f"    memory back: free {before['free_kb'] >> 10} -> "
                      f"{m['free_kb'] >> 10} MiB, held="
                      f"{held_parts(s) or '-'}", flush=True)
                return m, s
            if time.time() > deadline:
                raise AssertionError(
                    f"free memory not back: before={before} now={m} "
                    f"held={held_parts(s)}")
            time.sleep(0.5)

    def verify(self, what=""):
        """Data check (kept file, held memory, churn, ticker) on the
        current VM; no kernel error on any VM's console, no error in any
        QEMU's stderr so far."""
        ok = verify_guest(self.vm, self.sc, self.res)
        v = self.res["verify"]
        errs = v.get("dmesg_errors", [])
        assert not errs, f"[{what}] kernel errors: {errs[:5]} ({self.dir})"
        cons = self.console_errors()
        assert not cons, f"[{what}] kernel errors on consoles: {cons}"
        qerr = self.qemu_errors()
        assert not qerr, f"[{what}] QEMU stderr reports errors: {qerr}"
        assert ok, f"[{what}] guest data not intact: {v} ({self.dir})"
        CURRENT.add("bytes_verified", v.get("bytes_verified", 0))
        # verify_guest stopped the helpers: start them again
        if self.sc.workload == "churn":
            start_churn(self.vm.guest, self.sc)
        if self.sc.ticker:
            start_ticker(self.vm.guest, self.sc)
        return v

    def no_oom(self):
        _, dmesg = self.vm.guest.run("dmesg", check=False)
        hits = [ln for ln in dmesg + self.vm.console_text().splitlines()
                if OOM_RE.search(ln)]
        assert not hits, f"OOM: {hits[:5]}"


def held_round(rig):
    """Start a throttled migration and wait until the guest holds a round.
    Returns (meminfo before the round, guest stats during it)."""
    before = rig.meminfo()
    r0 = rig.stats().get("rounds", 0) if rig.balloon == "ours" else 0
    rig.start_migration(bw=THROTTLE)
    s = rig.wait_round_held(r0)
    m = rig.meminfo()
    # the round took real memory away: otherwise the fault tests nothing
    assert m["free_kb"] < before["free_kb"] - (64 << 10), (before, m)
    print(f"    round held: rounds={s.get('rounds')} held={held_parts(s)}"
          f" free {before['free_kb'] >> 10} -> {m['free_kb'] >> 10} MiB",
          flush=True)
    return before, s


def final_migration(rig, what):
    """A full migration to a new destination that must hint and keep data."""
    r0 = rig.stats().get("rounds", 0)
    rig.migrate()
    s = rig.stats()
    assert s.get("rounds", 0) > r0 or s.get("bytes_hinted", 0) > 0, \
        f"[{what}] guest did not hint: {s}"
    assert rig.hinted_pages() > 0, \
        f"[{what}] host cleared no page: {rig.last_counters}"
    print(f"    final migration: host cleared {rig.hinted_pages() >> 8} MiB, "
          f"guest rounds={s.get('rounds')}", flush=True)
    rig.verify(what)
    rig.wait_memory_back(rig.res["meminfo_before"])


# The free page hint bottom half in the balloon's iothread: it clears a
# batch's hints (virtio_balloon_free_page_clear); builds before that rework
# handled the whole vq there (virtio_balloon_get_free_page_hints).
HINT_BHS = ("virtio_balloon_free_page_clear",
            "virtio_balloon_get_free_page_hints")


def hint_bh(binary):
    """The name of the hint bottom half in `binary`."""
    return first_symbol(binary, HINT_BHS, "free page hint bottom half")


class IothreadGate:
    """Hold a QEMU's free page hint bottom half at its entry (before it
    takes any lock) with a breakpoint that stops only the balloon's
    iothread.  gdb stays free to serve the other threads (a breakpoint that
    sleeps inside gdb would leave every thread that gets a signal
    stopped)."""

    def __init__(self, vm, workdir):
        self.func = hint_bh(vm.binary)
        self.gdb = NonStopGdb(vm.machine.get_pid(), workdir)

    def close_gate(self):
        self.gdb.send(f"break {self.func}", "Breakpoint")

    def hits(self):
        """How many times the iothread stopped at the gate."""
        return self.gdb.text().count("hit Breakpoint")

    def wait_hit(self, timeout=60, seen=0):
        """Wait until the iothread stopped at the gate more than `seen`
        times."""
        self.gdb._await(  # pylint: disable=protected-access
            lambda: self.hits() > seen,
            timeout, "the hint bottom half did not run")

    def held_thread(self):
        """gdb's number of the thread that last stopped at the gate."""
        hit = re.findall(r"Thread (\d+) .*hit Breakpoint", self.gdb.text())
        assert hit, self.gdb.text()[-2000:]
        return hit[-1]

    def let_through(self):
        """Let the held bottom half run once; the gate stays closed for the
        next one."""
        self.gdb.send("continue -a &", "Continuing.")

    def open_gate(self):
        self.gdb.send("delete\ncontinue -a &", "Continuing.")

    def open_gate_taking_bql(self):
        """Let the held bottom half go as the series did before its
        iothread stopped taking the BQL: the held thread takes the BQL (and
        drops it) before it goes on.  gdb answers nothing more while that
        thread waits for the BQL; bql_taken() tells whether it got it."""
        self.gdb.send(f"delete\nthread {self.held_thread()}",
                      "Switching to thread")
        self.gdb.send('call (void)bql_lock_impl("hb-old-order", 0)\n'
                      "echo HB-BQL-TAKEN\\n\n"
                      "call (void)bql_unlock()\ncontinue -a &", None)

    def bql_taken(self):
        return "HB-BQL-TAKEN" in self.gdb.text()

    def stop(self):
        self.gdb.detach()


class BootedGuest:
    """One booted guest, never migrated, as a context manager yielding its
    VM: the VM's arguments are hb.vm.VM's.  On a clean exit, any kernel
    error on its console fails the test; the QEMU is always ended and its
    directory removed."""

    def __init__(self, label, binary, mem, balloon, hint, **vm_kw):
        self.dir = tmpdir(label)
        self.vm = VM(self.dir, label, binary, mem, balloon, hint, **vm_kw)

    def __enter__(self):
        self.vm.boot()
        return self.vm

    def __exit__(self, *exc):
        errs = self.vm.kernel_errors()
        self.vm.end()
        if exc[0] is None:
            subprocess.call(["rm", "-rf", self.dir])
            assert not errs, f"guest kernel errors: {errs[:5]}"
