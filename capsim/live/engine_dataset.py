"""Length lists for `vllm bench serve --dataset-name custom`, from capsim's workloads.

A real-engine run with ShareGPT-like lengths needs prompts whose token counts are the
workload's own. The server tokenizes the prompt text itself, so each prompt here is built
from words that are one token each in the byte-level BPE tokenizer (" the", " house", ...):
the pre-tokenizer splits at every space, so n such words encode to exactly n tokens (checked
row by row against the tokenizer). Output lengths travel as `output_tokens` (with
`--ignore-eos` vLLM generates exactly that many). capsim simulates the same rows from the
CSV written beside the JSONL (`capsim simulate -w FILE.csv`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from capsim.live.workload import length_rows
from capsim.traces.table import RequestTable

_WORD = re.compile(r"^\u0120[a-z]{3,9}$")  # "Ġword": a space + 3-9 lowercase letters


def single_token_words(tokenizer_json: Path, limit: int = 4096) -> list[str]:
    """Up to `limit` words (with their leading space) that are one token each."""
    vocab = json.loads(Path(tokenizer_json).read_text())["model"]["vocab"]
    words = sorted((i, w) for w, i in vocab.items() if _WORD.match(w))
    return [" " + w[1:] for _, w in words[:limit]]


def exact_prompt(words: list[str], n_tok: int, rng: np.random.Generator) -> str:
    """A prompt of n_tok one-token words drawn at random (no shared prefixes)."""
    idx = rng.integers(0, len(words), size=n_tok)
    return "".join(words[i] for i in idx)


def workload_rows(
    workload: str, num_requests: int, seed: int, max_prompt_tok: int, max_output_tok: int
) -> RequestTable:
    """`num_requests` rows of a capsim workload whose lengths fit the caps (first rows
    of capsim's own sample, drawn twice as large to refill)."""
    from capsim.traces import load_workload

    table = load_workload(workload, num_requests=num_requests * 2, seed=seed)
    keep = np.nonzero((table.prompt_tok <= max_prompt_tok) & (table.output_tok <= max_output_tok))[
        0
    ][:num_requests]
    if keep.size < num_requests:
        raise ValueError(f"workload {workload!r}: only {keep.size} rows fit the caps")
    return length_rows(table, keep, workload)


def write_custom_dataset(
    table: RequestTable, tokenizer_json: Path, jsonl: Path, csv: Path, seed: int = 0
) -> None:
    """The JSONL `vllm bench serve` reads and the CSV capsim reads, same rows, same order."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    words = single_token_words(tokenizer_json)
    rng = np.random.default_rng(seed)
    lines, rows = [], ["prompt_tok,output_tok,source_id"]
    for p, o, sid in zip(table.prompt_tok, table.output_tok, table.source_id, strict=True):
        text = exact_prompt(words, int(p), rng)
        got = len(tok.encode(text, add_special_tokens=False).ids)
        if got != int(p):
            raise ValueError(f"row {sid}: prompt built to {p} tokens encodes to {got}")
        lines.append(json.dumps({"prompt": text, "output_tokens": int(o)}))
        rows.append(f"{int(p)},{int(o)},{sid}")
    for path, body in ((jsonl, "\n".join(lines) + "\n"), (csv, "\n".join(rows) + "\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(body)
        os.replace(tmp, path)
