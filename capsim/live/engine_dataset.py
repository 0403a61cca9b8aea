"""Length lists for `vllm bench serve --dataset-name custom`, from capsim's workloads.

A real-engine run with ShareGPT-like lengths needs prompts whose token counts are the
workload's own. The server tokenizes the prompt text itself, so each prompt here is built
from words that are one token each in the byte-level BPE tokenizer (" the", " house", ...):
the pre-tokenizer splits at every space, so n such words encode to exactly n tokens (checked
row by row against the tokenizer). Output lengths travel as `output_tokens` (with
`--ignore-eos` vLLM generates exactly that many). capsim simulates the same rows from the
CSV written beside the JSONL (`capsim simulate -w FILE.csv`).

A table with shared segments (e.g. workload ``shared-prefix``: system prompts shared by many
requests) is built segment by segment: each segment id gets one text of one-token words
drawn from an rng seeded by (seed, segment id), so requests that share a leading segment
share its tokens exactly and a real server's prefix cache can hit them. The CSV then carries
a ``segments`` column (``id:n;id:n``, covering prompt + output as in ``RequestTable``) that
``capsim.live.engine_oos`` attaches to the recorded run's requests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

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


def format_segments(segments: tuple[tuple[int, int], ...]) -> str:
    """``((id, n), ...)`` -> ``'id:n;id:n'`` (the CSV's ``segments`` column)."""
    return ";".join(f"{sid}:{n}" for sid, n in segments)


def parse_segments(text: str, where: str) -> tuple[tuple[int, int], ...]:
    """``'id:n;id:n'`` -> ``((id, n), ...)``; ``where`` names the row in the error."""
    out = []
    for part in str(text).split(";"):
        sid, sep, n = part.partition(":")
        try:
            if not sep:
                raise ValueError
            out.append((int(sid), int(n)))
        except ValueError:
            raise ValueError(f"{where}: segments={text!r} must be 'id:n;id:n'") from None
    return tuple(out)


def segment_word_idx(segment_id: int, num_tok: int, n_words: int, seed: int) -> np.ndarray:
    """The first ``num_tok`` word indices of segment ``segment_id``'s text: the same for
    every request and every call (rng seeded by ``(seed, segment_id)``; a prefix of a longer
    draw is the shorter draw, so the length asked for does not change the text)."""
    rng = np.random.default_rng([seed, segment_id % (1 << 64)])  # ids may be negative
    return rng.integers(0, n_words, size=num_tok)


def _prompt_runs(segments: tuple[tuple[int, int], ...], prompt_tok: int) -> list[tuple[int, int]]:
    """The ``(segment_id, num_tok)`` runs of the prompt part (segments cover prompt+output)."""
    runs, left = [], prompt_tok
    for sid, n in segments:
        if left <= 0:
            break
        runs.append((sid, min(n, left)))
        left -= n
    return runs


def workload_rows(
    workload: str, num_requests: int, seed: int, max_prompt_tok: int, max_output_tok: int
) -> RequestTable:
    """`num_requests` rows of a capsim workload whose lengths fit the caps (first rows
    of capsim's own sample, drawn twice as large to refill); shared segments, if the
    workload has them, are kept (the prompts are built from them)."""
    from capsim.traces import load_workload

    table = load_workload(workload, num_requests=num_requests * 2, seed=seed)
    keep = np.nonzero((table.prompt_tok <= max_prompt_tok) & (table.output_tok <= max_output_tok))[
        0
    ][:num_requests]
    if keep.size < num_requests:
        raise ValueError(f"workload {workload!r}: only {keep.size} rows fit the caps")
    rows = length_rows(table, keep, workload)
    if table.segments is None:
        return rows
    return dataclasses.replace(rows, segments=tuple(table.segments[i] for i in keep))


def write_custom_dataset(
    table: RequestTable, tokenizer_json: Path, jsonl: Path, csv: Path, seed: int = 0
) -> None:
    """The JSONL `vllm bench serve` reads and the CSV capsim reads, same rows, same order
    (with segments: prompts built from them, and a ``segments`` column in the CSV)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    words = single_token_words(tokenizer_json)
    if table.segments is not None:
        _write_segmented(table, tok, words, jsonl, csv, seed)
        return
    rng = np.random.default_rng(seed)
    lines, rows = [], ["prompt_tok,output_tok,source_id"]
    for p, o, sid in zip(table.prompt_tok, table.output_tok, table.source_id, strict=True):
        text = exact_prompt(words, int(p), rng)
        got = len(tok.encode(text, add_special_tokens=False).ids)
        if got != int(p):
            raise ValueError(f"row {sid}: prompt built to {p} tokens encodes to {got}")
        lines.append(json.dumps({"prompt": text, "output_tokens": int(o)}))
        rows.append(f"{int(p)},{int(o)},{sid}")
    _write_pair(jsonl, csv, lines, rows)


def _write_segmented(
    table: RequestTable,
    tok: Any,
    words: list[str],
    jsonl: Path,
    csv: Path,
    seed: int,
) -> None:
    """Prompts as the concatenated texts of their segments (see the module docstring);
    checks each row's token count and that rows sharing a leading segment share its ids."""
    assert table.segments is not None
    runs = [_prompt_runs(s, int(p)) for s, p in zip(table.segments, table.prompt_tok, strict=True)]
    need: dict[int, int] = {}
    for row in runs:
        for seg_id, n in row:
            need[seg_id] = max(need.get(seg_id, 0), n)
    idx = {seg_id: segment_word_idx(seg_id, n, len(words), seed) for seg_id, n in need.items()}
    lead: dict[int, list[int]] = {}  # leading segment id -> token ids of its first use
    lines, rows = [], ["prompt_tok,output_tok,source_id,segments"]
    for i, (p, o, sid) in enumerate(
        zip(table.prompt_tok, table.output_tok, table.source_id, strict=True)
    ):
        text = "".join(words[w] for seg_id, n in runs[i] for w in idx[seg_id][:n])
        ids = tok.encode(text, add_special_tokens=False).ids
        if len(ids) != int(p):
            raise ValueError(f"row {sid}: prompt built to {p} tokens encodes to {len(ids)}")
        first_id, first_n = runs[i][0]
        seen = lead.setdefault(first_id, ids[:first_n])
        n = min(first_n, len(seen))
        if ids[:n] != seen[:n]:
            raise ValueError(
                f"row {sid}: leading segment {first_id} does not encode to the same "
                f"{n} token ids as its first use"
            )
        lines.append(json.dumps({"prompt": text, "output_tokens": int(o)}))
        rows.append(f"{int(p)},{int(o)},{sid},{format_segments(table.segments[i])}")
    _write_pair(jsonl, csv, lines, rows)


def _write_pair(jsonl: Path, csv: Path, lines: list[str], rows: list[str]) -> None:
    for path, body in ((jsonl, "\n".join(lines) + "\n"), (csv, "\n".join(rows) + "\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(body)
        os.replace(tmp, path)
