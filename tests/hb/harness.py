# SPDX-License-Identifier: GPL-2.0
"""Boot-and-migrate harness for balloon-hint.

One harness serves `make check`, `make demo` and `make bench`: nothing else
in the project talks QMP.  It starts a source and a destination QEMU (TCG)
through QEMU's own Python package (qemu.machine / qemu.qmp from the QEMU
source tree), drives the guest over a command channel on its second serial
port, migrates over a unix socket, and verifies the guest's data on the
destination against checksums taken in the guest before migration.  The
destination's console is scanned for kernel errors: a user-data checksum
alone does not see kernel memory corruption.

Every exit path (success, exception, timeout, Ctrl-C, even SIGKILL of the
harness through PR_SET_PDEATHSIG) ends both QEMUs.
"""

import atexit
import glob
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(TOP, "build")


def _qemu_python():
    """Locate QEMU's python/ directory (qemu.machine, qemu.qmp)."""
    cands = sorted(glob.glob(os.path.join(BUILD, "src", "pristine", "qemu-*",
                                          "python")))
    # scripts/build-qemu.sh keeps the Debian sources in the machine cache
    cands += sorted(glob.glob(os.path.join(
        os.environ.get("BH_CACHE", "/var/cache/balloon-hint"), "src",
        "qemu-*", "qemu", "python")), reverse=True)
    if not cands:
        raise RuntimeError("QEMU source tree not found under build/src; "
                           "run scripts/build-qemu.sh first")
    return cands[0]


sys.path.insert(0, _qemu_python())
from qemu.machine import QEMUMachine  # noqa: E402  pylint: disable=C0413

from .cpu import CpuSampler, HostCpu  # noqa: E402  pylint: disable=C0413

# The QEMU builds.  Ours: build/qemu (10.0).  Debian's own: bookworm-backports'
# 10.0, unpacked by scripts/stock-qemu.sh.  Every binary finds its firmware without -L
# (build-qemu.sh configures --firmwarepath).
OUR_QEMU_10 = os.path.join(BUILD, "qemu", "qemu-system-x86_64")
STOCK_QEMU_10 = os.path.join(BUILD, "stock-qemu-10.0", "qemu-system-x86_64")
STOCK_BINARIES = (STOCK_QEMU_10,)
# The modules of Debian's QEMU 10.0 (devices, displays, audio and block
# drivers of its module packages).  Debian's binary loads modules from
# DEBIAN_MODULE_PATH, where this host may have another QEMU's: it runs in
# a private mount namespace with its own modules bound there
# (module_wrapper()), as an installed Debian QEMU 10.0 has them.
STOCK_MODULE_DIR = os.path.join(BUILD, "stock-qemu-10.0", "modules")
DEBIAN_MODULE_PATH = "/usr/lib/x86_64-linux-gnu/qemu"


def module_wrapper(binary, modules=None):
    """The command prefix that runs `binary` (a stock QEMU) with
    `modules` (default: its own) at DEBIAN_MODULE_PATH; nothing outside
    the process sees the mount.  [] for our QEMU, which has no modules.
    The process keeps its PID through the prefix (each step execs)."""
    if binary not in STOCK_BINARIES:
        return []
    return ["unshare", "-m", "sh", "-c",
            'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
            modules or STOCK_MODULE_DIR, DEBIAN_MODULE_PATH]
# Stock QEMUs that died by a signal before their guest was up (VM.boot()),
# for the whole process.
STOCK_CRASHES = []

# The stacks balloon-hint supports.  Each one is tested side by side with
# the stock pair of the same versions: Debian's QEMU and the in-tree driver
# of the same guest kernel.  `old_machine` is the newest machine type
# without HINT_KEEP_WRITES (hw_compat): a guest booted there can migrate to
# the stock QEMU of the stack.
STACKS = {
    "10.0": {"ours": OUR_QEMU_10, "stock": STOCK_QEMU_10, "guest": "6.12",
             "old_machine": "pc-i440fx-9.2"},
}
DEFAULT_STACK = "10.0"


def use_stack(name):
    """Make `name` (a key of STACKS: "10.0") the stack of this process: the
    harness's OUR_QEMU, STOCK_QEMU and default guest kernel."""
    global STACK, OUR_QEMU, STOCK_QEMU  # pylint: disable=global-statement
    if name not in STACKS:
        raise ValueError(f"unknown stack {name!r}; known: {sorted(STACKS)}")
    STACK = name
    OUR_QEMU = STACKS[name]["ours"]
    STOCK_QEMU = STACKS[name]["stock"]
    os.environ["HB_STACK"] = name


STACK = OUR_QEMU = STOCK_QEMU = None
use_stack(os.environ.get("HB_STACK") or DEFAULT_STACK)

_MACHINES = {}

# HINT_KEEP_WRITES is off by default on every machine type: an operator
# opts a VM in (this device property) once every host it may move to runs
# our QEMU.  Tests and the bench run our QEMU as such an opted-in fleet
# unless they ask for the device default (VM(keep_writes=False)) or name
# the property in device_props themselves.
KEEP_WRITES_OPT_IN = "free-page-hint-keep-writes=on"


def fleet_opted_in(binary, hint, device_props=""):
    """Whether a VM of `binary` gets KEEP_WRITES_OPT_IN by default: our
    QEMU with free-page-hint=on, where the test did not set the property."""
    return (hint and binary not in STOCK_BINARIES
            and "free-page-hint-keep-writes" not in device_props)


def machine_for(binary):
    """The machine type a VM of `binary` uses: the one `pc` stands for in
    that binary (pc-i440fx-10.0, ...)."""
    if binary not in _MACHINES:
        out = subprocess.run([binary, "-machine", "help"], text=True,
                             capture_output=True, check=True).stdout
        m = re.search(r"^pc\s.*\(alias of (pc-i440fx-[0-9.]+)\)", out, re.M)
        if not m:
            raise RuntimeError(f"{binary}: no pc machine alias in -machine help")
        _MACHINES[binary] = m.group(1)
    return _MACHINES[binary]


# migrate_once(dst_args=...) for a destination whose RAM is resident before
# the load: it no longer waits for page faults (benchmarks.md, "Where the
# time goes").
PREALLOC_DST = ("-mem-prealloc",)

# Anything the destination kernel prints that means its memory is not what
# the source's was.  A single match fails a migration test.
KERNEL_ERROR_RE = re.compile(
    r"(BUG:|kernel BUG|Oops|list_del corruption|list_add corruption|"
    r"Kernel panic|general protection fault|WARNING: CPU|Bad page state|"
    r"Bad page map|unable to handle|Unable to handle|slab.*corrupt|"
    r"double fault|invalid opcode:|stack-protector|Corrupted low memory)")

# What QEMU prints on stderr when a device or QEMU itself went wrong: any
# error_report() line ("qemu-system-x86_64: ...", virtio_error() among
# them; not warnings), a virtio ring error, an assertion, a crash, an
# ASan/UBSan report.  A single match fails a migration test; tests that
# provoke one on purpose say which lines they expect (VM.allow_errors).
QEMU_ERROR_RE = re.compile(
    r"(^qemu-system-[^:\s]+: (?!warning: |terminating on signal)|"
    r"virtio: |Assertion|Segmentation|core dumped|"
    r"ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer|"
    r"SUMMARY: \w+Sanitizer)")
# What a QEMU prints when its migration was cancelled, failed, or lost its
# peer: expected on both ends of a migration a test breaks on purpose.
MIGRATION_FAULT_RE = (r"migration|[Ss]ocket|Broken pipe|Connection reset|"
                      r"Input/output error|load of migration failed|"
                      r"Unable to write|Failed to load|error while loading "
                      r"state|Early end of file|[Ss]ection|savevm|loadvm|"
                      r"vmstate|failed to save SaveStateEntry")
SANITIZER_RE = re.compile(r"(ERROR: AddressSanitizer|runtime error:|"
                          r"ERROR: LeakSanitizer|SUMMARY: \w+Sanitizer)")

# What the test guest's /init prints when its own setup went wrong (a
# module that did not load): the boot fails.
GUEST_ERROR_RE = re.compile(r"HB ERROR")

_LIVE = set()

# Seconds a QMP command may go unanswered before VM.qmp() raises
# TimeoutError (a hung or stopped QEMU); HB_QMP_TIMEOUT overrides it, a
# call's qmp_timeout= too.
QMP_TIMEOUT_S = float(os.environ.get("HB_QMP_TIMEOUT", "60"))


def live_vms():
    """The QEMUs this process started that have not ended yet."""
    return list(_LIVE)


def kill_all():
    """Kill every QEMU this process started and has not ended yet."""
    for vm in list(_LIVE):
        vm.kill()


def _on_signal(signum, _frame):
    kill_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(kill_all)
for _s in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(_s, _on_signal)


def log(msg):
    print(f"[harness {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr,
          flush=True)


class GuestError(Exception):
    """The guest did not answer as expected."""


class SetupError(GuestError):
    """A step of the scenario's workload setup failed in the guest
    (prepare_guest(): an hbwork that failed or wrote less than asked, a
    helper that is not running): the test's or the harness's side, not
    the migration's.  migrate_once() keeps it in res["error"] like any
    GuestError; testlib.record_reference() fails on it."""


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


# The /proc/PID/smaps fields VM.ram_mapping() keeps, and its names for them.
_SMAPS_KEYS = {"Size:": "size_kb", "Rss:": "rss_kb",
               "AnonHugePages:": "anon_huge_kb"}


class GuestOutput:
    """What a guest's QEMU leaves to read: the guest's console (file
    self.console) and QEMU's output (file self.log_path()), and the error
    lines in them.  Shared by VM and hb.libvirt.Domain."""

    console = None

    def log_path(self):
        raise NotImplementedError

    def exited(self):
        """Why the QEMU is gone (a sentence), or None while it runs."""
        raise NotImplementedError

    def _dead(self):
        """Why waiting for the guest is pointless, or None: its QEMU is
        gone, or its console shows a kernel error (which fails the run
        anyway: do not wait for a guest that may be hung behind it)."""
        why = self.exited()
        if why:
            return why
        errs = self.kernel_errors()
        if errs:
            return f"kernel error on console: {errs[0][:120]}"
        return None

    def console_text(self):
        try:
            with open(self.console, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def kernel_errors(self):
        return [ln for ln in self.console_text().splitlines()
                if KERNEL_ERROR_RE.search(ln)]

    def guest_errors(self):
        return [ln for ln in self.console_text().splitlines()
                if GUEST_ERROR_RE.search(ln)]

    def log_text(self):
        """What QEMU printed so far (stdout and stderr); "" if nothing."""
        try:
            with open(self.log_path(), errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class VM(GuestOutput):
    """One QEMU process: a QEMUMachine plus the project's guest plumbing."""

    def __init__(self, workdir, name, binary, mem_mib, balloon, hint,
                 incoming=None, kernel=None, initrd=None, balloon_args="",
                 device_props="", extra_args=(), smp=2, kernel_args="",
                 machine=None, keep_writes=None, defaults=False):
        self.name = name
        self.workdir = workdir
        self.console = os.path.join(workdir, f"{name}-console.log")
        self.cmdsock = os.path.join(workdir, f"{name}-cmd.sock")
        self.binary = binary
        kernel = kernel or guest_kernel()
        initrd = initrd or os.environ.get("HB_INITRD") or guest_initrd()
        append = (f"console=ttyS0 loglevel=5 panic=0 hb.balloon={balloon}")
        if balloon_args:
            append += f" hb.balloon_args={balloon_args.replace(' ', ',')}"
        if kernel_args:
            append += " " + kernel_args
        # defaults=True: the machine's default devices (a NIC on user
        # networking among them), as a plain command line gets them.
        args = ["-accel", "tcg", *(() if defaults else ("-nodefaults",)),
                "-no-user-config",
                "-name", f"{name},debug-threads=on",
                "-smp", str(smp), "-m", str(mem_mib),
                "-kernel", kernel, "-initrd", initrd, "-append", append,
                "-serial", f"file:{self.console}",
                "-chardev", f"socket,id=hbcmd,path={self.cmdsock},"
                            "server=on,wait=off",
                "-serial", "chardev:hbcmd",
                "-object", "iothread,id=hbio"]
        dev = "virtio-balloon-pci,id=balloon0"
        if hint:
            dev += ",free-page-hint=on,iothread=hbio"
        if device_props:
            dev += "," + device_props
        if keep_writes is None:
            keep_writes = fleet_opted_in(binary, hint, device_props)
        if keep_writes:
            dev += "," + KEEP_WRITES_OPT_IN
        args += ["-device", dev]
        self.incoming = incoming
        if incoming:
            args += ["-incoming", incoming]
        trace = os.environ.get("HB_TRACE")
        if trace and binary != STOCK_QEMU:
            # HB_TRACE=pattern[,pattern...]: QEMU trace events to the VM's
            # log, with timestamps (debugging only).
            for pat in trace.split(","):
                args += ["-trace", pat]
            args += ["-msg", "timestamp=on"]
        args += list(extra_args)
        self.machine = QEMUMachine(
            binary, args=args, name=name, base_temp_dir=workdir,
            wrapper=module_wrapper(binary) + [
                "setpriv", "--pdeathsig", "KILL", "--"],
            log_dir=workdir)
        self.machine.set_machine(machine or machine_for(binary))
        self.guest = Guest(self.cmdsock, self._dead)
        # stderr lines this VM is expected to print (regexes)
        self.allow_errors = []
        self.relaunched = False

    def launch(self):
        self.machine.launch()
        _LIVE.add(self)

    def qmp(self, cmd, qmp_timeout=None, **kwargs):
        """QMP command `cmd`; TimeoutError if QEMU does not answer within
        qmp_timeout seconds (default QMP_TIMEOUT_S)."""
        conn = getattr(self.machine, "_qmp_connection", None)
        if conn is not None and hasattr(conn, "settimeout"):
            conn.settimeout(QMP_TIMEOUT_S if qmp_timeout is None
                            else qmp_timeout)
        return self.machine.cmd(cmd, **kwargs) if hasattr(
            self.machine, "cmd") else self.machine.command(cmd, **kwargs)


    def wait_console(self, pattern, timeout=180):
        deadline = time.time() + timeout
        rx = re.compile(pattern)
        while time.time() < deadline:
            m = rx.search(self.console_text())
            if m:
                return m
            if not self.machine.is_running():
                raise GuestError(f"{self.name}: QEMU exited "
                                 f"({self.machine.exitcode()}); its "
                                 f"stderr ends: {self.log_tail()!r}; "
                                 f"console ends: "
                                 f"{self.console_text()[-1500:]!r}")
            time.sleep(0.2)
        raise GuestError(f"{self.name}: '{pattern}' not on console after "
                         f"{timeout}s")

    def boot(self, timeout=180):
        """Launch, wait for the guest's command loop; a guest whose /init
        reported an error (HB ERROR: a module that did not load) fails.

        A stock QEMU (the reference binary of a stack) that kills itself
        with a signal before the guest is up is recorded in STOCK_CRASHES,
        its console and output kept next to the new ones as *.crashed, and
        launched once more.  Our QEMU is never launched again."""
        self.launch()
        try:
            self.wait_console(r"HB READY", timeout)
        except GuestError:
            code = self.machine.exitcode()
            if (self.binary not in STOCK_BINARIES or code is None
                    or code >= 0 or self.relaunched):
                raise
            self._keep_crash(code)
            self.launch()
            self.wait_console(r"HB READY", timeout)
        errs = self.guest_errors()
        if errs:
            raise GuestError(f"{self.name}: guest setup failed: {errs}")
        self.guest.connect()

    def _keep_crash(self, code):
        """Record a stock QEMU that died by signal -code, keep what it
        left, and end it for a new launch."""
        out = self.log_tail()
        STOCK_CRASHES.append({"binary": self.binary, "signal": -code,
                              "output": out})
        log(f"{self.name}: stock QEMU {self.binary} died by signal {-code} "
            f"before the guest was up; launching it again.  It printed: "
            f"{out[-600:]!r}")
        self.kill()
        for path in (self.console, self.log_path()):
            if os.path.exists(path):
                os.replace(path, path + ".crashed")
        self.relaunched = True

    def log_path(self):
        """QEMU's stdout/stderr (QEMUMachine's log in the work directory)."""
        return os.path.join(self.workdir, f"{self.name}.log")

    def log_tail(self, n=2000):
        """The last n characters QEMU printed."""
        return self.log_text()[-n:]

    def qemu_errors(self, allow=()):
        """Lines of QEMU's stderr that report an error (QEMU_ERROR_RE),
        except those matching one of the `allow` patterns or of
        self.allow_errors."""
        lines = [ln.rstrip() for ln in self.log_text().splitlines()]
        allow = list(allow) + self.allow_errors
        return [ln for ln in lines if QEMU_ERROR_RE.search(ln)
                and not any(re.search(a, ln) for a in allow)]

    def exited(self):
        if not self.machine.is_running():
            return f"QEMU exited ({self.machine.exitcode()})"
        return None


    def kill(self):
        self.guest.close()
        try:
            if self.machine.is_running():
                self.machine.kill()
            self.machine.shutdown(hard=True)
        except Exception:  # pylint: disable=broad-except
            pass
        _LIVE.discard(self)

    def shutdown(self):
        self.guest.close()
        try:
            self.machine.shutdown(timeout=10)
        except Exception:  # pylint: disable=broad-except
            self.kill()
        _LIVE.discard(self)

    def ram_mapping(self, mem_mib):
        """The host mapping behind guest RAM, from /proc/PID/smaps: the
        anonymous mapping of at least mem_mib.  Returns {"size_kb",
        "rss_kb", "anon_huge_kb", "flags"} or None, also when the
        process is gone: it never raises."""
        best, cur = None, None
        try:
            with open(f"/proc/{self.machine.get_pid()}/smaps") as f:
                lines = f.read().splitlines()
        except (OSError, TypeError):
            return None
        for line in lines:
            head = line.split()
            if not head:
                continue
            if "-" in head[0] and not head[0].endswith(":"):
                cur = {"anon": len(head) < 6}
            elif cur is None:
                continue
            elif head[0] in _SMAPS_KEYS:
                cur[_SMAPS_KEYS[head[0]]] = int(head[1])
            elif head[0] == "VmFlags:":
                cur["flags"] = head[1:]
                if (cur["anon"] and cur.get("size_kb", 0) >= mem_mib << 10
                        and (best is None
                             or cur["size_kb"] > best["size_kb"])):
                    best = cur
        if best:
            best.pop("anon")
        return best


def guest_kver(series=None):
    """The guest kernel version: of `series` ("6.1", "6.12"), else of the
    HB_GUEST environment variable, else $KVER (as `make ... KVER=` passes
    it down), else the guest kernel of the stack."""
    series = series or os.environ.get("HB_GUEST") or ""
    if not series and os.environ.get("KVER"):
        return os.environ["KVER"]
    series = series or STACKS[STACK]["guest"]
    return subprocess.check_output(
        [os.path.join(TOP, "scripts", "guest-kver.sh")] +
        ([series] if series else []), text=True).strip()


def guest_kernel(series=None):
    return f"/boot/vmlinuz-{guest_kver(series)}"


def guest_initrd(series=None):
    """The test image of that kernel (`make images` builds both)."""
    return os.path.join(BUILD, f"initramfs-{guest_kver(series)}.cpio.gz")


def balloon_stats(vm):
    """Our guest driver's hint counters (empty for the in-tree driver):
    the sysfs files, and debugfs blocks_by_order as "order:blocks,..."."""
    # one process for all files (a fork per file costs under TCG): grep
    # prints each line as PATH:VALUE; a file that is not there (debugfs of
    # the in-tree driver) only makes grep's status 2
    _, out = vm.guest.run(
        "grep -sH . /sys/bus/virtio/devices/*/free_page_hint/* "
        "/sys/kernel/debug/virtio_balloon/*/blocks_by_order", check=False)
    res, by_order = {}, []
    for line in out:
        if ":" not in line or not line.startswith("/sys/"):
            continue
        path, v = line.split(":", 1)
        k, v = path.rsplit("/", 1)[-1], v.strip()
        if k == "blocks_by_order":
            by_order.append(v.replace(" ", ":"))
            continue
        try:
            res[k] = int(v)
        except ValueError:
            res[k] = v
    if res and by_order:
        res["blocks_by_order"] = ",".join(by_order)
    return res


def write_sysfs(vm, path, value):
    """Write `value` byte-exact to a guest file in exactly one write(2),
    also when it is empty (`hbwork write`).  Returns (rc, value before,
    value after, the error text of write's errno or "")."""
    hexval = value.encode().hex()
    _, out = vm.guest.run(
        f"b=$(cat {path}); w=$(hbwork write {path} {hexval}); r=$?; "
        f"echo \"R $r|$b|$(cat {path})|$w\"", check=False)
    line = next(x for x in out if x.startswith("R "))
    r, before, after, w = line[2:].split("|", 3)
    err = parse_kv(w).get("errno", 0) if w.startswith("HBWORK ") else None
    assert err is not None, f"hbwork write printed no result: {line}"
    return int(r), before, after, os.strerror(err) if err else ""


def balloon_features(vm):
    """The balloon's negotiated feature bits, as the guest's sysfs shows
    them (a string of '0'/'1', bit 0 first)."""
    _, out = vm.guest.run("for d in /sys/bus/virtio/devices/*; do "
                          "[ $(cat $d/device) = 0x0005 ] && cat $d/features;"
                          " done")
    return out[0].strip()


# Precopy bandwidth of a postcopy scenario: slow enough that the switch to
# postcopy comes while most of RAM is still unsent.
POSTCOPY_PRECOPY_BW = 4 << 20

WORKLOADS = ("fresh", "stale", "frag", "churn", "cache")

# The data-loss scenarios (tests/test_30_dataloss.py, scripts/soak.py):
# stale free memory at normal speed, a throttled start (time to hint before
# the bulk stage), memory churn during the migration ...
DATALOSS_SCENARIOS = {
    "normal": dict(workload="stale"),
    "throttled": dict(workload="stale", throttle_start_s=2.0),
    "churn": dict(workload="churn"),
}
# ... with these guest drivers: name -> (balloon, balloon_args)
DATALOSS_DRIVERS = {
    "intree": ("intree", ""),
    "ours": ("ours", ""),                       # scan mode, the default
    "ours_alloc": ("ours", "hint_mode=alloc"),  # alloc mode
}


# ... and the hint mode each must run its rounds in on our QEMU (None: the
# in-tree driver, which has no mode).
DATALOSS_MODES = {"intree": None, "ours": "scan", "ours_alloc": "alloc"}


# QEMU's default downtime-limit, set explicitly so that every run says so.
DOWNTIME_LIMIT_MS = 300


class Scenario:
    """What runs in the guest before, during and after a migration."""

    def __init__(self, workload="stale", mem_mib=1024, keep_mib=24,
                 hold_mib=16, stale_pct=75, churn_rate=64, settle=1.0,
                 throttle_start_s=0.0, seed=None, ticker=True,
                 postcopy_after_s=0.0, downtime_limit_ms=DOWNTIME_LIMIT_MS,
                 smp=2, churn_procs=1, hops=1):
        assert workload in WORKLOADS, workload
        self.workload = workload
        self.mem_mib = mem_mib
        self.keep_mib = keep_mib
        self.hold_mib = hold_mib
        self.stale_pct = stale_pct
        self.churn_rate = churn_rate
        self.settle = settle
        self.throttle_start_s = throttle_start_s
        self.ticker = ticker
        # > 0: postcopy-ram on both sides, precopy at POSTCOPY_PRECOPY_BW,
        # migrate-start-postcopy this many seconds after `migrate`.
        self.postcopy_after_s = postcopy_after_s
        # migrate-set-parameters downtime-limit for this migration.
        self.downtime_limit_ms = downtime_limit_ms
        # vCPUs of the guest, and how many churn processes run (one per
        # vCPU writes on every vCPU: the guest's scheduler spreads them)
        self.smp = smp
        self.churn_procs = churn_procs
        # migrations in a row (A -> B -> C is 2), the data verified at the
        # last destination
        self.hops = hops
        self.seed = seed if seed is not None else int(time.time()) & 0xffffff


def setup_work(g, args, **expect):
    """Run `hbwork ARGS` as a step of a workload's setup and return its
    result fields.  SetupError, naming the step and what hbwork printed,
    unless it exited 0 with the result line of its own verb and every
    field of `expect` (mib=N: the amount asked for) has that value."""
    try:
        out = g.hbwork(args)
    except GuestError as exc:
        if not str(exc).startswith("no HBWORK line"):
            raise               # the guest or its QEMU, not the step
        raise SetupError(f"workload setup failed: 'hbwork {args}' ended "
                         f"without its result line (killed?): {exc}") \
            from exc
    verb = args.split()[0]
    wrong = {k: out.get(k) for k, v in expect.items() if out.get(k) != v}
    if out.get("rc") != 0 or out.get("verb") != verb or wrong:
        raise SetupError(f"workload setup failed: 'hbwork {args}' "
                         f"(expected rc=0 verb={verb}"
                         + "".join(f" {k}={v}" for k, v in expect.items())
                         + f"): {out}")
    return out


def prepare_guest(vm, sc, res):
    """The scenario's workload in vm's guest.  Every step is checked (its
    exit status, the amount it wrote, the background helpers running): a
    setup that failed raises SetupError rather than migrating a guest that
    holds less than the test thinks.  res["stale_mib"]: the stale data
    the setup freed, from what hbwork reported it wrote (the hints are
    measured against it, testlib.assert_hinted)."""
    g = vm.guest
    stale = sc.mem_mib * sc.stale_pct // 100
    res["stale_mib"] = 0
    if sc.workload in ("stale", "churn") and stale:
        # As a user's guest gets it: page cache full of data, then deleted.
        res["fill"] = setup_work(g, f"stale /data/stale {stale} {sc.seed}",
                                 mib=stale)
        g.run("rm /data/stale")
        res["stale_mib"] = res["fill"]["mib"]
    elif sc.workload == "frag":
        # Half of a tmpfs file of stale data stays resident, with every
        # other 256 KiB punched out: much of the free memory is in holes
        # far smaller than a 4 MiB block (orders 0-5, see buddyinfo).
        res["fill"] = setup_work(g, f"fill {stale // 3} {sc.seed}",
                                 mib=stale // 3)
        res["frag"] = setup_work(g, f"frag /data/frag {stale // 2} 256",
                                 mib=stale // 2, hole_kb=256)
        if not res["frag"].get("holes"):
            raise SetupError(f"workload setup failed: frag punched no "
                             f"hole: {res['frag']}")
        _, res["buddyinfo"] = g.run("cat /proc/buddyinfo")
        res["stale_mib"] = (res["fill"]["mib"] + res["frag"]["holes"] *
                            res["frag"]["hole_kb"] // 1024)
    elif sc.workload == "cache":
        # Clean page cache: a tmpfs file is not reclaimable, so use the
        # initramfs' own files read many times plus anonymous stale data.
        res["fill"] = setup_work(g, f"fill {stale // 2} {sc.seed}",
                                 mib=stale // 2)
        res["stale_mib"] = res["fill"]["mib"]
    res["keep"] = setup_work(g, f"keep /data/keep {sc.keep_mib} {sc.seed}",
                             mib=sc.keep_mib, seed=sc.seed)
    g.run(f"hbwork hold {sc.hold_mib} {sc.seed + 1} /tmp/hold.state "
          "> /tmp/hold.out 2>&1 &")
    deadline = time.time() + 60
    while True:
        _, out = g.run("cat /tmp/hold.state 2>/dev/null", check=False)
        if out and out[0].startswith("HBWORK hold"):
            res["hold"] = parse_kv(out[0])
            break
        _, err = g.run("cat /tmp/hold.out", check=False)
        if time.time() > deadline or any(x.startswith("HBWORK error")
                                         for x in err):
            raise SetupError(f"workload setup failed: the hold daemon "
                             f"(hbwork hold {sc.hold_mib}) did not start: "
                             f"{err}")
        time.sleep(0.2)
    h = res["hold"]
    if h.get("mib") != sc.hold_mib or not h.get("pid") or "sum" not in h:
        raise SetupError(f"workload setup failed: the hold daemon holds "
                         f"other than {sc.hold_mib} MiB: {h}")
    if sc.workload == "churn":
        start_churn(g, sc)
    if sc.ticker:
        start_ticker(g, sc)
    res["meminfo_before"] = setup_work(g, "meminfo")
    time.sleep(sc.settle)


# Guest shell: the PIDs of running `hbwork VERB` processes (busybox-static
# has no pkill/pgrep -f).
HBWORK_PIDS = ("for p in $(pidof hbwork); do "
                "tr '\\0' ' ' < /proc/$p/cmdline | grep -q '^[^ ]*hbwork {verb} ' "
                "&& echo $p; done")


def wait_guest(g, cmd, what, timeout=60):
    """Run `cmd` in the guest until it exits 0; GuestError after timeout."""
    deadline = time.time() + timeout
    while True:
        rc, out = g.run(cmd, check=False)
        if rc == 0:
            return out
        if time.time() > deadline:
            raise GuestError(f"{what}: not after {timeout}s ({out})")
        time.sleep(0.2)


def _churn_out(i):
    return "/tmp/churn.out" if i == 0 else f"/tmp/churn.{i}.out"


def start_churn(g, sc):
    """Memory churn in the guest until stop_churn(): sc.churn_procs
    processes, each at sc.churn_rate MiB/s."""
    for i in range(sc.churn_procs):
        g.run(f"hbwork churn {sc.churn_rate} 0 64 > {_churn_out(i)} 2>&1 &")
    running = f"$({HBWORK_PIDS.format(verb='churn')} | wc -l)"
    try:
        wait_guest(g, f"test {running} -ge {sc.churn_procs}",
                   "hbwork churn not running", timeout=30)
    except GuestError as exc:
        outs = " ".join(_churn_out(i) for i in range(sc.churn_procs))
        _, out = g.run(f"cat {outs}", check=False)
        raise SetupError(f"workload setup failed: {sc.churn_procs} hbwork "
                         f"churn process(es) not running ({exc}); they "
                         f"printed: {out}") from exc


def start_ticker(g, sc):
    """A live guest: re-check the kept data every 2 s until stop_ticker().
    Each pass allocates and frees memory."""
    g.run(": > /tmp/ticker.out; while :; do hbwork verify /data/keep "
          f"{sc.keep_mib} {sc.seed} >> /tmp/ticker.out; sleep 2; done "
          "> /dev/null 2>&1 & echo $! > /tmp/ticker.pid")
    rc, out = g.run("kill -0 $(cat /tmp/ticker.pid)", check=False)
    if rc != 0:
        raise SetupError(f"workload setup failed: the ticker is not "
                         f"running: {out}")


def stop_churn(g, procs=1):
    """Stop the `hbwork churn` processes (started by start_churn): SIGTERM,
    then wait for them to exit and their result lines to be written.
    Returns their combined result fields (None if one printed none: ok=1
    only if every one was ok, bytes and bad pages summed) and their
    HBBADPAGE lines."""
    g.run(f"for p in $({HBWORK_PIDS.format(verb='churn')}); do "
          "kill -TERM $p; done", check=False)
    wait_guest(g, f"test -z \"$({HBWORK_PIDS.format(verb='churn')})\"",
               "hbwork churn did not exit on SIGTERM")
    churn, bad = {}, []
    for i in range(procs):
        _, out = g.run(f"cat {_churn_out(i)}", check=False)
        one = next((parse_kv(x) for x in out if x.startswith("HBWORK")),
                   None)
        bad += [x for x in out if x.startswith("HBBADPAGE")]
        if one is None:
            return None, bad
        for k, v in one.items():
            if k == "ok":
                churn["ok"] = min(churn.get("ok", 1), v)
            elif k in ("mib_written", "verified_bytes", "bad_pages"):
                churn[k] = churn.get(k, 0) + v
            else:
                churn.setdefault(k, v)
    churn["procs"] = procs
    return churn, bad


def stop_ticker(g):
    """Stop the ticker (the loop that re-verifies the kept data every 2 s)
    and wait for its last pass to end.  Returns {"passes", "bad"}: how many
    passes ran (before and after the migration) and the result lines of
    those that found the data damaged."""
    g.run("kill $(cat /tmp/ticker.pid); rm -f /tmp/ticker.pid", check=False)
    wait_guest(g, f"test -z \"$({HBWORK_PIDS.format(verb='verify')})\"",
               "the ticker's last pass did not end")
    _, out = g.run("cat /tmp/ticker.out", check=False)
    lines = [x for x in out if x.startswith("HBWORK")]
    bad = [x for x in out if not x.startswith("HBWORK verify ")
           or parse_kv(x).get("ok") != 1]
    return {"passes": len(lines), "bad": bad[:20]}


def verify_guest(vm, sc, res):
    """Verify on the destination; fill res['verify'] and return ok."""
    g = vm.guest
    v = {"bytes_verified": 0}
    ok = True
    if sc.ticker:
        v["ticker"] = stop_ticker(g)
        if v["ticker"]["bad"]:
            ok = False
    if sc.workload == "churn":
        churn, bad = stop_churn(g, sc.churn_procs)
        v["churn"] = churn
        if bad:
            v["churn_bad_pages"] = bad
        if not churn or churn.get("ok") != 1:
            ok = False
        else:
            v["bytes_verified"] += churn.get("verified_bytes", 0)
    ver = g.hbwork(f"verify /data/keep {sc.keep_mib} {sc.seed}")
    v["keep"] = ver
    if ver.get("ok") != 1 or ver.get("sum") != res["keep"].get("sum"):
        ok = False
    else:
        v["bytes_verified"] += sc.keep_mib << 20
    pid = res["hold"]["pid"]
    g.run(f"rm -f /tmp/hold.state; kill -USR1 {pid}")
    hold = None
    deadline = time.time() + 60
    while time.time() < deadline:
        _, out = g.run("cat /tmp/hold.state 2>/dev/null", check=False)
        if out and out[0].startswith("HBWORK holdcheck"):
            hold = parse_kv(out[0])
            break
        time.sleep(0.2)
    v["hold"] = hold
    _, hold_out = g.run("cat /tmp/hold.out", check=False)
    v["hold_bad_pages"] = [x for x in hold_out if x.startswith("HBBADPAGE")]
    if not hold or hold.get("ok") != 1 or hold.get("sum") != res["hold"]["sum"]:
        ok = False
    else:
        v["bytes_verified"] += sc.hold_mib << 20
    # Walk the page allocator's free lists: corruption that the checksums
    # above cannot see (struct page lists, slab) shows up here.
    v["exercise"] = g.hbwork("pressure 50", timeout=300)
    if v["exercise"].get("ok") != 1:
        ok = False
    _, dmesg = g.run("dmesg", check=False)
    v["dmesg_errors"] = [ln for ln in dmesg if KERNEL_ERROR_RE.search(ln)]
    res["verify"] = v
    return ok


def start_migration(src, dst, bw, downtime_limit_ms, postcopy=False,
                    extra_caps=(), multifd_channels=0, uri=None,
                    listen=None):
    """Turn on migration events (and postcopy-ram, and the capabilities
    named in extra_caps) at both ends, set the source's bandwidth and
    downtime limit, and migrate to dst's -incoming.  multifd_channels > 0:
    multifd with that many channels at both ends (zero pages are then
    found by the multifd threads, QEMU's default zero-page-detection);
    multifd must be set before the destination listens, so dst is then
    started with `-incoming defer` and told to listen on `listen` here.
    uri: migrate there instead (a `file:` migration, with dst started
    with `-incoming defer` to load it later)."""
    caps = [{"capability": "events", "state": True}]
    if postcopy:
        caps.append({"capability": "postcopy-ram", "state": True})
    if multifd_channels:
        caps.append({"capability": "multifd", "state": True})
    caps += [{"capability": c, "state": True} for c in extra_caps]
    for vm in (src, dst):
        vm.qmp("migrate-set-capabilities", capabilities=caps)
        if multifd_channels:
            vm.qmp("migrate-set-parameters",
                   **{"multifd-channels": multifd_channels})
    src.qmp("migrate-set-parameters", **{
        "max-bandwidth": bw, "downtime-limit": downtime_limit_ms})
    if listen:
        dst.qmp("migrate-incoming", uri=listen)
    src.qmp("migrate", uri=uri or listen or dst.incoming)


def wait_running(vm, timeout=60):
    """Wait until vm runs (a destination resumes once its stream ends)."""
    deadline = time.time() + timeout
    while vm.qmp("query-status").get("status") != "running":
        if time.time() > deadline:
            raise GuestError(f"{vm.name} did not start running")
        time.sleep(0.1)


def wait_migration(src, timeout, on_tick=None):
    """Poll query-migrate until the migration completes, fails or is
    cancelled, and return its final figures; cancel it after timeout s."""
    deadline = time.time() + timeout
    settle = 0
    while True:
        info = src.qmp("query-migrate")
        st = info.get("status")
        if st == "completed" and not info.get("total-time") and settle < 40:
            # Older QEMUs set status=completed before they compute
            # total-time and downtime: re-read.
            settle += 1
            time.sleep(0.05)
            continue
        if st in ("completed", "failed", "cancelled"):
            return info
        if on_tick:
            on_tick(info)
        if time.time() > deadline:
            src.qmp("migrate_cancel")
            raise GuestError(f"migration not done after {timeout}s: {info}")
        time.sleep(0.05)


def migrate_once(src_bin=None, dst_bin=None, balloon="intree",
                 hint=False, scenario=None, workdir=None, balloon_args="",
                 device_props="", timeout=600, keep_dirs=False,
                 on_source_ready=None, on_destination=None, dst_args=(),
                 on_verified=None, vm_args=(), machine=None,
                 keep_writes=None, before_migrate=None, multifd_channels=0,
                 to_file=False):
    """Boot a source guest, prepare it, migrate it, verify it on the
    destination.  Returns a JSON-able dict; never leaves a QEMU behind.
    dst_args: extra QEMU arguments for the destination only; vm_args: for
    both sides (e.g. a NUMA memory layout); machine: the machine type of
    both sides (default: the one `pc` stands for); keep_writes: VM's (None:
    opted in on our QEMU, False: the device default).  Hooks, each called as
    hook(vm, res): on_source_ready before the migration starts,
    on_destination once the destination runs, on_verified after the guest
    data was verified there (before the consoles are read); and
    before_migrate(src, dst, res) right before the migration starts, the
    destination already waiting.  A hook's AssertionError (a failed check
    of the test's) propagates to the caller once every VM is ended, with
    the record as the exception's `res`; any other exception is kept in
    res["error"].  multifd_channels: start_migration()'s.
    to_file: save the guest to a file in the work folder with mapped-ram
    instead, end the source, load the file into a destination started
    with `-incoming defer` and verify it there (load_snapshot(): figures
    in res["snapshot"]); the file is removed at the end."""
    sc = scenario or Scenario()
    src_bin = src_bin or STOCK_QEMU
    dst_bin = dst_bin or src_bin
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="hb-mig-",
                                          dir=os.path.join(BUILD, "tmp")
                                          if os.path.isdir(
                                              os.path.join(BUILD, "tmp"))
                                          else None)
    mig_sock = os.path.join(workdir, "mig.sock")
    res = {"config": {"src": src_bin, "dst": dst_bin, "balloon": balloon,
                      "hint": hint, "workload": sc.workload,
                      "mem_mib": sc.mem_mib, "seed": sc.seed,
                      "smp": sc.smp, "churn_procs": sc.churn_procs,
                      "hops": sc.hops,
                      "throttle_start_s": sc.throttle_start_s,
                      "downtime_limit_ms": sc.downtime_limit_ms,
                      "device_props": device_props,
                      "balloon_args": balloon_args,
                      "dst_args": list(dst_args),
                      "vm_args": list(vm_args)},
           "ok": False, "data_intact": None, "kernel_errors": [],
           "workdir": workdir}
    common = dict(mem_mib=sc.mem_mib, balloon=balloon, hint=hint,
                  balloon_args=balloon_args, device_props=device_props,
                  smp=sc.smp, machine=machine, keep_writes=keep_writes)
    src = VM(workdir, "src", src_bin, extra_args=tuple(vm_args), **common)
    snap = os.path.join(workdir, "snapshot.ram") if to_file else None
    deferred = bool(to_file or multifd_channels)
    dst = VM(workdir, "dst", dst_bin,
             incoming="defer" if deferred else f"unix:{mig_sock}",
             extra_args=tuple(vm_args) + tuple(dst_args), **common)
    vms = [src, dst]
    try:
        t0 = time.time()
        src.boot()
        res["boot_s"] = round(time.time() - t0, 1)
        prepare_guest(src, sc, res)
        hint_before = balloon_stats(src) if balloon == "ours" else {}
        if on_source_ready:
            on_source_ready(src, res)
        dst.launch()
        bw_full = 10 << 30
        bw = 1 << 20 if sc.throttle_start_s else bw_full
        if sc.postcopy_after_s:
            bw = POSTCOPY_PRECOPY_BW
        if before_migrate:
            before_migrate(src, dst, res)
        sampler = CpuSampler(src.machine.get_pid())
        dst_sampler = CpuSampler(dst.machine.get_pid())
        host_cpu = HostCpu()
        sampler.start()
        dst_sampler.start()
        t_mig = time.time()
        start_migration(src, dst, bw, sc.downtime_limit_ms,
                        postcopy=bool(sc.postcopy_after_s),
                        multifd_channels=multifd_channels,
                        extra_caps=("mapped-ram",) if snap else (),
                        uri=f"file:{snap}" if snap else None,
                        listen=f"unix:{mig_sock}"
                        if deferred and not snap else None)
        throttled = [bool(sc.throttle_start_s)]
        res["states"] = []

        def tick(info):
            if info.get("status") not in res["states"]:
                res["states"].append(info.get("status"))
            if throttled[0] and time.time() - t_mig >= sc.throttle_start_s:
                src.qmp("migrate-set-parameters",
                        **{"max-bandwidth": bw_full})
                throttled[0] = False
            if (sc.postcopy_after_s and info.get("status") == "active"
                    and "postcopy" not in res
                    and time.time() - t_mig >= sc.postcopy_after_s):
                res["postcopy"] = round(time.time() - t_mig, 2)
                src.qmp("migrate-start-postcopy")
        info = wait_migration(src, timeout, tick)
        # how long the host waited for the final figures, from its side
        res["host_wait_ms"] = round((time.time() - t_mig) * 1000)
        # source QEMU threads' CPU time during the migration
        res["cpu_s"] = sampler.finish()
        # ... the destination QEMU's, and the whole host's: with the host's
        # CPUs all busy, the destination gets what the source leaves
        res["cpu_dst_s"] = dst_sampler.finish()
        res["host_cpu_s"] = host_cpu.finish()
        res["migration"] = info
        res["status"] = info.get("status")
        ram = info.get("ram", {})
        res["transferred_mb"] = round(ram.get("transferred", 0) / 1e6, 1)
        res["total_ms"] = info.get("total-time")
        res["downtime_ms"] = info.get("downtime")
        res["device_src"] = device_counters(src)
        if res["status"] != "completed":
            res["error"] = info.get("error-desc", res["status"])
            return res
        if snap:
            load_snapshot(src, dst, snap, res, timeout)
        wait_running(dst)
        res["dst_status"] = "running"
        # How much guest RAM the load touched on the destination, and how
        # much of it the host backs with transparent huge pages.
        res["dst_ram"] = dst.ram_mapping(sc.mem_mib)
        src.kill()
        res["hops"] = []
        for hop in range(2, sc.hops + 1):
            # the destination becomes the source of the next hop
            nxt = VM(workdir, f"dst{hop}", dst_bin,
                     incoming=f"unix:{workdir}/mig{hop}.sock",
                     extra_args=tuple(dst_args), **common)
            vms.append(nxt)
            nxt.launch()
            start_migration(dst, nxt, bw_full, sc.downtime_limit_ms)
            info = wait_migration(dst, timeout)
            ram = info.get("ram", {})
            res["hops"].append({
                "status": info.get("status"),
                "transferred_mb": round(ram.get("transferred", 0) / 1e6, 1),
                "total_ms": info.get("total-time"),
                "downtime_ms": info.get("downtime"),
                "device_src": device_counters(dst)})
            if info.get("status") != "completed":
                res["status"] = info.get("status")
                res["error"] = (f"hop {hop}: "
                                f"{info.get('error-desc', info.get('status'))}")
                return res
            wait_running(nxt)
            dst.kill()
            dst = nxt
        dst.guest.connect()
        if on_destination:
            on_destination(dst, res)
        if balloon == "ours":
            after = balloon_stats(dst)
            res["guest_hint"] = after
            res["guest_hint_before"] = hint_before
        res["data_intact"] = verify_guest(dst, sc, res)
        if on_verified:
            on_verified(dst, res)
        res["balloon_query"] = dst.qmp("query-balloon")
        res["kernel_errors"] = (dst.kernel_errors() +
                                res["verify"].get("dmesg_errors", []))
        res["ok"] = bool(res["data_intact"] and not res["kernel_errors"])
        return res
    except AssertionError as exc:
        # A check of the test's own failed (an assert in a hook): the test
        # fails with it, not with a record it may not look at.  The VMs
        # are ended first (finally), the work folder kept.
        res["error"] = f"{type(exc).__name__}: {exc}"
        exc.res = res
        exc.add_note(f"migrate_once: a hook's check failed; details: "
                     f"{workdir}")
        raise
    except Exception as exc:  # pylint: disable=broad-except
        # GuestError, or QMP cut off (a QEMU that died): keep the record.
        res["error"] = f"{type(exc).__name__}: {exc}"
        # A dead or oopsing destination is a kernel error too.
        res["kernel_errors"] = res.get("kernel_errors") or dst.kernel_errors()
        if res.get("status") == "completed":
            res["data_intact"] = False
        return res
    finally:
        for vm in vms:
            vm.kill()
        # the consoles of every VM but the last destination (its kernel
        # errors are res["kernel_errors"]), and every QEMU's stderr
        res["src_console_errors"] = [ln for vm in vms if vm is not dst
                                     for ln in vm.kernel_errors()]
        res["qemu_errors"] = {vm.name: vm.qemu_errors() for vm in vms}
        if res["src_console_errors"] or any(res["qemu_errors"].values()):
            res["ok"] = False
        if snap and os.path.exists(snap):
            os.unlink(snap)
        if own_dir and not keep_dirs and res.get("ok"):
            shutil.rmtree(workdir, ignore_errors=True)


def load_snapshot(src, dst, path, res, timeout):
    """The second half of migrate_once(to_file=True), once the source has
    saved the guest to `path`: end the source, load the file into dst
    (started with `-incoming defer`, mapped-ram already set by
    start_migration()).  res["snapshot"]: the file's size and the bytes it
    takes on disk (st_blocks; mapped-ram leaves zero pages and pages never
    sent as holes), the save time (the migration's total-time) and the
    load time (migrate-incoming until the destination's migration state
    is completed, its guest running)."""
    src.kill()
    st = os.stat(path)
    snap = res["snapshot"] = {"file_bytes": st.st_size,
                              "allocated_bytes": st.st_blocks * 512,
                              "save_ms": res.get("total_ms")}
    t0 = time.time()
    dst.qmp("migrate-incoming", uri=f"file:{path}")
    deadline = t0 + timeout
    while True:
        info = dst.qmp("query-migrate")
        if info.get("status") in ("completed", "failed", "cancelled"):
            break
        if time.time() > deadline:
            raise GuestError(f"loading {path} not done after {timeout}s: "
                             f"{info}")
        time.sleep(0.01)
    snap["restore_ms"] = round((time.time() - t0) * 1000)
    snap["restore_status"] = info.get("status")
    if info.get("status") != "completed":
        raise GuestError(f"loading {path}: {info}")


def drop_workdir(res):
    """Remove the work folder that migrate_once() keeps after a run that
    was not ok, once the caller has what it needs from it: for the
    failures a test provokes (a detector's) and stock's, which are counted,
    not debugged."""
    d = res.get("workdir")
    base = os.path.realpath(os.path.join(BUILD, "tmp")) + os.sep
    if d and os.path.realpath(d).startswith(base):
        shutil.rmtree(d, ignore_errors=True)


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

    def _log(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def send(self, cmds, expect, timeout=60):
        """Send gdb commands and wait until `expect` appears once more in
        its output."""
        n = self._log().count(expect)
        self.proc.stdin.write(cmds.encode() + b"\n")
        self.proc.stdin.flush()
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


# Free page reporting has settled once the source QEMU's anonymous RSS (the
# guest's RAM) fell by less than SETTLE_DROP_MIB over the last
# SETTLE_QUIET_S: Linux reports at most a share of each free list per pass
# and starts the next pass 2 s after the last one (PAGE_REPORTING_DELAY),
# so a quiet window of two delays means no pass is left.  The ticker's
# 1 MiB every 2 s stays under SETTLE_DROP_MIB.
SETTLE_QUIET_S = 4.0
SETTLE_DROP_MIB = 16
SETTLE_POLL_S = 0.1
SETTLE_MAX_S = 120


def rss_anon_kib(vm):
    """RssAnon of a VM's QEMU (KiB), None when it is gone."""
    try:
        with open(f"/proc/{vm.machine.get_pid()}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except (OSError, TypeError, ValueError):
        pass
    return None


def settle_reporting(vm):
    """Wait until free page reporting has settled (SETTLE_*) and return
    {"settle_s", "rss_start_mib", "rss_end_mib", "drops"}: drops are the
    (second, MiB) of each fall of the RSS by more than 1 MiB, the passes
    of reporting seen.  GuestError-free: after SETTLE_MAX_S it returns
    with "timeout": True."""
    t0 = time.time()
    samples = []
    out = {"drops": []}
    while True:
        rss = rss_anon_kib(vm)
        now = time.time() - t0
        if rss is None:
            out["error"] = "QEMU gone"
            break
        if samples and samples[-1][1] - rss > 1024:
            out["drops"].append((round(now, 2),
                                 (samples[-1][1] - rss) >> 10))
        samples.append((now, rss))
        window = [r for t, r in samples if now - t <= SETTLE_QUIET_S]
        if (now >= SETTLE_QUIET_S and
                max(window) - rss < SETTLE_DROP_MIB << 10):
            break
        if now > SETTLE_MAX_S:
            out["timeout"] = True
            break
        time.sleep(SETTLE_POLL_S)
    out["settle_s"] = round(time.time() - t0, 2)
    if samples:
        out["rss_start_mib"] = samples[0][1] >> 10
        out["rss_end_mib"] = samples[-1][1] >> 10
    return out


def device_counters(vm):
    """Host-side hint counters from our QEMU (absent on stock)."""
    try:
        return vm.qmp("qom-get", path="/machine/peripheral/balloon0",
                      property="x-free-page-hint-stats")
    except Exception:  # pylint: disable=broad-except
        return None


def save_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=str)
    os.replace(path + ".tmp", path)
