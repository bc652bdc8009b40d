# SPDX-License-Identifier: GPL-2.0
"""The state of the host's free memory when a destination QEMU starts.

A destination loads the guest's memory into pages it has never touched.
On a bare-metal host those pages come from free memory that is resident;
on this machine, itself a VM whose own host takes back the memory it
frees, they may first have to be faulted in from the outer host, which
costs more than the load.  A timed migration names which it measured:

  warm  the host's free memory is resident: warm_host_memory() touches
        and frees memory outside QEMU right before the destination
        starts, as a real host's free memory already is;
  cold  nothing is done: the destination finds whatever the run before
        left, as on a nested host that reclaims freed memory.

No QEMU option is involved (-mem-prealloc is a separate, labelled extra).
"""
import subprocess
import sys

from .env import log

DST_MEMORY = ("warm", "cold")

# Touch and free this much more than the guest's memory: the destination's
# RAM, its page tables and QEMU's own buffers.
WARM_MARGIN_MIB = 2048
# ... but leave this much of the host's available memory alone.
HOST_RESERVE_MIB = 2048

_TOUCH = ("import mmap, sys\n"
          "n = int(sys.argv[1]) << 20\n"
          "m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS"
          " | mmap.MAP_POPULATE)\n"
          "m.close()\n")


def available_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) >> 10
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def warm_mib(guest_mib):
    """How much warm_host_memory() touches for a guest of guest_mib."""
    return max(0, min(guest_mib + WARM_MARGIN_MIB,
                      available_mib() - HOST_RESERVE_MIB))


def warm_host_memory(guest_mib):
    """Fault in, then free, enough host memory for a destination of a
    guest of guest_mib, in a process of its own (so nothing stays mapped
    here).  Returns the MiB touched."""
    mib = warm_mib(guest_mib)
    if mib:
        subprocess.run([sys.executable, "-c", _TOUCH, str(mib)], check=True,
                       timeout=300)
        log(f"host memory warm: {mib} MiB touched and freed")
    return mib
