# SPDX-License-Identifier: GPL-2.0
"""The published results describe HEAD: Documentation/results/demo.json
and check.json (README's result block is made from them) record the
driver hash and the series key of the commit they are checked out with,
and a tree that did not differ from it.  scripts/results.py computes
both of a commit from git; the check is shown to fire on a summary of
another driver, another series and a dirty tree."""
import json
import os
import sys
import tempfile

from hb.testlib import TOP, tag

sys.path.insert(0, os.path.join(TOP, "scripts"))
import results  # noqa: E402  pylint: disable=wrong-import-position


def _load(name):
    with open(os.path.join(TOP, "Documentation", "results", name)) as f:
        return json.load(f)


def _to_publish():
    """What publish-check will record at the end of this run: the tree's
    hashes and whether it is clean (HB_PUBLISH_CHECK=1: `PUBLISH=1 make
    check`, which rewrites check.json after the run)."""
    return {"driver_hash": results.driver_hash(),
            "series_key": results.series_key(),
            "source_clean": results.source_clean()}


@tag("lint")
def test_published_results_are_of_head():
    """demo.json and check.json are of HEAD; in a run that publishes
    check.json (`PUBLISH=1 make check`), the summary it will write is."""
    bad = results.not_of(_load("demo.json"), "demo.json")
    if os.environ.get("HB_PUBLISH_CHECK") == "1":
        bad += results.not_of(_to_publish(), "check.json (to publish)")
    else:
        bad += results.not_of(_load("check.json"), "check.json")
    assert not bad, "\n".join(bad) + \
        "\n(re-publish: PUBLISH=1 make demo; PUBLISH=1 make check)"


@tag("lint")
def test_results_of_other_code_are_caught():
    """The premise: HEAD's hashes are computed from git (HEAD's driver
    hash is that of its committed files, whatever the work tree holds),
    and each kind of mismatch is named."""
    head = {"driver_hash": results.driver_hash("HEAD"),
            "series_key": results.series_key("HEAD"),
            "source_clean": True}
    assert head["driver_hash"] and head["series_key"], head
    assert results.not_of(head, "x.json") == []
    for key, val, word in (("driver_hash", "0123456789abcdef", "driver_hash"),
                           ("series_key", "fedcba9876543210", "series_key"),
                           ("source_clean", False, "clean tree"),
                           ("source_clean", None, "clean tree")):
        fake = dict(head, **{key: val})
        bad = results.not_of(fake, "fake.json")
        assert len(bad) == 1 and word in bad[0] and "fake.json" in bad[0], \
            (key, bad)
    # a summary without the fields at all
    assert len(results.not_of({}, "empty.json")) == 3


@tag("lint")
def test_benchmarks_sets_table_is_made_from_the_committed_summary():
    """Documentation/benchmarks.md names the driver, series key, tree and
    tuning of every published bench set of HEAD's code as
    `scripts/results.py bench-sets` prints them from bench-reporting.json,
    and the check sees such a set become one of another driver."""
    with open(results.BENCH) as f:
        bench = json.load(f)
    table = results.bench_sets(bench)
    sets = results.head_sets(bench)
    assert sets, "no bench set of HEAD's driver and series is published"
    assert table.count("\n") == len(sets) + 1, table
    with open(os.path.join(TOP, "Documentation", "benchmarks.md")) as f:
        text = f.read()
    head = table.split("\n", 1)[0]
    assert head in text, "benchmarks.md has no sets table"
    start = text.index(head)
    shown = text[start:text.index("\n\n", start)]
    assert shown == table, \
        "benchmarks.md's sets table differs from `scripts/results.py " \
        "bench-sets`"
    sets[-1][1]["meta"]["driver_hash"] = "0123456789abcdef"
    assert results.bench_sets(bench) != shown


def _doc_block(rx, name, summary=results.BENCH, doc=results.README):
    """The summary at `summary`, and the block `name` of `doc` that `rx`
    finds (between its markers)."""
    with open(summary) as f:
        data = json.load(f)
    with open(doc) as f:
        text = f.read()
    m = rx.search(text)
    assert m, f"{os.path.basename(doc)} has no <!-- {name} --> block"
    return data, text[m.end(1):m.start(2)]


@tag("lint")
def test_readme_configurations_are_made_from_the_committed_summary():
    """README.md's configuration table is what `scripts/results.py
    configs` makes from bench-reporting.json (every figure a median of
    the cell it names), and the check sees a changed median."""
    bench, block = _doc_block(results.CONFIGS_RE, "configs")
    assert block == results.configs_table(bench), \
        "README.md's configuration table differs from `scripts/results.py " \
        "configs`"
    n, wl, mem, smp, cfgs = results.CONFIG_ROWS[0][2][0]
    cell = next(c for c in bench["sets"][n - 1]["cells"]
                if (c["workload"], c["mem_mib"], c["smp"], c["config"]) ==
                (wl, mem, smp, cfgs[0]))
    cell["transferred_mb"][0] += 100
    assert results.configs_table(bench) != block


@tag("lint")
def test_coverage_sentence_is_made_from_the_published_check():
    """Documentation/guest-driver.md quotes a scan round's coverage as
    `scripts/results.py coverage` makes it from check.json's figures, and
    the check sees a changed figure."""
    c = _load("check.json")
    with open(os.path.join(TOP, "Documentation", "guest-driver.md")) as f:
        text = " ".join(f.read().split())
    assert " ".join(results.coverage_sentence(c).split()) in text, \
        "guest-driver.md's coverage sentence differs from " \
        "`scripts/results.py coverage`"
    c["figures"]["scan_coverage_6.12"] = 0.5
    assert " ".join(results.coverage_sentence(c).split()) not in text


@tag("lint")
def test_holds_sentence_is_made_from_the_published_check():
    """Documentation/guest-driver.md quotes the walk's longest holds and
    the isolated pages it passed as `scripts/results.py holds` makes them
    from check.json's figures, for every kernel the check measured, and
    the check sees a changed figure.  A published check without them (one
    of a runner that did not keep them) leaves the sentence out."""
    c = _load("check.json")
    f = c["figures"]
    with open(os.path.join(TOP, "Documentation", "guest-driver.md")) as fh:
        text = " ".join(fh.read().split())
    keys = [k for k in f if k.startswith("walk_max_pcp_hold_us_")]
    if not keys:
        assert "walks run over and over while a DIMM block" not in text, \
            "guest-driver.md quotes hold figures the published check lacks"
        return
    assert " ".join(results.holds_sentence(c).split()) in text, \
        "guest-driver.md's holds sentence differs from " \
        "`scripts/results.py holds`"
    f[keys[0]] += 1
    assert " ".join(results.holds_sentence(c).split()) not in text


@tag("lint")
def test_readme_cost_is_made_from_the_committed_summary():
    """README.md's sentence on what the rounds cost the guest is what
    `scripts/results.py cost` makes from bench-reporting.json, and the
    check sees a changed median."""
    bench, block = _doc_block(results.COST_RE, "cost")
    assert block == results.cost_text(bench), \
        "README.md's cost sentence differs from `scripts/results.py cost`"
    n, wl, mem, smp = results.COST_CELL
    cell = next(c for c in bench["sets"][n - 1]["cells"]
                if (c["workload"], c["mem_mib"], c["smp"], c["config"],
                    c.get("link_gbit")) == (wl, mem, smp, "d", None))
    cell["guest_cpu_ms"][0] += 100
    assert results.cost_text(bench) != block


@tag("lint")
def test_soak_sentence_is_made_from_the_published_soak():
    """Documentation/data-safety.md's sentence on the last soak is what
    `scripts/results.py soak` makes from soak.json, and the check sees a
    changed count."""
    soak, block = _doc_block(results.SOAK_RE, "soak", results.SOAK,
                             results.DATA_SAFETY)
    assert block == results.soak_text(soak), \
        "data-safety.md's soak sentence differs from `scripts/results.py soak`"
    cell = next(iter(soak["sets"][-1]["runs"].values()))
    cell["failed"] += 1
    assert results.soak_text(soak) != block


@tag("lint")
def test_bench_sets_the_docs_quote_are_of_head():
    """The bench sets README's configuration table and cost sentence
    quote are of HEAD's driver and series, from a clean tree (benchmarks.md's
    two tables list only such sets: results.head_sets()).  The premise:
    set 1, of an old driver, is caught."""
    with open(results.BENCH) as f:
        bench = json.load(f)
    quoted = {c[0] for _, _, cells in results.CONFIG_ROWS for c in cells}
    quoted.add(results.COST_CELL[0])
    bad = [r for n in sorted(quoted)
           for r in results.set_not_of_head(bench, n)]
    assert not bad, "\n".join(bad) + \
        "\n(re-run those cells with scripts/bench and publish them)"
    assert results.set_not_of_head(bench, 1)
    assert 1 not in [i for i, _ in results.head_sets(bench)]


@tag("lint")
def test_a_set_of_the_10_2_stack_is_judged_by_its_series_key():
    """A bench set of the series on QEMU 10.2 is of HEAD when its key is
    the 10.2 series' key at HEAD (a set of the 10.0 stack with that key
    is not), so the docs may show sets of both bases."""
    want = results.code_of("HEAD", "10.2")
    assert want["series_key"], "no 10.2 source in the cache (make qemu-10.2)"

    def judged(stack):
        meta = {"stack": stack, "driver_hash": want["driver_hash"],
                "our_qemu_key": want["series_key"], "git_dirty": False}
        return results.set_not_of_head({"sets": [{"meta": meta}]}, 1)
    assert not judged("10.2"), judged("10.2")
    assert judged("10.0"), "a 10.0 set with the 10.2 key passed"


@tag("lint")
def test_a_stopped_run_is_not_published():
    """publish-check refuses a run stopped before its last test (run.py's
    stopped_by and not_run) and writes nothing; the premise: the same run,
    not stopped, is summarised."""
    with open(results.CHECK) as f:
        before = f.read()
    run = {"results": [], "summary": {}, "seconds": 60,
           "counts": {"passed": 3, "failed": 0, "skipped": 0,
                      "reference": 0},
           "stopped_by": "SIGINT", "not_run": ["test_x", "test_y"]}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as tmp:
        json.dump(run, tmp)
        tmp.flush()
        try:
            results.publish_check(tmp.name)
        except SystemExit as exc:
            assert "stopped by SIGINT" in str(exc), exc
        else:
            raise AssertionError("a stopped run was published")
        with open(results.CHECK) as f:
            assert f.read() == before, "check.json changed"
    assert results.check_summary(dict(run, stopped_by=None, not_run=[]))[
        "counts"]["passed"] == 3
