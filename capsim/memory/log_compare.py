"""capsim's memory plan beside what a vLLM start-up log says, term by term.

``settings_from_log`` turns a parsed log (or a validation-table row) into capsim's configs:
every setting the log states wins over the command line, and ``notes`` names the ones it
does not state. ``compare`` plans twice: capsim's own plan (every term capsim's) and the
pool pinned to the log's available KV memory (which checks page, block and group math
independently of the non-KV terms).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.drafter import DrafterSpec
from capsim.gpus import GpuSpec, with_total_memory
from capsim.memory.log_fixes import dev_build
from capsim.memory.memory_plan import MemoryPlan, plan_memory
from capsim.memory.term_lookup import measured_term
from capsim.memory.terms import Source
from capsim.memory.vllm_log import VllmLog
from capsim.models import QUANT_METHOD_FORMATS, ModelSpec
from capsim.units import GiB

# vLLM --kv-cache-dtype -> capsim dtype (bytes per element are what the page needs).
KV_DTYPES: dict[str, str] = {
    "auto": "bfloat16",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "int8_per_token_head": "fp8",
}
# vLLM --quantization -> capsim's weight format (memory/weights.py QUANT_BYTES_PER_PARAM).
QUANT: dict[str, str] = {**QUANT_METHOD_FORMATS, "auto_round": "gptq", "inc": "gptq"}

# Tolerances of the validation (issue 11): weights 2 %, available KV 5 % median / 10 % max;
# block size and mamba padding exact.
WEIGHTS_TOL = 0.02
KV_TOL = 0.05


@dataclass(frozen=True, slots=True)
class Settings:
    model: ModelSpec
    gpu: GpuSpec
    engine: EngineConfig
    spec: SpecDecodeConfig
    notes: tuple[str, ...] = ()


def _compressed_tensors(log: VllmLog) -> str | None:
    """compressed-tensors names no format: the checkpoint's config does. Without it the
    logged model name decides (FP8, NVFP4, W4A16/INT4), else the format is refused."""
    if log.quantization != "compressed-tensors":
        return None
    name = f"{log.model or ''} {log.served_model_name or ''}".lower()
    for tags, fmt in (
        (("nvfp4", "fp4"), "nvfp4"),
        (("w4a16", "int4", "awq", "gptq"), "gptq"),
        (("fp8",), "fp8"),
    ):
        if any(t in name for t in tags):
            return fmt
    raise ValueError(
        "quantization='compressed-tensors': the log does not say which scheme (FP8, NVFP4, "
        "W4A16); give --model config.json of the checkpoint (its quantization_config)"
    )


def _fields_from_log(log: VllmLog) -> dict[str, object]:
    """The engine settings the log states outright."""
    upd: dict[str, object] = {}
    for attr, field_name in (
        ("tp", "tp"),
        ("gmu", "gmu"),
        ("max_model_len", "max_model_len"),
        ("max_num_seqs", "max_num_seqs"),
        ("max_num_batched_tokens", "max_num_batched_tokens"),
        ("enable_prefix_caching", "enable_prefix_caching"),
        ("enforce_eager", "enforce_eager"),
        ("disable_custom_all_reduce", "disable_custom_all_reduce"),
        ("limit_mm_per_prompt", "limit_mm_per_prompt"),
        ("kv_cache_memory_bytes", "kv_cache_memory_bytes"),
        ("num_gpu_blocks_override", "num_gpu_blocks_override"),
    ):
        value = getattr(log, attr)
        if value is not None:
            upd[field_name] = value
    return upd


def _version_from_log(
    log: VllmLog,
    model: ModelSpec,
    engine: EngineConfig,
    upd: dict[str, object],
    notes: list[str],
) -> None:
    """The settings that follow from the log's vLLM version (and its defaults), into upd."""
    if log.vllm_version and dev_build(log.vllm_version):
        raise ValueError(
            f"vllm_version={log.vllm_version!r}: a development build without a release tag; "
            "give --vllm-version X.Y (the release it was built from)"
        )
    if log.full_graphs is not None:
        upd["cudagraph_full_graphs"] = log.full_graphs
    if log.prefix_caching_disabled_by_vllm:
        notes.append("vLLM's log says it disabled prefix caching: planned with it off")
    if log.vllm_version:
        upd["vllm_version"] = log.vllm_version
    if log.enable_prefix_caching is None and model.is_hybrid and log.vllm_version:
        from capsim.memory.release_rules import rule

        default_on = bool(rule("hybrid_prefix_caching_default", log.vllm_version))
        upd["enable_prefix_caching"] = default_on
        notes.append(
            f"prefix caching not in the log: vLLM {log.vllm_version}'s default for hybrids "
            f"({'on' if default_on else 'off'})"
        )
        from capsim.vllm_rules import rules_for

        if not rules_for(log.vllm_version).v1_engine:
            notes.append(
                f"vLLM {log.vllm_version} runs the V0 engine: its profile run and budget "
                "differ from the V1 accounting capsim follows"
            )
    if not log.vllm_version:
        notes.append(f"vLLM version not in the log: rules of {engine.vllm_version}")


def _quantization_from_log(log: VllmLog, model: ModelSpec) -> ModelSpec:
    """The model with the log's quantization, where the model names none."""
    if log.quantization and model.quantization == "none":
        q = QUANT.get(log.quantization) or _compressed_tensors(log)
        if q is None:
            raise ValueError(f"quantization={log.quantization!r} is not supported")
        if log.quantization == "modelopt" and "fp4" in (log.model or "").lower():
            q = "nvfp4"
        model = replace(model, quantization=q)
    return model


def _drafter_note(d: DrafterSpec, tp: int) -> str:
    from capsim.memory.drafter_memory import drafter_weight_parts

    w = sum(drafter_weight_parts(d, tp).values())
    window = f"sliding window {d.sliding_window_tok}" if d.sliding_window_tok else "full"
    return (
        f"external drafter {d.name} planned from its spec file: weights {w / GiB:.2f} GiB per "
        f"rank ({d.linear_format} linears), {d.num_layers} {window} attention layers in their "
        f"own KV groups, {d.model_runner} model runner; each value's source is in the file"
    )


def _spec_from_log(
    log: VllmLog,
    spec: SpecDecodeConfig,
    notes: list[str],
    drafter: DrafterSpec | None,
    tp: int,
) -> SpecDecodeConfig:
    """The speculative-decoding settings from the log, else those given; a method other than
    MTP is planned with its external drafter when one is given (``drafter`` or the spec's)."""
    if log.num_speculative_tokens is None:
        notes.append(f"speculative config not in the log: k={spec.depth} from the command line")
        return spec
    method = log.speculative_method or "mtp"
    k = int(log.num_speculative_tokens)
    if method in ("mtp", "qwen3_next_mtp", "qwen3_5_mtp"):
        return replace(spec, num_spec_tok=k, tree_widths=None, drafter=None)
    d = drafter or spec.drafter
    if d is None:
        notes.append(f"speculative method {method!r}: its draft model's weights are not modelled")
        return replace(spec, num_spec_tok=k, tree_widths=None)
    if d.method != method:
        raise ValueError(
            f"speculative_config.method={method!r}: drafter {d.name} is a {d.method!r} drafter"
        )
    notes.append(_drafter_note(d, tp))
    return replace(spec, num_spec_tok=k, tree_widths=None, drafter=d)


def _default_gmu_for_log(log: VllmLog, engine: EngineConfig) -> float:
    """The log's release's default gpu_memory_utilization when the log gives none and the
    engine carries only its own release's default (vllm_rules default_gmu: 0.9 before 0.20,
    0.92 since; 0.9.2 config.py CacheConfig.gpu_memory_utilization = 0.9); a gmu that differs
    from that default was chosen by the caller and is kept."""
    from capsim.vllm_rules import rules_for

    if log.vllm_version and engine.gmu == rules_for(engine.vllm_version).default_gmu:
        return rules_for(log.vllm_version).default_gmu
    return float(engine.gmu)


def settings_from_log(
    log: VllmLog,
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    engine: EngineConfig,
    spec: SpecDecodeConfig,
    drafter: DrafterSpec | None = None,
) -> Settings:
    """The log's settings over the given defaults; notes name what came from elsewhere;
    ``drafter``: the external draft model the log's ``speculative_config.model`` names."""
    notes: list[str] = []
    upd = _fields_from_log(log)
    _version_from_log(log, model, engine, upd, notes)
    if log.gmu is None:
        gmu = _default_gmu_for_log(log, engine)
        upd["gmu"] = gmu
        notes.append(f"gmu not in the log: {gmu}")
    if log.max_num_batched_tokens is None:
        notes.append("max_num_batched_tokens not in the log: vLLM's default for the GPU")
    if log.kv_cache_dtype:
        if log.kv_cache_dtype not in KV_DTYPES:
            raise ValueError(f"kv_cache_dtype={log.kv_cache_dtype!r} is not supported")
        upd["kv_cache_dtype"] = KV_DTYPES[log.kv_cache_dtype]
        if log.kv_cache_dtype == "int8_per_token_head":
            notes.append("int8_per_token_head KV: 1 byte/element, its per-head scales not counted")
    if log.enable_prefix_caching and model.is_hybrid:
        notes.append(
            "prefix caching on (mamba_cache_mode 'align'): the size line counts 2 + k pages "
            "per GDN group (MambaSpec.max_memory_usage_bytes); checkpoint pages at every "
            "block boundary (club-3090 PR #1170) are not charged"
        )
    if log.gpu_total_gib:
        gpu = with_total_memory(gpu, round(log.gpu_total_gib * GiB))
    else:
        notes.append(f"GPU total memory not in the log: {gpu.name} registry value")
    model = _quantization_from_log(log, model)
    engine = replace(engine, **upd)  # type: ignore[arg-type]
    spec = _spec_from_log(log, spec, notes, drafter, engine.tp)
    return Settings(model, gpu, engine, spec, tuple(notes))


@dataclass(frozen=True, slots=True)
class TermRow:
    term: str
    log: float | None
    capsim: float | None
    unit: str
    status: str
    source: str = ""


@dataclass(frozen=True, slots=True)
class Comparison:
    settings: Settings
    plan: MemoryPlan | None
    pinned: MemoryPlan | None
    rows: tuple[TermRow, ...]
    missing: tuple[str, ...]
    errors: dict[str, float] = field(default_factory=dict)
    failure: str | None = None

    @property
    def differing(self) -> list[str]:
        return [r.term for r in self.rows if r.status.startswith("differs")]


def _rel(capsim: float, log: float) -> float:
    return (capsim - log) / log if log else math.inf


def _row(
    term: str, log: float | None, capsim: float | None, unit: str, tol: float | None, src: str = ""
) -> TermRow:
    if log is None:
        return TermRow(term, None, capsim, unit, "log lacks it", src)
    if capsim is None:
        return TermRow(term, log, None, unit, "capsim has no value", src)
    if tol is None:  # exact
        ok = abs(capsim - log) < 0.006
        return TermRow(term, log, capsim, unit, "same" if ok else "differs", src)
    diff = capsim - log
    if abs(diff) <= max(tol * abs(log), 0.011):
        return TermRow(term, log, capsim, unit, "within tolerance", src)
    pct = f"{100 * _rel(capsim, log):+.1f}%" if log else f"{diff:+.2f}"
    return TermRow(term, log, capsim, unit, f"differs ({pct})", src)


def _graph_row(log: VllmLog, plan: MemoryPlan | None, g, src: dict[str, str]) -> TermRow:  # type: ignore[no-untyped-def]
    """vLLM's logged estimate beside capsim's estimate (also where it is not charged)."""
    label = src.get("cudagraph", "")
    row = _row(
        "CUDA graph estimate (GiB)",
        log.cudagraph_estimate_gib,
        g(plan.cudagraph_estimate_bytes) if plan else None,
        "GiB",
        0.20,
        label,
    )
    if plan is not None and plan.terms["cudagraph"].source is Source.NOT_CHARGED:
        why = "by the V2 runner" if plan.model_runner == "v2" else "in this version"
        return replace(row, status=f"{row.status}; not charged {why}")
    return row


def _plan(s: Settings, log: VllmLog) -> tuple[Settings, MemoryPlan | None, str | None]:
    """capsim's plan of the row; past the Mamba-blocks refusal (which vLLM raises after it has
    sized the pool) the pool is planned as vLLM sized it."""
    try:
        return s, plan_memory(s.model, s.gpu, s.engine, s.spec, lookup=measured_term), None
    except ValueError as exc:
        failure = str(exc)
    m = re.search(r"exceeds available Mamba cache blocks \((\d+)\)", failure)
    if not m:
        return s, None, failure
    # vLLM sizes the pool (profile run at its max_num_seqs) before this check refuses: plan
    # that pool. If the log ran, its unlogged max_num_seqs was within the pool.
    note = f"vLLM {'refuses' if log.max_num_seqs is not None else 'would refuse'} here " + (
        f"({m.group(0)}); pool planned as vLLM sizes it before the check"
    )
    s = replace(s, notes=(*s.notes, note))
    plan = plan_memory(s.model, s.gpu, s.engine, s.spec, lookup=measured_term, refuse=False)
    return s, plan, None


def _quant_notes(s: Settings, log: VllmLog, plan: MemoryPlan | None) -> list[str]:
    """The other common quantization layout (experts only), priced, when the log cannot
    say which one the checkpoint uses."""
    if plan is None or s.model.quantization == "none" or s.model.quant_scope != "linear":
        return []
    if s.model.quant_formats:  # the checkpoint's own per-layer list decides (no alternative)
        return []
    alt_model = replace(s.model, quant_scope="experts")
    try:
        alt = plan_memory(alt_model, s.gpu, s.engine, s.spec, lookup=measured_term)
    except ValueError as exc:
        return [
            f"{s.model.quantization} weights assumed on attention, GDN and expert/MLP "
            f"linears; with those projections in bf16 this deployment would not start "
            f"({str(exc)[:80]}...)"
        ]
    err = ""
    if log.available_kv_gib:
        rel = _rel(alt.kv_budget_bytes / GiB, log.available_kv_gib)
        err = f", available KV {100 * rel:+.1f}%"
    return [
        f"{s.model.quantization} weights assumed on the linears the checkpoint quantizes by "
        f"default; experts-only would give weights {alt.weights_bytes / GiB:.2f} GiB{err} "
        "(not chosen: the checkpoint's ignore list is not in the row)"
    ]


def _budget_rows(log: VllmLog, plan: MemoryPlan | None, g, src: dict[str, str]) -> list[TermRow]:  # type: ignore[no-untyped-def]
    """The terms charged against the budget that 'Memory profiling takes' lines log."""
    return [
        _row(
            "weights (GiB)",
            log.weights_gib,
            g(plan.weights_bytes) if plan else None,
            "GiB",
            WEIGHTS_TOL,
            src.get("weights", ""),
        ),
        _row(
            "peak activation (GiB)",
            log.peak_activation_gib,
            g(plan.activation_peak_bytes) if plan else None,
            "GiB",
            0.10,
            src.get("activation_peak", ""),
        ),
        _row(
            "non-torch (GiB)",
            log.non_torch_gib,
            g(plan.non_torch_bytes) if plan else None,
            "GiB",
            0.10,
            src.get("non_torch", ""),
        ),
        _row(
            "consumed: weights + non-torch + runner buffers (GiB)",
            log.consumed_gib,
            g(plan.weights_bytes + plan.non_torch_bytes + plan.runner_buffers_bytes)
            if plan
            else None,
            "GiB",
            0.10,
            "0.27+ 'X GiB for consumed memory (weights + non-torch)' (mem_utils total_consumed)",
        ),
    ]


def _graph_rows(log: VllmLog, plan: MemoryPlan | None, g, src: dict[str, str]) -> list[TermRow]:  # type: ignore[no-untyped-def]
    """The CUDA-graph estimate and the captures vLLM's 'Profiling CUDA graph memory' line names."""
    return [
        _graph_row(log, plan, g, src),
        _row(
            "CUDA graphs captured (PIECEWISE)",
            log.cudagraph_piecewise,
            plan.cudagraph_piecewise_graphs if plan else None,
            "",
            None,
            "_set_cudagraph_sizes",
        ),
        _row(
            "largest capture size (tok)",
            log.cudagraph_largest,
            plan.cudagraph_capture_max if plan else None,
            "tok",
            None,
            "_set_cudagraph_sizes",
        ),
    ]


def _layout_rows(
    log: VllmLog, plan: MemoryPlan | None, pinned: MemoryPlan | None, g
) -> list[TermRow]:  # type: ignore[no-untyped-def]
    """The pool and its page layout (block size, padding, the 'GPU KV cache size' line)."""
    return [
        _row(
            "available KV (GiB)",
            log.available_kv_gib,
            g(plan.kv_budget_bytes) if plan else None,
            "GiB",
            KV_TOL,
            "result",
        ),
        _row(
            "attention block size (tok)",
            log.attention_block_size,
            plan.block_size_tok if plan else None,
            "tok",
            None,
            "page unification",
        ),
        _row(
            "mamba page padding (%)",
            log.mamba_page_padding_pct,
            round(plan.mamba_padding_pct, 2) if plan else None,
            "%",
            None,
            "page unification",
        ),
        _row(
            "GPU KV cache size (tok, pool pinned to the log)",
            log.kv_cache_tokens,
            pinned.vllm_kv_cache_tokens() if pinned else None,
            "tok",
            0.005,
            "groups and pages",
        ),
    ]


def _term_rows(log: VllmLog, plan: MemoryPlan | None, pinned: MemoryPlan | None) -> list[TermRow]:
    """Every term capsim plans, beside the log's value and its tolerance."""
    g = (lambda b: round(b / GiB, 2)) if plan else (lambda b: None)
    src = plan.term_sources if plan else {}
    return [
        *_budget_rows(log, plan, g, src),
        *_graph_rows(log, plan, g, src),
        *_layout_rows(log, plan, pinned, g),
    ]


def compare(settings: Settings, log: VllmLog) -> Comparison:
    """Plan with the log's settings and set every term beside the log's value."""
    s, plan, failure = _plan(settings, log)
    pinned = None
    if log.available_kv_gib is not None:
        pin = replace(s.engine, kv_cache_memory_bytes=round(log.available_kv_gib * GiB))
        try:
            pinned = plan_memory(s.model, s.gpu, pin, s.spec, lookup=measured_term, refuse=False)
        except ValueError:
            pinned = None
    notes = list(s.notes) + _quant_notes(s, log, plan)
    s = replace(s, notes=tuple(notes))
    rows = _term_rows(log, plan, pinned)
    errors: dict[str, float] = {}
    if plan is not None:
        for key, logged, mine in (
            ("weights", log.weights_gib, plan.weights_bytes / GiB),
            ("available_kv", log.available_kv_gib, plan.kv_budget_bytes / GiB),
        ):
            if logged:
                errors[key] = _rel(mine, logged)
    if plan is not None and log.cudagraph_estimate_gib:
        errors["cudagraph_estimate"] = _rel(
            plan.cudagraph_estimate_bytes / GiB, log.cudagraph_estimate_gib
        )
    if pinned is not None and log.kv_cache_tokens:
        errors["kv_cache_tokens_pinned"] = _rel(pinned.vllm_kv_cache_tokens(), log.kv_cache_tokens)
    return Comparison(s, plan, pinned, tuple(rows), tuple(log.missing()), errors, failure)


def _num(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) >= 10_000 else f"{x:g}"


def format_comparison(c: Comparison) -> str:
    s = c.settings
    e = s.engine
    lines = [
        f"capsim vs vLLM log: {s.model.name} on {s.gpu.name} "
        f"({s.gpu.total_memory_bytes / GiB:.2f} GiB), tp={e.tp}, gmu={e.gmu}, "
        f"vLLM {e.vllm_version}, k={s.spec.depth}, kv {e.kv_cache_dtype}, "
        f"weights {s.model.quantization}",
    ]
    if c.missing:
        lines.append(f"  the log lacks: {', '.join(c.missing)} (capsim's values used instead)")
    for note in s.notes:
        lines.append(f"  note: {note}")
    if c.failure:
        lines.append(f"  capsim cannot plan this deployment: {c.failure}")
    lines.append(f"  {'term':<48}{'log':>12}{'capsim':>12}  {'status':<21} source")
    for r in c.rows:
        lg = "-" if r.log is None else _num(r.log)
        cp = "-" if r.capsim is None else _num(r.capsim)
        lines.append(f"  {r.term:<48}{lg:>12}{cp:>12}  {r.status:<21} {r.source}")
    diff = c.differing
    lines.append("  differs: " + (", ".join(diff) if diff else "nothing beyond tolerance"))
    if c.pinned is not None:
        p = c.pinned
        lines.append(
            f"  pool pinned to the log's available KV: {p.num_blocks} blocks of "
            f"{p.block_size_tok} tok, {p.bytes_per_block / 2**20:.2f} MiB each; "
            f"capacity {p.max_concurrency(4096)} requests at 4096 tok "
            f"(use --kv-cache-memory {p.kv_budget_bytes} to simulate with it)"
        )
    return "\n".join(lines)


def guess_preset(log_model: str | None) -> str | None:
    """The capsim preset whose name appears in a log's model string (longest first)."""
    from capsim.models import PRESETS

    text = (log_model or "").lower()
    for name in sorted(PRESETS, key=len, reverse=True):
        if name in text.replace("_", "-"):
            return name
    return None
