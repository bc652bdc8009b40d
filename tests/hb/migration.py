# SPDX-License-Identifier: GPL-2.0
"""Driving a migration between two VMs over QMP.

migrate_once() is the one whole run: boot a source guest, prepare its
workload (hb.workloads), migrate it (live, throttled, postcopy, multifd,
over several hops, or through a file), verify the guest's data on the
destination and scan every console and QEMU output; it returns a
JSON-able record and never leaves a QEMU behind.  Tests, the demo, the
soak and the bench go through it.  start_migration(), wait_migration()
and wait_running() are its steps, for tests that break a migration on
purpose (hb.rigs.Rig) or hold it in gdb (hb.stop_race).
migrate_to_sink() starts a migration with no destination, for tests of
the guest's hint rounds alone.
"""

import os
import shutil
import tempfile
import time

from . import env
from .channel import GuestError
from .cpu import CpuSampler, HostCpu
from .env import BUILD
from .hostmem import DST_MEMORY, warm_host_memory
from .vm import VM, balloon_stats, device_counters
from .workloads import Scenario, prepare_guest, verify_guest

# migrate_once(dst_args=...) for a destination whose RAM is resident before
# the load: it no longer waits for page faults (benchmarks.md, "Where the
# time goes").
PREALLOC_DST = ("-mem-prealloc",)

# Precopy bandwidth of a postcopy scenario: slow enough that the switch to
# postcopy comes while most of RAM is still unsent.
POSTCOPY_PRECOPY_BW = 4 << 20
# Bandwidth of a migration to a sink (migrate_to_sink()).
SINK_BW = 4 << 20


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


def migrate_to_sink(vm, bw=SINK_BW):
    """Start a migration of vm to a sink (`exec:cat > /dev/null`, no
    destination) at bw bytes/s: with free-page-hint=on the device asks the
    guest for hints as in any migration, and a slow one leaves time for
    the guest's rounds.  The caller cancels it (migrate_cancel) or ends
    the VM."""
    vm.qmp("migrate-set-parameters", **{"max-bandwidth": bw})
    vm.qmp("migrate", uri="exec:cat > /dev/null")


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
                 to_file=False, dst_memory="cold", max_bandwidth=None):
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
    in res["snapshot"]); the file is removed at the end.
    dst_memory: "warm" makes the host's free memory resident right before
    the destination starts, "cold" leaves it as it is (hb.hostmem).
    max_bandwidth: the migration's max-bandwidth in bytes/s (a link's
    speed), every hop's; None: 10 GiB/s, no limit a migration here
    reaches."""
    if dst_memory not in DST_MEMORY:
        raise ValueError(f"dst_memory {dst_memory!r}: one of {DST_MEMORY}")
    if max_bandwidth is not None and (not isinstance(max_bandwidth, int)
                                      or max_bandwidth <= 0):
        raise ValueError(f"max_bandwidth {max_bandwidth!r}: bytes/s > 0")
    sc = scenario or Scenario()
    src_bin = src_bin or env.STOCK_QEMU
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
                      "dst_memory": dst_memory,
                      "max_bandwidth": max_bandwidth,
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
    res["config"]["mem_mib"] = src.mem_mib     # the debug kernel's is more
    try:
        t0 = time.time()
        src.boot()
        res["boot_s"] = round(time.time() - t0, 1)
        prepare_guest(src, sc, res)
        hint_before = balloon_stats(src) if balloon == "ours" else {}
        if on_source_ready:
            on_source_ready(src, res)
        if dst_memory == "warm":
            res["dst_warm_mib"] = warm_host_memory(sc.mem_mib)
        dst.launch()
        bw_full = max_bandwidth or 10 << 30
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
        src.end()
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
            dst.end()
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
            vm.end()
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
    src.end()
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
