# SPDX-License-Identifier: GPL-2.0
"""Invalid virtio-balloon hint properties, on the command line and through
qom-set: QEMU refuses each, names the property, keeps its value, and
prints no error report of its own (assertion, sanitizer)."""
import subprocess

from hb.env import machine_for
from hb.rigs import tmpdir
from hb.testlib import CURRENT, our_qemu, tag
from hb.vm import VM


def _qemu_cmdline(binary, device):
    return [binary, "-accel", "tcg", "-nodefaults", "-no-user-config",
            "-machine", machine_for(binary), "-display", "none", "-m", "128",
            "-S", "-qmp", "null",
            "-object", "iothread,id=io0", "-device", device]


BAD_PROPS = [
    ("x-free-page-hint-wait-ms=60001", "x-free-page-hint-wait-ms"),
    ("x-free-page-hint-wait-ms=4294967296", "x-free-page-hint-wait-ms"),
    ("x-free-page-hint-wait-ms=-1", "x-free-page-hint-wait-ms"),
    ("x-free-page-hint-wait-ms=abc", "x-free-page-hint-wait-ms"),
    ("x-free-page-hint-batch-max=0", "x-free-page-hint-batch-max"),
    ("x-free-page-hint-batch-max=1025", "x-free-page-hint-batch-max"),
    ("x-free-page-hint-batch-max=x1", "x-free-page-hint-batch-max"),
    ("x-free-page-hint-postcopy=maybe", "x-free-page-hint-postcopy"),
    ("x-free-page-hint-timing=maybe", "x-free-page-hint-timing"),
    ("x-free-page-hint-stats=1", "x-free-page-hint-stats"),
    ("iothread=nosuch", "nosuch"),
]


@tag("reliability", "bad_input", "sanitize", "each_stack")
def test_invalid_device_properties_on_command_line():
    """Each invalid property value: QEMU exits non-zero at once with an
    error naming the property; valid boundary values start."""
    qemu = our_qemu()
    base = "virtio-balloon-pci,id=balloon0,free-page-hint=on,iothread=io0"
    problems = []
    for prop, word in BAD_PROPS + [("free-page-hint=on", "iothread")]:
        dev = (base + "," + prop if not prop.startswith("free-page-hint=")
               else "virtio-balloon-pci,id=balloon0," + prop)
        CURRENT.add("bad_inputs")
        try:
            p = subprocess.run(_qemu_cmdline(qemu, dev), capture_output=True,
                               text=True, timeout=30)
        except subprocess.TimeoutExpired:
            problems.append((prop, "QEMU started"))
            continue
        if p.returncode == 0 or word not in p.stderr:
            problems.append((prop, p.returncode, p.stderr.strip()[:200]))
    # valid boundaries must start (QEMU still running after 3 s)
    for prop in ("x-free-page-hint-wait-ms=60000", "x-free-page-hint-wait-ms=0",
                 "x-free-page-hint-batch-max=1",
                 "x-free-page-hint-batch-max=1024",
                 "x-free-page-hint-timing=on", "x-free-page-hint-timing=off",
                 "x-free-page-hint-timing=auto"):
        p = subprocess.Popen(_qemu_cmdline(qemu, base + "," + prop),
                             stderr=subprocess.PIPE, text=True)
        try:
            p.wait(timeout=3)
            problems.append((prop, "valid value rejected",
                             p.stderr.read()[:200]))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert not problems, problems


@tag("reliability", "bad_input", "sanitize", "each_stack")
def test_invalid_device_properties_via_qom_set():
    """qom-set of the hint properties on a running VM: error, value
    unchanged; the stats property is read-only."""
    qemu = our_qemu()
    d = tmpdir("qomset")
    vm = VM(d, "qom", qemu, 256, "none", hint=True)
    problems = []
    try:
        vm.launch()
        paths = ["/machine/peripheral/balloon0",
                 "/machine/peripheral/balloon0/virtio-backend"]
        for path in paths:
            for prop, val in [("x-free-page-hint-wait-ms", 60001),
                              ("x-free-page-hint-wait-ms", 5),
                              ("x-free-page-hint-wait-ms", "abc"),
                              ("x-free-page-hint-batch-max", 0),
                              ("x-free-page-hint-batch-max", 2048),
                              ("x-free-page-hint-postcopy", "maybe"),
                              ("x-free-page-hint-timing", "maybe"),
                              ("x-free-page-hint-timing", "on"),
                              ("free-page-hint", False),
                              ("x-free-page-hint-stats", {"rounds": 5})]:
                try:
                    before = vm.qmp("qom-get", path=path, property=prop)
                except Exception as exc:  # pylint: disable=broad-except
                    before = f"<{exc}>"
                CURRENT.add("bad_inputs")
                try:
                    vm.qmp("qom-set", path=path, property=prop, value=val)
                    problems.append((path, prop, val, "accepted"))
                except Exception:  # pylint: disable=broad-except
                    pass
                try:
                    after = vm.qmp("qom-get", path=path, property=prop)
                except Exception as exc:  # pylint: disable=broad-except
                    after = f"<{exc}>"
                if isinstance(before, dict):
                    before.pop("status", None)
                    after.pop("status", None) if isinstance(after, dict) \
                        else None
                if before != after:
                    problems.append((path, prop, val, before, after))
        assert vm.machine.is_running()
        vm.end()
    finally:
        vm.end()
    assert not problems, problems
    # QEMU's stderr (an assertion, a sanitizer report), read before the
    # directory goes
    errs = vm.qemu_errors()
    assert not errs, f"QEMU reported errors ({d}): {errs}"
    subprocess.call(["rm", "-rf", d])
