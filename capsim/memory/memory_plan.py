"""gpu_memory_utilization -> KV/state pool -> blocks, as vLLM v1 sizes it (VLLM.md s1, s2, s7).

What vLLM does at start-up (0.26.0/0.33.0 source, paths relative to the ``vllm/`` package):

- ``v1/worker/gpu_worker.py:Worker.init_device`` snapshots free memory *after* the CUDA
  context, NCCL and cuBLAS handles exist: they sit in the ``1 - gmu`` margin, uncharged.
  ``v1/worker/utils.py:request_memory``: ``requested = ceil(gmu * total)``.
- ``Worker.determine_available_memory`` runs ``GPUModelRunner.profile_run`` inside
  ``utils/mem_utils.py:memory_profiling`` and sets
  ``available_kv = requested - non_kv_cache_memory - cudagraph_estimate`` where
  ``non_kv_cache_memory = total_consumed + transient_peak_headroom``:

  * **weights** (``model_memory_usage``, logged "Model loading took X GiB"): the
    checkpoint's tensors on this rank. Modelled from the config (``memory/weights.py``),
    with the vision tower when multimodal inputs are on and the MTP layer when drafting.
  * **activation peak** (``transient_peak_headroom`` = torch peak - torch allocated after
    the run). ``profile_run`` (``v1/worker/gpu_model_runner.py``) first runs the vision
    encoder on ``max_items`` dummy images of the largest size and keeps the outputs in
    ``encoder_cache`` (skipped when ``limit_mm_per_prompt`` disables every modality:
    ``multimodal/encoder_budget.py``, ``v1/core/encoder_cache_manager.py:
    compute_mm_encoder_budget``), then ``_dummy_run(max_num_tokens)`` (one forward over
    ``max_num_batched_tokens`` tokens: GDN chunked prefill, fused-MoE workspace,
    attention), then ``_dummy_sampler_run`` (``compute_logits`` over ``min(max_num_seqs,
    mnbt)`` rows, fp32 [rows, vocab], top-k/top-p sampling) and, with drafts, the
    rejection-sampler dummy run over the same rows (``activation.py``). Peak = max(encoder
    forward, encoder cache + max(forward, sampler, rejection sampler)).
  * **runner buffers**: persistent input/position/hidden-state buffers sized by
    ``max_num_tokens`` (``GPUModelRunner.__init__``), part of ``total_consumed``.
  * **non-torch memory** (NCCL buffers, cuBLAS workspaces created after the snapshot):
    ``terms.non_torch_term`` (fit on two named H100 rows; TP>1 only on NVSwitch Hopper).
  * **CUDA graphs** (``GPUModelRunner.profile_cudagraph_memory``): reproduced in
    ``cudagraph.py`` (capture sizes per release, two-graph sampling and linear
    extrapolation, FlashAttention split buffers, the GDN transient of #50780), charged
    since 0.20.0 (``release_rules.py``).
- ``kv_cache_memory_bytes`` (``--kv-cache-memory``) replaces the formula (gmu ignored);
  ``num_gpu_blocks_override`` replaces the block count (``v1/core/kv_cache_planning.py``).

Each non-KV term is a ``terms.Term(bytes, source, detail)``, one function per term in
``terms.py``; ``source`` is a ``terms.Source`` (measured: the H200 table handed in as
``lookup``; from log; pinned; modelled; not charged). Version rules: ``release_rules.py``
(patch-exact, read from the wheels) and ``capsim/vllm_rules.py`` (batch tiers, gmu).
vLLM's start-up refusals are raised from ``check_refusals`` (``refusals.py``).

Per GPU (every rank sizes its own pool; the engine takes the minimum, and all ranks are
alike under TP, so one rank is planned)::

    budget_bytes    = ceil(gmu * total_memory_bytes)                      (s1.2)
    kv_budget_bytes = budget - weights - activation_peak - runner_buffers
                      - non_torch - cudagraph_bytes (vLLM >= 0.20.0)        (s1.5)
                      (runner_buffers only since 0.27.0: release_rules)
    num_blocks      = kv_budget_bytes // bytes_per_block                  (s1.6)
    usable_blocks   = num_blocks - 1   (block 0 is the null block)

Page unification (``platforms/interface.py``: "Setting attention block size to N tokens",
"Padding mamba page size by X%"; s2.3), prefix caching off (mamba mode "none")::

    attn_bytes_per_tok = kv_heads_per_rank * head_dim * 2 (K and V) * kv_dtype_bytes
    mamba_page  = conv_dim/tp * (K - 1 + num_spec) * conv_bytes + Hv/tp * dv * dk * ssm_bytes
    block_size  = align * cdiv(mamba_page, align * attn_bytes_per_tok)
    page_bytes  = block_size * attn_bytes_per_tok   (the mamba page is padded up to it)

Groups (s2.4, ``kv_cache_planning.py``: "Add N padding layers"): the full-attention
bucket (target layers plus the MTP layer when drafting) and the GDN bucket;
``group_size = max`` if ``max < 1.5 * min`` else ``min``; each bucket splits into
``cdiv(n, group_size)`` groups, padded to ``group_size`` layers.
``bytes_per_block = group_size * page_bytes`` (s2.5).

TreeWY deferred commit (``commit="deferred"``) keeps the previous window's keys,
pseudo-values and gates per request and GDN layer between steps; ``treewy_pending.py``
sizes them from the kernel's buffer shapes and they are charged as extra blocks per
request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import GpuSpec
from capsim.memory import drafter_memory as dm
from capsim.memory import refusals as rf
from capsim.memory.activation import (  # noqa: F401  (re-exported for callers)
    encoder_profile_bytes,
    forward_activation_bytes,
    forward_parts_bytes,
    sampler_peak_bytes,
)
from capsim.memory.cudagraph import CaptureDescs
from capsim.memory.release_rules import rule
from capsim.memory.terms import (
    PlanInputs,
    Source,
    Term,
    TermLookup,
    activation_term,
    cudagraph_term,
    non_torch_term,
    runner_buffers_term,
    weights_term,
)
from capsim.memory.treewy_pending import pending_bytes_per_request
from capsim.memory.weights import kv_heads_per_rank
from capsim.models import ModelSpec
from capsim.units import GiB, MiB, cdiv, dtype_bytes

NON_KV_TERMS: tuple[str, ...] = (
    "weights",
    "activation_peak",
    "runner_buffers",
    "non_torch",
    "cudagraph",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryPlan:
    """The pool vLLM would build for one deployment, per GPU."""

    model: str
    gpu: str
    tp: int
    gmu: float
    vllm_version: str
    total_memory_bytes: int
    budget_bytes: int
    terms: dict[str, Term] = field(repr=False)
    weights_breakdown_bytes: dict[str, int] = field(repr=False)
    activation_parts_bytes: dict[str, int] = field(repr=False)
    capture: CaptureDescs = field(repr=False)
    cudagraph_estimate_bytes: int
    kv_budget_bytes: int
    kv_cache_memory_pinned: bool
    kv_heads_per_rank: int
    attn_bytes_per_tok_per_layer: int
    conv_state_bytes: int
    ssm_state_bytes: int
    mamba_page_unpadded_bytes: int
    mamba_padding_pct: float
    page_bytes: int
    block_size_tok: int
    num_attn_layers: int
    num_gdn_layers: int
    group_size: int
    num_attn_groups: int
    num_gdn_groups: int
    gdn_padding_layers: int
    bytes_per_block: int
    num_blocks: int
    usable_blocks: int
    gdn_slots_per_group: int
    size_line_gdn_slots: int
    pending_bytes_per_request: int
    pending_blocks_per_request: int
    gdn_blocks_per_request: int
    lookahead_tok: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    multimodal: bool
    prefix_caching: bool
    # An external drafter's attention layers (drafter_memory.py): their own bucket of groups
    num_draft_layers: int = 0
    num_draft_groups: int = 0
    draft_block_size_tok: int = 0
    draft_admission_blocks: int = 0  # sliding-window cap per request (0: full attention)
    model_runner: str = "v1"  # "v2" when the drafter makes vLLM select the V2 runner

    # The terms' bytes under their historic names (callers read these).
    @property
    def weights_bytes(self) -> int:
        return self.terms["weights"].bytes

    @property
    def activation_peak_bytes(self) -> int:
        return self.terms["activation_peak"].bytes

    @property
    def runner_buffers_bytes(self) -> int:
        return self.terms["runner_buffers"].bytes

    @property
    def non_torch_bytes(self) -> int:
        return self.terms["non_torch"].bytes

    @property
    def cudagraph_bytes(self) -> int:
        return self.terms["cudagraph"].bytes

    @property
    def cudagraph_capture_max(self) -> int:
        return self.capture.largest_tok

    @property
    def cudagraph_piecewise_graphs(self) -> int:
        return len(self.capture.piecewise_tok)

    @property
    def cudagraph_full_graphs(self) -> int:
        return len(self.capture.full_tok)

    @property
    def term_sources(self) -> dict[str, str]:
        """Each term's label, for display only (read ``terms[name].source`` in code)."""
        return {name: t.label() for name, t in self.terms.items()}

    def as_json(self) -> dict[str, object]:
        """Every field, the terms as {bytes, source, detail} and their historic *_bytes names."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "terms":
                value = {
                    k: {"bytes": t.bytes, "source": t.source.value, "detail": t.detail}
                    for k, t in value.items()
                }
            elif f.name == "capture":
                value = {
                    "piecewise_tok": list(value.piecewise_tok),
                    "full_tok": list(value.full_tok),
                }
            out[f.name] = value
        for name in (
            "weights_bytes",
            "activation_peak_bytes",
            "runner_buffers_bytes",
            "non_torch_bytes",
            "cudagraph_bytes",
            "cudagraph_capture_max",
            "cudagraph_piecewise_graphs",
            "cudagraph_full_graphs",
            "term_sources",
        ):
            out[name] = getattr(self, name)
        out["vllm_kv_cache_tokens"] = self.vllm_kv_cache_tokens()
        return out

    def attn_blocks_for(self, num_tok: int) -> int:
        """Attention blocks (all attention groups) holding ``num_tok`` tokens."""
        return self.num_attn_groups * cdiv(min(num_tok, self.max_model_len), self.block_size_tok)

    def draft_blocks_for(self, num_tok: int) -> int:
        """Drafter attention blocks (all drafter groups) holding ``num_tok`` tokens; a
        sliding-window group holds at most ``draft_admission_blocks``."""
        if not self.num_draft_groups:
            return 0
        need = cdiv(min(num_tok, self.max_model_len), self.draft_block_size_tok)
        if self.draft_admission_blocks:
            need = min(need, self.draft_admission_blocks)
        return self.num_draft_groups * need

    def blocks_per_request(self, context_tok: int) -> int:
        """Blocks one running request of ``context_tok`` tokens holds (with lookahead)."""
        num_tok = context_tok + self.lookahead_tok
        return (
            self.attn_blocks_for(num_tok)
            + self.draft_blocks_for(num_tok)
            + (self.gdn_blocks_per_request)
        )

    def max_concurrency(self, context_tok: int) -> int:
        """Requests of ``context_tok`` tokens the pool holds at once (analytical capacity)."""
        return self.usable_blocks // self.blocks_per_request(context_tok)

    def vllm_kv_cache_tokens(self) -> int:
        """vLLM's logged "GPU KV cache size: N tokens".

        Since 0.20.1 (``get_kv_cache_capacity``): max_concurrency x max_model_len, one
        request = attention blocks at max_model_len plus ``MambaSpec.max_memory_usage_bytes``
        pages per GDN group (1 + k, or 2 + k in align mode). Up to 0.20.0: ``num_blocks //
        len(kv_cache_groups) * block_size`` (release_rules.kv_size_line_concurrency).
        """
        if not rule("kv_size_line_concurrency", self.vllm_version):
            groups = self.num_attn_groups + self.num_gdn_groups + self.num_draft_groups
            return self.num_blocks // groups * self.block_size_tok
        per_req = self.num_attn_groups * cdiv(self.max_model_len, self.block_size_tok)
        per_req += self.num_gdn_groups * self.size_line_gdn_slots
        if self.num_draft_groups:  # SlidingWindowSpec.max_memory_usage_bytes: the cap
            per_req += self.num_draft_groups * (
                self.draft_admission_blocks or cdiv(self.max_model_len, self.draft_block_size_tok)
            )
        return int(self.num_blocks / per_req * self.max_model_len)


def block_size_and_page(
    model: ModelSpec, engine: EngineConfig, spec: SpecDecodeConfig
) -> tuple[int, int, int, int, int]:
    """(block_size_tok, page_bytes, attn_bytes_per_tok, conv_bytes, ssm_bytes) per layer.

    ``Platform._align_hybrid_block_size``: the kernel alignment is max(backend minimum,
    --block-size) (16 on FA/FlashInfer); with prefix caching on (mode 'align') it is LCM-ed
    with the GDN prefill checkpoint alignment (64) only since 0.33.0 (release_rules
    ``align_mode_checkpoint_lcm``); 0.20.0-0.32.0 keep the plain alignment.
    """
    tp = engine.tp
    attn_per_tok = (
        kv_heads_per_rank(model, tp) * model.head_dim * 2 * dtype_bytes(engine.kv_cache_dtype)
    )
    align = max(engine.kernel_block_align_tok, engine.block_size_tok or 16)
    if not model.is_hybrid:
        return align, align * attn_per_tok, attn_per_tok, 0, 0
    for name, heads in (
        ("linear_num_value_heads", model.linear_num_value_heads),
        ("linear_num_key_heads", model.linear_num_key_heads),
    ):
        if heads % tp:
            raise ValueError(f"engine.tp={tp}: model {model.name} {name}={heads} not divisible")
    ssm_dtype = engine.ssm_state_dtype or model.ssm_state_dtype
    conv_cols = model.linear_conv_kernel_dim - 1 + spec.num_draft_nodes
    conv_bytes = (model.conv_dim // tp) * conv_cols * dtype_bytes(engine.conv_state_dtype)
    ssm_bytes = (
        (model.linear_num_value_heads // tp)
        * model.linear_value_head_dim
        * model.linear_key_head_dim
        * dtype_bytes(ssm_dtype)
    )
    if engine.enable_prefix_caching and rule("align_mode_checkpoint_lcm", engine.vllm_version):
        align = math.lcm(align, 64)
    block = align * cdiv(conv_bytes + ssm_bytes, align * attn_per_tok)
    return block, block * attn_per_tok, attn_per_tok, conv_bytes, ssm_bytes


def group_layout(num_attn: int, num_gdn: int, num_draft: int = 0) -> tuple[int, int, int, int]:
    """(group_size, num_attn_groups, num_gdn_groups, gdn_padding_layers), VLLM.md s2.4;
    ``num_draft``: a third bucket (an external drafter's own attention layers), which takes
    part in the group size (``_get_kv_cache_groups_uniform_page_size`` takes min/max over
    every bucket) and splits into ``cdiv(num_draft, group_size)`` groups."""
    sizes = [n for n in (num_attn, num_gdn, num_draft) if n > 0]
    lo, hi = min(sizes), max(sizes)
    group_size = hi if hi < 1.5 * lo else lo
    num_attn_groups = cdiv(num_attn, group_size) if num_attn else 0
    num_gdn_groups = cdiv(num_gdn, group_size) if num_gdn else 0
    padding = num_gdn_groups * group_size - num_gdn if num_gdn else 0
    return group_size, num_attn_groups, num_gdn_groups, padding


def plan_inputs(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: EngineConfig,
    spec: SpecDecodeConfig,
    *,
    log_terms: dict[str, int] | None = None,
    lookup: TermLookup | None = None,
) -> PlanInputs:
    """The settings every term reads, with vLLM's defaults for the GPU and release."""
    max_num_seqs, max_batched = engine.resolved_batch_defaults(gpu, model.max_position_embeddings)
    return PlanInputs(
        model=model,
        gpu=gpu,
        engine=engine,
        spec=spec,
        vllm_version=engine.vllm_version,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
        max_model_len=engine.check_vllm_limits(gpu, model.max_position_embeddings),
        multimodal=model.vision is not None and engine.limit_mm_per_prompt != 0,
        log_terms=dict(log_terms or {}),
        lookup=lookup,
    )


@dataclass(frozen=True, slots=True)
class NonKv:
    terms: dict[str, Term]
    weight_parts: dict[str, int]
    activation_parts: dict[str, int]
    capture: CaptureDescs
    cudagraph_estimate_bytes: int


def non_kv_terms(p: PlanInputs) -> NonKv:
    """Every non-KV term (NON_KV_TERMS order), the weight and activation parts, the captures."""
    weights, w_parts = weights_term(p)
    activation, a_parts = activation_term(p)
    graphs, descs, estimate = cudagraph_term(p)
    terms = {
        "weights": weights,
        "activation_peak": activation,
        "runner_buffers": runner_buffers_term(p),
        "non_torch": non_torch_term(p),
        "cudagraph": graphs,
    }
    return NonKv(terms, w_parts, a_parts, descs, estimate)


def _refuse_budget(
    p: PlanInputs, terms: dict[str, Term], kv: int, per_block: int, budget: int
) -> None:
    if kv >= 2 * per_block:
        return
    parts = ", ".join(f"{k} {t.bytes / GiB:.2f} GiB" for k, t in terms.items())
    raise ValueError(
        f"engine.gmu={p.engine.gmu}: budget {budget / GiB:.2f} GiB on {p.gpu.name} cannot hold "
        f"{parts} and a KV pool (left: {kv / GiB:.2f} GiB, one block is "
        f"{per_block / MiB:.2f} MiB) for {p.model.name} at tp={p.engine.tp} (vLLM refuses "
        "when nothing is left: 'No available memory for the cache blocks.')"
    )


def bytes_per_block_of(model: ModelSpec, engine: EngineConfig, spec: SpecDecodeConfig) -> int:
    """``group_size * page``: what one block id costs in the shared pool (VLLM.md s2.5)."""
    _block, page, _a, _c, _s = block_size_and_page(model, engine, spec)
    num_attn, num_draft = dm.layer_buckets(model, engine, spec)
    return group_layout(num_attn, model.num_gdn_layers, num_draft)[0] * page


def _layout(p: PlanInputs, nk: NonKv, budget: int, kv_budget: int) -> MemoryPlan:
    """The page/group layout of the pool and the plan that holds it."""
    model, engine, spec = p.model, p.engine, p.spec
    block, page, attn_per_tok, conv_b, ssm_b = block_size_and_page(model, engine, spec)
    num_attn, num_draft = dm.layer_buckets(model, engine, spec)
    group_size, n_attn_groups, n_gdn_groups, padding = group_layout(
        num_attn, model.num_gdn_layers, num_draft
    )
    bytes_per_block = group_size * page
    if engine.num_gpu_blocks_override is not None:
        num_blocks = engine.num_gpu_blocks_override
    else:
        num_blocks = kv_budget // bytes_per_block
    gdn_slots = spec.state_slots_per_group if model.is_hybrid else 0
    pending = pending_bytes_per_request(model, engine.tp, spec)
    pending_blocks = cdiv(pending, bytes_per_block) if pending else 0
    mamba_unpadded = conv_b + ssm_b
    align_mode = engine.enable_prefix_caching and model.is_hybrid
    return MemoryPlan(
        model=model.name,
        gpu=p.gpu.name,
        tp=engine.tp,
        gmu=engine.gmu,
        vllm_version=engine.vllm_version,
        total_memory_bytes=p.gpu.total_memory_bytes,
        budget_bytes=budget,
        terms=nk.terms,
        weights_breakdown_bytes=nk.weight_parts,
        activation_parts_bytes=nk.activation_parts,
        capture=nk.capture,
        cudagraph_estimate_bytes=nk.cudagraph_estimate_bytes,
        kv_budget_bytes=int(kv_budget),
        kv_cache_memory_pinned=engine.kv_cache_memory_bytes is not None,
        kv_heads_per_rank=kv_heads_per_rank(model, engine.tp),
        attn_bytes_per_tok_per_layer=attn_per_tok,
        conv_state_bytes=conv_b,
        ssm_state_bytes=ssm_b,
        mamba_page_unpadded_bytes=mamba_unpadded,
        mamba_padding_pct=(100.0 * (page - mamba_unpadded) / mamba_unpadded)
        if mamba_unpadded
        else 0.0,
        page_bytes=page,
        block_size_tok=block,
        num_attn_layers=num_attn,
        num_gdn_layers=model.num_gdn_layers,
        group_size=group_size,
        num_attn_groups=n_attn_groups,
        num_gdn_groups=n_gdn_groups,
        gdn_padding_layers=padding,
        bytes_per_block=bytes_per_block,
        num_blocks=int(num_blocks),
        usable_blocks=int(num_blocks) - 1,
        gdn_slots_per_group=gdn_slots,
        size_line_gdn_slots=(1 + spec.num_draft_nodes + (1 if align_mode else 0))
        if model.is_hybrid
        else 0,
        pending_bytes_per_request=pending,
        pending_blocks_per_request=pending_blocks,
        gdn_blocks_per_request=n_gdn_groups * gdn_slots + pending_blocks,
        lookahead_tok=spec.num_draft_nodes,
        max_model_len=p.max_model_len,
        max_num_seqs=p.max_num_seqs,
        max_num_batched_tokens=p.max_num_batched_tokens,
        multimodal=p.multimodal,
        prefix_caching=engine.enable_prefix_caching,
        model_runner="v2" if spec.v2_runner else "v1",
        **dm.draft_layout(p, page, group_size, num_draft),
    )


def plan_memory(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: EngineConfig,
    spec: SpecDecodeConfig,
    *,
    log_terms: dict[str, int] | None = None,
    lookup: TermLookup | None = None,
    refuse: bool = True,
) -> MemoryPlan:
    """Budget minus the non-KV terms, then the page/group layout; raises ValueError for
    configurations vLLM refuses to start (with vLLM's reason) unless ``refuse`` is False
    (the pool vLLM computed before refusing, e.g. to compare with a refused start-up's log).

    ``log_terms`` (bytes by ``NON_KV_TERMS`` name) replace capsim's value of a term
    ("from log"); ``lookup`` finds measured terms (the caller hands in the H200 table).
    """
    p = plan_inputs(model, gpu, engine, spec, log_terms=log_terms, lookup=lookup)
    nk = non_kv_terms(p)
    terms = nk.terms
    budget = math.ceil(engine.gmu * gpu.total_memory_bytes)
    if engine.kv_cache_memory_bytes is not None:
        kv_budget = engine.kv_cache_memory_bytes
        terms["kv_cache_memory"] = Term(kv_budget, Source.PINNED, "--kv-cache-memory")
    else:
        kv_budget = budget - sum(terms[k].bytes for k in NON_KV_TERMS)
    if engine.num_gpu_blocks_override is None:
        per_block = bytes_per_block_of(model, engine, spec)
        _refuse_budget(p, terms, kv_budget, per_block, budget)
    plan = _layout(p, nk, budget, int(kv_budget))
    if refuse:
        check_refusals(plan, model, engine)
    return plan


def check_refusals(plan: MemoryPlan, model: ModelSpec, engine: EngineConfig) -> None:
    """vLLM's start-up refusals that depend on the pool (refusals.py), raised as ValueError."""
    if engine.num_gpu_blocks_override is not None:
        # vLLM checks memory before the override replaces the block count; a pinned pool
        # that cannot hold even a 1-token request is refused in the words of that check
        one = plan.blocks_per_request(1)
        r = rf.max_model_len_too_long(
            max_model_len=plan.max_model_len,
            needed_bytes=max(one, plan.blocks_per_request(plan.max_model_len))
            * plan.bytes_per_block,
            available_kv_bytes=plan.usable_blocks * plan.bytes_per_block,
            estimated_max_len=0,
        )
        if one > plan.usable_blocks and r is not None:
            raise ValueError(
                f"engine.num_gpu_blocks_override={engine.num_gpu_blocks_override}: "
                f"{r.vllm_message} (a 1-token request needs {one} blocks; the override leaves "
                f"{plan.usable_blocks} usable) Fix: a larger --num-gpu-blocks-override, or "
                "leave it unset"
            )
        return
    need = plan.blocks_per_request(plan.max_model_len)
    if need > plan.usable_blocks:
        # estimated max length: the longest request whose blocks fit the pool
        lo, hi = 0, plan.max_model_len
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (
                (mid, hi) if plan.blocks_per_request(mid) <= plan.usable_blocks else (lo, mid - 1)
            )
        r = rf.max_model_len_too_long(
            max_model_len=plan.max_model_len,
            needed_bytes=need * plan.bytes_per_block,
            available_kv_bytes=plan.usable_blocks * plan.bytes_per_block,
            estimated_max_len=lo,
        )
        raise ValueError(
            f"engine.max_model_len={plan.max_model_len}: {r.vllm_message} Fix: {r.fix}"
        )
    full = bool(plan.capture.full_tok)
    if rule("mamba_blocks_refusal", engine.vllm_version):
        r = rf.mamba_blocks(
            max_num_seqs=plan.max_num_seqs,
            num_blocks=plan.num_blocks,
            has_mamba=model.is_hybrid,
            full_graphs=full,
        )
        if r is not None:
            raise ValueError(
                f"engine.max_num_seqs={plan.max_num_seqs}: {r.vllm_message} Fix: {r.fix}"
            )
