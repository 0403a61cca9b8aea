"""Shape estimates of the activation terms vLLM's profile run measures (bf16 activations).

Moved out of ``memory_plan.py``; ``terms.activation_term`` combines them with the versioned
sampler/rejection rules and the measured H200 parts.
"""

from __future__ import annotations

from capsim.memory.weights import kv_heads_per_rank, padded_vocab
from capsim.models import ModelSpec
from capsim.units import dtype_bytes


def forward_parts_bytes(
    model: ModelSpec, tp: int, num_tok: int, *, triton_experts_shapes: bool = False
) -> dict[str, int]:
    """Live tensors of one forward over ``num_tok`` tokens (bf16 activations), by part.

    ``stream``: residual + hidden stream. The largest per-layer intermediate is one of
    ``gdn`` (qkvz/ba projection output, conv output, core output), ``moe`` (vLLM's
    fused-MoE buffers: ``triton_experts_workspace_bytes`` with ``triton_experts_shapes``
    (release rule ``moe_workspace_triton_shapes``), else the session-1 estimate [T, topk, 2I] +
    [T*topk, I] + [T, topk, H]; the dense MLP otherwise)
    and ``attention`` (q/k/v projections). Estimates from tensor shapes; ``plan_memory``
    replaces ``gdn`` and ``moe`` by H200 measurements where the table has them.
    """
    b = dtype_bytes(model.weight_dtype)
    h = model.hidden_size
    hk, hv = model.linear_num_key_heads, model.linear_num_value_heads
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    gdn = num_tok * ((2 * hk * dk + 2 * hv * dv + 2 * hv) // tp + model.conv_dim // tp) * b
    gdn += num_tok * (hv * dv // tp) * b
    if model.num_experts and triton_experts_shapes:  # release rule moe_workspace_triton_shapes
        ffn = triton_experts_workspace_bytes(model, tp, num_tok)
    elif model.num_experts:  # the session-1 estimate: [T, topk, 2I] + [T*topk, I] + [T, topk, H]
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


def triton_experts_workspace_bytes(model: ModelSpec, tp: int, num_tok: int) -> int:
    """vLLM's fused-MoE workspace for ``num_tok`` tokens (the default unquantized CUDA backend,
    TritonExperts), as its source sizes it: ``TritonExperts.workspace_shapes``
    (0.26.0 ``model_executor/layers/fused_moe/experts/triton_moe.py:181-195``) gives
    workspace1 [M, topk, max(N/2, K)] (N = 2I, the w13 output width; N/2 after SiLU-and-mul,
    ``modular_kernel.py:adjust_N_for_activation``), workspace2 [M, topk, max(N, K)] and the
    output [M, K] (K = hidden); ``FusedMoEKernelModularImpl._allocate_buffers``
    (``modular_kernel.py:1051-1112``) puts workspace1 and the output in one common buffer of
    max(both) elements and takes it with workspace2 from the worker's ``WorkspaceManager``
    (``get_simultaneous``), in the activation dtype, with M = all tokens (one chunk). The same
    shapes in 0.33.0 (``kernels/bench/memory/terms_moe.py:vllm_moe_workspace_elems``, measured
    on the H200 within 1 MiB of alignment buffers, ``h200_memory_terms.csv``). Used from 0.26.0
    (release rule ``moe_workspace_triton_shapes``) in place of the session-1 estimate
    T x topk x (3I + H), which is close for the 35B at TP1 (I = 512, H = 2048: 0.50 vs 0.44
    GiB at 8192 tokens; its H200 rows use the measured 0.50 either way) but half where H >> I: one TP8 rank of the 397B (I = 128,
    H = 4096) holds 1.25 GiB at 8192 tokens (0.68 before), which the emulated start-up
    h200-397btp8shape-g090-k3-s14call44 logs (peak activation 8.9 GiB; prereg_s14.md declared
    this rule before the call)."""
    b = dtype_bytes(model.weight_dtype)
    n, k, topk = 2 * (model.moe_intermediate_size // tp), model.hidden_size, model.num_experts_per_tok
    common = max(num_tok * topk * max(n // 2, k), num_tok * k)
    ws2 = num_tok * topk * max(n, k)
    return (common + ws2) * b


def forward_activation_bytes(model: ModelSpec, tp: int, num_tok: int) -> int:
    """Peak of one forward: the stream plus the largest per-layer intermediate."""
    p = forward_parts_bytes(model, tp, num_tok)
    return p["stream"] + max(p["gdn"], p["moe"], p["attention"])


def captured_forward_bytes(model: ModelSpec, tp: int, num_tok: int) -> int:
    """What a CUDA-graph capture of one forward over ``num_tok`` tokens allocates anew: the
    forward's peak less vLLM's fused-MoE caches. The modular MoE kernel's ``_allocate_buffers``
    takes workspace13/workspace2 and the output from the worker's ``WorkspaceManager``
    (``fused_moe/modular_kernel.py`` and ``v1/worker/workspace.py`` in 0.14.0-0.33.0; 0.19.0:
    ``FusedMoEKernelModularImpl``, which the default CUDA unquantized backend TRITON builds,
    ``fused_moe/oracle/unquantized.py:make_unquantized_moe_kernel``), a
    persistent buffer ``profile_run`` has already grown to ``max_num_batched_tokens`` before
    ``profile_cudagraph_memory`` runs (0.19.0 ``gpu_worker.py:determine_available_memory``), so a
    capture at fewer tokens reuses it. A shared expert's MLP is an ordinary tensor (the dense
    MLP's [T, 2I/tp] + [T, I/tp] at its width)."""
    p = forward_parts_bytes(model, tp, num_tok)
    if not model.num_experts:
        return p["stream"] + max(p["gdn"], p["moe"], p["attention"])
    shared = num_tok * 3 * (model.shared_expert_intermediate_size // tp)
    shared *= dtype_bytes(model.weight_dtype)
    return p["stream"] + max(p["gdn"], shared, p["attention"])


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


# torch.sort over a [rows, vocab] fp32 tensor on the PyTorch-native top-k/top-p path, measured
# on the H200 (experiments/memory_plan/h200/sort_probe_s11.json, torch 2.11.0+cu130, session 11;
# the expectation was written before the probe ran: h200/predictions_s10.md). From 128 rows on
# (PyTorch's segmented radix sort, aten/src/ATen/native/cuda/SortStable.cu) the sequence peaks
# in the sort at 4 (fp32 copy) + 4 (values) + 8 (indices) + 8 (reverse indices) + 4 + 8 (cub's
# key and value buffers) = 36 B per entry: measured 36.00 (vocab 248,320) and 36.02 (151,936)
# at 1024 rows. Below 128 rows another branch runs; measured at 64 rows only: 48.34 / 48.59 B
# per entry (the larger is charged for every row count under 128, not derived).
NATIVE_SORT_MOMENT_B_PER_ENTRY = 36
NATIVE_FEW_ROWS_B_PER_ENTRY = 48.586  # measured, 64 rows, vocab 151,936 (sort_probe_s11.json)
NATIVE_SEGMENTED_SORT_MIN_ROWS = 128


def native_topk_topp_sampler_peak_bytes(model: ModelSpec, num_reqs: int) -> int:
    """Peak of the dummy sampler run on the PyTorch-native top-k/top-p path (V1 without
    FlashInfer, before the Triton kernel; read in 0.9.2 and 0.10.2
    ``v1/sample/sampler.py:Sampler.forward`` and ``ops/topk_topp_sampler.py:apply_top_k_top_p``,
    the dummy run sets top_k = vocab - 1 and top_p = 0.9, so both masks run): the caller's
    model-dtype logits [rows, padded vocab] plus the moment ``torch.sort`` runs on the fp32
    copy ``Sampler.forward`` makes: 36 B per entry from 128 rows on (the sort's own scratch
    included; the later scatter moment holds 26), 48.6 B measured at 64 rows below that
    (``NATIVE_*`` constants above, H200 probe)."""
    b = dtype_bytes(model.weight_dtype)
    if num_reqs >= NATIVE_SEGMENTED_SORT_MIN_ROWS:
        sort_bytes = num_reqs * model.vocab_size * NATIVE_SORT_MOMENT_B_PER_ENTRY
    else:
        sort_bytes = round(num_reqs * model.vocab_size * NATIVE_FEW_ROWS_B_PER_ENTRY)
    return num_reqs * padded_vocab(model) * b + sort_bytes


def triton_topk_buffer_bytes(model: ModelSpec, num_reqs: int, sm_count: int) -> int:
    """The per-program fp32 [rows, vocab] buffer of vLLM's Triton top-k/top-p
    (``v1/sample/ops/topk_topp_triton.py:apply_top_k_top_p_triton``, 0.19.0-0.33.0: used for
    8 or more rows; ``min(next_power_of_2(min(SMs, n)), SMs)`` rows; cached, so it stays)."""
    if num_reqs < 8:
        return 0
    programs = min(sm_count, num_reqs)
    rows = min(1 << (programs - 1).bit_length(), sm_count)
    return rows * model.vocab_size * 4


def sampler_held_bytes(model: ModelSpec, num_reqs: int, max_num_batched_tokens: int) -> int:
    """Tensors ``profile_run`` keeps alive while the dummy sampler runs (0.19.0-0.33.0
    ``v1/worker/gpu_model_runner.py``): the dummy forward's ``hidden_states`` [mnbt, hidden]
    (deleted only after the sampler), its ``last_hidden_states`` [rows, hidden] and the
    ``torch.rand_like`` copy ``_dummy_sampler_run`` feeds to ``compute_logits``."""
    b = dtype_bytes(model.weight_dtype)
    return (max_num_batched_tokens + 2 * num_reqs) * model.hidden_size * b


def _profile_image_patches(model: ModelSpec, max_num_batched_tokens: int) -> tuple[int, int]:
    """(encoder tokens, patches) of the dummy image batch ``profile_run`` encodes: ``max_items
    = max(encoder_budget // max_tok, 1)`` images of the largest size, ``encoder_budget =
    max(max_num_batched_tokens, max_tok)`` (``compute_mm_encoder_budget``)."""
    v = model.vision
    if v is None:
        return 0, 0
    max_tok = v.max_tokens_per_image
    items = max(max(max_num_batched_tokens, max_tok) // max_tok, 1)
    tokens = items * max_tok
    return tokens, tokens * v.spatial_merge_size**2


def held_dummy_pixels_bytes(model: ModelSpec, max_num_batched_tokens: int) -> int:
    """The dummy image batch's ``pixel_values``, alive through the text forward and both
    dummy sampler runs: ``profile_run`` binds ``_get_mm_dummy_batch``'s result to the local
    ``batched_dummy_mm_inputs`` and deletes only ``hidden_states`` and ``output`` before it
    returns (v1/worker/gpu_model_runner.py, the same in 0.20.1, 0.26.0, 0.27.1 and 0.33.0).
    Charged in the model dtype: ``InputProcessingContext.call_hf_processor`` casts every
    floating tensor the HF processor returns to ``model_config.dtype``
    (multimodal/processing/context.py ``_postprocess_output``, 0.19.0-0.33.0; see
    ``vision_bytes_per_patch`` for the vision pass). Read in session
    8, after the H200 max_num_seqs 256 start-ups had been seen (their 2.71 GiB peaks at k = 1,
    3, 5 were 0.25 GiB above capsim's 2.46): a rule from the source, not a fit, but those rows
    no longer predict it blind."""
    v = model.vision
    if v is None:
        return 0
    _, patches = _profile_image_patches(model, max_num_batched_tokens)
    pixels = v.in_channels * v.temporal_patch_size * v.patch_size**2
    return patches * pixels * dtype_bytes(model.weight_dtype)


def encoder_profile_bytes(
    model: ModelSpec, tp: int, max_num_batched_tokens: int
) -> tuple[int, int]:
    """(encoder_cache_bytes, vision_forward_peak_bytes) of profile_run's multimodal pass.

    vLLM profiles ``max_items = max(encoder_budget // max_tok, 1)`` images of the largest
    size, where ``encoder_budget = max(max_num_batched_tokens, max_tok)``
    (``compute_mm_encoder_budget``), and keeps their outputs ([tokens, out_hidden *
    (1 + deepstack)] bf16) in ``encoder_cache`` during the decoder forward. The vision
    forward peak is ``vision_bytes_per_patch`` per patch.
    """
    v = model.vision
    if v is None:
        return 0, 0
    tokens, patches = _profile_image_patches(model, max_num_batched_tokens)
    cache = tokens * v.out_hidden_size * (1 + v.num_deepstack) * dtype_bytes(model.weight_dtype)
    return cache, patches * vision_bytes_per_patch(model, tp)


def vision_bytes_per_patch(model: ModelSpec, tp: int) -> int:
    """Bytes per patch live at the vision tower's peak in ``profile_run`` (read in 0.26.0
    ``v1/worker/gpu_model_runner.py:profile_run/_get_mm_dummy_batch``,
    ``multimodal/processing/context.py:call_hf_processor``, ``model_executor/models/qwen3_vl.py``
    ``_process_image_input``, ``Qwen3_VisionTransformer.forward``, ``Qwen3_VisionBlock`` and
    ``qwen2_5_vl.py:Qwen2_5_VisionAttention.forward``; the same code path in 0.24.0 and 0.27.1,
    which Qwen3.5 / 3.6 / 3.8 use through ``qwen3_5.py``):

    - held for the whole pass: the dummy ``pixel_values``, ``C * T * P * P`` values per patch in
      the model dtype (``call_hf_processor`` casts the processor's floating outputs to
      ``model_config.dtype``, so ``_process_image_input``'s ``.type(self.visual.dtype)`` is a
      no-op; session 4 had read fp32 pixels plus a bf16 copy), ``encoder_metadata["pos_embeds"]``
      [patches, hidden] and the residual stream [patches, hidden];
    - the larger of one block's attention half, live when its output projection runs
      (``norm1(x)`` [hidden]; the qkv projection [3 hidden / tp], which ``x`` still names; the
      contiguous q/k pair and its rotated copy [2 x 2 hidden / tp]; the attention output
      [hidden / tp]; the projection's output [hidden]; at tp > 1 that output's all-reduce,
      which is out of place: ``GroupCoordinator._all_reduce_out_place`` ->
      ``CudaCommunicator.all_reduce`` returns a new tensor on every path, pynccl's
      ``torch.empty_like`` included (distributed/, 0.27.1), so the partial and the reduced
      output [hidden] are live together) and its MLP half (``norm2(x)`` [hidden], fc1 output
      and its activation [2 x intermediate / tp]). Session 4 stopped at the attention output;
      session 8 read the projection and its all-reduce after the two logged vision-pass peaks
      (H200 TP1 1.92 GiB, Qwen3.8-27B TP2 1.46) had been seen: read from the source, but those
      rows no longer predict it blind.
    """
    v = model.vision
    if v is None:
        return 0
    b = dtype_bytes(model.weight_dtype)
    h = v.hidden_size
    pixels = v.in_channels * v.temporal_patch_size * v.patch_size**2
    held = pixels * b + 2 * h * b
    reduced = h if tp > 1 else 0
    attn = (h + (3 * h + 4 * h + h) // tp + h + reduced) * b
    mlp = (h + 2 * v.intermediate_size // tp) * b
    return held + max(attn, mlp)


def rejection_row_vocab_elems(num_reqs: int, vocab: int) -> int:
    """Rows x vocabulary of the rejection-sampler dummy run (``_dummy_sampler_run`` with a
    speculative config, vLLM 0.20.0-0.33.0): one draft per request, ``torch.randn(num_reqs
    + num_drafts, vocab)`` target logits, so ``num_reqs`` rows of ``vocab`` per tensor the
    rejection sampler copies (bonus logits, fp32 target logits and their clone, target
    probabilities, the recovered-token noise)."""
    return num_reqs * vocab


# Bytes per (request row x vocabulary entry) at the rejection sampler's peak. FIT (decided
# before any comparison): the H200 vLLM 0.26.0 start-up, Qwen3.5-35B-A3B, k=3, mnbt 8192,
# max_num_seqs 1024 (../shared/REAL_VLLM_H200.md: "8.05 GiB for peak activation"), minus
# what is held beside it (capsim's encoder cache, 64 MiB for this shape, and the fused-MoE
# workspace vLLM keeps after the forward, 512.3 MiB measured at 8192 tokens in
# kernels/MEMORY_TERMS.md), over 1024 x 248320. Reading the source gives 22 B (2x
# bf16 randn logits, bf16 bonus copy, fp32 target + clone + probs + noise); the fit's extra
# bytes are allocations the reading does not see (Triton top-k/top-p scratch, the bonus
# sampler's fp32 copies, allocator rounding). Every other start-up with
# drafts predicts with it.
# Session 2: the tensors ``sampler_held_bytes`` names (40 MiB for this shape: [8192 + 2 x
# 1024, 2048] bf16) are now charged beside the sampler peaks, so they leave the fit too.
# Session 8: so do the dummy image batch's pixel values (``held_dummy_pixels_bytes``, 192 MiB:
# 65,536 patches x 1,536 bf16 values), which the fit had absorbed: 31.5 -> 30.7 B.
REJECTION_BYTES_PER_ROW_VOCAB: float = (
    8.05 * 1024**3
    - 64 * 1024**2
    - 512.3 * 1024**2
    - (8192 + 2 * 1024) * 2048 * 2
    - 65536 * 1536 * 2
) / (1024 * 248320)
REJECTION_FIT_SOURCE: str = (
    "fit: H200 vLLM 0.26.0 start-up, Qwen3.5-35B-A3B TP1, k=3, mnbt 8192, 1024 seqs "
    "(REAL_VLLM_H200.md: 8.05 GiB peak activation)"
)
