# SPDX-License-Identifier: GPL-2.0
"""Leave the host as a test found it: files a test installs outside the
tree (a module in /lib/modules/$kver/updates, a DKMS source tree in
/usr/src, DKMS's build tree) are removed, or put back as they were, when
the test ends, whatever its outcome."""
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


@contextlib.contextmanager
def restored(paths, depmod_kver=None):
    """Save what exists of `paths` (files or directories); afterwards
    remove every one of them and put the saved ones back, then remove
    directories that were created empty and run depmod for depmod_kver."""
    save = tempfile.mkdtemp(prefix="hb-hostfiles-")
    saved = {}
    parents = {os.path.dirname(p) for p in paths}
    existed = {d for d in parents if os.path.isdir(d)}
    try:
        for i, p in enumerate(paths):
            if os.path.lexists(p):
                dst = os.path.join(save, str(i))
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.copytree(p, dst, symlinks=True)
                else:
                    shutil.copy2(p, dst, follow_symlinks=False)
                saved[p] = dst
        yield
    finally:
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
        for d in sorted(parents - existed, key=len, reverse=True):
            with contextlib.suppress(OSError):
                os.removedirs(d)
        shutil.rmtree(save, ignore_errors=True)
        if depmod_kver:
            subprocess.call(["depmod", "-a", depmod_kver])


def installed_module(kver):
    """`with installed_module(kver):` around a test that runs `make
    install` or DKMS for kver: the host's module tree and /usr/src are as
    before afterwards."""
    return restored(module_paths(kver) + dkms_paths(), depmod_kver=kver)
