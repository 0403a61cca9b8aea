"""Reading a plan's candidate table: the cheapest fleet, Pareto frontiers, speculation advice.

Only rows with ``status == 'ok'`` count. The headline answers use the step-time model the
space asked for (``primary``); rows priced by a fallback model are listed apart, because
the roofline is not the calibrated model (it is several times faster per step at TP 1,
where both exist) and mixing them would rank configurations by model, not by hardware.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from capsim.plan.capacity import replicas_for
from capsim.plan.prices import fleet_usd_per_hour

SHOW: tuple[str, ...] = (
    "cand_id",
    "gpu",
    "tp",
    "spec",
    "replicas",
    "num_gpus",
    "fleet_usd_per_h",
    "usd_per_mtok",
    "capacity_req_per_s",
    "op_ttft_p99_s",
    "op_tpot_mean_s",
    "load_frac_of_capacity",
    "op_mean_kv_usage",
    "steady",
    "step_time_used",
)


def usable(df: pd.DataFrame, primary: str | None) -> pd.DataFrame:
    ok = df[df["status"] == "ok"]
    if primary is not None:
        ok = ok[ok["step_time_used"] == primary]
    return ok


def cheapest(df: pd.DataFrame, primary: str | None) -> pd.Series | None:
    """The lowest fleet $/h meeting every SLO at the operating point; ties: fewer GPUs,
    then lower p99 TTFT, then candidate order. Steady rows first (see capacity.py)."""
    ok = usable(df, primary)
    ok = ok[ok["op_misses"].fillna("") == ""] if "op_misses" in ok else ok
    if ok.empty:
        return None
    steady = ok[ok["steady"].astype(bool)]
    pick = steady if not steady.empty else ok
    order = pick.assign(_i=np.arange(len(pick))).sort_values(
        ["fleet_usd_per_h", "num_gpus", "op_ttft_p99_s", "_i"], kind="mergesort"
    )
    return order.iloc[0]


def pareto(df: pd.DataFrame, x: str, y: str, *, y_higher_better: bool = False) -> pd.DataFrame:
    """Rows no other row beats on both x (lower) and y; sorted by x."""
    d = df[np.isfinite(df[x].astype(float)) & np.isfinite(df[y].astype(float))]
    d = d.sort_values([x, y], ascending=[True, not y_higher_better], kind="mergesort")
    keep, best = [], -math.inf if y_higher_better else math.inf
    for idx, v in zip(d.index, d[y].astype(float), strict=True):
        if (v > best) if y_higher_better else (v < best):
            keep.append(idx)
            best = v
    return d.loc[keep]


def frontiers(df: pd.DataFrame, primary: str | None) -> dict[str, pd.DataFrame]:
    ok = usable(df, primary)
    return {
        "cost_vs_ttft": pareto(ok, "fleet_usd_per_h", "op_ttft_p99_s"),
        "cost_vs_throughput": pareto(
            ok, "fleet_usd_per_h", "max_throughput_tok_per_s", y_higher_better=True
        ),
    }


LOAD_LEVELS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)


def speculation_advice(
    df: pd.DataFrame,
    rate_req_per_s: float,
    headroom_frac: float,
    top_req_per_s: float,
    primary: str | None,
    levels: tuple[float, ...] = LOAD_LEVELS,
) -> pd.DataFrame:
    """Per load level and speculation setting (k or off, commit mode): the cheapest fleet
    and what it costs against the level's best. Replicas come from each row's capacity;
    above the searched rate (level > 1) a capacity at the search's top is a lower bound,
    so those replica counts are upper bounds (``capacity_is_bound``)."""
    ok = usable(df, primary)
    out: list[dict[str, Any]] = []
    for lvl in levels:
        need = rate_req_per_s * lvl * (1 + headroom_frac)
        rows = []
        for spec, g in ok.groupby("spec", sort=True):
            best = None
            for _, r in g.iterrows():
                n = replicas_for(need, float(r["capacity_req_per_s"]))
                cost = fleet_usd_per_hour(n, int(r["tp"]), float(r["usd_per_gpu_hour"]))
                key = (cost, n * int(r["tp"]), str(r["cand_id"]))
                if best is None or key < best[0]:
                    best = (key, r, n)
            assert best is not None
            (cost, gpus, cid), r, n = best
            rows.append(
                {
                    "load_frac": lvl,
                    "fleet_req_per_s": rate_req_per_s * lvl,
                    "spec": spec,
                    "num_spec_tok": int(r["num_spec_tok"]),
                    "commit": r["commit"],
                    "best_cand_id": cid,
                    "replicas": n,
                    "num_gpus": gpus,
                    "fleet_usd_per_h": cost,
                    "capacity_req_per_s": float(r["capacity_req_per_s"]),
                    "capacity_is_bound": bool(
                        float(r["capacity_req_per_s"]) >= top_req_per_s * (1 - 1e-9)
                    ),
                }
            )
        if not rows:
            continue
        low = min(x["fleet_usd_per_h"] for x in rows)
        for x in rows:
            x["extra_usd_per_h"] = x["fleet_usd_per_h"] - low
            x["best"] = x["fleet_usd_per_h"] == low
        out += rows
    return pd.DataFrame(out)
