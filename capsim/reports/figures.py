"""Figures 1-3 and Table 1: DataFrames in, ``Drawn`` figure images / DataFrames out (pure).

Inputs are the sweep's ``points.parquet`` and ``matched.parquet`` tables; ``build.py`` does
the I/O. Colours are fixed per commit mode across every figure (store-all red, TreeWY
reconstruct blue, deferred green); prefix caching off is a solid line, on a dotted one.

- Figure 1: peak pool usage vs load, one panel per (deployment, load mode), chain drafts,
  caching off when a grid has both (Figure 5 has caching on); every panel on one y scale.
- Figure 2: p99 TTFT vs load, one image per deployment, one panel per workload (rate
  workloads included, x in req/s), every chain point (caching on and off); every panel of
  every image on one log y scale, every panel of one load mode on one x scale.
- Figure 3: the matched ratios, memory-bound vs headroom, per TreeWY mode, one log scale.
- Table 1: geometric means at each model's tightest gmu (concurrency, chain, caching off).

Figures are ``matplotlib.figure.Figure`` objects, never pyplot: no global state, thread-safe.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from capsim.reports.style import (
    CACHING_STYLE,
    GIB,
    LOAD_AXIS,
    Drawn,
    caching_of,
    chunks,
    facet_cols,
    facet_label,
    grid_shape,
    groups,
    ids,
    legend_below,
    load_x,
    log_range,
    log_y,
    mode_colour,
    mode_label,
    new_figure,
    step_time_note,
    suptitle,
    unique_handles,
)
from capsim.sweep.matched import BASELINE, geomean


def caching_off(points: pd.DataFrame) -> pd.DataFrame:
    """The prefix-caching-off points when a grid has both (Figure 5 shows caching on)."""
    pc = caching_of(points)
    return points[~pc] if (~pc).any() else points


def chain(points: pd.DataFrame) -> pd.DataFrame:
    return points[points["tree"] == "chain"]


def _series(
    ax: Axes, sub: pd.DataFrame, col: str, scale: float = 1.0, name_caching: bool | None = None
) -> None:
    """One line per (commit mode, caching): colour = mode, line style = caching; labels
    name the caching setting when ``name_caching`` (default: when ``sub`` has both).

    TreeWY first, store-all on top with hollow markers: where they coincide both show.
    """
    pc = caching_of(sub)
    keys = sorted({(str(m), bool(c)) for m, c in zip(sub["commit"], pc, strict=True)})
    keys.sort(key=lambda k: k[0] == BASELINE)
    both = pc.nunique() > 1 if name_caching is None else name_caching
    for mode, cached in keys:
        g = sub[(sub["commit"] == mode) & (pc == cached)].sort_values("load")
        ls, marker = CACHING_STYLE[cached]
        label = mode_label(mode) + (f", caching {'on' if cached else 'off'}" if both else "")
        ax.plot(
            g["load"],
            g[col].astype(float) * scale,
            ls=ls,
            marker=marker,
            ms=4,
            mfc="none" if mode == BASELINE else None,
            color=mode_colour(mode),
            label=label,
        )


def figure1_pool_usage(points: pd.DataFrame) -> list[Drawn]:
    """Peak KV/state pool usage (GiB per GPU) vs load per (deployment, load mode).

    Line: median over the workloads of that load mode; band: their min-max. Dashed black:
    the pool ceiling (usable blocks x bytes per block).
    """
    df = caching_off(chain(points))
    if df.empty:
        return []
    df = df.assign(peak_gib=df["peak_kv_blocks"] * df["bytes_per_block"] / GIB)
    ceil_gib = df["usable_blocks"] * df["bytes_per_block"] / GIB
    top = float(ceil_gib.max()) * 1.12
    panels = groups(df, [*facet_cols(df), "load_mode"])
    out: list[Drawn] = []
    by_mode = [[p for p in panels if p[0]["load_mode"] == m] for m in ("concurrency", "rate")]
    parts = [c for ps in by_mode for c in chunks(ps)]
    for i, part in enumerate(parts):
        nrow, ncol = grid_shape(len(part))
        fig = new_figure(nrow, ncol)
        axes = fig.subplots(nrow, ncol, squeeze=False, sharey=True)
        mode = str(part[0][0]["load_mode"])
        for ax, (key, sub) in zip(axes.flat, part, strict=False):
            for commit, g in sub.groupby("commit", sort=True):
                stats = g.groupby("load")["peak_gib"].agg(["median", "min", "max"])
                c = mode_colour(str(commit))
                ax.plot(stats.index, stats["median"], "o-", ms=4, color=c, label=mode_label(commit))
                ax.fill_between(stats.index, stats["min"], stats["max"], color=c, alpha=0.18)
            ceiling = float((sub["usable_blocks"] * sub["bytes_per_block"]).max()) / GIB
            ax.axhline(ceiling, color="black", ls="--", lw=1, label="pool ceiling")
            ax.text(
                0.02,
                ceiling,
                f" {ceiling:.1f} GiB",
                transform=ax.get_yaxis_transform(),
                va="bottom",
                fontsize=7,
            )
            load_x(ax, sub["load"].to_numpy(), mode)
            ax.set_title(facet_label(key), fontsize=8)
            ax.set_ylim(0, top)
            ax.grid(alpha=0.3)
        for ax in axes[:, 0]:
            ax.set_ylabel("peak pool usage (GiB per GPU)", fontsize=8)
        for ax in list(axes.flat)[len(part) :]:
            ax.set_visible(False)
        legend_below(fig, *unique_handles(axes.flat))
        shown = pd.concat([s for _, s in part])
        suptitle(
            fig,
            f"Figure 1: peak KV/state pool usage vs {LOAD_AXIS[mode].split(' (')[0]}"
            " (median over workloads, band = min-max)",
            step_time_note(shown),
        )
        out.append(Drawn("figure1_pool_usage", _title("Figure 1", i, len(parts)), fig, ids(shown)))
    return out


def _title(name: str, i: int, n: int) -> str:
    return name if n == 1 else f"{name}{'abcdefghijklmnopqrstuvwxyz'[i]}"


def _ratio_note(sub: pd.DataFrame) -> str:
    """'p99 SA/TW at 256: 1.71x' per caching setting, at the panel's highest load."""
    top = sub[sub["load"] == sub["load"].max()]
    pc = caching_of(top)
    notes = []
    for cached in sorted(set(pc)):
        at = top[pc == cached]
        sa = at.loc[at["commit"] == BASELINE, "ttft_p99_s"]
        tw = at.loc[at["commit"] == "reconstruct", "ttft_p99_s"]
        if len(sa) and len(tw) and float(tw.iloc[0]) > 0:
            tag = f"caching {'on' if cached else 'off'} " if pc.nunique() > 1 else ""
            notes.append(f"{tag}{float(sa.iloc[0]) / float(tw.iloc[0]):.2f}x")
    if not notes:
        return ""
    return f"p99 SA/TW at {float(sub['load'].max()):g}: " + ", ".join(notes)


def figure2_ttft(points: pd.DataFrame) -> list[Drawn]:
    """p99 TTFT vs load: one image per deployment, one panel per workload, shared axes."""
    df = chain(points)
    if df.empty:
        return []
    lo, hi = log_range(df["ttft_p99_s"].astype(float) * 1e3, pad=1.5)
    hi *= 1.5  # room at the top: latency grows with load, so the top right is empty
    xloads = {m: g["load"].to_numpy() for m, g in df.groupby("load_mode")}
    both = caching_of(df).nunique() > 1
    out: list[Drawn] = []
    deps = groups(df, facet_cols(df))
    for i, (key, dep) in enumerate(deps):
        wls = groups(dep, ["load_mode", "workload"])
        wls.sort(key=lambda kv: (kv[0]["load_mode"] != "concurrency", str(kv[0]["workload"])))
        for j, part in enumerate(chunks(wls)):
            nrow, ncol = grid_shape(len(part))
            fig = new_figure(nrow, ncol)
            axes = fig.subplots(nrow, ncol, squeeze=False, sharey=True)
            for ax, (wkey, sub) in zip(axes.flat, part, strict=False):
                _series(ax, sub, "ttft_p99_s", 1e3, both)
                mode = str(wkey["load_mode"])
                load_x(ax, xloads[mode], mode)
                log_y(ax, lo, hi)
                note = _ratio_note(sub)
                title = str(wkey["workload"]) + (" (open loop)" if mode == "rate" else "")
                ax.set_title(title + (f"\n{note}" if note else ""), fontsize=8)
                ax.grid(alpha=0.3, which="major")
            for ax in axes[:, 0]:
                ax.set_ylabel("p99 TTFT (ms, log scale)", fontsize=8)
            for ax in list(axes.flat)[len(part) :]:
                ax.set_visible(False)
            legend_below(fig, *unique_handles(axes.flat))
            suptitle(fig, f"Figure 2: p99 TTFT vs load, {facet_label(key)}", step_time_note(dep))
            name = _title("Figure 2", i, len(deps)) + (f" (part {j + 1})" if j else "")
            shown = pd.concat([s for _, s in part])
            out.append(Drawn("figure2_ttft", name, fig, ids(shown)))
    return out


FIG3_METRICS: tuple[tuple[str, str], ...] = (
    ("throughput_ratio", "output throughput\nTW / SA"),
    ("kv_reduction", "peak pool usage\nSA / TW"),
    ("ttft_p99_ratio", "p99 TTFT\nSA / TW"),
    ("e2el_mean_ratio", "mean E2E latency\nSA / TW"),
    ("tpot_ratio", "mean TPOT\nSA / TW"),
)


def figure3_matched(matched: pd.DataFrame, points: pd.DataFrame | None = None) -> list[Drawn]:
    """Ratios at every matched point, memory-bound vs headroom, per TreeWY mode (> 1 is
    better for TreeWY); every panel on one log scale."""
    if matched.empty:
        return []
    modes = sorted(matched["mode"].unique(), key=lambda m: (m != "reconstruct", m))
    vals = np.concatenate([matched[c].to_numpy(dtype=float) for c, _ in FIG3_METRICS])
    lo, hi = log_range(vals, pad=1.25)
    lo, hi = min(lo, 0.8), max(hi, 1.25)
    nrow, ncol = grid_shape(len(FIG3_METRICS))
    fig = new_figure(nrow, ncol, extra_h_in=1.2)
    grid = fig.subplots(nrow, ncol, squeeze=False, sharey=True)
    for ax in list(grid.flat)[len(FIG3_METRICS) :]:
        ax.set_visible(False)
    axes = list(grid.flat)[: len(FIG3_METRICS)]
    rng = np.random.default_rng(0)  # jitter only; fixed so the figure is reproducible
    width = 0.7 / len(modes)
    for ax, (col, label) in zip(axes, FIG3_METRICS, strict=True):
        for x, flag in enumerate((True, False)):
            for k, mode in enumerate(modes):
                v = matched.loc[(matched["memory_bound"] == flag) & (matched["mode"] == mode), col]
                v = v.to_numpy(dtype=float)
                v = v[np.isfinite(v) & (v > 0)]
                if not v.size:
                    continue
                pos = x + (k - (len(modes) - 1) / 2) * width
                ax.boxplot(
                    [v],
                    positions=[pos],
                    widths=width * 0.8,
                    showfliers=False,
                    medianprops={"color": "black"},
                )
                ax.scatter(
                    pos + rng.uniform(-width / 4, width / 4, v.size),
                    v,
                    s=8,
                    color=mode_colour(mode),
                    alpha=0.7,
                    zorder=3,
                    label=mode_label(mode),
                )
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        log_y(ax, lo, hi)
        n = [int((matched["memory_bound"] == f).sum()) for f in (True, False)]
        ax.set_xticks([0, 1], [f"memory-\nbound\nn={n[0]}", f"head-\nroom\nn={n[1]}"], fontsize=7)
        ax.set_xlim(-0.6, 1.6)
        ax.set_title(label, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3, axis="y", which="major")
    for ax in grid[:, 0]:
        ax.set_ylabel("ratio (> 1 better for TreeWY)", fontsize=8)
    legend_below(fig, *unique_handles(axes))
    suptitle(
        fig, "Figure 3: matched points, store-all memory-bound vs headroom", step_time_note(matched)
    )
    notes = [_geomeans(matched, m) for m in modes]
    pid: frozenset[str] = frozenset()
    if points is not None and "match_id" in points:
        pid = ids(points[points["match_id"].isin(set(matched["match_id"]))])
    return [Drawn("figure3_matched", "Figure 3", fig, pid, tuple(notes))]


def _geomeans(matched: pd.DataFrame, mode: str) -> str:
    m = matched[matched["mode"] == mode]
    parts = []
    for flag, name in ((True, "memory-bound"), (False, "headroom")):
        sub = m[m["memory_bound"] == flag]
        if len(sub):
            gm = ", ".join(f"{c} {geomean(sub[c]):.2f}" for c, _ in FIG3_METRICS)
            parts.append(f"{name} (n={len(sub)}): {gm}")
    return f"{mode_label(mode)} geometric means: " + "; ".join(parts)


TABLE1_COLS: tuple[tuple[str, str], ...] = (
    ("kv_reduction", "KV reduction (SA/TW)"),
    ("admitted_ratio", "admitted b (TW/SA)"),
    ("throughput_ratio", "throughput (TW/SA)"),
    ("tpot_ratio", "TPOT (SA/TW)"),
    ("ttft_p99_ratio", "p99 TTFT (SA/TW)"),
)


def table1(matched: pd.DataFrame) -> pd.DataFrame:
    """Geometric means over the fixed-concurrency chain points at each model's tightest gmu
    (prefix caching off when a grid has both). Rows: per (model, GPU, TP), all matched
    points and the memory-bound subset."""
    m = matched[
        (matched["load_mode"] == "concurrency")
        & (matched["tree"] == "chain")
        & (matched["mode"] == "reconstruct")
    ]
    if "prefix_caching" in m.columns:
        m = caching_off(m)
    rows = []
    for (model, gpu, tp), g in m.groupby(["model", "gpu", "tp"], sort=True):
        gmu = float(g["gmu"].min())
        at = g[g["gmu"] == gmu]
        for subset, part in (("all", at), ("memory-bound", at[at["memory_bound"]])):
            row: dict[str, object] = {
                "model": model,
                "gpu": str(gpu),
                "tp": int(tp),
                "gmu": gmu,
                "points": subset,
                "n": len(part),
            }
            for col, name in TABLE1_COLS:
                row[name] = geomean(part[col]) if len(part) else math.nan
            rows.append(row)
    return pd.DataFrame(rows)
