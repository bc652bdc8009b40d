#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""make demo: migrate one guest with stale free memory three ways and print
the comparison.  TCG timings; bytes are the steadier figure.

The stack is the default one (QEMU 10.0, Linux 6.12), or the one HB_STACK
names: Debian's QEMU of that version with the in-tree driver of the same
guest kernel, without and with hinting, against our QEMU and driver (opted
in to free-page-hint-keep-writes, as a fleet of our hosts is)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests"))
from hb import harness  # noqa: E402

CONFIGS = [
    ("no hinting (stock QEMU)", dict(src_bin=harness.STOCK_QEMU, hint=False,
                                     balloon="intree")),
    ("stock hinting (stock QEMU + in-tree)", dict(src_bin=harness.STOCK_QEMU,
                                                  hint=True, balloon="intree")),
    ("ours (our QEMU + our driver)", dict(src_bin=harness.OUR_QEMU, hint=True,
                                          balloon="ours")),
]


def main():
    harness.log(f"stack: QEMU {harness.STACK} (ours: {harness.OUR_QEMU}; "
                f"stock: {harness.STOCK_QEMU}), guest Linux "
                f"{harness.guest_kver()}")
    rows = []
    for i, (name, kw) in enumerate(CONFIGS, 1):
        harness.log(f"demo {i}/{len(CONFIGS)}: {name}: boot, fill 75% of "
                    "1 GiB with stale data, migrate, verify on destination")
        res = harness.migrate_once(scenario=harness.Scenario("stale"), **kw)
        rows.append((name, res))
        harness.save_json(os.path.join(harness.BUILD, "results",
                                       f"demo-{i}.json"), res)
    hdr = ("config", "total ms", "transferred MB", "downtime ms",
           "data intact", "dst kernel errors")
    table = [hdr]
    for name, r in rows:
        table.append((name, str(r.get("total_ms")), str(r.get("transferred_mb")),
                      str(r.get("downtime_ms")),
                      {True: "yes", False: "NO", None: "n/a"}[r.get("data_intact")],
                      str(len(r.get("kernel_errors") or []))))
    w = [max(len(row[c]) for row in table) for c in range(len(hdr))]
    print()
    for j, row in enumerate(table):
        print(" | ".join(cell.ljust(w[c]) for c, cell in enumerate(row)))
        if j == 0:
            print("-+-".join("-" * x for x in w))
    print("\n(TCG timings on this machine; results in build/results/demo-*.json)")
    ours = rows[-1][1]
    return 0 if ours.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
