# SPDX-License-Identifier: GPL-2.0
"""libvirt: a guest defined and started through libvirt, its balloon's
hinting set with <qemu:override> (Documentation/libvirt.md), live-migrated
with `virsh migrate --live` between two libvirt hosts (two private libvirtd
daemons on this machine, tests/hb/libvirt.py), its data verified on the
destination."""
from hb import libvirt as lv
from hb.testlib import (CURRENT, Skip, assert_hinted, assert_intact,
                        log_result, need_ours, our_keep_writes_qemu, tag,
                        timeout)
from hb.workloads import Scenario


@tag("libvirt", "compat")
@timeout(600)
def test_libvirt_live_migration_hints_free_pages():
    """Our QEMU on both hosts, the VM opted in to
    free-page-hint-keep-writes, our driver, 1 GiB with 75 % stale free
    memory: the migration completes, the data is intact on the destination
    (kept file, held memory, every ticker pass), neither console has a
    kernel error, the guest hinted in scan mode, the source device cleared
    pages because of the hints, and less than half the guest's RAM went
    over the wire."""
    why = lv.missing()
    if why:
        raise Skip(why)
    need_ours()
    binary = our_keep_writes_qemu()
    sc = Scenario("stale", mem_mib=1024)
    with lv.TwoHosts() as hosts:
        res = lv.migrate_once(hosts, binary, sc, balloon="ours", hint=True,
                              keep_writes=True)
        CURRENT.add("migrations")
        if res.get("ok"):
            CURRENT.add("bytes_verified",
                        (res.get("verify") or {}).get("bytes_verified", 0))
        log_result(res, "libvirt-ours-keep-writes")
        dev = res.get("device_src") or {}
        print(f"    {res.get('virsh_migrate')}")
        print(f"    sent {res.get('transferred_mb')} MB in "
              f"{res.get('total_ms')} ms (downtime {res.get('downtime_ms')} "
              f"ms); guest hint mode {res.get('hint_mode')!r}; source "
              f"device: rounds={dev.get('rounds')} "
              f"cleared-pages={dev.get('cleared-pages')} "
              f"hinted-bytes={dev.get('hinted-bytes')}", flush=True)
        assert_intact(res, "libvirt")
        assert (res.get("verify") or {}).get("bytes_verified", 0) > 0, \
            f"no guest data verified: {res.get('verify')}"
        # Both consoles were read: the source's shows the guest's boot.
        with open(res["consoles"]["src"], errors="replace") as f:
            assert "HB READY" in f.read(), \
                f"source console without the guest's boot: {res['consoles']}"
        assert res.get("hint_mode") == "scan", \
            f"the guest picked mode {res.get('hint_mode')!r}, not scan"
        assert_hinted(res, "scan", "libvirt")
        ram_mb = sc.mem_mib * (1 << 20) / 1e6
        assert 0 < res["transferred_mb"] < ram_mb / 2, \
            (f"{res['transferred_mb']} MB sent for a {ram_mb:.0f} MB guest "
             f"with {sc.stale_pct} % stale free memory")
