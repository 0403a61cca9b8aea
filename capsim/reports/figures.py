"""Figures 1-3 and Table 1: DataFrames in, matplotlib Figures / DataFrames out (pure).

Inputs are the sweep's ``points.parquet`` and ``matched.parquet`` tables. Nothing here
reads or writes files or simulates; ``build.py`` does the I/O. Colours are fixed per
commit mode across every figure (store-all red, TreeWY reconstruct blue, deferred green).
Only fixed-concurrency, chain-draft points enter Figures 1-2 and Table 1 (tree shapes and
arrival-rate workloads are different experiments); Figure 3 uses every matched point.
Figures are built as ``matplotlib.figure.Figure`` objects, never through pyplot, so no
global figure state is touched and building is safe in threads.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from capsim.commit_modes import MODES
from capsim.sweep.matched import geomean

MODE_COLOUR: dict[str, str] = {name: m.colour for name, m in MODES.items()}
MODE_LABEL: dict[str, str] = {name: m.label for name, m in MODES.items()}
GIB = 1024**3


def step_time_suffix(points: pd.DataFrame) -> str:
    """'\nstep time: ...' naming every step-time label in the data (projections say so)."""
    if "step_time_label" not in points.columns:
        return ""
    labels = sorted({str(x) for x in points["step_time_label"].dropna()})
    return ("\nstep time: " + "; ".join(labels)) if labels else ""


def caching_off(points: pd.DataFrame) -> pd.DataFrame:
    """The prefix-caching-off points when a grid has both (Figure 5 shows caching on)."""
    if "prefix_caching" in points.columns and (~points["prefix_caching"].astype(bool)).any():
        return points[~points["prefix_caching"].astype(bool)]
    return points


def _chain_concurrency(points: pd.DataFrame) -> pd.DataFrame:
    points = caching_off(points)
    return points[(points["load_mode"] == "concurrency") & (points["tree"] == "chain")]


def _panels(df: pd.DataFrame) -> list[tuple[str, float]]:
    return sorted({(str(m), float(g)) for m, g in zip(df["model"], df["gmu"], strict=True)})


def _empty(title: str) -> Figure:
    fig = Figure(figsize=(6, 2))
    fig.text(0.5, 0.5, f"{title}: no data", ha="center", va="center")
    return fig


def _short(model: str) -> str:
    """'qwen3.5-35b-a3b' -> 'Qwen3.5-35B-A3B'."""
    head, _, rest = model.partition("-")
    return head.replace("qwen", "Qwen") + ("-" + rest.upper() if rest else "")


_PLAIN = FuncFormatter(lambda v, _pos: f"{v:g}")


def _log_y(ax: Axes) -> None:
    """Log y axis labelled 0.5, 1, 2, 5, 10, ... instead of powers of ten."""
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    # Less than a decade of data: label more steps so the axis never shows a single tick.
    subs = (1.0, 2.0, 5.0) if hi / max(lo, 1e-300) >= 10 else (1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 7.0)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(_PLAIN)
    ax.yaxis.set_minor_formatter(NullFormatter())


def _load_x(ax: Axes, loads: np.ndarray) -> None:
    """Log-2 x axis with a tick at every swept load, labelled as plain numbers."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({float(x) for x in loads}))
    ax.xaxis.set_major_formatter(_PLAIN)
    ax.xaxis.set_minor_formatter(NullFormatter())


def figure1_pool_usage(points: pd.DataFrame) -> Figure:
    """Peak KV/state pool usage (GiB) vs concurrency per (model, gmu), both modes.

    Line: median over the fixed-concurrency workloads; band: their min-max. The dashed
    line is the pool ceiling (usable blocks x bytes per block).
    """
    df = _chain_concurrency(points)
    if df.empty:
        return _empty("Figure 1")
    df = df.assign(peak_gib=df["peak_kv_blocks"] * df["bytes_per_block"] / GIB)
    panels = _panels(df)
    ncol = min(3, len(panels))
    nrow = math.ceil(len(panels) / ncol)
    fig = Figure(figsize=(4.6 * ncol, 3.6 * nrow))
    axes = fig.subplots(nrow, ncol, squeeze=False)
    for ax, (model, gmu) in zip(axes.flat, panels, strict=False):
        sub = df[(df["model"] == model) & (df["gmu"] == gmu)]
        for mode, g in sub.groupby("commit", sort=False):
            stats = g.groupby("load")["peak_gib"].agg(["median", "min", "max"])
            c = MODE_COLOUR.get(str(mode), "grey")
            ax.plot(stats.index, stats["median"], "o-", color=c, label=MODE_LABEL.get(mode, mode))
            ax.fill_between(stats.index, stats["min"], stats["max"], color=c, alpha=0.18)
        ceiling = float((sub["usable_blocks"] * sub["bytes_per_block"]).max()) / GIB
        ax.axhline(ceiling, color="black", ls="--", lw=1, label=f"pool ceiling {ceiling:.1f} GiB")
        _load_x(ax, sub["load"].to_numpy())
        ax.set_title(f"{_short(model)}, gmu {gmu:g}")
        ax.set_xlabel("offered concurrency (requests)")
        ax.set_ylabel("peak pool usage (GiB per GPU)")
        ax.set_ylim(bottom=0, top=ceiling * 1.12)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(
        "Figure 1: peak KV/state pool usage vs load (median over workloads, band = min-max)"
        + step_time_suffix(points)
    )
    fig.tight_layout()
    return fig


def figure2_ttft(points: pd.DataFrame) -> Figure:
    """p99 TTFT vs concurrency (log y), rows (model, gmu) x columns workloads.

    The store-all / TreeWY ratio at the highest load is written on each panel.
    """
    df = _chain_concurrency(points)
    if df.empty:
        return _empty("Figure 2")
    panels = _panels(df)
    workloads = sorted(df["workload"].unique())
    width_in = max(3.3 * len(workloads), 10.0)
    title = "Figure 2: p99 TTFT vs concurrency (log scale); ratio at the highest load"
    # wrap long step-time labels to the figure, and make room for them above the panels
    lines = [title, *textwrap.wrap(step_time_suffix(points).strip(), int(width_in * 10))]
    head_in, foot_in = 0.2 + 0.25 * len(lines), 0.45
    fig = Figure(figsize=(width_in, 2.7 * len(panels) + head_in + foot_in))
    axes = fig.subplots(len(panels), len(workloads), squeeze=False, sharex=True)
    for i, (model, gmu) in enumerate(panels):
        for j, wl in enumerate(workloads):
            ax = axes[i, j]
            sub = df[(df["model"] == model) & (df["gmu"] == gmu) & (df["workload"] == wl)]
            last: dict[str, float] = {}
            panel_ms = sub["ttft_p99_s"].to_numpy(dtype=float) * 1e3
            panel_ms = panel_ms[np.isfinite(panel_ms) & (panel_ms > 0)]
            # TreeWY first, store-all dashed on top: where they coincide both stay visible.
            for mode, g in sorted(sub.groupby("commit"), key=lambda kv: kv[0] == "storeall"):
                g = g.sort_values("load")
                ms = g["ttft_p99_s"] * 1e3
                ax.plot(
                    g["load"],
                    ms,
                    "o--" if mode == "storeall" else "o-",
                    ms=3,
                    color=MODE_COLOUR.get(str(mode), "grey"),
                    label=MODE_LABEL.get(str(mode), str(mode)),
                )
                if len(g):
                    last[str(mode)] = float(ms.iloc[-1])
            if "storeall" in last and "reconstruct" in last and last["reconstruct"] > 0:
                r = last["storeall"] / last["reconstruct"]
                # top left: latency grows with load, so that corner holds no data
                ax.annotate(
                    f"SA/TW {r:.2f}x at {sub['load'].max():g}",
                    xy=(0.03, 0.97),
                    xycoords="axes fraction",
                    ha="left",
                    va="top",
                    fontsize=8,
                    bbox={"boxstyle": "round", "fc": "white", "ec": "0.6"},
                )
            _load_x(ax, df["load"].to_numpy())
            ax.tick_params(axis="x", labelrotation=60, labelsize=7)
            if panel_ms.size:
                # every point inside the axes, with room above for the ratio label
                ax.set_ylim(panel_ms.min() / 1.5, panel_ms.max() * 3.0)
            _log_y(ax)
            ax.grid(alpha=0.3, which="both")
            if i == 0:
                ax.set_title(wl, fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{_short(model)} gmu {gmu:g}\np99 TTFT (ms)", fontsize=8)
            if i == len(panels) - 1:
                ax.set_xlabel("concurrency (requests)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels))
    fig.suptitle("\n".join(lines), fontsize=11)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, foot_in / height, 1, 1))  # it makes room for the suptitle
    return fig


FIG3_METRICS: tuple[tuple[str, str], ...] = (
    ("throughput_ratio", "output throughput\nTW / SA"),
    ("kv_reduction", "peak pool usage\nSA / TW"),
    ("ttft_p99_ratio", "p99 TTFT\nSA / TW"),
    ("e2el_mean_ratio", "mean E2E latency\nSA / TW"),
    ("tpot_ratio", "mean TPOT\nSA / TW"),
)


def figure3_matched(matched: pd.DataFrame) -> Figure:
    """Ratios at every matched point, memory-bound vs headroom (> 1 is better for TreeWY)."""
    m = matched[matched["mode"] == "reconstruct"] if "mode" in matched else matched
    if m.empty:
        return _empty("Figure 3")
    fig = Figure(figsize=(3.1 * len(FIG3_METRICS), 4.0))
    axes = fig.subplots(1, len(FIG3_METRICS))
    rng = np.random.default_rng(0)  # jitter only; fixed so the figure is reproducible
    groups = (("memory-bound", True, "#9467bd"), ("headroom", False, "#7f7f7f"))
    for ax, (col, label) in zip(axes, FIG3_METRICS, strict=True):
        ticks: list[str] = []
        for x, (_name, flag, colour) in enumerate(groups):
            v = m.loc[m["memory_bound"] == flag, col].to_numpy(dtype=float)
            v = v[np.isfinite(v) & (v > 0)]
            if v.size:
                ax.boxplot(
                    [v],
                    positions=[x],
                    widths=0.5,
                    showfliers=False,
                    medianprops={"color": "black"},
                )
                ax.scatter(
                    x + rng.uniform(-0.15, 0.15, v.size),
                    v,
                    s=9,
                    color=colour,
                    alpha=0.7,
                    zorder=3,
                )
            gm = f", gm {geomean(pd.Series(v)):.2f}" if v.size else ""
            ticks.append(f"{groups[x][0]}\nn={v.size}{gm}")
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        _log_y(ax)
        ax.set_xticks([0, 1], ticks, fontsize=8)
        ax.set_xlim(-0.6, 1.6)
        ax.set_title(label, fontsize=9)
        ax.set_ylabel("ratio (> 1 better for TreeWY)", fontsize=8)
        ax.grid(alpha=0.3, axis="y", which="both")
    fig.suptitle(
        "Figure 3: matched points, store-all memory-bound vs headroom (gm = geomean)"
        + step_time_suffix(matched)
    )
    fig.tight_layout()
    return fig


TABLE1_COLS: tuple[tuple[str, str], ...] = (
    ("kv_reduction", "KV reduction (SA/TW)"),
    ("admitted_ratio", "admitted b (TW/SA)"),
    ("throughput_ratio", "throughput (TW/SA)"),
    ("tpot_ratio", "TPOT (SA/TW)"),
    ("ttft_p99_ratio", "p99 TTFT (SA/TW)"),
)


TREE_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("peak_running", "peak admitted requests", False),
    ("output_throughput_tok_per_s", "output throughput (tok/s)", False),
    ("ttft_p99_s", "p99 TTFT (s)", True),
    ("peak_kv_usage", "peak pool usage (fraction)", False),
)


TREE_MODEL_LABEL = {"rank": "rank model", "independent": "independence upper bound"}


def tree_model_suffix(df: pd.DataFrame) -> str:
    """'; tree acceptance: rank model' (and the temperature when > 0) for figure titles."""
    if "tree_model" not in df.columns:  # results written before the rank model
        return "; tree acceptance: independence upper bound"
    models = sorted(df["tree_model"].dropna().unique())
    text = "; tree acceptance: " + ", ".join(TREE_MODEL_LABEL.get(m, m) for m in models)
    temps = sorted(t for t in df.get("temperature", pd.Series(dtype=float)).unique() if t > 0)
    return text + (f", T={', '.join(f'{t:g}' for t in temps)}" if temps else "")


def _tree_points(points: pd.DataFrame) -> pd.DataFrame:
    """Draft-tree study: every fixed-concurrency point whose shape is given as widths."""
    conc = caching_off(points)
    conc = conc[conc["load_mode"] == "concurrency"]
    return conc[conc["tree"] != "chain"]


def figure4_trees(points: pd.DataFrame) -> Figure:
    """Tree study: admitted requests, throughput, p99 TTFT and pool usage vs concurrency,
    one line per tree shape; solid = TreeWY (reconstruct), dashed = store-all."""
    df = _tree_points(points)
    if df.empty:
        return _empty("Figure 4")
    shapes = sorted(df["tree"].unique(), key=lambda t: (len(str(t)), str(t)))
    cmap = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02")
    fig = Figure(figsize=(4.2 * len(TREE_METRICS), 3.6))
    axes = fig.subplots(1, len(TREE_METRICS), squeeze=False)[0]
    for ax, (col, label, log) in zip(axes, TREE_METRICS, strict=True):
        for k, shape in enumerate(shapes):
            for mode, style in (("reconstruct", "o-"), ("storeall", "s--")):
                sel = df[(df["tree"] == shape) & (df["commit"] == mode)].sort_values("load")
                if sel.empty:
                    continue
                ax.plot(
                    sel["load"],
                    sel[col],
                    style,
                    color=cmap[k % len(cmap)],
                    label=f"{shape} {MODE_LABEL.get(mode, mode)}",
                    markersize=4,
                )
        if col == "peak_running":
            loads = np.sort(df["load"].unique())
            ax.plot(loads, loads, ":", color="grey", label="offered concurrency")
        _load_x(ax, df["load"].to_numpy())
        if log:
            _log_y(ax)
        ax.set_xlabel("offered concurrency (requests)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6, loc="upper left")
    model, gmu = _panels(df)[0]
    fig.suptitle(
        f"Figure 4: draft-tree study, {_short(model)} gmu {gmu:g}, "
        f"{', '.join(sorted(df['workload'].unique()))} (solid TreeWY, dashed store-all)"
        + tree_model_suffix(df)
        + step_time_suffix(points)
    )
    fig.tight_layout()
    return fig


def table1(matched: pd.DataFrame) -> pd.DataFrame:
    """Geometric means over the fixed-concurrency chain points at each model's tightest gmu.

    Rows: per model, all matched points and the memory-bound subset.
    """
    m = matched[
        (matched["load_mode"] == "concurrency")
        & (matched["tree"] == "chain")
        & (matched["mode"] == "reconstruct")
    ]
    rows = []
    for model, g in m.groupby("model", sort=True):
        gmu = float(g["gmu"].min())
        at = g[g["gmu"] == gmu]
        for subset, part in (("all", at), ("memory-bound", at[at["memory_bound"]])):
            row: dict[str, object] = {
                "model": model,
                "gpu": str(at["gpu"].iloc[0]),
                "tp": int(at["tp"].iloc[0]),
                "gmu": gmu,
                "points": subset,
                "n": len(part),
            }
            for col, name in TABLE1_COLS:
                row[name] = geomean(part[col]) if len(part) else math.nan
            rows.append(row)
    return pd.DataFrame(rows)
