"""``whatif`` as a special case of the plan: one configuration, one replica, no prices.

Arrival-rate what-ifs run the plan's capacity search (``capacity.search_capacity``: the
same grid, bisection and steady-state rule) with the grid anchored at ``--max-load`` and
reaching down to ``MIN_RATE_REQ_PER_S``; the answer is the replica's capacity. Closed-loop
(concurrency) what-ifs keep the integer search of ``capsim.sweep.whatif`` (the plan has no
closed-loop traffic), which applies the same steady-state rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from capsim.plan.capacity import CapacityTask, num_grid_for, search_capacity
from capsim.plan.inputs import PlanSlo, SearchSettings
from capsim.plan.space import Candidate as PlanCandidate

MIN_RATE_REQ_PER_S = 0.1


def plan_slo(slo: Any) -> PlanSlo:
    """A ``capsim.sweep.whatif.Slo`` as plan targets."""
    tpot = {"tpot_mean_s": slo.tpot_s} if slo.tpot_stat == "mean" else {"tpot_p99_s": slo.tpot_s}
    return PlanSlo(ttft_p99_s=slo.ttft_p99_s, **tpot)


def capacity_task(c: Any, slo: Any, *, probe_duration_s: float = 20.0) -> CapacityTask:
    cand = PlanCandidate(
        model=c.model,
        gpu=c.gpu,
        tp=c.tp,
        gmu=c.gmu,
        max_num_seqs=c.max_num_seqs,
        max_num_batched_tokens=None,
        num_spec_tok=0 if c.num_spec_tok == 0 else c.num_spec_tok,
        tree=c.tree,
        commit=c.commit,
        enable_prefix_caching=c.enable_prefix_caching,
        kv_cache_dtype="bfloat16",
        max_model_len=c.max_model_len,
        step_time=c.step_time,
        pool=tuple(c.pool),
    )
    settings = SearchSettings(
        headroom_frac=0.0,
        probe_min_requests=max(20, c.num_requests),
        probe_duration_s=probe_duration_s,
        rel_tol=c.rel_tol if c.rel_tol > 0 else 0.05,
        seed=c.seed,
    )
    span = max(c.max_load / MIN_RATE_REQ_PER_S, 1.0)
    return CapacityTask(
        cand=cand,
        workload=c.workload,
        burstiness=1.0,
        slo=plan_slo(slo),
        settings=settings,
        top_req_per_s=float(c.max_load),
        num_grid=num_grid_for(settings.rel_tol, math.ceil(span)),
        fallback="skip",
        fleet_req_per_s=float(c.max_load),
    )


def whatif_rows(row: dict[str, Any], c: Any) -> dict[str, Any]:
    """A capacity row in ``capsim.sweep.whatif``'s columns."""
    ok = row.get("status") == "ok"
    cap = float(row["capacity_req_per_s"]) if ok else 0.0
    return {
        "model": c.model,
        "gpu": c.gpu,
        "tp": c.tp,
        "gmu": c.gmu,
        "tree": "chain" if c.tree is None else "x".join(map(str, c.tree)),
        "commit": c.commit,
        "workload": c.workload,
        "load_mode": "rate",
        "max_load": cap,
        "at_search_limit": ok and int(row.get("grid_j", -1)) == 0,
        "goodput_tok_per_s": float(row.get("at_cap_output_tok_per_s", 0.0)) if ok else 0.0,
        "ttft_p99_s": float(row.get("at_cap_ttft_p99_s", math.nan)),
        "tpot_mean_s": float(row.get("at_cap_tpot_mean_s", math.nan)),
        "peak_running": float(row.get("at_cap_peak_running", math.nan)),
        "analytical_capacity_req": math.nan,
        "num_sims": int(row.get("num_sims", 0)),
        "num_spec_tok": c.num_spec_tok,
        "step_time": c.step_time,
        "steady": bool(row.get("steady", False)),
        "run_multiplier": int(row.get("run_multiplier", 1) or 1),
        "status": row.get("status", ""),
        "reason": row.get("reason", ""),
    }


def whatif_rate(
    candidates: list[Any],
    slo: Any,
    *,
    executor: Any = None,
    on_done: Callable[[], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every candidate's row, the goodput-maximising row per commit mode), rate mode."""
    from capsim.sweep.executors import SerialExecutor

    if not candidates:
        raise ValueError("whatif: no candidates to search")
    ex = executor or SerialExecutor()
    tasks = [capacity_task(c, slo) for c in candidates]
    by_id = {t.cand.cand_id: (i, c) for i, (t, c) in enumerate(zip(tasks, candidates, strict=True))}
    rows: list[tuple[int, dict[str, Any]]] = []
    for res in ex.map_unordered(search_capacity, tasks):
        i, c = by_id[res["cand_id"]]
        rows.append((i, whatif_rows(res, c)))
        if on_done is not None:
            on_done()
    df = pd.DataFrame([r for _, r in sorted(rows, key=lambda x: x[0])])
    best = pd.DataFrame(
        [g.loc[g["goodput_tok_per_s"].idxmax()] for _, g in df.groupby("commit", sort=False)]
    ).reset_index(drop=True)
    return df, best
