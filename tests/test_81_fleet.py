# SPDX-License-Identifier: GPL-2.0
"""A fleet that mixes our hosts with stock ones (Documentation/host-qemu.md,
"Fleet policy").

Our QEMU is a drop-in replacement for Debian's: the same devices, network
backends and machine types, so any command line that runs on Debian's
binary runs on ours.  With the device defaults (free-page-hint on,
free-page-hint-keep-writes at its default, off) and the machine's default
devices (a NIC on user networking), a guest moves between our QEMU and
Debian's in both directions, with the in-tree driver and with ours, its
data verified after every hop.  Only a VM opted in with
free-page-hint-keep-writes=on is tied to our hosts: a migration of it to a
stock host fails cleanly, the guest keeps running on the source.

A hop whose source is the stock QEMU runs stock's hinting: its migration
must complete (our destination must accept stock's stream), but damaged
data after it is stock's own and is recorded as a reference loss, not
failed."""
import os
import re
import subprocess
import tempfile

from hb import env
from hb.env import BUILD, module_wrapper
from hb.migration import wait_running
from hb.vm import balloon_features
from hb.rigs import MEM, Rig, held
from hb.testlib import (CURRENT, need_ours, our_qemu, record_reference,
                        tag, timeout)

KEEP_WRITES_BIT = 16
MB = 1e6


def _help_of(binary, what, modules=None):
    """The names `binary -WHAT help` lists; a stock binary runs with
    `modules` (default: its own) at Debian's module path, as an installed
    qemu-system-x86 with its recommended module packages has them."""
    cmd = module_wrapper(binary, modules) + [binary, f"-{what}", "help"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                       check=False)
    assert p.returncode == 0 and not p.stderr.strip(), \
        f"{' '.join(cmd)}: rc={p.returncode} {p.stderr[-800:]}"
    return _help_text_names(p.stdout)


@tag("fleet", "compat", "lint")
def test_drop_in_same_devices_backends_machines_as_debian():
    """-device help, -netdev help and -machine help of our QEMU list the
    same names as Debian's QEMU 10.0 with its module packages, and the
    comparison sees a device that is missing."""
    ours = our_qemu()
    for what in ("device", "netdev", "machine"):
        theirs = _help_of(env.STOCK_QEMU, what)
        mine = _help_of(ours, what)
        assert len(theirs) > 5, f"-{what} help of Debian's QEMU: {theirs}"
        missing = sorted(theirs - mine)
        extra = sorted(mine - theirs)
        print(f"    -{what} help: Debian {len(theirs)}, ours {len(mine)}")
        assert not missing, f"-{what}: ours lacks {missing}"
        assert not extra, f"-{what}: ours has more than Debian's: {extra}"
    # The comparison sees a missing device: without its module folder,
    # Debian's binary lacks the devices of its module packages.
    empty = tempfile.mkdtemp(prefix="hb-nomodules-",
                             dir=os.path.join(BUILD, "tmp"))
    try:
        bare = _help_of(env.STOCK_QEMU, "device", modules=empty)
    finally:
        os.rmdir(empty)
    gone = _help_of(ours, "device") - bare
    assert {"qxl-vga", "usb-redir", "usb-host"} <= gone, sorted(gone)
    assert "user" in _help_of(ours, "netdev")


def _help_text_names(text):
    """The first word of every entry of a `help` listing: `name "e1000"`
    for devices, the backend name for netdevs, the machine name."""
    names = set()
    for ln in text.splitlines():
        m = re.match(r'^name "([^"]+)"', ln)
        if m:
            names.add(m.group(1))
            continue
        if not ln.strip() or ln.endswith(":") or \
                ln.startswith(("Available", "Supported")):
            continue
        first = ln.split()[0]
        if re.fullmatch(r"[a-z][A-Za-z0-9_.-]*", first):
            names.add(first)
    return names


def _hop(rig, binary, label, stock_source, **over):
    """Migrate the rig's guest to `binary` and verify it.  A hop whose
    source is the stock QEMU is a reference for its data: recorded, not
    asserted (its completion is asserted: our destination must accept
    stock's stream).  Returns whether the data arrived intact.  over: the
    destination VM's settings (machine=...)."""
    info = rig.migrate(binary=binary, **over)
    mb = (info.get("ram") or {}).get("transferred", 0) / MB
    hinted = None if stock_source else rig.hinted_pages()
    if stock_source:
        try:
            rig.verify(label)
            ok = True
        except AssertionError as e:
            ok = False
            print(f"    reference: stock-source hop {label} damaged: {e}")
        # (no workdir: the rig keeps its folder until the test ends)
        record_reference({"ok": ok, "status": info.get("status"),
                          "data_intact": ok}, f"fleet-{label}")
        if not ok:
            return False
    else:
        # With the device defaults a round runs on stock's timing (no
        # pre-send wait): whether its hints arrive before the pages they
        # name were sent is a race, as on stock, so the pages cleared are
        # printed, not asserted.  That the guest hinted at all is asserted
        # by the round trip (bytes_hinted).
        rig.verify(label)
    print(f"    {label}: {mb:.0f} MB, data verified"
          + (f", {hinted} pages hinted away" if hinted is not None else ""))
    return True


def _round_trip(driver, start, stock=None, machine=None):
    """A guest with the machine's default devices and the balloon's
    defaults (free-page-hint=on, keep-writes at its default) boots on
    `start` ("ours" or "stock") and goes to the other QEMU and back.
    stock: the stock QEMU (default: the stack's, Debian's 10.0); machine:
    the machine type of every VM (default: the one `pc` stands for)."""
    if driver == "ours":
        need_ours()
    bins = {"ours": our_qemu(), "stock": stock or env.STOCK_QEMU}
    other = "stock" if start == "ours" else "ours"
    over = {"machine": machine} if machine else {}
    with Rig(f"fleet-{driver}-{start}", balloon=driver, mem_mib=MEM,
             binary=bins[start], keep_writes=False, defaults=True) as rig:
        rig.boot(**over)
        f = balloon_features(rig.vm)
        assert len(f) <= KEEP_WRITES_BIT or f[KEEP_WRITES_BIT] == "0", \
            f"KEEP_WRITES negotiated with the device defaults: {f}"
        if driver == "ours":
            assert rig.stats().get("mode") == "alloc", rig.stats()
        path = [start, other, start]
        for a, b in zip(path, path[1:]):
            if not _hop(rig, bins[b], f"{driver} {a}->{b}",
                        stock_source=a == "stock", **over):
                return
        if driver == "ours":
            s = rig.stats()
            assert s.get("bytes_hinted", 0) > 0 and held(s) == 0, s


@tag("fleet", "compat")
@timeout(900)
def test_rolling_upgrade_intree_driver_from_our_host():
    """In-tree driver: ours -> stock -> ours."""
    _round_trip("intree", "ours")


@tag("fleet", "compat")
@timeout(900)
def test_rolling_upgrade_intree_driver_from_stock_host():
    """In-tree driver: stock -> ours -> stock."""
    _round_trip("intree", "stock")


@tag("fleet", "compat")
@timeout(900)
def test_rolling_upgrade_our_driver_from_our_host():
    """Our driver (alloc mode without the opt-in): ours -> stock -> ours."""
    _round_trip("ours", "ours")


@tag("fleet", "compat")
@timeout(900)
def test_rolling_upgrade_our_driver_from_stock_host():
    """Our driver: stock -> ours -> stock."""
    _round_trip("ours", "stock")


def _need_stock_11():
    assert os.access(env.STOCK_QEMU_11, os.X_OK), \
        f"Debian's QEMU 11.1 is not set up ({env.STOCK_QEMU_11}: " \
        "scripts/stock-qemu-11.sh)"
    return env.STOCK_QEMU_11


# Debian's newest QEMU (11.1, trixie-backports) as a fleet peer: a fleet
# upgrades by moving guests to a newer QEMU with the machine type pinned, so
# each round trip runs on a 10.0 machine type that both QEMUs have.  11.1
# checks at load that each virtqueue fits the size the device allocated,
# so any guest-visible difference of ours from stock fails the hop.  Our
# QEMU is the stack's: 10.0, and for the runs tagged upstream_base also
# the series on 10.2 (NAME[10.2]).
def _newest_peer(driver, start, machine, upstream):
    tags = ("fleet", "compat", "stock11") + \
        (("upstream_base",) if upstream else ())

    @tag(*tags)
    @timeout(900)
    def t():
        _round_trip(driver, start, _need_stock_11(), machine)
    other = "stock 11.1" if start == "ours" else "ours"
    first = "ours" if start == "ours" else "stock 11.1"
    t.__doc__ = (f"{'Our' if driver == 'ours' else 'In-tree'} driver, "
                 f"{machine}: {first} -> {other} -> {first}.")
    who = "our" if driver == "ours" else driver
    t.__name__ = f"test_newest_stock_peer_{who}_driver_{machine.split('-')[1]}"
    return t


# Each driver on each machine type, starting on ours on i440fx and on
# stock on q35; on 10.2 each driver once, the one on i440fx, the other on
# q35.
for _args in (("intree", "ours", "pc-i440fx-10.0", True),
              ("ours", "ours", "pc-i440fx-10.0", False),
              ("intree", "stock", "pc-q35-10.0", False),
              ("ours", "stock", "pc-q35-10.0", True)):
    _t = _newest_peer(*_args)
    globals()[_t.__name__] = _t


@tag("fleet", "compat", "keep_writes")
@timeout(600)
def test_opted_in_guest_stays_on_source_when_destination_is_stock():
    """free-page-hint-keep-writes=on, our driver in scan mode: a migration
    to Debian's QEMU fails, the destination names the feature bit it does
    not know, and the guest keeps running on the source with its data;
    a migration to our QEMU afterwards succeeds."""
    need_ours()
    with Rig("fleet-opted-in", balloon="ours", keep_writes=True,
             defaults=True) as rig:
        rig.boot()
        f = balloon_features(rig.vm)
        assert len(f) > KEEP_WRITES_BIT and f[KEEP_WRITES_BIT] == "1", f
        assert rig.stats().get("mode") == "scan", rig.stats()
        rig.start_migration(binary=env.STOCK_QEMU, keep_writes=False,
                            extra_caps=("return-path",))
        rig.migration_fault()
        # What the two ends print about the refusal, and only that.
        rig.allow_qemu_errors += [r"Features 0x[0-9a-f]+ unsupported",
                                  r"Sibling indicated error"]
        dst = rig.dst
        info = rig.wait_end(300)
        assert info["status"] == "failed", info
        dst.machine.wait(timeout=60) if dst.machine.is_running() else None
        err = dst.log_text()
        m = re.search(r"Features (0x[0-9a-f]+) unsupported\. "
                      r"Allowed features: (0x[0-9a-f]+)", err)
        assert m, f"the stock destination did not name the features: " \
                  f"{err[-800:]}"
        unknown = int(m.group(1), 16) & ~int(m.group(2), 16)
        assert unknown == 1 << KEEP_WRITES_BIT, \
            f"unsupported features {unknown:#x}, not bit {KEEP_WRITES_BIT}"
        print(f"    stock destination: {m.group(0)} -> unknown bit "
              f"{KEEP_WRITES_BIT} (VIRTIO_BALLOON_F_HINT_KEEP_WRITES); "
              f"source error: {info.get('error-desc')}")
        rig.dst = None
        wait_running(rig.vm)
        CURRENT.add("faults")
        rig.verify("after the refused migration, on the source")
        rig.migrate()
        assert rig.hinted_pages() > 0, rig.last_counters
        rig.verify("opted in: ours -> ours")
