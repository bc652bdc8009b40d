# SPDX-License-Identifier: GPL-2.0
"""The host's boot is left alone: scripts/setup.sh (which `make demo`,
`make check` and every build target run first) and `make deb` change
nothing under /boot, nothing of the bootloader's configuration, not the
set of installed linux-image packages and not the kernels of
/lib/modules; the guest kernels live under the cache
(/var/cache/balloon-hint/kernels), not installed.  `make deb` runs
without setup: only scripts/setup-deb.sh (packaging tools) and
scripts/mk-deb.sh.  The comparison is shown to fire on a changed
snapshot."""
import hashlib
import os
import platform
import re
import shutil
import tempfile

from hb import env
from hb.testlib import TOP, Skip, sh, tag, timeout

CACHE = os.environ.get("BH_CACHE", "/var/cache/balloon-hint")
# The bootloader's configuration outside /boot (GRUB's defaults and
# drop-ins, the kernel command line of kernel-install / systemd-boot).
BOOT_CONFIG = ("/etc/default/grub", "/etc/default/grub.d", "/etc/kernel")


def _files(*roots):
    """path -> (kind, mode, size, sha256 or link target) of every file,
    directory and link under the roots (missing roots: nothing)."""
    out = {}

    def one(p):
        st = os.lstat(p)
        if os.path.islink(p):
            out[p] = ("link", os.readlink(p))
        elif os.path.isdir(p):
            out[p] = ("dir", oct(st.st_mode))
        else:
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[p] = ("file", oct(st.st_mode), st.st_size, h.hexdigest())
    for root in roots:
        if not os.path.lexists(root):
            continue
        one(root)
        for d, dirs, files in os.walk(root):
            for n in dirs + files:
                one(os.path.join(d, n))
    return out


def _kernel_packages():
    """Package, version and state of every linux-image-* dpkg knows."""
    r = sh("dpkg-query -W -f '${Package}\\t${Version}\\t"
           "${db:Status-Abbrev}\\n' 'linux-image-*' 2>/dev/null")
    return {ln for ln in r.stdout.splitlines()
            if ln and not ln.rstrip().endswith("\tun")}


def snapshot(boot="/boot", config=BOOT_CONFIG, modules="/lib/modules",
             packages=_kernel_packages):
    return {"boot": _files(boot), "config": _files(*config),
            "modules": sorted(os.listdir(modules))
            if os.path.isdir(modules) else None,
            "linux-image": sorted(packages())}


def differences(before, after):
    """What changed between two snapshots, one line each."""
    out = []
    for part in ("boot", "config"):
        b, a = before[part], after[part]
        out += [f"{part}: + {p}" for p in sorted(set(a) - set(b))]
        out += [f"{part}: - {p}" for p in sorted(set(b) - set(a))]
        out += [f"{part}: changed {p}" for p in sorted(set(a) & set(b))
                if a[p] != b[p]]
    for part in ("modules", "linux-image"):
        if before[part] != after[part]:
            out.append(f"{part}: {before[part]} -> {after[part]}")
    return out


@tag("setup", "packaging")
def test_boot_difference_is_seen():
    """The detector: a kernel added to a /boot, a changed GRUB default, a
    new /lib/modules kernel and a new linux-image package each show."""
    d = tempfile.mkdtemp(prefix="hb-boot-")
    try:
        boot, grub, mods = (os.path.join(d, n) for n in
                            ("boot", "grub", "modules"))
        os.makedirs(os.path.join(boot, "grub"))
        os.makedirs(mods)
        with open(grub, "w") as f:
            f.write('GRUB_DEFAULT=0\n')
        with open(os.path.join(boot, "grub", "grub.cfg"), "w") as f:
            f.write("menuentry a {}\n")
        pkgs = {"linux-image-6.1.0-50-amd64\t6.1.176-1\tii "}

        def snap():
            return snapshot(boot, (grub,), mods, lambda: set(pkgs))
        before = snap()
        assert differences(before, snap()) == []
        with open(os.path.join(boot, "vmlinuz-9.9"), "w") as f:
            f.write("x")
        with open(grub, "w") as f:
            f.write('GRUB_DEFAULT=1\n')
        os.mkdir(os.path.join(mods, "9.9"))
        pkgs.add("linux-image-9.9\t9.9\tii ")
        diff = differences(before, snap())
        for want in (f"boot: + {boot}/vmlinuz-9.9",
                     f"config: changed {grub}"):
            assert want in diff, (want, diff)
        assert any(x.startswith("modules:") for x in diff), diff
        assert any(x.startswith("linux-image:") and "9.9" in x
                   for x in diff), diff
    finally:
        shutil.rmtree(d)


@tag("setup", "packaging")
@timeout(1800)
def test_setup_and_make_deb_leave_the_boot_alone():
    if os.geteuid() != 0:
        raise Skip("needs root (setup.sh)")
    before = snapshot()
    r = sh(f"bash {TOP}/scripts/setup.sh")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    after_setup = snapshot()
    d = tempfile.mkdtemp(prefix="hb-deb-")
    try:
        r = sh(f"BH_DEB_DIR={d} make -C {TOP} --no-print-directory deb")
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        assert [f for f in os.listdir(d) if f.endswith(".deb")], r.stdout
    finally:
        shutil.rmtree(d, ignore_errors=True)
    after_deb = snapshot()
    diff = differences(before, after_setup)
    assert not diff, "setup.sh changed the boot:\n" + "\n".join(diff)
    diff = differences(after_setup, after_deb)
    assert not diff, "make deb changed the boot:\n" + "\n".join(diff)
    print(f"    /boot: {len(before['boot'])} entries, bootloader config: "
          f"{len(before['config'])}, linux-image packages: "
          f"{len(before['linux-image'])}: unchanged", flush=True)


def installed_guest_kernels(kvers, packages, boot="/boot", running=None):
    """The guest kernels of kvers that are on the host: a linux-image
    package of dpkg (`packages`, as _kernel_packages() gives them) or a
    vmlinuz in boot; the kernel the host runs excepted."""
    names = {ln.split("\t")[0] for ln in packages}
    out = []
    for kver in kvers:
        if kver == running:
            continue
        if f"linux-image-{kver}" in names:
            out.append(f"linux-image-{kver} is installed")
        if os.path.lexists(f"{boot}/vmlinuz-{kver}"):
            out.append(f"{boot}/vmlinuz-{kver} exists")
    return out


@tag("setup", "packaging")
def test_guest_kernels_live_in_the_cache_not_installed():
    """Each guest kernel is an image under the cache, and neither its
    image nor its package is on the host (unless it is the kernel the
    host runs); the check fires on a fake /boot and package list that
    have one."""
    kvers = []
    for series in ("6.1", "6.12"):
        kver = env.guest_kver(series)
        image = env.guest_kernel(series)
        assert image == f"{CACHE}/kernels/{kver}/boot/vmlinuz-{kver}", image
        assert os.path.isfile(image), image
        kvers.append(kver)
    bad = installed_guest_kernels(kvers, _kernel_packages(),
                                  running=platform.release())
    assert not bad, f"guest kernels on the host: {bad}"
    d = tempfile.mkdtemp(prefix="hb-boot-")
    try:
        with open(f"{d}/vmlinuz-{kvers[1]}", "w") as f:
            f.write("x")
        fake = {f"linux-image-{kvers[0]}\t1\tii "}
        assert installed_guest_kernels(kvers, fake, d) == [
            f"linux-image-{kvers[0]} is installed",
            f"{d}/vmlinuz-{kvers[1]} exists"]
        assert installed_guest_kernels(kvers, fake, d, kvers[0]) == [
            f"{d}/vmlinuz-{kvers[1]} exists"]
    finally:
        shutil.rmtree(d)
    print(f"    guest kernels in {CACHE}/kernels, not installed: "
          f"{', '.join(kvers)}", flush=True)


@tag("setup", "packaging")
def test_make_deb_needs_no_setup():
    """`make deb` runs the packaging tools' setup and the package build,
    nothing else: no scripts/setup.sh, no QEMU, no kernel."""
    r = sh(f"make -C {TOP} --no-print-directory -n deb")
    assert r.returncode == 0, r.stderr
    cmds = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert cmds == ["bash scripts/setup-deb.sh", "bash scripts/mk-deb.sh"], \
        cmds


def _arrays(script, *names):
    """The bash arrays `names` as a script defines them (each array's
    definition only, nothing of the script runs)."""
    out = {}
    for name in names:
        r = sh(f"bash -c 'source <(sed -n \"/^{name}=(/,/^)/p\" {script}); "
               f"printf \"%s\\n\" \"${{{name}[@]}}\"'")
        assert r.returncode == 0, r.stderr
        out[name] = [w for w in r.stdout.split() if w]
    return out


def undocumented(doc, script, deb_script):
    """The packages setup installs that Documentation/setup.md does not
    name (the build dependencies of QEMU and the stock QEMU's libraries
    by their count)."""
    a = _arrays(script, "QEMU_BUILD_DEPS", "PKGS", "LIBVIRT_PKGS",
                "STOCK10_LIBS")
    a.update(_arrays(deb_script, "DEB_PKGS"))
    qemu_deps = set(a["QEMU_BUILD_DEPS"])
    missing = [p for name in ("PKGS", "LIBVIRT_PKGS", "DEB_PKGS")
               for p in a[name] if p not in qemu_deps
               and not re.search(rf"(?<![\w.+-]){re.escape(p)}(?![\w.+-])",
                                 doc)]
    if f"{len(qemu_deps)} packages" not in doc:
        missing.append(f"QEMU_BUILD_DEPS ({len(qemu_deps)} packages)")
    assert a["STOCK10_LIBS"], a
    return missing


@tag("setup", "lint")
def test_setup_md_names_what_setup_installs():
    """Every package setup.sh and setup-deb.sh install by name is named
    in Documentation/setup.md; the check fires on a package it lacks."""
    with open(os.path.join(TOP, "Documentation", "setup.md")) as f:
        doc = f.read()
    script = os.path.join(TOP, "scripts", "setup.sh")
    deb_script = os.path.join(TOP, "scripts", "setup-deb.sh")
    missing = undocumented(doc, script, deb_script)
    assert not missing, f"setup.md does not name: {missing}"
    assert undocumented(doc.replace("busybox-static", "busybox"), script,
                        deb_script) == ["busybox-static"]
