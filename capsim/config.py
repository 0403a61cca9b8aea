"""Typed, validated, frozen configuration for one simulated deployment point.

Every invalid value raises ``ValueError`` naming the field and the value. Defaults follow
the chosen ``vllm_version`` (``capsim.vllm_rules``: gpu_memory_utilization, the batch
tiers) as the CLI does, except where the published-runs preset says otherwise (prefix
caching off, depth-3 MTP chain). The default GPU is the measured one (H200); the
published grid names its B200 itself.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from capsim.commit_modes import COMMIT_MODES, CommitModeName, get_mode
from capsim.draft_rank import TREE_MODELS, temperature_factor
from capsim.drafter import DrafterSpec
from capsim.gpus import GpuSpec
from capsim.models import QUANT_METHOD_FORMATS, ModelSpec
from capsim.units import dtype_bytes

CommitMode = CommitModeName


MAX_NUM_REQUESTS = 10_000_000
"""Most requests one simulation accepts (a guard before allocating per-request arrays)."""
MAX_CONCURRENCY = 1_000_000
"""Most concurrent requests / max_num_seqs accepted."""
MAX_TOKENS = 2**31 - 1
"""Largest token count accepted for a length or a budget (vLLM keeps them in int32)."""
MAX_DRAFT_NODES = 1024
"""Most draft nodes per request per step (a tree of 10x10x10 has 1110)."""


def _fail(owner: str, name: str, value: object, why: str) -> None:
    raise ValueError(f"{owner}.{name}={value!r}: {why}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# The engine-overhead fits capsim.cost.engine_overhead ships (its ENGINE_OVERHEADS keys; a
# test keeps the two equal). Named here so the config check needs no import from cost/.
ENGINE_OVERHEAD_NAMES: tuple[str, ...] = ("measured-h200-vllm0.26",)


def engine_overhead_error(value: object) -> str | None:
    """Why ``value`` is not an engine-overhead fit (None: a registered name, a
    `capsim engine host-fit` JSON file that exists, or None)."""
    if value is None or value in ENGINE_OVERHEAD_NAMES:
        return None
    if not (isinstance(value, str) and value.endswith(".json")):
        return (
            f"choose one of {list(ENGINE_OVERHEAD_NAMES)} or a `capsim engine host-fit` JSON file"
        )
    return None if Path(value).is_file() else "no such file"


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """vLLM engine settings that shape the pool and the scheduler."""

    tp: int = field(default=1, metadata={"help": "tensor-parallel size"})
    gmu: float = field(
        default=None,  # type: ignore[assignment]  # resolved in __post_init__
        metadata={"help": "gpu_memory_utilization (None: the vllm_version's default; 0.33: 0.92)"},
    )
    max_num_seqs: int | None = field(
        default=None, metadata={"help": "None = vLLM's default for the GPU tier"}
    )
    max_num_batched_tokens: int | None = field(
        default=None, metadata={"help": "None = vLLM's default for the GPU tier"}
    )
    max_model_len: int | None = field(
        default=None, metadata={"help": "None = model max_position_embeddings"}
    )
    enable_chunked_prefill: bool = field(default=True, metadata={"help": "vLLM default on"})
    enable_prefix_caching: bool = field(
        default=None,  # type: ignore[assignment]  # resolved in __post_init__
        metadata={
            "help": "None: the vllm_version's default for hybrids (on since 0.28, mamba mode "
            "'align'); the published runs had it off (mode 'none')"
        },
    )
    kv_cache_dtype: str = field(default="bfloat16", metadata={"help": "attention KV dtype"})
    quantization: str | None = field(
        default=None,
        metadata={"help": "vLLM --quantization (None: the checkpoint's quantization_config)"},
    )
    max_cudagraph_capture_size: int | None = field(
        default=None, metadata={"help": "vLLM --max-cudagraph-capture-size (None: the rule's)"}
    )
    ssm_state_dtype: str | None = field(
        default=None, metadata={"help": "None = model default (fp32 for Qwen3.5)"}
    )
    conv_state_dtype: str = field(default="bfloat16", metadata={"help": "GDN conv state dtype"})
    kernel_block_align_tok: int = field(
        default=16,
        metadata={"help": "attention backend's minimum block (FA/FlashInfer on CUDA: 16)"},
    )
    block_size_tok: int | None = field(
        default=None, metadata={"help": "vLLM --block-size (None = 16, CacheConfig default)"}
    )
    watermark: float = field(default=0.0, metadata={"help": "scheduler watermark fraction"})
    subtract_cudagraph_memory: bool | None = field(
        default=None,
        metadata={"help": "charge CUDA-graph memory to the budget (None: the version's rule)"},
    )
    num_gpu_blocks_override: int | None = field(
        default=None, metadata={"help": "force num_blocks (vLLM's override)"}
    )
    # --- memory-plan inputs (issue 11) ---
    vllm_version: str = field(default="0.33", metadata={"help": "vLLM release to mirror"})
    kv_cache_memory_bytes: int | None = field(
        default=None, metadata={"help": "vLLM --kv-cache-memory: pin the pool, gmu ignored"}
    )
    limit_mm_per_prompt: int | None = field(
        default=None,
        metadata={"help": "images per prompt (0: text only, no vision tower; None: model's)"},
    )
    enforce_eager: bool = field(default=False, metadata={"help": "no CUDA graphs"})
    disable_custom_all_reduce: bool = field(
        default=False,
        metadata={"help": "vLLM --disable-custom-all-reduce (no custom all-reduce buffers)"},
    )
    engine_overhead: str | None = field(
        default=None,
        metadata={
            "help": "engine host cost per step by CUDA-graph mode, a fit of one real engine "
            "(capsim.cost.engine_overhead: 'measured-h200-vllm0.26'); None: kernels only"
        },
    )
    client_round_trip_ms: float | None = field(
        default=None,
        metadata={
            "help": "with engine_overhead and async scheduling: ms from a client's send to "
            "the request reaching vLLM's scheduler (API server + HTTP, both ways of a "
            "closed loop); None: the H200 fit, 22.7 ms (capsim.cost.engine_period)"
        },
    )
    async_scheduling: bool | None = field(
        default=None,
        metadata={
            "help": "vLLM --async-scheduling: two batches in flight (a finished request's slot "
            "and a new arrival reach the batch one step later); None: the vllm_version's "
            "default (on since 0.14; the CPU backend runs without)"
        },
    )
    cudagraph_full_graphs: bool = field(
        default=True,
        metadata={
            "help": "FULL decode graphs beside PIECEWISE (vLLM's default for hybrids; False: "
            "a backend without FULL graphs for drafts, vLLM falls back to PIECEWISE)"
        },
    )

    def __post_init__(self) -> None:
        o = "engine"
        from capsim.vllm_rules import parse_version, rules_for

        rules = rules_for(parse_version(self.vllm_version))
        if self.gmu is None:  # vLLM's default for the release, as the CLI resolves it
            object.__setattr__(self, "gmu", rules.default_gmu)
        if self.async_scheduling is None:
            object.__setattr__(self, "async_scheduling", rules.async_scheduling)
        if not isinstance(self.async_scheduling, bool):
            _fail(o, "async_scheduling", self.async_scheduling, "must be a bool or None")
        if self.enable_prefix_caching is None:  # EngineArgs' default for a hybrid model
            object.__setattr__(self, "enable_prefix_caching", rules.hybrid_prefix_caching_default)
        if not isinstance(self.enable_prefix_caching, bool):
            _fail(o, "enable_prefix_caching", self.enable_prefix_caching, "must be a bool")
        if not _is_int(self.tp) or self.tp < 1:
            _fail(o, "tp", self.tp, "must be an int >= 1")
        if not (_is_num(self.gmu) and 0.0 < self.gmu <= 1.0):
            _fail(o, "gmu", self.gmu, "must be in (0, 1]")
        for name, high in (
            ("max_num_seqs", MAX_CONCURRENCY),
            ("max_num_batched_tokens", MAX_TOKENS),
            ("max_model_len", MAX_TOKENS),
        ):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or not 1 <= value <= high):
                _fail(o, name, value, f"must be None or an int in [1, {high}]")
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 2:
            _fail(o, "num_gpu_blocks_override", self.num_gpu_blocks_override, "must be >= 2")
        if self.kv_cache_memory_bytes is not None and (
            not isinstance(self.kv_cache_memory_bytes, int) or self.kv_cache_memory_bytes < 1
        ):
            _fail(o, "kv_cache_memory_bytes", self.kv_cache_memory_bytes, "must be an int >= 1")
        if self.limit_mm_per_prompt is not None and self.limit_mm_per_prompt < 0:
            _fail(o, "limit_mm_per_prompt", self.limit_mm_per_prompt, "must be >= 0")
        if not 0.0 <= self.watermark < 1.0:
            _fail(o, "watermark", self.watermark, "must be in [0, 1)")
        if self.block_size_tok is not None and self.block_size_tok < 1:
            _fail(o, "block_size_tok", self.block_size_tok, "must be None or >= 1")
        if self.kernel_block_align_tok < 1:
            _fail(o, "kernel_block_align_tok", self.kernel_block_align_tok, "must be >= 1")
        dtype_bytes(self.kv_cache_dtype, field_name="engine.kv_cache_dtype")
        if self.quantization is not None and self.quantization not in QUANT_METHOD_FORMATS:
            _fail(
                o,
                "quantization",
                self.quantization,
                f"must be one of {sorted(QUANT_METHOD_FORMATS)}",
            )
        if self.max_cudagraph_capture_size is not None and (
            not _is_int(self.max_cudagraph_capture_size) or self.max_cudagraph_capture_size < 1
        ):
            _fail(o, "max_cudagraph_capture_size", self.max_cudagraph_capture_size, "must be >= 1")
        why = engine_overhead_error(self.engine_overhead)
        if why is not None:
            _fail(o, "engine_overhead", self.engine_overhead, why)
        rt = self.client_round_trip_ms
        if rt is not None:
            if isinstance(rt, bool) or not isinstance(rt, int | float) or not 0 <= rt <= 1e4:
                _fail(o, "client_round_trip_ms", rt, "must be a number of ms in [0, 10000]")
            if self.engine_overhead is None:
                _fail(o, "client_round_trip_ms", rt, "needs engine_overhead (the async period)")
        dtype_bytes(self.conv_state_dtype, field_name="engine.conv_state_dtype")
        if self.ssm_state_dtype is not None:
            dtype_bytes(self.ssm_state_dtype, field_name="engine.ssm_state_dtype")

    def model_for(self, model: ModelSpec) -> ModelSpec:
        """``model`` as this engine loads it: ``--quantization`` replaces the checkpoint's
        weight format."""
        if self.quantization is None:
            return model
        return replace(model, quantization=QUANT_METHOD_FORMATS[self.quantization])

    def resolved_batch_defaults(
        self, gpu: GpuSpec, model_max_len: int | None = None
    ) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens): given values, else vLLM's online-serving
        tier for ``gpu`` under ``vllm_version`` (``VllmRules.batch_defaults``; the V0
        engine's defaults follow max_model_len, ``model_max_len`` when none is set)."""
        from capsim.vllm_rules import rules_for

        max_len = self.max_model_len if self.max_model_len is not None else model_max_len
        seqs, tokens = rules_for(self.vllm_version).batch_defaults(gpu, max_len)
        seqs = self.max_num_seqs if self.max_num_seqs is not None else seqs
        tokens = self.max_num_batched_tokens if self.max_num_batched_tokens is not None else tokens
        return seqs, tokens

    def check_vllm_limits(self, gpu: GpuSpec, model_max_len: int) -> int:
        """Refuse what vLLM's engine arguments refuse (its wording); returns max_model_len.

        vLLM ``SchedulerConfig`` / ``ModelConfig`` checks: the token budget must cover
        ``max_num_seqs``; without chunked prefill it must cover ``max_model_len``; a
        ``max_model_len`` above the model's ``max_position_embeddings`` is refused.
        """
        seqs, tokens = self.resolved_batch_defaults(gpu, model_max_len)
        max_len = self.max_model_len if self.max_model_len is not None else model_max_len
        if self.max_model_len is not None and self.max_model_len > model_max_len:
            _fail(
                "engine",
                "max_model_len",
                self.max_model_len,
                f"User-specified max_model_len ({self.max_model_len}) is greater than the "
                f"derived max_model_len (max_position_embeddings={model_max_len})",
            )
        if tokens < seqs:
            _fail(
                "engine",
                "max_num_batched_tokens",
                tokens,
                f"max_num_batched_tokens ({tokens}) must be greater than or equal to "
                f"max_num_seqs ({seqs})",
            )
        if not self.enable_chunked_prefill and tokens < max_len:
            _fail(
                "engine",
                "max_num_batched_tokens",
                tokens,
                f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({max_len}); "
                "increase max_num_batched_tokens or decrease max_model_len",
            )
        return max_len


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceConfig:
    """Per-depth conditional acceptance of draft tokens.

    ``conditional[d]`` is P(the draft at depth d+1 is accepted | depths 1..d were), i.e. the
    probability that the target's token is the draft's top-1 candidate there. A tree of
    width w at a depth is accepted when the target's token is among the top w candidates:
    ``tree_model="rank"`` (default) uses the rank model calibrated on published top-k draft
    accuracies, ``"independent"`` the upper bound ``1 - (1 - p)**w``
    (``capsim/draft_rank.py`` has both, with sources). ``temperature`` > 0 (sampling
    instead of greedy verification) lowers every depth's acceptance by a cited linear
    factor. A list shorter than the draft depth repeats its last value.

    Default: one constant p such that a depth-3 chain emits 3.2 tokens per step on average
    (bonus included): p + p^2 + p^3 = 2.2 -> p = 0.8522. 3.2 is the published mean
    acceptance length of Qwen3.5's MTP head on spec-bench (issue #2; SPEC.md s5).
    """

    conditional: tuple[float, ...] = field(
        default=(0.8522,), metadata={"help": "per-depth conditional acceptance probabilities"}
    )
    tree_model: str = field(
        default="rank",
        metadata={"help": "draft-tree acceptance: rank (calibrated) | independent (upper bound)"},
    )
    temperature: float = field(
        default=0.0, metadata={"help": "sampling temperature of verification (0 = greedy)"}
    )

    def __post_init__(self) -> None:
        if self.tree_model not in TREE_MODELS:
            _fail("acceptance", "tree_model", self.tree_model, f"must be one of {TREE_MODELS}")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, float | int):
            _fail("acceptance", "temperature", self.temperature, "must be a number")
        temperature_factor(float(self.temperature))  # raises naming the field
        if not self.conditional:
            _fail("acceptance", "conditional", self.conditional, "must not be empty")
        for p in self.conditional:
            if not (isinstance(p, float | int) and 0.0 <= p <= 1.0 and math.isfinite(p)):
                _fail("acceptance", "conditional", self.conditional, "values must be in [0, 1]")

    def at_depth(self, depth: int) -> float:
        """Conditional acceptance at 1-based ``depth``."""
        return float(self.conditional[min(depth, len(self.conditional)) - 1])


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecDecodeConfig:
    """Speculative decoding: a chain of ``num_spec_tok`` MTP drafts or a tree of widths."""

    num_spec_tok: int = field(default=3, metadata={"help": "chain depth k (0 = no spec)"})
    tree_widths: tuple[int, ...] | None = field(
        default=None, metadata={"help": "per-depth branching widths, e.g. (2,2,2)"}
    )
    commit: CommitMode = field(default="storeall", metadata={"help": " | ".join(COMMIT_MODES)})
    acceptance: AcceptanceConfig = field(default_factory=AcceptanceConfig)
    drafter: DrafterSpec | None = field(
        default=None,
        repr=False,  # the reprs of MTP configs (keys of pinned digests) stay as they were
        metadata={"help": "an external draft model (vLLM speculative_config.model); None: MTP"},
    )

    def __post_init__(self) -> None:
        if self.drafter is not None and not isinstance(self.drafter, DrafterSpec):
            _fail("spec", "drafter", self.drafter, "must be a DrafterSpec or None")
        if not _is_int(self.num_spec_tok) or not 0 <= self.num_spec_tok <= MAX_DRAFT_NODES:
            _fail(
                "spec",
                "num_spec_tok",
                self.num_spec_tok,
                f"must be an int in [0, {MAX_DRAFT_NODES}]",
            )
        if self.commit not in COMMIT_MODES:
            _fail("spec", "commit", self.commit, f"must be one of {COMMIT_MODES}")
        if self.tree_widths is not None:
            widths = tuple(self.tree_widths)
            if not widths or any((not _is_int(w)) or w < 1 for w in widths):
                _fail("spec", "tree_widths", self.tree_widths, "every width must be an int >= 1")
            object.__setattr__(self, "tree_widths", widths)
            # k defaults to 3; a tree sets its own depth.
            object.__setattr__(self, "num_spec_tok", len(widths))
            if self.num_draft_nodes > MAX_DRAFT_NODES:
                _fail(
                    "spec",
                    "tree_widths",
                    self.tree_widths,
                    f"{self.num_draft_nodes} draft nodes; at most {MAX_DRAFT_NODES}",
                )

    @property
    def depth(self) -> int:
        return self.num_spec_tok

    @property
    def uses_mtp(self) -> bool:
        """Drafting with the target's own MTP layer (no external drafter)."""
        return self.num_spec_tok > 0 and self.drafter is None

    @property
    def v2_runner(self) -> bool:
        """The drafter makes vLLM select the V2 model runner."""
        return self.drafter is not None and self.drafter.uses_v2_runner

    @property
    def num_draft_nodes(self) -> int:
        """N: draft nodes verified per step (k for a chain; sum of prod(widths[:d]))."""
        if self.tree_widths is None:
            return self.num_spec_tok
        total, level = 0, 1
        for w in self.tree_widths:
            level *= w
            total += level
        return total

    @property
    def window_tok(self) -> int:
        """W = N + 1 tokens verified per decode step (root plus drafts)."""
        return self.num_draft_nodes + 1

    @property
    def state_slots_per_group(self) -> int:
        """GDN state slots (blocks) each GDN group holds per request."""
        return get_mode(self.commit).slots_per_group(self.window_tok)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadConfig:
    """How requests are offered, like ``vllm bench serve``."""

    mode: Literal["concurrency", "rate", "replay"] = field(
        default="concurrency", metadata={"help": "closed loop, open loop, or trace timestamps"}
    )
    concurrency: int | None = field(default=None, metadata={"help": "max requests in flight"})
    rate_req_per_s: float | None = field(default=None, metadata={"help": "open-loop rate"})
    burstiness: float = field(default=1.0, metadata={"help": "gamma shape of gaps (1=Poisson)"})
    num_requests: int = field(default=1000, metadata={"help": "requests to send"})

    def __post_init__(self) -> None:
        if self.mode not in ("concurrency", "rate", "replay"):
            _fail("load", "mode", self.mode, "must be concurrency, rate or replay")
        if self.mode == "concurrency" and self.concurrency is None:
            _fail("load", "concurrency", self.concurrency, "must be an int >= 1")
        if self.concurrency is not None and (
            not _is_int(self.concurrency) or not 1 <= self.concurrency <= MAX_CONCURRENCY
        ):
            _fail(
                "load", "concurrency", self.concurrency, f"must be an int in [1, {MAX_CONCURRENCY}]"
            )
        if self.mode == "rate" and (
            self.rate_req_per_s is None
            or not math.isfinite(self.rate_req_per_s)
            or self.rate_req_per_s <= 0
        ):
            _fail("load", "rate_req_per_s", self.rate_req_per_s, "must be a finite rate > 0")
        if not (_is_num(self.burstiness) and self.burstiness > 0):
            _fail("load", "burstiness", self.burstiness, "must be a finite number > 0")
        if not _is_int(self.num_requests) or not 1 <= self.num_requests <= MAX_NUM_REQUESTS:
            _fail(
                "load",
                "num_requests",
                self.num_requests,
                f"must be an int in [1, {MAX_NUM_REQUESTS}]",
            )

    @property
    def offered_load(self) -> float:
        """Concurrency or rate, whichever this load is defined by (replay: nan)."""
        if self.mode == "concurrency":
            return float(self.concurrency or 0)
        if self.mode == "rate":
            return float(self.rate_req_per_s or 0.0)
        return math.nan


ENGINE_FIELDS_OMITTED_AT_DEFAULT: dict[str, Any] = {
    "quantization": None,
    "max_cudagraph_capture_size": None,
    "engine_overhead": None,
    "client_round_trip_ms": None,
    # resolved from vllm_version (True since 0.14): omitted only when off, the behaviour the
    # stored point ids were computed with, so an async point never reuses a sync result
    "async_scheduling": False,
}
"""``EngineConfig`` fields newer than the sweep store's point ids -> their default: left
out of ``SimConfig.to_dict`` at that default (a new field with a default belongs here)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """One simulated point: deployment, speculative config, workload, load and seed."""

    model: str = field(default="qwen3.5-35b-a3b", metadata={"help": "preset or config.json"})
    gpu: str = field(
        default="H200", metadata={"help": "GPU registry name (default: the measured one, H200)"}
    )
    engine: EngineConfig = field(default_factory=EngineConfig)
    spec: SpecDecodeConfig = field(default_factory=SpecDecodeConfig)
    workload: str = field(default="sharegpt", metadata={"help": "workload name (capsim traces)"})
    load: LoadConfig = field(default_factory=lambda: LoadConfig(concurrency=64))
    seed: int = field(default=0, metadata={"help": "root seed of all random streams"})
    step_time: str = field(
        default="calibrated", metadata={"help": "step-time model: roofline | calibrated"}
    )

    def __post_init__(self) -> None:
        if not _is_int(self.seed) or not 0 <= self.seed < 2**63:
            _fail("sim", "seed", self.seed, "must be an int in [0, 2**63)")

    def model_spec(self) -> ModelSpec:
        """The model as this point's engine loads it: the preset or config.json, with
        ``engine.quantization`` (vLLM ``--quantization``) replacing the checkpoint's weight
        format, so weights, the pool and the step prices all see the same format."""
        from capsim.models import get_model

        return self.engine.model_for(get_model(self.model))

    def to_dict(self) -> dict[str, Any]:
        """``asdict``, less the engine fields added since the sweep store's point ids were
        fixed while they hold their defaults (``ENGINE_FIELDS_OMITTED_AT_DEFAULT``): the
        ids, and so the published outputs, stay byte-identical."""
        d = asdict(self)
        if d["spec"].get("drafter", None) is None:  # added after the ids were fixed
            d["spec"].pop("drafter", None)
        eng = d["engine"]
        for name, default in ENGINE_FIELDS_OMITTED_AT_DEFAULT.items():
            if eng.get(name, default) == default:
                eng.pop(name, None)
        return d
