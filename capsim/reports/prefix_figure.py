"""Figure 5: prefix caching on vs off (DataFrame in, ``Drawn`` images out; never simulates).

Every chain-draft (deployment, workload, load mode) of a grid that has prefix caching on
for some of its points gets one column of panels: the prefix-cache hit rate (caching on
only), admitted requests and p99 TTFT vs load; colour = commit mode, solid = caching off,
dotted = on. Two columns per image; each metric has one y scale across every image. A 0% hit
rate gets its reason, from the ideal hit rate of the point's own request sample: either
the workload shares no full block, or (with MTP) GDN "align" mode dropped the last cached
block of every hit, so a prefix shared by fewer than two blocks never hits.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from capsim.reports.figures import _series, chain
from capsim.reports.style import (
    PANEL_H_IN,
    Drawn,
    caching_of,
    chunks,
    facet_cols,
    facet_label,
    groups,
    ids,
    legend_below,
    load_x,
    log_range,
    log_y,
    new_figure,
    step_time_note,
    suptitle,
    unique_handles,
    wrap,
)

PREFIX_METRICS: tuple[tuple[str, str], ...] = (
    ("prefix_cache_hit_rate", "hit rate (% of tokens)"),
    ("peak_running", "admitted (peak running)"),
    ("ttft_p99_s", "p99 TTFT (s, log scale)"),
)
GROUPS_PER_IMAGE = 2


def ideal_hit_rate_of(row: pd.Series) -> float | None:
    """An infinite cache's hit rate on the point's own request sample, in whole blocks of
    the point's block size (``capsim traces stats --block-size``); None if unreadable."""
    from capsim.traces import load_workload
    from capsim.traces.sharing import ideal_hit_rate

    try:
        table = load_workload(
            str(row["workload"]),
            num_requests=int(row["num_requests_offered"]),
            seed=int(row["seed"]),
            model=str(row["model"]),
        )
        return ideal_hit_rate(table, int(row["block_size_tok"]))
    except (KeyError, ValueError, OSError, TypeError):
        return None


def zero_hit_reason(row: pd.Series, ideal: float | None) -> str:
    """Why a caching-on point hit nothing, in words, from the sample's ideal hit rate."""
    block = int(row["block_size_tok"]) if pd.notna(row.get("block_size_tok")) else None
    k = int(row.get("num_spec_tok", 0) or 0)
    if ideal is not None and ideal <= 0.0:
        size = f"one full {block}-token block" if block else "one full block"
        return f"0% hits on {row['workload']}: no request shares {size} with an earlier one"
    if k > 0 and block:
        known = f" (an ideal cache would hit {100 * ideal:.0f}%)" if ideal is not None else ""
        return (
            f"0% hits on {row['workload']}{known}: with MTP (k={k}) vLLM's GDN 'align' mode "
            f"drops the last cached block of every hit; at {block}-token blocks a prefix "
            f"shared by fewer than {2 * block} tokens never hits (docs/prefix_caching.md)"
        )
    return f"0% hits on {row['workload']}: no shared prefix reached the cache"


def _zero_notes(sel: pd.DataFrame, memo: dict[tuple, float | None]) -> list[str]:
    on = sel[caching_of(sel)]
    if on.empty or "prefix_cache_hit_rate" not in on:
        return []
    notes = []
    for _, r in on[on["prefix_cache_hit_rate"].fillna(0.0) <= 0.0].iterrows():
        key = tuple(
            r.get(c)
            for c in ("workload", "num_requests_offered", "seed", "model", "block_size_tok")
        )
        if key not in memo:
            memo[key] = ideal_hit_rate_of(r)
        notes.append(zero_hit_reason(r, memo[key]))
    return sorted(set(notes))


def caching_groups(points: pd.DataFrame) -> list[tuple[dict[str, object], pd.DataFrame]]:
    """The chain (deployment, workload, load mode) groups with caching on for some point."""
    df = chain(points)
    return [
        (k, g)
        for k, g in groups(df, [*facet_cols(df), "workload", "load_mode"])
        if caching_of(g).any()
    ]


def _row(axes: list, key: dict, sel: pd.DataFrame, lim: dict, zero: bool) -> None:
    """One (deployment, workload, load mode): its hit rate, admitted and p99 TTFT panels."""
    mode = str(key["load_mode"])
    for ax, (col, label) in zip(axes, PREFIX_METRICS, strict=True):
        data = sel if col != "prefix_cache_hit_rate" else sel[caching_of(sel)]
        _series(ax, data, col, 100.0 if col == "prefix_cache_hit_rate" else 1.0, True)
        if col == "peak_running" and mode == "concurrency":
            loads = np.sort(sel["load"].unique())
            ax.plot(
                loads,
                loads,
                color="black",
                lw=1,
                ls=(0, (1, 1)),
                zorder=10,
                label="offered concurrency",
            )
        load_x(ax, sel["load"].to_numpy(), mode)
        if col == "prefix_cache_hit_rate":
            ax.set_ylim(-2, 100)
            if zero:
                ax.text(
                    0.5,
                    0.55,
                    "0% hits: see the note below",
                    ha="center",
                    transform=ax.transAxes,
                    fontsize=7,
                    bbox={"boxstyle": "round", "fc": "white", "ec": "0.6"},
                )
        elif col == "peak_running":
            ax.set_ylim(0, lim["admitted_top"])
        else:
            log_y(ax, *lim["ttft"])
        ax.set_ylabel(label, fontsize=8)
        wl = f"{key['workload']}{' (open loop)' if mode == 'rate' else ''}"
        ax.set_title(f"{facet_label(key)}\n{wl}", fontsize=7)
        ax.grid(alpha=0.3)


def _limits(rows: list[tuple[dict, pd.DataFrame]]) -> dict:
    alldf = pd.concat([g for _, g in rows])
    top = float(np.nanmax(alldf["peak_running"].astype(float))) * 1.08
    if (alldf["load_mode"] == "concurrency").any():
        top = max(top, float(alldf["load"].max()) * 1.08)
    return {"ttft": log_range(alldf["ttft_p99_s"].astype(float), pad=1.5), "admitted_top": top}


def figure5_prefix_caching(points: pd.DataFrame) -> list[Drawn]:
    """Figure 5 images (none when no point has prefix caching on)."""
    if "prefix_caching" not in points.columns:
        return []
    rows = caching_groups(points)
    if not rows:
        return []
    lim = _limits(rows)
    out: list[Drawn] = []
    memo: dict[tuple, float | None] = {}  # ideal hit rates, per sample and block size
    parts = chunks(rows, GROUPS_PER_IMAGE)
    for i, part in enumerate(parts):
        row_notes = [_zero_notes(sel, memo) for _, sel in part]
        notes = list(dict.fromkeys(n for rn in row_notes for n in rn))
        nrow, ncol = len(PREFIX_METRICS), len(part)  # a column per group, a row per metric
        fig = new_figure(nrow, ncol, extra_h_in=1.1)
        text = ""
        if notes:
            text = "\n".join(wrap(f"note: {n}", fig.get_figwidth(), 7.5) for n in notes)
            fig.set_figheight(fig.get_figheight() + 0.14 * (text.count("\n") + 1) + 0.2)
        heights = [PANEL_H_IN] * nrow + ([0.14 * (text.count("\n") + 1) + 0.1] if text else [])
        gs = fig.add_gridspec(len(heights), ncol, height_ratios=heights)
        cols = [[fig.add_subplot(gs[m, c]) for m in range(nrow)] for c in range(ncol)]
        for c, (key, sel) in enumerate(part):
            _row(cols[c], key, sel, lim, bool(row_notes[c]))
        if text:
            note_ax = fig.add_subplot(gs[nrow, :])
            note_ax.axis("off")
            note_ax.text(
                0.0, 1.0, text, ha="left", va="top", fontsize=7.5, transform=note_ax.transAxes
            )
        legend_below(fig, *unique_handles(a for col in cols for a in col))
        shown = pd.concat([g for _, g in part])
        suptitle(fig, "Figure 5: prefix caching on (dotted) vs off (solid)", step_time_note(shown))
        name = "Figure 5" if len(parts) == 1 else f"Figure 5{'abcdefghijklmnopqrstuvwxyz'[i]}"
        out.append(Drawn("figure5_prefix_caching", name, fig, ids(shown), tuple(notes)))
    return out
