"""Matched points: TreeWY / store-all ratios and the memory-bound classification.

A matched point is a set of rows of ``points.parquet`` that share every field but the
commit mode (same ``match_id``). For each non-store-all mode present, one row is made with
the ratios below, every one oriented so that **> 1 is better for TreeWY**:

    throughput_ratio  = output throughput TW / SA
    kv_reduction      = peak pool blocks SA / TW
    admitted_ratio    = peak running requests TW / SA          (Table 1's "b")
    tpot_ratio        = mean TPOT SA / TW
    ttft_p99_ratio    = p99 TTFT SA / TW
    ttft_mean_ratio   = mean TTFT SA / TW
    e2el_mean_ratio   = mean end-to-end latency SA / TW

Memory-bound (SPEC.md s5: "store-all has no pool headroom left at that load"): store-all
preempted at least once, or its free blocks at peak pool usage could not hold one more
request of the sample's mean prompt length (its attention blocks plus its GDN slots):

    usable_blocks * (1 - peak_kv_usage) < blocks_per_request(mean_prompt_tok)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from capsim.commit_modes import BASELINE_MODE

BASELINE = BASELINE_MODE

RATIOS: dict[str, tuple[str, str]] = {
    # name: (column, orientation) where "up" = TW / SA, "down" = SA / TW
    "throughput_ratio": ("output_throughput_tok_per_s", "up"),
    "kv_reduction": ("peak_kv_blocks", "down"),
    "admitted_ratio": ("peak_running", "up"),
    "tpot_ratio": ("tpot_mean_s", "down"),
    "ttft_p99_ratio": ("ttft_p99_s", "down"),
    "ttft_mean_ratio": ("ttft_mean_s", "down"),
    "e2el_mean_ratio": ("e2el_mean_s", "down"),
}

KEEP: tuple[str, ...] = (
    "output_throughput_tok_per_s",
    "peak_kv_usage",
    "peak_kv_blocks",
    "peak_running",
    "num_preemptions",
    "ttft_p99_s",
    "ttft_mean_s",
    "tpot_mean_s",
    "e2el_mean_s",
    "analytical_capacity_req",
)

ID_COLS: tuple[str, ...] = (
    "match_id",
    "block",
    "model",
    "gpu",
    "tp",
    "gmu",
    "workload",
    "load_mode",
    "load",
    "tree",
    "num_spec_tok",
    "prefix_caching",
    "seed",
    "step_time_label",
)


def _ratio(num: float, den: float) -> float:
    if den is None or num is None or not (math.isfinite(num) and math.isfinite(den)):
        return math.nan
    if den == 0:
        return math.nan if num == 0 else math.inf
    return float(num) / float(den)


def headroom_blocks_needed(row: pd.Series) -> float:
    """Blocks one more request of the sample's mean prompt would take at admission."""
    if "blocks_per_mean_request" in row and pd.notna(row["blocks_per_mean_request"]):
        return float(row["blocks_per_mean_request"])
    return math.nan


def is_memory_bound(sa: pd.Series) -> bool:
    """Store-all preempted, or had fewer free blocks at its peak than one request needs."""
    if float(sa.get("num_preemptions", 0) or 0) > 0:
        return True
    need = headroom_blocks_needed(sa)
    usable = float(sa.get("usable_blocks", math.nan))
    peak = float(sa.get("peak_kv_usage", math.nan))
    if not (math.isfinite(need) and math.isfinite(usable) and math.isfinite(peak)):
        return False
    return usable * (1.0 - peak) < need


def matched_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row per (matched point, TreeWY mode) with ratios and the memory-bound flag."""
    if points.empty:
        return pd.DataFrame(columns=[*ID_COLS, "mode", "memory_bound", *RATIOS])
    rows: list[dict[str, Any]] = []
    for _, group in points.groupby("match_id", sort=False):
        base = group[group["commit"] == BASELINE]
        if base.empty:
            continue
        sa = base.iloc[0]
        for _, tw in group[group["commit"] != BASELINE].iterrows():
            row: dict[str, Any] = {c: sa[c] for c in ID_COLS if c in sa}
            row["mode"] = tw["commit"]
            row["memory_bound"] = is_memory_bound(sa)
            for name, (col, how) in RATIOS.items():
                if col not in sa or col not in tw:
                    row[name] = math.nan
                elif how == "up":
                    row[name] = _ratio(tw[col], sa[col])
                else:
                    row[name] = _ratio(sa[col], tw[col])
            for col in KEEP:
                if col in sa:
                    row[f"{col}_sa"] = sa[col]
                if col in tw:
                    row[f"{col}_tw"] = tw[col]
            rows.append(row)
    return pd.DataFrame(rows)


def geomean(values: pd.Series) -> float:
    """Geometric mean of the finite positive values (nan if none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return float(np.exp(np.log(v).mean())) if v.size else math.nan
