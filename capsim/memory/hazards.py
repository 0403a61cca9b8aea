"""Version-specific capacity hazards ``capsim doctor`` checks, each with its public source.

A hazard is a behaviour of a vLLM release that costs a deployment KV capacity (or a start-up)
and that a flag recovers. ``HAZARDS`` holds what is known; ``doctor.py`` decides which apply
to a given deployment and prices each one by planning the pool twice (with and without it).
Sources are vLLM's source in the wheels read for ``release_rules.py`` and public issues.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Hazard:
    key: str
    what: str
    first: tuple[int, int, int]  # first release it applies to
    last: tuple[int, int, int] | None  # last release it applies to (None: still there)
    needs: str  # the deployment trait that triggers it (doctor.py reads this key)
    flag: str  # what recovers it
    source: str


HAZARDS: tuple[Hazard, ...] = (
    Hazard(
        "cudagraph_gdn_transient",
        "the CUDA-graph estimate charges the GDN transient of the first FULL capture "
        "as graph memory (vllm #50780 reports it growing with max_num_batched_tokens; the "
        "H200 start-ups at k=3 log the same estimate at 8192 and 16384), so the KV pool is "
        "cut by it",
        (0, 26, 0),
        None,
        "hybrid+full_graphs",
        "--kv-cache-memory sized from a previous start-up's actual graph pool (#50780 "
        "also suggests a smaller --max-num-batched-tokens)",
        "vllm issue #50780; v1/worker/gpu_model_runner.py:profile_cudagraph_memory "
        "(profile_seq_lens = mnbt // size on the first FULL capture)",
    ),
    Hazard(
        "mamba_blocks_refusal",
        "max_num_seqs above the pool's block count: vLLM refuses to start (every decode "
        "sequence needs one Mamba block for the FULL graphs)",
        (0, 20, 0),
        None,
        "hybrid+full_graphs",
        "--max-num-seqs at most the block count, or a larger --gpu-memory-utilization",
        "config/compilation.py:resolve_cudagraph_mode_and_sizes; vllm issue #34094",
    ),
    Hazard(
        "align_mode_block_inflation",
        "prefix caching on (mamba_cache_mode 'align'): the attention block size is "
        "LCM-ed with the GDN prefill checkpoint alignment (64), so blocks grow and each "
        "request wastes more of its last block",
        (0, 33, 0),
        None,
        "hybrid+prefix_caching",
        "--mamba-block-size (decouples the mamba block) or --no-enable-prefix-caching",
        "platforms/interface.py:_align_hybrid_block_size (0.33.0; 16-token alignment in "
        "0.20.0-0.32.0)",
    ),
    Hazard(
        "align_mode_checkpoint_pages",
        "prefix caching on: GDN states are checkpointed at every attention block out of "
        "the same pool, so 'GPU KV cache size' overstates the usable tokens (about 20% "
        "on a Qwen3.8 27B slug)",
        (0, 19, 0),
        None,
        "hybrid+prefix_caching",
        "--mamba-block-size 8192 (fewer checkpoints) or --no-enable-prefix-caching",
        "club-3090 PR #1170 (maintainer measurement); MambaSpec.max_memory_usage_bytes "
        "page x (2 + k + checkpoints) in align mode (v1/kv_cache_interface.py)",
    ),
    Hazard(
        "gdn_prefill_scratch_unprofiled",
        "the start-up profile run does not reach the GDN chunked-prefill kernel, so a "
        "large prefill chunk can exceed the profiled peak and run out of memory at serving "
        "time although start-up succeeded",
        (0, 20, 0),
        None,
        "hybrid",
        "a smaller --max-num-batched-tokens (4096 or 3072 on a 32 GB card in the report)",
        "vllm issue #52872 (RTX 5090 sweep of max_num_batched_tokens); "
        "kernels/MEMORY_TERMS.md (capsim's reading of _forward_core)",
    ),
    Hazard(
        "kv_cache_memory_suggestion_double_counts_graphs",
        "the '--kv-cache-memory=N' vLLM suggests at start-up subtracts the CUDA-graph "
        "estimate twice (inside peak activation and again as the actual pool), so taking "
        "it leaves the estimate's bytes unused",
        (0, 27, 0),
        None,
        "full_graphs",
        "add the logged 'Estimated CUDA graph memory' back to the suggested --kv-cache-memory",
        "v1/worker/gpu_worker.py: 0.27.0 sets peak_activation_memory = headroom + charged "
        "estimate and the suggestion subtracts peak activation and the actual graph pool "
        "(0.26.0 subtracted the pool only)",
    ),
    Hazard(
        "kv_size_line_not_capacity",
        "'GPU KV cache size: N tokens' is not a capacity for hybrids: it is concurrency x "
        "max_model_len (0.20.1+) or blocks / groups x block size (<= 0.20.0); the admitted "
        "concurrency at the real context lengths is what counts",
        (0, 10, 0),
        None,
        "hybrid",
        "none (read capsim doctor's admitted concurrency instead)",
        "v1/core/kv_cache_utils.py (release_rules.kv_size_line_concurrency); vllm #40691",
    ),
)


def applicable(version: tuple[int, int, int], traits: set[str]) -> list[Hazard]:
    """The hazards of ``version`` whose trigger (``needs``, '+'-joined) is in ``traits``."""
    out = []
    for h in HAZARDS:
        if version < h.first or (h.last is not None and version > h.last):
            continue
        if all(t in traits for t in h.needs.split("+")):
            out.append(h)
    return out
