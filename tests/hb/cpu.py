# SPDX-License-Identifier: GPL-2.0
"""CPU time of a QEMU's threads over an interval, by thread name, and of
the whole host.

Reading /proc once after a migration misses threads that have exited by
then (QEMU's migration thread, `live_migration` or `mig/src/main`, ends
with the migration), so a sampler thread reads every thread every
`interval` seconds and keeps the last value of each one it saw."""
import os
import threading


def thread_cpu(pid):
    """{tid: (name, user+system seconds)} of a process's threads now."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = (comm, (int(st[11]) + int(st[12])) / tick)
    return out


class CpuSampler(threading.Thread):
    """start() ... finish() -> {thread name: CPU seconds in between}."""

    def __init__(self, pid, interval=0.05):
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.base = {tid: t for tid, (_, t) in thread_cpu(pid).items()}
        self.last = {}
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            now = thread_cpu(self.pid)
            if not now:
                break
            self.last.update(now)
            self.halt.wait(self.interval)

    def finish(self):
        self.halt.set()
        self.join(2)
        self.last.update(thread_cpu(self.pid))
        res = {}
        for tid, (comm, t) in self.last.items():
            res[comm] = round(res.get(comm, 0) + t - self.base.get(tid, 0), 3)
        return res


def _host_ticks():
    """(busy, idle) clock ticks of all CPUs since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]                  # idle, iowait
    busy = sum(v[:8]) - idle            # user .. steal; guest is in user
    return busy, idle


class HostCpu:
    """The host's CPU time over an interval: HostCpu() ... finish() ->
    {"busy_s", "idle_s"}, summed over all CPUs."""

    def __init__(self):
        self.base = _host_ticks()

    def finish(self):
        tick = os.sysconf("SC_CLK_TCK")
        now = _host_ticks()
        return {"busy_s": round((now[0] - self.base[0]) / tick, 2),
                "idle_s": round((now[1] - self.base[1]) / tick, 2)}
