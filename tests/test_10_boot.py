# SPDX-License-Identifier: GPL-2.0
"""Boot the test guest on stock and patched QEMU with either driver."""
import os
import shutil
import tempfile

from hb import channel
from hb.testlib import BUILD, need_ours, qemu_bin, tag
from hb.vm import VM


def _boot(qemu, balloon):
    if balloon == "ours":
        need_ours()
    d = tempfile.mkdtemp(prefix="hb-boot-", dir=os.path.join(BUILD, "tmp"))
    vm = VM(d, "boot", qemu_bin(qemu), 1024, balloon, hint=True)
    try:
        vm.boot()
        _, mods = vm.guest.run("cat /proc/modules")
        assert any(m.startswith("virtio_balloon ") for m in mods), mods
        _, out = vm.guest.run("for d in /sys/bus/virtio/devices/*; do "
                              "cat $d/device; readlink $d/driver; done")
        assert "0x0005" in out, out
        assert any("virtio_balloon" in l for l in out), out
        info = vm.qmp("query-balloon")
        assert info["actual"] == 1024 << 20, info
        assert not vm.kernel_errors(), vm.kernel_errors()
    finally:
        vm.end()
    shutil.rmtree(d)    # kept for a look when the test failed


@tag("boot", "each_kernel", "cloud_kernel")
def test_boot_stock_qemu_intree_driver():
    _boot("stock", "intree")


@tag("boot", "each_kernel", "cloud_kernel")
def test_boot_our_qemu_our_driver():
    _boot("ours", "ours")


class _LossySocket:
    """A socket whose next sendall loses bytes: its first byte, or all."""

    def __init__(self, sock, lose):
        self.sock = sock
        self.lose = lose

    def sendall(self, data):
        lose, self.lose = self.lose, None
        if lose == "first":
            data = data[1:]
        elif lose == "all":
            return None
        return self.sock.sendall(data)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def _read_until(g, pattern, timeout=30):
    """Raw lines from the channel until one starts with pattern."""
    lines = []
    g.sock.settimeout(timeout)
    while True:
        while b"\n" in g.buf:
            raw, g.buf = g.buf.split(b"\n", 1)
            lines.append(raw.decode(errors="replace"))
            if lines[-1].startswith(pattern):
                return lines
        data = g.sock.recv(65536)
        assert data, f"channel closed waiting for {pattern}: {lines}"
        g.buf += data


@tag("boot")
def test_command_channel_survives_lost_bytes():
    """The harness's command channel (ttyS1) must not turn a lost byte into
    a hung test: a line that lost bytes is refused (HBBAD) and never run,
    a line sent twice runs once, and the harness sends again a line the
    guest refused or never acknowledged."""
    d = tempfile.mkdtemp(prefix="hb-chan-", dir=os.path.join(BUILD, "tmp"))
    vm = VM(d, "chan", qemu_bin("stock"), 256, "intree", hint=False)
    ack_timeout = channel.ACK_TIMEOUT_S
    try:
        vm.boot()
        g = vm.guest
        # A line shorter than its length field: refused, not run.
        g.sock.sendall(b"c9000001 99 touch /tmp/damaged\n")
        lines = _read_until(g, "HBBAD")
        assert lines[-1] == "HBBAD c9000001 99 18", lines
        # An ID without its leading "c" (the byte the 8250 drops on open).
        g.sock.sendall(b"9000002 18 touch /tmp/damaged\n")
        assert _read_until(g, "HBBAD")[-1] == "HBBAD 9000002", lines
        rc, _ = g.run("test -e /tmp/damaged", check=False)
        assert rc == 1, "a damaged line was run"
        # The same ID twice: the second answer repeats the first output.
        cmd = b"echo x >> /tmp/n; wc -l < /tmp/n"
        line = b"c9000003 %d %s\n" % (len(cmd), cmd)
        g.sock.sendall(line + line)
        first = _read_until(g, "HBEND c9000003")
        second = _read_until(g, "HBEND c9000003")
        assert first[-2:] == ["c9000003| 1", "HBEND c9000003 0"], first
        assert second[-2:] == first[-2:], second
        _, out = g.run("wc -l < /tmp/n")
        assert out == ["1"], f"a repeated ID ran again: {out}"
        # The harness recovers a line that lost its first byte ...
        before = dict(channel.CHANNEL)
        g.sock = _LossySocket(g.sock, "first")
        assert g.run("echo one") == (0, ["one"])
        assert channel.CHANNEL["damaged"] == before["damaged"] + 1
        # ... and reads the guest's serial counters after it.
        assert g.serial_diag and g.serial_diag[0].startswith("1: uart:"), \
            g.serial_diag
        # ... and one that never arrived.
        channel.ACK_TIMEOUT_S = 2
        g.sock = _LossySocket(g.sock.sock, "all")
        assert g.run("echo two") == (0, ["two"])
        assert channel.CHANNEL["unacked"] == before["unacked"] + 1
        assert channel.CHANNEL["resent"] == before["resent"] + 2
        g.sock = g.sock.sock
        assert not vm.kernel_errors(), vm.kernel_errors()
    finally:
        channel.ACK_TIMEOUT_S = ack_timeout
        vm.end()
    shutil.rmtree(d)    # kept for a look when the test failed


@tag("boot")
def test_command_channel_survives_orphans_exiting():
    """Background jobs that commands leave behind are adopted by PID 1 and
    signal it when they exit.  A signal must not cost the command loop the
    line it is reading: busybox ash restarts an interrupted `read` from
    scratch, which once dropped the front of one line in about 80 migrations
    (the first commands after a test killed its background poller).  Here
    an orphan exits every few ms while 300 commands go through: none may
    arrive damaged, none may need sending again."""
    d = tempfile.mkdtemp(prefix="hb-chan-", dir=os.path.join(BUILD, "tmp"))
    vm = VM(d, "orphans", qemu_bin("stock"), 256, "intree", hint=False)
    try:
        vm.boot()
        g = vm.guest
        g.run("(while :; do (usleep 3000 &); usleep 2000; done) "
              ">/dev/null 2>&1 & echo $! > /tmp/orphans.pid")
        # The storm runs, adopted by PID 1 (its `sh -c` has exited), so the
        # short-lived jobs it leaves behind are PID 1's as well.
        _, out = g.run("cut -d' ' -f4 /proc/$(cat /tmp/orphans.pid)/stat")
        assert out == ["1"], f"storm not adopted by PID 1: {out}"
        before = dict(channel.CHANNEL)
        for i in range(300):
            text = f"{i}-abcdefghijklmnopqrstuvwxyz-0123456789"
            assert g.run(f"echo {text}") == (0, [text])
        assert channel.CHANNEL == before, (before, channel.CHANNEL)
        g.run("kill $(cat /tmp/orphans.pid)")
        assert not vm.kernel_errors(), vm.kernel_errors()
    finally:
        vm.end()
    shutil.rmtree(d)    # kept for a look when the test failed
