#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Hunt the rare "destination guest stops answering" failure.

Repeats one benchmark configuration (its in-guest hooks included) with two
additions to every harness VM: an HMP monitor socket and the guest kernel
arguments sysrq_always_enabled / hung_task_timeout_secs=15.  When a guest
command times out, every live VM's state is written to
build/hunt/dump-<vm>-<time>.txt before the run fails: run state, registers,
interrupt controllers, chardevs, COM2's registers (read through HMP `i`),
sysrq-w / sysrq-t on the console, the host's view of the command socket,
and what the harness had received.

  scripts/hunt_hang.py [RUNS] [CONFIG]      (default: 100 d)
"""
import os
import socket
import subprocess
import sys
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(TOP, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hb import harness  # noqa: E402
import bench  # noqa: E402

OUT = os.path.join(harness.BUILD, "hunt")
HMP_CMDS = ["info status", "info registers -a", "info pic", "info irq",
            "info balloon", "info chardev",
            # COM2 (the command channel): IER, LCR, MCR, LSR, MSR, then IIR
            # (reading IIR acknowledges a THRE interrupt, so it goes last)
            "i /b 0x2f9", "i /b 0x2fb", "i /b 0x2fc", "i /b 0x2fd",
            "i /b 0x2fe", "i /b 0x2fa",
            "sendkey alt-sysrq-w", "sendkey alt-sysrq-t"]


def _hmp(path, cmds):
    out = b""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.settimeout(0.5)
        for cmd in [None] + cmds:
            if cmd:
                s.sendall(cmd.encode() + b"\n")
            deadline = time.time() + 1.5
            while time.time() < deadline:
                try:
                    data = s.recv(65536)
                except socket.timeout:
                    break
                if not data:
                    break
                out += data
    return out.decode(errors="replace")


def _dump(guest, cmd):
    os.makedirs(OUT, exist_ok=True)
    for vm in list(harness._LIVE):  # pylint: disable=protected-access
        sock = os.path.join(vm.workdir, f"{vm.name}-hmp.sock")
        if not os.path.exists(sock):
            continue
        txt = _hmp(sock, HMP_CMDS)
        time.sleep(8)           # let sysrq output reach the console
        ss = subprocess.run("ss -xanp | grep -E 'cmd.sock|qemu'", shell=True,
                            capture_output=True, text=True).stdout
        path = os.path.join(OUT, f"dump-{vm.name}-{int(time.time())}.txt")
        with open(path, "w") as f:
            f.write(f"command: {cmd}\nharness received: {guest.buf!r}\n"
                    f"stray lines: {guest.stray!r}\n"
                    f"{txt}\nsockets:\n{ss}\nconsole:\n"
                    f"{vm.console_text()[-60000:]}")
        harness.log(f"hunt: dumped {vm.name} to {path}")


def _instrument():
    vm_init = harness.VM.__init__
    guest_run = harness.Guest.run

    def init(self, workdir, name, *args, **kw):
        kw["kernel_args"] = (kw.get("kernel_args", "") + " sysrq_always_enabled"
                             " hung_task_timeout_secs=15").strip()
        kw["extra_args"] = tuple(kw.get("extra_args", ())) + (
            "-monitor", f"unix:{workdir}/{name}-hmp.sock,server=on,wait=off")
        vm_init(self, workdir, name, *args, **kw)

    def run(self, cmd, *args, **kw):
        try:
            return guest_run(self, cmd, *args, **kw)
        except harness.GuestError as exc:
            if "timed out" in str(exc):
                _dump(self, cmd)
            raise

    harness.VM.__init__ = init
    harness.Guest.run = run


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    cfg = sys.argv[2] if len(sys.argv) > 2 else "d"
    qemu_name, balloon, hint, bargs, _ = bench.CONFIGS[cfg]
    qemu = harness.OUR_QEMU if qemu_name == "ours" else harness.STOCK_QEMU
    _instrument()
    failed = 0
    for i in range(runs):
        src_ready, on_dst = bench.make_hooks("stale", balloon, {})
        res = harness.migrate_once(qemu, qemu, balloon=balloon, hint=hint,
                                   balloon_args=bargs,
                                   scenario=harness.Scenario("stale"),
                                   on_source_ready=src_ready,
                                   on_destination=on_dst)
        failed += not res.get("ok")
        harness.log(f"hunt {i + 1}/{runs} {cfg}: ok={res.get('ok')} "
                    f"{res.get('transferred_mb')} MB; {failed} failed; "
                    f"{res.get('error') or ''}")
    print(f"{runs - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
