"""One simulated point: SimConfig in, SimResult out (no file I/O here).

Random streams (``SeedSequence(seed).spawn``): [0] arrivals, [1] acceptance. The
workload sample is seeded by ``seed`` itself inside ``capsim.traces``. Nothing depends
on the commit mode, so store-all and reconstruct at the same point replay the same
requests, arrivals and per-request acceptance (common random numbers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from capsim.acceptance_stream import StreamingAcceptanceDraws
from capsim.config import SimConfig
from capsim.core.acceptance import AcceptanceDraws, expected_tokens_per_step
from capsim.core.kv_manager import KVCacheManager, PoolLayout
from capsim.core.request import Request
from capsim.core.scheduler import Scheduler, SchedulerConfig
from capsim.cost.base import StepTimeModel
from capsim.cost.factory import build_step_time_model
from capsim.engine import EngineSim
from capsim.footprint import check_fits, estimate_footprint
from capsim.gpus import get_gpu
from capsim.loadgen import ChunkedReleaseTimes, release_times_s
from capsim.memory.memory_plan import MemoryPlan, plan_memory
from capsim.memory.term_lookup import measured_term
from capsim.metrics import summarize, summarize_results
from capsim.request_source import LazyRequests
from capsim.sim_result import SimResult
from capsim.streaming_metrics import RequestResults
from capsim.traces.table import RequestTable
from capsim.vllm_rules import rules_for

STREAMING_MIN_REQUESTS = 200_000
"""Above this many requests a run streams by default: no per-request or per-step table
is kept unless asked for, and inter-token latencies are kept as (value, count) runs
(exact quantiles; the ITL mean may differ from the exact path in the last bits). At or
below it every result is bit-identical to keeping everything."""


def step_time_label(desc: dict[str, object]) -> str:
    """One short label for outputs: the model kind, and whether times are a projection."""
    kind = str(desc.get("kind", "?"))
    proj = desc.get("projection")
    if proj:
        return f"{kind}, {proj}" if isinstance(proj, str) else f"{kind}, PROJECTION"
    measured = desc.get("measured_gpu")
    label = f"{kind}, measured on {measured}" if measured else kind
    # the parts of a measured price that are not measurements say so
    if desc.get("tp_allreduce"):
        label += "; TP all-reduce analytical (PROJECTION from the NVLink figure)"
    if desc.get("gdn_window_interpolation"):
        label += f"; GDN window interpolated ({desc['gdn_window_interpolation']})"
    return label


def pool_layout(
    plan: MemoryPlan,
    watermark: float = 0.0,
    enable_caching: bool = False,
    vllm_version: str | None = None,
) -> PoolLayout:
    """The KV manager's layout; ``vllm_version`` None: the current align-mode rules."""
    legacy = vllm_version is not None and not rules_for(vllm_version).align_split_to_prefill_end
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
        align_split_before_0_27=legacy,
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
    table: RequestTable | None
    """None in a compact run (streaming, no requests table): the table was freed."""
    prompt: np.ndarray
    output: np.ndarray
    release: np.ndarray | ChunkedReleaseTimes
    draws: AcceptanceDraws
    requests: Sequence[Request]
    step_model: StepTimeModel
    parent: np.ndarray | None = None
    keep: Keep | None = None
    """What the run keeps, resolved with the request count the workload gave."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Keep:
    """What a run keeps: streaming (bounded memory) and which tables."""

    streaming: bool
    requests: bool
    steps: bool

    @property
    def compact(self) -> bool:
        """Streaming without a requests table: per-request state only while in flight
        (``RequestResults`` for the finished), workload kept as narrow integers."""
        return self.streaming and not self.requests

    @classmethod
    def resolve(
        cls, n: int, streaming: bool | None, requests: bool | None, steps: bool | None
    ) -> Keep:
        stream = n > STREAMING_MIN_REQUESTS if streaming is None else streaming
        return cls(
            streaming=stream,
            requests=not stream if requests is None else requests,
            steps=not stream if steps is None else steps,
        )


def prepare(
    cfg: SimConfig,
    *,
    workload: RequestTable | None = None,
    cost: StepTimeModel | None = None,
    keep: Keep | None = None,
    memory_limit_bytes: int | None = None,
    resolve: Callable[[int], Keep] | None = None,
) -> Prepared:
    """Memory plan, workload sample, release times, acceptance draws, requests, pricing.

    Request handles are built when sent (``LazyRequests``). ``keep`` given
    (``simulate``): acceptance drawn per chunk when streaming, and the footprint checked
    against ``memory_limit_bytes`` (before the workload is loaded, and after);
    ``resolve`` gives the final ``Keep`` for the request count the workload gave. A
    compact run (``Keep.compact``) keeps the prompt and output counts as int16/int32,
    generates release times block by block and drops the table.
    """
    model = cfg.model_spec()
    gpu = get_gpu(cfg.gpu)
    plan = plan_memory(model, gpu, cfg.engine, cfg.spec, lookup=measured_term)
    if keep is not None and workload is None:
        # before loading the workload: the per-request floor alone (1-token outputs)
        _check_footprint(cfg, plan, cfg.load.num_requests, 1.0, keep, memory_limit_bytes, 1)
    table = workload if workload is not None else load_requests(cfg)
    n = min(cfg.load.num_requests, table.num_requests)
    prompt = table.prompt_tok[:n]
    output = table.output_tok[:n]
    _check_lengths(table.name, prompt, output, plan.max_model_len)
    _check_fits_pool(table.name, prompt, output, plan)
    if keep is not None:
        mean_ctx = int(np.mean(prompt + output))
        _check_footprint(cfg, plan, n, float(np.mean(output)), keep, memory_limit_bytes, mean_ctx)
    if keep is not None and resolve is not None:
        keep = resolve(n)
    compact = keep is not None and keep.compact
    arrivals_ss, accept_ss = np.random.SeedSequence(cfg.seed).spawn(2)
    release: np.ndarray | ChunkedReleaseTimes
    if compact and cfg.load.mode in ("concurrency", "rate"):
        release = ChunkedReleaseTimes(cfg.load, n, np.random.default_rng(arrivals_ss))
    else:
        release = release_times_s(
            cfg.load,
            n,
            np.random.default_rng(arrivals_ss),
            None if table.arrival_s is None else table.arrival_s[:n],
        )
    parent = None if table.parent is None else table.parent[:n]
    segs = None if table.segments is None else table.segments[:n]
    kept_table: RequestTable | None = table
    if compact:
        prompt, output = _narrow(prompt, output)
        kept_table = None
    stream = keep is not None and keep.streaming
    draws_cls = StreamingAcceptanceDraws if stream else AcceptanceDraws
    draws = draws_cls(cfg.spec, output, np.random.default_rng(accept_ss))
    requests: Sequence[Request] = LazyRequests(prompt, output, segs)
    step_model = cost if cost is not None else build_step_time_model(cfg, model, gpu)
    return Prepared(
        plan, kept_table, prompt, output, release, draws, requests, step_model, parent, keep
    )


def _narrow(prompt: np.ndarray, output: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output counts as the narrowest of int16/int32 whose range holds their
    sum (every sum, mean and comparison made of them is then the int64 one)."""
    longest = int((prompt + output).max())
    dtype = np.int16 if longest < 2**15 else np.int32
    return prompt.astype(dtype), output.astype(dtype)


def _check_fits_pool(name: str, prompt: np.ndarray, output: np.ndarray, plan: MemoryPlan) -> None:
    """Refuse a workload whose longest request the pool can never hold (it would wait
    forever): names the row, its blocks and the pool."""
    longest = int(np.argmax(prompt + output))
    tokens = int(prompt[longest] + output[longest])
    need = plan.blocks_per_request(tokens)
    if need > plan.usable_blocks:
        raise ValueError(
            f"workload {name!r} row {longest}: prompt+output={tokens} tokens needs {need} KV "
            f"cache blocks but the pool has {plan.usable_blocks} usable; it could never "
            "finish: raise --num-gpu-blocks-override / --gmu or use shorter requests"
        )


def _check_footprint(
    cfg: SimConfig,
    plan: MemoryPlan,
    n: int,
    mean_output_tok: float,
    keep: Keep,
    limit: int | None,
    mean_ctx: int,
) -> None:
    """Refuse (ValueError with the numbers) a run whose lower-bound footprint exceeds
    ``limit``; every step taken as a full batch (``capsim.footprint``)."""
    if limit is None:
        return
    k = Keep.resolve(n, keep.streaming, keep.requests, keep.steps)
    max_batch = min(plan.max_num_seqs, max(plan.max_concurrency(max(mean_ctx, 1)), 1))
    if cfg.load.concurrency is not None:
        max_batch = min(max_batch, cfg.load.concurrency)
    footprint = estimate_footprint(
        num_requests=n,
        mean_output_tok=mean_output_tok,
        tokens_per_step=expected_tokens_per_step(cfg.spec),
        depth=cfg.spec.depth,
        max_batch=max_batch,
        streaming=k.streaming,
        keep_requests=k.requests,
        keep_steps=k.steps,
        compact=k.compact,
    )
    check_fits(footprint, limit, f"simulate -n {n}")


def make_scheduler(cfg: SimConfig, plan: MemoryPlan) -> Scheduler:
    per_lookup = not rules_for(cfg.engine.vllm_version).prefix_stats_at_admission
    return Scheduler(
        SchedulerConfig(
            max_num_seqs=plan.max_num_seqs,
            max_num_batched_tokens=plan.max_num_batched_tokens,
            num_spec_tok=cfg.spec.num_draft_nodes,
            enable_chunked_prefill=cfg.engine.enable_chunked_prefill,
            max_model_len=plan.max_model_len,
            async_scheduling=bool(cfg.engine.async_scheduling),
            prefix_stats_per_lookup=per_lookup,
        ),
        KVCacheManager(
            pool_layout(
                plan,
                cfg.engine.watermark,
                cfg.engine.enable_prefix_caching,
                cfg.engine.vllm_version,
            )
        ),
    )


def request_frame(
    p: Prepared,
    stamps: dict[str, np.ndarray],
    counters: dict[str, np.ndarray],
) -> pd.DataFrame:
    """One row per request (``stamps``: send_s, first_scheduled_s, first_token_s,
    finish_s; ``counters``: max_output_tok, num_preemptions, num_cached_tok; per request,
    in request order)."""
    m = request_metrics(
        p.prompt,
        counters["max_output_tok"],
        stamps,
        num_preemptions=counters["num_preemptions"],
        cached_tok=counters["num_cached_tok"],
    )
    return _request_frame(m, p.table, p.release, len(p.requests))  # type: ignore[arg-type]


def point_summary(
    cfg: SimConfig,
    p: Prepared,
    req_df: Any,
    steps_df: Any,
    itl_s: Any,
    used_draws: np.ndarray,
) -> dict[str, object]:
    """``summarize`` (tables, columns or ``RequestResults``; ITL values or runs) plus the
    plan's figures."""
    plan, prompt, output = p.plan, p.prompt, p.output
    if isinstance(req_df, RequestResults):
        summary = summarize_results(
            req_df,
            steps_df,
            itl_s,
            total_output_tok=int(output.sum()),
            total_input_tok=int(prompt.sum()),
        )
    else:
        summary = summarize(req_df, steps_df, itl_s)
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
    streaming: bool | None = None,
    keep_requests: bool | None = None,
    keep_steps: bool | None = None,
    memory_limit_bytes: int | None = None,
) -> SimResult:
    """Run one point to completion. ``workload``/``cost`` override the configured ones.

    ``streaming`` (default: more than ``STREAMING_MIN_REQUESTS`` requests) bounds memory:
    acceptance draws drawn and freed chunk by chunk, inter-token latencies as runs, and the
    requests / steps tables kept only if ``keep_requests`` / ``keep_steps`` (default: not
    when streaming). The summary's other figures are the exact path's, bit for bit.
    ``memory_limit_bytes``: refuse (ValueError with the numbers) a run whose lower-bound
    footprint (``capsim.footprint``) exceeds it, before anything is simulated.
    """
    n_asked = int(cfg.load.num_requests)
    if workload is not None:
        n_asked = min(n_asked, workload.num_requests)
    keep = Keep.resolve(n_asked, streaming, keep_requests, keep_steps)
    p = prepare(
        cfg,
        workload=workload,
        cost=cost,
        keep=keep,
        memory_limit_bytes=memory_limit_bytes,
        resolve=lambda n: Keep.resolve(n, streaming, keep_requests, keep_steps),
    )
    n = len(p.requests)
    keep = p.keep if p.keep is not None else keep
    scheduler = make_scheduler(cfg, p.plan)
    sim = EngineSim(
        scheduler=scheduler,
        cost=p.step_model,
        acceptance=p.draws,
        requests=p.requests,
        release_s=p.release,
        max_concurrency=cfg.load.concurrency,
        window_tok=cfg.spec.window_tok,
        parent=p.parent,
        keep_steps=keep.steps,
        exact_itl=not keep.streaming,
        recycle_slots=True,
        compact=keep.streaming and not keep.requests,
    )
    sim.run()
    metrics = None if sim.results is not None else _request_columns(sim, p.prompt, p.output)
    cols: Any = sim.results if metrics is None else metrics.columns()
    rec = sim.recorder
    steps_df = rec.frame()
    summary = point_summary(
        cfg,
        p,
        cols,
        steps_df if rec.columns is None else rec.columns,
        rec.itl_runs if rec.itl_runs is not None else rec.itl_s,
        sim.num_accept_draws_used,
    )
    if keep.streaming:  # the sweep's row / bench result read these from the requests table
        summary["mean_prompt_tok"] = float(np.mean(p.prompt))
        summary["mean_output_tok"] = float(np.mean(p.output))
        summary["total_input_tok"] = int(p.prompt.sum())
        # (after the plan's figures: the key order of the exact path's summary is kept)
        summary["step_time_label"] = summary.pop("step_time_label")
    req_df = pd.DataFrame()
    if keep.requests and p.table is not None and metrics is not None:
        req_df = _request_frame(metrics, p.table, np.asarray(p.release), n)
    return SimResult(
        config=cfg.to_dict(),
        summary=summary,
        requests=req_df,
        steps=steps_df,
        step_time_model=dict(p.step_model.describe()),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestMetrics:
    """Per-request metrics of one run as numpy columns (``vllm bench serve`` definitions),
    one typed field per column, in the requests table's order."""

    prompt_tok: np.ndarray
    output_tok: np.ndarray
    send_s: np.ndarray
    first_scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2el_s: np.ndarray
    num_preemptions: np.ndarray
    cached_tok: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        """Column name -> values (what ``summarize`` reads)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def request_metrics(
    prompt: np.ndarray,
    output: np.ndarray,
    stamps: Mapping[str, np.ndarray],
    *,
    num_preemptions: np.ndarray,
    cached_tok: np.ndarray,
) -> RequestMetrics:
    """The per-request metrics from the stamps (send_s, first_scheduled_s, first_token_s,
    finish_s) and counters: TTFT, E2EL and TPOT as ``vllm bench serve`` defines them."""
    send, first, finish = stamps["send_s"], stamps["first_token_s"], stamps["finish_s"]
    ttft = first - send
    e2el = finish - send
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(output > 1, (e2el - ttft) / (output - 1), np.nan)
    return RequestMetrics(
        prompt_tok=prompt.astype(np.int64),
        output_tok=output,
        send_s=send,
        first_scheduled_s=stamps["first_scheduled_s"],
        first_token_s=first,
        finish_s=finish,
        ttft_s=ttft,
        tpot_s=tpot,
        e2el_s=e2el,
        num_preemptions=num_preemptions,
        cached_tok=cached_tok,
    )


def _request_columns(sim: EngineSim, prompt: np.ndarray, output: np.ndarray) -> RequestMetrics:
    stamps = {
        k: getattr(sim, k) for k in ("send_s", "first_scheduled_s", "first_token_s", "finish_s")
    }
    return request_metrics(
        prompt,
        output,
        stamps,
        num_preemptions=sim.num_preemptions.astype(np.int64),
        cached_tok=sim.num_cached_tok.astype(np.int64),
    )


def _request_frame(
    m: RequestMetrics, table: RequestTable, release: np.ndarray, n: int
) -> pd.DataFrame:
    """The requests table, columns in their published order."""
    return pd.DataFrame(
        {
            "req_id": [f"r{i}" for i in range(n)],
            "source_id": list(table.source_id[:n]),
            "prompt_tok": m.prompt_tok,
            "output_tok": m.output_tok,
            "release_s": release,
            "send_s": m.send_s,
            "first_scheduled_s": m.first_scheduled_s,
            "first_token_s": m.first_token_s,
            "finish_s": m.finish_s,
            "ttft_s": m.ttft_s,
            "tpot_s": m.tpot_s,
            "e2el_s": m.e2el_s,
            "num_preemptions": m.num_preemptions,
            "cached_tok": m.cached_tok,
        }
    )
