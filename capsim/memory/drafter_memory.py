"""An external drafter's share of the start-up budget and of the KV pool (vLLM 0.27.1).

What vLLM does with a ``DrafterSpec`` (capsim/drafter.py), per rank; paths are relative to the
0.27.1 ``vllm/`` package, ``backport`` is club-3090's vendored PR #52816 patch
(noonghunna/club-3090 models/qwen3.8-27b/vllm/patches/vllm-dflash2-backport at ea24343d):

- **Weights** (``drafter_weight_parts``), inside "Model loading took X GiB" (V2 runner
  ``load_model`` loads the speculator's model in the target's ``DeviceMemoryProfiler``):
  the decoder layers' linears TP-sharded (``QKVParallelLinear`` with ``max(1, kv // tp)`` KV
  heads, ``RowParallelLinear``, ``Qwen2MLP``); ``fc`` replicated (``ReplicatedLinear``);
  the fused context-KV copy ``_fused_kv_weight`` (``torch.cat`` of every layer's K/V rows,
  dense in the model dtype: ``qwen3_dflash.py:_build_context_kv_buffers``, dequantized from
  W4A16 by the backport's ``_dense_kv_rows``); one RoPE cache of ``max_position x head_dim``
  (``get_rope``); DFlash2's convolutions and candidate selector replicated and unquantized
  (backport ``qwen3_dflash2.py``). The drafter's own embedding and lm_head are deleted and
  replaced by the target's (``spec_decode/dflash/utils.py:load_dflash_model``), and
  ``memory_profiling`` empties the allocator cache before it measures (``utils/mem_utils.py``):
  not charged.
- **Speculator buffers** (``speculator_buffer_bytes``), allocated in the runner's
  ``__init__`` like the runner's own (charged with them since 0.27.0):
  ``DFlashSpeculator.hidden_states`` [max_num_batched_tokens, hidden] and, with a candidate
  selector, ``DFlash2Speculator.draft_logits`` fp32 [max_num_seqs, k, vocab].
- **Profile transient** (``propose_transient_bytes``): the V2 ``_dummy_run`` runs
  ``speculator.propose`` over the same max_num_batched_tokens rows; ``propose`` concatenates
  the target's tapped hidden states (``torch.cat(aux_hidden_states, -1)``) and projects
  them with ``fc`` while the taps are still held (``dflash/speculator.py``).
- **KV layers**: one attention spec per drafter layer (``SlidingWindowSpec`` when the layer
  has a window), its own bucket in ``_get_kv_cache_groups_uniform_page_size``
  (``v1/core/kv_cache_utils.py``); a sliding-window group holds at most
  ``cdiv(min(window - 1 + max_in_flight_tokens, max_model_len), block) + 1`` blocks per
  request (``kv_cache_interface.py:SlidingWindowSpec.max_admission_blocks_per_request``),
  ``max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens``, 2 batches with
  async scheduling at pp 1 (``config/vllm.py:max_concurrent_batches``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.drafter import DRAFTER_WEIGHT_BYTES, DrafterSpec
from capsim.memory.weights import kv_heads_per_rank
from capsim.models import ModelSpec
from capsim.units import cdiv, dtype_bytes

if TYPE_CHECKING:
    from capsim.memory.terms import PlanInputs

# vLLM builds a sliding-window layer at the backend's smallest kernel block and lets
# ``unify_kv_cache_spec_page_size`` scale it up by the integer page ratio; when the ratio is
# not an integer the page is padded instead and the block stays at that size
# (syv-ai/qwen38-27b-rtx3090 docs/gotchas.md item 32, reading
# model_executor/layers/attention/attention.py ``_largest_kernel_block_within``).
SLIDING_WINDOW_KERNEL_BLOCK_TOK: int = 16


def drafter_kv_heads_per_rank(d: DrafterSpec, tp: int) -> int:
    """``DFlashQwen3Attention``: ``max(1, total_kv_heads // tp)``."""
    return max(1, d.num_kv_heads // tp)


def _check_tp(d: DrafterSpec, tp: int) -> None:
    if d.num_attention_heads % tp:
        raise ValueError(
            f"engine.tp={tp}: drafter {d.name} num_attention_heads={d.num_attention_heads} "
            "not divisible (vLLM asserts it in DFlashQwen3Attention)"
        )


def drafter_weight_parts(d: DrafterSpec, tp: int) -> dict[str, int]:
    """Weight bytes of the drafter on one rank, by component (see the module docstring)."""
    _check_tp(d, tp)
    b = dtype_bytes(d.weight_dtype)
    qb = DRAFTER_WEIGHT_BYTES[d.linear_format] or float(b)
    h, hd = d.hidden_size, d.head_dim
    kv_rank = drafter_kv_heads_per_rank(d, tp)
    q_rank = d.num_attention_heads // tp * hd
    qkv = h * (q_rank + 2 * kv_rank * hd)
    o = q_rank * h
    mlp = 3 * h * d.intermediate_size // tp
    fc = d.fc_input_size * h
    parts = {
        "layers.linears": round(d.num_layers * (qkv + o + mlp) * qb),
        "fc": round(fc * (qb if d.fc_quantized else b)),
        "norms": (d.num_layers * (2 * h + 2 * hd) + 3 * h) * b,  # + hidden_norm, norm, mask
        "fused_context_kv": d.num_layers * 2 * kv_rank * hd * h * b,
        "rotary_cache": d.max_position_embeddings * hd * b,
        "convs": 0,
        "selector": 0,
    }
    if d.conv_kernel_size:
        groups = h // d.conv_group_size
        per_conv = h * 2 * d.conv_kernel_size * groups + 2 * d.conv_kernel_size * h
        parts["convs"] = d.num_layers * 2 * per_conv * b  # attention_conv and mlp_conv
    if d.selector_rank:
        parts["selector"] = (2 * d.vocab_size * d.selector_rank + h * d.selector_rank) * b
    return parts


def checkpoint_bytes(d: DrafterSpec) -> int:
    """The checkpoint's tensors (TP 1, without the runtime copies): a check of the shapes
    against the published size."""
    parts = drafter_weight_parts(d, 1)
    return sum(parts.values()) - parts["fused_context_kv"] - parts["rotary_cache"]


def speculator_buffer_bytes(d: DrafterSpec, *, max_num_seqs: int, mnbt: int, k: int) -> int:
    """Persistent speculator buffers of more than a few KiB (see the module docstring)."""
    hidden = mnbt * d.hidden_size * dtype_bytes(d.weight_dtype)
    logits = max_num_seqs * k * d.vocab_size * 4 if d.selector_rank else 0
    return hidden + logits


def propose_transient_bytes(d: DrafterSpec, mnbt: int) -> int:
    """The dummy ``propose``'s peak: the held taps, their concatenation and ``fc``'s output."""
    b = dtype_bytes(d.weight_dtype)
    taps = mnbt * d.fc_input_size * b
    return 2 * taps + mnbt * d.hidden_size * b


def drafter_attn_bytes_per_tok(d: DrafterSpec, tp: int, kv_dtype: str) -> int:
    return drafter_kv_heads_per_rank(d, tp) * d.head_dim * 2 * dtype_bytes(kv_dtype)


def drafter_block_tok(d: DrafterSpec, tp: int, kv_dtype: str, page_bytes: int) -> int:
    """Tokens per block of a drafter layer once its page is unified with the pool's page."""
    per_tok = drafter_attn_bytes_per_tok(d, tp, kv_dtype)
    if page_bytes % (SLIDING_WINDOW_KERNEL_BLOCK_TOK * per_tok) == 0:
        return page_bytes // per_tok
    return SLIDING_WINDOW_KERNEL_BLOCK_TOK


def joins_target_bucket(d: DrafterSpec, tp: int, target_kv_heads_rank: int, head_dim: int) -> bool:
    """A full-attention drafter layer whose spec equals the target's joins its bucket."""
    return (
        d.sliding_window_tok is None
        and drafter_kv_heads_per_rank(d, tp) == target_kv_heads_rank
        and d.head_dim == head_dim
    )


def admission_blocks(
    d: DrafterSpec, *, block_tok: int, in_flight_tok: int, max_model_len: int
) -> int:
    """Blocks one request's sliding-window group holds at most (0: full attention)."""
    if d.sliding_window_tok is None:
        return 0
    num_tok = min(d.sliding_window_tok - 1 + in_flight_tok, max_model_len)
    return cdiv(num_tok, block_tok) + 1


def max_concurrent_batches(*, async_scheduling: bool, v2_runner: bool, pp: int = 1) -> int:
    """``VllmConfig.max_concurrent_batches`` (0.27.1 config/vllm.py)."""
    if async_scheduling and (v2_runner or pp <= 1):
        return pp + 1 if v2_runner else 2
    return pp


def layer_buckets(
    model: ModelSpec, engine: EngineConfig, spec: SpecDecodeConfig
) -> tuple[int, int]:
    """(attention layers, drafter layers in their own bucket): the MTP layer joins the
    target's attention bucket; an external drafter's layers do too only when their spec
    equals the target's (drafter_memory.joins_target_bucket)."""
    num_attn = model.num_attn_layers + (model.num_mtp_layers if spec.uses_mtp else 0)
    d = spec.drafter
    if d is None or not spec.depth:
        return num_attn, 0
    if joins_target_bucket(d, engine.tp, kv_heads_per_rank(model, engine.tp), model.head_dim):
        return num_attn + d.num_layers, 0
    return num_attn, d.num_layers


def draft_layout(p: PlanInputs, page: int, group_size: int, num_draft: int) -> dict[str, int]:
    """The drafter bucket's MemoryPlan fields (drafter_memory.py)."""
    d = p.spec.drafter
    if d is None or not num_draft:
        return {}
    e = p.engine
    block = drafter_block_tok(d, e.tp, e.kv_cache_dtype, page)
    batches = max_concurrent_batches(
        async_scheduling=bool(e.async_scheduling), v2_runner=d.uses_v2_runner
    )
    return {
        "num_draft_layers": num_draft,
        "num_draft_groups": cdiv(num_draft, group_size),
        "draft_block_size_tok": block,
        "draft_admission_blocks": admission_blocks(
            d,
            block_tok=block,
            in_flight_tok=batches * p.max_num_batched_tokens,
            max_model_len=p.max_model_len,
        ),
    }
