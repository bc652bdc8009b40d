#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Plots of benchmark results (matplotlib).

  bench_bytes.png   bytes sent by configuration and workload (1 GiB guest)
  bench_time.png    total migration time by configuration and workload
  bench_size.png    bytes sent vs guest size (fresh and stale)
  bench_dst.png     total time with a warm and a cold destination, side by
                    side (1 GiB, unlimited link), when both ran
  bench_link.png    total time against the link speed (1 GiB; warm solid,
                    cold dashed), when more than one link ran

The first three show one destination memory state and link, named in
their titles: warm and unlimited where that ran, else cold and unlimited
(runs recorded before the state and link were measured count as cold and
unlimited).  Bars are medians, error bars min-max.  A cell with a failed
data check is drawn as an empty hatched bar labelled FAIL n/N (no value).
TCG timings.

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
          "c-alloc": "#c5b0d5", "c-res0": "#f7b6d2", "c-kick1": "#dbdb8d", "d-alloc": "#9edae5",
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


def _main_state(keys):
    """The (destination state, link) the bar plots show: warm and
    unlimited if it ran, else cold and unlimited, else the first."""
    have = {(k[4], k[5]) for k in keys}
    for want in (("warm", None), ("cold", None)):
        if want in have:
            return want
    return min(have, key=lambda x: (x[0], scenarios.link_order(x[1])),
               default=("cold", None))


def plot(results, outdir):
    full = {k: s for k, s in report.summarize(results["runs"]).items()
            if k[3] == scenarios.SMP}
    dst, link = _main_state(full)
    where = report._where(dst, link)   # pylint: disable=protected-access
    # (workload, mem, config) of the default vCPU count, that state, link
    summ = {k[:3]: s for k, s in full.items() if (k[4], k[5]) == (dst, link)}
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
                 f"{what}, 1 GiB guest, {where}, median (min–max) — TCG "
                 f"timings [{mode} run]{tuned}"):
            f.tight_layout()
            path = os.path.join(outdir, name)
            f.savefig(path, dpi=110)
            made.append(path)
        plt.close(f)
    made += _plot_dst(full, outdir, tuned)
    made += _plot_link(full, outdir, tuned)
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
        ax.set_title(f"{wl}: bytes sent vs guest size, {where} — "
                     f"TCG{tuned}", fontsize=10)
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


def _plot_dst(full, outdir, tuned):
    """bench_dst.png: 1 GiB, unlimited link, warm and cold side by side."""
    per = {d: {k[:3]: s for k, s in full.items()
               if k[4] == d and k[5] is None} for d in ("warm", "cold")}
    if not all(any(k[1] == 1024 for k in per[d]) for d in per):
        return []
    f, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, d in zip(axes, ("warm", "cold")):
        _bars(ax, per[d], "total_ms", 1e-3, 1024, "total time (s)",
              f"{d} destination, 1 GiB, unlimited link — TCG{tuned}")
    f.tight_layout()
    path = os.path.join(outdir, "bench_dst.png")
    f.savefig(path, dpi=110)
    plt.close(f)
    return [path]


def _plot_link(full, outdir, tuned):
    """bench_link.png: total time against the link, 1 GiB; one panel per
    workload with more than one link; warm solid, cold dashed."""
    links = sorted({k[5] for k in full if k[1] == 1024},
                   key=scenarios.link_order)
    wls = [w for w in scenarios.WORKLOAD_ORDER
           if len({k[5] for k in full if k[0] == w and k[1] == 1024}) > 1]
    if len(links) < 2 or not wls:
        return []
    f, axes = plt.subplots(1, len(wls), figsize=(5 * len(wls), 4),
                           squeeze=False)
    for ax, wl in zip(axes[0], wls):
        for cfg in scenarios.CONFIG_ORDER:
            for d, style in (("warm", "-"), ("cold", "--")):
                xs, ys, lo, hi = [], [], [], []
                for i, g in enumerate(links):
                    s = full.get((wl, 1024, cfg, scenarios.SMP, d, g))
                    v = s and not s["fails"] and s["ok"].get("total_ms")
                    if v:
                        xs.append(i)
                        ys.append(v[0] / 1e3)
                        lo.append((v[0] - v[1]) / 1e3)
                        hi.append((v[2] - v[0]) / 1e3)
                if xs:
                    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o",
                                capsize=3, linestyle=style,
                                color=COLORS[cfg], label=f"{cfg} {d}")
        ax.set_xticks(range(len(links)))
        ax.set_xticklabels([scenarios.link_name(g) for g in links])
        ax.set_xlabel("link (max-bandwidth)")
        ax.set_ylabel("total time (s)")
        ax.set_title(f"{wl}, 1 GiB: time by link — TCG{tuned}", fontsize=10)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    f.tight_layout()
    path = os.path.join(outdir, "bench_link.png")
    f.savefig(path, dpi=110)
    plt.close(f)
    return [path]
