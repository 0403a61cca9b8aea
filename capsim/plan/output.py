"""A plan's files: every candidate (Parquet), the answer (JSON), the advice (CSV).

``candidates.parquet`` and ``plan.json`` depend only on the inputs and the seed (one
seed -> identical bytes); wall times live in ``timing.json`` alone. Writes are atomic.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.io.atomic import write_bytes_atomic, write_json_atomic, write_parquet_atomic
from capsim.plan.frontier import SHOW, cheapest, frontiers, speculation_advice
from capsim.plan.search import PlanRun

VOLATILE: tuple[str, ...] = ("sim_wall_s",)


def _clean(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _row(r: pd.Series | None, cols: tuple[str, ...] = SHOW) -> dict[str, Any] | None:
    if r is None:
        return None
    return {c: _clean(r[c]) for c in cols if c in r.index}


def counts(df: pd.DataFrame) -> dict[str, int]:
    c = df["status"].value_counts().to_dict()
    out = {k: int(c.get(k, 0)) for k in ("ok", "infeasible", "refused", "pruned")}
    out["total"] = len(df)
    out["simulated"] = int((df.get("num_sims", pd.Series(0)).fillna(0) > 0).sum())
    out["num_sims"] = int(df.get("num_sims", pd.Series(0)).fillna(0).sum())
    out["roofline_fallback"] = int(
        (
            df.get("step_time_note", pd.Series("")).fillna("").str.startswith("roofline FALLBACK")
        ).sum()
    )
    return out


def plan_answer(run: PlanRun) -> dict[str, Any]:
    """The JSON answer: cheapest (primary step-time model, and any), frontiers, advice."""
    df, inp = run.candidates, run.inputs
    primary = inp.space.step_time
    best = cheapest(df, primary)
    best_any = cheapest(df, None)
    fr = frontiers(df, primary)
    adv = speculation_advice(
        df, run.traffic.rate_req_per_s, inp.settings.headroom_frac, run.top_req_per_s, primary
    )
    used = sorted(set(df["gpu"]))
    return {
        "model": inp.model,
        "traffic": dataclasses.asdict(run.traffic)
        | {"stats": dataclasses.asdict(run.traffic.stats)},
        "slo": inp.slo.describe(),
        "headroom_frac": inp.settings.headroom_frac,
        "seed": inp.settings.seed,
        "step_time_primary": primary,
        "counts": counts(df),
        "cheapest": _row(best),
        "cheapest_any_step_time": _row(best_any),
        "frontier_cost_vs_ttft": [_row(r) for _, r in fr["cost_vs_ttft"].iterrows()],
        "frontier_cost_vs_throughput": [_row(r) for _, r in fr["cost_vs_throughput"].iterrows()],
        "speculation_advice": [
            {k: _clean(v) for k, v in r.items()} for r in adv.to_dict("records")
        ],
        "prices": {g: dataclasses.asdict(run.prices[g]) for g in used if g in run.prices},
        "prices_are": (
            "public on-demand LIST prices (see source_url); not negotiated or reserved rates"
        ),
        "gpu_step_times": {g: _gpu_label(g) for g in used},
    }


def _gpu_label(name: str) -> str:
    from capsim.gpus import get_gpu

    return get_gpu(name).step_times


def write_plan(run: PlanRun, out_dir: Path | str) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df = run.candidates.drop(columns=[c for c in VOLATILE if c in run.candidates])
    paths = {
        "candidates": out / "candidates.parquet",
        "plan": out / "plan.json",
        "advice": out / "advice.csv",
        "timing": out / "timing.json",
    }
    write_parquet_atomic(paths["candidates"], df)
    ans = plan_answer(run)
    write_json_atomic(paths["plan"], ans)
    write_bytes_atomic(
        paths["advice"], pd.DataFrame(ans["speculation_advice"]).to_csv(index=False).encode()
    )
    write_json_atomic(paths["timing"], {"wall_s": run.wall_s, "sim_wall_s": run.sim_wall_s})
    return paths


def answer_text(ans: dict[str, Any]) -> str:
    """A few terminal lines."""
    c, b = ans["counts"], ans["cheapest"]
    lines = [
        f"{c['total']} candidates: {c['ok']} ok, {c['infeasible']} infeasible, "
        f"{c['refused']} refused, {c['pruned']} pruned by cost; {c['simulated']} searched "
        f"({c['num_sims']} simulations); {c['roofline_fallback']} priced by the roofline fallback",
    ]
    if b is None:
        lines.append(f"no configuration priced by {ans['step_time_primary']} meets {ans['slo']}")
    else:
        lines.append(
            f"cheapest ({ans['step_time_primary']}): {b['replicas']} x {b['gpu']} TP{b['tp']} "
            f"[{b['spec']}] = {b['num_gpus']} GPUs, ${b['fleet_usd_per_h']:.2f}/h list, "
            f"${b['usd_per_mtok']:.3f}/Mtok; p99 TTFT {b['op_ttft_p99_s'] * 1e3:.0f} ms, "
            f"mean TPOT {b['op_tpot_mean_s'] * 1e3:.1f} ms at the operating point; "
            f"each replica at {b['load_frac_of_capacity']:.0%} of its SLO capacity, "
            f"KV {b['op_mean_kv_usage']:.0%} used; steady={b['steady']}"
        )
    a = ans["cheapest_any_step_time"]
    if a is not None and (b is None or a["cand_id"] != b["cand_id"]):
        lines.append(
            f"cheapest with fallback-priced rows ({a['step_time_used']}): {a['replicas']} x "
            f"{a['gpu']} TP{a['tp']} [{a['spec']}] ${a['fleet_usd_per_h']:.2f}/h (not comparable)"
        )
    return "\n".join(lines)


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, default=str)
