# SPDX-License-Identifier: GPL-2.0
"""The runner itself: a test that overruns its time limit gets TIMEOUT,
counts as failed and loses every process it started; the closing line
counts passes, failures and skips.  SIGTERM to the runner stops the running
test, kills what it started, runs its registered cleanups and still writes
the results and closing lines; selecting no test fails; reference tests
get their own verdict; a sanitizer report, or a work folder left in the
scratch folder, fails a passing test.  And the
harness: its gdb's detach leaves no QEMU
stopped, a QMP call to a QEMU that never answers times out."""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import hb.vm
from hb import gdb
from hb.testlib import TOP, tag, timeout, wait_for
from hb.vm import VM

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
        assert lines[-2] == "0 reference (recorded, not asserted)", lines[-2]
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
        wait_for(lambda: gdb._thread_states(p.pid) == ["T"], 10,
                 "the stand-in to stop")
        gdb.resume_stopped(p.pid)
        assert not gdb._stopped(p.pid), \
            f"still stopped: {gdb._thread_states(p.pid)}"
        gdb.resume_stopped(p.pid)     # running already: nothing to do
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def _runner(d, *args, env=None):
    """tests/run.py on the test files in d, results in d/check.json, its
    output in d/stdout and d/stderr."""
    with open(os.path.join(d, "stdout"), "w") as out, \
            open(os.path.join(d, "stderr"), "w") as err:
        return subprocess.Popen([sys.executable,
                                 os.path.join(TOP, "tests", "run.py"),
                                 "--dir", d, "--results",
                                 os.path.join(d, "check.json"), *args],
                                stdout=out, stderr=err, env=env)


def _finish(p, d, limit):
    """Wait for the runner p to end (not for the end of its output: a
    process that survived it may hold that open); (stdout, stderr)."""
    try:
        p.wait(timeout=limit)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with open(os.path.join(d, "stdout")) as out, \
            open(os.path.join(d, "stderr")) as err:
        return out.read(), err.read()


STOP_FIXTURE = '''
import subprocess
import time
from hb.testlib import cleanup


def touch(path):
    with open(path, "a") as f:
        f.write("x\\n")


def test_sleeps_forever():
    inside = subprocess.Popen(["sleep", "1000"])
    outside = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    cleanup(touch, {marker!r})
    with open({pidfile!r}, "w") as f:
        f.write(f"{{inside.pid}} {{outside.pid}}")
    try:
        time.sleep(1000)
    finally:
        touch({unwound!r})
        time.sleep(1000)        # hangs: only SIGKILL ends it


def test_not_run():
    touch({notrun!r})
'''


@tag("runner")
@timeout(120)
def test_runner_sigterm_stops_the_test_and_cleans_up():
    """SIGTERM to the runner mid-test: the test unwinds (its `finally`
    runs) and, hanging there, is killed HB_GRACE_S later with the `sleep`
    it started in its group and the one it started in a session of its
    own; the runner calls the cleanup the test registered, runs no further
    test, writes the partial results and the closing lines, and exits
    128 + SIGTERM."""
    d = tempfile.mkdtemp(prefix="hb-runner-")
    paths = {k: os.path.join(d, k) for k in
             ("marker", "pidfile", "unwound", "notrun")}
    try:
        with open(os.path.join(d, "test_fixture.py"), "w") as f:
            f.write(STOP_FIXTURE.format(**paths))
        p = _runner(d, env=dict(os.environ, HB_GRACE_S="2"))
        try:
            wait_for(lambda: os.path.exists(paths["pidfile"])
                     and open(paths["pidfile"]).read(), 60,
                     "the fixture test to start its sleeps")
            pids = [int(x) for x in open(paths["pidfile"]).read().split()]
            assert all(_alive(pid) for pid in pids), pids
            t0 = time.time()
            p.send_signal(signal.SIGTERM)
        finally:
            out, err = _finish(p, d, 60)
        took = time.time() - t0
        lines = out.strip().splitlines()
        assert p.returncode == 128 + signal.SIGTERM, \
            (p.returncode, out, err)
        assert took < 30, f"the runner took {took:.0f} s to stop"
        assert any("test_fixture.test_sleeps_forever INTERRUPTED" in ln
                   for ln in lines), out
        survivors = [pid for pid in pids if _alive(pid)]
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
        assert not survivors, \
            f"the test's children {pids} (in, out of its group): " \
            f"{survivors} survived"
        assert os.path.exists(paths["unwound"]), \
            "the test's finally did not run"
        assert os.path.exists(paths["marker"]), "the cleanup did not run"
        with open(paths["marker"]) as f:
            assert f.read() == "x\n", "the cleanup ran more than once"
        assert not os.path.exists(paths["notrun"]), "a test ran after it"
        assert lines[-2] == "0 reference (recorded, not asserted)", out
        assert lines[-1] == "0 passed, 1 failed", out
        with open(os.path.join(d, "check.json")) as f:
            res = json.load(f)
        assert res["stopped_by"] == "SIGTERM", res
        assert res["not_run"] == ["test_fixture.test_not_run"], res
        assert [r["verdict"] for r in res["results"]] == ["interrupted"], res
    finally:
        subprocess.call(["rm", "-rf", d])


@tag("runner")
@timeout(60)
def test_runner_fails_when_no_test_is_selected():
    """A --tag or -k that selects nothing (a typo in `make check TAG=`)
    fails with a message, and writes no results; -k repeated selects the
    tests any of them matches."""
    d = tempfile.mkdtemp(prefix="hb-runner-")
    try:
        with open(os.path.join(d, "test_fixture.py"), "w") as f:
            f.write("from hb.testlib import tag\n\n\n@tag('real')\n"
                    "def test_passes():\n    pass\n\n\n"
                    "def test_also():\n    pass\n")
        for args in (["--tag", "no-such-tag"], ["-k", "no_such_test"],
                     ["--tag", "no-such-tag", "--list"]):
            p = _runner(d, *args)
            out, err = _finish(p, d, 50)
            assert p.returncode == 2, (args, p.returncode, out, err)
            assert "no test selected" in err and "real" in err, (args, err)
        assert not os.path.exists(os.path.join(d, "check.json"))
        # -k repeated selects the tests that match any of them
        for args, want in ((["-k", "test_passes"], ["test_passes"]),
                           (["-k", "test_passes", "-k", "test_also"],
                            ["test_also", "test_passes"])):
            p = _runner(d, *args, "--list")
            out, err = _finish(p, d, 50)
            got = sorted(ln.split()[0].split(".")[1]
                         for ln in out.splitlines() if ln.strip())
            assert p.returncode == 0 and got == want, (args, out, err)
        p = _runner(d, "--tag", "real")
        out, err = _finish(p, d, 50)
        assert p.returncode == 0, (out, err)
    finally:
        subprocess.call(["rm", "-rf", d])


VERDICT_FIXTURE = '''
from hb.testlib import (CURRENT, cleanup, record_reference, reference,
                        run_cleanup)
from hb.rigs import tmpdir
from hb.vm import SANITIZER_REPORTS


def note(what):
    with open({log!r}, "a") as f:
        f.write(what + "\\n")


def fail_to_restore():
    raise OSError("cannot put the host back")


@reference
def test_ref_recorded():
    CURRENT.add("stock_runs", 2)
    CURRENT.add("stock_losses", 1)


@reference
def test_ref_harness_broke():
    record_reference({{"error": "TypeError: unsupported operand",
                       "workdir": None}}, "ref-broken")


@reference
def test_ref_recorded_nothing():
    pass


def test_cleanup_run_by_the_test_and_by_the_runner():
    first = cleanup(note, "by-the-test")
    cleanup(note, "by-the-runner")
    run_cleanup(first)


def test_cleanup_error_fails_a_passing_test():
    cleanup(fail_to_restore)


def test_sanitizer_report_fails_a_passing_test():
    # what VM.end() records of a QEMU that printed a sanitizer report
    SANITIZER_REPORTS.append({{"vm": "fake", "lines": [
        "==1==ERROR: LeakSanitizer: detected memory leaks"]}})


def test_leaves_its_work_folder():
    tmpdir({leftover!r})
'''


@tag("runner")
@timeout(120)
def test_reference_verdict_and_cleanups():
    """A @reference test that recorded its runs gets REFERENCE, counted on
    the line before the closing one and not as passed; one whose run broke
    on our side (a harness exception in the record), or that recorded
    nothing, fails.  A cleanup the test ran itself is not run again; the
    runner runs the others; a cleanup that fails fails the test.  So does
    a sanitizer report of a QEMU the test ended (make check SANITIZE=1),
    and so does a work folder it left in the scratch folder."""
    d = tempfile.mkdtemp(prefix="hb-runner-")
    log = os.path.join(d, "log")
    leftover = f"runner-fixture-{os.getpid()}"
    left_glob = os.path.join(TOP, "build", "tmp", f"hb-rel-{leftover}-*")
    try:
        with open(os.path.join(d, "test_fixture.py"), "w") as f:
            f.write(VERDICT_FIXTURE.format(log=log, leftover=leftover))
        p = _runner(d)
        out, err = _finish(p, d, 100)
        lines = out.strip().splitlines()
        verdicts = {ln.split()[1].split(".")[1]: ln.split()[2]
                    for ln in lines if ln.startswith("[")
                    and not ln.endswith("...")}
        assert verdicts == {
            "test_ref_recorded": "REFERENCE",
            "test_ref_harness_broke": "FAILED",
            "test_ref_recorded_nothing": "FAILED",
            "test_cleanup_run_by_the_test_and_by_the_runner": "PASSED",
            "test_cleanup_error_fails_a_passing_test": "FAILED",
            "test_sanitizer_report_fails_a_passing_test": "FAILED",
            "test_leaves_its_work_folder": "FAILED"}, out
        assert "1 of 2 stock runs not ok" in out, out
        assert "broke on our side" in out and "TypeError" in out, out
        assert "recorded no reference run" in out, out
        assert "cleanup failed: fail_to_restore: OSError" in out, out
        assert ("sanitizer report: fake: ==1==ERROR: LeakSanitizer: "
                "detected memory leaks") in out, out
        with open(log) as f:
            assert f.read() == "by-the-test\nby-the-runner\n"
        assert lines[-2] == "1 reference (recorded, not asserted)", out
        left = glob.glob(left_glob)
        assert len(left) == 1, left
        assert f"left behind in {os.path.dirname(left[0])}: " \
            f"{os.path.basename(left[0])}" in out, out
        assert lines[-1] == "1 passed, 5 failed", out
        assert p.returncode == 1, (p.returncode, out, err)
    finally:
        subprocess.call(["rm", "-rf", d, *glob.glob(left_glob)])


# A QEMU that greets on its QMP socket, accepts qmp_capabilities and then
# never answers again: a hung QEMU as QEMUMachine sees it.
FAKE_QEMU = '''#!/usr/bin/env python3
import json
import re
import socket
import sys
import time

fd = int(re.search(r"id=mon,fd=(\\d+)", " ".join(sys.argv)).group(1))
s = socket.socket(fileno=fd)
s.sendall(json.dumps({"QMP": {"version": {"qemu": {
    "major": 10, "minor": 0, "micro": 0}, "package": ""},
    "capabilities": []}}).encode() + b"\\r\\n")
buf = b""
while True:                     # qmp_capabilities (no newline after it)
    buf += s.recv(4096)
    try:
        req = json.loads(buf)
        break
    except ValueError:
        pass
rsp = {"return": {}}
if "id" in req:
    rsp["id"] = req["id"]
s.sendall(json.dumps(rsp).encode() + b"\\r\\n")
time.sleep(1000)
'''


@tag("runner")
@timeout(60)
def test_qmp_call_to_a_hung_qemu_times_out():
    """VM.qmp on a QEMU that never answers raises TimeoutError after
    qmp_timeout seconds, or hb.vm.QMP_TIMEOUT_S by default."""
    d = tempfile.mkdtemp(prefix="hb-qmp-")
    fake = os.path.join(d, "fake-qemu")
    with open(fake, "w") as f:
        f.write(FAKE_QEMU)
    os.chmod(fake, 0o755)
    vm = VM(d, "hung", fake, 64, "intree", False, kernel="/dev/null",
            initrd="/dev/null", machine="pc")
    try:
        vm.launch()
        hb.vm.QMP_TIMEOUT_S = 2           # this test's process only
        for kw, limit in (({"qmp_timeout": 1}, 1), ({}, 2)):
            t0 = time.time()
            try:
                vm.qmp("query-status", **kw)
            except TimeoutError:
                pass
            else:
                raise AssertionError("the fake QEMU answered")
            took = time.time() - t0
            assert limit <= took < limit + 10, (kw, took)
    finally:
        vm.kill()
        subprocess.call(["rm", "-rf", d])


KERNEL_FIXTURE = '''
import os
from hb.testlib import tag


@tag("each_kernel", "cloud_kernel")
def test_on_every_kernel():
    with open({log!r}, "a") as f:
        f.write(os.environ.get("HB_GUEST", "-") + "\\n")


def test_default_kernel_only():
    assert not os.environ.get("HB_GUEST")
'''


@tag("runner")
@timeout(60)
def test_runner_runs_each_kernel_tests_on_every_guest_kernel():
    """A test tagged each_kernel (cloud_kernel) also runs on each 7.3
    guest kernel this machine has (generic, -rt; -cloud), as NAME[7.3]
    and so on, with HB_GUEST set to the series; a kernel the machine lacks
    (here the debug kernel) gets no run; every verdict line and record
    names the kernel.  The machine is a fake kernel cache (BH_CACHE)."""
    d = tempfile.mkdtemp(prefix="hb-runner-")
    log = os.path.join(d, "log")
    cache = os.path.join(d, "cache")
    kvers = ("6.12.95+deb12-amd64", "7.3.4+deb13-amd64",
             "7.3.4+deb13-rt-amd64", "7.3.4+deb13-cloud-amd64")
    try:
        for k in kvers:
            os.makedirs(os.path.join(cache, "kernels", k, "boot"))
            open(os.path.join(cache, "kernels", k, "boot",
                              f"vmlinuz-{k}"), "w").close()
        with open(os.path.join(d, "test_fixture.py"), "w") as f:
            f.write(KERNEL_FIXTURE.format(log=log))
        e = dict(os.environ, BH_CACHE=cache)
        e.pop("HB_GUEST", None)
        e.pop("KVER", None)
        p = _runner(d, env=e)
        out, err = _finish(p, d, 50)
        assert p.returncode == 0, (out, err)
        with open(log) as f:
            assert f.read().split() == ["-", "7.3", "7.3-rt", "7.3-cloud"]
        with open(os.path.join(d, "check.json")) as f:
            res = json.load(f)["results"]
        got = {r["name"].split(".", 1)[1]: r["guest_kernel"] for r in res}
        assert got == {
            "test_on_every_kernel": kvers[0],
            "test_on_every_kernel[7.3]": kvers[1],
            "test_on_every_kernel[7.3-rt]": kvers[2],
            "test_on_every_kernel[7.3-cloud]": kvers[3],
            "test_default_kernel_only": kvers[0]}, got
        for name, k in got.items():
            assert f"{name} PASSED" in out and f"guest {k})" in out, out
    finally:
        subprocess.run(["rm", "-rf", d], check=False)
