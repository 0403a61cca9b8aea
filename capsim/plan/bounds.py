"""Analytic bounds that prune before any simulation (all cheap, no SimPy).

Per candidate, from its memory plan and its step-time model (``capsim.cost``):

- **refused**: vLLM or the memory plan refuses the engine flags, or the step-time model
  refuses the shape (the calibrated tables do not cover it and ``fallback='skip'``); with
  ``fallback='roofline'`` the roofline model prices it instead and the row says so.
- **throughput ceiling** (req/s per replica): at most ``b`` requests decode at once, where
  ``b <= min(max_num_seqs, pool capacity at the sample's 10th-percentile prompt)``; a step
  of ``b`` decodes at that short context takes ``step(b)`` and emits at most ``b x E[tok] x
  1.1`` tokens (E[tok]: expected tokens per verify step; 1.1: margin for the sampling
  noise of acceptance); prefill costs nothing here. So requests/s <= max over b of
  ``b x 1.1 E[tok] / (step(b) x mean_output_tok)``. Every simplification raises the
  ceiling, so a load above it cannot be served (the prune is safe; tests check it).
- **latency floors**: TTFT of a request >= one step that prefills its first chunk
  (``min(prompt, max_num_batched_tokens)`` tokens) alone, so the p50/p99 TTFT is at least
  that step at the p50/p99 prompt; TPOT >= a lone decode step at the shortest prompt over
  ``k + 1`` tokens (every draft accepted). A floor above its target: no replica count helps.
- **replica floor** ``ceil(rate x (1 + headroom) / ceiling)`` and its **cost floor**
  (x tp x price), which orders the search and prunes by cost (``search.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from capsim.core.acceptance import expected_tokens_per_step
from capsim.cost.base import BatchShape, StepTimeModel
from capsim.plan.inputs import PlanSlo
from capsim.plan.space import Candidate

_E = np.zeros(0, dtype=np.int64)
ACCEPT_MARGIN = 1.1


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleStats:
    """What the bounds need of the workload sample."""

    prompt_p10_tok: int
    prompt_p50_tok: int
    prompt_p99_tok: int
    prompt_min_tok: int
    mean_output_tok: float
    mean_context_tok: int


def sample_stats(prompt_tok: np.ndarray, output_tok: np.ndarray) -> SampleStats:
    p = np.asarray(prompt_tok)
    return SampleStats(
        prompt_p10_tok=int(np.percentile(p, 10)),
        prompt_p50_tok=int(np.percentile(p, 50)),
        prompt_p99_tok=int(np.percentile(p, 99)),
        prompt_min_tok=int(p.min()),
        mean_output_tok=float(np.mean(output_tok)),
        mean_context_tok=int(np.mean(p + np.asarray(output_tok))),
    )


def build_cost(cand: Candidate, fallback: str) -> tuple[StepTimeModel | None, str, str]:
    """(model or None, the step-time kind used, a note: why a fallback or a refusal)."""
    from capsim.cost.factory import build_step_time_model
    from capsim.gpus import get_gpu

    cfg = cand.sim_config(workload="sharegpt", rate_req_per_s=1.0, num_requests=1)
    model, gpu = cfg.model_spec(), get_gpu(cand.gpu)
    try:
        return build_step_time_model(cfg, model, gpu), cand.step_time, ""
    except ValueError as exc:
        why = str(exc).splitlines()[0]
        if cand.step_time == "roofline" or fallback == "skip":
            return None, "", f"step-time {cand.step_time} refuses: {why}"
        roof = cand.sim_config(
            workload="sharegpt", rate_req_per_s=1.0, num_requests=1, step_time="roofline"
        )
        return (
            build_step_time_model(roof, model, gpu),
            "roofline",
            f"roofline FALLBACK ({cand.step_time} refuses: {why})",
        )


def _step(cost: StepTimeModel, b: int, w: int, ctx: int) -> float:
    return float(
        cost.step_time_s(
            BatchShape(
                num_decode_req=b,
                query_tok_per_decode=w,
                decode_context_tok=np.full(b, ctx, dtype=np.int64),
                prefill_new_tok=_E,
                prefill_computed_tok=_E,
            )
        )
    )


def _prefill(cost: StepTimeModel, n: int, w: int) -> float:
    shape = BatchShape(
        num_decode_req=0,
        query_tok_per_decode=w,
        decode_context_tok=_E,
        prefill_new_tok=np.array([n], dtype=np.int64),
        prefill_computed_tok=np.array([0], dtype=np.int64),
    )
    try:
        return float(cost.step_time_s(shape))
    except ValueError:
        return 0.0  # the model refuses this chunk: no floor (never prunes on it)


def bound_row(
    cand: Candidate,
    cost: StepTimeModel,
    stats: SampleStats,
    slo: PlanSlo,
) -> dict[str, Any]:
    """The analytic bounds of one candidate (its memory plan must already build)."""
    from capsim.gpus import get_gpu
    from capsim.memory.memory_plan import plan_memory
    from capsim.memory.term_lookup import measured_term
    from capsim.models import get_model

    gpu = get_gpu(cand.gpu)
    eng, spec = cand.engine(), cand.spec()
    plan = plan_memory(eng.model_for(get_model(cand.model)), gpu, eng, spec, lookup=measured_term)
    w = spec.window_tok
    e_tok = expected_tokens_per_step(spec)
    b_max = max(1, min(plan.max_num_seqs, plan.max_concurrency(stats.prompt_p10_tok + 1)))
    ctx = max(stats.prompt_p10_tok, 1)
    best = 0.0
    b = 1
    while True:
        try:
            t = _step(cost, b, w, ctx)
        except ValueError:
            t = math.nan  # refused above a grid: skip this batch size
        if t > 0:
            best = max(best, b * ACCEPT_MARGIN * e_tok / (t * stats.mean_output_tok))
        if b >= b_max:
            break
        b = min(2 * b, b_max)
    mnbt = plan.max_num_batched_tokens
    floors = {
        "ttft_p50_s": _prefill(cost, min(stats.prompt_p50_tok, mnbt), w),
        "ttft_p99_s": _prefill(cost, min(stats.prompt_p99_tok, mnbt), w),
    }
    tpot = _step(cost, 1, w, max(stats.prompt_min_tok, 1)) / w
    floors["tpot_mean_s"] = floors["tpot_p99_s"] = tpot
    floors["e2el_p99_s"] = floors["ttft_p99_s"]
    missed = [
        f"{n} floor {floors[n] * 1e3:.1f} ms > target {getattr(slo, n) * 1e3:g} ms"
        for n in PlanSlo.TARGETS
        if getattr(slo, n) is not None and floors[n] > getattr(slo, n)
    ]
    return {
        "rate_ceiling_req_per_s": best if best > 0 else math.inf,
        "ttft_p99_floor_s": floors["ttft_p99_s"],
        "tpot_floor_s": tpot,
        "usable_blocks": plan.usable_blocks,
        "capacity_req_at_mean_ctx": plan.max_concurrency(stats.mean_context_tok),
        "resolved_max_num_seqs": plan.max_num_seqs,
        "resolved_max_num_batched_tokens": mnbt,
        "expected_tok_per_step": e_tok,
        "latency_floor_miss": "; ".join(missed),
    }
