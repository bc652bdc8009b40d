# SPDX-License-Identifier: GPL-2.0
"""What a guest and the migration stream see of the balloon's queues: with
device defaults our QEMU must match stock QEMU of the same base, queue by
queue, on every machine type both have.  A newer stock QEMU refuses a
stream whose vring is larger than the queue it allocated ("VQ 0 vring.num
1024 exceeds allocated max 128"), so any difference here breaks moving a
guest from our host to a newer stock one.

Each queue is read with x-query-virtio-queue-status: first with the guest
not started (the sizes the device allocated), then on a booted guest with
the in-tree driver (the sizes the driver configured)."""
import concurrent.futures
import os
import subprocess

from hb import env
from hb.env import machine_for
from hb.rigs import tmpdir
from hb.testlib import CURRENT, our_qemu, tag
from hb.vm import VM

BALLOON_PATH = "/machine/peripheral/balloon0/virtio-backend"
# The queue fields a guest or the stream sees (addresses and indexes are
# the guest's and change while it runs)
SIZE_FIELDS = ("vring-num", "vring-num-default", "vring-align")

# device configurations: (label, hint, extra device properties)
CONFIGS = [
    ("defaults", False, ""),
    ("free-page-hint=on", True, ""),
    ("free-page-hint=on,free-page-reporting=on", True,
     "free-page-reporting=on"),
]


def _machines(binary):
    """The machine types to compare: the `pc` alias and its q35 twin."""
    pc = machine_for(binary)
    return [pc, pc.replace("pc-i440fx-", "pc-q35-")]


def queue_sizes(vm):
    """[{field: value}] for every queue of the balloon, in queue order."""
    queues = []
    for n in range(16):
        try:
            st = vm.qmp("x-query-virtio-queue-status", path=BALLOON_PATH,
                        queue=n)
        except Exception:  # pylint: disable=broad-except
            break          # past the last queue
        queues.append({k: st.get(k) for k in ("queue-index",) + SIZE_FIELDS})
    return queues


def _sizes(binary, machine, hint, props, boot, label):
    d = tmpdir(f"vq-{label}")
    initrd = None
    if not boot:
        # not started (-S): the guest never runs, so no test image is needed
        initrd = os.path.join(d, "empty.img")
        with open(initrd, "wb") as f:
            f.write(b"\0" * 512)
    vm = VM(d, "vq", binary, 256, "intree", hint, device_props=props,
            keep_writes=False, machine=machine, initrd=initrd,
            extra_args=() if boot else ("-S",))
    try:
        if boot:
            vm.boot()
        else:
            vm.launch()
        q = queue_sizes(vm)
        errs = vm.kernel_errors() if boot else []
    finally:
        vm.end()
    assert not errs, f"guest kernel errors: {errs[:5]} ({d})"
    qerr = vm.qemu_errors()
    assert not qerr, f"QEMU reported errors ({d}): {qerr}"
    subprocess.call(["rm", "-rf", d])
    return q


def _compare(boot):
    ours, stock = our_qemu(), env.STOCK_QEMU
    problems = []
    for machine in _machines(stock):
        for label, hint, props in CONFIGS:
            # stock and ours side by side (a boot keeps about one host CPU
            # busy)
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                runs = [pool.submit(_sizes, binary, machine, hint, props,
                                    boot, who)
                        for binary, who in ((stock, "stock"), (ours, "ours"))]
                a, b = (r.result() for r in runs)
            # premise: every queue was read, inflate/deflate/stats at least
            assert len(a) >= 3 and all(q["vring-num-default"] for q in a), a
            CURRENT.add("queues_compared", len(a))
            print(f"    {machine} {label}: stock "
                  f"{[q['vring-num'] for q in a]} ours "
                  f"{[q['vring-num'] for q in b]}", flush=True)
            if a != b:
                problems.append((machine, label, {"stock": a, "ours": b}))
    assert not problems, problems


@tag("reliability", "compat")
def test_queue_sizes_match_stock_with_device_defaults():
    """Every balloon queue as the device allocates it: ours == stock.  The
    comparison sees a difference when there is one: stock's own balloon
    with and without free-page-reporting differ (a fifth queue)."""
    _compare(boot=False)
    machine = machine_for(env.STOCK_QEMU)
    plain = _sizes(env.STOCK_QEMU, machine, True, "", False, "probe")
    more = _sizes(env.STOCK_QEMU, machine, True, "free-page-reporting=on",
                  False, "probe")
    assert plain != more and len(more) == len(plain) + 1, (plain, more)


@tag("reliability", "compat")
def test_queue_sizes_match_stock_on_a_running_guest():
    """Every balloon queue as the in-tree driver configured it: ours ==
    stock."""
    _compare(boot=True)
