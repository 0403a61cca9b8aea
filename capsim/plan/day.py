"""A day of traffic: replicas needed per hour, fixed fleet vs one that follows the load.

Each hour's rate is ``peak x rate_frac[h]`` (``capsim.traces.diurnal``). A configuration's
per-replica capacity (from the plan's search) gives ``replicas[h] = ceil(rate[h] x (1 +
headroom) / capacity)``. Fixed fleet: max over the day, all day. Following fleet: each
hour's count for that hour (scaling is assumed instant, start-up time not charged).
The SLO breaks in hour h for a fixed fleet of N when ``rate[h] > N x capacity`` (no
headroom left); ``breaks_at_fixed_n`` lists those hours for a fleet sized at the mean.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from capsim.plan.capacity import replicas_for


def day_plan(
    hourly_rate_req_per_s: np.ndarray,
    capacity_req_per_s: float,
    headroom_frac: float,
    tp: int,
    usd_per_gpu_hour: float,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    rates = np.asarray(hourly_rate_req_per_s, dtype=np.float64)
    if rates.ndim != 1 or rates.size == 0 or not np.all(np.isfinite(rates)) or np.any(rates < 0):
        raise ValueError("day.hourly_rate_req_per_s: needs finite rates >= 0, one per hour")
    if not capacity_req_per_s > 0:
        raise ValueError(f"day.capacity_req_per_s={capacity_req_per_s!r}: must be > 0")
    need = [
        replicas_for(r * (1 + headroom_frac), capacity_req_per_s) if r > 0 else 0 for r in rates
    ]
    per_gpu_h = tp * usd_per_gpu_hour
    n_fixed = max(need)
    n_mean = replicas_for(float(rates.mean()) * (1 + headroom_frac), capacity_req_per_s)
    table = pd.DataFrame(
        {
            "hour": np.arange(rates.size),
            "rate_req_per_s": rates,
            "replicas": need,
            "load_frac_of_fleet": rates / np.maximum(np.array(need), 1) / capacity_req_per_s,
            "slo_breaks_at_mean_fleet": rates > n_mean * capacity_req_per_s,
        }
    )
    summary = {
        "fixed_replicas": n_fixed,
        "fixed_usd_per_day": n_fixed * per_gpu_h * rates.size,
        "follow_usd_per_day": float(sum(need) * per_gpu_h),
        "mean_sized_replicas": n_mean,
        "breaks_at_fixed_n": [int(h) for h in table.loc[table["slo_breaks_at_mean_fleet"], "hour"]],
    }
    summary["follow_saving_frac"] = (
        1 - summary["follow_usd_per_day"] / summary["fixed_usd_per_day"]
        if summary["fixed_usd_per_day"] > 0
        else math.nan
    )
    return table, summary
