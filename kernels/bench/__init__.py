"""Measurements of capsim's kernels and of vLLM's on one GPU (run on a GPU; nothing at import).

Sub-packages by product, relative imports only:

- ``gdn/``: GDN verify/commit benchmarks (grid runner ``run``, ``side_by_side``, ``drift``,
  ``round6``, the kernel registry ``registry``, cases, float64 checks, reports);
- ``step/``: the operators of one engine step and whole steps (``model_step``, vLLM's
  step operators, Triton stand-ins for vLLM's compiled ops);
- ``memory/``: non-KV memory terms of vLLM's start-up (``memory_terms``).

Shared: ``vllm_shim`` (the one loader of vLLM 0.33's files, from the git-ignored
``.vllmwheel/src``) and ``timing`` (CUDA-graph timing with the L2 flushed, copy
bandwidth, atomic writes). Model shapes come from ``capsim.models`` (never copied).
"""
