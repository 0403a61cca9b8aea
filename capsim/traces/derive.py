"""Build the compact workload files from ``shared/traces`` (run by
``scripts/derive_traces/derive.py``).

Inputs (``shared/traces``): the raw ShareGPT subset, Spec-Bench questions and Azure traces, and
the upstream per-entry token counts in ``derived/*.csv``. Each raw file is parsed with capsim's
loaders and checked against the derived CSV (entry index, id, turn count, characters), so the
counts are tied to the text they came from. Token counts then come from:

- ``counts="derived"`` (default): the upstream CSVs; with ``verify_sample > 0`` a seeded sample
  of ShareGPT entries and all Spec-Bench questions are recounted with the tokenizers and must
  match exactly (needs ``tokenizers`` and ``tiktoken``);
- ``counts="tokenizer"``: every text recounted with the tokenizers (about a minute).

Both give the same files when the upstream counts are right. Spec-Bench prompts are counted
inside the chat template (vLLM always applies it); the Qwen3.5 template overhead is taken to be
Qwen3's (per question from the CSV, 8 tokens for all 480) and is checked by the recount.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.traces.azure import read_azure
from capsim.traces.compact import write_compact
from capsim.traces.sharegpt import read_sharegpt
from capsim.traces.spec_bench import read_spec_bench
from capsim.traces.tokenize import TokenCounter, qwen3_counter, qwen35_counter, templated

SHAREGPT_RAW = "raw/sharegpt/ShareGPT_V3_unfiltered_cleaned_split.first17671.json.gz"
SHAREGPT_DERIVED = "derived/sharegpt_first17671_first_turn_pair_lengths.csv"
SPEC_BENCH_RAW = "raw/spec_bench/question.jsonl"
SPEC_BENCH_DERIVED = "derived/spec_bench_question_lengths.csv"
AZURE_RAW = {
    "azure_conv": "raw/azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "azure_code": "raw/azure_llm_2023/AzureLLMInferenceTrace_code.csv",
}
QWEN3_TOKENIZER = "tokenizers/qwen3/tokenizer.json"
QWEN35_TOKENIZER = "tokenizers/qwen3.5/qwen3_5.tiktoken"


@dataclass(frozen=True, slots=True)
class Counters:
    qwen3: TokenCounter
    qwen35: TokenCounter


def load_counters(shared: Path) -> Counters:
    return Counters(
        qwen3=qwen3_counter(shared / QWEN3_TOKENIZER),
        qwen35=qwen35_counter(shared / QWEN35_TOKENIZER),
    )


def _mismatch(what: str, got: object, want: object) -> ValueError:
    return ValueError(f"derive: {what}: raw file gives {got!r}, derived CSV says {want!r}")


def derive_sharegpt(
    shared: Path, *, counts: str, verify_sample: int, counters: Counters | None
) -> pd.DataFrame:
    parsed = read_sharegpt(shared / SHAREGPT_RAW)
    csv = pd.read_csv(shared / SHAREGPT_DERIVED)
    pairs = parsed.pairs
    if len(csv) != len(pairs):
        raise _mismatch("ShareGPT >=2-turn entries", len(pairs), len(csv))
    for col, got in (
        ("index", [p.index for p in pairs]),
        ("id", [p.entry_id for p in pairs]),
        ("n_turns", [p.num_turns for p in pairs]),
        ("chars0", [len(p.prompt) for p in pairs]),
        ("chars1", [len(p.completion) for p in pairs]),
    ):
        want = csv[col].tolist()
        if got != want:
            bad = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
            raise _mismatch(f"ShareGPT {col} of row {bad}", got[bad], want[bad])
    cols = ["qwen3_prompt", "qwen3_output", "qwen35_prompt", "qwen35_output"]
    upstream = {c: csv[f"{c}_tokens"].to_numpy(np.int64) for c in cols}
    if counts == "tokenizer":
        assert counters is not None
        values = {
            "qwen3_prompt": [counters.qwen3(p.prompt) for p in pairs],
            "qwen3_output": [counters.qwen3(p.completion) for p in pairs],
            "qwen35_prompt": [counters.qwen35(p.prompt) for p in pairs],
            "qwen35_output": [counters.qwen35(p.completion) for p in pairs],
        }
        final = {c: np.asarray(v, dtype=np.int64) for c, v in values.items()}
    else:
        final = upstream
        if verify_sample > 0:
            assert counters is not None
            picks = random.Random(0).sample(range(len(pairs)), min(verify_sample, len(pairs)))
            for i in picks:
                p = pairs[i]
                got = (
                    counters.qwen3(p.prompt),
                    counters.qwen3(p.completion),
                    counters.qwen35(p.prompt),
                    counters.qwen35(p.completion),
                )
                want = tuple(int(upstream[c][i]) for c in cols)
                if got != want:
                    raise _mismatch(f"ShareGPT token counts of entry {p.index}", got, want)
    return pd.DataFrame(
        {
            "entry_index": np.asarray([p.index for p in pairs], dtype=np.int32),
            **{f"{c}_tok": final[c].astype(np.int32) for c in cols},
        }
    )


def derive_spec_bench(
    shared: Path, *, counts: str, verify_sample: int, counters: Counters | None
) -> pd.DataFrame:
    questions = read_spec_bench(shared / SPEC_BENCH_RAW)
    csv = pd.read_csv(shared / SPEC_BENCH_DERIVED)
    for col, got in (
        ("question_id", [q.question_id for q in questions]),
        ("category", [q.category for q in questions]),
        ("turn1_chars", [len(q.first_turn) for q in questions]),
    ):
        if got != csv[col].tolist():
            raise _mismatch(f"Spec-Bench {col}", got[:5], csv[col].tolist()[:5])
    q3_raw = csv["qwen3_turn1_tokens"].to_numpy(np.int64)
    q3_tmpl = csv["qwen3_turn1_chat_templated_tokens"].to_numpy(np.int64)
    q35_raw = csv["qwen35_turn1_tokens"].to_numpy(np.int64)
    q35_tmpl = q35_raw + (q3_tmpl - q3_raw)
    if counts == "tokenizer" or verify_sample > 0:
        assert counters is not None
        texts = [q.first_turn for q in questions]
        got = {
            "qwen3_raw": np.asarray([counters.qwen3(t) for t in texts]),
            "qwen3_templated": np.asarray([counters.qwen3(templated(t)) for t in texts]),
            "qwen35_raw": np.asarray([counters.qwen35(t) for t in texts]),
            "qwen35_templated": np.asarray([counters.qwen35(templated(t)) for t in texts]),
        }
        if counts == "tokenizer":
            q3_raw, q3_tmpl = got["qwen3_raw"], got["qwen3_templated"]
            q35_raw, q35_tmpl = got["qwen35_raw"], got["qwen35_templated"]
        else:
            for name, want in (
                ("qwen3_raw", q3_raw),
                ("qwen3_templated", q3_tmpl),
                ("qwen35_raw", q35_raw),
                ("qwen35_templated", q35_tmpl),
            ):
                if not np.array_equal(got[name], want):
                    bad = int(np.argmax(got[name] != want))
                    raise _mismatch(
                        f"Spec-Bench {name} of question {questions[bad].question_id}",
                        int(got[name][bad]),
                        int(want[bad]),
                    )
    return pd.DataFrame(
        {
            "question_id": np.asarray([q.question_id for q in questions], dtype=np.int32),
            "category": pd.Series([q.category for q in questions], dtype=object),
            "qwen3_raw_tok": np.asarray(q3_raw, dtype=np.int32),
            "qwen3_prompt_tok": np.asarray(q3_tmpl, dtype=np.int32),
            "qwen35_raw_tok": np.asarray(q35_raw, dtype=np.int32),
            "qwen35_prompt_tok": np.asarray(q35_tmpl, dtype=np.int32),
        }
    )


def derive_azure(shared: Path, stem: str) -> pd.DataFrame:
    table = read_azure(shared / AZURE_RAW[stem], name=stem.replace("_", "-"))
    return pd.DataFrame(
        {
            "arrival_s": table.arrival_s,
            "prompt_tok": table.prompt_tok.astype(np.int32),
            "output_tok": table.output_tok.astype(np.int32),
        }
    )


def derive_frames(
    shared: Path, *, counts: str = "derived", verify_sample: int = 0
) -> dict[str, pd.DataFrame]:
    """All compact frames, in memory."""
    if counts not in ("derived", "tokenizer"):
        raise ValueError(f"counts={counts!r} must be 'derived' or 'tokenizer'")
    if verify_sample < 0:
        raise ValueError(f"verify_sample={verify_sample!r} must be >= 0")
    shared = Path(shared)
    counters = load_counters(shared) if counts == "tokenizer" or verify_sample > 0 else None
    kw = {"counts": counts, "verify_sample": verify_sample, "counters": counters}
    return {
        "sharegpt": derive_sharegpt(shared, **kw),
        "spec_bench": derive_spec_bench(shared, **kw),
        "azure_conv": derive_azure(shared, "azure_conv"),
        "azure_code": derive_azure(shared, "azure_code"),
    }


def derive_all(
    shared: Path, out_dir: Path, *, counts: str = "derived", verify_sample: int = 0
) -> list[Path]:
    """Derive and write every compact file into ``out_dir``."""
    frames = derive_frames(shared, counts=counts, verify_sample=verify_sample)
    return [write_compact(stem, frame, Path(out_dir)) for stem, frame in frames.items()]
