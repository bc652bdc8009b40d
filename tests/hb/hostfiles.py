# SPDX-License-Identifier: GPL-2.0
"""Leave the host as a test found it: files a test installs outside the
tree (a module in /lib/modules/$kver/updates, a DKMS source tree in
/usr/src, DKMS's build tree) are removed, or put back as they were, when
the test ends, whatever its outcome: also when it is killed or the runner
is interrupted (a registered cleanup, testlib.cleanup)."""
import contextlib
import glob
import os
import shutil
import subprocess
import tempfile


def module_paths(kver):
    """Where `make install` and DKMS put our module for kver."""
    return [f"/lib/modules/{kver}/updates/virtio_balloon.ko",
            f"/lib/modules/{kver}/updates/dkms/virtio_balloon.ko",
            f"/lib/modules/{kver}/updates/dkms/virtio_balloon.ko.xz"]


def dkms_version():
    """PACKAGE_VERSION of guest/dkms.conf."""
    top = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    with open(os.path.join(top, "guest", "dkms.conf")) as f:
        for line in f:
            if line.startswith("PACKAGE_VERSION="):
                return line.split("=", 1)[1].strip().strip('"')
    return None


def dkms_paths():
    """DKMS's source and build trees of our module: this tree's version and
    any already there."""
    return sorted(set(glob.glob("/usr/src/virtio_balloon-*")
                      + [f"/usr/src/virtio_balloon-{dkms_version()}",
                         "/var/lib/dkms/virtio_balloon"]))


def _restore(paths, save, saved, parents, existed, depmod_kver,
             kdir_existed=True):
    """Put `paths` back as restored() found them: remove each, copy the
    saved ones back from `save`, remove parents that were created, run
    depmod, then drop `save`.  Does nothing once `save` is gone, so that
    it can run twice (the test's own `finally`, then the runner's
    registered cleanup after a kill in between)."""
    if not os.path.isdir(save):
        return
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.unlink(p)
    for p, dst in saved.items():
        if os.path.isdir(dst):
            shutil.copytree(dst, p, symlinks=True)
        else:
            shutil.copy2(dst, p, follow_symlinks=False)
    for d in sorted(set(parents) - set(existed), key=len, reverse=True):
        with contextlib.suppress(OSError):
            os.removedirs(d)
    if depmod_kver:
        kdir = f"/lib/modules/{depmod_kver}"
        if kdir_existed:
            subprocess.call(["depmod", "-a", depmod_kver])
        else:
            # the kernel's module folder was the test's (a guest kernel,
            # which this host has not installed): depmod's tables with it
            shutil.rmtree(kdir, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rmdir("/lib/modules")
    shutil.rmtree(save, ignore_errors=True)


@contextlib.contextmanager
def restored(paths, depmod_kver=None):
    """Save what exists of `paths` (files or directories); afterwards
    remove every one of them and put the saved ones back, then remove
    directories that were created empty and run depmod for depmod_kver.
    The restore is a registered cleanup (testlib.cleanup): the runner
    does it if the test is killed or interrupted before its end."""
    from . import testlib  # pylint: disable=import-outside-toplevel
    save = tempfile.mkdtemp(prefix="hb-hostfiles-")
    saved = {}
    parents = sorted({os.path.dirname(p) for p in paths})
    existed = [d for d in parents if os.path.isdir(d)]
    kdir_existed = bool(depmod_kver) and os.path.isdir(
        f"/lib/modules/{depmod_kver}")
    handle = None
    try:
        for i, p in enumerate(paths):
            if os.path.lexists(p):
                dst = os.path.join(save, str(i))
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.copytree(p, dst, symlinks=True)
                else:
                    shutil.copy2(p, dst, follow_symlinks=False)
                saved[p] = dst
        handle = testlib.cleanup(_restore, list(paths), save, saved, parents,
                                 existed, depmod_kver, kdir_existed)
        yield
    finally:
        if handle is None:      # nothing changed yet: only the copies
            shutil.rmtree(save, ignore_errors=True)
        else:
            testlib.run_cleanup(handle)


def installed_module(kver):
    """`with installed_module(kver):` around a test that runs `make
    install` or DKMS for kver: the host's module tree and /usr/src are as
    before afterwards."""
    return restored(module_paths(kver) + dkms_paths(), depmod_kver=kver)


# Guest kernels have no installed headers on this host (setup unpacks them
# into the cache): a test that runs DKMS as a user would links
# /lib/modules/KVER/build to the cached headers for its duration.
CACHE = os.environ.get("BH_CACHE", "/var/cache/balloon-hint")


def _skip():
    from .testlib import Skip  # pylint: disable=import-outside-toplevel
    return Skip


def headers_plan(kvers):
    """For each kernel without installed headers, /lib/modules/KVER/build
    pointing at its headers in the cache: what to create, in order, as
    (path, None) for a directory and (path, target) for a link."""
    plan = []
    if not os.path.isdir("/lib/modules"):
        plan.append(("/lib/modules", None))
    for k in kvers:
        build = f"/lib/modules/{k}/build"
        if os.path.exists(f"{build}/Makefile"):
            continue
        tree = f"{CACHE}/kernels/{k}/build"
        if not os.path.exists(f"{tree}/Makefile"):
            raise _skip()(f"no headers of guest kernel {k} in {tree} "
                       "(scripts/setup.sh unpacks them)")
        if os.path.lexists(build):
            raise _skip()(f"{build} exists but is broken: not the test's")
        if not os.path.isdir(f"/lib/modules/{k}"):
            plan.append((f"/lib/modules/{k}", None))
        plan.append((build, os.path.realpath(tree)))
    return plan


def link_headers(plan):
    for path, target in plan:
        if target is None:
            os.mkdir(path)
        else:
            os.symlink(target, path)


def unlink_headers(plan):
    """Undo link_headers(plan), also half-done; twice is harmless."""
    for path, target in reversed(plan):
        if target is None:
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.islink(path) and os.readlink(path) == target:
            os.unlink(path)


# apt-get as the package tests run it: no questions, no recommends, and
# waiting for a lock another apt holds rather than failing
APT = ("DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "
       "-y -q --no-install-recommends")


def dpkg_set():
    """Every package dpkg knows, with its version and state: what a test
    that installs and purges packages compares before and after."""
    r = subprocess.run("dpkg-query -W "
                       "-f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'",
                       shell=True, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.splitlines())
