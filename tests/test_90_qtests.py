# SPDX-License-Identifier: GPL-2.0
"""QEMU's own qtests, built from the patched tree, run against our binary
under TCG (scripts/run-qtests.sh).  The virtio-balloon subset is part of
`make check`; the whole migration-test is tagged `long`.  A qtest that
cannot be built is a failure like one that fails."""
import os

from hb import env
from hb.testlib import TOP, sh, tag, timeout


def _run(args, limit):
    script = os.path.join(TOP, "scripts", "run-qtests.sh")
    p = sh(f"bash {script} {args}", timeout=limit)
    print("\n".join("    " + ln for ln in p.stdout.splitlines()[-20:]))
    what = "could not build the qtests" if p.returncode == 2 else "failed"
    assert p.returncode == 0, \
        f"qtests {what} (rc={p.returncode}): {p.stdout[-1500:]} " \
        f"{p.stderr[-500:]}"


@tag("reliability", "qtest", "upstream_base")
@timeout(3 * 3600)
def test_qemu_qtests_virtio_balloon_subset():
    """qos-test (virtio-balloon paths), qom-test, device-introspect-test,
    on our QEMU of the stack (10.0; 10.2, the upstream base)."""
    _run(f"--base {env.STACK} --quick", 3 * 3600 - 60)


@tag("qtest", "long")
@timeout(5 * 3600)
def test_qemu_qtests_full_migration_test():
    """The quick set plus the whole migration-test, and the same against
    the unpatched Debian build as the baseline: all must pass."""
    _run("--base 10.0 --full --baseline", 5 * 3600 - 60)
