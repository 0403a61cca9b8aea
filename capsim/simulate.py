"""One simulated point: SimConfig in, SimResult out (no file I/O here).

Random streams (``SeedSequence(seed).spawn``): [0] arrivals, [1] acceptance. The
workload sample is seeded by ``seed`` itself inside ``capsim.traces``. Nothing depends
on the commit mode, so store-all and reconstruct at the same point replay the same
requests, arrivals and per-request acceptance (common random numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from capsim.config import SimConfig
from capsim.core.acceptance import AcceptanceDraws
from capsim.core.kv_manager import KVCacheManager, PoolLayout
from capsim.core.request import Request
from capsim.core.scheduler import Scheduler, SchedulerConfig
from capsim.cost.base import StepTimeModel
from capsim.cost.factory import build_step_time_model
from capsim.engine import EngineSim
from capsim.gpus import get_gpu
from capsim.loadgen import release_times_s
from capsim.memory.memory_plan import MemoryPlan, plan_memory
from capsim.memory.term_lookup import measured_term
from capsim.metrics import summarize
from capsim.models import get_model
from capsim.sim_result import SimResult
from capsim.traces.table import RequestTable


def step_time_label(desc: dict[str, object]) -> str:
    """One short label for outputs: the model kind, and whether times are a projection."""
    kind = str(desc.get("kind", "?"))
    proj = desc.get("projection")
    if proj:
        return f"{kind}, {proj}" if isinstance(proj, str) else f"{kind}, PROJECTION"
    measured = desc.get("measured_gpu")
    return f"{kind}, measured on {measured}" if measured else kind


def pool_layout(
    plan: MemoryPlan, watermark: float = 0.0, enable_caching: bool = False
) -> PoolLayout:
    return PoolLayout(
        block_size_tok=plan.block_size_tok,
        num_blocks=plan.num_blocks,
        num_gdn_groups=plan.num_gdn_groups,
        gdn_slots_per_request=plan.gdn_slots_per_group,
        num_attn_groups=plan.num_attn_groups,
        lookahead_tok=plan.lookahead_tok,
        max_model_len=plan.max_model_len,
        watermark=watermark,
        pending_blocks_per_request=plan.pending_blocks_per_request,
        enable_caching=enable_caching,
        max_num_batched_tokens=plan.max_num_batched_tokens,
    )


def load_requests(cfg: SimConfig) -> RequestTable:
    from capsim.traces import load_workload  # the traces package owns workload names

    return load_workload(
        cfg.workload, num_requests=cfg.load.num_requests, seed=cfg.seed, model=cfg.model
    )


def _check_lengths(name: str, prompt: np.ndarray, output: np.ndarray, limit: int) -> None:
    """Refuse a workload row whose prompt + output exceeds max_model_len (names the row)."""
    # compared without adding first: prompt + output can overflow int64 on a bad file
    too_long = np.nonzero((prompt > limit) | (output > limit - np.minimum(prompt, limit)))[0]
    if too_long.size:
        i = int(too_long[0])
        raise ValueError(
            f"workload {name!r} row {i}: prompt+output={int(prompt[i]) + int(output[i])} "
            f"tokens exceeds max_model_len={limit}"
        )


@dataclass(frozen=True, slots=True)
class Prepared:
    """Everything one point needs before the engine runs (shared by capsim.fleet)."""

    plan: MemoryPlan
    table: RequestTable
    prompt: np.ndarray
    output: np.ndarray
    release: np.ndarray
    draws: AcceptanceDraws
    requests: list[Request]
    step_model: StepTimeModel


def prepare(
    cfg: SimConfig,
    *,
    workload: RequestTable | None = None,
    cost: StepTimeModel | None = None,
) -> Prepared:
    """Memory plan, workload sample, release times, acceptance draws, requests, pricing."""
    model = get_model(cfg.model)
    gpu = get_gpu(cfg.gpu)
    plan = plan_memory(model, gpu, cfg.engine, cfg.spec, lookup=measured_term)
    table = workload if workload is not None else load_requests(cfg)
    n = min(cfg.load.num_requests, table.num_requests)
    prompt = table.prompt_tok[:n]
    output = table.output_tok[:n]
    _check_lengths(table.name, prompt, output, plan.max_model_len)
    arrivals_ss, accept_ss = np.random.SeedSequence(cfg.seed).spawn(2)
    release = release_times_s(
        cfg.load,
        n,
        np.random.default_rng(arrivals_ss),
        None if table.arrival_s is None else table.arrival_s[:n],
    )
    draws = AcceptanceDraws(cfg.spec, output, np.random.default_rng(accept_ss))
    segments = (None,) * n if table.segments is None else table.segments
    requests = Request.many(prompt.tolist(), output.tolist(), tuple(segments[:n]))
    step_model = cost if cost is not None else build_step_time_model(cfg, model, gpu)
    return Prepared(plan, table, prompt, output, release, draws, requests, step_model)


def make_scheduler(cfg: SimConfig, plan: MemoryPlan) -> Scheduler:
    return Scheduler(
        SchedulerConfig(
            max_num_seqs=plan.max_num_seqs,
            max_num_batched_tokens=plan.max_num_batched_tokens,
            num_spec_tok=cfg.spec.num_draft_nodes,
            enable_chunked_prefill=cfg.engine.enable_chunked_prefill,
            max_model_len=plan.max_model_len,
        ),
        KVCacheManager(pool_layout(plan, cfg.engine.watermark, cfg.engine.enable_prefix_caching)),
    )


def request_frame(
    p: Prepared,
    first_token_s: np.ndarray,
    counters: dict[str, np.ndarray],
) -> pd.DataFrame:
    """One row per request (``counters``: max_output_tok, num_preemptions, num_cached_tok
    per request, in request order)."""
    requests, n = p.requests, len(p.requests)
    send = np.array([r.arrival_s for r in requests])
    finish = np.array([r.finish_s for r in requests], dtype=np.float64)
    out_tok = counters["max_output_tok"]
    ttft = first_token_s - send
    e2el = finish - send
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out_tok > 1, (e2el - ttft) / (out_tok - 1), np.nan)
    return pd.DataFrame(
        {
            "req_id": [r.req_id for r in requests],
            "source_id": list(p.table.source_id[:n]),
            "prompt_tok": p.prompt.astype(np.int64),
            "output_tok": out_tok,
            "release_s": p.release,
            "send_s": send,
            "first_scheduled_s": np.array([r.first_scheduled_s for r in requests], dtype=float),
            "first_token_s": first_token_s,
            "finish_s": finish,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2el_s": e2el,
            "num_preemptions": counters["num_preemptions"],
            "cached_tok": counters["num_cached_tok"],
        }
    )


def point_summary(
    cfg: SimConfig,
    p: Prepared,
    req_df: pd.DataFrame,
    steps_df: pd.DataFrame,
    itl_s: np.ndarray,
    used_draws: np.ndarray,
) -> dict[str, object]:
    summary = summarize(req_df, steps_df, itl_s)
    plan, prompt, output = p.plan, p.prompt, p.output
    mean_ctx = int(np.mean(prompt + output))
    summary |= {
        "mean_acceptance_len_tok": p.draws.mean_tokens_over_used(used_draws),
        "num_blocks": plan.num_blocks,
        "usable_blocks": plan.usable_blocks,
        "block_size_tok": plan.block_size_tok,
        "bytes_per_block": plan.bytes_per_block,
        "gdn_blocks_per_request": plan.gdn_blocks_per_request,
        "mean_context_tok": mean_ctx,
        "analytical_capacity_req": plan.max_concurrency(mean_ctx),
        "max_num_seqs": plan.max_num_seqs,
        "offered_load": cfg.load.offered_load,
    }
    summary["step_time_label"] = step_time_label(dict(p.step_model.describe()))
    return summary


def simulate(
    cfg: SimConfig,
    *,
    workload: RequestTable | None = None,
    cost: StepTimeModel | None = None,
) -> SimResult:
    """Run one point to completion. ``workload``/``cost`` override the configured ones."""
    p = prepare(cfg, workload=workload, cost=cost)
    requests = p.requests
    scheduler = make_scheduler(cfg, p.plan)
    sim = EngineSim(
        scheduler=scheduler,
        cost=p.step_model,
        acceptance=p.draws,
        requests=requests,
        release_s=p.release,
        max_concurrency=cfg.load.concurrency,
        window_tok=cfg.spec.window_tok,
        parent=None if p.table.parent is None else p.table.parent[: len(requests)],
    )
    sim.run()
    cols = scheduler.store.cols
    slots = np.fromiter((r.slot for r in requests), dtype=np.int64, count=len(requests))
    counters = {
        k: cols[k][slots] for k in ("max_output_tok", "num_preemptions", "num_cached_tok")
    }
    req_df = request_frame(p, sim.first_token_s, counters)
    steps_df = sim.recorder.frame()
    itl = np.asarray(sim.recorder.itl_s)
    summary = point_summary(cfg, p, req_df, steps_df, itl, cols["num_accept_draws_used"][slots])
    return SimResult(
        config=cfg.to_dict(),
        summary=summary,
        requests=req_df,
        steps=steps_df,
        step_time_model=dict(p.step_model.describe()),
    )
