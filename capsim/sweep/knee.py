"""The knee: the load at which a commit mode stops admitting every offered request.

For fixed-concurrency workloads, per (model, gpu, tp, gmu, workload, tree): the knee of a
mode is the smallest swept concurrency at which its peak admitted (running) requests fall
below the offered concurrency. Beside it: the analytical capacity of the memory plan
(``usable_blocks // blocks_per_request(mean context)``, ``analytical_capacity_req`` in the
summary), so the simulated knee can be checked against the pool arithmetic.

For arrival-rate workloads "offered concurrency" is undefined; their knee is the smallest
swept rate at which the mode is memory-bound (no pool headroom, see ``matched.py``).
A knee of NaN means: never reached within the swept loads.

Rows are split by every setting that changes capacity (``SETTINGS``: prefix caching, the
number of speculative tokens, the tree model and temperature, besides the deployment, the
workload and the tree), so caching on and off are never merged into one row.
"""

from __future__ import annotations

import math

import pandas as pd

from capsim.sweep.matched import BASELINE, is_memory_bound

GROUP: tuple[str, ...] = ("model", "gpu", "tp", "gmu", "workload", "tree")
SETTINGS: tuple[str, ...] = ("prefix_caching", "num_spec_tok", "tree_model", "temperature")
"""Point settings that change a pool's capacity or its use; each value gets its own row."""


def group_cols(points: pd.DataFrame) -> list[str]:
    """GROUP, the settings present in ``points``, and the load mode."""
    return [*GROUP, *(c for c in SETTINGS if c in points.columns), "load_mode"]


def _knee_concurrency(rows: pd.DataFrame) -> float:
    """The first load whose peak admitted falls short of it because of the pool (preempted,
    or less free than one request needs): under async scheduling a closed-loop client keeps
    one replacement in transit, so peak running can sit one short of the load with the pool
    half empty, which is not saturation."""
    for _, r in rows.sort_values("load").iterrows():
        if float(r["peak_running"]) < float(r["load"]) and is_memory_bound(r):
            return float(r["load"])
    return math.nan


def _knee_rate(rows: pd.DataFrame) -> float:
    for _, r in rows.sort_values("load").iterrows():
        if is_memory_bound(r):
            return float(r["load"])
    return math.nan


def knee_table(points: pd.DataFrame, *, treewy_mode: str = "reconstruct") -> pd.DataFrame:
    """One row per (deployment, gmu, workload, tree, setting): knees and analytical
    capacities."""
    keys = group_cols(points)
    cols = [
        *keys,
        "max_load",
        "knee_storeall",
        "knee_treewy",
        "capacity_storeall",
        "capacity_treewy",
        "mem_bound_points",
    ]
    if points.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for key, g in points.groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key, strict=True))
        sa = g[g["commit"] == BASELINE]
        tw = g[g["commit"] == treewy_mode]
        knee = _knee_concurrency if row["load_mode"] == "concurrency" else _knee_rate
        row["max_load"] = float(g["load"].max())
        row["knee_storeall"] = knee(sa) if not sa.empty else math.nan
        row["knee_treewy"] = knee(tw) if not tw.empty else math.nan
        row["capacity_storeall"] = _capacity(sa)
        row["capacity_treewy"] = _capacity(tw)
        row["mem_bound_points"] = int(sum(is_memory_bound(r) for _, r in sa.iterrows()))
        out.append(row)
    return pd.DataFrame(out, columns=cols)


def _capacity(rows: pd.DataFrame) -> float:
    if rows.empty or "analytical_capacity_req" not in rows:
        return math.nan
    # Same deployment and sample at every load: one capacity; the median guards against
    # a summary that varies slightly with load (e.g. the mean context of finished requests).
    return float(rows["analytical_capacity_req"].median())


def format_knee(df: pd.DataFrame) -> str:
    """A fixed-width text table for the terminal and the closing note."""
    if df.empty:
        return "(no points)"
    show = df.copy()
    same = [c for c in SETTINGS if c in show.columns and show[c].nunique(dropna=False) == 1]
    header = ""
    if same:
        header = "every row: " + ", ".join(f"{c}={show[c].iloc[0]}" for c in same) + "\n"
        show = show.drop(columns=same)

    def fmt(v: float) -> str:
        return "-" if pd.isna(v) else (f"{v:g}")

    for c in ("knee_storeall", "knee_treewy", "capacity_storeall", "capacity_treewy", "max_load"):
        show[c] = show[c].map(fmt)
    show["gmu"] = show["gmu"].map(lambda g: f"{g:.2f}")
    show = show.rename(
        columns={
            "knee_storeall": "knee SA",
            "knee_treewy": "knee TW",
            "capacity_storeall": "cap SA",
            "capacity_treewy": "cap TW",
            "mem_bound_points": "mem-bound",
            "prefix_caching": "caching",
            "num_spec_tok": "k",
        }
    )
    return header + show.to_string(index=False)
