"""gpu_memory_utilization -> KV/state pool -> blocks, as vLLM v1 sizes it (VLLM.md s1, s2, s7).

Per GPU (every rank sizes its own pool; the engine takes the minimum, and all ranks are
alike under TP, so one rank is planned)::

    budget_bytes    = ceil(gmu * total_memory_bytes)                      (s1.2)
    kv_budget_bytes = budget - weights - activation_peak - runner_buffers
                      - cudagraph_bytes (vLLM >= 0.21)                     (s1.5)
    num_blocks      = kv_budget_bytes // bytes_per_block                  (s1.6)
    usable_blocks   = num_blocks - 1   (block 0 is the null block)

Page unification (s2.3), prefix caching off (mamba mode "none")::

    attn_bytes_per_tok = kv_heads_per_rank * head_dim * 2 (K and V) * kv_dtype_bytes
    mamba_page  = conv_dim/tp * (K - 1 + num_spec) * conv_bytes + Hv/tp * dv * dk * ssm_bytes
    block_size  = align * cdiv(mamba_page, align * attn_bytes_per_tok)
    page_bytes  = block_size * attn_bytes_per_tok   (the mamba page is padded up to it)

Groups (s2.4): the full-attention bucket (target layers plus the MTP layer when drafting)
and the GDN bucket; ``group_size = max`` if ``max < 1.5 * min`` else ``min``; each bucket
splits into ``cdiv(n, group_size)`` groups, padded to ``group_size`` layers.
``bytes_per_block = group_size * page_bytes`` (s2.5).

Not charged (they sit in the 1 - gmu margin): the CUDA context, NCCL and cuBLAS handles.
Modelled, not measured (documented estimates of the tensors vLLM's profile run holds):
the activation peak, the runner's persistent buffers and the CUDA-graph pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.core.weights import kv_heads_per_rank, padded_vocab, weight_breakdown_bytes
from capsim.gpus import GpuSpec
from capsim.models import ModelSpec
from capsim.units import GiB, MiB, cdiv, dtype_bytes

# vLLM's floor per additional captured graph in profile_cudagraph_memory (VLLM.md s1.4).
CUDAGRAPH_PER_GRAPH_FLOOR_BYTES: int = 1 * MiB


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryPlan:
    """The pool vLLM would build for one deployment, per GPU."""

    model: str
    gpu: str
    tp: int
    gmu: float
    total_memory_bytes: int
    budget_bytes: int
    weights_bytes: int
    weights_breakdown_bytes: dict[str, int] = field(repr=False)
    activation_peak_bytes: int
    runner_buffers_bytes: int
    cudagraph_bytes: int
    kv_budget_bytes: int
    kv_heads_per_rank: int
    attn_bytes_per_tok_per_layer: int
    conv_state_bytes: int
    ssm_state_bytes: int
    mamba_page_unpadded_bytes: int
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
    gdn_blocks_per_request: int
    lookahead_tok: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int

    def attn_blocks_for(self, num_tok: int) -> int:
        """Attention blocks (all attention groups) holding ``num_tok`` tokens."""
        return self.num_attn_groups * cdiv(min(num_tok, self.max_model_len), self.block_size_tok)

    def blocks_per_request(self, context_tok: int) -> int:
        """Blocks one running request of ``context_tok`` tokens holds (with lookahead)."""
        return self.attn_blocks_for(context_tok + self.lookahead_tok) + self.gdn_blocks_per_request

    def max_concurrency(self, context_tok: int) -> int:
        """Requests of ``context_tok`` tokens the pool holds at once (analytical capacity)."""
        return self.usable_blocks // self.blocks_per_request(context_tok)


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


def forward_activation_bytes(model: ModelSpec, tp: int, num_tok: int) -> int:
    """Peak live tensors of one forward over ``num_tok`` tokens (bf16 activations).

    Residual + hidden stream, plus the largest per-layer intermediate:
    GDN (qkvz/ba projection output, conv output, core output), fused MoE workspace
    (vLLM's fused_moe caches: [T, topk, 2I], [T*topk, I], [T, topk, H]) or attention
    (q/k/v projections). An estimate from tensor shapes, not a measurement.
    """
    b = dtype_bytes(model.weight_dtype)
    h = model.hidden_size
    stream = 2 * num_tok * h * b
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
    return stream + max(gdn, ffn, attn)


def plan_memory(
    model: ModelSpec, gpu: GpuSpec, engine: EngineConfig, spec: SpecDecodeConfig
) -> MemoryPlan:
    """Size the KV/state pool; raises ValueError for configs vLLM would refuse to start."""
    tp = engine.tp
    max_num_seqs, max_batched = engine.resolved_batch_defaults(gpu)
    max_model_len = engine.check_vllm_limits(gpu, model.max_position_embeddings)
    with_mtp = spec.depth > 0
    breakdown = weight_breakdown_bytes(model, tp, with_mtp=with_mtp)
    weights = sum(breakdown.values())
    budget = math.ceil(engine.gmu * gpu.total_memory_bytes)

    # Activation peak of the profile run: a forward over max_num_batched_tokens, and the
    # dummy sampler over max_num_seqs rows of fp32 logits (+ probabilities).
    sampler = 2 * max_num_seqs * padded_vocab(model) * 4
    activation = max(forward_activation_bytes(model, tp, max_batched), sampler)
    # Persistent runner buffers: input ids/positions (int64) and hidden-state staging.
    runner = max_batched * (2 * 8 + 2 * model.hidden_size * dtype_bytes(model.weight_dtype))
    # CUDA graphs: the pool keeps the intermediates of the largest captured batch plus
    # vLLM's 1 MiB floor for every further graph (s1.4; FULL and PIECEWISE share a pool).
    is_blackwell = gpu.name.upper().startswith("B")
    cap_max = min(max_num_seqs * spec.window_tok * 2, 1024 if is_blackwell else 512)
    sizes = capture_sizes(cap_max)
    cudagraph = (
        forward_activation_bytes(model, tp, cap_max)
        + (len(sizes) - 1) * CUDAGRAPH_PER_GRAPH_FLOOR_BYTES
    )
    charged_cudagraph = cudagraph if engine.subtract_cudagraph_memory else 0
    kv_budget = budget - weights - activation - runner - charged_cudagraph

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
                f"{charged_cudagraph / GiB:.2f} GiB and a KV pool "
                f"(left: {kv_budget / GiB:.2f} GiB, one block is {bytes_per_block / MiB:.2f} MiB)"
                f" for {model.name} at tp={tp}"
            )
        num_blocks = kv_budget // bytes_per_block
    gdn_slots = spec.state_slots_per_group if model.is_hybrid else 0
    plan = MemoryPlan(
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        gmu=engine.gmu,
        total_memory_bytes=gpu.total_memory_bytes,
        budget_bytes=budget,
        weights_bytes=weights,
        weights_breakdown_bytes=breakdown,
        activation_peak_bytes=activation,
        runner_buffers_bytes=runner,
        cudagraph_bytes=charged_cudagraph,
        kv_budget_bytes=kv_budget,
        kv_heads_per_rank=kv_heads_per_rank(model, tp),
        attn_bytes_per_tok_per_layer=attn_per_tok,
        conv_state_bytes=conv_b,
        ssm_state_bytes=ssm_b,
        mamba_page_unpadded_bytes=conv_b + ssm_b,
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
        gdn_blocks_per_request=n_gdn_groups * gdn_slots,
        lookahead_tok=spec.num_draft_nodes,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
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
