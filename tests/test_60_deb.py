# SPDX-License-Identifier: GPL-2.0
"""The Debian package of the guest driver (`make deb`): it installs with
apt, DKMS builds and installs our module for every installed kernel that
has headers (both guest kernels here) and skips, without failing, a kernel
without them; `apt-get remove` and `apt-get purge` each take it all away
again.  The machine is left as the test found it: the same packages, no
DKMS tree of ours, nothing new under /lib/modules/*/updates.

A machine where the package or any DKMS tree of virtio_balloon is already
there (a user's install, `make -C guest dkms-install`) is left alone: the
test skips, saying so."""
import glob
import os
import re
import shutil

from hb.hostfiles import dkms_version
from hb.testlib import (BUILD, TOP, Skip, cleanup, run_cleanup, sh, tag,
                        timeout)

PKG = "balloon-hint-dkms"
MOD = "virtio_balloon"
AUTHOR = "balloon-hint project"
# DKMS's own module signing key, made by its first build on a machine and
# shared by every DKMS module: not the package's; the test removes it only
# if it made it.
DKMS_KEYS = ("/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub")
# A kernel with a module tree but no headers, which DKMS must skip.
NOHDR_KVER = "0.0.0-0-hbtest-noheaders"
APT = ("DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "
       "-y -q --no-install-recommends")


def _dpkg_set():
    r = sh("dpkg-query -W "
           "-f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'")
    assert r.returncode == 0, r.stderr
    return set(r.stdout.splitlines())


def _tree(*roots):
    """Every path (files and directories) under the roots."""
    out = set()
    for root in roots:
        for top in glob.glob(root):
            out.add(top)
            for d, dirs, files in os.walk(top):
                out.update(os.path.join(d, n) for n in dirs + files)
    return out


def _updates():
    return _tree("/lib/modules/*/updates")


def _known_to_dpkg():
    r = sh(f"dpkg-query -W -f '${{db:Status-Abbrev}}' {PKG}")
    return r.returncode == 0 and r.stdout.strip() not in ("", "un")


def _dkms_status():
    r = sh(f"dkms status -m {MOD}")
    return [ln for ln in r.stdout.splitlines() if ln.startswith(f"{MOD}/")]


def _dkms_kos():
    return glob.glob(f"/lib/modules/*/updates/dkms/{MOD}.ko*")


def _kernels_with_headers():
    return sorted(k for k in os.listdir("/lib/modules")
                  if os.path.exists(f"/lib/modules/{k}/build/Makefile"))


def _preconditions():
    if os.geteuid() != 0:
        raise Skip("needs root (apt-get, dkms)")
    for tool in ("apt-get", "dkms", "dpkg-buildpackage", "dh_dkms"):
        if not shutil.which(tool):
            raise Skip(f"{tool} not installed (scripts/setup.sh installs it)")
    if _known_to_dpkg():
        ver = sh(f"dpkg-query -W -f '${{Version}} ${{db:Status-Abbrev}}' "
                 f"{PKG}").stdout.strip()
        raise Skip(f"{PKG} is already on this machine ({ver}): the test "
                   "installs and purges it, so it leaves this one alone")
    theirs = (glob.glob(f"/usr/src/{MOD}-*")
              + glob.glob(f"/var/lib/dkms/{MOD}")
              + _dkms_status() + _dkms_kos())
    if theirs:
        raise Skip(f"DKMS already has {MOD} on this machine ({theirs[:3]}; "
                   "`make -C guest dkms-remove` removes a staged one): the "
                   "test leaves it alone")
    if os.path.lexists(f"/lib/modules/{NOHDR_KVER}"):
        raise Skip(f"/lib/modules/{NOHDR_KVER} exists: not the test's")
    kvers = [sh(f"{TOP}/scripts/guest-kver.sh {s}").stdout.strip()
             for s in ("6.1", "6.12")]
    with_headers = _kernels_with_headers()
    for k in kvers:
        if k not in with_headers:
            raise Skip(f"guest kernel {k!r} has no headers "
                       "(scripts/setup.sh installs them)")
    return with_headers


def _check_installed(ver, kvers, out):
    assert f"{PKG} (" in out and "Setting up" in out, out[-3000:]
    # The postinst builds for every kernel of /lib/modules, not only the
    # running one and the newest: never the "chroot's host" guess.
    assert "chroot's host" not in out, out[-3000:]
    status = _dkms_status()
    for k in kvers:
        assert any(ln.startswith(f"{MOD}/{ver}, {k}, ")
                   and ln.endswith(": installed") for ln in status), \
            f"dkms status does not show {MOD}/{ver} installed for {k}: " \
            f"{status}\n{out[-3000:]}"
    assert not any(f", {NOHDR_KVER}," in ln for ln in status), status
    assert re.search(rf"Module build for kernel {re.escape(NOHDR_KVER)} "
                     "was skipped", out), out[-3000:]
    for k in kvers:
        kos = glob.glob(f"/lib/modules/{k}/updates/dkms/{MOD}.ko*")
        assert len(kos) == 1, (k, kos)
        info = sh(f"modinfo {kos[0]}")
        assert info.returncode == 0, info.stderr
        fields = {}
        for ln in info.stdout.splitlines():
            key, _, val = ln.partition(":")
            fields.setdefault(key.strip(), []).append(val.strip())
        # The in-tree module has neither a version nor our author.
        assert fields.get("version") == [ver], (k, info.stdout)
        assert fields.get("author") == [AUTHOR], (k, info.stdout)
        assert fields.get("vermagic", [""])[0].startswith(f"{k} "), \
            (k, info.stdout)
        assert not any(p.startswith("fault_inject")
                       for p in fields.get("parm", [])), (k, info.stdout)
        # depmod made it the one modprobe loads for that kernel
        r = sh(f"modinfo -k {k} -F filename {MOD}")
        assert r.stdout.strip() == kos[0], (k, r.stdout, r.stderr)


def _check_gone(ver, before):
    assert not _known_to_dpkg(), sh(f"dpkg -l {PKG}").stdout
    assert not _dkms_status(), _dkms_status()
    for p in (f"/usr/src/{MOD}-{ver}", f"/var/lib/dkms/{MOD}"):
        assert not os.path.lexists(p), f"{p} left behind"
    assert _updates() == before["updates"], \
        f"left under /lib/modules/*/updates: " \
        f"{sorted(_updates() - before['updates'])}"
    assert _dpkg_set() == before["dpkg"], \
        f"dpkg -l differs: +{sorted(_dpkg_set() - before['dpkg'])} " \
        f"-{sorted(before['dpkg'] - _dpkg_set())}"
    extra = _tree("/var/lib/dkms") - before["dkms"] - set(DKMS_KEYS)
    assert not extra, f"left in /var/lib/dkms: {sorted(extra)}"


def _undo(ver, keys_before):
    """Whatever the test left: the package (purged), a DKMS tree of it,
    the kernel without headers, DKMS's signing key if the test made it.
    Harmless when there is nothing to undo.  dpkg itself, not apt-get:
    it purges a package in any state, also after an apt-get or dpkg that
    was killed half-way (apt-get then refuses to run)."""
    if _known_to_dpkg():
        r = sh(f"dpkg --purge {PKG}")
        assert not _known_to_dpkg(), \
            f"dpkg --purge {PKG} failed: {(r.stdout + r.stderr)[-2000:]}"
    if _dkms_status():
        sh(f"dkms remove {MOD}/{ver} --all")
    # what a DKMS killed half-way leaves (none of it was there before)
    shutil.rmtree(f"/var/lib/dkms/{MOD}", ignore_errors=True)
    for ko in _dkms_kos():
        os.unlink(ko)
        kdir = os.path.dirname(ko)
        for d in (kdir, os.path.dirname(kdir)):
            if not os.listdir(d):
                os.rmdir(d)
        sh(f"depmod -a {ko.split('/')[3]}")
    shutil.rmtree(f"/lib/modules/{NOHDR_KVER}", ignore_errors=True)
    for k in DKMS_KEYS:
        if k not in keys_before and os.path.lexists(k):
            os.unlink(k)


@tag("deb", "packaging")
@timeout(600)
def test_deb_installs_for_every_kernel_and_removes_clean():
    kvers = _preconditions()
    ver = dkms_version()
    r = sh(f"bash {TOP}/scripts/mk-deb.sh")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    deb = os.path.join(BUILD, "deb", f"{PKG}_{ver}_all.deb")
    assert os.path.isfile(deb), r.stdout
    print(f"    built {deb}", flush=True)
    before = {"dpkg": _dpkg_set(), "updates": _updates(),
              "dkms": _tree("/var/lib/dkms")}
    undo = cleanup(_undo, ver, [k for k in DKMS_KEYS if os.path.lexists(k)])
    try:
        os.mkdir(f"/lib/modules/{NOHDR_KVER}")
        for how in ("remove", "purge"):
            r = sh(f"{APT} install {deb}")
            out = r.stdout + r.stderr
            assert r.returncode == 0, f"apt-get install failed:\n{out[-3000:]}"
            new = sorted(_dpkg_set() - before["dpkg"])
            assert len(new) == 1 and new[0].startswith(f"{PKG}\t{ver}\t"), \
                f"apt-get install changed more than {PKG}: {new}"
            _check_installed(ver, kvers, out)
            print(f"    installed: {MOD}/{ver} built for {', '.join(kvers)}",
                  flush=True)
            r = sh(f"{APT} {how} {PKG}")
            assert r.returncode == 0, \
                f"apt-get {how} failed:\n{(r.stdout + r.stderr)[-3000:]}"
            _check_gone(ver, before)
            print(f"    apt-get {how}: nothing left", flush=True)
    finally:
        run_cleanup(undo)
    assert _tree("/var/lib/dkms") == before["dkms"]
    assert _updates() == before["updates"]
    assert not os.path.lexists(f"/lib/modules/{NOHDR_KVER}")
