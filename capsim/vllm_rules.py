"""vLLM's memory-accounting rules that changed between releases, in one table.

Each rule is (what, the value before, the value since, the first release with it, source).
``rules_for("0.26")`` resolves every rule for one release; ``capsim memory --vllm-version``
passes it to the memory plan. Releases are compared as (major, minor); a patch number is
accepted and ignored. Where the first release carrying a change is not pinned down by a
release note, the source says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.gpus import GpuSpec
from capsim.units import GiB

DEFAULT_VLLM_VERSION: str = "0.33"


@dataclass(frozen=True, slots=True)
class VersionRule:
    key: str
    what: str
    before: object
    since_value: object
    since: tuple[int, int]
    source: str


RULES: tuple[VersionRule, ...] = (
    VersionRule(
        "v1_engine",
        "the V1 engine (the profiling and KV accounting capsim follows) is the default",
        False,
        True,
        (0, 8),
        "vLLM 0.8.0 release notes (V1 engine on by default); older logs come from the V0 "
        "worker (worker.py 'Memory profiling takes ...'), whose profile run differs",
    ),
    VersionRule(
        "default_gmu",
        "gpu_memory_utilization when not given",
        0.9,
        0.92,
        (0, 20),
        "PR #38284 (merged 2026-04) changed CacheConfig/LLM defaults 0.9 -> 0.92; 0.16 docs "
        "still say 0.9, 0.33 config/cache.py says 0.92 (first release: 0.19 or 0.20, taken "
        "as 0.20)",
    ),
    VersionRule(
        "charge_cudagraph_memory",
        "CUDA-graph estimate subtracted from the KV budget",
        False,
        True,
        (0, 20),
        "envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to '1' in the 0.20.0 wheel "
        "('0' in 0.19.0) although the log says 'default since v0.21.0' (capsim/memory/"
        "release_rules.py charge_cudagraph_estimate, patch-exact)",
    ),
    VersionRule(
        "gdn_capture_transient",
        "first FULL capture (profile_seq_lens = mnbt // size) charges a GDN transient "
        "that grows with max_num_batched_tokens as graph memory (sized in capsim/memory/"
        "cudagraph.py from the H200 start-ups)",
        False,
        True,
        (0, 26),
        "vllm issue #50780 (KV pool 18-24% smaller on GDN hybrids since 0.26.0; 0.23 "
        "reports 0.5 GiB for the same config); gpu_model_runner.profile_cudagraph_memory",
    ),
    VersionRule(
        "large_gpu_batch_tier",
        ">= 160 GiB GPUs get 16384 batched tokens (online serving); before, they fell "
        "in the >= 70 GiB tier (8192)",
        False,
        True,
        (0, 28),
        "engine/arg_utils.py:EngineArgs.get_batch_defaults (0.33); first release 0.28 per "
        "issue #11 / VLLM.md s4.2",
    ),
    VersionRule(
        "async_scheduling",
        "async scheduling (two batches in flight: a finished request's slot and a new "
        "arrival reach the batch one step later) when --async-scheduling is not given",
        False,
        True,
        (0, 14),
        "vLLM 0.14.0 release notes ('Async scheduling is now enabled by default', PR #27614; "
        "with EAGLE/MTP speculation PR #31998); 0.26.0 config/vllm.py resolves None to True "
        "unless pooling, a drafter other than EAGLE/MTP/ngram_gpu/dspark, "
        "disable_padded_drafter_batch or an executor without it; platforms/cpu.py sets False",
    ),
    VersionRule(
        "hybrid_prefix_caching_default",
        "prefix caching is on by default for hybrid (GDN/mamba) generative models when the "
        "user does not decide (mamba_cache_mode 'align')",
        False,
        True,
        (0, 28),
        "engine/arg_utils.py default_prefix_caching = model_config.is_prefix_caching_supported: "
        "config/model.py returns False for hybrids in 0.19.0-0.21.0; 0.26.0 and 0.27.0 return "
        "True but keep hybrids opt-in ('and not model_config.is_hybrid'); 0.28.0-0.33.0 drop "
        "the opt-in. The vllm#40691 row (0.19.0, no flag) logs 45 blocks per request: mode none. "
        "Read again 2026-12-02 in the 0.27.0 and 0.28.0 wheels: 0.27.0 arg_utils.py:2604-2605 "
        "keeps 'and not model_config.is_hybrid', 0.28.0 arg_utils.py:2650 does not, and 0.28.0 "
        "model_executor/models/config.py:602-604 turns mamba_cache_mode 'none' into 'align' when "
        "prefix caching is on. Kept once, in capsim/vllm_rules.py (release_rules.py takes it)",
    ),
    VersionRule(
        "prefix_stats_at_admission",
        "vllm:prefix_cache_queries / _hits count a waiting request once, when it is admitted "
        "(before: on every cache lookup, so a request looked up and left waiting is counted again)",
        False,
        True,
        (0, 27),
        "read in the wheels 2026-12-04: 0.26.0 v1/core/kv_cache_manager.py get_computed_blocks "
        "calls prefix_cache_stats.record on every lookup (the scheduler's waiting loop looks a "
        "request up each step until it is admitted); 0.27.0-0.32.0 add "
        "KVCacheManager.record_prefix_cache_stats, which the scheduler calls once the request is "
        "scheduled. Measured: vLLM 0.26 shared-prefix runs count 1-18 blocks more hits than one "
        "lookup per request (experiments/engine/out_of_sample.md, calls 35-38)",
    ),
    VersionRule(
        "align_split_to_prefill_end",
        "align mode (GDN prefix caching): every prefill chunk that stops short of the prompt's "
        "end is floored to a block (before: only one that stops short of the last whole block, "
        "so a prompt's last partial block, or a prompt shorter than a block, is cut anywhere)",
        False,
        True,
        (0, 27),
        "read in the wheels 2026-12-04: 0.26.0 v1/core/sched/scheduler.py "
        "_mamba_block_aligned_split floors `end` only `if end < last_cache_position` (num_tokens "
        "floored to a block); 0.27.0-0.32.0 floor `if end < prefill_end` (with the wide-block "
        "exception). Releases before 0.26 were not read: capsim applies the 0.26 rule to them",
    ),
    VersionRule(
        "sm100_capture_ceiling",
        "default max_cudagraph_capture_size ceiling on SM100 (B200/B300); 512 elsewhere",
        512,
        1024,
        (0, 28),
        "vllm PR #49390 ('Raise Blackwell CUDA graph capture default to 1024'); "
        "config/vllm.py:_set_cudagraph_sizes has it in the 0.28.0 wheel, not in 0.27.0 "
        "(capsim/memory/release_rules.py)",
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmRules:
    """Every rule of ``RULES`` resolved for one release."""

    version: tuple[int, int]
    v1_engine: bool
    default_gmu: float
    charge_cudagraph_memory: bool
    gdn_capture_transient: bool
    large_gpu_batch_tier: bool
    async_scheduling: bool
    hybrid_prefix_caching_default: bool
    prefix_stats_at_admission: bool
    align_split_to_prefill_end: bool
    sm100_capture_ceiling: int

    @property
    def label(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    def capture_ceiling(self, gpu: GpuSpec) -> int:
        """Largest default CUDA-graph capture size on ``gpu``."""
        return self.sm100_capture_ceiling if gpu.is_sm100_family else 512

    def batch_defaults(self, gpu: GpuSpec, max_model_len: int | None = None) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens) vLLM's OpenAI server picks on ``gpu``.

        ``EngineArgs.get_batch_defaults``: >= 160 GiB -> 1024 / 16384 (since the
        ``large_gpu_batch_tier`` release); >= 70 GiB and not an A100 -> 1024 / 8192;
        otherwise 256 / 2048. The V0 engine (before ``v1_engine``) has no GPU tiers:
        ``v0_batch_defaults``.
        """
        if not self.v1_engine and max_model_len is not None:
            return v0_batch_defaults(max_model_len)
        mem = gpu.total_memory_bytes
        if mem >= 160 * GiB and self.large_gpu_batch_tier:
            return 1024, 16384
        if mem >= 70 * GiB and "a100" not in gpu.device_name.lower():
            return 1024, 8192
        return 256, 2048


# V0's long-context switch: chunked prefill is turned on by default above this max_model_len.
V0_LONG_CONTEXT_TOK: int = 32768


def v0_batch_defaults(max_model_len: int) -> tuple[int, int]:
    """The V0 engine's defaults, read in the vLLM 0.6.4.post1 wheel: ``EngineArgs.
    max_num_seqs = 256``; ``engine/arg_utils.py:create_engine_config`` turns chunked prefill
    on when ``max_model_len > 32768`` (text models on CUDA, no sliding window, no spec
    decode, no LoRA); ``config.py:SchedulerConfig`` then sets ``max_num_batched_tokens`` to
    512 with chunked prefill and to ``max(max_model_len, 2048)`` without it (the profile
    run covers the longest prompt)."""
    if max_model_len > V0_LONG_CONTEXT_TOK:
        return 256, 512
    return 256, max(max_model_len, 2048)


def parse_version(text: str) -> tuple[int, int]:
    """'0.26', 'v0.26.0', '0.10.2rc1' -> (0, 26); errors name the value."""
    raw = str(text).strip().lstrip("vV")
    parts = raw.split(".")
    try:
        major, minor = int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()))
    except (IndexError, ValueError):
        raise ValueError(f"vllm_version={text!r}: expected MAJOR.MINOR such as 0.33") from None
    return major, minor


def rules_for(version: str | tuple[int, int] = DEFAULT_VLLM_VERSION) -> VllmRules:
    v = parse_version(version) if isinstance(version, str) else tuple(version)
    values = {r.key: (r.since_value if v >= r.since else r.before) for r in RULES}
    return VllmRules(version=(int(v[0]), int(v[1])), **values)  # type: ignore[arg-type]


def rules_table() -> str:
    """The table as Markdown (for ``capsim memory --version-rules`` and the docs)."""
    lines = ["| rule | before | since | from | source |", "|---|---|---|---|---|"]
    for r in RULES:
        lines.append(
            f"| {r.key}: {r.what} | {r.before} | {r.since_value} | "
            f"{r.since[0]}.{r.since[1]} | {r.source} |"
        )
    return "\n".join(lines)


def resolve_gmu(gmu: float | None, vllm_version: str) -> float:
    """--gmu when given, else the release's default gpu_memory_utilization."""
    return float(gmu) if gmu is not None else rules_for(vllm_version).default_gmu
