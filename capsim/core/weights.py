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


def weight_breakdown_bytes(model: ModelSpec, tp: int, *, with_mtp: bool) -> dict[str, int]:
    """Weight bytes per GPU by component."""
    b = dtype_bytes(model.weight_dtype)
    vocab_rank = padded_vocab(model) // tp
    embed = vocab_rank * model.hidden_size
    lm_head = 0 if model.tie_word_embeddings else vocab_rank * model.hidden_size
    ffn_dense, ffn_experts = ffn_layer_params(model, tp)
    num_layers = model.num_attn_layers + model.num_gdn_layers
    out = {
        "embedding": embed * b,
        "lm_head": lm_head * b,
        "attention": model.num_attn_layers * attention_layer_params(model, tp) * b,
        "gdn": model.num_gdn_layers * gdn_layer_params(model, tp) * b,
        "ffn_shared_and_router": num_layers * ffn_dense * b,
        "ffn_routed_experts": num_layers * ffn_experts * b,
        "final_norm": model.hidden_size * b,
        "mtp": 0,
    }
    if with_mtp and model.num_mtp_layers:
        fc = 2 * model.hidden_size * model.hidden_size // tp
        per_layer = attention_layer_params(model, tp) + ffn_dense + ffn_experts + fc
        out["mtp"] = model.num_mtp_layers * (per_layer + 3 * model.hidden_size) * b
    return out


def weight_bytes(model: ModelSpec, tp: int, *, with_mtp: bool) -> int:
    return sum(weight_breakdown_bytes(model, tp, with_mtp=with_mtp).values())
