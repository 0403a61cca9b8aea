"""The scheduler's only view of memory: one shared block pool, hybrid groups.

``KVCacheManager`` plays vLLM 0.33's ``v1/core/kv_cache_manager.py``: it owns the pool,
the prefix-cache stats and the ONE coordinator chosen for the run from its ``PoolLayout``
(``get_kv_cache_coordinator``: ``KVCacheCoordinatorNoPrefixCache`` with caching off,
``HybridKVCacheCoordinator`` with caching on), which is the only writer of block state
(the pool, the per-type managers and the per-request block counters
``num_attn_blocks``/``num_gdn_blocks``). One block id belongs to one group at a time
(VLLM.md s2.5).

The contract with the scheduler is one value: ``allocate_slots`` (and its batch form
``allocate_slots_batch``, and ``admit`` on the store's columns) returns the
``KVCacheBlocks`` it added, or ``None`` when memory is short, and then nothing has
changed; the scheduler then preempts (running) or stops admitting (waiting).

The null block (id 0) is not part of ``usable_blocks``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capsim.core.block_pool import BlockPool
from capsim.core.kv_blocks import NO_HIT, BlockRule, CacheHit, KVCacheBlocks, PrefixCacheStats
from capsim.core.kv_coordinator import get_kv_cache_coordinator
from capsim.core.request import Request, RequestColumns

__all__ = ["CacheHit", "KVCacheBlocks", "KVCacheManager", "PoolLayout", "PrefixCacheStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLayout:
    """What the KV manager needs from the memory plan."""

    block_size_tok: int
    num_blocks: int
    num_gdn_groups: int = 3
    gdn_slots_per_request: int = 1
    num_attn_groups: int = 1
    lookahead_tok: int = 0
    max_model_len: int = 1 << 30
    watermark: float = 0.0
    pending_blocks_per_request: int = 0  # TreeWY deferred commit's pending window
    enable_caching: bool = False
    max_num_batched_tokens: int = 1 << 30
    """Largest prefill chunk (align-mode split: a block wider than this is split)."""
    align_split_before_0_27: bool = False
    """vLLM <= 0.26's align-mode chunk cut (``capsim.vllm_rules`` "align_split_to_prefill_end")."""

    def __post_init__(self) -> None:
        if self.block_size_tok < 1:
            raise ValueError(f"pool.block_size_tok={self.block_size_tok} must be >= 1")
        if self.num_blocks < 2:
            raise ValueError(f"pool.num_blocks={self.num_blocks} must be >= 2 (null block + 1)")
        for name in (
            "num_gdn_groups",
            "gdn_slots_per_request",
            "num_attn_groups",
            "lookahead_tok",
            "pending_blocks_per_request",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"pool.{name}={getattr(self, name)} must be >= 0")

    @property
    def usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def gdn_blocks_per_request(self) -> int:
        return self.num_gdn_groups * self.gdn_slots_per_request + self.pending_blocks_per_request

    @property
    def num_spec_blocks(self) -> int:
        """``MambaSpec.num_speculative_blocks``: store-all's extra slots per group."""
        return max(self.gdn_slots_per_request - 1, 0)

    @property
    def block_rule(self) -> BlockRule:
        return BlockRule(self.block_size_tok, self.num_attn_groups, self.max_model_len)


class KVCacheManager:
    """Block accounting for all groups of one pool, through the run's coordinator."""

    __slots__ = ("coordinator", "gdn_blocks_per_request", "layout", "pool", "prefix_stats", "rule")

    def __init__(self, layout: PoolLayout) -> None:
        self.layout = layout
        self.pool = BlockPool(layout.num_blocks, enable_caching=layout.enable_caching)
        self.rule = layout.block_rule
        self.gdn_blocks_per_request = layout.gdn_blocks_per_request
        self.prefix_stats = PrefixCacheStats()
        self.coordinator = get_kv_cache_coordinator(layout, self.pool)

    # -- gauges ---------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc`` = 1 - free / (num_blocks - 1)."""
        return self.usage_at(self.pool.num_free_blocks)

    def usage_at(self, num_free_blocks: int) -> float:
        """``usage`` with ``num_free_blocks`` free."""
        return 1.0 - num_free_blocks / self.layout.usable_blocks

    @property
    def num_cached_free_blocks(self) -> int:
        """Free blocks still holding a cached prefix (evictable)."""
        return self.pool.num_cached_free

    @property
    def enable_caching(self) -> bool:
        return self.layout.enable_caching

    def attn_blocks_for(self, num_tok: int) -> int:
        return self.rule.attn_blocks(num_tok)

    # -- prefix cache -----------------------------------------------------------------------
    def find_cache_hit(self, req: Request) -> CacheHit:
        """``get_computed_blocks``: the longest prefix every group can restart from."""
        return self.coordinator.find_cache_hit(req)

    def record_hit(self, req: Request, hit: CacheHit) -> None:
        """``PrefixCacheStats.record``: at admission since vLLM 0.27 (lookups of a request
        that stays waiting do not count), on every lookup in 0.26 and before
        (``SchedulerConfig.prefix_stats_per_lookup``, the caller decides when)."""
        self.prefix_stats.record(req.num_tokens, hit.num_tok, req.num_preemptions > 0)

    def new_step(self) -> None:
        """``new_step_starts``: checkpoints hashed last step become usable."""
        self.coordinator.new_step()

    def align_split(self, req: Request, num_new_tok: int, hit_tok: int = 0) -> int:
        """The GDN "align"-mode chunk cut (caching on; unchanged otherwise)."""
        return self.coordinator.align_split(req, num_new_tok, hit_tok)

    def steady_mask(
        self, cols: RequestColumns, slots: np.ndarray, new_tok: np.ndarray, lookahead_tok: int
    ) -> np.ndarray:
        """Caching on: the running requests whose ``align_split`` and ``allocate_slots``
        would change nothing for up to ``new_tok`` new tokens (``hybrid_coordinator``)."""
        return self.coordinator.steady_mask(cols, slots, new_tok, lookahead_tok)

    def steady_context_tok(
        self, slots: np.ndarray, window_tok: int, lookahead_tok: int
    ) -> np.ndarray:
        """Caching on: per decoding request, the largest computed count at which a decode
        step changes no block."""
        return self.coordinator.steady_context_tok(slots, window_tok, lookahead_tok)

    # -- admission gate and allocation --------------------------------------------------------
    def full_sequence_fits(self, req: Request, hit: CacheHit = NO_HIT) -> bool:
        """Admission gate (``scheduler_reserve_full_isl``): the whole current sequence
        (prompt + outputs so far, not max_tokens) plus the GDN slots plus the watermark
        must fit in the free blocks. Checks only; allocates nothing."""
        return self.coordinator.full_sequence_fits(req, hit)

    def allocate_slots(
        self, req: Request, num_new_tok: int, lookahead_tok: int, hit: CacheHit = NO_HIT
    ) -> KVCacheBlocks | None:
        """Grow ``req``'s blocks for the step; None (nothing changed) if they do not fit."""
        return self.coordinator.allocate(req, num_new_tok, lookahead_tok, hit)

    def admit(
        self, cols: RequestColumns, slot: int, num_new_tok: int, lookahead_tok: int, gate: bool
    ) -> KVCacheBlocks | None:
        """Caching off: ``full_sequence_fits`` (when ``gate``) then ``allocate_slots`` for
        the stored request in ``slot``, on the store's columns (the admission loop)."""
        return self.coordinator.admit(cols, slot, num_new_tok, lookahead_tok, gate)

    def allocate_slots_batch(
        self,
        cols: RequestColumns,
        slots: np.ndarray,
        end_tok: np.ndarray,
        active: np.ndarray | None = None,
    ) -> KVCacheBlocks | None:
        """``allocate_slots`` for a whole running batch (caching off): each active request
        grows to ``end_tok`` token slots. All or nothing."""
        return self.coordinator.allocate_batch(cols, slots, end_tok, active)

    def commit_growth(
        self, cols: RequestColumns, slots: np.ndarray, attn_blocks: np.ndarray, taken: int
    ) -> None:
        """A planned decode run's allocations (``taken`` blocks in all; caching on: none)."""
        self.coordinator.commit_growth(cols, slots, attn_blocks, taken)

    def free(self, req: Request) -> None:
        """Return every block of ``req`` (finish or preemption)."""
        self.coordinator.free(req)

    def free_batch(self, cols: RequestColumns, slots: np.ndarray) -> None:
        """``free`` for many finished requests (caching off)."""
        self.coordinator.free_batch(cols, slots)

    def block_ids(self, req: Request) -> dict[int, list[int]]:
        """Block table per group id (caching on), null blocks as 0 (for tests)."""
        return self.coordinator.block_ids(req)

    def forget(self, req: Request) -> None:
        """Drop per-request memos of a finished request."""
        self.coordinator.forget(req)
