"""``capsim doctor``: what a user's vLLM deployment really admits, and what costs it capacity.

Input: a ``vllm serve MODEL --flags`` command line or a start-up log, a vLLM release and a
GPU. Output (``DoctorReport``): the admitted concurrency at the user's context lengths (the
pool's blocks over the blocks one request holds, capped by max_num_seqs; not vLLM's "GPU KV
cache size" line, which is no capacity for hybrids), vLLM's start-up refusals before the
user meets them (refusals.py), and every known hazard of that release (hazards.py) with the
capacity it costs, the flag that recovers it and its public source.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import GpuSpec
from capsim.memory import cudagraph as cg
from capsim.memory.hazards import Hazard, applicable
from capsim.memory.log_fixes import serve_command
from capsim.memory.memory_plan import MemoryPlan, plan_memory
from capsim.memory.release_rules import parse_release
from capsim.memory.term_lookup import measured_term
from capsim.memory.vllm_log import VllmLog
from capsim.models import ModelSpec
from capsim.units import GiB

DEFAULT_CONTEXTS_TOK: tuple[int, ...] = (2048, 8192, 32768)


@dataclass(frozen=True, slots=True)
class Finding:
    hazard: Hazard
    cost: str  # capacity it costs here, in words and numbers


@dataclass(frozen=True, slots=True)
class DoctorReport:
    model: str
    gpu: str
    vllm_version: str
    engine: EngineConfig
    spec_depth: int
    plan: MemoryPlan | None
    refusal: str | None
    admitted: dict[int, int]  # context tokens -> requests admitted at once
    findings: tuple[Finding, ...]


def engine_from_command(command: str, base: EngineConfig) -> tuple[EngineConfig, int | None]:
    """The EngineConfig of a ``vllm serve`` line over ``base``, and its draft count."""
    got = serve_command(command if "vllm serve " in command else f"vllm serve {command}")
    upd = {
        k: got[k]
        for k in (
            "tp",
            "gmu",
            "max_model_len",
            "max_num_seqs",
            "max_num_batched_tokens",
            "enable_prefix_caching",
            "enforce_eager",
            "disable_custom_all_reduce",
        )
        if k in got
    }
    if "kv_cache_dtype" in got:
        from capsim.memory.log_compare import KV_DTYPES

        if got["kv_cache_dtype"] not in KV_DTYPES:
            raise ValueError(f"--kv-cache-dtype={got['kv_cache_dtype']!r} is not supported")
        upd["kv_cache_dtype"] = KV_DTYPES[got["kv_cache_dtype"]]
    return replace(base, **upd), got.get("num_speculative_tokens")


def engine_from_log(log: VllmLog, base: EngineConfig) -> tuple[EngineConfig, int | None]:
    upd: dict[str, object] = {}
    for attr, name in (
        ("tp", "tp"),
        ("gmu", "gmu"),
        ("max_model_len", "max_model_len"),
        ("max_num_seqs", "max_num_seqs"),
        ("max_num_batched_tokens", "max_num_batched_tokens"),
        ("enable_prefix_caching", "enable_prefix_caching"),
        ("enforce_eager", "enforce_eager"),
        ("full_graphs", "cudagraph_full_graphs"),
    ):
        value = getattr(log, attr)
        if value is not None:
            upd[name] = value
    return replace(base, **upd), log.num_speculative_tokens


def _traits(model: ModelSpec, engine: EngineConfig) -> set[str]:
    traits = {"always"}
    if model.is_hybrid:
        traits.add("hybrid")
    if engine.enable_prefix_caching:
        traits.add("prefix_caching")
    if not engine.enforce_eager and engine.cudagraph_full_graphs:
        traits.add("full_graphs")
    return traits


def _admitted(plan: MemoryPlan, contexts: tuple[int, ...]) -> dict[int, int]:
    return {c: min(plan.max_num_seqs, plan.max_concurrency(c)) for c in contexts}


def _with_kv(plan_args: tuple, kv_bytes: int, contexts: tuple[int, ...]) -> dict[int, int] | None:
    model, gpu, engine, spec = plan_args
    try:
        p = plan_memory(
            model, gpu, replace(engine, kv_cache_memory_bytes=kv_bytes), spec, lookup=measured_term
        )
    except ValueError:
        return None
    return _admitted(p, contexts)


def _gain(before: dict[int, int], after: dict[int, int] | None) -> str:
    if after is None:
        return "not priced (the alternative pool does not plan)"
    return ", ".join(f"{c} tok: {before[c]} -> {after[c]}" for c in before)


def _price(h: Hazard, plan: MemoryPlan, plan_args: tuple, contexts: tuple[int, ...]) -> str:
    """The capacity ``h`` costs this deployment (admitted requests with / without it)."""
    admitted = _admitted(plan, contexts)
    if h.key == "cudagraph_gdn_transient":
        transient = _transient_bytes(plan, plan_args)
        if not transient:
            return "no FULL capture of a GDN layer here"
        after = _with_kv(plan_args, plan.kv_budget_bytes + transient, contexts)
        return f"{transient / GiB:.2f} GiB of the pool; admitted {_gain(admitted, after)}"
    if h.key == "kv_cache_memory_suggestion_double_counts_graphs":
        return (
            f"{plan.cudagraph_estimate_bytes / GiB:.2f} GiB left unused if the suggestion is taken"
        )
    if h.key == "align_mode_block_inflation":
        model, gpu, engine, spec = plan_args
        try:
            old = plan_memory(
                model, gpu, replace(engine, vllm_version="0.32.0"), spec, lookup=measured_term
            )
        except ValueError:
            return "not priced"
        return (
            f"block {old.block_size_tok} -> {plan.block_size_tok} tokens; admitted with "
            f"16-token alignment vs now: {_gain(_admitted(old, contexts), admitted)}"
        )
    if h.key == "kv_size_line_not_capacity":
        line = plan.vllm_kv_cache_tokens()
        real = ", ".join(f"{c} tok: {admitted[c] * c:,}" for c in contexts)
        return f"vLLM logs {line:,} tokens; tokens actually held at once: {real}"
    if h.key == "align_mode_checkpoint_pages":
        return "up to ~20% of 'GPU KV cache size' (club-3090 PR #1170 measurement, not modelled)"
    if h.key == "gdn_prefill_scratch_unprofiled":
        got = measured_term(
            "gdn_prefill_transient", plan.model, plan.tp, plan.max_num_batched_tokens
        )
        if got:
            return f"{got / GiB:.2f} GiB at serving time beyond the profiled peak (H200 table)"
        return "not sized for this shape (no measurement); lower --max-num-batched-tokens if OOM"
    return ""


def _transient_bytes(plan: MemoryPlan, plan_args: tuple) -> int:
    model, _gpu, engine, spec = plan_args
    from capsim.memory.release_rules import rule

    if not (model.is_hybrid and plan.capture.full_tok):
        return 0
    if not rule("gdn_first_full_capture_transient", engine.vllm_version):
        return 0
    return cg.gdn_transient_bytes(model.conv_dim // engine.tp, spec.num_draft_nodes)


def diagnose(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: EngineConfig,
    spec: SpecDecodeConfig,
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS_TOK,
) -> DoctorReport:
    """Plan the deployment, catch vLLM's refusals, price every hazard of the release."""
    version = parse_release(engine.vllm_version)
    plan_args = (model, gpu, engine, spec)
    try:
        plan = plan_memory(model, gpu, engine, spec, lookup=measured_term)
        refusal = None
    except ValueError as exc:
        plan, refusal = None, str(exc)
    findings: list[Finding] = []
    for h in applicable(version, _traits(model, engine)):
        if h.key == "mamba_blocks_refusal":
            if refusal and "Mamba cache blocks" in refusal:
                findings.append(Finding(h, "vLLM refuses to start: " + refusal))
            continue
        cost = _price(h, plan, plan_args, contexts) if plan is not None else "not priced"
        findings.append(Finding(h, cost))
    return DoctorReport(
        model=model.name,
        gpu=gpu.name,
        vllm_version=engine.vllm_version,
        engine=engine,
        spec_depth=spec.depth,
        plan=plan,
        refusal=refusal,
        admitted=_admitted(plan, contexts) if plan is not None else {},
        findings=tuple(findings),
    )


def format_report(r: DoctorReport) -> str:
    e = r.engine
    lines = [
        f"capsim doctor: {r.model} on {r.gpu}, vLLM {r.vllm_version}, tp={e.tp}, gmu={e.gmu}, "
        f"k={r.spec_depth}, prefix caching {'on' if e.enable_prefix_caching else 'off'}"
    ]
    if r.refusal:
        lines.append(f"  vLLM will refuse to start: {r.refusal}")
    if r.plan is not None:
        p = r.plan
        lines.append(
            f"  KV pool {p.kv_budget_bytes / GiB:.2f} GiB = {p.num_blocks} blocks of "
            f"{p.block_size_tok} tok; max_num_seqs {p.max_num_seqs}"
        )
        for c, n in r.admitted.items():
            lines.append(f"  admitted at {c:>6} tok context: {n} requests at once")
    if r.findings:
        lines.append("  hazards of this release that apply:")
    for f in r.findings:
        lines.append(f"  - {f.hazard.key}: {f.hazard.what}")
        if f.cost:
            lines.append(f"      costs: {f.cost}")
        lines.append(f"      recover: {f.hazard.flag}")
        lines.append(f"      source: {f.hazard.source}")
    return "\n".join(lines)


def read_command(path_or_text: str) -> str:
    """A command given inline or as a file holding it."""
    p = Path(path_or_text)
    if len(path_or_text) < 4096 and p.is_file():
        return p.read_text(errors="replace")[:65536]
    return path_or_text
