"""Named workloads built from the shipped compact files, sampled the way vLLM's benchmark does.

``load_workload(name, num_requests=..., seed=...)`` needs no tokenizer and no ``shared/``:
token counts come from ``capsim/traces/data/*.parquet`` (or ``root``). The same name,
``num_requests``, ``seed`` and ``model`` always give the identical table.

Token counts follow the served model's tokenizer family: Qwen3.5 models use Qwen3.5 counts,
Qwen3-Next (and other Qwen3 names) Qwen3 counts (``shared/traces/NOTES.md`` §6).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

import numpy as np

from capsim.traces.burstgpt import burstgpt_standin
from capsim.traces.compact import read_compact
from capsim.traces.multiturn import load_multiturn
from capsim.traces.sampling import check_count, vllm_take_valid, vllm_valid
from capsim.traces.sharing import attach_system_prompt, parse_sys_suffix
from capsim.traces.spec_bench import VLLM_SPEC_BENCH_OUTPUT_TOK
from capsim.traces.synthetic import SYNTHETIC_PRESETS, synthetic_table
from capsim.traces.table import RequestTable

SHARED_PREFIX_DEFAULT = (16, 2048, 1.0)


class Loader(Protocol):
    def __call__(
        self, num_requests: int, seed: int, model: str, root: Path | None
    ) -> RequestTable: ...


@dataclass(frozen=True, slots=True)
class Workload:
    """One registry entry: the name, what it is (``capsim traces list``) and its loader
    ``(num_requests, seed, model, root) -> RequestTable``."""

    name: str
    description: str
    loader: Loader


def tokenizer_family(model: str) -> str:
    """``'qwen35'`` or ``'qwen3'`` for a model preset name (or a tokenizer family name)."""
    key = model.lower().replace("_", ".")
    if key.startswith(("qwen3.5", "qwen35", "qwen3.6")):
        return "qwen35"
    if key.startswith("qwen3"):
        return "qwen3"
    raise ValueError(
        f"model={model!r}: no token counts for its tokenizer; use a Qwen3.5 model "
        "(Qwen3.5 counts) or a Qwen3/Qwen3-Next model (Qwen3 counts)"
    )


def _labels(rows: np.ndarray, per_row: list[str]) -> tuple[str, ...]:
    """Source ids of the sampled rows, one string object per dataset row (an oversampled
    run of 10**7 requests shares them instead of holding 10**7 strings)."""
    # iterating the array (not rows.tolist()) holds one index object at a time
    return tuple(per_row[i] for i in rows)


def _sharegpt(num_requests: int, seed: int, family: str, root: Path | None) -> RequestTable:
    frame = read_compact("sharegpt", root)
    prompt = frame[f"{family}_prompt_tok"].to_numpy(np.int64)
    output = frame[f"{family}_output_tok"].to_numpy(np.int64)
    rows = np.asarray(vllm_take_valid(vllm_valid(prompt, output), num_requests, seed))
    entry = frame["entry_index"].to_numpy()
    return RequestTable(
        name="sharegpt",
        prompt_tok=prompt[rows],
        output_tok=output[rows],
        source_id=_labels(rows, [f"sharegpt:entry{int(e)}" for e in entry]),
    )


def _spec_bench(num_requests: int, seed: int, family: str, root: Path | None) -> RequestTable:
    frame = read_compact("spec_bench", root)
    prompt = frame[f"{family}_prompt_tok"].to_numpy(np.int64)
    # NOTE: vLLM builds SpecBench without --seed (always 0); pass seed=0 to match its order.
    rows = np.asarray(vllm_take_valid(np.ones(prompt.size, dtype=bool), num_requests, seed))
    qid = frame["question_id"].to_numpy()
    return RequestTable(
        name="spec-bench",
        prompt_tok=prompt[rows],
        output_tok=np.full(rows.size, VLLM_SPEC_BENCH_OUTPUT_TOK, dtype=np.int64),
        source_id=_labels(rows, [f"spec-bench:q{int(q)}" for q in qid]),
    )


def _azure(stem: str, num_requests: int, seed: int, root: Path | None) -> RequestTable:
    """A contiguous window of ``num_requests`` requests starting at a seeded row.

    Arrivals are shifted so the window starts at 0. If more requests are asked for than the
    trace holds, the trace is replayed back to back (each copy starts one mean gap after the
    previous one ends), the analogue of vLLM's oversampling.
    """
    frame = read_compact(stem, root)
    n = len(frame)
    arrival = frame["arrival_s"].to_numpy(np.float64)
    span_s = float(arrival[-1] - arrival[0])
    period_s = span_s + span_s / max(n - 1, 1)
    start = (
        int(np.random.default_rng(seed).integers(0, n - num_requests + 1))
        if num_requests <= n
        else 0
    )
    pos = start + np.arange(num_requests)
    rows = pos % n
    t = arrival[rows] + (pos // n) * period_s
    name = stem.replace("_", "-")
    return RequestTable(
        name=name,
        prompt_tok=frame["prompt_tok"].to_numpy(np.int64)[rows],
        output_tok=frame["output_tok"].to_numpy(np.int64)[rows],
        arrival_s=t - t[0],
        source_id=_labels(rows, [f"{name}:row{r}" for r in range(n)]),
    )


def _synthetic(name: str) -> Loader:
    def load(num_requests: int, seed: int, model: str, root: Path | None) -> RequestTable:
        return synthetic_table(
            SYNTHETIC_PRESETS[name], num_requests=num_requests, seed=seed, name=name
        )

    return load


def _azure_loader(stem: str) -> Loader:
    def load(num_requests: int, seed: int, model: str, root: Path | None) -> RequestTable:
        return _azure(stem, num_requests, seed, root)

    return load


def _burstgpt(num_requests: int, seed: int, model: str, root: Path | None) -> RequestTable:
    return burstgpt_standin(num_requests=num_requests, seed=seed)


def _by_tokenizer(load: Callable[[int, int, str, Path | None], RequestTable]) -> Loader:
    """A loader of per-tokenizer token counts: the model picks the family."""

    def load_for_model(num_requests: int, seed: int, model: str, root: Path | None) -> RequestTable:
        return load(num_requests, seed, tokenizer_family(model), root)

    return load_for_model


def _shared_prefix(num_requests: int, seed: int, model: str, root: Path | None) -> RequestTable:
    out = _with_system_prompt("sharegpt", SHARED_PREFIX_DEFAULT, num_requests, seed, model, root)
    return dataclasses.replace(out, name="shared-prefix")


def _entries(*rows: tuple[str, str, Loader]) -> MappingProxyType[str, Workload]:
    return MappingProxyType({name: Workload(name, desc, loader) for name, desc, loader in rows})


WORKLOAD_REGISTRY: MappingProxyType[str, Workload] = _entries(
    (
        "sharegpt",
        "ShareGPT V3 first turn pairs (17,400-entry subset), vLLM filter/shuffle/oversample; "
        "closed loop",
        _by_tokenizer(_sharegpt),
    ),
    (
        "spec-bench",
        "Spec-Bench 480 questions, turn 1 in the chat template, output 256 tokens "
        "(vLLM default); closed loop",
        _by_tokenizer(_spec_bench),
    ),
    (
        "synthetic-balanced",
        "vLLM-style random lengths, 1024 in / 1024 out; closed loop",
        _synthetic("synthetic-balanced"),
    ),
    (
        "synthetic-prefill-heavy",
        "vLLM-style random lengths, 8192 in / 1024 out; closed loop",
        _synthetic("synthetic-prefill-heavy"),
    ),
    (
        "synthetic-generation-heavy",
        "vLLM-style random lengths, 1024 in / 8192 out; closed loop",
        _synthetic("synthetic-generation-heavy"),
    ),
    (
        "burstgpt-standin",
        "STAND-IN, not BurstGPT data: BurstGPT-Perf's Zipf(1.1) length model below 1024; "
        "arrivals from the load generator",
        _burstgpt,
    ),
    (
        "sharegpt-multiturn",
        "ShareGPT V3 multi-turn conversations replayed turn by turn (prompt = history + new "
        "user message; next turn sent when the previous one finished); closed loop",
        _by_tokenizer(load_multiturn),
    ),
    (
        "shared-prefix",
        "ShareGPT first turns behind 16 shared system prompts of 2,048 tokens, Zipf(1.0) "
        "popularity (= 'sharegpt+sys=16,2048,1.0'); closed loop",
        _shared_prefix,
    ),
    (
        "azure-conv",
        "Azure LLM inference trace 2023, conversation service: timestamps + lengths",
        _azure_loader("azure_conv"),
    ),
    (
        "azure-code",
        "Azure LLM inference trace 2023, code service: timestamps + lengths (bursty)",
        _azure_loader("azure_code"),
    ),
)
"""Every named workload: a new one is one row here (plus its data under traces/data/)."""

WORKLOADS: MappingProxyType[str, str] = MappingProxyType(
    {name: w.description for name, w in WORKLOAD_REGISTRY.items()}
)
"""Name -> description (``capsim traces list``, the CLI's choices)."""


def _with_system_prompt(
    base: str,
    sys_prompt: tuple[int, int, float],
    num_requests: int,
    seed: int,
    model: str,
    root: Path | None,
) -> RequestTable:
    table = load_workload(base, num_requests=num_requests, seed=seed, model=model, root=root)
    n, tok, a = sys_prompt
    return attach_system_prompt(table, num_prompts=n, prompt_tok=tok, zipf_a=a, seed=seed)


def load_workload(
    name: str,
    *,
    num_requests: int,
    seed: int,
    model: str = "qwen3.5-35b-a3b",
    root: Path | None = None,
) -> RequestTable:
    """Sample ``num_requests`` requests of workload ``name`` (see ``WORKLOAD_REGISTRY``); a
    ``+sys=N,TOK[,A]`` suffix attaches shared system prompts (``capsim.traces.sharing``)."""
    base, sys_prompt = parse_sys_suffix(name)
    if sys_prompt is not None:
        return _with_system_prompt(base, sys_prompt, num_requests, seed, model, root)
    entry = WORKLOAD_REGISTRY.get(name)
    if entry is None:
        raise ValueError(f"workload name={name!r} is unknown; valid names: {sorted(WORKLOADS)}")
    check_count(num_requests, seed)
    return entry.loader(num_requests, seed, model, root)
