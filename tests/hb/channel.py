# SPDX-License-Identifier: GPL-2.0
"""The command channel to a test guest: its /init runs shell commands that
come in on its second serial port (ttyS1, a unix socket on the host) and
answers each with its output and exit status.  Guest sends a line, reads
the answer, and sends the line again when the guest did not acknowledge
it or got it damaged; CHANNEL counts those for the whole process.  The
errors of a guest that does not answer as expected (GuestError) or whose
workload setup failed (SetupError) are defined here too."""

import itertools
import os
import socket
import time

from .env import log


class GuestError(Exception):
    """The guest did not answer as expected."""


class SetupError(GuestError):
    """A step of the scenario's workload setup failed in the guest
    (hb.workloads.prepare_guest(): an hbwork that failed or wrote less
    than asked, a helper that is not running): the test's or the
    harness's side, not the migration's.  hb.migration.migrate_once()
    keeps it in res["error"] like any GuestError;
    testlib.record_reference() fails on it."""


# Command channel health, for the whole process: lines resent because the
# guest did not acknowledge them or said they arrived damaged.
CHANNEL = {"resent": 0, "damaged": 0, "unacked": 0}
ACK_TIMEOUT_S = 20
SEND_TRIES = 4
# Command IDs are unique in the process, not per Guest: the destination's
# Guest talks to the same /init as the source's did, and /init does not run
# an ID it has just run again.
_SEQ = itertools.count(1)
# What Guest.run() reads after a damaged line: ttyS1's counters and any
# "input overrun" the n_tty layer reported.
SERIAL_DIAG = ("grep '^1:' /proc/tty/driver/serial; "
               "dmesg | grep -i overrun | tail -3")


class Guest:
    """Command channel to the guest's /init loop on ttyS1.

    Each command goes out as "cN LEN CMD".  The guest acknowledges it
    (HBACK cN) before running it, or answers HBBAD when the line lost bytes;
    either a damaged line or no acknowledgement within ACK_TIMEOUT_S makes
    the host send the same line again (the guest runs an ID only once and
    answers a repeat with the saved output).  Lines that belong to no
    command in flight are kept in `stray` for the error message."""

    def __init__(self, path, dead_check=None):
        self.path = path
        self.dead_check = dead_check
        self.sock = None
        self.buf = b""
        self.stray = []
        self.serial_diag = None

    def connect(self, timeout=30):
        deadline = time.time() + timeout
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.path)
                self.sock = s
                return
            except OSError:
                s.close()
                if time.time() > deadline:
                    raise
                time.sleep(0.1)

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None

    def send(self, cmd):
        """Send a command without waiting for it; return its line."""
        if not self.sock:
            self.connect()
        cmd = cmd.strip()
        line = f"c{next(_SEQ)} {len(cmd.encode())} {cmd}\n".encode()
        self.sock.sendall(line)
        return line

    def _resend(self, line, tries, why, give_up):
        """Send `line` again after `tries` sends, or raise `give_up`."""
        if tries >= SEND_TRIES:
            raise GuestError(give_up)
        CHANNEL["resent"] += 1
        log(f"guest channel ({os.path.basename(self.path)}): {why}; sending "
            f"{line.decode(errors='replace').strip()[:80]!r} again "
            f"(try {tries + 1}/{SEND_TRIES})")
        self.sock.sendall(line)
        return tries + 1, time.time()

    def run(self, cmd, timeout=120, check=True):
        """Run a shell command in the guest; return (rc, output lines).
        After a command that arrived damaged, log what the guest's serial
        layer counted (UART overruns "oe", tty buffer overruns "bo"), so a
        lost byte can be told apart from a mangled one."""
        damaged = CHANNEL["damaged"]
        rc, out = self._run(cmd, timeout, check)
        if CHANNEL["damaged"] != damaged:
            try:
                _, diag = self._run(SERIAL_DIAG, 60, False)
            except GuestError as exc:   # a diagnostic: never fail `cmd`
                diag = [f"(not read: {exc})"]
            self.serial_diag = diag
            log(f"guest channel ({os.path.basename(self.path)}): serial "
                f"counters after the damaged line: {' | '.join(diag)}")
        return rc, out

    def _run(self, cmd, timeout, check):
        line = self.send(cmd)
        tag = line.split()[0].decode()
        out = []
        acked = False
        tries = 1
        sent_at = time.time()
        deadline = sent_at + timeout
        while True:
            while b"\n" in self.buf:
                raw, self.buf = self.buf.split(b"\n", 1)
                text = raw.decode(errors="replace").rstrip("\r")
                if text.startswith(tag + "| "):
                    out.append(text[len(tag) + 2:])
                elif text == f"HBACK {tag}":
                    acked = True
                elif text.startswith(f"HBEND {tag} "):
                    rc = int(text.split()[2])
                    if check and rc != 0:
                        raise GuestError(f"guest command failed rc={rc}: "
                                         f"{cmd}: {out}")
                    return rc, out
                elif text.startswith("HBBAD") and not acked:
                    CHANNEL["damaged"] += 1
                    tries, sent_at = self._resend(
                        line, tries, f"guest got a damaged line ({text})",
                        f"guest got '{cmd}' damaged {tries} times: {text}")
                else:
                    self.stray = (self.stray + [text])[-20:]
            if not acked and time.time() - sent_at > ACK_TIMEOUT_S:
                CHANNEL["unacked"] += 1
                tries, sent_at = self._resend(
                    line, tries, f"no HBACK for {tag} after {ACK_TIMEOUT_S}s",
                    f"guest never acknowledged '{cmd}' ({tries} sends); "
                    f"stray lines: {self.stray}")
            left = deadline - time.time()
            if left <= 0:
                raise GuestError(f"guest command timed out: {cmd} "
                                 f"(acknowledged: {acked}; stray lines: "
                                 f"{self.stray})")
            self.sock.settimeout(min(left, 1.0))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                why = self.dead_check() if self.dead_check else None
                if why:
                    raise GuestError(f"guest died during '{cmd}': {why}")
                continue
            if not data:
                raise GuestError(f"guest channel closed during: {cmd}")
            self.buf += data

    def hbwork(self, args, timeout=300):
        """Run hbwork; return the key=value fields of its HBWORK line."""
        rc, out = self.run(f"hbwork {args}", timeout=timeout, check=False)
        for line in out:
            if line.startswith("HBWORK "):
                fields = parse_kv(line)
                fields["rc"] = rc
                return fields
        raise GuestError(f"no HBWORK line from 'hbwork {args}': {out}")


def parse_kv(line):
    """'HBWORK verb a=1 b=x' -> {'verb': 'verb', 'a': 1, 'b': 'x'}."""
    parts = line.split()
    res = {"verb": parts[1] if len(parts) > 1 else ""}
    for p in parts[2:]:
        if "=" in p:
            k, v = p.split("=", 1)
            try:
                res[k] = int(v)
            except ValueError:
                try:
                    res[k] = float(v)
                except ValueError:
                    res[k] = v
    return res
