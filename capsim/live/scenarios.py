"""Request sets and engine settings for the step-exact cross-check against live vLLM.

A scenario is what both sides run: vLLM's real engine (``experiments/live/trace_vllm.py``,
in the live venv) and capsim's scheduler (``capsim.live.stepcheck``). Requests arrive by
engine-loop iteration (``arrival_step``), not by time, so the two sequences can be
compared step by step. Each built-in scenario says which behaviour it provokes.

Sizes are chosen so vLLM accepts them: the block size is a multiple of 32 (CPU
attention, shared/LIVE_VLLM.md s7) and ``(num_gpu_blocks - 1) * block_size`` covers
``max_model_len`` (the null block, s6.1). For the hybrid the attention block size is the
one vLLM derives (page unification), so pool sizes are given in blocks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

MODELS: tuple[str, ...] = ("llama", "qwen3next", "qwen3next_mtp")


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveRequest:
    req_id: str
    prompt_tok: int
    output_tok: int
    arrival_step: int = 0
    prompt_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("prompt_tok", "output_tok"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"request {self.req_id}: {name}={getattr(self, name)} must be >= 1"
                )
        if self.arrival_step < 0:
            raise ValueError(
                f"request {self.req_id}: arrival_step={self.arrival_step} must be >= 0"
            )
        if self.prompt_ids is not None and len(self.prompt_ids) != self.prompt_tok:
            raise ValueError(
                f"request {self.req_id}: prompt_ids has {len(self.prompt_ids)} ids, "
                f"prompt_tok={self.prompt_tok}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveEngine:
    block_size: int = 32
    num_gpu_blocks: int = 40
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 512
    max_model_len: int = 512
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    # vLLM --mamba-ssm-cache-dtype. "auto" is host dependent on vLLM's CPU build (fp32 with
    # AVX-512 BF16, else the model's bf16: capsim.live.stepcheck.vllm_cpu_ssm_state_dtype);
    # a scenario whose pressure is tuned to one page size pins it.
    mamba_ssm_cache_dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.mamba_ssm_cache_dtype not in ("auto", "float32", "float16", "bfloat16"):
            raise ValueError(
                f"engine.mamba_ssm_cache_dtype={self.mamba_ssm_cache_dtype!r}: "
                "expected auto, float32, float16 or bfloat16"
            )
        if self.block_size < 32 or self.block_size % 32:
            raise ValueError(
                f"engine.block_size={self.block_size}: vLLM CPU needs a multiple of 32"
            )
        for name in ("num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"engine.{name}={getattr(self, name)} must be >= 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    name: str
    model: str = field(metadata={"help": "tiny model folder name (MODELS)"})
    engine: LiveEngine
    requests: tuple[LiveRequest, ...]
    speculative_config: dict[str, Any] | None = None
    covers: str = ""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"scenario {self.name}: model={self.model!r} must be one of {MODELS}")
        if not self.requests:
            raise ValueError(f"scenario {self.name}: requests must not be empty")
        ids = [r.req_id for r in self.requests]
        if len(set(ids)) != len(ids):
            raise ValueError(f"scenario {self.name}: req_id values must be unique")
        if any("-" in i for i in ids):
            raise ValueError(f"scenario {self.name}: req_id must not contain '-' (vLLM suffix)")

    @property
    def num_spec_tok(self) -> int:
        if not self.speculative_config:
            return 0
        return int(self.speculative_config.get("num_speculative_tokens", 0))

    def to_json(self, model_dir: str) -> dict[str, Any]:
        d = asdict(self)
        d["model_dir"] = model_dir
        d["requests"] = [
            {k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items() if v is not None}
            for r in d["requests"]
        ]
        return d


def _uniform(
    n: int, prompt_tok: int, output_tok: int, every: int = 0, prefix: str = "r"
) -> tuple[LiveRequest, ...]:
    return tuple(
        LiveRequest(
            req_id=f"{prefix}{i}",
            prompt_tok=prompt_tok,
            output_tok=output_tok,
            arrival_step=i * every,
        )
        for i in range(n)
    )


def _mixed(n: int, seed: int, every: int) -> tuple[LiveRequest, ...]:
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    prompts = rng.integers(40, 700, size=n)
    outputs = rng.integers(20, 160, size=n)
    return tuple(
        LiveRequest(req_id=f"m{i}", prompt_tok=int(p), output_tok=int(o), arrival_step=i * every)
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    )


NGRAM_K3: dict[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}


def _repetitive(
    n: int, prompt_tok: int, output_tok: int, every: int, period: int = 7
) -> tuple[LiveRequest, ...]:
    """Prompts that repeat a short pattern, so ngram drafts find matches."""
    reqs = []
    for i in range(n):
        pattern = [10 + 17 * i + j for j in range(period)]
        ids = tuple((pattern * (prompt_tok // period + 1))[:prompt_tok])
        reqs.append(
            LiveRequest(
                req_id=f"s{i}",
                prompt_tok=prompt_tok,
                output_tok=output_tok,
                arrival_step=every * i,
                prompt_ids=ids,
            )
        )
    return tuple(reqs)


def _shared_prefix(
    n: int,
    prefixes: tuple[int, ...],
    suffix_tok: int,
    output_tok: int,
    every: int,
    seed: int,
    prefix: str,
) -> tuple[LiveRequest, ...]:
    """Request i = system prompt ``i % len(prefixes)`` (``prefixes[j]`` tokens) + its own
    ``suffix_tok`` tokens: prefix-cache hits, partial and full, and LRU eviction."""
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    systems = [tuple(int(t) for t in rng.integers(3, 512, size=p)) for p in prefixes]
    reqs = []
    for i in range(n):
        ids = systems[i % len(systems)] + tuple(
            int(t) for t in rng.integers(3, 512, size=suffix_tok)
        )
        reqs.append(
            LiveRequest(
                req_id=f"{prefix}{i}",
                prompt_tok=len(ids),
                output_tok=output_tok,
                arrival_step=i * every,
                prompt_ids=ids,
            )
        )
    return tuple(reqs)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="llama_preempt",
            model="llama",
            covers="recompute preemption under FCFS; all admitted in step 0 (budget = 8 x 64)",
            engine=LiveEngine(
                block_size=32,
                num_gpu_blocks=40,
                max_num_seqs=8,
                max_num_batched_tokens=512,
                max_model_len=512,
            ),
            requests=_uniform(8, 64, 400),
        ),
        Scenario(
            name="llama_chunked",
            model="llama",
            covers="chunked prefill (budget 256), admission limited by blocks and by "
            "max_num_seqs, staggered arrivals, preemption",
            engine=LiveEngine(
                block_size=32,
                num_gpu_blocks=48,
                max_num_seqs=6,
                max_num_batched_tokens=256,
                max_model_len=1024,
            ),
            requests=_mixed(14, seed=7, every=6),
        ),
        Scenario(
            name="qwen3next_preempt",
            model="qwen3next",
            covers="hybrid page unification (derived attention block size), 3 GDN groups + "
            "1 attention group in one pool, admission by blocks, recompute preemption",
            engine=LiveEngine(
                block_size=32,
                num_gpu_blocks=14,
                max_num_seqs=4,
                max_num_batched_tokens=256,
                max_model_len=1024,
            ),
            requests=_uniform(4, 200, 700, every=3, prefix="h"),
        ),
        Scenario(
            name="qwen3next_ngram",
            model="qwen3next",
            covers="store-all spec decode on the hybrid (ngram k=3): 1+k GDN blocks per "
            "group per request, drafts per step, rollback of rejected drafts",
            engine=LiveEngine(
                block_size=32,
                num_gpu_blocks=24,
                max_num_seqs=4,
                max_num_batched_tokens=512,
                max_model_len=1024,
            ),
            speculative_config=NGRAM_K3,
            requests=_repetitive(3, 100, 200, every=0),
        ),
        Scenario(
            name="qwen3next_ngram_staggered",
            model="qwen3next",
            covers="ngram k=3 on the hybrid with staggered arrivals (prefill chunks next to "
            "verify steps): vLLM 0.32's CPU GDN kernel fails here (recorded as an error)",
            engine=LiveEngine(
                block_size=32,
                num_gpu_blocks=24,
                max_num_seqs=4,
                max_num_batched_tokens=256,
                max_model_len=1024,
            ),
            speculative_config=NGRAM_K3,
            requests=_repetitive(4, 120, 300, every=2),
        ),
        Scenario(
            name="qwen3next_mtp",
            model="qwen3next_mtp",
            covers="store-all spec decode with an MTP draft (k=2) on the hybrid: the MTP "
            "attention layer joins the pool (2 attention + 3 GDN layers -> group size 2), "
            "1+k GDN blocks per group, k lookahead slots (a 543-token prompt admitted whole "
            "needs a 2nd 544-token block only with the lookahead), recompute preemption; "
            "the fp32 state is pinned (544 = 32 * cdiv(268288, 32 * 512) on every host)",
            engine=LiveEngine(
                block_size=32,
                num_gpu_blocks=24,
                max_num_seqs=4,
                max_num_batched_tokens=1024,
                max_model_len=1024,
                mamba_ssm_cache_dtype="float32",
            ),
            speculative_config={"method": "mtp", "num_speculative_tokens": 2},
            requests=(
                LiveRequest(req_id="t0", prompt_tok=543, output_tok=300, arrival_step=0),
                LiveRequest(req_id="t1", prompt_tok=300, output_tok=400, arrival_step=0),
                LiveRequest(req_id="t2", prompt_tok=400, output_tok=500, arrival_step=3),
            ),
        ),
    )
}


def _hybrid_prefix_engine(num_gpu_blocks: int) -> LiveEngine:
    """The engine of the hybrid prefix-caching scenarios (model length 2048, 768-token
    chunks, 4 requests at a time); only the pool size differs between them."""
    return LiveEngine(
        block_size=32,
        num_gpu_blocks=num_gpu_blocks,
        max_num_seqs=4,
        max_num_batched_tokens=768,
        max_model_len=2048,
        enable_prefix_caching=True,
    )


PREFIX_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="llama_prefix",
        model="llama",
        covers="prefix caching on (attention only): hits on two shared system prompts, "
        "partial hits, cached blocks evicted in LRU order under a small pool, preemption",
        engine=LiveEngine(
            block_size=32,
            num_gpu_blocks=36,
            max_num_seqs=6,
            max_num_batched_tokens=256,
            max_model_len=1024,
            enable_prefix_caching=True,
        ),
        requests=_shared_prefix(12, (200, 120), 40, 120, every=5, seed=11, prefix="p"),
    ),
    Scenario(
        name="qwen3next_prefix",
        model="qwen3next",
        covers="prefix caching on the hybrid (GDN 'align' mode): chunks cut at block "
        "boundaries, GDN checkpoints, hits that need both attention and GDN groups",
        engine=_hybrid_prefix_engine(num_gpu_blocks=40),
        requests=_shared_prefix(6, (1200,), 150, 100, every=4, seed=12, prefix="a"),
    ),
    Scenario(
        name="qwen3next_mtp_prefix",
        model="qwen3next_mtp",
        covers="prefix caching on the hybrid with MTP k=2 (align mode + speculation): "
        "k speculative GDN blocks, the EAGLE one-block drop of the hit",
        engine=_hybrid_prefix_engine(num_gpu_blocks=48),
        speculative_config={"method": "mtp", "num_speculative_tokens": 2},
        requests=_shared_prefix(6, (1700,), 150, 100, every=4, seed=13, prefix="b"),
    ),
    Scenario(
        name="qwen3next_ngram_prefix",
        model="qwen3next",
        covers="prefix caching on the hybrid with ngram k=3 drafts (store-all slots in "
        "align mode, no EAGLE drop)",
        engine=_hybrid_prefix_engine(num_gpu_blocks=48),
        speculative_config=NGRAM_K3,
        requests=_shared_prefix(6, (1200,), 150, 100, every=4, seed=14, prefix="n"),
    ),
)
SCENARIOS.update({s.name: s for s in PREFIX_SCENARIOS})

CI_SCENARIOS: tuple[str, ...] = ("llama_preempt", "qwen3next_preempt")


def get_scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise ValueError(f"scenario={name!r} is unknown: choose one of {sorted(SCENARIOS)}")
    return SCENARIOS[name]
