"""Plan figures: cost vs p99 TTFT, cost vs throughput, speculation advice, a day's replicas.

DataFrames in, ``matplotlib.figure.Figure`` out (pure, no pyplot, no files). Colour = GPU
(fixed), filled marker = priced by the primary step-time model, hollow = a fallback
(roofline) model; the frontier is the line, the cheapest fleet the star.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

GPU_COLOUR: dict[str, str] = {"H100": "#9467bd", "H200": "#1f77b4", "B200": "#2ca02c"}
OTHER = "#7f7f7f"


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"]


def _scatter(ax: Any, df: pd.DataFrame, x: str, y: str, primary: str) -> None:
    for gpu, g in df.groupby("gpu", sort=True):
        col = GPU_COLOUR.get(str(gpu), OTHER)
        prim = g[g["step_time_used"] == primary]
        fb = g[g["step_time_used"] != primary]
        if len(prim):
            ax.scatter(prim[x], prim[y], s=26, color=col, label=f"{gpu} ({primary})", zorder=3)
        if len(fb):
            ax.scatter(
                fb[x],
                fb[y],
                s=26,
                facecolors="none",
                edgecolors=col,
                label=f"{gpu} (fallback: {', '.join(sorted(set(fb['step_time_used'])))})",
                zorder=2,
            )


def figure_cost_vs_ttft(
    df: pd.DataFrame,
    frontier: pd.DataFrame,
    best: dict[str, Any] | None,
    primary: str,
    ttft_target_s: float | None,
) -> Figure:
    fig = Figure(figsize=(7.2, 4.4), layout="constrained")
    ax = fig.add_subplot()
    ok = _ok(df)
    _scatter(ax, ok, "fleet_usd_per_h", "op_ttft_p99_s", primary)
    if len(frontier):
        ax.step(
            frontier["fleet_usd_per_h"],
            frontier["op_ttft_p99_s"],
            where="post",
            color="#333",
            lw=1,
            label="Pareto frontier",
        )
    if best is not None:
        ax.scatter(
            [best["fleet_usd_per_h"]],
            [best["op_ttft_p99_s"]],
            marker="*",
            s=220,
            color="#ff7f0e",
            edgecolors="k",
            zorder=5,
            label="cheapest",
        )
    if ttft_target_s:
        ax.axhline(ttft_target_s, color="#d62728", ls="--", lw=1, label="p99 TTFT target")
    ax.set_xlabel("fleet cost ($/h, list prices)")
    ax.set_ylabel("p99 TTFT at the operating point (s)")
    ax.set_yscale("log")
    ax.set_title("Cost vs p99 TTFT (each point: one configuration with the replicas it needs)")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    return fig


def figure_cost_vs_throughput(df: pd.DataFrame, frontier: pd.DataFrame, primary: str) -> Figure:
    fig = Figure(figsize=(7.2, 4.4), layout="constrained")
    ax = fig.add_subplot()
    _scatter(ax, _ok(df), "fleet_usd_per_h", "max_throughput_tok_per_s", primary)
    if len(frontier):
        ax.step(
            frontier["fleet_usd_per_h"],
            frontier["max_throughput_tok_per_s"],
            where="post",
            color="#333",
            lw=1,
            label="Pareto frontier",
        )
    ax.set_xlabel("fleet cost ($/h, list prices)")
    ax.set_ylabel("fleet output throughput at capacity (tok/s)")
    ax.set_title(
        "Cost vs throughput the fleet carries within the SLO\n"
        "(a replica that met the SLO at the top searched rate: a lower bound)",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    return fig


def figure_advice(adv: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(7.2, 4.0), layout="constrained")
    ax = fig.add_subplot()
    if adv.empty:
        ax.text(0.5, 0.5, "no configuration met the SLO", ha="center", transform=ax.transAxes)
        return fig
    specs = sorted(set(adv["spec"]))
    levels = sorted(set(adv["load_frac"]))
    width = 0.8 / max(len(specs), 1)
    for i, spec in enumerate(specs):
        s = adv[adv["spec"] == spec].set_index("load_frac").reindex(levels)
        ax.bar(np.arange(len(levels)) + i * width, s["fleet_usd_per_h"], width, label=spec)
    ax.set_xticks(np.arange(len(levels)) + width * (len(specs) - 1) / 2)
    ax.set_xticklabels([f"{lv:g} x rate" for lv in levels])
    ax.set_ylabel("cheapest fleet ($/h)")
    ax.set_title("Speculation advice: cheapest fleet per setting and load level")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, axis="y")
    return fig


def figure_day(day: pd.DataFrame, label: str) -> Figure:
    fig = Figure(figsize=(7.2, 3.8), layout="constrained")
    ax = fig.add_subplot()
    ax.step(day["hour"], day["replicas"], where="mid", color="#1f77b4", label="replicas needed")
    ax.set_xlabel("hour of day")
    ax.set_ylabel("replicas")
    ax2 = ax.twinx()
    ax2.plot(day["hour"], day["rate_req_per_s"], color="#ff7f0e", lw=1, label="rate (req/s)")
    ax2.set_ylabel("arrival rate (req/s)")
    ax.set_title(f"A day of traffic (STAND-IN profile): {label}")
    ax.grid(alpha=0.3)
    return fig
