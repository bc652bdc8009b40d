# SPDX-License-Identifier: GPL-2.0
"""One QEMU process running a test guest, and what the host reads of it.

VM is a QEMUMachine (QEMU's own Python package, hb.env.qemu_machine_class())
with the project's guest plumbing: a direct kernel boot of the test image,
the console in a file, the command channel (hb.channel.Guest) on the
second serial port, the virtio-balloon device, QMP commands that time out.
GuestOutput reads a guest's console and its QEMU's output for the error
lines of hb.verdicts; hb.libvirt.Domain shares it.  The helpers below read
the balloon's counters in the guest and in QEMU, and the QEMU's resident
memory.

Every QEMU dies with the process that started it (PR_SET_PDEATHSIG).  A
program that starts VMs calls install_cleanup() once, so that exiting or
SIGTERM/SIGHUP also ends them before it goes; importing this module does
nothing of the kind.
"""

import atexit
import os
import re
import signal
import time

from . import env
from .channel import Guest, GuestError, parse_kv
from .env import (KEEP_WRITES_OPT_IN, STOCK_BINARIES, fleet_opted_in,
                  guest_initrd, guest_kernel, log, machine_for, module_wrapper)
from .verdicts import (GUEST_ERROR_RE, KERNEL_ERROR_RE, QEMU_ERROR_RE,
                       SANITIZER_RE)

# Stock QEMUs that died by a signal before their guest was up (VM.boot()),
# for the whole process.
STOCK_CRASHES = []
# The VMs launched and not ended yet (live_vms()).
_LIVE = set()
# With env.SANITIZE: the sanitizer reports of the QEMUs this process ended
# (VM.end()), as {"vm": name, "lines": [...]}; the runner fails the test
# on any.  _ending_hard: ending now, no time for graceful quits (a stop
# signal); a plain flag, which a signal handler can set without a lock.
SANITIZER_REPORTS = []
_ending_hard = False
# Seconds a QEMU with sanitizers may take to quit (LeakSanitizer's scan at
# exit included) before it is killed.
SANITIZE_QUIT_S = 60

# Seconds a QMP command may go unanswered before VM.qmp() raises
# TimeoutError (a hung or stopped QEMU); HB_QMP_TIMEOUT overrides it, a
# call's qmp_timeout= too.
QMP_TIMEOUT_S = float(os.environ.get("HB_QMP_TIMEOUT", "60"))


def live_vms():
    """The QEMUs this process started that have not ended yet."""
    return list(_LIVE)


def end_all():
    """End every QEMU this process started and has not ended yet
    (VM.end(): a graceful quit under env.SANITIZE, unless ending_hard())."""
    for vm in list(_LIVE):
        vm.end()


def ending_hard():
    """From now on VM.end() kills without a graceful quit: the process was
    told to stop and has seconds left."""
    global _ending_hard  # pylint: disable=global-statement
    _ending_hard = True


def _on_signal(signum, _frame):
    ending_hard()
    end_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_CLEANUP_INSTALLED = False


def install_cleanup():
    """Kill every QEMU this process started when it exits (atexit) or gets
    SIGTERM or SIGHUP (then it dies of the signal), for a program that
    starts VMs: tests/migrate.py, the demo, the soak, the bench.  Call it
    before installing handlers of its own that chain to the previous
    ones.  The test runner does not: it ends each test's QEMUs itself
    (end_all() and the test's process group).  A second call does
    nothing."""
    global _CLEANUP_INSTALLED  # pylint: disable=global-statement
    if _CLEANUP_INSTALLED:
        return
    _CLEANUP_INSTALLED = True
    atexit.register(end_all)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)


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

    def sanitizer_lines(self):
        """The lines of this QEMU's output that a sanitizer printed: its
        report's first line and summary."""
        return [ln.rstrip() for ln in self.log_text().splitlines()
                if SANITIZER_RE.search(ln)]

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
        # what -m gives the guest: more than mem_mib for the debug kernel
        self.mem_mib = mem_mib = env.guest_ram_mib(kernel, mem_mib)
        initrd = initrd or os.environ.get("HB_INITRD") or guest_initrd()
        machine = machine or machine_for(binary)
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
                "-kernel", env.boot_image(kernel, machine),
                "-initrd", initrd, "-append", append,
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
        if trace and binary != env.STOCK_QEMU:
            # HB_TRACE=pattern[,pattern...]: QEMU trace events to the VM's
            # log, with timestamps (debugging only).
            for pat in trace.split(","):
                args += ["-trace", pat]
            args += ["-msg", "timestamp=on"]
        args += list(extra_args)
        self.machine = env.qemu_machine_class()(
            binary, args=args, name=name, base_temp_dir=workdir,
            wrapper=module_wrapper(binary) + [
                "setpriv", "--pdeathsig", "KILL", "--"],
            log_dir=workdir)
        self.machine.set_machine(machine)
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
        # what the guest printed last, and where its vCPUs are, say where
        # it stopped
        raise GuestError(f"{self.name}: '{pattern}' not on console after "
                         f"{timeout}s; vCPUs at {self.vcpu_rips()}; console "
                         f"ends: {self.console_text()[-1500:]!r}")

    def vcpu_rips(self):
        """Each vCPU's instruction pointer and whether it is halted (HMP
        info registers), for a guest that stopped making progress; what
        went wrong asking, if it did."""
        try:
            regs = self.qmp("human-monitor-command",
                            command_line="info registers -a",
                            qmp_timeout=10)
        except Exception as exc:  # pylint: disable=broad-except
            return f"(not known: {type(exc).__name__}: {exc})"
        return ", ".join(f"RIP={rip} HLT={hlt}" for rip, hlt in re.findall(
            r"RIP=([0-9a-f]+) .*?HLT=(\d)", regs, re.S))

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

    def end(self):
        """End this QEMU when its test is done with it.  Under env.SANITIZE
        (and not ending_hard()) a running QEMU is asked to quit and given
        SANITIZE_QUIT_S to exit, so that LeakSanitizer checks it, and the
        sanitizer report lines of its output are added to
        SANITIZER_REPORTS; otherwise, and past that time, it is killed."""
        if not env.SANITIZE or _ending_hard:
            self.kill()
            return
        was_live = self in _LIVE
        if was_live and self.machine.is_running():
            self.guest.close()
            try:
                self.machine.shutdown(timeout=SANITIZE_QUIT_S)
            except Exception:  # pylint: disable=broad-except
                pass
        self.kill()
        if was_live:
            lines = self.sanitizer_lines()
            if lines:
                SANITIZER_REPORTS.append({"vm": self.name, "lines": lines})

    def kill(self):
        """SIGKILL this QEMU (if it runs) and forget it; what it printed
        stays in its log."""
        self.guest.close()
        try:
            if self.machine.is_running():
                self.machine.kill()
            self.machine.shutdown(hard=True)
        except Exception:  # pylint: disable=broad-except
            pass
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


def device_counters(vm):
    """Host-side hint counters from our QEMU (absent on stock)."""
    try:
        return vm.qmp("qom-get", path="/machine/peripheral/balloon0",
                      property="x-free-page-hint-stats")
    except Exception:  # pylint: disable=broad-except
        return None


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
