# SPDX-License-Identifier: GPL-2.0
"""gdb attached to a running QEMU in non-stop mode (NonStopGdb), for tests
that hold one of its threads at a breakpoint while the others run, and
what makes sure the QEMU runs again once gdb has let it go
(resume_stopped())."""

import glob
import os
import signal
import subprocess
import time

from .channel import GuestError


def first_symbol(binary, names, what):
    """The first of `names` that `binary` defines (nm), for a breakpoint on
    whichever of them this build of QEMU has; `what` names them in the
    error when none is there."""
    syms = set(subprocess.run(["nm", binary], capture_output=True,
                              text=True, check=True).stdout.split())
    for name in names:
        if name in syms:
            return name
    raise AssertionError(f"{binary}: no {what} ({', '.join(names)})")


def _thread_states(pid):
    """The scheduler state letter of each thread of `pid` ('t': stopped by
    a tracer)."""
    states = []
    for d in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(f"{d}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            pass
    return states


def _stopped(pid):
    """Whether a thread of `pid` is stopped (T) or stopped by a tracer (t)."""
    return bool({"T", "t"} & set(_thread_states(pid)))


def resume_stopped(pid, timeout=10):
    """Continue a process that gdb's detach left stopped.  A thread that had
    a SIGSTOP from `interrupt -a` still pending when gdb let it go takes it
    after the detach, and the whole QEMU stops (state T): its vCPUs no
    longer run, while the process is alive.  Fails if a thread stays
    stopped."""
    if not _stopped(pid):
        return
    print(f"    QEMU {pid} stopped after gdb's detach (threads "
          f"{''.join(sorted(_thread_states(pid)))}): SIGCONT", flush=True)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while _stopped(pid):
        if time.time() > deadline:
            raise GuestError(f"QEMU {pid} still stopped after SIGCONT: "
                             f"{_thread_states(pid)}")
        time.sleep(0.1)


class NonStopGdb:
    """gdb attached to a running QEMU in non-stop mode: a breakpoint stops
    only the thread that hits it, the other threads keep running.  `script`
    is read after the attach (breakpoints, python)."""

    def __init__(self, pid, workdir, script="", timeout=60):
        self.pid = pid
        path = os.path.join(workdir, "gdb.cmds")
        with open(path, "w") as f:
            f.write("set pagination off\nset confirm off\n"
                    f"set non-stop on\nattach {pid}\n{script}\n"
                    "echo HB-GDB-ATTACHED\\n\n")
        self.log = os.path.join(workdir, "gdb.log")
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                ["gdb", "-q", "-nx", "-x", path], stdin=subprocess.PIPE,
                stdout=out, stderr=subprocess.STDOUT)
        self._await(lambda: "HB-GDB-ATTACHED" in self._log(), timeout,
                    "gdb did not attach")
        # A non-stop attach stops every thread but reports them one by one,
        # and `continue -a` resumes only those already reported: resume
        # until no thread of the QEMU is stopped by the tracer.
        self._await(self._all_running, timeout,
                    "QEMU's threads still stopped after the attach",
                    lambda: self.send("continue -a &", "(gdb)"))

    def _await(self, cond, timeout, what, each=None):
        deadline = time.time() + timeout
        while True:
            if each:
                each()
            if cond():
                return
            if self.proc.poll() is not None or time.time() > deadline:
                raise GuestError(f"{what}: {self._log()[-2000:]}")
            time.sleep(0.5)

    def _all_running(self):
        return "t" not in _thread_states(self.pid)

    def text(self):
        """What gdb printed so far."""
        return self._log()

    def _log(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def send(self, cmds, expect, timeout=60):
        """Send gdb commands and wait until `expect` appears once more in
        its output (expect None: do not wait)."""
        n = self._log().count(expect) if expect else 0
        self.proc.stdin.write(cmds.encode() + b"\n")
        self.proc.stdin.flush()
        if expect is None:
            return
        self._await(lambda: self._log().count(expect) > n, timeout,
                    f"gdb: no {expect!r} after {cmds!r}")

    def detach(self):
        """Remove every breakpoint and let the QEMU go on without gdb: stop
        every thread, wait until all are stopped, detach, and make sure the
        QEMU runs again."""
        try:
            self.proc.stdin.write(b"delete\ninterrupt -a\n")
            self.proc.stdin.flush()
            self._await(lambda: set(_thread_states(self.pid)) <= {"t"}, 30,
                        "QEMU's threads not all stopped for the detach")
            self.proc.stdin.write(b"detach\nquit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        except (OSError, GuestError, subprocess.TimeoutExpired):
            self.kill()
            return
        resume_stopped(self.pid)

    def kill(self):
        """For a QEMU that is killed next: breakpoints stay inserted."""
        self.proc.kill()
        self.proc.wait()
