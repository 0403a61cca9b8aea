"""vLLM start-up refusals that capsim reproduces, in vLLM's own wording.

- Mamba cache blocks (vLLM 0.26.0 ``config/compilation.py``,
  ``CompilationConfig.resolve_cudagraph_mode_and_sizes``, after the KV cache is sized and
  before CUDA graph capture; vLLM issue #34094): with FULL decode CUDA graphs, a model with
  Mamba-type layers (GDN counts) needs one Mamba cache block per decode sequence, so vLLM
  raises ``ValueError`` when ``max_num_seqs`` exceeds the pool's block count
  (``kv_cache_config.num_blocks``: every block of the pool, the null block included).
  Seen on the H200 (shared/REAL_VLLM_H200.md): gmu 0.6, MTP k=3 -> "max_num_seqs (1024)
  exceeds available Mamba cache blocks (339)". Read in 0.26.0's source only; when the
  check first appeared and whether later releases keep it was not established, so capsim
  applies it to the releases listed in MAMBA_CHECK_VERSIONS (extending the list is a version
  rule for capsim/vllm_rules.py once another release's source is read). Under the default
  0.33 rules capsim still plans such configurations (many pinned-pool tests and sweeps do).
"""

from __future__ import annotations

MAMBA_CHECK_VERSIONS: tuple[tuple[int, int], ...] = ((0, 26),)


def mamba_blocks_refusal(
    max_num_seqs: int,
    num_blocks: int,
    has_mamba_layers: bool,
    full_cudagraphs: bool,
    vllm_version: tuple[int, int],
) -> str | None:
    """vLLM's refusal message when `max_num_seqs` > Mamba cache blocks, else None."""
    if not (has_mamba_layers and full_cudagraphs and tuple(vllm_version) in MAMBA_CHECK_VERSIONS):
        return None
    if max_num_seqs <= num_blocks:
        return None
    return (
        f"max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks "
        f"({num_blocks}). Each decode sequence requires one Mamba cache block, so CUDA "
        f"graph capture cannot proceed. Please lower max_num_seqs to at most "
        f"{num_blocks} or increase gpu_memory_utilization."
    )
