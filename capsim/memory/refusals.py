"""vLLM's start-up refusals that depend on memory and batch settings, before the user meets them.

Each check returns ``None`` (vLLM starts) or a ``Refusal`` whose ``vllm_message`` begins with
the sentence vLLM raises (its identifying words, so a user can match it to their log) and whose
``fix`` says which flag recovers it. Read in the 0.26.0 wheel (paths relative to ``vllm/``);
``since`` is the first release read that carries the check (release_rules.py).

- ``mamba_blocks``: ``config/compilation.py:CompilationConfig.resolve_cudagraph_mode_and_sizes``
  (FULL graphs, a model with mamba/GDN layers, ``max_num_seqs > kv_cache_config.num_blocks``;
  ``num_blocks`` is the pool's whole block count, null block included; vllm #34094).
- ``no_kv_memory`` / ``max_model_len_too_long``: ``v1/core/kv_cache_utils.py:
  _check_enough_kv_cache_memory`` (available KV <= 0; one request of ``max_model_len`` does
  not fit).
- ``free_memory``: ``v1/worker/utils.py:request_memory`` (free memory at start-up below
  ``ceil(gmu * total)``).
- ``batched_tokens_below_seqs``: ``config/scheduler.py:SchedulerConfig.verify_max_model_len``.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB: int = 1024**3


@dataclass(frozen=True, slots=True)
class Refusal:
    check: str
    vllm_message: str
    fix: str
    source: str


def mamba_blocks(
    *, max_num_seqs: int, num_blocks: int, has_mamba: bool, full_graphs: bool
) -> Refusal | None:
    """max_num_seqs above the pool's block count with FULL graphs on a GDN/mamba model."""
    if not (has_mamba and full_graphs and max_num_seqs > num_blocks):
        return None
    return Refusal(
        "mamba_blocks",
        f"ValueError: max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks "
        f"({num_blocks}).",
        f"--max-num-seqs {num_blocks} (or lower), or a larger --gpu-memory-utilization, or "
        "--enforce-eager / PIECEWISE-only graphs",
        "vLLM 0.20.0-0.33.0 config/compilation.py:resolve_cudagraph_mode_and_sizes; vllm #34094",
    )


def no_kv_memory(*, available_kv_bytes: int) -> Refusal | None:
    if available_kv_bytes > 0:
        return None
    return Refusal(
        "no_kv_memory",
        "ValueError: No available memory for the cache blocks.",
        "a larger --gpu-memory-utilization, a smaller --max-num-batched-tokens or "
        "--max-num-seqs (smaller profile run), or quantized weights",
        "vLLM 0.26.0 v1/core/kv_cache_utils.py:_check_enough_kv_cache_memory",
    )


def max_model_len_too_long(
    *, max_model_len: int, needed_bytes: int, available_kv_bytes: int, estimated_max_len: int
) -> Refusal | None:
    """One request of ``max_model_len`` tokens must fit the pool."""
    if needed_bytes <= available_kv_bytes:
        return None
    return Refusal(
        "max_model_len_too_long",
        f"ValueError: To serve at least one request with the model's max seq len "
        f"({max_model_len}), ({needed_bytes / GiB:.2f} GiB KV cache is needed, which is "
        f"larger than the available KV cache memory ({available_kv_bytes / GiB:.2f} GiB).",
        f"--max-model-len {estimated_max_len} (what the pool holds) or a larger "
        "--gpu-memory-utilization",
        "vLLM 0.26.0 v1/core/kv_cache_utils.py:_check_enough_kv_cache_memory",
    )


def free_memory(*, free_bytes: int, requested_bytes: int, gmu: float) -> Refusal | None:
    if free_bytes >= requested_bytes:
        return None
    return Refusal(
        "free_memory",
        f"ValueError: Free memory on device ({free_bytes / GiB:.2f} GiB) on startup is less "
        f"than desired GPU memory utilization ({gmu}, {requested_bytes / GiB:.2f} GiB).",
        "a smaller --gpu-memory-utilization or fewer processes on the GPU",
        "vLLM 0.26.0 v1/worker/utils.py:request_memory",
    )


def batched_tokens_below_seqs(*, max_num_batched_tokens: int, max_num_seqs: int) -> Refusal | None:
    if max_num_batched_tokens >= max_num_seqs:
        return None
    return Refusal(
        "batched_tokens_below_seqs",
        f"ValueError: max_num_batched_tokens ({max_num_batched_tokens}) must be greater "
        f"than or equal to max_num_seqs ({max_num_seqs}).",
        f"--max-num-batched-tokens {max_num_seqs} or a smaller --max-num-seqs",
        "vLLM 0.26.0 config/scheduler.py:SchedulerConfig.verify_max_model_len",
    )
