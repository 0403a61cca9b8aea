"""The values the KV coordinators hand out: the block rule, allocations, cache hits, stats.

``BlockRule.attn_blocks`` is the one block rule, the same integer arithmetic for one
request and for a column of requests::

    attention blocks = num_attn_groups * cdiv(min(num_tok, max_model_len), block_size)

used by scalar allocation, batch allocation, admission and decode-run planning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import overload

import numpy as np


@dataclass(frozen=True, slots=True)
class BlockRule:
    """How many attention blocks ``num_tok`` token slots take (all attention groups)."""

    block_size_tok: int
    num_attn_groups: int
    max_model_len: int

    @overload
    def attn_blocks(self, num_tok: int) -> int: ...
    @overload
    def attn_blocks(self, num_tok: np.ndarray) -> np.ndarray: ...
    def attn_blocks(self, num_tok: int | np.ndarray) -> int | np.ndarray:
        """``groups * cdiv(min(num_tok, max_model_len), bs)``, for an int or an int array."""
        max_len = self.max_model_len
        if isinstance(num_tok, np.ndarray):
            if num_tok.size and num_tok.max() > max_len:  # else the clip changes nothing
                num_tok = np.minimum(num_tok, max_len)
        elif num_tok > max_len:
            num_tok = max_len
        bs = self.block_size_tok
        return (num_tok + (bs - 1)) // bs * self.num_attn_groups


@dataclass(frozen=True, slots=True)
class KVCacheBlocks:
    """What one allocation added (vLLM ``KVCacheBlocks`` hides the block lists from the
    scheduler; capsim's scheduler needs only that it succeeded). Counts per request in
    the batch form, ints otherwise."""

    num_attn_blocks: int | np.ndarray
    num_gdn_blocks: int | np.ndarray


@dataclass(slots=True)
class CacheHit:
    """Blocks a new request can restart from: per attention group, per GDN group."""

    num_tok: int = 0
    attn: list[list[int]] = field(default_factory=list)
    gdn: list[list[int]] = field(default_factory=list)
    junction_tok: int = 0
    """``shared_prefix_boundary``: how far attention hit when the GDN checkpoint
    stopped shorter (0 if not), where the prefill stops to store a checkpoint."""


NO_HIT = CacheHit()


@dataclass(slots=True)
class PrefixCacheStats:
    """vLLM ``PrefixCacheStats``: token counts of lookups (``vllm:prefix_cache_queries``,
    ``vllm:prefix_cache_hits``), preempted requests' lookups apart."""

    requests: int = 0
    queries_tok: int = 0
    hits_tok: int = 0
    preempted_requests: int = 0
    preempted_queries_tok: int = 0
    preempted_hits_tok: int = 0

    def record(self, num_tok: int, num_hit_tok: int, preempted: bool) -> None:
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries_tok += num_tok
            self.preempted_hits_tok += num_hit_tok
        else:
            self.requests += 1
            self.queries_tok += num_tok
            self.hits_tok += num_hit_tok
