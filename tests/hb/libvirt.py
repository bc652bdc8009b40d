# SPDX-License-Identifier: GPL-2.0
"""Two libvirt hosts on one machine, for migrations driven by libvirt.

TwoHosts starts two libvirtd daemons (the QEMU driver of Debian's libvirt
11.3; Debian packages the monolithic libvirtd, not virtqemud) that behave
as two hosts: each runs as root in a mount namespace of its own, where its
own folders under one private folder in build/tmp/ are bind-mounted over
the places a root libvirtd uses and cannot be told to move (qemu.conf and
the domain configs in /etc/libvirt, its runtime state in /run, its state,
logs and capability cache in /var/lib/libvirt, /var/log/libvirt and
/var/cache/libvirt).  Each has its own host UUID (host_uuid in its
libvirtd.conf: libvirt refuses a migration between hosts with the same
UUID) and listens on sockets in that private folder, so `virsh -c
qemu+unix:///system?socket=...` reaches it; a system libvirt, if any, is
left alone.  Nothing is written to /run, /etc or /var of the machine: the
bind mounts exist only in the daemons' namespaces, which end with the last
process in them.

Each daemon's qemu.conf runs QEMU as root without a security driver,
without cgroups and without a mount namespace of its own (so QEMU sees its
host's folders), with ownership of files left alone, its stdio in a plain
log file (no virtlogd).  A guest's console and command channel are files
in GUEST_DIR: the same path on both hosts, two different files on this
machine (Domain maps them), as on two real hosts.

TwoHosts is a context manager: on leaving it, also through an exception,
every domain is destroyed and undefined, every QEMU and both daemons end,
and the private folder is removed (kept after a failure, for its logs).  A
helper process outside the test's process group kills whatever is left in
the daemons' namespaces if the test process dies without leaving the
context (a runner timeout kills the process group, and libvirt starts each
QEMU in a session of its own).

migrate_once() is hb.migration.migrate_once() for a libvirt-managed
guest: it returns a record of the same shape, so testlib.assert_intact()
and testlib.assert_hinted() apply to it.
"""
import json
import inspect
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from xml.sax.saxutils import escape, quoteattr

from .channel import Guest, GuestError
from .env import BUILD, guest_initrd, guest_kernel, log
from .verdicts import QEMU_ERROR_RE
from .vm import GuestOutput, balloon_stats
from .workloads import Scenario, prepare_guest, verify_guest

LIBVIRTD = "/usr/sbin/libvirtd"
VIRSH = "/usr/bin/virsh"
UNSHARE = "/usr/bin/unshare"

# (folder in a daemon's private folder, the place it is mounted over in the
# daemon's namespace).  /run first: `mount` keeps its own state in /run.
PRIVATE_DIRS = (("run", "/run"), ("etc", "/etc/libvirt"),
                ("lib", "/var/lib/libvirt"), ("log", "/var/log/libvirt"),
                ("cache", "/var/cache/libvirt"))

# Where a host keeps the test guests' console logs and command sockets (a
# path of the host, i.e. in the daemon's namespace).
GUEST_DIR = "/var/lib/libvirt/hb"

# The balloon's user alias (libvirt: "ua-" + name) and the IOThread
# libvirt creates for <iothreads>1</iothreads>.
BALLOON_ALIAS = "ua-balloon0"
IOTHREAD_ID = "iothread1"

LIBVIRTD_CONF = """\
# balloon-hint test host {name}: a private root libvirtd
unix_sock_dir = {sock_dir}
unix_sock_ro_perms = "0700"
unix_sock_rw_perms = "0700"
unix_sock_admin_perms = "0700"
auth_unix_ro = "none"
auth_unix_rw = "none"
host_uuid = "{uuid}"
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
"""

QEMU_CONF = """\
# balloon-hint test host {name}: QEMU as root, nothing changed on the machine
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
namespaces = [ ]
cgroup_controllers = [ ]
stdio_handler = "file"
"""



class LibvirtError(Exception):
    """A virsh command failed."""


def missing():
    """What this machine lacks for TwoHosts (a sentence), or None."""
    for path in (LIBVIRTD, VIRSH, UNSHARE):
        if not os.access(path, os.X_OK):
            return (f"{path} not found (scripts/setup.sh installs libvirt "
                    "from bookworm-backports)")
    if not os.path.exists("/usr/lib/x86_64-linux-gnu/libvirt/"
                          "connection-driver/libvirt_driver_qemu.so"):
        return "libvirt's QEMU driver (libvirt-daemon-driver-qemu) missing"
    for _, target in PRIVATE_DIRS:
        if not os.path.isdir(target):
            return f"{target} does not exist (a libvirt package folder)"
    if os.geteuid() != 0:
        return "not root"
    return None


def _in_namespace_of(root):
    """PIDs of the processes whose mounts include the private folder
    `root`: the daemons and every QEMU they started (what a process in one
    of the daemons' namespaces has in its mountinfo), this one aside."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open(f"/proc/{p}/mountinfo") as f:
                if f" {root}/" in f.read():
                    pids.append(int(p))
        except OSError:
            pass
    return pids


# The reaper: a process of its own that kills what _in_namespace_of() finds
# (and only that) once the test process has gone, its stdin closed.
_REAPER = "import os, signal, sys, time\n" + \
    inspect.getsource(_in_namespace_of) + r"""
root = sys.argv[1]
sys.stdin.buffer.read()          # EOF: the test process has gone
for _ in range(20):
    pids = _in_namespace_of(root)
    if not pids:
        break
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.5)
"""


class Daemon:
    """One private libvirtd: one host."""

    def __init__(self, root, name):
        self.name = name
        self.dir = os.path.join(root, name)
        self.uuid = str(uuid.uuid4())
        self.sock_dir = os.path.join(self.dir, "sock")
        self.uri = (f"qemu+unix:///system?socket="
                    f"{self.sock_dir}/libvirt-sock")
        self.log = os.path.join(self.dir, "libvirtd.out")
        self.proc = None

    def host_path(self, path):
        """The file on this machine behind `path` as this host sees it."""
        for sub, target in PRIVATE_DIRS:
            if path == target or path.startswith(target + "/"):
                return os.path.join(self.dir, sub, path[len(target):]
                                    .lstrip("/"))
        return path

    def start(self, timeout=60):
        for sub, _ in PRIVATE_DIRS:
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        os.makedirs(self.sock_dir, exist_ok=True)
        os.makedirs(self.host_path(GUEST_DIR), exist_ok=True)
        os.makedirs(self.host_path("/etc/libvirt/qemu"), exist_ok=True)
        conf = self.host_path("/etc/libvirt/libvirtd.conf")
        with open(conf, "w") as f:
            f.write(LIBVIRTD_CONF.format(name=self.name, uuid=self.uuid,
                                         sock_dir=json.dumps(self.sock_dir)))
        with open(self.host_path("/etc/libvirt/qemu.conf"), "w") as f:
            f.write(QEMU_CONF.format(name=self.name))
        # In the new mount namespace (private propagation: nothing leaks
        # back), mount the private folders, then become libvirtd.  It stays
        # in the foreground: a child of this process, in its process group.
        script = "".join(f'mount -n --bind "$1/{sub}" {target} && '
                         for sub, target in PRIVATE_DIRS)
        script += (f'exec {LIBVIRTD} -f /etc/libvirt/libvirtd.conf '
                   '-p /run/libvirtd.pid')
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [UNSHARE, "--mount", "--propagation", "private", "--",
                 "/bin/sh", "-ec", script, "sh", self.dir],
                stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                raise LibvirtError(f"libvirtd {self.name} exited "
                                   f"({self.proc.returncode}): "
                                   f"{self.log_tail()}")
            r = self.virsh("uri", check=False, timeout=10)
            if r.returncode == 0:
                return
            if time.time() > deadline:
                raise LibvirtError(f"libvirtd {self.name} not answering "
                                   f"after {timeout}s: {r.stderr.strip()}; "
                                   f"{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, n=1500):
        text = ""
        for path in (self.log,
                     self.host_path("/var/log/libvirt/libvirtd.log")):
            try:
                with open(path, errors="replace") as f:
                    text += f.read()
            except OSError:
                pass
        return text[-n:]

    def virsh(self, *args, check=True, timeout=120):
        """Run virsh on this host; CompletedProcess (LibvirtError if it
        failed and `check`)."""
        r = subprocess.run([VIRSH, "-q", "-c", self.uri, *args], text=True,
                           capture_output=True, timeout=timeout,
                           check=False)
        if check and r.returncode != 0:
            raise LibvirtError(f"virsh {' '.join(args)} on host {self.name} "
                               f"failed: {r.stderr.strip()}")
        return r

    def qmp(self, dom, cmd, **arguments):
        """A QMP command through `virsh qemu-monitor-command`; its return
        value (LibvirtError for an error answer)."""
        msg = {"execute": cmd}
        if arguments:
            msg["arguments"] = arguments
        r = self.virsh("qemu-monitor-command", dom, json.dumps(msg),
                       timeout=30)
        ans = json.loads(r.stdout)
        if "error" in ans:
            raise LibvirtError(f"{cmd} on host {self.name}: {ans['error']}")
        return ans.get("return")

    def hmp(self, dom, cmd):
        return self.virsh("qemu-monitor-command", dom, "--hmp", cmd,
                          timeout=30).stdout

    def domains(self):
        r = self.virsh("list", "--all", "--name", check=False, timeout=30)
        return [x.strip() for x in r.stdout.splitlines() if x.strip()]

    def stop(self):
        """Destroy and undefine every domain, end the daemon and anything
        left in its namespace."""
        if self.proc and self.proc.poll() is None:
            try:
                for dom in self.domains():
                    self.virsh("destroy", dom, check=False, timeout=60)
                    self.virsh("undefine", dom, check=False, timeout=60)
            except subprocess.TimeoutExpired:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in _in_namespace_of(self.dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class TwoHosts:
    """Context manager: hosts.a and hosts.b, two private libvirtds (see the
    module's docstring).  keep=True keeps the private folder also after a
    success."""

    def __init__(self, keep=False):
        self.keep = keep
        self.root = None
        self.a = self.b = None
        self._reaper = None

    def __enter__(self):
        tmp = os.path.join(BUILD, "tmp")
        os.makedirs(tmp, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="hb-libvirt-", dir=tmp)
        self._reaper = subprocess.Popen(
            [sys.executable, "-c", _REAPER, self.root],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        self.a = Daemon(self.root, "A")
        self.b = Daemon(self.root, "B")
        try:
            self.a.start()
            self.b.start()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def path(self, name):
        """A path both hosts (and this machine) see alike."""
        return os.path.join(self.root, name)

    def __exit__(self, exc_type, exc, tb):
        for d in (self.a, self.b):
            if d:
                try:
                    d.stop()
                except Exception as e:  # pylint: disable=broad-except
                    log(f"libvirt host {d.name}: stop: {e}")
        if self._reaper:
            self._reaper.stdin.close()      # nothing left for it to end
            self._reaper.wait()
            self._reaper = None
        left = _in_namespace_of(self.root)
        if left:
            log(f"processes left in the libvirt hosts' namespaces: "
                f"{left}")
        if exc_type is None and not self.keep and not left:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            log(f"libvirt hosts' folder kept: {self.root}")
        return False


def domain_xml(name, binary, mem_mib=1024, smp=2, balloon="ours",
               balloon_args="", hint=True, keep_writes=False,
               kernel=None, initrd=None):
    """The test guest as a libvirt domain: TCG, direct kernel boot of the
    harness's guest kernel and image, console (ttyS0) in a file and the
    command channel (ttyS1) on a unix socket in GUEST_DIR, the balloon with
    free page hinting set through <qemu:override> on an IOThread of
    <iothreads>, and with keep_writes VIRTIO_BALLOON_F_HINT_KEEP_WRITES
    offered (free-page-hint-keep-writes=on)."""
    kernel = kernel or guest_kernel()
    initrd = initrd or os.environ.get("HB_INITRD") or guest_initrd()
    cmdline = f"console=ttyS0 loglevel=5 panic=0 hb.balloon={balloon}"
    if balloon_args:
        cmdline += f" hb.balloon_args={balloon_args.replace(' ', ',')}"
    props = []
    if hint:
        props += [("free-page-hint", "bool", "true"),
                  ("iothread", "string", IOTHREAD_ID)]
        if keep_writes:
            props.append(("free-page-hint-keep-writes", "bool", "true"))
    override = ""
    if props:
        override = (
            "  <qemu:override>\n"
            f"    <qemu:device alias='{BALLOON_ALIAS}'>\n"
            "      <qemu:frontend>\n" +
            "".join(f"        <qemu:property name='{n}' type='{t}' "
                    f"value='{v}'/>\n" for n, t, v in props) +
            "      </qemu:frontend>\n"
            "    </qemu:device>\n"
            "  </qemu:override>\n")
    return f"""\
<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{escape(name)}</name>
  <memory unit='MiB'>{mem_mib}</memory>
  <currentMemory unit='MiB'>{mem_mib}</currentMemory>
  <vcpu>{smp}</vcpu>
  <iothreads>1</iothreads>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{escape(kernel)}</kernel>
    <initrd>{escape(initrd)}</initrd>
    <cmdline>{escape(cmdline)}</cmdline>
  </os>
  <features>
    <acpi/>
  </features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>{escape(binary)}</emulator>
    <controller type='usb' model='none'/>
    <serial type='file'>
      <source path={quoteattr(f"{GUEST_DIR}/{name}-console.log")}/>
      <target port='0'/>
    </serial>
    <serial type='unix'>
      <source mode='bind' path={quoteattr(f"{GUEST_DIR}/{name}-cmd.sock")}/>
      <target port='1'/>
    </serial>
    <memballoon model='virtio'>
      <alias name='{BALLOON_ALIAS}'/>
    </memballoon>
  </devices>
{override}</domain>
"""


# "2026-12-03T09:20:42.192345Z qemu-system-x86_64: ...": QEMU's stderr
# with -msg timestamp=on, as libvirt starts it.
_TIMESTAMP_RE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z ")


class Domain(GuestOutput):
    """The guest `name` on one host, with what hb.vm.VM offers the
    harness's guest functions (prepare_guest, verify_guest, balloon_stats):
    .guest (the command channel), the console, the QEMU's output."""

    def __init__(self, host, name):
        self.host = host
        self.name = name
        self.console = host.host_path(f"{GUEST_DIR}/{name}-console.log")
        self.cmdsock = host.host_path(f"{GUEST_DIR}/{name}-cmd.sock")
        self.guest = Guest(self.cmdsock, self._dead)

    def pid(self):
        try:
            with open(self.host.host_path(
                    f"/run/libvirt/qemu/{self.name}.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def running(self):
        pid = self.pid()
        return bool(pid) and os.path.exists(f"/proc/{pid}")

    def exited(self):
        if not self.running():
            return f"the QEMU of {self.name} on host {self.host.name} ended"
        return None

    def state(self):
        return self.host.virsh("domstate", self.name, check=False,
                               timeout=30).stdout.strip()

    def qmp(self, cmd, **arguments):
        return self.host.qmp(self.name, cmd, **arguments)

    def hmp(self, cmd):
        return self.host.hmp(self.name, cmd)

    def wait_ready(self, timeout=180):
        """Wait for the guest's command loop (HB READY), then connect."""
        deadline = time.time() + timeout
        while "HB READY" not in self.console_text():
            why = self._dead()
            if why or time.time() > deadline:
                raise GuestError(
                    f"{self.name}: {why or 'no HB READY'} after boot; "
                    f"console ends: {self.console_text()[-1500:]!r}; QEMU "
                    f"log ends: {self.log_text()[-1500:]!r}")
            time.sleep(0.2)
        errs = self.guest_errors()
        if errs:
            raise GuestError(f"{self.name}: guest setup failed: "
                             f"{errs}")
        self.guest.connect()

    def log_path(self):
        """libvirt's log of this QEMU (its command line, then its stderr)."""
        return self.host.host_path(f"/var/log/libvirt/qemu/{self.name}.log")

    def qemu_errors(self):
        """The lines of QEMU's stderr that report an error
        (QEMU_ERROR_RE, read without libvirt's timestamps)."""
        out = []
        for ln in self.log_text().splitlines():
            ln = _TIMESTAMP_RE.sub("", ln.rstrip())
            if QEMU_ERROR_RE.search(ln):
                out.append(ln)
        return out


def jobinfo(host, name):
    """`virsh domjobinfo --completed --rawstats`: libvirt's figures of the
    last completed job as {key: value} (bytes and ms as ints)."""
    r = host.virsh("domjobinfo", name, "--completed", "--keep-completed",
                   "--rawstats", check=False, timeout=30)
    res = {}
    for line in r.stdout.splitlines():
        if ":" not in line:
            continue
        k, v = (x.strip() for x in line.split(":", 1))
        try:
            res[k] = int(v)
        except ValueError:
            res[k] = v
    return res


def migrate_cmd(hosts, name, src, dst):
    """The virsh command line that live-migrates `name` from src to dst:
    peer to peer (src's libvirtd talks to dst's), the domain made persistent
    on dst and undefined on src, QEMU's stream over a unix socket both
    hosts see."""
    return [VIRSH, "-c", src.uri, "migrate", "--live", "--p2p",
            "--persistent", "--undefinesource", name, dst.uri,
            "--migrateuri", f"unix://{hosts.path(f'mig-{name}.sock')}"]


def migrate_once(hosts, binary, scenario=None, balloon="ours",
                 balloon_args="", hint=True, keep_writes=False,
                 name="hbguest", timeout=600):
    """Define and start the guest on host A, prepare its data
    (hb.workloads.prepare_guest), migrate it live to host B with `virsh
    migrate`, verify the data there (hb.workloads.verify_guest).  Returns
    a record shaped like hb.migration.migrate_once()'s, plus
    `virsh_migrate` (the command), `jobinfo` (domjobinfo --completed of
    the destination), `hint_mode` and `device_src` (the last
    x-free-page-hint-stats of the source's balloon before it ended)."""
    sc = scenario or Scenario()
    src, dst = hosts.a, hosts.b
    res = {"config": {"src": binary, "dst": binary, "balloon": balloon,
                      "hint": hint, "keep_writes": keep_writes,
                      "workload": sc.workload, "mem_mib": sc.mem_mib,
                      "seed": sc.seed, "smp": sc.smp, "libvirt": True},
           "ok": False, "data_intact": None, "kernel_errors": [],
           "workdir": hosts.root}
    xml = domain_xml(name, binary, mem_mib=sc.mem_mib, smp=sc.smp,
                     balloon=balloon, balloon_args=balloon_args, hint=hint,
                     keep_writes=keep_writes)
    res["domain_xml"] = xml
    xml_path = hosts.path(f"{name}.xml")
    with open(xml_path, "w") as f:
        f.write(xml)
    sdom, ddom = Domain(src, name), Domain(dst, name)
    try:
        t0 = time.time()
        src.virsh("define", xml_path)
        src.virsh("start", name)
        sdom.wait_ready()
        res["boot_s"] = round(time.time() - t0, 1)
        prepare_guest(sdom, sc, res)
        hint_before = balloon_stats(sdom) if balloon == "ours" else {}
        res["guest_hint_before"] = hint_before
        res["hint_mode"] = hint_before.get("mode")
        cmd = migrate_cmd(hosts, name, src, dst)
        res["virsh_migrate"] = " ".join(cmd)
        t_mig = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        # The source's device counters, read while it still runs: its QEMU
        # ends when the migration has completed.
        last, states = None, []
        while proc.poll() is None:
            if time.time() - t_mig > timeout:
                src.virsh("domjobabort", name, check=False)
                proc.wait()
                break
            try:
                last = sdom.qmp("qom-get",
                                path=f"/machine/peripheral/{BALLOON_ALIAS}",
                                property="x-free-page-hint-stats")
                mig = sdom.qmp("query-migrate")
                if mig.get("status") and mig["status"] not in states:
                    states.append(mig["status"])
            except (GuestError, ValueError, LibvirtError,
                    subprocess.TimeoutExpired):
                pass
            time.sleep(0.05)
        out, err = proc.communicate()
        res["migrate_s"] = round(time.time() - t_mig, 1)
        res["states"] = states
        res["device_src"] = last
        if proc.returncode != 0:
            res["status"] = "failed"
            res["error"] = f"virsh migrate: {(err or out).strip()}"
            return res
        res["status"] = "completed"
        job = jobinfo(dst, name) or jobinfo(src, name)
        res["jobinfo"] = job
        if "memory_processed" in job:
            res["transferred_mb"] = round(job["memory_processed"] / 1e6, 1)
        res["total_ms"] = job.get("time_elapsed")
        res["downtime_ms"] = job.get("downtime")
        res["dst_status"] = ddom.state()
        ddom.guest.connect()
        if balloon == "ours":
            res["guest_hint"] = balloon_stats(ddom)
        res["data_intact"] = verify_guest(ddom, sc, res)
        res["balloon_query"] = ddom.qmp("query-balloon")
        res["kernel_errors"] = (ddom.kernel_errors() +
                                res["verify"].get("dmesg_errors", []))
        res["ok"] = bool(res["data_intact"] and not res["kernel_errors"])
        return res
    except Exception as exc:  # pylint: disable=broad-except
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["kernel_errors"] = res.get("kernel_errors") or \
            ddom.kernel_errors()
        if res.get("status") == "completed":
            res["data_intact"] = False
        return res
    finally:
        sdom.guest.close()
        ddom.guest.close()
        res["src_console_errors"] = sdom.kernel_errors()
        res["qemu_errors"] = {"src": sdom.qemu_errors(),
                              "dst": ddom.qemu_errors()}
        res["consoles"] = {"src": sdom.console, "dst": ddom.console}
        if res["src_console_errors"] or any(res["qemu_errors"].values()):
            res["ok"] = False
