#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Plots of benchmark results (matplotlib).

  bench_bytes.png   bytes sent by configuration and workload (1 GiB guest)
  bench_time.png    total migration time by configuration and workload
  bench_size.png    bytes sent vs guest size (fresh and stale)

Bars are medians, error bars min-max.  A cell with a failed data check is
drawn as an empty hatched bar labelled FAIL n/N (no value).  TCG timings.

Only cells with the default vCPU count are drawn.  A host-tuned run says so
in every title.
"""

import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=C0413

import report  # noqa: E402  pylint: disable=C0413
import scenarios  # noqa: E402  pylint: disable=C0413

COLORS = {"a": "#7f7f7f", "b": "#d62728", "c": "#ff7f0e", "d": "#2ca02c",
          "c-alloc": "#c5b0d5", "d-alloc": "#9edae5",
          "r": "#1f77b4", "d+r": "#17becf", "a+mf": "#bcbd22",
          "d+mf": "#8c564b"}


def _bars(ax, summ, fig, scale, mem, ylabel, title):
    # cells with the figure (reuse migrates nothing) or a failed run
    shown = {k for k, s in summ.items() if k[1] == mem and
             (s["fails"] or s["completed"].get(fig))}
    wls = [w for w in scenarios.WORKLOAD_ORDER
           if any(k[0] == w for k in shown)]
    cfgs = [c for c in scenarios.CONFIG_ORDER
            if any(k[2] == c for k in shown)]
    if not wls:
        return False
    width = 0.8 / max(1, len(cfgs))
    ymax = 0
    for k, s in summ.items():
        v = s["completed"].get(fig) if k[1] == mem else None
        if v:
            ymax = max(ymax, v[2] * scale)
    for j, cfg in enumerate(cfgs):
        for i, wl in enumerate(wls):
            s = summ.get((wl, mem, cfg))
            if not s or (wl, mem, cfg) not in shown:
                continue
            x = i - 0.4 + width * (j + 0.5)
            v = s["ok"].get(fig)
            if s["fails"] or not v:
                h = ymax * 0.15 if ymax else 1
                ax.bar(x, h, width, fill=False, hatch="xx",
                       edgecolor=COLORS[cfg])
                ax.text(x, h, f"FAIL\n{s['fails']}/{s['n']}", ha="center",
                        va="bottom", fontsize=6, color=COLORS[cfg])
                continue
            med, lo, hi = (t * scale for t in v)
            ax.bar(x, med, width, color=COLORS[cfg],
                   yerr=[[med - lo], [hi - med]], capsize=2,
                   label=None)
    for cfg in cfgs:
        ax.bar(0, 0, 0, color=COLORS[cfg],
               label=f"{cfg}: {scenarios.CONFIGS[cfg][4]}")
    ax.set_xticks(range(len(wls)))
    ax.set_xticklabels(wls)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    return True


def plot(results, outdir):
    # (workload, mem, config) of the default vCPU count
    summ = {k[:3]: s for k, s in report.summarize(results["runs"]).items()
            if k[3] == scenarios.SMP}
    mode = results.get("meta", {}).get("mode", "")
    t = results.get("meta", {}).get("host_tuned")
    tuned = f" — host-tuned ({t})" if t else ""
    made = []
    for name, fig, scale, ylabel, what in (
            ("bench_bytes.png", "transferred_mb", 1, "MB sent", "bytes sent"),
            ("bench_time.png", "total_ms", 1e-3, "total time (s)",
             "total migration time")):
        f, ax = plt.subplots(figsize=(9, 4.5))
        if _bars(ax, summ, fig, scale, 1024, ylabel,
                 f"{what}, 1 GiB guest, median (min–max) — TCG timings "
                 f"[{mode} run]{tuned}"):
            f.tight_layout()
            path = os.path.join(outdir, name)
            f.savefig(path, dpi=110)
            made.append(path)
        plt.close(f)

    f, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=False)
    any_line = False
    for ax, wl in zip(axes, ("fresh", "stale")):
        for cfg in scenarios.CONFIG_ORDER:
            pts = sorted((k[1], s) for k, s in summ.items()
                         if k[0] == wl and k[2] == cfg)
            if not pts:
                continue
            xs, ys, lo, hi, fx = [], [], [], [], []
            for mem, s in pts:
                v = s["ok"].get("transferred_mb")
                if s["fails"] or not v:
                    fx.append(mem / 1024)
                    continue
                xs.append(mem / 1024)
                ys.append(v[0])
                lo.append(v[0] - v[1])
                hi.append(v[2] - v[0])
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3,
                            color=COLORS[cfg], label=cfg)
                any_line = True
            if fx:
                ax.plot(fx, [0] * len(fx), "x", color=COLORS[cfg],
                        markersize=9, label=f"{cfg} FAIL")
        ax.set_title(f"{wl}: bytes sent vs guest size — TCG{tuned}",
                     fontsize=10)
        ax.set_xlabel("guest RAM (GiB)")
        ax.set_ylabel("MB sent")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    if any_line:
        f.tight_layout()
        path = os.path.join(outdir, "bench_size.png")
        f.savefig(path, dpi=110)
        made.append(path)
    plt.close(f)
    return made
