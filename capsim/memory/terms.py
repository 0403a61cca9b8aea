"""The non-KV terms of vLLM's start-up budget, one function per term.

Each function returns a ``Term(bytes, source, detail)``: ``source`` says where the value comes
from (``Source``), ``detail`` says which rule, measurement or log line. ``plan_memory``
(memory_plan.py) subtracts them from ``ceil(gmu * total)``. What vLLM does for each term is in
memory_plan.py's docstring; the release each rule was read in is in release_rules.py.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import GpuSpec
from capsim.memory import cudagraph as cg
from capsim.memory import drafter_memory as dm
from capsim.memory.activation import (
    REJECTION_BYTES_PER_ROW_VOCAB,
    REJECTION_FIT_SOURCE,
    captured_forward_bytes,
    encoder_profile_bytes,
    forward_parts_bytes,
    held_dummy_pixels_bytes,
    native_topk_topp_sampler_peak_bytes,
    rejection_row_vocab_elems,
    sampler_held_bytes,
    sampler_peak_bytes,
    triton_topk_buffer_bytes,
)
from capsim.memory.release_rules import rule
from capsim.memory.weights import padded_vocab, weight_breakdown_bytes
from capsim.models import ModelSpec
from capsim.units import GiB, dtype_bytes
from capsim.vllm_rules import rules_for

# A measured-term lookup: (term, model, tp, value on the term's axis) -> bytes or None.
TermLookup = Callable[[str, str, int, int], "int | None"]


class Source(enum.Enum):
    MEASURED = "measured"
    FROM_LOG = "from log"
    PINNED = "pinned"
    MODELLED = "modelled"
    NOT_CHARGED = "not charged"


@dataclass(frozen=True, slots=True)
class Term:
    bytes: int
    source: Source
    detail: str = ""

    def label(self) -> str:
        return f"{self.source.value}: {self.detail}" if self.detail else self.source.value


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanInputs:
    """Everything a term needs, resolved once (vLLM's defaults for the GPU and release)."""

    model: ModelSpec
    gpu: GpuSpec
    engine: EngineConfig
    spec: SpecDecodeConfig
    vllm_version: str
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    multimodal: bool
    log_terms: dict[str, int] = field(default_factory=dict)
    lookup: TermLookup | None = None

    def measured(self, term: str, x: int) -> int | None:
        if self.lookup is None:
            return None
        got = self.lookup(term, self.model.name, self.engine.tp, x)
        return None if got is None else int(got)


def _logged(p: PlanInputs, name: str, what: str) -> Term | None:
    if name in p.log_terms:
        return Term(int(p.log_terms[name]), Source.FROM_LOG, what)
    return None


def weights_term(p: PlanInputs) -> tuple[Term, dict[str, int]]:
    """``model_memory_usage`` ("Model loading took X GiB"): the rank's tensors."""
    parts = weight_breakdown_bytes(
        p.model, p.engine.tp, with_mtp=p.spec.uses_mtp, with_vision=p.multimodal
    )
    d = p.spec.drafter
    if d is not None:  # loaded in the same DeviceMemoryProfiler (drafter_memory.py)
        parts["drafter"] = sum(dm.drafter_weight_parts(d, p.engine.tp).values())
    logged = _logged(p, "weights", "'Model loading took X GiB'")
    if logged:
        return logged, parts
    fmt = p.model.quantization
    if p.model.quant_formats:
        fmt = "mixed (" + ", ".join(f"{c} {f}" for c, f in p.model.quant_formats) + ")"
    detail = f"config shapes, {fmt} weights" + (", vision tower" if p.multimodal else "")
    if d is not None:
        detail += f", drafter {d.name} {parts['drafter'] / GiB:.2f} GiB ({d.linear_format})"
    return Term(sum(parts.values()), Source.MODELLED, detail), parts


def _sampler_bytes(p: PlanInputs, rows: int) -> tuple[int, str]:
    """The dummy sampler run's peak over ``rows`` and its path: "native", "measured" (the H200
    table) or "modelled".
    A V1 release whose wheel does not bring FlashInfer (release rule
    ``flashinfer_installed_by_default``) runs the PyTorch-native top-k/top-p sort; otherwise
    vLLM 0.33's path (Triton top-k/top-p), or the H200 measurement of it."""
    m = p.model
    if rules_for(p.vllm_version).v1_engine and not rule(
        "flashinfer_installed_by_default", p.vllm_version
    ):
        return native_topk_topp_sampler_peak_bytes(m, rows), "native"
    got = p.measured("sampler_dummy_run", rows)
    if got is not None:
        # The table's row is the peak over the bf16 logits (kernels/MEMORY_TERMS.md), but
        # ``_dummy_sampler_run`` keeps ``compute_logits``' [rows, padded vocab] output alive
        # while both sampler calls run (0.26.0 v1/worker/gpu_model_runner.py): add it back.
        return got + rows * padded_vocab(m) * dtype_bytes(m.weight_dtype), "measured"
    return (
        sampler_peak_bytes(m, rows) + triton_topk_buffer_bytes(m, rows, p.gpu.sm_count),
        "modelled",
    )


def activation_term(p: PlanInputs) -> tuple[Term, dict[str, int]]:
    """``torch_peak_increase`` of ``profile_run``: encoder pass (outputs and the dummy pixel
    values kept), one forward over max_num_batched_tokens, the dummy sampler over
    ``min(max_num_seqs, mnbt)`` rows and, with drafts, the rejection-sampler dummy run over the
    same rows."""
    m, tp, mnbt = p.model, p.engine.tp, p.max_num_batched_tokens
    enc_cache, enc_fwd = encoder_profile_bytes(m, tp, mnbt) if p.multimodal else (0, 0)
    pixels = held_dummy_pixels_bytes(m, mnbt) if p.multimodal else 0
    triton_shapes = bool(rule("moe_workspace_triton_shapes", p.vllm_version))
    fwd = forward_parts_bytes(m, tp, mnbt, triton_experts_shapes=triton_shapes)
    measured: list[str] = []
    moe = p.measured("moe_workspace", mnbt) if fwd["moe"] else None
    if moe is not None:
        fwd["moe"] = moe
        measured.append("moe")
    # vLLM's fused-MoE workspace is allocated on the first MoE forward and kept (TritonExperts
    # workspace13/workspace2, kernels/MEMORY_TERMS.md), so it sits under the sampler's peak
    # too; a dense MLP's intermediates are transient.
    kept = fwd["moe"] if m.num_experts else 0
    transient_ffn = 0 if m.num_experts else fwd["moe"]
    forward = fwd["stream"] + max(fwd["gdn"], transient_ffn, fwd["attention"])
    rows = min(p.max_num_seqs, mnbt)
    held = sampler_held_bytes(m, rows, mnbt)
    sampler, sampler_path = _sampler_bytes(p, rows)
    if sampler_path == "measured":
        measured.append("sampler")
    rejection = 0
    if p.spec.depth > 0 and not p.spec.v2_runner:  # the V2 profile_run has no such run
        elems = rejection_row_vocab_elems(rows, padded_vocab(m))
        rejection = round(REJECTION_BYTES_PER_ROW_VOCAB * elems) + held
    d = p.spec.drafter
    propose = dm.propose_transient_bytes(d, mnbt) if d is not None and p.spec.depth else 0
    parts = {
        "moe_workspace_kept": kept,
        "forward": forward,
        **{f"forward.{k}": v for k, v in fwd.items()},
        "sampler": sampler + held,
        "sampler.held_hidden_states": held,
        "rejection_sampler": rejection,
        "drafter_propose": propose,
        "encoder_cache": enc_cache,
        "encoder_dummy_pixels_held": pixels,
        "encoder_forward": enc_fwd,
    }
    logged = _logged(p, "activation_peak", "'X GiB for peak activation'")
    if logged:
        return logged, parts
    sampler += held
    peak = max(enc_fwd, enc_cache + pixels + kept + max(forward, sampler, rejection, propose))
    if enc_fwd == peak and enc_fwd:
        why = (
            "peak in the vision encoder pass (one largest image; activation.vision_bytes_per_patch)"
        )
        return Term(peak, Source.MODELLED, why), parts
    top = max(
        (
            ("forward", forward),
            ("sampler", sampler),
            ("rejection_sampler", rejection),
            ("drafter propose", propose),
        ),
        key=lambda kv: kv[1],
    )[0]
    if top == "rejection_sampler":
        why = f"peak in the rejection sampler ({REJECTION_FIT_SOURCE})"
        return Term(peak, Source.MODELLED, why), parts
    if top == "sampler" and sampler_path == "native":
        why = (
            f"peak in the sampler: the PyTorch-native top-k/top-p sort (vLLM {p.vllm_version}'s "
            "wheel does not bring FlashInfer; release rule flashinfer_installed_by_default)"
        )
        return Term(peak, Source.MODELLED, why), parts
    if top == "sampler" and "sampler" in measured:
        return Term(peak, Source.MEASURED, "H200 table: sampler_dummy_run"), parts
    if top == "forward" and "moe" in measured and kept:
        return Term(peak, Source.MEASURED, "H200 table: moe_workspace (kept) + forward"), parts
    return Term(peak, Source.MODELLED, f"shape estimate, peak in the {top}"), parts


def runner_buffer_bytes(p: PlanInputs) -> int:
    """Persistent input ids/positions (int64) and hidden-state staging of mnbt tokens."""
    b = dtype_bytes(p.model.weight_dtype)
    n = p.max_num_batched_tokens * (2 * 8 + 2 * p.model.hidden_size * b)
    if p.spec.drafter is not None and p.spec.depth:
        n += dm.speculator_buffer_bytes(
            p.spec.drafter,
            max_num_seqs=p.max_num_seqs,
            mnbt=p.max_num_batched_tokens,
            k=p.spec.num_draft_nodes,
        )
    return n


def runner_buffers_term(p: PlanInputs) -> Term:
    """``GPUModelRunner.__init__`` allocates these buffers after the worker's
    ``init_snapshot`` and before ``memory_profiling`` resets the torch peak. Before 0.27.0
    they are in neither ``weights_memory`` (measured around ``load_model``), the torch peak
    increase nor the non-torch increase (0.19.0-0.26.0 ``v1/worker/gpu_worker.py:
    determine_available_memory``, ``utils/mem_utils.py``): the logged parts add up to gmu x
    total without them (e.g. llama31-8b-h100-tp1-llmdplanner: 14.99 + 1.89 + 0.25 + 58.11 =
    75.24 GiB = 0.95 x 79.19), they live in the 1 - gmu share. Since 0.27.0 vLLM charges
    the free-memory drop from the snapshot ("consumed memory"), which holds them
    (release rule ``runner_buffers_charged``)."""
    n = runner_buffer_bytes(p)
    if rule("runner_buffers_charged", p.vllm_version):
        why = (
            f"{n / GiB:.2f} GiB of GPUModelRunner buffers"
            + (" and the drafter's speculator buffers" if p.spec.drafter else "")
            + ", inside 'consumed memory' since 0.27.0 (utils/mem_utils.py total_consumed)"
        )
        return Term(n, Source.MODELLED, why)
    why = (
        f"{n / GiB:.2f} GiB of GPUModelRunner buffers allocated before the profile: "
        "vLLM < 0.27 charges them to no term (gpu_worker.py determine_available_memory)"
    )
    return Term(0, Source.NOT_CHARGED, why)


# Non-torch growth after vLLM's baseline snapshot (cuBLAS/cuDNN workspaces, NCCL buffers
# created by the first collective), per rank. FIT on named rows: 0.25 GiB at TP1 (H100 row
# llama31-8b-h100-tp1-llmdplanner, vLLM 0.19.0) and +1.82 GiB once a TP communicator exists on
# an NVSwitch Hopper node (llama31-8b-h100-tp2-llmdplanner, 2.07 GiB). Checked on the others:
# H100 TP4 rows 2.13-2.21 GiB, Qwen3-30B TP1 0.27, the H200 0.26.0 start-up 0.25 (real engine).
# A GPU without an NVSwitch entry gets the TP1 value and no TP term (#50722: 0.13 GiB at TP4 on
# an 80 GB card without NVSwitch in the log).
NON_TORCH_BASE_BYTES: int = round(0.25 * GiB)


def non_torch_term(p: PlanInputs) -> Term:
    logged = _logged(p, "non_torch", "'X GiB for non-torch memory'")
    if logged:
        return logged
    tp = p.engine.tp
    if p.gpu.non_torch_bytes is not None:
        base, tp_extra = p.gpu.non_torch_bytes
        # the TP term goes with vLLM's custom all-reduce: the H100 rows that carry it run it
        # (disable_custom_all_reduce=False), the #50722 TP4 row without it logs 0.13 GiB
        extra = tp_extra if tp > 1 and not p.engine.disable_custom_all_reduce else 0
        return Term(
            base + extra,
            Source.MODELLED,
            f"{p.gpu.name} registry: {base / GiB:.2f} GiB"
            + (f" + {extra / GiB:.2f} GiB NCCL/NVSwitch at tp={tp}" if extra else "")
            + " (fit: H100 vLLM 0.19 rows tp1/tp2)",
        )
    return Term(
        NON_TORCH_BASE_BYTES,
        Source.MODELLED,
        f"no log for {p.gpu.name}: the Hopper TP1 value, no NVSwitch term",
    )


def capture_descs_for(p: PlanInputs) -> cg.CaptureDescs:
    if p.engine.enforce_eager:
        return cg.CaptureDescs((), ())
    full = p.engine.cudagraph_full_graphs and (
        p.spec.num_draft_nodes == 0
        or cg.full_graphs_with_drafts(p.gpu.compute_capability, p.engine.kv_cache_dtype)
    )
    return cg.capture_descs(
        vllm_version=p.vllm_version,
        max_num_seqs=p.max_num_seqs,
        num_spec_tok=p.spec.num_draft_nodes,
        max_num_batched_tokens=p.max_num_batched_tokens,
        sm100=p.gpu.is_sm100_family,
        full_graphs=full,
        max_capture_tok=p.engine.max_cudagraph_capture_size,  # vLLM --max-cudagraph-capture-size
    )


def cudagraph_term(p: PlanInputs) -> tuple[Term, cg.CaptureDescs, int]:
    """``profile_cudagraph_memory``: (charged term, captures, the estimate itself); the
    estimate is charged since 0.20.0 (release_rules) and logged also when it is not."""
    descs = capture_descs_for(p)
    charge = (
        rule("charge_cudagraph_estimate", p.vllm_version)
        if p.engine.subtract_cudagraph_memory is None
        else p.engine.subtract_cudagraph_memory
    )
    logged = _logged(p, "cudagraph", "'Estimated CUDA graph memory: X GiB total'")
    if logged:
        return logged, descs, logged.bytes
    if not descs.largest_tok:
        return Term(0, Source.NOT_CHARGED, "no CUDA graphs (--enforce-eager)"), descs, 0
    if p.spec.v2_runner and p.spec.depth:
        why = (
            f"drafter {p.spec.drafter.name if p.spec.drafter else ''} selects the V2 model "
            "runner, whose profile_cudagraph_memory returns 0 (0.27.1 v1/worker/gpu/"
            "model_runner.py): its graphs land outside the budget"
        )
        return Term(0, Source.NOT_CHARGED, why), descs, 0
    m, tp = p.model, p.engine.tp
    transient = 0
    k = p.spec.num_draft_nodes
    if m.is_hybrid and descs.full_tok and rule("gdn_first_full_capture_transient", p.vllm_version):
        transient = cg.gdn_transient_bytes(m.conv_dim // tp, k)
    heads = m.num_attention_heads // tp
    samples = cg.modelled_samples(
        descs,
        lambda n: captured_forward_bytes(m, tp, n),
        attn_layers=m.num_attn_layers + (m.num_mtp_layers if p.spec.uses_mtp else 0),
        fa_split_at=(
            (lambda n: cg.fa_split_buffer_bytes(n, heads, m.head_dim))
            if cg.flash_attn_split_buffers(p.gpu.compute_capability, p.engine.kv_cache_dtype)
            else (lambda n: 0)
        ),
        transient_bytes=transient,
        transient_source=cg.gdn_transient_source(k),
    )
    est = cg.estimate_bytes(descs, samples)
    detail = descs.log_line().removeprefix("Profiling CUDA graph memory: ")
    detail += "; " + "; ".join(f"{k}: {s.source}" for k, s in samples.items())
    if not charge:
        why = f"estimate {est / GiB:.2f} GiB, not charged before 0.20.0 ({detail})"
        return Term(0, Source.NOT_CHARGED, why), descs, est
    return Term(est, Source.MODELLED, detail), descs, est
