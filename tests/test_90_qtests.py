# SPDX-License-Identifier: GPL-2.0
"""QEMU's own qtests, built from the patched tree, run against our binary
under TCG (scripts/run-qtests.sh).  The virtio-balloon subset is part of
`make check`; the whole migration-test is tagged `long`.  A qtest that
cannot be built is a failure like one that fails."""
import os
import re

from hb import env
from hb.testlib import TOP, sh, tag, timeout

# The series' own qos test (tests/qtest/virtio-balloon-hint-test.c)
HINT_TESTS = ("free-page-hint-round", "free-page-hint-ignored")


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
    on our QEMU of the stack (10.0; 10.2, the upstream base).  The
    series' free page hint qos tests are among them and pass; on 10.2
    they are also run against the stock build of the same source, where
    they must fail: it has no x-free-page-hint-stats (Debian's 10.0
    binary cannot run qtests at all: it ships no qtest accelerator)."""
    base = env.STACK
    _run(f"--base {base} --quick", 3 * 3600 - 60)
    log = os.path.join(TOP, "build", "results", f"qtests-{base}",
                       "ours-qos-test-virtio-balloon.log")
    with open(log) as f:
        text = f.read()
    for name in HINT_TESTS:
        ok = re.findall(rf"^ok \d+ (/\S*/{name})$", text, re.M)
        assert ok, f"{name} did not run and pass on ours: see {log}"
        print(f"    ours: ok {ok[0]}")
    if base != "10.2":
        print("    (the stock detector runs on the 10.2 stack)")
        return
    # Each test against the stock build of the same source, on its own:
    # its first failed assertion ends the qos-test process
    stock_log = os.path.join(os.path.dirname(log),
                             "stock-qos-test-virtio-balloon.log")
    for name in HINT_TESTS:
        p = sh(f"bash {os.path.join(TOP, 'scripts', 'run-qtests.sh')} "
               f"--base {base} --stock --match '/{name}$'", timeout=600)
        with open(stock_log) as f:
            text = f.read()
        assert p.returncode == 1 and \
            "x-free-page-hint-stats' not found" in text, \
            f"{name} did not fail on the stock build: {text[-800:]}"
        print(f"    the detector fires: {name} fails on stock {base} "
              "(x-free-page-hint-stats not found)")


@tag("qtest", "long")
@timeout(5 * 3600)
def test_qemu_qtests_full_migration_test():
    """The quick set plus the whole migration-test, and the same against
    the unpatched Debian build as the baseline: all must pass."""
    _run("--base 10.0 --full --baseline", 5 * 3600 - 60)
