"""Token-block identity without tokens: chained block hashes from content segments.

A request's token sequence (prompt, then output) is described as segments
``(segment_id, num_tok)``: two requests whose sequences start with the same segments
share those tokens (a system prompt, a conversation's history). vLLM hashes each *full*
block of ``block_size`` tokens as ``hash(parent_hash, tokens of the block, extras)``
(``v1/core/kv_cache_utils.py:hash_block_tokens``, ``get_request_block_hasher``), so a
block's hash names its whole prefix. Here the tokens of a block are replaced by the
segment pieces it covers, ``(segment_id, start, end)``, which is equal exactly when the
tokens are equal under the workload's sharing model.

Segment ids are ints (Python's int/tuple hashing is not salted per process, so runs are
reproducible).
"""

from __future__ import annotations

from collections.abc import Sequence

Segment = tuple[int, int]


def block_hashes(segments: Sequence[Segment], block_size_tok: int, num_tok: int) -> list[int]:
    """Chained hashes of the first ``num_tok // block_size_tok`` full blocks."""
    out: list[int] = []
    parent = 0
    pieces: list[tuple[int, int, int]] = []
    fill = 0
    pos = 0
    limit = num_tok - num_tok % block_size_tok
    for seg_id, length in segments:
        start = 0
        while start < length and pos < limit:
            take = min(length - start, block_size_tok - fill, limit - pos)
            pieces.append((seg_id, start, start + take))
            start += take
            fill += take
            pos += take
            if fill == block_size_tok:
                parent = hash((parent, tuple(pieces)))
                out.append(parent)
                pieces.clear()
                fill = 0
        if pos >= limit:
            break
    return out


def unique_segments(uid: int, num_tok: int) -> tuple[Segment, ...]:
    """A sequence shared with nobody (negative ids never collide with workload ids)."""
    return ((-1 - uid, num_tok),)
