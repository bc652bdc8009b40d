# SPDX-License-Identifier: GPL-2.0
"""The runner itself: a test that overruns its time limit gets TIMEOUT,
counts as failed and loses every process it started; the closing line
counts passes, failures and skips.  And the harness's gdb: its detach
leaves no QEMU stopped."""
import os
import signal
import subprocess
import sys
import tempfile

from hb import harness
from hb.testlib import TOP, tag, timeout, wait_for

FIXTURE = '''
import subprocess
import time
from hb.testlib import Skip, timeout


@timeout(3)
def test_hangs():
    p = subprocess.Popen(["sleep", "1000"])
    with open({pidfile!r}, "w") as f:
        f.write(str(p.pid))
    time.sleep(1000)


def test_passes():
    pass


def test_fails():
    assert False, "on purpose"


def test_skips():
    raise Skip("the environment lacks something")
'''


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@tag("runner")
@timeout(120)
def test_runner_times_out_and_kills_what_the_test_started():
    d = tempfile.mkdtemp(prefix="hb-runner-")
    pidfile = os.path.join(d, "sleep.pid")
    try:
        with open(os.path.join(d, "test_fixture.py"), "w") as f:
            f.write(FIXTURE.format(pidfile=pidfile))
        p = subprocess.run([sys.executable,
                            os.path.join(TOP, "tests", "run.py"),
                            "--dir", d, "--results",
                            os.path.join(d, "check.json")],
                           capture_output=True, text=True, timeout=100)
        lines = p.stdout.strip().splitlines()
        assert p.returncode == 1, p.stdout
        assert any("test_fixture.test_hangs TIMEOUT" in ln for ln in lines), \
            p.stdout
        assert any("test_fixture.test_fails FAILED" in ln for ln in lines), \
            p.stdout
        assert lines[-1] == "1 passed, 2 failed, 1 skipped", lines[-1]
        with open(pidfile) as f:
            pid = int(f.read())
        assert not _alive(pid), f"the timed-out test's child {pid} survived"
    finally:
        subprocess.call(["rm", "-rf", d])


@tag("runner")
@timeout(30)
def test_gdb_detach_continues_a_stopped_process():
    """A QEMU thread that still had the SIGSTOP of gdb's `interrupt -a`
    pending when gdb detached stops the whole process: alive, so the
    harness sees it as running, but its guest frozen.  NonStopGdb's detach
    continues it.  Shown on a stopped `sleep` standing in for the QEMU."""
    p = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(p.pid, signal.SIGSTOP)
        wait_for(lambda: harness._thread_states(p.pid) == ["T"], 10,
                 "the stand-in to stop")
        harness.resume_stopped(p.pid)
        assert not harness._stopped(p.pid), \
            f"still stopped: {harness._thread_states(p.pid)}"
        harness.resume_stopped(p.pid)     # running already: nothing to do
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()
