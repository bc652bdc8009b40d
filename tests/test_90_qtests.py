# SPDX-License-Identifier: GPL-2.0
"""QEMU's own qtests, built from the patched tree, run against our binary
under TCG (scripts/run-qtests.sh).  The virtio-balloon subset is part of
`make check`; the whole migration-test is tagged `long`."""
import os

from hb.testlib import TOP, Skip, sh, tag


def _run(args):
    script = os.path.join(TOP, "scripts", "run-qtests.sh")
    p = sh(f"bash {script} {args}", timeout=4 * 3600)
    print("\n".join("    " + ln for ln in p.stdout.splitlines()[-20:]))
    if p.returncode == 2:
        # could not build (no configured tree): an environment problem
        raise Skip(p.stderr.strip().splitlines()[-1] if p.stderr.strip()
                   else "run-qtests.sh could not build the qtests")
    assert p.returncode == 0, \
        f"qtests failed: {p.stdout[-1500:]} {p.stderr[-500:]}"


@tag("reliability", "qtest")
def test_qemu_qtests_virtio_balloon_subset():
    """qos-test (virtio-balloon paths), qom-test, device-introspect-test,
    on our QEMU 10.0."""
    _run("--base 10.0 --quick")


@tag("reliability", "qtest")
def test_qemu_qtests_virtio_balloon_subset_7_2():
    """The same on our QEMU 7.2."""
    _run("--base 7.2 --quick")


@tag("qtest", "long")
def test_qemu_qtests_full_migration_test():
    """The quick set plus the whole migration-test, and the same against
    the unpatched Debian build as the baseline, on both bases."""
    _run("--base 10.0 --full --baseline")
    _run("--base 7.2 --full --baseline")
