"""The KV-cache coordinator: one class per run, chosen once, fanning out to the groups.

Plays vLLM 0.33 ``v1/core/kv_cache_coordinator.py``: ``get_kv_cache_coordinator`` picks
``KVCacheCoordinatorNoPrefixCache`` when prefix caching is off and
``HybridKVCacheCoordinator`` (one attention group type + one GDN group type) when it is
on; ``KVCacheManager`` holds the one it got and never asks again.

Every attention-block count comes from the one block rule, ``kv_blocks.BlockRule``.

The contract (vLLM ``allocate_slots``): ``allocate(...)`` returns the ``KVCacheBlocks``
it added, or ``None`` when memory is short, and then nothing has changed; the batch form
``allocate_batch`` is all or nothing under the same contract.

Caching off (mamba_cache_mode "none"): blocks are counted, not named::

    attention groups : BlockRule.attn_blocks(computed + new + lookahead)
    GDN groups       : num_gdn_groups * gdn_slots_per_request (+ the TreeWY pending
                       window), all taken with the first chunk and held until the request
                       finishes or is preempted

Caching on: see ``capsim.core.hybrid_coordinator``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from capsim.core.block_pool import BlockPool
from capsim.core.hybrid_coordinator import HybridKVCacheCoordinator
from capsim.core.kv_blocks import NO_HIT, CacheHit, KVCacheBlocks
from capsim.core.request import Request, RequestColumns

if TYPE_CHECKING:
    from capsim.core.kv_manager import PoolLayout


class KVCacheCoordinatorNoPrefixCache:
    """Caching off: blocks counted per request in the store's columns."""

    __slots__ = ("gdn_blocks_per_request", "layout", "pool", "rule", "watermark_blocks")

    def __init__(self, layout: PoolLayout, pool: BlockPool) -> None:
        self.layout = layout
        self.pool = pool
        self.rule = layout.block_rule
        self.gdn_blocks_per_request = layout.gdn_blocks_per_request
        self.watermark_blocks = int(layout.watermark * layout.num_blocks)

    # -- lookups that only matter with caching on ---------------------------------------
    def find_cache_hit(self, req: Request) -> CacheHit:
        return NO_HIT

    def align_split(self, req: Request, num_new_tok: int, hit_tok: int = 0) -> int:
        return num_new_tok

    def new_step(self) -> None:
        """Nothing is hashed, nothing becomes usable."""

    def forget(self, req: Request) -> None:
        """No per-request memos."""

    def block_ids(self, req: Request) -> dict[int, list[int]]:
        return {}

    def steady_mask(
        self, cols: RequestColumns, slots: np.ndarray, new_tok: np.ndarray, lookahead_tok: int
    ) -> np.ndarray:
        """No request is steady here (the caps are a prefix-caching notion, kept by the
        named-block coordinator): every one goes through ``allocate``. The scheduler's
        caching-off path uses the batch allocation instead and never asks."""
        return np.zeros(np.shape(slots), dtype=bool)

    def steady_context_tok(
        self, slots: np.ndarray, window_tok: int, lookahead_tok: int
    ) -> np.ndarray:
        """-1 per request: no computed count at which a decode step is known to change no
        block (as ``steady_mask``: nothing is steady without the caps)."""
        return np.full(np.shape(slots), -1, dtype=np.int64)

    # -- one request ----------------------------------------------------------------------
    def full_sequence_fits(self, req: Request, hit: CacheHit = NO_HIT) -> bool:
        need = self.rule.attn_blocks(req.num_tokens) + self.gdn_blocks_per_request
        return need + self.watermark_blocks <= self.pool.num_free_blocks

    def _grow(self, held_attn: int, held_gdn: int, end_tok: int) -> tuple[int, int] | None:
        extra_attn = max(self.rule.attn_blocks(end_tok) - held_attn, 0)
        extra_gdn = self.gdn_blocks_per_request if held_gdn == 0 else 0
        if extra_attn + extra_gdn > self.pool.num_free_blocks:
            return None
        self.pool.take(extra_attn + extra_gdn)
        return extra_attn, extra_gdn

    def allocate(
        self, req: Request, num_new_tok: int, lookahead_tok: int, hit: CacheHit = NO_HIT
    ) -> KVCacheBlocks | None:
        end_tok = req.num_computed_tok + num_new_tok + lookahead_tok
        grown = self._grow(req.num_attn_blocks, req.num_gdn_blocks, end_tok)
        if grown is None:
            return None
        req.num_attn_blocks += grown[0]
        req.num_gdn_blocks += grown[1]
        return KVCacheBlocks(*grown)

    def admit(
        self, cols: RequestColumns, slot: int, num_new_tok: int, lookahead_tok: int, gate: bool
    ) -> KVCacheBlocks | None:
        """The admission gate (``full_sequence_fits``, when ``gate``) then ``allocate``
        for the stored request in ``slot``, read straight from the columns."""
        if gate:
            num_tok = cols.prompt_tok.item(slot) + cols.num_output_tok.item(slot)
            need = self.rule.attn_blocks(num_tok) + self.gdn_blocks_per_request
            if need + self.watermark_blocks > self.pool.num_free_blocks:
                return None
        end_tok = cols.num_computed_tok.item(slot) + num_new_tok + lookahead_tok
        held_attn = cols.num_attn_blocks.item(slot)
        held_gdn = cols.num_gdn_blocks.item(slot)
        grown = self._grow(held_attn, held_gdn, end_tok)
        if grown is None:
            return None
        cols.num_attn_blocks[slot] = held_attn + grown[0]
        cols.num_gdn_blocks[slot] = held_gdn + grown[1]
        return KVCacheBlocks(*grown)

    def free(self, req: Request) -> None:
        self.pool.give(req.num_attn_blocks + req.num_gdn_blocks)
        req.num_attn_blocks = 0
        req.num_gdn_blocks = 0

    # -- a batch ----------------------------------------------------------------------------
    def allocate_batch(
        self,
        cols: RequestColumns,
        slots: np.ndarray,
        end_tok: np.ndarray,
        active: np.ndarray | None = None,
    ) -> KVCacheBlocks | None:
        """``allocate`` for a whole running batch: each active request (all when
        ``active`` is None) grows to ``end_tok`` token slots (computed + new +
        lookahead). All or nothing."""
        extra_attn = self.rule.attn_blocks(end_tok)
        held_attn = cols.num_attn_blocks[slots]
        extra_attn -= held_attn
        np.maximum(extra_attn, 0, out=extra_attn)
        if active is not None:
            extra_attn[~active] = 0
        total = int(extra_attn.sum())
        held_gdn = cols.num_gdn_blocks[slots]
        # GDN slots come with a request's first chunk, so a running request nearly always
        # holds them already; only the exceptions are looked at
        no_gdn = None
        per_req = self.gdn_blocks_per_request
        if per_req and not held_gdn.all():
            no_gdn = held_gdn == 0
            if active is not None:
                no_gdn &= active
            total += int(np.count_nonzero(no_gdn)) * per_req
        if total > self.pool.num_free_blocks:
            return None
        self.pool.take(total)
        held_attn += extra_attn
        cols.num_attn_blocks[slots] = held_attn
        extra_gdn: np.ndarray | int = 0
        if no_gdn is not None:
            extra_gdn = no_gdn * per_req
            held_gdn += extra_gdn
            cols.num_gdn_blocks[slots] = held_gdn
        return KVCacheBlocks(extra_attn, extra_gdn)

    def commit_growth(
        self, cols: RequestColumns, slots: np.ndarray, attn_blocks: np.ndarray, taken: int
    ) -> None:
        """Requests ``slots`` now hold ``attn_blocks`` attention blocks, ``taken`` from the
        pool in all (a planned decode run's allocations, checked by the planner)."""
        self.pool.take(taken)
        cols.num_attn_blocks[slots] = attn_blocks

    def free_batch(self, cols: RequestColumns, slots: np.ndarray) -> None:
        self.pool.give(int(cols.num_attn_blocks[slots].sum() + cols.num_gdn_blocks[slots].sum()))
        cols.num_attn_blocks[slots] = 0
        cols.num_gdn_blocks[slots] = 0


def get_kv_cache_coordinator(
    layout: PoolLayout, pool: BlockPool
) -> KVCacheCoordinatorNoPrefixCache | HybridKVCacheCoordinator:
    """vLLM ``get_kv_cache_coordinator``: the coordinator for this run's layout."""
    if layout.enable_caching:
        return HybridKVCacheCoordinator(layout, pool)
    return KVCacheCoordinatorNoPrefixCache(layout, pool)
