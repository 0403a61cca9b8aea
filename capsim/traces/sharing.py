"""Shared prefixes: system prompts on any workload, and the ideal prefix hit rate.

``attach_system_prompt``: ``num_prompts`` system prompts of ``prompt_tok`` tokens each; a
request picks one with Zipf popularity (prompt rank ``r`` = 1..N drawn with probability
proportional to ``r**-zipf_a``; ``zipf_a = 0`` is uniform), seeded. The system prompt is
prepended: the request's prompt grows by ``prompt_tok`` and its content becomes
``[system prompt r] + [its own tokens]`` (its own tokens keep their segments if the table
had some, e.g. a multi-turn history).

Workload-name suffix: ``NAME+sys=N,TOK[,A]`` attaches N system prompts of TOK tokens with
Zipf exponent A (default 1.0) to workload NAME, e.g. ``sharegpt+sys=16,2048,1.1``.

``ideal_prefix_hits``: per request, the tokens an infinite prefix cache would serve: the
longest prefix shared with the computed tokens (prompt + output - 1) of any earlier
request, capped at ``prompt - 1`` tokens (vLLM recomputes the last prompt token), rounded
down to whole blocks of ``block_size_tok``. Requests are taken to finish in table order,
which holds for turns of one conversation (``parent``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from capsim.core.block_hash import Segment, unique_segments
from capsim.traces.table import RequestTable

SYSTEM_SEGMENT_BASE = 1 << 48
"""Segment ids of system prompts (above every conversation id)."""


def _check(name: str, value: float, low: float) -> None:
    if not value >= low:
        raise ValueError(f"system prompt {name}={value!r} must be >= {low}")


def attach_system_prompt(
    table: RequestTable, *, num_prompts: int, prompt_tok: int, zipf_a: float = 1.0, seed: int = 0
) -> RequestTable:
    """``table`` with one of ``num_prompts`` shared system prompts prepended to each request."""
    _check("num_prompts", num_prompts, 1)
    _check("prompt_tok", prompt_tok, 1)
    _check("zipf_a", zipf_a, 0.0)
    weights = np.arange(1, num_prompts + 1, dtype=np.float64) ** -float(zipf_a)
    rng = np.random.default_rng([seed, 0x5157])
    pick = rng.choice(num_prompts, size=table.num_requests, p=weights / weights.sum())
    own = table.segments or tuple(
        unique_segments(i, int(p + o))
        for i, (p, o) in enumerate(zip(table.prompt_tok, table.output_tok, strict=True))
    )
    segments = tuple(
        ((SYSTEM_SEGMENT_BASE + int(r), prompt_tok), *segs)
        for r, segs in zip(pick, own, strict=True)
    )
    return dataclasses.replace(
        table,
        name=f"{table.name}+sys={num_prompts},{prompt_tok},{zipf_a:g}",
        prompt_tok=table.prompt_tok + prompt_tok,
        segments=segments,
    )


def parse_sys_suffix(name: str) -> tuple[str, tuple[int, int, float] | None]:
    """``'base+sys=N,TOK[,A]'`` -> ``('base', (N, TOK, A))``; no suffix -> ``(name, None)``."""
    base, sep, arg = name.partition("+sys=")
    if not sep:
        return name, None
    parts = arg.split(",")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        n, tok = int(parts[0]), int(parts[1])
        a = float(parts[2]) if len(parts) == 3 else 1.0
    except ValueError:
        raise ValueError(
            f"workload={name!r}: the system-prompt suffix must be '+sys=N,TOK[,ZIPF_A]'"
        ) from None
    return base, (n, tok, a)


def ideal_prefix_hits(table: RequestTable, block_size_tok: int = 1) -> np.ndarray:
    """Hit tokens per request with an infinite cache (see the module docstring)."""
    if block_size_tok < 1:
        raise ValueError(f"block_size_tok={block_size_tok} must be >= 1")
    hits = np.zeros(table.num_requests, dtype=np.int64)
    if table.segments is None:
        return hits
    # prefix of whole segments -> {next segment id: longest cached run of it}
    seen: dict[tuple[Segment, ...], dict[int, int]] = {}
    for i, segs in enumerate(table.segments):
        prompt = int(table.prompt_tok[i])
        cap = prompt - 1
        got = 0
        for j, (sid, n) in enumerate(segs):
            run = seen.get(tuple(segs[:j]), {}).get(sid, 0)
            got += min(run, n)
            if run < n or got >= cap:
                break
        hits[i] = min(got, cap) // block_size_tok * block_size_tok
        # record what this request computed: prompt + output - 1 tokens
        left = prompt + int(table.output_tok[i]) - 1
        for j, (sid, n) in enumerate(segs):
            if left <= 0:
                break
            slot = seen.setdefault(tuple(segs[:j]), {})
            slot[sid] = max(slot.get(sid, 0), min(n, left))
            left -= n
    return hits


def ideal_hit_rate(table: RequestTable, block_size_tok: int = 1) -> float:
    """Sum of ideal hit tokens over sum of prompt tokens."""
    return float(ideal_prefix_hits(table, block_size_tok).sum() / table.prompt_tok.sum())
