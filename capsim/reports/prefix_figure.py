"""Figure 5: prefix caching, on vs off: hit rate, admitted requests and p99 TTFT vs
concurrency, per commit mode (DataFrame in, matplotlib Figure out; never simulates).

Uses fixed-concurrency chain points of grids that have ``prefix_caching`` true for some
points (``experiments/prefix_caching.toml``); one row of panels per (model, gmu, workload).
Solid = caching on, dashed = off; colour = commit mode.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from capsim.reports.figures import (
    MODE_COLOUR,
    MODE_LABEL,
    _empty,
    _load_x,
    _short,
    step_time_suffix,
)

PREFIX_METRICS: tuple[tuple[str, str], ...] = (
    ("prefix_cache_hit_rate", "prefix-cache hit rate (hits / queries, tokens)"),
    ("peak_running", "admitted requests (peak running)"),
    ("ttft_p99_s", "p99 TTFT (s)"),
)


def figure5_prefix_caching(points: pd.DataFrame) -> Figure:
    if "prefix_caching" not in points.columns or not points["prefix_caching"].astype(bool).any():
        return _empty("Figure 5 (prefix caching)")
    df = points[(points["load_mode"] == "concurrency") & (points["tree"] == "chain")]
    rows = sorted(
        {
            (str(m), float(g), str(w))
            for m, g, w in zip(df["model"], df["gmu"], df["workload"], strict=True)
        }
    )
    fig = Figure(figsize=(4.2 * len(PREFIX_METRICS), 3.2 * len(rows)))
    axes = fig.subplots(len(rows), len(PREFIX_METRICS), squeeze=False)
    for r, (model, gmu, wl) in enumerate(rows):
        sel = df[(df["model"] == model) & (df["gmu"] == gmu) & (df["workload"] == wl)]
        for c, (col, label) in enumerate(PREFIX_METRICS):
            ax = axes[r][c]
            for mode in sorted(sel["commit"].unique()):
                for pc, style in ((True, "o-"), (False, "s--")):
                    line = sel[(sel["commit"] == mode) & (sel["prefix_caching"].astype(bool) == pc)]
                    if line.empty or col not in line or line[col].isna().all():
                        continue
                    line = line.sort_values("load")
                    ax.plot(
                        line["load"],
                        line[col],
                        style,
                        color=MODE_COLOUR.get(mode, "black"),
                        label=f"{MODE_LABEL.get(mode, mode)}, caching {'on' if pc else 'off'}",
                        markersize=4,
                    )
            if col == "peak_running":
                loads = np.sort(sel["load"].unique())
                ax.plot(loads, loads, ":", color="grey", label="offered concurrency")
            if col == "prefix_cache_hit_rate":
                ax.set_ylim(-0.02, 1.0)  # one scale for every row: 0% hits read as 0%
            _load_x(ax, sel["load"].to_numpy())
            ax.set_xlabel("offered concurrency (requests)")
            ax.set_ylabel(label, fontsize=8)
            ax.set_title(f"{_short(model)} gmu {gmu:g}, {wl}", fontsize=8)
            ax.grid(alpha=0.3)
        # the admitted panel carries every line style (caching on and off, offered load)
        axes[r][1].legend(fontsize=6, loc="upper left")
    fig.suptitle(
        "Figure 5: prefix caching (GDN 'align' mode), solid = on, dashed = off"
        + step_time_suffix(points)
    )
    title_in = 0.8  # room for the two-line suptitle above the first row's panel titles
    fig.tight_layout(rect=(0, 0, 1, 1 - title_in / fig.get_figheight()))
    return fig
