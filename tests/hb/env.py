# SPDX-License-Identifier: GPL-2.0
"""Where things are and which stack runs: the tree's paths, the QEMU
binaries of each stack (ours and Debian's), the machine type and guest
kernel a VM gets, QEMU's own Python package (qemu.machine), the log line
and the JSON writer every other module of hb uses.

The stack of the process is the one HB_STACK names (default
DEFAULT_STACK) until use_stack() picks another; OUR_QEMU, STOCK_QEMU and
STACK change with it, so read them as env.OUR_QEMU at the time of use.
"""

import glob
import json
import os
import re
import subprocess
import sys
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(TOP, "build")


def _qemu_python():
    """Locate QEMU's python/ directory (qemu.machine, qemu.qmp)."""
    cands = sorted(glob.glob(os.path.join(BUILD, "src", "pristine", "qemu-*",
                                          "python")))
    # scripts/build-qemu.sh keeps the Debian sources in the machine cache:
    # the drop-in's (10.0) first, so that every stack's tests drive QEMU
    # with the same Python package
    src = os.path.join(os.environ.get("BH_CACHE", "/var/cache/balloon-hint"),
                       "src")
    cands += sorted(glob.glob(os.path.join(src, "qemu-*", "qemu", "python")),
                    key=lambda p: ("/qemu-10.0/" not in p, p))
    if not cands:
        raise RuntimeError("QEMU source tree not found under build/src; "
                           "run scripts/build-qemu.sh first")
    return cands[0]


_QEMU_MACHINE = []


def qemu_machine_class():
    """QEMUMachine from QEMU's own Python package in the QEMU source tree
    (_qemu_python()), which goes first on sys.path on the first call."""
    if not _QEMU_MACHINE:
        sys.path.insert(0, _qemu_python())
        from qemu.machine import QEMUMachine  # pylint: disable=C0415
        _QEMU_MACHINE.append(QEMUMachine)
    return _QEMU_MACHINE[0]


# The QEMU builds.  Ours: build/qemu (10.0).  Debian's own: bookworm-backports'
# 10.0, unpacked by scripts/stock-qemu.sh.  Every binary finds its firmware without -L
# (build-qemu.sh configures --firmwarepath).
OUR_QEMU_10 = os.path.join(BUILD, "qemu", "qemu-system-x86_64")
STOCK_QEMU_10 = os.path.join(BUILD, "stock-qemu-10.0", "qemu-system-x86_64")
# Debian's newest QEMU, 11.1 (trixie-backports), a stock fleet peer: a
# wrapper that runs it in the Debian 13 root with its own libraries,
# modules and firmware (scripts/stock-qemu-11.sh).
STOCK_QEMU_11 = os.path.join(BUILD, "stock-qemu-11.1", "qemu-system-x86_64")
# The upstream base: Debian's 10.2 source with the series (build/qemu-10.2)
# and without it (build/stock-qemu-10.2), built by scripts/build-qemu.sh.
OUR_QEMU_10_2 = os.path.join(BUILD, "qemu-10.2", "qemu-system-x86_64")
STOCK_QEMU_10_2 = os.path.join(BUILD, "stock-qemu-10.2",
                               "qemu-system-x86_64")
STOCK_BINARIES = (STOCK_QEMU_10, STOCK_QEMU_11, STOCK_QEMU_10_2)
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
    if binary != STOCK_QEMU_10:
        return []   # ours has no modules; 11.1 has its own in its root
    return ["unshare", "-m", "sh", "-c",
            'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh",
            modules or STOCK_MODULE_DIR, DEBIAN_MODULE_PATH]


# The stacks balloon-hint supports.  Each one is tested side by side with
# the stock pair of the same versions: Debian's QEMU and the in-tree driver
# of the same guest kernel.  `old_machine` is the newest machine type
# without HINT_KEEP_WRITES (hw_compat): a guest booted there can migrate to
# the stock QEMU of the stack.
STACKS = {
    "10.0": {"ours": OUR_QEMU_10, "stock": STOCK_QEMU_10, "guest": "6.12",
             "old_machine": "pc-i440fx-9.2"},
    "10.2": {"ours": OUR_QEMU_10_2, "stock": STOCK_QEMU_10_2,
             "guest": "6.12", "old_machine": "pc-i440fx-9.2"},
}
DEFAULT_STACK = "10.0"

# The stack of this process (use_stack()): its name, our QEMU and the
# stock QEMU of its versions.
STACK = os.environ.get("HB_STACK") or DEFAULT_STACK
if STACK not in STACKS:
    raise ValueError(f"unknown stack {STACK!r} in HB_STACK; known: "
                     f"{sorted(STACKS)}")


def _ours(name):
    """Our QEMU of stack `name`: HB_OUR_QEMU if set (another build of the
    same series: the ASan/UBSan one of `make check SANITIZE=1`)."""
    return os.environ.get("HB_OUR_QEMU") or STACKS[name]["ours"]


OUR_QEMU = _ours(STACK)
STOCK_QEMU = STACKS[STACK]["stock"]

# HB_SANITIZE=1 (`make check SANITIZE=1`): our QEMU is built with ASan and
# UBSan.  Every VM then ends with a graceful quit, so that LeakSanitizer
# runs at exit, and the test fails on any sanitizer report (hb.vm).
SANITIZE = os.environ.get("HB_SANITIZE") == "1"

# The UBSan reports of upstream code that no test fails on, one per entry
# with its reason (tests/hb/ubsan.supp), for every QEMU this process starts.
UBSAN_SUPPRESSIONS = os.path.join(os.path.dirname(__file__), "ubsan.supp")


def ubsan_options(suppress=True):
    """UBSAN_OPTIONS of the QEMUs started from here: the caller's own, with
    UBSAN_SUPPRESSIONS first unless `suppress` is false."""
    ours = f"suppressions={UBSAN_SUPPRESSIONS}"
    own = [o for o in _UBSAN_OWN.split(":") if o and o != ours]
    return ":".join(([ours] if suppress else []) + own)


_UBSAN_OWN = os.environ.get("UBSAN_OPTIONS", "")
os.environ["UBSAN_OPTIONS"] = ubsan_options()


def use_stack(name):
    """Make `name` (a key of STACKS: "10.0") the stack of this process:
    OUR_QEMU, STOCK_QEMU and the default guest kernel, and HB_STACK of
    the processes it starts."""
    global STACK, OUR_QEMU, STOCK_QEMU  # pylint: disable=global-statement
    if name not in STACKS:
        raise ValueError(f"unknown stack {name!r}; known: {sorted(STACKS)}")
    STACK = name
    OUR_QEMU = _ours(name)
    STOCK_QEMU = STACKS[name]["stock"]
    os.environ["HB_STACK"] = name


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
    """The guest kernel's image, as setup unpacked it (never installed)."""
    kver = guest_kver(series)
    cache = os.environ.get("BH_CACHE", "/var/cache/balloon-hint")
    return f"{cache}/kernels/{kver}/boot/vmlinuz-{kver}"


def pvh_machine(machine):
    """Whether QEMU starts a PVH kernel on `machine`: not on the i440fx
    and q35 types before 4.0, whose compat settings turn PVH off (QEMU
    then takes the ELF for a bzImage and refuses it: "linux kernel too old
    to load a ram disk")."""
    m = re.search(r"-(\d+)\.(\d+)$", machine or "")
    return not m or (int(m.group(1)), int(m.group(2))) >= (4, 0)


def boot_image(kernel, machine=None):
    """What a test VM on `machine` passes to -kernel for the guest kernel
    `kernel` (guest_kernel()'s bzImage): the same kernel uncompressed,
    with its PVH entry point, when `make images` made one
    (scripts/mk-boot-image.sh: build/vmlinux-KVER, newer than the
    bzImage) and the machine type starts PVH kernels, which QEMU does
    without the bzImage's real-mode setup and decompression; else
    `kernel`."""
    name = os.path.basename(kernel)
    if not name.startswith("vmlinuz-") or not pvh_machine(machine):
        return kernel
    elf = os.path.join(BUILD, "vmlinux-" + name[len("vmlinuz-"):])
    try:
        if os.path.getmtime(elf) >= os.path.getmtime(kernel):
            return elf
    except OSError:
        pass
    return kernel


# The debug kernel (KASAN, lockdep, ...: scripts/debug-kernel.sh) keeps
# far more of the guest's RAM than a Debian kernel: KASAN's shadow, an
# eighth of it, and about 130 MiB of debug data besides, against about 57
# MiB of a 1 GiB guest for Debian's 6.12 (MemTotal 765 MiB of 1024, 545 of
# 768, against 967 of 1024).  A guest that boots it gets that much more
# RAM, so a workload sized for a guest of mem_mib fits as it does there.
DEBUG_KERNEL_SUFFIX = "-hbdebug"


def guest_ram_mib(kernel, mem_mib):
    """The RAM (-m, MiB) of a guest of mem_mib that boots `kernel`."""
    if DEBUG_KERNEL_SUFFIX not in os.path.basename(kernel or ""):
        return mem_mib
    return (mem_mib + 80) * 8 // 7


def guest_initrd(series=None):
    """The test image of that kernel (`make images` builds both)."""
    return os.path.join(BUILD, f"initramfs-{guest_kver(series)}.cpio.gz")


def log(msg):
    print(f"[harness {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr,
          flush=True)


def save_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=str)
    os.replace(path + ".tmp", path)
