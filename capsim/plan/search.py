"""The plan search: bounds for every candidate, then capacity searches in cost order.

Stages (every simulation is a task on a ``capsim.sweep.executors`` executor, so the
process pool and dask give the same rows; rows are put back in candidate order)::

    expand space -> bound tasks (memory plan, step model, analytic floors; no SimPy)
      -> refused / infeasible rows (labelled reasons) and a cost floor per candidate
      -> waves of ``wave_size`` capacity tasks, cheapest cost floor first; after each
         wave, candidates whose cost floor exceeds (1 + frontier_slack) x the cheapest
         fleet found so far are pruned ("cost floor" rows). Waves make the pruning
         independent of completion order: one seed -> identical rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from capsim.plan.bounds import SampleStats, bound_row, build_cost, sample_stats
from capsim.plan.capacity import (
    CapacityTask,
    grid_rate,
    num_grid_for,
    replicas_for,
    search_capacity,
)
from capsim.plan.inputs import PlanInputs, PlanSlo
from capsim.plan.prices import GpuPrice, fleet_usd_per_hour, load_prices, price_for, usd_per_mtok
from capsim.plan.space import Candidate, default_max_model_len, expand_space

STAT_SAMPLE_REQUESTS = 2000


@dataclass(frozen=True, slots=True)
class BoundTask:
    cands: tuple[Candidate, ...]
    stats: SampleStats
    slo: PlanSlo
    fallback: str


def run_bounds(task: BoundTask) -> list[dict[str, Any]]:
    """Bounds of candidates sharing one step-time model (top-level: runs in workers)."""
    cost, used, note = build_cost(task.cands[0], task.fallback)
    rows = []
    for c in task.cands:
        row: dict[str, Any] = {"cand_id": c.cand_id, "step_time_used": used, "step_time_note": note}
        if cost is None:
            rows.append(row | {"status": "refused", "reason": note})
            continue
        try:
            c.sim_config(workload="sharegpt", rate_req_per_s=1.0, num_requests=1)
            row |= bound_row(c, cost, task.stats, task.slo)
        except ValueError as exc:
            rows.append(row | {"status": "refused", "reason": str(exc).splitlines()[0]})
            continue
        miss = row.pop("latency_floor_miss")
        if miss:
            rows.append(row | {"status": "infeasible", "reason": "bound: " + miss})
        else:
            rows.append(row | {"status": "bounded", "reason": ""})
    return rows


@dataclass(slots=True)
class TrafficResolved:
    workload: str
    rate_req_per_s: float
    burstiness: float
    stats: SampleStats
    max_model_len: int
    source: str


def resolve_traffic(inputs: PlanInputs) -> TrafficResolved:
    from capsim.traces import load_workload

    tr, seed = inputs.traffic, inputs.settings.seed
    table = load_workload(
        tr.workload, num_requests=STAT_SAMPLE_REQUESTS, seed=seed, model=inputs.model
    )
    rate, burst, source = tr.rate_req_per_s, tr.burstiness, "given"
    if tr.trace:
        if table.arrival_s is None:
            raise ValueError(f"traffic.workload={tr.workload!r}: has no timestamps (trace=True)")
        gaps = np.diff(np.asarray(table.arrival_s, dtype=np.float64))
        gaps = gaps[gaps >= 0]
        if rate is None:
            rate = float(1.0 / gaps.mean())
        if burst is None:
            cv2 = float(gaps.var() / gaps.mean() ** 2)
            burst = 1.0 / cv2 if cv2 > 0 else 1.0
        source = f"trace {tr.workload}: mean rate and gamma shape 1/CV^2 of its gaps"
    return TrafficResolved(
        workload=tr.workload,
        rate_req_per_s=float(rate),  # type: ignore[arg-type]
        burstiness=float(burst if burst is not None else 1.0),
        stats=sample_stats(table.prompt_tok, table.output_tok),
        max_model_len=default_max_model_len(table.prompt_tok, table.output_tok),
        source=source,
    )


def _group_key(c: Candidate) -> tuple[Any, ...]:
    return (c.gpu, c.tp, c.num_spec_tok, c.tree, c.commit, c.kv_cache_dtype, c.step_time)


@dataclass(slots=True)
class PlanRun:
    """Everything a plan found: one row per candidate and the context to read it."""

    inputs: PlanInputs
    traffic: TrafficResolved
    candidates: pd.DataFrame
    prices: dict[str, GpuPrice]
    top_req_per_s: float
    wall_s: float = 0.0
    sim_wall_s: float = 0.0


def run_plan(
    inputs: PlanInputs,
    *,
    executor: Any = None,
    progress: Callable[[int, str], None] | None = None,
) -> PlanRun:
    """Search the space; ``progress(n_done_delta, stage)`` is called as tasks finish."""
    import time

    from capsim.sweep.executors import SerialExecutor

    t0 = time.perf_counter()
    ex = executor or SerialExecutor()
    st, sp = inputs.settings, inputs.space
    prices = load_prices(inputs.prices_path)
    for g in sp.gpus:
        price_for(prices, g)  # an unpriced GPU fails before any work
    traffic = resolve_traffic(inputs)
    cands = expand_space(inputs.model, sp, traffic.max_model_len)
    top = traffic.rate_req_per_s * (1.0 + st.headroom_frac)
    rows = _bound_stage(cands, traffic, inputs, ex, progress)
    live = _place(cands, rows, prices, inputs, top)
    ctx = _Ctx(
        inputs=inputs, traffic=traffic, top=top, grid=num_grid_for(st.rel_tol, sp.max_replicas)
    )
    sim_wall = _search_waves(live, rows, ctx, ex, progress)
    df = finish_table([rows[c.cand_id] for c in cands], traffic, top)
    if not (df["status"] == "ok").any():
        raise ValueError(impossible_message(df, inputs.slo))
    return PlanRun(
        inputs=inputs,
        traffic=traffic,
        candidates=df,
        prices=prices,
        top_req_per_s=top,
        wall_s=time.perf_counter() - t0,
        sim_wall_s=sim_wall,
    )


def _bound_stage(
    cands: list[Candidate],
    traffic: TrafficResolved,
    inputs: PlanInputs,
    ex: Any,
    progress: Callable[[int, str], None] | None,
) -> dict[str, dict[str, Any]]:
    """Bound tasks, one per step-time model (candidates sharing it are one task)."""
    groups: dict[tuple[Any, ...], list[Candidate]] = {}
    for c in cands:
        groups.setdefault(_group_key(c), []).append(c)
    fb = inputs.space.fallback
    tasks = [BoundTask(tuple(g), traffic.stats, inputs.slo, fb) for g in groups.values()]
    rows: dict[str, dict[str, Any]] = {c.cand_id: c.keys() for c in cands}
    for res in ex.map_unordered(run_bounds, tasks):
        for r in res:
            rows[r["cand_id"]] |= r
        if progress:
            progress(len(res), "bounds")
    return rows


def _place(
    cands: list[Candidate],
    rows: dict[str, dict[str, Any]],
    prices: dict[str, GpuPrice],
    inputs: PlanInputs,
    top: float,
) -> list[Candidate]:
    """Grid start, replica floor and cost floor per bounded candidate; cheapest first."""
    st, sp = inputs.settings, inputs.space
    grid = num_grid_for(st.rel_tol, sp.max_replicas)
    live: list[Candidate] = []
    for c in cands:
        r = rows[c.cand_id]
        price = price_for(prices, c.gpu).usd_per_gpu_hour
        r["usd_per_gpu_hour"] = price
        if r["status"] != "bounded":
            continue
        ceil_rate = r["rate_ceiling_req_per_s"] if st.prune else math.inf
        j_min = (
            0
            if not math.isfinite(ceil_rate) or ceil_rate >= top
            else math.ceil(math.log(top / ceil_rate) / math.log1p(st.rel_tol) - 1e-9)
        )
        if j_min > grid:
            r |= {
                "status": "infeasible",
                "reason": f"bound: ceiling {ceil_rate:.3g} req/s per "
                f"replica needs more than max_replicas={sp.max_replicas}",
            }
            continue
        n_lb = replicas_for(top, grid_rate(top, st.rel_tol, j_min))
        r |= {
            "grid_j_min": j_min,
            "replicas_floor": n_lb,
            "cost_floor_usd_per_h": fleet_usd_per_hour(n_lb, c.tp, price),
        }
        live.append(c)
    order = {c.cand_id: i for i, c in enumerate(cands)}
    live.sort(key=lambda c: (rows[c.cand_id]["cost_floor_usd_per_h"], order[c.cand_id]))
    return live


@dataclass(frozen=True, slots=True)
class _Ctx:
    inputs: PlanInputs
    traffic: TrafficResolved
    top: float
    grid: int

    def task(self, c: Candidate, j_min: int) -> CapacityTask:
        return CapacityTask(
            cand=c,
            workload=self.traffic.workload,
            burstiness=self.traffic.burstiness,
            slo=self.inputs.slo,
            settings=self.inputs.settings,
            top_req_per_s=self.top,
            num_grid=self.grid,
            j_min=j_min,
            fallback=self.inputs.space.fallback,
            fleet_req_per_s=self.traffic.rate_req_per_s,
        )


def _search_waves(
    live: list[Candidate],
    rows: dict[str, dict[str, Any]],
    ctx: _Ctx,
    ex: Any,
    progress: Callable[[int, str], None] | None,
) -> float:
    """Capacity searches in waves, pruning by cost between waves; returns task seconds."""
    st, primary = ctx.inputs.settings, ctx.inputs.space.step_time
    best, sim_wall, i = math.inf, 0.0, 0
    while i < len(live):
        wave = []
        while i < len(live) and len(wave) < st.wave_size:
            c = live[i]
            i += 1
            if st.prune and rows[c.cand_id]["cost_floor_usd_per_h"] > best * (
                1 + st.frontier_slack
            ):
                rows[c.cand_id] |= {
                    "status": "pruned",
                    "reason": f"cost floor above {1 + st.frontier_slack:g} x cheapest fleet found",
                }
                if progress:
                    progress(1, "pruned")
                continue
            wave.append(c)
        tasks = [ctx.task(c, int(rows[c.cand_id]["grid_j_min"])) for c in wave]
        tp = {c.cand_id: c.tp for c in wave}
        for res in ex.map_unordered(search_capacity, tasks):
            sim_wall += float(res.pop("sim_wall_s", 0.0))
            r = rows[res["cand_id"]]
            r |= res
            if res["status"] == "ok" and r["step_time_used"] == primary:
                n = replicas_for(ctx.top, res["capacity_req_per_s"])
                best = min(best, fleet_usd_per_hour(n, tp[res["cand_id"]], r["usd_per_gpu_hour"]))
            if progress:
                progress(1, "search")
    return sim_wall


NEEDED: tuple[str, ...] = (
    "capacity_req_per_s",
    "at_cap_mean_output_tok",
    "at_cap_output_tok_per_s",
    "op_ttft_p99_s",
    "op_tpot_mean_s",
    "op_mean_kv_usage",
    "op_misses",
    "steady",
    "num_sims",
    "step_time_note",
    "reason",
    "probes_json",
)


def impossible_message(df: pd.DataFrame, slo: PlanSlo) -> str:
    """One line naming the SLO field no candidate meets (or why none could be searched)."""
    reasons = [r for r in df.get("reason", pd.Series(dtype=object)) if isinstance(r, str) and r]
    probes = [p for p in df.get("probes_json", pd.Series(dtype=object)) if isinstance(p, str)]
    for name in (*PlanSlo.TARGETS, "goodput_frac"):
        v = getattr(slo, name)
        if v is None:
            continue
        hits = [r for r in reasons if name in r]
        if hits or any(name in p for p in probes):
            eg = f"; e.g. {hits[0]}" if hits else ""
            return (
                f"slo.{name}={v!r}: no candidate in the space meets it ({len(df)} candidates{eg})"
            )
    first = reasons[0] if reasons else "nothing was searched"
    return f"space: no candidate could be searched ({len(df)} candidates; e.g. {first})"


def finish_table(rows: list[dict[str, Any]], traffic: TrafficResolved, top: float) -> pd.DataFrame:
    """Fleet columns from each ok row's capacity: replicas, GPUs, $/h, $/Mtok, utilisation."""
    df = pd.DataFrame(rows)
    for col in NEEDED:
        if col not in df:
            df[col] = np.nan
    rate = traffic.rate_req_per_s
    ok = df["status"] == "ok" if "status" in df else pd.Series(False, index=df.index)
    cap = df.get("capacity_req_per_s", pd.Series(np.nan, index=df.index)).astype(float)
    reps = [replicas_for(top, c) if o else 0 for o, c in zip(ok, cap, strict=True)]
    df["replicas"] = reps
    df["num_gpus"] = df["replicas"] * df["tp"]
    df["fleet_usd_per_h"] = [
        fleet_usd_per_hour(n, tp, p) if n else math.nan
        for n, tp, p in zip(df["replicas"], df["tp"], df["usd_per_gpu_hour"], strict=True)
    ]
    mean_out = df.get("at_cap_mean_output_tok", pd.Series(np.nan, index=df.index)).astype(float)
    out_tok_s = rate * mean_out
    df["fleet_output_tok_per_s"] = out_tok_s.where(ok)
    df["usd_per_mtok"] = [
        usd_per_mtok(c, t) if o else math.nan
        for o, c, t in zip(ok, df["fleet_usd_per_h"], out_tok_s, strict=True)
    ]
    # utilisation at the operating point: each replica sees rate / replicas of its capacity
    with np.errstate(divide="ignore", invalid="ignore"):
        df["load_per_replica_req_per_s"] = np.where(
            ok, rate / np.maximum(df["replicas"], 1), np.nan
        )
        df["load_frac_of_capacity"] = df["load_per_replica_req_per_s"] / cap
    df["max_throughput_tok_per_s"] = (
        df.get("at_cap_output_tok_per_s", pd.Series(np.nan, index=df.index)) * df["replicas"]
    ).where(ok)
    return df
