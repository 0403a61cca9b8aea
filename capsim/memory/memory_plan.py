"""gpu_memory_utilization -> KV/state pool -> blocks, as vLLM v1 sizes it (VLLM.md s1, s2, s7).

What vLLM does at start-up (0.33 source, paths relative to the ``vllm/`` package):

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
    attention), then ``_dummy_sampler_run`` (``compute_logits`` over ``max_num_seqs``
    rows, fp32 [rows, vocab], top-k/top-p sampling twice). Peak = max(encoder forward,
    encoder cache + forward, encoder cache + sampler); ``sampler_peak_bytes`` counts the
    sampler's live [rows, vocab] tensors.
  * **runner buffers**: persistent input/position/hidden-state buffers sized by
    ``max_num_tokens`` (``GPUModelRunner.__init__``), part of ``total_consumed``.
  * **non-torch memory** (``total_consumed`` minus torch's growth: NCCL/custom
    all-reduce buffers, cuBLAS workspaces created after the snapshot). Not derivable
    from vLLM's code (NCCL's buffers depend on the node): the GPU registry's
    ``non_torch_bytes`` (vLLM 0.19 H100 logs) where known, else 0 ("not modelled").
  * **CUDA graphs** (``GPUModelRunner.profile_cudagraph_memory``): captures the first two
    graphs of each mode (FULL, PIECEWISE) into a scratch pool; per mode
    ``first + (n - 1) * max(second, 1 MiB)``; FULL and PIECEWISE overlay one pool, so the
    estimate is ``max(first over modes) + sum((n - 1) * per_graph)``. Charged only when
    ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is on (default since 0.21). Capture sizes:
    ``config/vllm.py:VllmConfig._set_cudagraph_sizes`` (1, 2, 4, steps of 8 to 256, then
    16, up to ``min(max_num_seqs * (1 + k) * 2, ceiling)``, ceiling 1024 on SM100).
    Since 0.26 the first FULL capture runs with ``profile_seq_lens = mnbt // size``
    context per request, and on GDN hybrids that charges a transient growing with
    ``max_num_batched_tokens`` as graph memory (vllm issue #50780).
- ``kv_cache_memory_bytes`` (``--kv-cache-memory``) replaces the formula (gmu ignored);
  ``num_gpu_blocks_override`` replaces the block count (``v1/core/kv_cache_planning.py``).

Each non-KV term carries a source label: "measured (H200)" (capsim/calibration/data/
h200_memory_terms.csv, exact configuration), "from log" (a user's vLLM log), "pinned"
or "modelled" (the shape estimates below). Version-dependent rules: ``vllm_versions.py``.

Per GPU (every rank sizes its own pool; the engine takes the minimum, and all ranks are
alike under TP, so one rank is planned)::

    budget_bytes    = ceil(gmu * total_memory_bytes)                      (s1.2)
    kv_budget_bytes = budget - weights - activation_peak - runner_buffers
                      - non_torch - cudagraph_bytes (vLLM >= 0.21)          (s1.5)
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
from collections.abc import Callable
from dataclasses import dataclass, field

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import GpuSpec
from capsim.memory.treewy_pending import pending_bytes_per_request
from capsim.memory.weights import kv_heads_per_rank, padded_vocab, weight_breakdown_bytes
from capsim.models import ModelSpec
from capsim.units import GiB, MiB, cdiv, dtype_bytes
from capsim.vllm_rules import VllmRules, rules_for

# vLLM's floor per additional captured graph in profile_cudagraph_memory (VLLM.md s1.4).
CUDAGRAPH_PER_GRAPH_FLOOR_BYTES: int = 1 * MiB

# A measured-term lookup: (term, model, tp, value on the term's axis) -> bytes or None.
# capsim.memory.term_lookup.measured_term (the H200 table) is the default.
TermLookup = Callable[[str, str, int, int], "int | None"]

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
    weights_bytes: int
    weights_breakdown_bytes: dict[str, int] = field(repr=False)
    activation_peak_bytes: int
    activation_parts_bytes: dict[str, int] = field(repr=False)
    runner_buffers_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    cudagraph_capture_max: int
    cudagraph_piecewise_graphs: int
    cudagraph_full_graphs: int
    term_sources: dict[str, str] = field(repr=False)
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
    pending_bytes_per_request: int
    pending_blocks_per_request: int
    gdn_blocks_per_request: int
    lookahead_tok: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    multimodal: bool

    def attn_blocks_for(self, num_tok: int) -> int:
        """Attention blocks (all attention groups) holding ``num_tok`` tokens."""
        return self.num_attn_groups * cdiv(min(num_tok, self.max_model_len), self.block_size_tok)

    def blocks_per_request(self, context_tok: int) -> int:
        """Blocks one running request of ``context_tok`` tokens holds (with lookahead)."""
        return self.attn_blocks_for(context_tok + self.lookahead_tok) + self.gdn_blocks_per_request

    def max_concurrency(self, context_tok: int) -> int:
        """Requests of ``context_tok`` tokens the pool holds at once (analytical capacity)."""
        return self.usable_blocks // self.blocks_per_request(context_tok)

    def vllm_kv_cache_tokens(self) -> int:
        """vLLM's logged "GPU KV cache size: N tokens" (``get_max_concurrency_for_kv_cache_
        config`` times max_model_len; one request = attention blocks at max_model_len plus
        ``1 + num_speculative_blocks`` pages per GDN group, no lookahead)."""
        per_req = self.num_attn_groups * cdiv(self.max_model_len, self.block_size_tok)
        per_req += self.num_gdn_groups * self.gdn_slots_per_group
        return int(self.num_blocks / per_req * self.max_model_len)


def block_size_and_page(
    model: ModelSpec, engine: EngineConfig, spec: SpecDecodeConfig
) -> tuple[int, int, int, int, int]:
    """(block_size_tok, page_bytes, attn_bytes_per_tok, conv_bytes, ssm_bytes) per layer."""
    tp = engine.tp
    attn_per_tok = (
        kv_heads_per_rank(model, tp) * model.head_dim * 2 * dtype_bytes(engine.kv_cache_dtype)
    )
    # kernel_align = max(backend minimum, --block-size) (Platform.update_block_size_for_backend)
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
    if engine.enable_prefix_caching:
        # mamba_cache_mode "align": LCM with the FlashInfer GDN prefill checkpoint (64).
        align = math.lcm(align, 64)
    block = align * cdiv(conv_bytes + ssm_bytes, align * attn_per_tok)
    return block, block * attn_per_tok, attn_per_tok, conv_bytes, ssm_bytes


def group_layout(num_attn: int, num_gdn: int) -> tuple[int, int, int, int]:
    """(group_size, num_attn_groups, num_gdn_groups, gdn_padding_layers), VLLM.md s2.4."""
    sizes = [n for n in (num_attn, num_gdn) if n > 0]
    lo, hi = min(sizes), max(sizes)
    group_size = hi if hi < 1.5 * lo else lo
    num_attn_groups = cdiv(num_attn, group_size) if num_attn else 0
    num_gdn_groups = cdiv(num_gdn, group_size) if num_gdn else 0
    padding = num_gdn_groups * group_size - num_gdn if num_gdn else 0
    return group_size, num_attn_groups, num_gdn_groups, padding


def capture_sizes(max_size: int) -> list[int]:
    """vLLM's default CUDA-graph capture sizes up to ``max_size``: 1, 2, 4, then steps of 8
    up to 256, then steps of 16."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size]


def graph_descs(
    max_num_seqs: int, query_len: int, ceiling: int, max_num_batched_tokens: int
) -> tuple[list[int], list[int]]:
    """(PIECEWISE sizes, FULL decode sizes) vLLM captures by default.

    ``config/vllm.py:VllmConfig._set_cudagraph_sizes`` (0.33): the largest size is
    ``min(max_num_seqs * query_len * 2, ceiling, max_num_batched_tokens)``; the token grid
    ``capture_sizes`` up to it, plus, with drafts (query_len > 1), the uniform-decode sizes
    ``n * query_len`` for the request-count grid of ``max_num_seqs`` (or ``max_num_seqs``
    itself without drafts). PIECEWISE graphs cover every size, FULL graphs (mode
    FULL_AND_PIECEWISE, the default) the uniform decode batches up to ``max_num_seqs``
    requests. Backends that cannot run FULL graphs with drafts fall back to PIECEWISE only
    (vLLM logs it); capsim counts both modes.
    """
    cap = min(max_num_seqs * query_len * 2, ceiling)
    reqs = min(max_num_seqs, ceiling)
    counts = sorted(
        {n for n in (1, 2, 4) if n <= reqs}
        | set(range(8, min(reqs + 1, 256), 8))
        | set(range(256, reqs + 1, 16))
        | {reqs}
    )
    if query_len > 1:
        uniform = {n * query_len for n in counts if n * query_len <= cap}
    else:
        uniform = {max_num_seqs} if max_num_seqs <= cap else set()
    cap = min(cap, max_num_batched_tokens)
    sizes = sorted((set(capture_sizes(cap)) | uniform) - {s for s in uniform if s > cap})
    full = [s for s in sizes if s <= max_num_seqs * query_len and s % query_len == 0]
    return sizes, full


def forward_parts_bytes(model: ModelSpec, tp: int, num_tok: int) -> dict[str, int]:
    """Live tensors of one forward over ``num_tok`` tokens (bf16 activations), by part.

    ``stream``: residual + hidden stream. The largest per-layer intermediate is one of
    ``gdn`` (qkvz/ba projection output, conv output, core output), ``moe`` (vLLM's
    fused_moe caches: [T, topk, 2I], [T*topk, I], [T, topk, H]; the dense MLP otherwise)
    and ``attention`` (q/k/v projections). Estimates from tensor shapes; ``plan_memory``
    replaces ``gdn`` and ``moe`` by H200 measurements where the table has them.
    """
    b = dtype_bytes(model.weight_dtype)
    h = model.hidden_size
    hk, hv = model.linear_num_key_heads, model.linear_num_value_heads
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    gdn = num_tok * ((2 * hk * dk + 2 * hv * dv + 2 * hv) // tp + model.conv_dim // tp) * b
    gdn += num_tok * (hv * dv // tp) * b
    if model.num_experts:
        inter, k = model.moe_intermediate_size // tp, model.num_experts_per_tok
        ffn = num_tok * k * (2 * inter + inter + h) * b
    else:
        ffn = num_tok * 3 * (model.dense_intermediate_size // tp) * b
    q_out = model.num_attention_heads * model.head_dim * (2 if model.attn_output_gate else 1)
    attn = num_tok * (q_out // tp + 2 * kv_heads_per_rank(model, tp) * model.head_dim) * b
    return {
        "stream": 2 * num_tok * h * b,
        "gdn": gdn if model.is_hybrid else 0,
        "moe": ffn,
        "attention": attn,
    }


def forward_activation_bytes(model: ModelSpec, tp: int, num_tok: int) -> int:
    """Peak of one forward: the stream plus the largest per-layer intermediate."""
    p = forward_parts_bytes(model, tp, num_tok)
    return p["stream"] + max(p["gdn"], p["moe"], p["attention"])


def sampler_peak_bytes(model: ModelSpec, num_reqs: int) -> int:
    """Peak of ``GPUModelRunner._dummy_sampler_run`` over ``num_reqs`` rows.

    vLLM 0.33 (``v1/sample/sampler.py:Sampler.forward``, ``ops/topk_topp_sampler.py``):
    ``compute_logits`` returns [rows, padded vocab] in the model dtype (held by the
    caller), ``Sampler.forward`` makes an fp32 copy, top-k/top-p masks it in place (the
    Triton kernel), then the second, generator-seeded call takes ``forward_native``:
    ``softmax`` -> fp32 probs and ``empty_exponential_noise_like`` -> fp32 q (divided in
    place). Live at the peak: logits + fp32 logits + probs + q.
    """
    b = dtype_bytes(model.weight_dtype)
    return num_reqs * (padded_vocab(model) * b + 3 * model.vocab_size * 4)


def encoder_profile_bytes(
    model: ModelSpec, tp: int, max_num_batched_tokens: int
) -> tuple[int, int]:
    """(encoder_cache_bytes, vision_forward_peak_bytes) of profile_run's multimodal pass.

    vLLM profiles ``max_items = max(encoder_budget // max_tok, 1)`` images of the largest
    size, where ``encoder_budget = max(max_num_batched_tokens, max_tok)``
    (``compute_mm_encoder_budget``), and keeps their outputs ([tokens, out_hidden *
    (1 + deepstack)] bf16) in ``encoder_cache`` during the decoder forward. The vision
    forward peak is estimated from shapes: per patch, the residual stream, the qkv output
    and the MLP hidden of one block (bf16, split by tp), as for the decoder.
    """
    v = model.vision
    if v is None:
        return 0, 0
    b = dtype_bytes(model.weight_dtype)
    max_tok = v.max_tokens_per_image
    items = max(max(max_num_batched_tokens, max_tok) // max_tok, 1)
    tokens = items * max_tok
    cache = tokens * v.out_hidden_size * (1 + v.num_deepstack) * b
    patches = tokens * v.spatial_merge_size**2
    per_patch = 2 * v.hidden_size + max(3 * v.hidden_size, v.intermediate_size) // tp
    return cache, patches * per_patch * b


def _default_lookup() -> TermLookup:
    from capsim.memory.term_lookup import measured_term

    return measured_term


def plan_memory(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: EngineConfig,
    spec: SpecDecodeConfig,
    *,
    log_terms: dict[str, int] | None = None,
    lookup: TermLookup | None = None,
) -> MemoryPlan:
    """Size the KV/state pool; raises ValueError for configs vLLM would refuse to start.

    ``log_terms`` (bytes by ``NON_KV_TERMS`` name) replace capsim's value of a term
    ("from log"); ``lookup`` finds measured terms (default: the H200 table).
    """
    rules: VllmRules = rules_for(engine.vllm_version)
    lookup = lookup or _default_lookup()
    log_terms = log_terms or {}
    tp = engine.tp
    max_num_seqs, max_batched = engine.resolved_batch_defaults(gpu)
    max_model_len = engine.check_vllm_limits(gpu, model.max_position_embeddings)
    with_mtp = spec.depth > 0
    multimodal = model.vision is not None and engine.limit_mm_per_prompt != 0
    breakdown = weight_breakdown_bytes(model, tp, with_mtp=with_mtp, with_vision=multimodal)
    sources: dict[str, str] = {}

    def pick(term: str, modelled: int, measured_key: tuple[str, int] | None) -> int:
        if term in log_terms:
            sources[term] = "from log"
            return int(log_terms[term])
        if measured_key is not None:
            got = lookup(measured_key[0], model.name, tp, measured_key[1])
            if got is not None:
                sources[term] = "measured (H200)"
                return int(got)
        sources[term] = "modelled"
        return int(modelled)

    weights = pick("weights", sum(breakdown.values()), None)
    budget = math.ceil(engine.gmu * gpu.total_memory_bytes)

    # Activation peak of profile_run: the encoder pass (outputs kept), one forward over
    # max_num_batched_tokens, and the dummy sampler over max_num_seqs fp32 logit rows.
    # Measured parts (H200 table, exact model and tp, within the measured range) replace
    # the shape estimates: moe_workspace at max_num_batched_tokens, sampler_dummy_run at
    # max_num_seqs.
    enc_cache, enc_forward = encoder_profile_bytes(model, tp, max_batched) if multimodal else (0, 0)
    fwd = forward_parts_bytes(model, tp, max_batched)
    measured_parts: list[str] = []
    # Not gdn_prefill_transient: vLLM's profile run never reaches the chunk kernel
    # (_forward_core returns while attn_metadata is None; kernels/MEMORY_TERMS.md), so the
    # chunk scratch is a serving-time transient, not part of the profiled peak.
    for part, term, x in (("moe", "moe_workspace", max_batched),):
        got = lookup(term, model.name, tp, x) if fwd[part] else None
        if got is not None:
            fwd[part] = int(got)
            measured_parts.append(part)
    forward = fwd["stream"] + max(fwd["gdn"], fwd["moe"], fwd["attention"])
    num_reqs = min(max_num_seqs, max_batched)
    sampler = sampler_peak_bytes(model, num_reqs)
    got = lookup("sampler_dummy_run", model.name, tp, num_reqs)
    if got is not None:
        sampler = int(got)
        measured_parts.append("sampler")
    parts = {
        "forward": forward,
        **{f"forward.{k}": v for k, v in fwd.items()},
        "sampler": sampler,
        "encoder_cache": enc_cache,
        "encoder_forward": enc_forward,
    }
    modelled_peak = max(enc_forward, enc_cache + max(forward, sampler))
    if "activation_peak" in log_terms:
        activation = int(log_terms["activation_peak"])
        sources["activation_peak"] = "from log"
    else:
        activation = modelled_peak
        top = (
            "sampler"
            if sampler >= forward
            else max(("gdn", "moe", "attention"), key=lambda k: fwd[k])
        )
        if top in measured_parts:
            sources["activation_peak"] = f"measured (H200): {top}" + (
                f"; also measured: {', '.join(p for p in measured_parts if p != top)}"
                if len(measured_parts) > 1
                else ""
            )
        else:
            sources["activation_peak"] = "modelled" + (
                f" (measured: {', '.join(measured_parts)}; the peak is {top})"
                if measured_parts
                else ""
            )
    # Persistent runner buffers: input ids/positions (int64) and hidden-state staging.
    runner = max_batched * (2 * 8 + 2 * model.hidden_size * dtype_bytes(model.weight_dtype))
    sources["runner_buffers"] = "modelled"
    if gpu.non_torch_bytes is not None:
        base_nt, tp_nt = gpu.non_torch_bytes
        non_torch = pick("non_torch", base_nt + (tp_nt if tp > 1 else 0), None)
        if sources["non_torch"] == "modelled":
            sources["non_torch"] = f"from logs ({gpu.name} registry, vLLM 0.19 H100 rows)"
    else:
        non_torch = pick("non_torch", 0, None)
        if sources["non_torch"] == "modelled":
            sources["non_torch"] = "not modelled (0): no log for this GPU"
    # CUDA graphs (profile_cudagraph_memory): the pool keeps the intermediates of the
    # largest captured batch plus vLLM's 1 MiB floor for every further graph.
    # profile_cudagraph_memory: max over modes of the first (largest) capture, plus each
    # mode's further graphs at max(second capture, 1 MiB); the first capture holds the
    # intermediates of a forward at the largest size.
    sizes: list[int] = []
    full: list[int] = []
    if not engine.enforce_eager:
        sizes, full = graph_descs(
            max_num_seqs, spec.window_tok, rules.capture_ceiling(gpu), max_batched
        )
    cap_max = max(sizes, default=0)
    modelled_cg = (
        forward_activation_bytes(model, tp, cap_max)
        + (max(len(sizes) - 1, 0) + max(len(full) - 1, 0)) * CUDAGRAPH_PER_GRAPH_FLOOR_BYTES
        if sizes
        else 0
    )
    charge_cg = (
        rules.charge_cudagraph_memory
        if engine.subtract_cudagraph_memory is None
        else engine.subtract_cudagraph_memory
    )
    cudagraph = pick(
        "cudagraph", modelled_cg, ("cudagraph_pool_vllm_estimate", cap_max) if sizes else None
    )
    if sources["cudagraph"].startswith("measured"):
        sources["cudagraph"] += " (full graphs of a stand-in decode step; piecewise not counted)"
    if not charge_cg and "cudagraph" not in log_terms:
        cudagraph, sources["cudagraph"] = 0, f"not charged (vLLM {rules.label})"
    elif (
        rules.gdn_capture_transient
        and model.is_hybrid
        and sizes
        and sources["cudagraph"].startswith(("modelled", "measured"))
    ):
        sources["cudagraph"] += "; GDN capture transient (vllm #50780) not modelled"
    if engine.kv_cache_memory_bytes is not None:
        kv_budget = engine.kv_cache_memory_bytes
        sources["kv_cache_memory"] = "pinned"
    else:
        kv_budget = budget - weights - activation - runner - non_torch - cudagraph

    block, page, attn_per_tok, conv_b, ssm_b = block_size_and_page(model, engine, spec)
    num_attn = model.num_attn_layers + (model.num_mtp_layers if with_mtp else 0)
    group_size, n_attn_groups, n_gdn_groups, padding = group_layout(num_attn, model.num_gdn_layers)
    bytes_per_block = group_size * page
    if engine.num_gpu_blocks_override is not None:
        num_blocks = engine.num_gpu_blocks_override
    else:
        if kv_budget < 2 * bytes_per_block:
            raise ValueError(
                f"engine.gmu={engine.gmu}: budget {budget / GiB:.2f} GiB on {gpu.name} cannot "
                f"hold weights {weights / GiB:.2f} GiB + activations {activation / GiB:.2f} GiB "
                f"+ buffers {runner / GiB:.2f} GiB + CUDA graphs "
                f"{cudagraph / GiB:.2f} GiB and a KV pool "
                f"(left: {kv_budget / GiB:.2f} GiB, one block is {bytes_per_block / MiB:.2f} MiB)"
                f" for {model.name} at tp={tp}"
            )
        num_blocks = kv_budget // bytes_per_block
    gdn_slots = spec.state_slots_per_group if model.is_hybrid else 0
    pending = pending_bytes_per_request(model, tp, spec)
    pending_blocks = cdiv(pending, bytes_per_block) if pending else 0
    mamba_unpadded = conv_b + ssm_b
    plan = MemoryPlan(
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        gmu=engine.gmu,
        vllm_version=rules.label,
        total_memory_bytes=gpu.total_memory_bytes,
        budget_bytes=budget,
        weights_bytes=weights,
        weights_breakdown_bytes=breakdown,
        activation_peak_bytes=activation,
        activation_parts_bytes=parts,
        runner_buffers_bytes=runner,
        non_torch_bytes=non_torch,
        cudagraph_bytes=cudagraph,
        cudagraph_capture_max=cap_max,
        cudagraph_piecewise_graphs=len(sizes),
        cudagraph_full_graphs=len(full),
        term_sources=sources,
        kv_budget_bytes=int(kv_budget),
        kv_cache_memory_pinned=engine.kv_cache_memory_bytes is not None,
        kv_heads_per_rank=kv_heads_per_rank(model, tp),
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
        pending_bytes_per_request=pending,
        pending_blocks_per_request=pending_blocks,
        gdn_blocks_per_request=n_gdn_groups * gdn_slots + pending_blocks,
        lookahead_tok=spec.num_draft_nodes,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
        multimodal=multimodal,
    )
    # vLLM's _check_enough_kv_cache_memory: one max_model_len request must fit at startup.
    if engine.num_gpu_blocks_override is None and plan.blocks_per_request(max_model_len) > (
        plan.usable_blocks
    ):
        raise ValueError(
            f"engine.max_model_len={max_model_len}: one request of that length needs "
            f"{plan.blocks_per_request(max_model_len)} blocks but the pool has "
            f"{plan.usable_blocks} usable at gmu={engine.gmu}; raise gmu or lower max_model_len"
        )
    return plan
