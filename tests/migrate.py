#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Run one boot-and-migrate and print its result as JSON."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hb import env  # noqa: E402
from hb.migration import migrate_once  # noqa: E402
from hb.vm import install_cleanup  # noqa: E402
from hb.workloads import WORKLOADS, Scenario  # noqa: E402


def main():
    install_cleanup()
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--qemu", default="stock", help="stock|ours|PATH (both sides)")
    ap.add_argument("--dst-qemu", default=None)
    ap.add_argument("--balloon", default="intree", choices=["intree", "ours", "none"])
    ap.add_argument("--hint", action="store_true")
    ap.add_argument("--workload", default="stale", choices=WORKLOADS)
    ap.add_argument("--mem", type=int, default=1024)
    ap.add_argument("--throttle-start", type=float, default=0.0)
    ap.add_argument("--balloon-args", default="")
    ap.add_argument("--device-props", default="")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    a = ap.parse_args()

    def qpath(q):
        return {"stock": env.STOCK_QEMU, "ours": env.OUR_QEMU}.get(q, q)
    sc = Scenario(workload=a.workload, mem_mib=a.mem,
                  throttle_start_s=a.throttle_start)
    res = migrate_once(qpath(a.qemu), qpath(a.dst_qemu or a.qemu),
                       balloon=a.balloon, hint=a.hint, scenario=sc,
                       balloon_args=a.balloon_args,
                       device_props=a.device_props, keep_dirs=a.keep)
    if not a.keep:
        res.pop("migration", None)
    print(json.dumps(res, indent=1, default=str))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
