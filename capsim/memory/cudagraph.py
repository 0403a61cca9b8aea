"""vLLM's CUDA-graph memory estimator, reproduced (``GPUModelRunner.profile_cudagraph_memory``).

What vLLM does (read in the 0.20.0, 0.26.0, 0.27.0 and 0.33.0 wheels, model runner V1, which
hybrid GDN models use: 0.26.0 ``config/vllm.py:VllmConfig.use_v2_model_runner`` returns False
for ``is_hybrid`` models):

1. **Capture sizes** (``config/vllm.py:_set_cudagraph_sizes``): the largest size is
   ``min(max_num_seqs * (1 + k) * 2, ceiling)`` (ceiling 512; 1024 on data-centre Blackwell
   since 0.28.0), then capped at ``max_num_batched_tokens``; the grid is 1, 2, 4, steps of 8
   below 256, steps of 16 from 256; ``max_num_batched_tokens`` is added when it fits (since
   0.20.1); since 0.29.0 the uniform-decode sizes ``n * (1 + k)`` of a request-count grid are
   added too. With drafts and FULL decode graphs the sizes are then rounded up to multiples
   of ``1 + k`` (``config/compilation.py:adjust_cudagraph_sizes_for_spec_decode``), which is
   why the H200 start-up at k=3 logs 49 sizes up to 512, not 51.
2. **Modes** (``v1/cudagraph_dispatcher.py:initialize_cudagraph_keys``): mode
   FULL_AND_PIECEWISE (the default for mamba models, ``models/config.py:MambaModelConfig``)
   captures a PIECEWISE graph at every size and a FULL graph at every size with
   ``1 + k <= size <= (1 + k) * max_num_seqs``. A backend without FULL graphs for drafts
   falls back to PIECEWISE only (vLLM warns "... is not supported with spec-decode ...").
3. **Two-graph sampling**: per mode, the two largest descriptors are warmed up and captured
   into a scratch pool; each sample is the drop of the device's free memory. The first
   FULL capture runs with ``profile_seq_lens = min(max_model_len, mnbt // size)`` context
   per request. Per mode ``first + (n - 1) * max(second, 1 MiB)``; FULL and PIECEWISE share
   a pool, so the estimate is ``max(first over modes) + sum over modes of
   (n - 1) * max(second, 1 MiB)`` (plus encoder graphs, off by default).
4. Since 0.26.0 the first FULL capture on GDN hybrids carries a transient (vllm #50780 says it
   grows with ``max_num_batched_tokens``; the H200 start-ups at k=3 log the same estimate at
   mnbt 8192 and 16384); capsim sizes it from the H200 start-ups in two fitted parts, one at
   k=0 (``GDN_TRANSIENT_K0_FIT_BYTES``) and one a drafter adds at k > 0
   (``GDN_TRANSIENT_DRAFTER_FIT_BYTES``), each scaled by the per-rank GDN width.

The first and second samples are the measurement vLLM takes on the GPU; capsim models them
(``modelled_samples``) unless they are given (a log's DEBUG lines or a measured table).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from capsim.memory.release_rules import parse_release, rule

MiB: int = 1024**2
PER_GRAPH_FLOOR_BYTES: int = 1 * MiB  # "Use at least 1 MiB per graph for driver overhead"
PIECEWISE, FULL = "PIECEWISE", "FULL"


@dataclass(frozen=True, slots=True)
class CaptureDescs:
    """Token counts vLLM captures per mode, largest first (the order it profiles them)."""

    piecewise_tok: tuple[int, ...]
    full_tok: tuple[int, ...]

    @property
    def largest_tok(self) -> int:
        return max(self.piecewise_tok + self.full_tok, default=0)

    def count(self, mode: str) -> int:
        return len(self.piecewise_tok if mode == PIECEWISE else self.full_tok)

    def log_line(self) -> str:
        """vLLM's "Profiling CUDA graph memory: PIECEWISE=n (largest=s), FULL=..." text."""
        parts = [
            f"{mode}={len(d)} (largest={d[0]})"
            for mode, d in ((PIECEWISE, self.piecewise_tok), (FULL, self.full_tok))
            if d
        ]
        return "Profiling CUDA graph memory: " + ", ".join(parts)


def _token_grid(cap: int, *, step16_from_256: bool = True) -> list[int]:
    """1, 2, 4, then steps of 8; since 0.12.0 steps of 16 from 256 (release rule
    ``capture_grid_step16_from_256``)."""
    sizes = [n for n in (1, 2, 4) if n <= cap]
    if not step16_from_256:
        return sizes + list(range(8, cap + 1, 8))
    if cap >= 8:
        sizes += list(range(8, min(cap + 1, 256), 8))
    if cap >= 256:
        sizes += list(range(256, cap + 1, 16))
    return sizes


def _request_counts(max_reqs: int) -> list[int]:
    counts = [n for n in (1, 2, 4) if n <= max_reqs]
    counts += list(range(8, min(max_reqs + 1, 256), 8)) + list(range(256, max_reqs + 1, 16))
    return sorted({*counts, max_reqs})


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def capture_descs(
    *,
    vllm_version: str,
    max_num_seqs: int,
    num_spec_tok: int,
    max_num_batched_tokens: int,
    sm100: bool = False,
    full_graphs: bool = True,
    max_capture_tok: int | None = None,
) -> CaptureDescs:
    """The sizes vLLM ``vllm_version`` captures by default (see the module docstring)."""
    if max_num_seqs < 1 or max_num_batched_tokens < 1 or num_spec_tok < 0:
        raise ValueError(
            f"capture_descs: max_num_seqs={max_num_seqs}, max_num_batched_tokens="
            f"{max_num_batched_tokens}, num_spec_tok={num_spec_tok} must be positive"
        )
    v = parse_release(vllm_version)
    q = 1 + num_spec_tok
    ceiling = 1024 if sm100 and rule("sm100_capture_ceiling_1024", v) else 512
    cap = max_capture_tok or min(max_num_seqs * q * 2, ceiling)
    uniform: set[int] = set()
    if max_capture_tok is None and rule("capture_decode_request_grid", v):
        if q > 1:
            counts = _request_counts(min(max_num_seqs, ceiling))
            uniform = {n * q for n in counts if n * q <= cap}
        elif max_num_seqs <= cap:
            uniform = {max_num_seqs}
    cap = min(cap, max_num_batched_tokens)
    sizes = set(_token_grid(cap, step16_from_256=bool(rule("capture_grid_step16_from_256", v))))
    if rule("capture_mnbt_appended", v) and max_num_batched_tokens <= cap:
        sizes.add(max_num_batched_tokens)
    sizes |= {s for s in uniform if s <= max_num_batched_tokens}
    top = max(sizes)
    if full_graphs and q > 1:  # adjust_cudagraph_sizes_for_spec_decode
        rounded = {_round_up(s, q) for s in sizes if _round_up(s, q) <= top}
        sizes = rounded or ({q} if q <= top else set())
    ordered = sorted(sizes, reverse=True)
    full = [s for s in ordered if q <= s <= q * max_num_seqs] if full_graphs else []
    return CaptureDescs(tuple(ordered), tuple(full))


@dataclass(frozen=True, slots=True)
class GraphSamples:
    """The two captures vLLM samples for one mode (bytes of free memory each one took)."""

    first_bytes: int
    second_bytes: int
    source: str


def estimate_bytes(descs: CaptureDescs, samples: dict[str, GraphSamples]) -> int:
    """vLLM's estimate: max over modes of the first capture + each mode's (n - 1) extra
    graphs at max(second capture, 1 MiB)."""
    shared = 0
    extra = 0
    for mode in (PIECEWISE, FULL):
        n = descs.count(mode)
        if n == 0:
            continue
        s = samples[mode]
        shared = max(shared, s.first_bytes)
        per_graph = max(s.second_bytes if n > 1 else 0, PER_GRAPH_FLOOR_BYTES)
        extra += per_graph * (n - 1)
    return shared + extra


# FlashAttention keeps split-KV intermediate buffers of [num_splits, num_heads, num_tokens,
# head_size] fp32 (+ the [num_splits, num_heads, num_tokens] fp32 log-sum-exp) in a FULL
# graph: vLLM fixes num_splits at capture to attention_config.flash_attn_max_num_splits_for_
# cuda_graph = 32 (0.26.0 config/attention.py, v1/attention/backends/flash_attn.py). Read, not
# fitted: it reproduces the 0.19.0 DEBUG lines "Estimated FULL CUDA graph memory: 260.00 MiB
# first-capture" (Llama-3.1-8B TP1: 258 MiB), 132 (TP2: 129), 70 (TP4: 65), 266 (Qwen2.5-72B
# TP2: 258), 142 (Llama-3.3-70B TP4: 129), 136 (Mixtral TP2: 129) in experiments/vllm_logs.
FA_MAX_NUM_SPLITS_FOR_CUDA_GRAPH: int = 32


def flash_attn_split_buffers(compute_capability: tuple[int, int], kv_cache_dtype: str) -> bool:
    """Whether a FULL capture holds FlashAttention's split-KV buffers on this GPU: only where
    the default attention backend is FLASH_ATTN running FA3. vLLM fixes ``max_num_splits`` to
    ``flash_attn_max_num_splits_for_cuda_graph`` only ``if self.use_full_cuda_graph and
    self.aot_schedule``, and ``aot_schedule = get_flash_attn_version() == 3``
    (v1/attention/backends/flash_attn.py, the same in 0.20.1, 0.24.0, 0.26.0, 0.27.1, 0.33.0);
    ``get_flash_attn_version`` picks FA3 only on ``device_capability.major == 9``, FA4 on 10,
    FA2 elsewhere (v1/attention/backends/fa_utils.py); FA2 and FA4 run with ``num_splits = 0``
    (the kernel's heuristic: one split at the largest capture sizes). On SM100
    ``platforms/cuda.py:_get_backend_priorities`` puts FLASHINFER first (0.26.0, 0.33.0) for
    causal attention, so no FA buffers there either (nor where ``attention_backend`` picks
    FLASHINFER for the KV dtype)."""
    fa = attention_backend(compute_capability, kv_cache_dtype) == "FLASH_ATTN"
    return fa and compute_capability[0] == 9


def attention_backend(compute_capability: tuple[int, int], kv_cache_dtype: str) -> str:
    """vLLM's default attention backend for a full-attention layer: FLASHINFER first on the
    SM100 family, else FLASH_ATTN (``platforms/cuda.py:_get_backend_priorities``, 0.20.1-0.33.0),
    unless FlashAttention cannot hold the KV dtype: a quantized (fp8) KV cache needs FA3 on SM90
    (or FA4 on SM100), and fp8_e5m2 is never supported (``fa_utils.py:flash_attn_supports_fp8``
    in 0.20.1, ``flash_attn_supports_kv_cache_dtype`` in 0.27.1/0.33.0), so the next backend in
    the list, FLASHINFER, is chosen."""
    if compute_capability[0] == 10:
        return "FLASHINFER"
    quantized = kv_cache_dtype.startswith("fp8")
    if quantized and (kv_cache_dtype == "fp8_e5m2" or compute_capability[0] != 9):
        return "FLASHINFER"
    return "FLASH_ATTN"


def full_graphs_with_drafts(compute_capability: tuple[int, int], kv_cache_dtype: str) -> bool:
    """Whether FULL decode graphs survive 1 + k > 1 query tokens per request. FlashInfer reports
    ``UNIFORM_SINGLE_TOKEN_DECODE`` unless trtllm-gen attention runs (SM100 only:
    ``FlashInferMetadataBuilder.get_cudagraph_support``, 0.20.1-0.33.0), and vLLM then sets
    cudagraph_mode=PIECEWISE with drafts ("FULL_AND_PIECEWISE is not supported with spec-decode
    for attention backend FlashInferBackend", config/compilation.py; logged by club-3090 #104).
    FlashAttention reports ALWAYS (FA3) or UNIFORM_BATCH (FA2): FULL graphs stay."""
    backend = attention_backend(compute_capability, kv_cache_dtype)
    return backend == "FLASH_ATTN" or compute_capability[0] == 10


def fa_split_buffer_bytes(num_tok: int, q_heads_per_rank: int, head_dim: int) -> int:
    """FlashAttention's split-KV accumulators of one FULL capture of ``num_tok`` tokens."""
    n = FA_MAX_NUM_SPLITS_FOR_CUDA_GRAPH
    return n * num_tok * q_heads_per_rank * (head_dim + 1) * 4


# Each further captured graph (the second sample) costs its own slice of the shared pool.
# FIT on one named row, llama31-8b-h100-tp1-llmdplanner (vLLM 0.19.0 DEBUG: "(51-1) x 6.00 MiB
# per-graph" in both modes, 32 attention layers): 6 MiB / 32 per attention layer. Predicted
# for the other 0.19.0 rows (logged 4-18 MiB for 32-80 layers) and every GDN row.
PER_GRAPH_BYTES_PER_ATTN_LAYER: float = 6 * MiB / 32
# A first capture holds more than the forward's intermediates (the capture stream's cuBLAS
# workspace, compile-time buffers): FIT on the same row's "Estimated PIECEWISE CUDA graph
# memory: 138.00 MiB first-capture" minus capsim's 50 MiB forward at 512 tokens. The other
# 0.19.0 rows log 84-152 MiB (predicted 106-147).
FIRST_CAPTURE_OVERHEAD_BYTES: int = 88 * MiB
PER_GRAPH_FIT_SOURCE: str = "fit: llama31-8b-h100-tp1-llmdplanner DEBUG line (6 MiB per graph)"

# The GDN transient of the first FULL capture (vllm #50780): what an H200 estimate holds beyond
# the FA split buffers and the per-graph slices, in two parts (session 4: the lead's decision on
# the open question of experiments/memory_plan/h200/rules_s4.md, declared in roles_s4.md 06:10
# UTC before the change): a part every GDN FULL capture carries (k=0) and a part a drafter adds
# (k > 0; the drafter's dummy runs inside the captures, gpu_model_runner.py _dummy_run ->
# drafter.dummy_run, were taken to be the likely cause). The per-mode DEBUG lines are now
# measured (experiments/memory_plan/h200/comparison_s6.md): k=0, row h200-35b-g090-k0-debug-
# s5call15: PIECEWISE 116 MiB first-capture + 50 x 4 MiB, FULL 260 + 50 x 2 (0.55 GiB); k=3, row
# h200-35b-g090-k3-debug-s6call19: PIECEWISE 116 + 48 x 6, FULL 278 + 48 x 4 (0.74 GiB). They put
# little of either part in the first FULL capture, which is the FA split buffers (257 MiB) + 3 MiB
# at k=0 and + 21 MiB at k=3: the k=0 part is mostly PIECEWISE per-graph cost (4 MiB per graph
# where PER_GRAPH_BYTES_PER_ATTN_LAYER x 10 layers gives 1.875), the drafter part mostly per-graph
# cost too (+2 MiB per graph in each mode, 96 graphs = 192 MiB) plus 18 MiB in FULL's first
# capture. The totals match only because both parts are fitted to these configurations' INFO
# totals; the model here is unchanged (comment updated only).
# Both are FITS on rows labelled fit in experiments/vllm_logs/startups.csv; per-GPU shape of
# Qwen3.5-35B-A3B at TP1, H200, vLLM 0.26.0, gmu 0.9, max_num_seqs 1024, mnbt 8192.
# History of its scaling, each falsified by an H200 start-up:
# - session 1: by context per request (mnbt // size x 1 / (1 + k)) -> k=0 mnbt 8192 predicted
#   1.62 GiB, vLLM logged 0.55 (row h200-35b-g090-k0-s2call4, fit);
# - session 2: by capture tokens x profile_seq_lens (about mnbt, any k) -> k=3 mnbt 16384
#   predicted 1.04 GiB, vLLM logged 0.74, the same as at mnbt 8192 (row
#   h200-35b-g090-k3-m16k-s3call7, which therefore decided the rule below and is labelled fit);
# - session 3: not scaled by max_num_batched_tokens; only by the per-rank GDN width; one k=3
#   constant (303 MiB) for every k, so k=0 gave 0.73 GiB where vLLM logs 0.55;
# - session 4 (this rule): the same 303 MiB at k > 0, split as k=0 part + drafter part.
# Open: the TP4 row qwen35-35b-tp4-gh50722 (mnbt 40000, drafter unknown) logs 1.32 GiB; the
# 1/TP scaling and the drafter part's dependence on the drafter's shape are checked by no row.
GiB_BYTES: int = 1024 * MiB
# The k=0 part. FIT on h200-35b-g090-k0-s2call4, excerpt experiments/vllm_logs/excerpts/
# h200-35b-g090-k0-s2call4.log line 18 "Estimated CUDA graph memory: 0.55 GiB total" (line 17:
# PIECEWISE=51 (largest=512), FULL=51 (largest=512)), minus the rest of the estimator there:
# the FA split buffers at 512 tokens (16 heads of 256: 257 MiB, above the PIECEWISE first
# capture) and 2 x 50 graphs x 10 attention layers (no MTP layer at k=0) x 0.1875 MiB, plus
# (since session 8, _first_full_capture_bytes) the first FULL capture's own graph (1 more):
# about 117 MiB (the log's 0.01 GiB rounding: +-5 MiB).
GDN_TRANSIENT_K0_FIT_BYTES: float = (
    0.55 * GiB_BYTES
    - fa_split_buffer_bytes(512, 16, 256)
    - (100 + 1) * 10 * PER_GRAPH_BYTES_PER_ATTN_LAYER
)
GDN_TRANSIENT_K0_FIT_SOURCE: str = (
    "fit: row h200-35b-g090-k0-s2call4 (H200 vLLM 0.26.0, Qwen3.5-35B-A3B TP1, gmu 0.9, k=0, "
    "mnbt 8192; excerpt line 18 'Estimated CUDA graph memory: 0.55 GiB total')"
)
# The drafter part. FIT on h200-35b-g090-k3-s2call3 (the repeat, identical figures, of the
# session-1 fit row h200-35b-g090-k3 the 303 MiB constant came from: experiments/memory_plan/h200/
# excerpts/h200-35b-g090-k3.log line 22), excerpt experiments/vllm_logs/excerpts/
# h200-35b-g090-k3-s2call3.log line 23 "Estimated CUDA graph memory: 0.74 GiB total" (line 22:
# PIECEWISE=49, FULL=49, largest 512), minus the FA split buffers (257 MiB), (2 x 48 + 1) graphs
# x 11 attention layers (10 + the MTP layer) x 0.1875 MiB and the k=0 part: about 184 MiB. One
# value for every k > 0 (predicted: k=1 logs 0.75, rows h200-35b-g090-k1-s3call6 / -g075-k1-
# s4call10).
GDN_TRANSIENT_DRAFTER_FIT_BYTES: float = (
    0.74 * GiB_BYTES
    - fa_split_buffer_bytes(512, 16, 256)
    - (96 + 1) * 11 * PER_GRAPH_BYTES_PER_ATTN_LAYER
    - GDN_TRANSIENT_K0_FIT_BYTES
)
GDN_TRANSIENT_DRAFTER_FIT_SOURCE: str = (
    "fit: row h200-35b-g090-k3-s2call3 (as k0-s2call4 at k=3; excerpt line 23 'Estimated CUDA "
    "graph memory: 0.74 GiB total') minus the k=0 part"
)
# Width both parts are scaled by to other per-GPU shapes: the GDN q/k/v channels per rank
# (conv_dim / tp) of the fitted shape (Qwen3.5-35B-A3B: 2*16*128 + 32*128 = 8192). The 1/TP
# scaling is not checked by any start-up.
GDN_TRANSIENT_FIT_CONV_DIM: int = 8192


def first_full_capture_units(
    descs: CaptureDescs, max_num_batched_tokens: int, max_model_len: int
) -> int:
    """Capture tokens x profile_seq_lens of the first FULL capture (about mnbt, any k): what
    vLLM's first FULL capture runs; kept for the doctor's wording, the transient no longer
    scales with it."""
    if not descs.full_tok:
        return 0
    size = descs.full_tok[0]
    return size * min(max_model_len, max_num_batched_tokens // size)


def gdn_transient_k0_bytes(conv_dim_per_rank: int) -> int:
    """The #50780 transient every first FULL GDN capture carries (k=0 fit), scaled by width."""
    return round(GDN_TRANSIENT_K0_FIT_BYTES * conv_dim_per_rank / GDN_TRANSIENT_FIT_CONV_DIM)


def gdn_transient_drafter_bytes(conv_dim_per_rank: int, num_spec_tok: int) -> int:
    """What a drafter (k > 0) adds to the #50780 transient (k=3 fit minus the k=0 part; one
    value for every k > 0), scaled by width; 0 without drafts."""
    if num_spec_tok <= 0:
        return 0
    return round(GDN_TRANSIENT_DRAFTER_FIT_BYTES * conv_dim_per_rank / GDN_TRANSIENT_FIT_CONV_DIM)


def gdn_transient_bytes(conv_dim_per_rank: int, num_spec_tok: int) -> int:
    """The #50780 transient for a GDN shape: the k=0 part plus the drafter part."""
    k0 = gdn_transient_k0_bytes(conv_dim_per_rank)
    return k0 + gdn_transient_drafter_bytes(conv_dim_per_rank, num_spec_tok)


def gdn_transient_source(num_spec_tok: int) -> str:
    """Where the transient's parts come from (for a term's detail)."""
    if num_spec_tok <= 0:
        return f"k=0 part only, {GDN_TRANSIENT_K0_FIT_SOURCE}"
    return (
        f"k=0 part {GDN_TRANSIENT_K0_FIT_SOURCE} + drafter part {GDN_TRANSIENT_DRAFTER_FIT_SOURCE}"
    )


def _first_full_capture_bytes(
    descs: CaptureDescs, activation_at: Callable[[int], int], fa_split_bytes: int, second: int
) -> int:
    """The first FULL sample. vLLM profiles PIECEWISE first, then FULL, both into one profiling
    pool (0.19.0 v1/cudagraph_dispatcher.py:get_capture_descs "PIECEWISE first then FULL";
    gpu_model_runner.py:profile_cudagraph_memory points every CUDAGraphWrapper at one
    graph_pool_handle; the same in 0.26.0), so a FULL capture after PIECEWISE ones finds the
    forward's intermediates at the largest size already cached in that pool and takes only what
    the pool cannot serve: FlashAttention's split-KV accumulators (one block larger than any the
    PIECEWISE forward left, so a new segment) plus, like every further capture, the graph's own
    memory (the per-graph sample). Without PIECEWISE graphs the pool starts empty and the FULL
    capture pays the forward as the PIECEWISE one does. Reproduces the 0.19.0 DEBUG lines where
    the PIECEWISE first capture is not the larger: Llama-3.1-8B TP4 "FULL ... 70.00 MiB
    first-capture" (64.5 + 6 modelled; 106.5 before), Qwen2.5-7B TP4 60 (61; 108.9 before)."""
    if not descs.piecewise_tok:
        return max(activation_at(descs.full_tok[0]) + FIRST_CAPTURE_OVERHEAD_BYTES, fa_split_bytes)
    return fa_split_bytes + second


def modelled_samples(
    descs: CaptureDescs,
    activation_at: Callable[[int], int],
    *,
    attn_layers: int,
    fa_split_at: Callable[[int], int],
    transient_bytes: int = 0,
    transient_source: str = "",
) -> dict[str, GraphSamples]:
    """capsim's samples. The first PIECEWISE capture keeps the intermediates of a forward at
    its size (``activation_at``) plus the fitted first-capture overhead; the first FULL capture,
    taken after it in the same pool, FlashAttention's split buffers (``fa_split_at``) plus one
    graph (``_first_full_capture_bytes``) and, since 0.26, the GDN transient. A second capture
    costs ``PER_GRAPH_BYTES_PER_ATTN_LAYER`` per attention layer."""
    second = round(PER_GRAPH_BYTES_PER_ATTN_LAYER * attn_layers)
    out: dict[str, GraphSamples] = {}
    if descs.piecewise_tok:
        out[PIECEWISE] = GraphSamples(
            activation_at(descs.piecewise_tok[0]) + FIRST_CAPTURE_OVERHEAD_BYTES,
            second,
            f"modelled: forward at the largest size; per graph {PER_GRAPH_FIT_SOURCE}",
        )
    if descs.full_tok:
        top = descs.full_tok[0]
        split = fa_split_at(top)
        if descs.piecewise_tok:
            label = "modelled: one graph beyond the PIECEWISE pool" + (
                " + FA split buffers (32 splits) at the largest size"
                if split
                else " (no FA3 split buffers off SM90)"
            )
        elif split:
            label = "modelled: FA split buffers (32 splits) at the largest size"
        else:
            label = "modelled: forward at the largest size (no FA3 split buffers off SM90)"
        if transient_bytes:
            label += f" + GDN transient {transient_bytes / MiB:.0f} MiB ({transient_source})"
        first = _first_full_capture_bytes(descs, activation_at, split, second)
        first += transient_bytes
        out[FULL] = GraphSamples(first, second, label)
    return out
