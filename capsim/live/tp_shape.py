"""One tensor-parallel rank's shapes as a TP1 config: emulate a TP-N Qwen3.5 MoE on one GPU.

vLLM 0.26.0 splits each Qwen3.5 MoE tensor over the TP ranks as follows (read in the wheel;
every divided count is checked to divide evenly, as vLLM asserts):

- full attention (``models/qwen3_next.py:Qwen3NextAttention``): query heads / tp (the gated q
  is ``QKVParallelLinear`` over ``2 * heads``), KV heads max(1, kv / tp), replicated when
  kv < tp; ``o_proj`` is row-parallel over ``heads * head_dim``; q/k norms over head_dim;
- GDN (``layers/mamba/gdn/qwen_gdn_linear_attn.py:QwenGatedDeltaNetAttention``): ``conv1d``,
  ``in_proj_qkvz`` ([key, key, value, value] dims) and ``in_proj_ba`` column-parallel, so key
  heads / tp and value heads / tp; ``A_log`` and ``dt_bias`` num_v_heads / tp; ``out_proj``
  row-parallel over value_dim; the gated norm over head_v_dim (replicated);
- MoE (``Qwen3NextSparseMoeBlock``, ``fused_moe/config.py`` ``intermediate_size // tp_size``):
  every expert on every rank (no expert parallelism by default), expert intermediate / tp;
  the shared expert (``Qwen2MoeMLP``) intermediate / tp; router and shared-expert gate
  replicated;
- MTP (``qwen3_5_mtp.py``): its decoder layer as the target's; ``fc`` column-parallel.

Hidden size, layer counts, head dims and the vocabulary stay: the emulated TP1 model keeps
the full embedding and lm_head (TP-N logits are gathered to the full vocabulary anyway, so
the sampler sees the same rows x vocab), which makes those two and the MTP ``fc`` N times a
rank's shard. The vision tower is kept whole (its head_dim would not survive a head split).
"""

from __future__ import annotations

from typing import Any

from capsim.models import ModelSpec

# (HF text_config key, how a rank holds it): "split" = key / tp (must divide), "kv" = max(1,
# kv / tp) (vLLM replicates KV heads when there are fewer than tp)
SPLIT_KEYS: tuple[tuple[str, str], ...] = (
    ("num_attention_heads", "split"),
    ("num_key_value_heads", "kv"),
    ("linear_num_key_heads", "split"),
    ("linear_num_value_heads", "split"),
    ("moe_intermediate_size", "split"),
    ("shared_expert_intermediate_size", "split"),
)


def full_text_config(spec: ModelSpec) -> dict[str, Any]:
    """The HF ``text_config`` keys a capsim preset fixes (the shapes vLLM builds from)."""
    if not spec.is_hybrid or not spec.num_experts:
        raise ValueError(f"model={spec.name!r}: a GDN hybrid MoE preset is needed")
    num_layers = spec.num_gdn_layers + spec.num_attn_layers
    if spec.num_gdn_layers % spec.num_attn_layers:
        raise ValueError(
            f"model={spec.name!r}: num_gdn_layers={spec.num_gdn_layers} is not a multiple "
            f"of num_attn_layers={spec.num_attn_layers} (no full_attention_interval)"
        )
    interval = num_layers // spec.num_attn_layers
    layer_types = [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention"
        for i in range(num_layers)
    ]
    return {
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": num_layers,
        "layer_types": layer_types,
        "full_attention_interval": interval,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "linear_num_key_heads": spec.linear_num_key_heads,
        "linear_num_value_heads": spec.linear_num_value_heads,
        "linear_key_head_dim": spec.linear_key_head_dim,
        "linear_value_head_dim": spec.linear_value_head_dim,
        "linear_conv_kernel_dim": spec.linear_conv_kernel_dim,
        "num_experts": spec.num_experts,
        "num_experts_per_tok": spec.num_experts_per_tok,
        "moe_intermediate_size": spec.moe_intermediate_size,
        "shared_expert_intermediate_size": spec.shared_expert_intermediate_size,
        "vocab_size": spec.vocab_size,
        "mtp_num_hidden_layers": spec.num_mtp_layers,
        "max_position_embeddings": spec.max_position_embeddings,
    }


def per_rank_text_config(text: dict[str, Any], tp: int) -> dict[str, Any]:
    """``text`` with every TP-split count as one rank of ``tp`` holds it (see module doc)."""
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp={tp!r} must be an int >= 1")
    out = dict(text)
    for key, how in SPLIT_KEYS:
        value = text.get(key)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"text_config.{key}={value!r} must be a positive int")
        if how == "kv":
            if (value >= tp and value % tp) or (value < tp and tp % value):
                raise ValueError(f"text_config.{key}={value}: vLLM needs it to divide tp={tp}")
            out[key] = max(1, value // tp)
        elif value % tp:
            raise ValueError(f"text_config.{key}={value} is not divisible by tp={tp}")
        else:
            out[key] = value // tp
    return out


def tp_shape_config(base: dict[str, Any], spec: ModelSpec, tp: int) -> dict[str, Any]:
    """A model-dir ``config.json``: ``base`` (a Qwen3.5 MoE one, e.g. the 35B's with its rope
    block and token ids) with ``spec``'s text shapes as one rank of TP ``tp`` holds them and a
    vision tower whose output matches the hidden size."""
    if not isinstance(base.get("text_config"), dict):
        raise ValueError("base config: text_config is missing (a Qwen3.5 config.json is needed)")
    cfg = dict(base)
    cfg["text_config"] = {**base["text_config"], **per_rank_text_config(full_text_config(spec), tp)}
    if isinstance(base.get("vision_config"), dict):
        cfg["vision_config"] = {**base["vision_config"], "out_hidden_size": spec.hidden_size}
    return cfg
