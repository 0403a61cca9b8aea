"""One simulated point: SimConfig in, SimResult out (no file I/O here).

Random streams (``SeedSequence(seed).spawn``): [0] arrivals, [1] acceptance. The
workload sample is seeded by ``seed`` itself inside ``capsim.traces``. Nothing depends
on the commit mode, so store-all and reconstruct at the same point replay the same
requests, arrivals and per-request acceptance (common random numbers).
"""

from __future__ import annotations

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


def _request_frame(
    requests: list[Request],
    table: RequestTable,
    prompt: np.ndarray,
    release: np.ndarray,
    sim: EngineSim,
    scheduler: Scheduler,
) -> tuple[pd.DataFrame, dict[str, np.ndarray], np.ndarray]:
    """One row per request (vLLM's per-request metrics), the store's columns, their slots."""
    n = len(requests)
    send = np.array([r.arrival_s for r in requests])
    # counters straight from the scheduler's store (every request was added to it)
    cols = scheduler.store.cols
    slots = np.fromiter((r.slot for r in requests), dtype=np.int64, count=n)
    first = sim.first_token_s
    finish = np.array([r.finish_s for r in requests], dtype=np.float64)
    out_tok = cols["max_output_tok"][slots]
    ttft = first - send
    e2el = finish - send
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out_tok > 1, (e2el - ttft) / (out_tok - 1), np.nan)
    req_df = pd.DataFrame(
        {
            "req_id": [r.req_id for r in requests],
            "source_id": list(table.source_id[:n]),
            "prompt_tok": prompt.astype(np.int64),
            "output_tok": out_tok,
            "release_s": release,
            "send_s": send,
            "first_scheduled_s": np.array([r.first_scheduled_s for r in requests], dtype=float),
            "first_token_s": first,
            "finish_s": finish,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2el_s": e2el,
            "num_preemptions": cols["num_preemptions"][slots],
            "cached_tok": cols["num_cached_tok"][slots],
        }
    )
    return req_df, cols, slots


def simulate(
    cfg: SimConfig,
    *,
    workload: RequestTable | None = None,
    cost: StepTimeModel | None = None,
) -> SimResult:
    """Run one point to completion. ``workload``/``cost`` override the configured ones."""
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
    scheduler = Scheduler(
        SchedulerConfig(
            max_num_seqs=plan.max_num_seqs,
            max_num_batched_tokens=plan.max_num_batched_tokens,
            num_spec_tok=cfg.spec.num_draft_nodes,
            enable_chunked_prefill=cfg.engine.enable_chunked_prefill,
            max_model_len=plan.max_model_len,
        ),
        KVCacheManager(pool_layout(plan, cfg.engine.watermark, cfg.engine.enable_prefix_caching)),
    )
    step_model = cost if cost is not None else build_step_time_model(cfg, model, gpu)
    max_conc = cfg.load.concurrency
    sim = EngineSim(
        scheduler=scheduler,
        cost=step_model,
        acceptance=draws,
        requests=requests,
        release_s=release,
        max_concurrency=max_conc,
        window_tok=cfg.spec.window_tok,
        parent=None if table.parent is None else table.parent[:n],
    )
    sim.run()

    req_df, cols, slots = _request_frame(requests, table, prompt, release, sim, scheduler)
    steps_df = sim.recorder.frame()
    summary = summarize(req_df, steps_df, np.asarray(sim.recorder.itl_s))
    used = cols["num_accept_draws_used"][slots]
    mean_ctx = int(np.mean(prompt + output))
    summary |= {
        "mean_acceptance_len_tok": draws.mean_tokens_over_used(used),
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
    desc = dict(step_model.describe())
    summary["step_time_label"] = step_time_label(desc)
    return SimResult(
        config=cfg.to_dict(),
        summary=summary,
        requests=req_df,
        steps=steps_df,
        step_time_model=desc,
    )
