"""Weight bytes per GPU, computed from the model config (no checkpoint needed).

Sharding follows vLLM's tensor-parallel layers: column/row-parallel projections and
experts split by ``tp``; full-attention KV projections keep ``max(1, kv_heads // tp)``
heads per rank (replicated when ``kv_heads < tp``, VLLM.md s7); the vocabulary is padded
to a multiple of 64 (vLLM's ``DEFAULT_VOCAB_PADDING_SIZE``) and split by ``tp``; the router
(gate) is replicated. The MTP draft layer (one full-attention MoE decoder layer plus its
``fc`` and norms) is counted only when speculative decoding is on; it shares the target's
embedding and lm_head (vLLM loads MTP with the target's shared weights).
"""

from __future__ import annotations

from capsim.models import ModelSpec
from capsim.units import cdiv, dtype_bytes

VOCAB_PADDING: int = 64


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """``ModelConfig.get_num_kv_heads``: at least one KV head per rank."""
    return max(1, model.num_kv_heads // tp)


def attention_layer_params(model: ModelSpec, tp: int) -> int:
    q_out = model.num_attention_heads * model.head_dim * (2 if model.attn_output_gate else 1)
    kv_out = kv_heads_per_rank(model, tp) * model.head_dim
    o_in = model.num_attention_heads * model.head_dim
    proj = model.hidden_size * (q_out // tp + 2 * kv_out) + (o_in // tp) * model.hidden_size
    norms = 2 * model.head_dim + 2 * model.hidden_size  # q/k norms, input/post norms
    return proj + norms


def gdn_layer_params(model: ModelSpec, tp: int) -> int:
    hk, hv = model.linear_num_key_heads, model.linear_num_value_heads
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    qkvz = model.hidden_size * (2 * hk * dk + 2 * hv * dv) // tp
    ba = model.hidden_size * 2 * hv // tp
    conv = (model.conv_dim // tp) * model.linear_conv_kernel_dim
    gates = 2 * hv // tp  # A_log, dt_bias
    out = (hv * dv // tp) * model.hidden_size
    norms = dv + 2 * model.hidden_size
    return qkvz + ba + conv + gates + out + norms


def expert_params(model: ModelSpec, tp: int) -> int:
    """One routed expert's gate/up/down weights on one rank."""
    return 3 * model.hidden_size * model.moe_intermediate_size // tp


def ffn_layer_params(model: ModelSpec, tp: int) -> tuple[int, int]:
    """(always-touched params, routed-expert params) of one FFN block on one rank."""
    if model.num_experts == 0:
        return 3 * model.hidden_size * model.dense_intermediate_size // tp, 0
    router = model.hidden_size * model.num_experts
    shared = 3 * model.hidden_size * model.shared_expert_intermediate_size // tp
    shared_gate = model.hidden_size if model.shared_expert_intermediate_size else 0
    return router + shared + shared_gate, model.num_experts * expert_params(model, tp)


def padded_vocab(model: ModelSpec) -> int:
    return cdiv(model.vocab_size, VOCAB_PADDING) * VOCAB_PADDING


# Bytes per weight of a quantized linear layer, scales included:
# fp8: 1 B + one fp32 scale per 128x128 block (Qwen FP8 checkpoints, weight_block_size
# [128, 128]); nvfp4: 0.5 B + one fp8 scale per 16 weights (NVIDIA ModelOpt NVFP4 format);
# awq/gptq int4: 0.5 B + fp16 scale and packed 4-bit zero per group of 128 (AutoAWQ/GPTQ
# default group_size 128).
QUANT_BYTES_PER_PARAM: dict[str, float] = {
    "fp8": 1.0 + 4.0 / (128 * 128),
    "nvfp4": 0.5 + 1.0 / 16,
    "awq": 0.5 + 2.5 / 128,
    "gptq": 0.5 + 2.5 / 128,
}


def gdn_quantizable_params(model: ModelSpec, tp: int) -> int:
    """GDN projection weights a quantized checkpoint stores low-precision (qkvz, out)."""
    hk, hv = model.linear_num_key_heads, model.linear_num_value_heads
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    return (
        model.hidden_size * (2 * hk * dk + 2 * hv * dv) // tp + (hv * dv // tp) * model.hidden_size
    )


def attention_quantizable_params(model: ModelSpec, tp: int) -> int:
    norms = 2 * model.head_dim + 2 * model.hidden_size
    return attention_layer_params(model, tp) - norms


def vision_params(model: ModelSpec, tp: int) -> int:
    """Vision tower weights on one rank (vLLM ``Qwen3_VisionTransformer``; its linears are
    tensor-parallel under the default ``mm_encoder_tp_mode="weights"``)."""
    v = model.vision
    if v is None:
        return 0
    h, i = v.hidden_size, v.intermediate_size
    block = (3 * h * h + 3 * h) // tp + (h * h) // tp + h  # qkv, proj
    block += (h * i + i) // tp + (i * h) // tp + h + 4 * h  # fc1, fc2, two LayerNorms
    patch = v.in_channels * v.temporal_patch_size * v.patch_size**2 * h + h
    merged = h * v.spatial_merge_size**2
    merger = 2 * h + (merged * merged + merged) // tp + (merged * v.out_hidden_size) // tp
    merger += v.out_hidden_size
    deepstack = v.num_deepstack * (2 * merged + (merged * merged + merged) // tp)
    deepstack += v.num_deepstack * ((merged * v.out_hidden_size) // tp + v.out_hidden_size)
    return v.depth * block + patch + v.num_position_embeddings * h + merger + deepstack


# What a quantized GDN-hybrid MoE checkpoint keeps in bf16 when its own ignore list is unknown
# (a log names the method, not the list): the GDN (linear_attn) projections and the shared
# expert, as llm-compressor's Qwen3.5-MoE recipes ignore them ("re:.*linear_attn.*",
# "re:.*mlp\\.shared_expert$"; vllm-project/llm-compressor examples/quantization_w8a8_fp8/
# qwen3_5_moe.py). A cited default, not a fit; a config.json with an ignore list replaces it.
HYBRID_DEFAULT_QUANT_IGNORE: frozenset[str] = frozenset({"gdn", "shared_expert"})


def default_quant_ignore(model: ModelSpec) -> set[str]:
    if (
        model.quantization != "none"
        and model.is_hybrid
        and model.num_experts  # the recipes cited are Qwen3.5-MoE ones; dense hybrids differ
        and model.quant_scope == "linear"
    ):
        return set(HYBRID_DEFAULT_QUANT_IGNORE)
    return set()


def rotary_cache_bytes(model: ModelSpec) -> int:
    """vLLM's RoPE ``cos_sin_cache`` buffer, allocated inside ``load_model`` (so in "Model
    loading took X GiB"): [positions, rotary_dim] in the model dtype, one instance shared by
    every attention layer (``get_rope``'s cache); ``MRotaryEmbedding`` caches 4 x
    max_position_embeddings positions (0.26.0 model_executor/layers/rotary_embedding/
    base.py, mrope.py, __init__.py). Replicated on every TP rank."""
    if not model.num_attn_layers:
        return 0
    rotary_dim = int(model.head_dim * model.partial_rotary_factor)
    positions = model.max_position_embeddings * (4 if model.mrope else 1)
    return positions * rotary_dim * dtype_bytes(model.weight_dtype)


def weight_breakdown_bytes(
    model: ModelSpec, tp: int, *, with_mtp: bool, with_vision: bool = False
) -> dict[str, int]:
    """Weight bytes per GPU by component.

    A mixed-precision checkpoint (``model.quant_formats``, ModelOpt MIXED_PRECISION) stores
    each named component (attention, GDN qkvz/out, shared or dense MLP, routed experts,
    lm_head) in its own format and every other weight in ``weight_dtype``; otherwise:
    a quantized checkpoint (``model.quantization``) stores the attention and GDN
    projections and the expert (routed and shared) weights at ``QUANT_BYTES_PER_PARAM``
    (``quant_scope="experts"``: the expert weights only);
    embeddings, lm_head, norms, the router, the GDN conv/ba/gates, the MTP layer and the
    vision tower stay in ``weight_dtype`` (what Qwen's FP8/NVFP4 checkpoints list as not
    converted; a checkpoint with another ignore list differs).
    """
    b = dtype_bytes(model.weight_dtype)
    qb = QUANT_BYTES_PER_PARAM.get(model.quantization, float(b))
    vocab_rank = padded_vocab(model) // tp
    embed = vocab_rank * model.hidden_size
    lm_head = 0 if model.tie_word_embeddings else vocab_rank * model.hidden_size
    ffn_dense, ffn_experts = ffn_layer_params(model, tp)
    num_layers = model.num_attn_layers + model.num_gdn_layers
    if model.num_experts:
        router = model.hidden_size * model.num_experts
        router += model.hidden_size if model.shared_expert_intermediate_size else 0
    else:
        router = 0
    experts_only = model.quant_scope == "experts"
    keep = set(model.quant_ignore) or default_quant_ignore(model)
    attn_q = 0 if experts_only or "attention" in keep else attention_quantizable_params(model, tp)
    gdn_q = (
        gdn_quantizable_params(model, tp)
        if model.num_gdn_layers and not experts_only and "gdn" not in keep
        else 0
    )
    shared_q = 0 if "shared_expert" in keep else ffn_dense - router
    experts_q = 0 if "experts" in keep else ffn_experts
    lm_q, lm_q_bytes = 0, float(b)
    fmt_bytes = dict.fromkeys(("attention", "gdn", "shared_expert", "experts"), qb)
    if model.quant_formats:  # a mixed-precision checkpoint: each component its own format
        formats = dict(model.quant_formats)
        fmt_bytes = {
            c: QUANT_BYTES_PER_PARAM.get(formats.get(c, "none"), float(b)) for c in fmt_bytes
        }
        attn_q = attention_quantizable_params(model, tp)
        gdn_q = gdn_quantizable_params(model, tp) if model.num_gdn_layers else 0
        shared_q, experts_q = ffn_dense - router, ffn_experts
        lm_q_bytes = QUANT_BYTES_PER_PARAM.get(formats.get("lm_head", "none"), float(b))
        lm_q = lm_head if "lm_head" in formats else 0

    def mixed(total: int, quantized: int, comp: str) -> int:
        return round((total - quantized) * b + quantized * fmt_bytes[comp])

    out = {
        "embedding": embed * b,
        "lm_head": round((lm_head - lm_q) * b + lm_q * lm_q_bytes),
        "attention": model.num_attn_layers
        * mixed(attention_layer_params(model, tp), attn_q, "attention"),
        "gdn": model.num_gdn_layers * mixed(gdn_layer_params(model, tp), gdn_q, "gdn")
        if model.num_gdn_layers
        else 0,
        "ffn_shared_and_router": num_layers * mixed(ffn_dense, shared_q, "shared_expert"),
        "ffn_routed_experts": num_layers * mixed(ffn_experts, experts_q, "experts"),
        "final_norm": model.hidden_size * b,
        "mtp": 0,
        "vision": vision_params(model, tp) * b if with_vision else 0,
        "rotary_cache": rotary_cache_bytes(model),
    }
    if with_mtp and model.num_mtp_layers:
        fc = 2 * model.hidden_size * model.hidden_size // tp
        per_layer = attention_layer_params(model, tp) + ffn_dense + ffn_experts + fc
        out["mtp"] = model.num_mtp_layers * (per_layer + 3 * model.hidden_size) * b
    return out


def weight_bytes(model: ModelSpec, tp: int, *, with_mtp: bool) -> int:
    return sum(weight_breakdown_bytes(model, tp, with_mtp=with_mtp).values())
