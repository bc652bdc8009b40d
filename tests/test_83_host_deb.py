# SPDX-License-Identifier: GPL-2.0
"""The Debian package of our QEMU (`make host-deb`): it installs beside
Debian's QEMU with apt, its files at paths no other package uses, its
dependencies those of its libraries (dpkg-shlibdeps) and its firmware
packages; libvirt migrates a guest with the installed binary as
<emulator> (the machinery of test_82_libvirt.py), its data verified on
the destination; `apt-get remove` and `apt-get purge` take it all away,
and the machine is as the test found it: the same packages, the same
files, Debian's qemu-system-x86_64 (if any) untouched.

A machine where the package is already installed is left alone: the test
skips, saying so."""
import glob
import hashlib
import os
import re
import shutil
import tempfile

from hb import env
from hb import libvirt as lv
from hb.hostfiles import APT
from hb.hostfiles import dpkg_set as _dpkg_set
from hb.testlib import (CURRENT, TOP, Skip, assert_hinted, assert_intact,
                        cleanup, log_result, need_ours, offers_keep_writes,
                        run_cleanup, sh, tag, timeout)
from hb.workloads import Scenario

PKG = "balloon-hint-qemu"
EMULATOR = "/usr/lib/balloon-hint/qemu-system-x86_64"
LINK = "/usr/bin/balloon-hint-qemu-system-x86_64"
FILES = {EMULATOR, LINK, "/usr/lib/balloon-hint",
         f"/usr/share/doc/{PKG}", f"/usr/share/doc/{PKG}/copyright",
         f"/usr/share/doc/{PKG}/changelog.Debian.gz",
         f"/usr/share/doc/{PKG}/SERIES"}
FIRMWARE = ("qemu-system-data", "seabios", "ipxe-qemu")
# Debian's own binaries, which the package must not touch.
DEBIAN_QEMU = ("/usr/bin/qemu-system-x86_64", "/usr/bin/qemu-system-i386")


def _known_to_dpkg():
    r = sh(f"dpkg-query -W -f '${{db:Status-Abbrev}}' {PKG}")
    return r.returncode == 0 and r.stdout.strip() not in ("", "un")


def _sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files():
    """What is at the package's paths and Debian's QEMU binaries."""
    out = {}
    for p in sorted(FILES) + list(DEBIAN_QEMU):
        if os.path.islink(p):
            out[p] = ("link", os.readlink(p))
        elif os.path.isdir(p):
            out[p] = ("dir",)
        elif os.path.exists(p):
            out[p] = ("file", _sha(p))
    return out


def _undo():
    """Purge the package in any state (dpkg itself: also after an apt-get
    killed half-way).  Harmless when it is not there."""
    if _known_to_dpkg():
        r = sh(f"dpkg --purge {PKG}")
        assert not _known_to_dpkg(), \
            f"dpkg --purge {PKG} failed: {(r.stdout + r.stderr)[-2000:]}"


def _check_package(deb, ours):
    """Fields and contents of the built package."""
    def field(name):
        r = sh(f"dpkg-deb -f {deb} {name}")
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()
    assert field("Package") == PKG
    with open(os.path.join(os.path.dirname(ours), "VERSION")) as f:
        assert field("Version") == f.read().strip() + "+bh1"
    deps = [d.strip() for d in field("Depends").split(",")]
    names = {re.split(r"[ (|]", d)[0] for d in deps}
    for fw in FIRMWARE:
        assert fw in names, (fw, deps)
    # from dpkg-shlibdeps: the C library and glib at least, each versioned
    assert any(re.fullmatch(r"libc6 \(>= [^)]+\)", d) for d in deps), deps
    assert any(d.startswith("libglib2.0-0 (>= ") for d in deps), deps
    r = sh(f"dpkg-deb -c {deb}")
    assert r.returncode == 0, r.stderr
    paths = set()
    for ln in r.stdout.splitlines():
        p = ln.split()[5].lstrip(".").rstrip("/")
        if p and p not in ("/usr", "/usr/lib", "/usr/bin", "/usr/share",
                           "/usr/share/doc"):
            paths.add(p)
    assert paths == FILES, sorted(paths ^ FILES)
    assert f"{LINK} -> ../lib/balloon-hint/qemu-system-x86_64" in \
        r.stdout.replace("./usr", "/usr"), r.stdout
    # no file of it belongs to another package
    for p in sorted(FILES - {"/usr/lib/balloon-hint",
                             f"/usr/share/doc/{PKG}"}):
        owner = sh(f"dpkg-query -S {p}")
        assert owner.returncode != 0, f"{p} belongs to {owner.stdout}"
    return deps


@tag("libvirt", "packaging")
@timeout(900)
def test_host_deb_installs_beside_debian_qemu_migrates_and_purges():
    if os.geteuid() != 0:
        raise Skip("needs root (apt-get)")
    why = lv.missing()
    if why:
        raise Skip(why)
    if _known_to_dpkg():
        raise Skip(f"{PKG} is already on this machine: the test installs "
                   "and purges it, so it leaves this one alone")
    need_ours()
    ours = env.OUR_QEMU_10
    assert os.access(ours, os.X_OK), f"no {ours} (make qemu)"
    d = tempfile.mkdtemp(prefix="hb-host-deb-")
    try:
        r = sh(f"BH_DEB_DIR={d} bash {TOP}/scripts/mk-host-deb.sh")
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        debs = glob.glob(f"{d}/{PKG}_*_amd64.deb")
        assert len(debs) == 1, (os.listdir(d), r.stdout)
        deb = debs[0]
        deps = _check_package(deb, ours)
        print(f"    built {os.path.basename(deb)}; Depends: "
              f"{', '.join(deps)}", flush=True)
        # the premise: apt needs nothing but the package (the libraries
        # and firmware are there), so the machine can be put back
        sim = sh(f"{APT} -s install {deb}")
        assert sim.returncode == 0, (sim.stdout + sim.stderr)[-2000:]
        inst = re.findall(r"^Inst (\S+)", sim.stdout, re.M)
        if inst != [PKG]:
            raise Skip(f"installing {PKG} would also install {inst}")
        before = {"dpkg": _dpkg_set(), "files": _files()}
        assert not (set(before["files"]) & FILES), before["files"]
        undo = cleanup(_undo)
        try:
            r = sh(f"{APT} install {deb}")
            assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
            new = sorted(_dpkg_set() - before["dpkg"])
            assert len(new) == 1 and new[0].startswith(f"{PKG}\t"), new
            after = _files()
            # what the checks after removal compare: they see the package
            assert set(after) - set(before["files"]) == FILES, \
                sorted(set(after) ^ set(before["files"]))
            for p in DEBIAN_QEMU:
                assert after.get(p) == before["files"].get(p), p
            assert after[EMULATOR] == ("file", _sha(ours)), after[EMULATOR]
            assert os.path.realpath(LINK) == EMULATOR
            v = sh(f"{LINK} --version")
            assert v.returncode == 0 and "QEMU emulator version" in v.stdout, \
                v.stdout + v.stderr
            assert offers_keep_writes(EMULATOR), EMULATOR
            _migrate_with(EMULATOR)
            for how in ("remove", "purge"):
                r = sh(f"{APT} {how} {PKG}")
                assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
                assert not _known_to_dpkg(), sh(f"dpkg -l {PKG}").stdout
                assert _files() == before["files"], \
                    f"after apt-get {how}: {_files()} != {before['files']}"
                print(f"    apt-get {how}: nothing left", flush=True)
                if how == "remove":
                    r = sh(f"{APT} install {deb}")
                    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
            assert _dpkg_set() == before["dpkg"], \
                f"dpkg -l differs: +{sorted(_dpkg_set() - before['dpkg'])} " \
                f"-{sorted(before['dpkg'] - _dpkg_set())}"
            assert not os.path.lexists("/usr/lib/balloon-hint")
        finally:
            run_cleanup(undo)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _migrate_with(emulator):
    """test_82_libvirt's migration with the installed binary as
    <emulator>: QEMU on both hosts is that file."""
    sc = Scenario("stale", mem_mib=1024)
    with lv.TwoHosts() as hosts:
        res = lv.migrate_once(hosts, emulator, sc, balloon="ours",
                              hint=True, keep_writes=True)
        CURRENT.add("migrations")
        if res.get("ok"):
            CURRENT.add("bytes_verified",
                        (res.get("verify") or {}).get("bytes_verified", 0))
        log_result(res, "libvirt-installed-emulator")
        assert f"<emulator>{emulator}</emulator>" in res["domain_xml"]
        dst = lv.Domain(hosts.b, "hbguest")
        pid = dst.pid() if res.get("status") == "completed" else None
        exe = os.readlink(f"/proc/{pid}/exe") if pid else None
        print(f"    {res.get('virsh_migrate')}\n    sent "
              f"{res.get('transferred_mb')} MB in {res.get('total_ms')} ms; "
              f"guest hint mode {res.get('hint_mode')!r}; destination QEMU "
              f"{exe}", flush=True)
        assert_intact(res, "libvirt, installed emulator")
        assert (res.get("verify") or {}).get("bytes_verified", 0) > 0, \
            res.get("verify")
        assert exe == emulator, f"the destination runs {exe}"
        assert res.get("hint_mode") == "scan", res.get("hint_mode")
        assert_hinted(res, "scan", "libvirt, installed emulator")
        ram_mb = sc.mem_mib * (1 << 20) / 1e6
        assert 0 < res["transferred_mb"] < ram_mb / 2, res["transferred_mb"]
