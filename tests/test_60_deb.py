# SPDX-License-Identifier: GPL-2.0
"""The Debian package of the guest driver (`make deb`): it depends on dkms
and kernel headers and names the kernels scan mode is validated on; it
installs with apt, DKMS builds and installs our module for every
installed kernel that has headers (both guest kernels here) and skips,
without failing, a kernel without them; `apt-get remove` and `apt-get
purge` each take it all away again.  The machine is left as the test found it: the same packages, no
DKMS tree of ours, nothing new under /lib/modules/*/updates.

The host plays a guest with the two guest kernels: setup never installs
a kernel or its headers (tests/test_02_host_boot.py), so for a guest
kernel whose headers are not installed the test points
/lib/modules/KVER/build at the headers setup unpacked into the cache, for
the time of the test.  The package's dependency on headers is met by a
package the test builds and installs beside it, balloon-hint-test-headers
(Provides: linux-headers), purged with it.

A machine where the package or any DKMS tree of virtio_balloon is already
there (a user's install, `make -C guest dkms-install`) is left alone: the
test skips, saying so."""
import glob
import os
import re
import shutil
import tempfile

from hb.hostfiles import dkms_version
from hb.hostfiles import APT
from hb.hostfiles import dpkg_set as _dpkg_set
from hb.hostfiles import headers_plan as _headers_plan
from hb.hostfiles import link_headers as _link_headers
from hb.hostfiles import unlink_headers as _unlink_headers
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
# Stands for the headers package: the test's kernels have their headers
# from the cache.
HDR_PKG = "balloon-hint-test-headers"


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


def _known_to_dpkg(pkg=PKG):
    r = sh(f"dpkg-query -W -f '${{db:Status-Abbrev}}' {pkg}")
    return r.returncode == 0 and r.stdout.strip() not in ("", "un")


def _headers_deb(d):
    """balloon-hint-test-headers_1_all.deb in d: no files, Provides:
    linux-headers."""
    root = os.path.join(d, "hdr")
    os.makedirs(os.path.join(root, "DEBIAN"))
    with open(os.path.join(root, "DEBIAN", "control"), "w") as f:
        f.write(f"Package: {HDR_PKG}\nVersion: 1\nArchitecture: all\n"
                "Maintainer: balloon-hint tests <tests@example.org>\n"
                "Provides: linux-headers\nPriority: optional\n"
                "Section: kernel\nDescription: kernel headers from the "
                "balloon-hint cache (tests/test_60_deb.py)\n"
                " Installed and purged by the test of balloon-hint-dkms.\n")
    deb = os.path.join(d, f"{HDR_PKG}_1_all.deb")
    r = sh(f"dpkg-deb --root-owner-group -b {root} {deb}")
    assert r.returncode == 0, r.stdout + r.stderr
    return deb


def _modules():
    """The kernels of /lib/modules (None: no /lib/modules)."""
    if not os.path.isdir("/lib/modules"):
        return None
    return set(os.listdir("/lib/modules"))


def _dkms_status():
    r = sh(f"dkms status -m {MOD}")
    return [ln for ln in r.stdout.splitlines() if ln.startswith(f"{MOD}/")]


def _dkms_kos():
    return glob.glob(f"/lib/modules/*/updates/dkms/{MOD}.ko*")


def _preconditions():
    if os.geteuid() != 0:
        raise Skip("needs root (apt-get, dkms)")
    for tool in ("apt-get", "dkms", "dpkg-buildpackage", "dh_dkms"):
        if not shutil.which(tool):
            raise Skip(f"{tool} not installed (scripts/setup.sh installs it)")
    if _known_to_dpkg(HDR_PKG):
        raise Skip(f"{HDR_PKG} is on this machine: not the test's")
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
    assert all(kvers), kvers
    return kvers


def scan_kernels(top=TOP):
    """(pattern, comment) of each kernel scan mode is validated on:
    guest/scan-validated-kernels, else 6.1.* and 6.12.*."""
    path = os.path.join(top, "guest", "scan-validated-kernels")
    if not os.path.exists(path):
        return [("6.1.*", "Linux 6.1"), ("6.12.*", "Linux 6.12")]
    out = []
    with open(path) as f:
        for ln in f:
            pat, _, comment = ln.partition("#")
            if pat.split():
                out.append((pat.split()[0], comment.strip()))
    return out


def _check_fields(deb):
    """Depends and Description of the built package."""
    def field(name):
        r = sh(f"dpkg-deb -f {deb} {name}")
        assert r.returncode == 0, r.stderr
        return r.stdout
    deps = [d.strip() for d in field("Depends").split(",")]
    assert any(re.fullmatch(r"dkms( \(.*\))?", d) for d in deps), deps
    assert "linux-headers-amd64 | linux-headers" in deps, deps
    desc = field("Description")
    assert "${" not in desc, desc
    lines = [" ".join(ln.split()) for ln in desc.splitlines()]
    kernels = scan_kernels()
    assert kernels, "no validated kernel"
    for pat, comment in kernels:
        assert f"{pat} {comment}".strip() in lines, (pat, comment, desc)
    # The kernels it supports are the ones README's "Guest" line names
    supported = _readme_guest_kernels()
    assert f"Supported guest kernels: {supported}" in " ".join(lines), \
        (supported, desc)


def _readme_guest_kernels():
    """The first sentence of README's "Guest" line after its label,
    without markup: which kernels the driver supports."""
    with open(os.path.join(TOP, "README.md")) as f:
        text = f.read()
    m = re.search(r"^- \*\*Guest\*\*: (.*?\.)(?:  |\n\n)", text,
                  re.M | re.S)
    assert m, "README.md has no '- **Guest**:' line"
    return " ".join(m.group(1).replace("`", "").split())


def _apt_would_add(*debs):
    """The packages apt-get's simulation of installing debs installs."""
    r = sh(f"{APT} -s install {' '.join(debs)}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    return sorted(re.findall(r"^Inst (\S+)", r.stdout, re.M))


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
    assert not _known_to_dpkg(HDR_PKG), sh(f"dpkg -l {HDR_PKG}").stdout
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


def _undo(ver, keys_before, plan, tmp):
    """Whatever the test left: the packages (purged), a DKMS tree of ours,
    the kernel without headers, the headers links, DKMS's signing key if
    the test made it.  Harmless when there is nothing to undo.  dpkg
    itself, not apt-get: it purges a package in any state, also after an
    apt-get or dpkg that was killed half-way (apt-get then refuses to
    run)."""
    for pkg in (PKG, HDR_PKG):
        if _known_to_dpkg(pkg):
            r = sh(f"dpkg --purge {pkg}")
            assert not _known_to_dpkg(pkg), \
                f"dpkg --purge {pkg} failed: {(r.stdout + r.stderr)[-2000:]}"
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
        if not any(ko.startswith(p + "/") for p, t in plan if t is None):
            sh(f"depmod -a {ko.split('/')[3]}")
    shutil.rmtree(f"/lib/modules/{NOHDR_KVER}", ignore_errors=True)
    _unlink_headers(plan)
    for k in DKMS_KEYS:
        if k not in keys_before and os.path.lexists(k):
            os.unlink(k)
    shutil.rmtree(tmp, ignore_errors=True)


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
    _check_fields(deb)
    tmp = tempfile.mkdtemp(prefix="hb-deb-")
    before = {"dpkg": _dpkg_set(), "updates": _updates(),
              "dkms": _tree("/var/lib/dkms"),
              "modules": _modules()}
    plan = _headers_plan(kvers)
    undo = cleanup(_undo, ver, [k for k in DKMS_KEYS if os.path.lexists(k)],
                   plan, tmp)
    try:
        hdr = _headers_deb(tmp)
        # the premise: apt needs nothing but the two (dkms is there) ...
        assert _apt_would_add(hdr, deb) == sorted([PKG, HDR_PKG]), \
            _apt_would_add(hdr, deb)
        # ... and the package alone does not install without headers
        if not sh("dpkg-query -W -f '${Status}' linux-headers-amd64 "
                  "2>/dev/null | grep -q 'ok installed'").returncode == 0:
            assert PKG in _apt_would_add(deb) and \
                len(_apt_would_add(deb)) > 1, _apt_would_add(deb)
        _link_headers(plan)
        os.mkdir(f"/lib/modules/{NOHDR_KVER}")
        for how in ("remove", "purge"):
            r = sh(f"{APT} install {hdr} {deb}")
            out = r.stdout + r.stderr
            assert r.returncode == 0, f"apt-get install failed:\n{out[-3000:]}"
            new = sorted(ln.split("\t")[:2]
                         for ln in _dpkg_set() - before["dpkg"])
            assert new == sorted([[PKG, ver], [HDR_PKG, "1"]]), \
                f"apt-get install changed more than {PKG}, {HDR_PKG}: {new}"
            _check_installed(ver, kvers, out)
            print(f"    installed: {MOD}/{ver} built for {', '.join(kvers)}",
                  flush=True)
            r = sh(f"{APT} {how} {PKG} {HDR_PKG}")
            assert r.returncode == 0, \
                f"apt-get {how} failed:\n{(r.stdout + r.stderr)[-3000:]}"
            _check_gone(ver, before)
            print(f"    apt-get {how}: nothing left", flush=True)
    finally:
        run_cleanup(undo)
    assert _tree("/var/lib/dkms") == before["dkms"]
    assert _updates() == before["updates"]
    assert _modules() == before["modules"]
    assert not os.path.lexists(f"/lib/modules/{NOHDR_KVER}")
