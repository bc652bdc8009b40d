# SPDX-License-Identifier: GPL-2.0
"""Quality gates: kernel style/W=1/sparse, QEMU checkpatch, idempotent setup.
Each gate is also shown to fail on a real violation."""
import fnmatch
import glob
import os
import re
import shutil
import subprocess
import tempfile
import tomllib

from hb.testlib import TOP, Skip, cleanup, sh, tag, timeout

CACHE = os.environ.get("BH_CACHE", "/var/cache/balloon-hint")
BASES = ("10.0", "10.2")
# Debian's source of each base, as scripts/build-qemu.sh fetched it
QEMU_SRCS = {b: os.path.join(CACHE, "src", f"qemu-{b}", "qemu") for b in BASES}
QEMU_SRC = QEMU_SRCS["10.0"]


@tag("lint")
def test_setup_is_idempotent():
    r = sh(f"bash {TOP}/scripts/setup.sh")
    assert r.returncode == 0, r.stderr
    assert "installing" not in r.stdout, f"second run installed: {r.stdout}"


@tag("lint")
def test_guest_lint_checkpatch_w1_sparse():
    """Both guest kernels (6.1, 6.12), installed and test builds."""
    # In a copy: the lint builds start from `make clean`, which must not
    # take the module of the tree away from the tests after this one.
    d = tempfile.mkdtemp(prefix="hb-guest-lint-")
    cleanup(shutil.rmtree, d, ignore_errors=True)   # also if killed
    try:
        for sub in ("guest", "include"):
            shutil.copytree(os.path.join(TOP, sub), os.path.join(d, sub))
        for series in ("6.1", "6.12"):
            kver = sh(f"{TOP}/scripts/guest-kver.sh {series}").stdout.strip()
            r = sh(f"make -C {d}/guest clean KVER={kver} && "
                   f"make -j{os.cpu_count()} -C {d}/guest lint KVER={kver}")
            assert r.returncode == 0, (kver, (r.stdout + r.stderr)[-3000:])
            assert "lint: all checks passed" in r.stdout, kver
    finally:
        shutil.rmtree(d, ignore_errors=True)


# checkpatch --strict: brace placement.  W=1 only: an unused static const
# (-Wunused-const-variable is off in the default warnings of both guest
# kernels, on with W=1).  sparse only: a __user pointer taken as a kernel
# one (__user is empty for the compiler).  Nothing here warns in a plain
# build.
BAD_C = """// SPDX-License-Identifier: GPL-2.0
#include <linux/module.h>
static const int hb_unused_table = 3;
static int hb_peek(int __user *up)
{
	int *kp = up;

	return kp ? 0 : 1;
}
static int foo(void) {
  return hb_peek(NULL); }
static int __init bad_init(void) { return foo(); }
module_init(bad_init);
MODULE_LICENSE("GPL");
"""


@tag("lint")
def test_kernel_gates_catch_violations():
    """checkpatch --strict and the lint build (W=1 with sparse, C=1) must
    fail on code that violates them; a plain build of it is clean."""
    d = tempfile.mkdtemp(prefix="hb-lint-")
    cleanup(shutil.rmtree, d, ignore_errors=True)   # also if killed
    try:
        with open(f"{d}/bad.c", "w") as f:
            f.write(BAD_C)
        with open(f"{d}/Kbuild", "w") as f:
            f.write("obj-m := bad.o\n")
        cp = "/usr/src/linux-source-6.1/scripts/checkpatch.pl"
        r = sh(f"perl {cp} --no-tree --strict --terse -f {d}/bad.c")
        assert r.returncode != 0 and "ERROR" in r.stdout, r.stdout
        kver = (os.environ.get("KVER")
                or sh(f"{TOP}/scripts/guest-kver.sh").stdout.strip())
        # its installed headers, else the tree setup unpacked (as
        # guest/Makefile finds it)
        cache = os.environ.get("BH_CACHE", "/var/cache/balloon-hint")
        kdir = next(k for k in (f"/lib/modules/{kver}/build",
                                f"{cache}/kernels/{kver}/build")
                    if os.path.exists(f"{k}/Makefile"))
        r = sh(f"make -C {kdir} M={d} modules")
        out = r.stdout + r.stderr
        assert r.returncode == 0 and "warning:" not in out, \
            f"the fixture warns in a plain build: {out[-2000:]}"
        sh(f"make -C {kdir} M={d} clean")
        r = sh(f"make -C {kdir} M={d} W=1 C=1 modules")
        out = r.stdout + r.stderr
        assert "-Wunused-const-variable" in out, \
            f"W=1 missed an unused const variable: {out[-2000:]}"
        assert "different address spaces" in out, \
            f"sparse missed a __user pointer taken as a kernel one: {out[-2000:]}"
    finally:
        shutil.rmtree(d)


# sid's sparse in the Debian 13 root (scripts/setup.sh:
# trixie-root.sh unpack sparse sid)
SPARSE_13 = "/opt/sparse-sid/usr/bin/sparse"
SPARSE_ARGS = f"KBUILD_CHECKSRC=1 CHECK={SPARSE_13}"


def _root_make(d, kver, args):
    """make in the Debian 13 root against `kver`'s headers there, with its
    compiler (gcc-14), in directory `d` of this machine (bound into the
    root at /mnt/hb-lint for the command)."""
    return sh(f"TRIXIE_ROOT_BINDS='{d}:/mnt/hb-lint' "
              f"{TOP}/scripts/trixie-root.sh run make -j{os.cpu_count()} -C "
              f"/lib/modules/{kver}/build M=/mnt/hb-lint/guest CC=gcc-14 "
              f"{args}")


@tag("lint")
@timeout(1800)
def test_guest_w1_on_debian_13_kernels():
    """Every Debian 13 kernel the root has headers of (7.3, -rt, -cloud,
    and the debug kernel): the installed and the test builds compile
    without a warning with W=1 and sparse.  The sparse is sid's
    (SPARSE_13), since 7.3 refuses trixie's 0.6.4; it is passed as
    KBUILD_CHECKSRC=1 because Debian's headers lack the kernel's
    scripts/checker-valid.sh, which the test runs itself, from the
    linux-source-7.3 tree of the debug kernel, where there is one.  The
    premises: W=1 in the root warns on the fixture's unused const
    variable, and sparse on its __user pointer, in every kernel's tree."""
    root = sh(f"{TOP}/scripts/trixie-root.sh path").stdout.strip()
    mods = os.path.join(root, "lib", "modules")
    kvers = sorted(k for k in (os.listdir(mods) if os.path.isdir(mods)
                               else [])
                   if os.path.exists(os.path.join(mods, k, "build",
                                                  "Makefile")))
    if not kvers:
        raise Skip("no Debian 13 root with kernel headers (scripts/setup.sh)")
    assert os.path.exists(root + SPARSE_13), \
        f"no {SPARSE_13} in the Debian 13 root (scripts/setup.sh)"
    d = tempfile.mkdtemp(prefix="hb-lint13-")
    cleanup(shutil.rmtree, d, ignore_errors=True)   # also if killed
    try:
        os.mkdir(f"{d}/guest")
        with open(f"{d}/guest/bad.c", "w") as f:
            f.write(BAD_C)
        with open(f"{d}/guest/Kbuild", "w") as f:
            f.write("obj-m := bad.o\n")
        r = _root_make(d, kvers[0], "W=1 modules")
        out = r.stdout + r.stderr
        assert "-Wunused-const-variable" in out, \
            f"W=1 in the root missed an unused const variable: {out[-2000:]}"
        valid = glob.glob(f"{root}/build/debug-kernel/src-*/scripts/"
                          "checker-valid.sh")
        if valid:
            r = sh(f"{TOP}/scripts/trixie-root.sh run sh "
                   f"{valid[0][len(root):]} {SPARSE_13} -m64")
            assert r.stdout.strip() == "1", \
                f"7.3's checker-valid.sh refuses {SPARSE_13}: {r.stdout}"
        for kver in kvers:
            _root_make(d, kver, "clean")
            r = _root_make(d, kver, SPARSE_ARGS + " modules")
            out = r.stdout + r.stderr
            assert "different address spaces" in out, \
                f"sparse missed a __user pointer in {kver}: {out[-2000:]}"
        shutil.rmtree(f"{d}/guest")
        for sub in ("guest", "include"):
            shutil.copytree(os.path.join(TOP, sub), os.path.join(d, sub))
        for kver in kvers:
            for extra in ("", "VB_FAULT_INJECT=y"):
                _root_make(d, kver, "clean")
                r = _root_make(d, kver,
                               f"W=1 {SPARSE_ARGS} {extra} modules")
                out = r.stdout + r.stderr
                assert r.returncode == 0, (kver, extra, out[-3000:])
                warns = [ln for ln in out.splitlines() if "warning:" in ln]
                assert not warns, (kver, extra, warns[:10])
                print(f"    {kver} {extra or 'installed build'}: "
                      "W=1 and sparse clean",
                      flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _series(base):
    """The patches of a base's series, in order."""
    with open(f"{TOP}/host-qemu-patch/qemu-{base}/series") as f:
        return [ln.strip() for ln in f
                if ln.strip() and not ln.startswith("#")]


@tag("lint")
def test_qemu_patches_pass_checkpatch():
    for base in BASES:
        d = f"{TOP}/host-qemu-patch/qemu-{base}"
        patches = _series(base)
        assert patches, f"empty series for {base}"
        for p in patches:
            r = sh(f"cd {QEMU_SRCS[base]} && perl scripts/checkpatch.pl {d}/{p}")
            assert r.returncode == 0, f"{base}/{p}:\n{r.stdout[-2000:]}"
            txt = open(f"{d}/{p}").read()
            assert "Signed-off-by:" in txt, f"{base}/{p}: no Signed-off-by"


def _header(base, patch, field):
    """The first line of header `field` (Subject, Date) of a patch, with
    its folded continuation lines."""
    with open(f"{TOP}/host-qemu-patch/qemu-{base}/{patch}") as f:
        text = f.read().split("\n\n", 1)[0]
    m = re.search(rf"^{field}: (.*(?:\n .*)*)", text, re.M)
    assert m, f"{base}/{patch}: no {field}"
    return " ".join(m.group(1).split())


def _port_map(text):
    """from-10.0's lines: [(10.0 file, kind, 10.2 file or None, why)]."""
    out = []
    for ln in text.splitlines():
        if not ln.strip() or ln.startswith("#"):
            continue
        m = re.fullmatch(r"(\S+) (=|dropped: (.+)|-> (\S+): (.+))", ln)
        assert m, f"from-10.0: malformed line {ln!r}"
        if m.group(2) == "=":
            out.append((m.group(1), "=", m.group(1), None))
        elif m.group(3):
            out.append((m.group(1), "dropped", None, m.group(3)))
        else:
            out.append((m.group(1), "->", m.group(4), m.group(5)))
    return out


def _check_port(text, s10, s102, header):
    """The 10.2 series is the 10.0 one as from-10.0 (`text`) maps it: every
    10.0 patch once, in order; a kept patch with its subject and author
    date; nothing else."""
    port = _port_map(text)
    assert [p[0] for p in port] == s10, \
        "from-10.0 does not list the 10.0 series in its order"
    want = [p[2] for p in port if p[2]]
    assert want == s102, \
        f"the 10.2 series is not the mapped 10.0 one: {want} != {s102}"
    for old, kind, new, _ in port:
        if kind == "=":
            for field in ("Subject", "Date"):
                a, b = header("10.0", old, field), header("10.2", new, field)
                assert a == b, f"{old}: {field} {a!r} on 10.0, {b!r} on 10.2"


@tag("lint")
def test_the_10_2_series_is_the_10_0_series_rebased():
    """host-qemu-patch/qemu-10.2/from-10.0 maps each patch of the 10.0
    series to this one (kept, re-titled or dropped, with why): both series
    come from one history, so a fix lands in both.  The check fails on a
    patch missing from the map, one out of order, and a kept patch whose
    subject differs."""
    with open(f"{TOP}/host-qemu-patch/qemu-10.2/from-10.0") as f:
        text = f.read()
    s10, s102 = _series("10.0"), _series("10.2")
    _check_port(text, s10, s102, _header)
    kept = sum(ln.endswith(" =") for ln in text.splitlines())
    print(f"    {len(s10)} patches on 10.0, {len(s102)} on 10.2, {kept} "
          "kept as they are", flush=True)
    # the check fires
    lines = text.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.endswith(" ="))
    for bad, what in (
            ("\n".join(lines[:first] + lines[first + 1:]), "a patch missing"),
            ("\n".join(lines[:first] + [lines[first + 1], lines[first]] +
                       lines[first + 2:]), "two patches swapped")):
        try:
            _check_port(bad, s10, s102, _header)
        except AssertionError as exc:
            print(f"    the check fires on {what}: {str(exc)[:80]}")
        else:
            raise AssertionError(f"the check passed {what}")
    try:
        _check_port(text, s10, s102, lambda b, p, f: (
            "x" if (b, f) == ("10.2", "Subject") else _header(b, p, f)))
    except AssertionError as exc:
        print(f"    the check fires on a subject changed: {str(exc)[:80]}")
    else:
        raise AssertionError("the check passed a subject changed")


@tag("lint", "series")
@timeout(3 * 3600)
def test_every_prefix_of_each_series_builds():
    """scripts/check-series.sh: each patch applied in turn, qemu-system-x86_64
    rebuilt after each (prefixes that built before are remembered)."""
    for base in BASES:
        r = sh(f"bash {TOP}/scripts/check-series.sh {base}")
        assert r.returncode == 0, f"{base}:\n{(r.stdout + r.stderr)[-3000:]}"
        assert "prefixes build" in r.stdout, r.stdout[-2000:]


@tag("lint")
def test_qemu_checkpatch_catches_violations():
    d = tempfile.mkdtemp(prefix="hb-lint-")
    cleanup(shutil.rmtree, d, ignore_errors=True)   # also if killed
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


@tag("lint")
def test_readme_results_block_is_made_from_the_committed_summary():
    """README.md's result block is what scripts/results.py makes from
    Documentation/results/demo.json, and the check sees a hand edit."""
    r = sh(f"python3 {TOP}/scripts/results.py check")
    assert r.returncode == 0, r.stdout + r.stderr
    d = tempfile.mkdtemp(prefix="hb-readme-")
    try:
        for sub in ("scripts", "Documentation"):
            shutil.copytree(os.path.join(TOP, sub), os.path.join(d, sub))
        with open(os.path.join(TOP, "README.md")) as f:
            text = f.read()
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write(text.replace(" MB |", " MB (edited) |", 1))
        r = sh(f"python3 {d}/scripts/results.py check")
        assert r.returncode == 1 and "differs" in r.stderr, \
            (r.returncode, r.stderr)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@tag("lint")
def test_benchmarks_targets_table_is_made_from_the_committed_summary():
    """Documentation/benchmarks.md carries the targets table that
    scripts/results.py makes from Documentation/results/
    bench-reporting.json, unchanged."""
    r = sh(f"python3 {TOP}/scripts/results.py bench-targets")
    assert r.returncode == 0 and r.stdout.count("\n") > 2, r.stderr
    with open(os.path.join(TOP, "Documentation", "benchmarks.md")) as f:
        text = f.read()
    assert r.stdout in text, \
        "benchmarks.md's targets table differs from `scripts/results.py " \
        "bench-targets`"


def _unlicensed(files, read, reuse):
    """The files of `files` (paths relative to the top) that name no
    licence: no SPDX-License-Identifier in their first 5 lines (read(path)
    gives them) and no REUSE.toml annotation (`reuse`, parsed) whose path
    glob matches them."""
    globs = []
    for ann in reuse.get("annotations", []):
        if "SPDX-License-Identifier" not in ann:
            continue
        paths = ann["path"]
        globs += [paths] if isinstance(paths, str) else paths

    def covered(f):
        return any(fnmatch.fnmatchcase(f, g.replace("**", "*"))
                   for g in globs)
    return [f for f in files if not covered(f) and
            not re.search(r"SPDX-License-Identifier: \S", read(f))]


@tag("lint")
def test_every_file_names_its_licence():
    """Every tracked file names its licence: an SPDX line at its top, or an
    annotation of REUSE.toml for the files whose format has no comments.
    The check fires on a file with neither, and not on one with either."""
    files = subprocess.run(["git", "-C", TOP, "ls-files"], check=True,
                           capture_output=True, text=True).stdout.split()

    def head(f):
        with open(os.path.join(TOP, f), errors="replace") as fh:
            return "".join(fh.readline() for _ in range(5))
    with open(os.path.join(TOP, "REUSE.toml"), "rb") as fh:
        reuse = tomllib.load(fh)
    assert len(files) > 100
    missing = _unlicensed(files, head, reuse)
    assert not missing, missing
    # the check itself: a bare file is caught, an SPDX line or an
    # annotation clears it
    fake = {"a/bare.txt": "text\n", "a/spdx.c": "// SPDX-License-Identifier: "
            "GPL-2.0\n", "host-qemu-patch/x/y.patch": "From 0\n"}
    assert _unlicensed(list(fake), fake.get, reuse) == ["a/bare.txt"]
