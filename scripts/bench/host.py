# SPDX-License-Identifier: GPL-2.0
"""The machine a benchmark runs on: what it is (machine_info), the QEMU
binary under test (snapshot_our_qemu), and optional host tuning
(--host-thp, --host-warm-memory) that is undone when the run ends.  Runs
with host tuning are recorded as "host_tuned" and labelled so by the
report."""
import atexit
import glob
import importlib.util
import mmap
import os
import platform
import shutil
import signal
import subprocess
import time

from hb import env
from hb.env import guest_kernel

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=30).stdout.rstrip()
    except Exception:  # pylint: disable=broad-except
        return ""


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def host_thp():
    """The host's transparent huge page mode (the bracketed word)."""
    try:
        with open(THP_ENABLED) as f:
            return f.read().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        return None


def set_host_thp(mode):
    with open(THP_ENABLED, "w") as f:
        f.write(mode)
    if host_thp() != mode:
        raise SystemExit(f"could not set {THP_ENABLED} to {mode}")


def until_exit(what, restore):
    """Run restore() when this process ends, however it ends."""
    def once():
        if restore():
            log(f"{what}: restored")
    atexit.register(once)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        prev = signal.getsignal(sig)

        def on_signal(signum, frame, prev=prev):
            once()
            if callable(prev):
                prev(signum, frame)
            raise SystemExit(128 + signum)
        signal.signal(sig, on_signal)


def keep_thp(mode):
    """Set the host's THP mode until this process ends."""
    before = host_thp()
    set_host_thp(mode)
    log(f"host transparent huge pages: {mode} for this run (was {before})")

    def restore():
        if host_thp() == before:
            return False
        set_host_thp(before)
        return True
    until_exit(f"host transparent huge pages {before}", restore)


# A host that is itself a guest may hand the memory it frees back to its
# own host (virtio-balloon free page reporting, mm/page_reporting.c); this
# machine's kernel does, every 2 MiB block within seconds of its freeing.
# Its next first touch then faults in the outer host too: ~10 us per 4 KiB
# instead of ~0.5 us (fault_probe()), which makes a destination's load, not
# the stream, the pace of a 1 GiB migration.  This kernel has two knobs
# mainline lacks that hold freed memory back from reporting.  Measured
# here: with both set, 2 GiB freed stayed unreported for 40 s, but of 4 and
# 9 GiB freed all except ~2.2 GiB was reported within 20 s whatever
# max_waiting_mib said.  So --host-warm-memory makes the host behave like
# one that keeps its memory for guests up to ~1 GiB (source and destination
# together fit); larger guests' destinations still fault partly cold, and
# every run records how much was reported meanwhile (host_reported_mib).
# The option touches 4 GiB once before the first run: after touching 2 GiB
# the first 1 GiB migration of a bench still loaded partly cold (404 and
# 437 ms, against 77-87 ms for the next).
REPORTING = "/sys/module/page_reporting/parameters"
REPORTING_HOLD = (("min_free_ms", "300000"), ("max_waiting_mib", "16384"))
HOLD_WARM_MIB = 4096


def host_reporting():
    """The page_reporting knobs this host has, name -> value."""
    out = {}
    for path in sorted(glob.glob(os.path.join(REPORTING, "*"))):
        try:
            with open(path) as f:
                out[os.path.basename(path)] = f.read().strip()
        except OSError:
            pass
    return out


def reported_kib():
    """KiB this host has reported to its own host since boot, or None."""
    try:
        with open(os.path.join(REPORTING, "reported_kib")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def hold_freed_memory(warm_mib):
    """Hold freed memory back from the outer host until this process ends,
    then touch warm_mib of it once so the first run finds it warm."""
    before = host_reporting()
    missing = [k for k, _ in REPORTING_HOLD if k not in before]
    if missing:
        raise SystemExit(
            f"--host-warm-memory: {REPORTING} has no {', '.join(missing)}: "
            "this kernel either reports no free memory to an outer host or "
            "cannot be told to hold it back")

    def write(values):
        for k, v in values:
            with open(os.path.join(REPORTING, k), "w") as f:
                f.write(v)

    def restore():
        now = host_reporting()
        if all(now[k] == before[k] for k, _ in REPORTING_HOLD):
            return False
        write((k, before[k]) for k, _ in REPORTING_HOLD)
        return True
    until_exit("page_reporting " + " ".join(
        f"{k}={before[k]}" for k, _ in REPORTING_HOLD), restore)
    try:
        write(REPORTING_HOLD)
    except OSError as e:
        raise SystemExit(f"--host-warm-memory: {REPORTING}: {e}") from e
    log("page_reporting: " + " ".join(f"{k}={v}" for k, v in REPORTING_HOLD)
        + f" for this run; warming {warm_mib} MiB")
    touch_fresh(warm_mib)


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") >> 10)


def touch_fresh(mib, advice=None, read=False):
    """Map mib MiB of fresh anonymous memory, write (or read) each 4 KiB
    page once, unmap it; the seconds the accesses took and the KiB by which
    they grew the resident set."""
    size = mib << 20
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        if advice is not None:
            m.madvise(advice)
        rss = _rss_kib()
        t = time.perf_counter()
        if read:
            for off in range(0, size, 4096):
                _ = m[off]
        else:
            for off in range(0, size, 4096):
                m[off] = 1
        return time.perf_counter() - t, _rss_kib() - rss
    finally:
        m.close()


def fault_probe(mib=128):
    """ns per 4 KiB page to fault in fresh anonymous memory: advised huge
    twice (the first touch takes memory the host has not used recently,
    the second reuses what the first freed) and advised small.  On a
    machine that is itself a VM, the first figure includes the outer
    host's faults; the destination QEMU pays it for every huge page it
    loads into.  "read": the same for reading fresh memory advised huge,
    last, so from memory as recently used as huge_warm's; a read maps the
    shared zero page on most hosts (no memory made resident) but on some
    (a kernel booted with pvm_no_zero_page=1, for one) allocates like a
    write; "read_resident_pct" is how much of the read memory became
    resident.  QEMU reads every page it checks for zeros, on the source
    and, loading a zero page, on the destination, so where reads allocate,
    each zero page costs a fault on both."""
    out = {key: round(touch_fresh(mib, adv)[0] / (mib << 8) * 1e9)
           for key, adv in (("huge_cold", mmap.MADV_HUGEPAGE),
                            ("huge_warm", mmap.MADV_HUGEPAGE),
                            ("small", mmap.MADV_NOHUGEPAGE))}
    secs, grew_kib = touch_fresh(mib, mmap.MADV_HUGEPAGE, read=True)
    out["read"] = round(secs / (mib << 8) * 1e9)
    out["read_resident_pct"] = round(100 * grew_kib / (mib << 10))
    return out


def machine_info(our_bin):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "nproc": sh("nproc"),
        "free_g": sh("free -g"),
        "cpu_model": cpu,
        "kernel": platform.release(),
        "host": sh("uname -a"),
        "host_cmdline": sh("cat /proc/cmdline"),
        "stock_qemu": sh(f"{env.STOCK_QEMU} --version | head -1"),
        "stock_qemu_11": (sh(f"{env.STOCK_QEMU_11} --version | head -1")
                          if os.access(env.STOCK_QEMU_11, os.X_OK) else None),
        "our_qemu": sh(f"{our_bin} --version | head -1"),
        "our_qemu_key": sh(f"cat {os.path.dirname(env.OUR_QEMU)}/.key"),
        "our_qemu_patched": "free-page-hint-wait-ms" in sh(
            f"{our_bin} -device virtio-balloon-pci,help 2>&1"),
        "guest_kernel": guest_kernel(),
        "host_thp": host_thp(),
        "host_reporting": host_reporting(),
        "fault_ns_per_4k": fault_probe(),
        "git": sh(f"git -C {TOP} rev-parse --short HEAD"),
        "driver_hash": driver_hash(),
        "git_dirty": bool(sh(f"git -C {TOP} status --porcelain guest "
                             "host-qemu-patch tests")),
    }


def driver_hash():
    """The hash of the driver's sources that every committed summary
    carries (scripts/results.py)."""
    spec = importlib.util.spec_from_file_location(
        "hb_results", os.path.join(TOP, "scripts", "results.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.driver_hash()


def snapshot_our_qemu(copy_dir):
    """Copy build/qemu/qemu-system-x86_64 into copy_dir so that a rebuild
    during the run does not change the binary under test (the name stays
    qemu-system-x86_64: the main thread's name is the CPU-time key)."""
    if not os.access(env.OUR_QEMU, os.X_OK):
        raise SystemExit(f"{env.OUR_QEMU} missing; run make qemu")
    os.makedirs(copy_dir, exist_ok=True)
    dst = os.path.join(copy_dir, "qemu-system-x86_64")
    shutil.copy2(env.OUR_QEMU, dst + ".tmp")
    os.replace(dst + ".tmp", dst)
    subprocess.run([dst, "--version"], check=True, capture_output=True,
                   timeout=30)
    return dst
