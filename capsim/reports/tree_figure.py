"""Figure 4: the draft-tree study (DataFrame in, ``Drawn`` images out; never simulates).

Every point whose draft shape is a tree (``tree`` != "chain"), one image per (deployment,
workload, load mode, prefix caching): admitted requests, output throughput, p99 TTFT and
peak pool usage vs load, colour = tree shape, line style = commit mode (store-all needs
N+1 GDN slots per request for an N-node tree, TreeWY 1). The legend lists each shape and
each mode once, below the panels; the offered-concurrency line is drawn on top. Each
metric has one y scale across every image of the figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from capsim.reports.style import (
    Drawn,
    caching_of,
    facet_cols,
    facet_label,
    groups,
    ids,
    legend_below,
    load_x,
    log_range,
    log_y,
    mode_label,
    new_figure,
    step_time_note,
    suptitle,
)
from capsim.sweep.matched import BASELINE

TREE_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("peak_running", "peak admitted requests", False),
    ("output_throughput_tok_per_s", "output throughput (tok/s)", False),
    ("ttft_p99_s", "p99 TTFT (s, log scale)", True),
    ("peak_kv_usage", "peak pool usage (fraction)", False),
)
SHAPE_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d")
MODE_STYLE = {BASELINE: ("--", "s"), "reconstruct": ("-", "o"), "deferred": ("-.", "D")}
TREE_MODEL_LABEL = {"rank": "rank model", "independent": "independence upper bound"}


def tree_model_note(df: pd.DataFrame) -> str:
    """'tree acceptance: rank model' (and the temperature when > 0)."""
    if "tree_model" not in df.columns:  # results written before the rank model
        return "tree acceptance: independence upper bound"
    models = sorted(df["tree_model"].dropna().unique())
    text = "tree acceptance: " + ", ".join(TREE_MODEL_LABEL.get(m, m) for m in models)
    temps = sorted(t for t in df.get("temperature", pd.Series(dtype=float)).unique() if t > 0)
    return text + (f", T={', '.join(f'{t:g}' for t in temps)}" if temps else "")


def tree_points(points: pd.DataFrame) -> pd.DataFrame:
    return points[points["tree"] != "chain"]


def _limits(df: pd.DataFrame) -> dict[str, tuple[float, float]]:
    lim: dict[str, tuple[float, float]] = {}
    for col, _label, log in TREE_METRICS:
        v = df[col].to_numpy(dtype=float)
        if log:
            lim[col] = log_range(v, pad=1.5)
        else:
            top = max(float(np.nanmax(v)) if np.isfinite(v).any() else 1.0, 1e-9)
            if col == "peak_running" and (df["load_mode"] == "concurrency").any():
                top = max(top, float(df.loc[df["load_mode"] == "concurrency", "load"].max()))
            lim[col] = (0.0, top * 1.08)
    return lim


def figure4_trees(points: pd.DataFrame) -> list[Drawn]:
    """Tree study images (none when the grid has no tree shapes)."""
    df = tree_points(points)
    if df.empty:
        return []
    df = df.assign(prefix_caching=caching_of(df))
    shapes = sorted(df["tree"].unique(), key=lambda t: (len(str(t)), str(t)))
    colour = {s: SHAPE_COLOURS[i % len(SHAPE_COLOURS)] for i, s in enumerate(shapes)}
    lim = _limits(df)
    parts = groups(df, [*facet_cols(df), "workload", "load_mode", "prefix_caching"])
    out = []
    for i, (key, sub) in enumerate(parts):
        mode = str(key["load_mode"])
        fig = new_figure(2, 2, extra_h_in=1.3)
        axes = fig.subplots(2, 2, squeeze=False, sharex=True)
        for ax, (col, label, log) in zip(axes.flat, TREE_METRICS, strict=True):
            for shape in shapes:
                for commit in sorted(sub["commit"].unique(), key=lambda m: m == BASELINE):
                    sel = sub[(sub["tree"] == shape) & (sub["commit"] == commit)]
                    if sel.empty:
                        continue
                    sel = sel.sort_values("load")
                    ls, marker = MODE_STYLE.get(str(commit), (":", "x"))
                    ax.plot(
                        sel["load"],
                        sel[col],
                        ls=ls,
                        marker=marker,
                        ms=4,
                        color=colour[shape],
                        mfc="none" if commit == BASELINE else None,
                    )
            if col == "peak_running" and mode == "concurrency":
                loads = np.sort(sub["load"].unique())
                ax.plot(loads, loads, color="black", lw=1.2, ls=(0, (1, 1)), zorder=10)
            load_x(ax, sub["load"].to_numpy(), mode)
            if log:
                log_y(ax, *lim[col])
            else:
                ax.set_ylim(*lim[col])
            ax.set_ylabel(label, fontsize=8)
            ax.grid(alpha=0.3)
        for ax in axes[0]:
            ax.set_xlabel("")
        handles = [Line2D([], [], color=colour[s], lw=2) for s in shapes]
        labels = [f"tree {s}" for s in shapes]
        for commit in sorted(sub["commit"].unique(), key=lambda m: m == BASELINE):
            ls, marker = MODE_STYLE.get(str(commit), (":", "x"))
            handles.append(Line2D([], [], color="0.3", ls=ls, marker=marker))
            labels.append(mode_label(commit))
        if mode == "concurrency":
            handles.append(Line2D([], [], color="black", ls=(0, (1, 1))))
            labels.append("offered concurrency")
        legend_below(fig, handles, labels, ncol=min(len(labels), 4))
        caching = "caching on" if key["prefix_caching"] else "caching off"
        suptitle(
            fig,
            f"Figure 4: draft trees, {facet_label(key)}, {key['workload']}"
            f"{' (open loop)' if mode == 'rate' else ''}, {caching}",
            f"{tree_model_note(sub)}; {step_time_note(sub)}",
        )
        name = "Figure 4" if len(parts) == 1 else f"Figure 4{'abcdefghijklmnopqrstuvwxyz'[i]}"
        out.append(Drawn("figure4_trees", name, fig, ids(sub)))
    return out
