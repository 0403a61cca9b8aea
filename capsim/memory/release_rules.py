"""vLLM's memory rules that changed between releases, read from each release's wheel.

Every rule names the first release that carries the new behaviour and where it was read: the
wheels of 0.10.2, 0.11.0, 0.12.0, 0.13.0, 0.14.0, 0.16.0, 0.17.0, 0.17.1, 0.18.0, 0.19.0,
0.20.0, 0.20.1, 0.21.0, 0.24.0, 0.26.0, 0.27.0, 0.27.1, 0.28.0, 0.29.0, 0.30.0, 0.31.0, 0.32.0
and 0.33.0 were fetched with ``pip download vllm==X --no-deps`` and their Python
sources read (not run, nothing copied); paths are relative to the ``vllm/`` package. A release
is compared as (major, minor, patch), so a rule that changed inside a minor series (the "GPU KV
cache size" line between 0.20.0 and 0.20.1) resolves exactly. Releases older than the oldest
wheel read take the "before" value, with the source saying which older evidence supports it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from capsim.vllm_rules import RULES as VERSION_RULES

Release = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class ReleaseRule:
    key: str
    what: str
    before: object
    since_value: object
    since: Release
    source: str


def _from_version_rules(key: str) -> ReleaseRule:
    """A rule both tables need, kept once in ``capsim/vllm_rules.py`` (where it is
    minor-exact: its first release is an X.Y.0 wheel)."""
    r = next(r for r in VERSION_RULES if r.key == key)
    return ReleaseRule(r.key, r.what, r.before, r.since_value, (*r.since, 0), r.source)


RELEASE_RULES: tuple[ReleaseRule, ...] = (
    ReleaseRule(
        "cudagraph_estimator",
        "vLLM estimates CUDA-graph memory before sizing the KV pool (profile_cudagraph_memory, "
        "'Estimated CUDA graph memory: X GiB total'); before, the only graph figure logged is "
        "the pool the real captures took after the KV pool was allocated ('Graph capturing "
        "finished in s secs, took X GiB', the accounting line's 'GiB for CUDAGraph memory')",
        False,
        True,
        (0, 18, 0),
        "v1/worker/gpu_model_runner.py:GPUModelRunner.profile_cudagraph_memory is absent from "
        "the 0.10.2, 0.14.0, 0.16.0, 0.17.0 and 0.17.1 wheels and present in 0.18.0 (and "
        "0.19.0-0.33.0); 0.10.2's capture_model logs the measured pool of all captures",
    ),
    ReleaseRule(
        "charge_cudagraph_estimate",
        "the CUDA-graph estimate (profile_cudagraph_memory) is subtracted from the KV budget",
        False,
        True,
        (0, 20, 0),
        "0.20.0 envs.py: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to '1' and "
        "v1/worker/gpu_worker.py:determine_available_memory subtracts the estimate when it is "
        "set (same in 0.20.1-0.33.0); the 0.19.0 wheel defaults it to '0' (experiments/"
        "vllm_logs/README.md). The log line's 'default since v0.21.0' is wrong by one release",
    ),
    ReleaseRule(
        "rocm_cudagraph_estimate",
        "the CUDA-graph estimate is also taken on ROCm",
        False,
        True,
        (0, 26, 0),
        "0.20.0 v1/worker/gpu_worker.py:determine_available_memory skips "
        "profile_cudagraph_memory when current_platform.is_rocm(); 0.26.0 takes it on every "
        "platform (and captures on the compute stream on ROCm, gpu_model_runner.py). First "
        "release between 0.21 and 0.26 not pinned; taken as 0.26",
    ),
    ReleaseRule(
        "kv_size_line_concurrency",
        "'GPU KV cache size: N tokens' is int(max_concurrency * max_model_len); before, it "
        "was num_blocks // len(kv_cache_groups) * min_block_size",
        False,
        True,
        (0, 20, 1),
        "v1/core/kv_cache_utils.py: 0.20.0 logs num_blocks // len(groups) * min_block_size "
        "(also 0.11.0 and 0.19.0); 0.20.1 logs int(max_concurrency * max_model_len) "
        "(0.26.0+: get_kv_cache_capacity, same formula)",
    ),
    ReleaseRule(
        "capture_grid_step16_from_256",
        "the default capture sizes step by 16 from 256 (1, 2, 4, 8..248 by 8, 256.. by 16); "
        "before, by 8 up to the largest (67 sizes up to 512)",
        False,
        True,
        (0, 12, 0),
        "config/__init__.py:VllmConfig._set_cudagraph_sizes builds [1, 2, 4] + range(8, "
        "largest + 1, 8) in 0.10.2 and 0.11.0 (the 0.10.2 Qwen3-Next start-up logs 'Capturing "
        "CUDA graphs (mixed prefill-decode, PIECEWISE): 67/67'); config/vllm.py in 0.12.0, "
        "0.13.0, 0.14.0, 0.16.0-0.19.0 adds range(256, largest + 1, 16) after range(8, 256, 8)",
    ),
    ReleaseRule(
        "capture_mnbt_appended",
        "max_num_batched_tokens is added to the capture sizes when it fits under the "
        "largest capture size",
        False,
        True,
        (0, 20, 1),
        "config/vllm.py:VllmConfig._set_cudagraph_sizes: absent in 0.20.0, present in 0.20.1",
    ),
    ReleaseRule(
        "capture_decode_request_grid",
        "with drafts, the uniform-decode sizes n * (1 + k) over a request-count grid are "
        "appended to the token grid (before: the token grid alone, rounded up to "
        "multiples of 1 + k)",
        False,
        True,
        (0, 29, 0),
        "config/vllm.py:_set_cudagraph_sizes: the request_counts grid appears in 0.29.0 "
        "(absent in 0.28.0); compilation.py:adjust_cudagraph_sizes_for_spec_decode rounds "
        "in every release read (model runner V1, FULL decode graphs, 1 + k > 1)",
    ),
    ReleaseRule(
        "flashinfer_installed_by_default",
        "FlashInfer is a dependency of the wheel, so a plain 'pip install vllm' has it and the "
        "V1 sampler does not fall back to the PyTorch-native top-k/top-p (a full-vocabulary "
        "sort of the fp32 logits, 36 B per entry at its peak from 128 rows on, measured on the H200; "
        "activation.native_topk_topp_sampler_peak_bytes)",
        False,
        True,
        (0, 12, 0),
        "wheel METADATA Requires-Dist (read session 8): no flashinfer in 0.9.2, "
        "'flashinfer-python==0.3.0; extra == \"flashinfer\"' in 0.10.2 and 0.3.1 (extra) in "
        "0.11.0, 'flashinfer-python==0.5.3' unconditional from 0.12.0 (and in every later wheel "
        "read, 0.13.0-0.33.0); without it v1/sample/ops/topk_topp_sampler.py "
        "TopKTopPSampler.__init__ logs 'FlashInfer is not available. Falling back to the "
        "PyTorch-native implementation of top-p & top-k sampling' (0.9.2, 0.10.2; the "
        "Qwen3-Next 0.10.2 row's log shows it)",
    ),
    ReleaseRule(
        "sm100_capture_ceiling_1024",
        "default max_cudagraph_capture_size ceiling is 1024 on data-centre Blackwell "
        "(SM100 family), 512 elsewhere",
        False,
        True,
        (0, 28, 0),
        "config/vllm.py:_set_cudagraph_sizes: 'is_device_capability_family(100)' ceiling "
        "present in 0.28.0, absent in 0.27.0 (vllm PR #49390)",
    ),
    ReleaseRule(
        "align_mode_checkpoint_lcm",
        "prefix caching on (mamba_cache_mode 'align'): the attention block size is also a "
        "multiple of the GDN prefill checkpoint alignment (64 with the FlashInfer GDN "
        "prefill); before, the plain kernel alignment (16 on FA/FlashInfer) is used",
        False,
        True,
        (0, 33, 0),
        "platforms/interface.py:Platform._align_hybrid_block_size: 0.20.0-0.32.0 use "
        "kernel_block_alignment_size = max(backend minimum, block_size) in every mamba "
        "mode except 'all'; 0.33.0 LCMs it with get_mamba_prefill_checkpoint_alignment "
        "(v1/attention/backends/gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64)",
    ),
    ReleaseRule(
        "gdn_first_full_capture_transient",
        "the first FULL capture (profile_seq_lens = min(max_model_len, mnbt // size)) "
        "charges a GDN transient that grows with max_num_batched_tokens as graph memory",
        False,
        True,
        (0, 26, 0),
        "vllm issue #50780 (KV pool -18-24% on GDN hybrids since 0.26.0). The "
        "profile_seq_lens code itself is already in 0.20.0 gpu_model_runner.py:"
        "profile_cudagraph_memory; what grew in 0.26 is the GDN path it drives",
    ),
    ReleaseRule(
        "moe_workspace_triton_shapes",
        "the fused-MoE workspace kept from the profile run is TritonExperts' buffers: "
        "max(M x topk x max(I, H), M x H) + M x topk x max(2I, H) elements of the activation "
        "dtype (M = max_num_batched_tokens, I = per-rank expert width, H = hidden); before, "
        "capsim's session-1 estimate M x topk x (3I + H)",
        False,
        True,
        (0, 26, 0),
        "model_executor/layers/fused_moe/experts/triton_moe.py:TritonExperts.workspace_shapes "
        "(0.26.0 lines 181-195) and modular_kernel.py:FusedMoEKernelModularImpl."
        "_allocate_buffers (lines 1051-1112: workspace1 and the output share one buffer, both "
        "from the WorkspaceManager, one chunk); the same shapes in 0.33.0 "
        "(kernels/bench/memory/terms_moe.py, measured on the H200). Read in these two wheels "
        "only: 0.26.0 is where it was read, not shown to be the first release with it "
        "(0.14.0-0.24.0 not re-read), so earlier releases keep the old estimate",
    ),
    _from_version_rules("hybrid_prefix_caching_default"),
    ReleaseRule(
        "runner_buffers_charged",
        "the model runner's persistent buffers (allocated after the worker's init snapshot, "
        "before the profile) are charged to the KV budget, inside 'consumed memory'",
        False,
        True,
        (0, 27, 0),
        "utils/mem_utils.py:memory_profiling: 0.27.0 sets total_consumed = init-snapshot free "
        "memory - free memory after the profile and non_kv_cache_memory = total_consumed + "
        "(torch peak - torch allocated after the profile); 0.26.0 used weights_memory + "
        "non_torch_increase + torch_peak_increase, which misses torch tensors allocated "
        "between the snapshot and the profile. v1/worker/gpu_worker.py:init_device builds "
        "GPUModelRunner after init_snapshot in both (0.27.1, 0.28.0, 0.31.0, 0.33.0 as 0.27.0)",
    ),
    ReleaseRule(
        "mamba_blocks_refusal",
        "vLLM refuses to start when max_num_seqs exceeds the KV pool's block count on a "
        "model with mamba/GDN layers and FULL CUDA graphs",
        False,
        True,
        (0, 20, 0),
        "config/compilation.py:CompilationConfig.resolve_cudagraph_mode_and_sizes raises "
        "'max_num_seqs (N) exceeds available Mamba cache blocks (M)...' in 0.20.0-0.33.0 "
        "(vllm issue #34094)",
    ),
)


def parse_release(text: str | tuple[int, ...]) -> Release:
    """'0.26', 'v0.20.1', '0.10.2rc1', '0.1.dev123+g...' -> (major, minor, patch).

    A dev build ``0.1.devN`` (vLLM's setuptools-scm fallback when a wheel is built without
    tags) names no release: it is refused with that reason rather than read as 0.1.
    """
    if isinstance(text, tuple):
        parts = [int(x) for x in text] + [0, 0, 0]
        return parts[0], parts[1], parts[2]
    raw = str(text).strip().lstrip("vV")
    if re.match(r"^0\.1\.dev", raw) or re.match(r"^0\.0\.", raw):
        raise ValueError(
            f"vllm_version={text!r}: a development build without a release tag; give "
            "--vllm-version X.Y (the release it was built from)"
        )
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", raw)
    if not m:
        raise ValueError(f"vllm_version={text!r}: expected MAJOR.MINOR[.PATCH] such as 0.26.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def rule(key: str, version: str | tuple[int, ...]) -> object:
    """The value of rule ``key`` in release ``version``."""
    v = parse_release(version)
    for r in RELEASE_RULES:
        if r.key == key:
            return r.since_value if v >= r.since else r.before
    raise KeyError(f"release rule {key!r} does not exist")


def rules_markdown() -> str:
    """The table as Markdown (docs/memory.md and ``capsim memory --version-rules``)."""
    lines = ["| rule | before | since | from | read in |", "|---|---|---|---|---|"]
    for r in RELEASE_RULES:
        since = ".".join(str(x) for x in r.since)
        lines.append(f"| {r.key}: {r.what} | {r.before} | {r.since_value} | {since} | {r.source} |")
    return "\n".join(lines)
