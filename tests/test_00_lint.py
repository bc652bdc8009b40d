# SPDX-License-Identifier: GPL-2.0
"""Quality gates: kernel style/W=1/sparse, QEMU checkpatch, idempotent setup.
Each gate is also shown to fail on a real violation."""
import glob
import os
import shutil
import tempfile

from hb.testlib import TOP, BUILD, sh, tag

QEMU_SRC = (glob.glob(os.path.join(BUILD, "src", "pristine", "qemu-*")) or
            [None])[0]


@tag("lint")
def test_setup_is_idempotent():
    r = sh(f"bash {TOP}/scripts/setup.sh")
    assert r.returncode == 0, r.stderr
    assert "installing" not in r.stdout, f"second run installed: {r.stdout}"


@tag("lint")
def test_guest_lint_checkpatch_w1_sparse():
    """Both guest kernels (6.1, 6.12), installed and test builds."""
    for series in ("6.1", "6.12"):
        kver = sh(f"{TOP}/scripts/guest-kver.sh {series}").stdout.strip()
        r = sh(f"make -C {TOP}/guest lint KVER={kver}")
        assert r.returncode == 0, (kver, (r.stdout + r.stderr)[-3000:])
        assert "lint: all checks passed" in r.stdout, kver


@tag("lint")
def test_kernel_gates_catch_violations():
    """checkpatch --strict and W=1 must fail on code that violates them."""
    d = tempfile.mkdtemp(prefix="hb-lint-")
    try:
        with open(f"{d}/bad.c", "w") as f:
            f.write("// SPDX-License-Identifier: GPL-2.0\n#include <linux/module.h>\n"
                    "static int foo(void) {\n  int x = 1;\n return 0; }\n"
                    "int bad_fn(int a) { if (a) return foo(); return 0; }\n"
                    "MODULE_LICENSE(\"GPL\");\n")
        with open(f"{d}/Kbuild", "w") as f:
            f.write("obj-m := bad.o\n")
        cp = "/usr/src/linux-source-6.1/scripts/checkpatch.pl"
        r = sh(f"perl {cp} --no-tree --strict --terse -f {d}/bad.c")
        assert r.returncode != 0 and "ERROR" in r.stdout, r.stdout
        kver = sh(f"{TOP}/scripts/guest-kver.sh").stdout.strip()
        r = sh(f"make -C /lib/modules/{kver}/build M={d} W=1 modules")
        assert "warning:" in r.stdout + r.stderr, "W=1 missed a missing prototype"
    finally:
        shutil.rmtree(d)


@tag("lint")
def test_qemu_patches_pass_checkpatch():
    patches = [l.strip() for l in open(f"{TOP}/host-qemu-patch/qemu-7.2/series")
               if l.strip() and not l.startswith("#")]
    assert patches, "empty series"
    for p in patches:
        r = sh(f"cd {QEMU_SRC} && perl scripts/checkpatch.pl "
               f"{TOP}/host-qemu-patch/qemu-7.2/{p}")
        assert r.returncode == 0, f"{p}:\n{r.stdout[-2000:]}"
        txt = open(f"{TOP}/host-qemu-patch/qemu-7.2/{p}").read()
        assert "Signed-off-by:" in txt, f"{p}: no Signed-off-by"


@tag("lint")
def test_qemu_checkpatch_catches_violations():
    d = tempfile.mkdtemp(prefix="hb-lint-")
    try:
        bad = (
            "From: x <x@example.org>\nSubject: [PATCH] bad\n\n"
            "Signed-off-by: x <x@example.org>\n---\n"
            "diff --git a/hw/virtio/x.c b/hw/virtio/x.c\n"
            "--- a/hw/virtio/x.c\n+++ b/hw/virtio/x.c\n@@ -1,1 +1,3 @@\n"
            " int a;\n+int f(void) { printf(\"x\\n\"); return 0;}\n"
            "+int  g(void){\treturn 1;}\n")
        with open(f"{d}/bad.patch", "w") as f:
            f.write(bad)
        r = sh(f"cd {QEMU_SRC} && perl scripts/checkpatch.pl {d}/bad.patch")
        assert r.returncode != 0 and "ERROR" in r.stdout, r.stdout
    finally:
        shutil.rmtree(d)
