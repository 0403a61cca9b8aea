"""The scheduler's only view of memory: one shared block pool, hybrid groups.

``KVCacheManager`` is the only writer of block state (the pool, the per-type managers
and the per-request block counters ``num_attn_blocks``/``num_gdn_blocks``). It plays
vLLM 0.33's ``KVCacheManager`` + ``KVCacheCoordinator`` (``v1/core/kv_cache_manager.py``,
``v1/core/kv_cache_coordinator.py``). One block id belongs to one group at a time
(VLLM.md s2.5).

Prefix caching off (mamba_cache_mode "none"): blocks are counted, not named::

    attention groups : num_attn_groups * cdiv(min(computed + new + lookahead, max_len), bs)
    GDN groups       : num_gdn_groups * gdn_slots_per_request, all taken with the first
                       chunk and held until the request finishes or is preempted

``allocate_running_bulk`` applies the same rule to a whole running batch at once (the
scheduler's vectorised path).

Prefix caching on (``PoolLayout.enable_caching``; GDN groups in "align" mode): blocks are
named (``BlockPool``) and each group has its manager (``single_type``). Per request:

- admission: ``find_cache_hit`` returns the longest prefix that every group can restart
  from, capped at ``num_tokens - 1`` (``get_computed_blocks``): attention blocks from the
  start (one dropped with an MTP/EAGLE drafter), then the right-most GDN checkpoint at
  or below that length (``HybridKVCacheCoordinator.find_longest_cache_hit``, the "simple
  hybrid" single pass); the attention hit is cut back to the checkpoint. Each lookup is
  counted in ``prefix_stats`` as vLLM's ``PrefixCacheStats.record`` does;
- ``allocate_slots``: free the skipped GDN blocks (``remove_skipped_blocks``), count the
  blocks to allocate (hit blocks that sit in the free queue count, they leave it), touch
  the hit, allocate, then hash every newly full block (``cache_blocks``, up to
  ``min(computed + new, num_tokens)``);
- ``free``: every group's blocks, tail first, to the back of the free queue; the hashed
  ones stay findable until reused (LRU eviction).

The null block (id 0) is not part of ``usable_blocks``. ``allocate_slots`` returns False
when memory is short (and changes nothing); the scheduler then preempts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from capsim.core.block_hash import block_hashes, unique_segments
from capsim.core.block_pool import BlockPool
from capsim.core.request import Request
from capsim.core.single_type import FullAttentionManager, MambaManager
from capsim.units import cdiv


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


@dataclass(slots=True)
class CacheHit:
    """Blocks a new request can restart from: per attention group, per GDN group."""

    num_tok: int = 0
    attn: list[list[int]] = field(default_factory=list)
    gdn: list[list[int]] = field(default_factory=list)
    junction_tok: int = 0
    """``shared_prefix_boundary``: how far attention hit when the GDN checkpoint
    stopped shorter (0 if not), where the prefill stops to store a checkpoint."""


_NO_HIT = CacheHit()


class KVCacheManager:
    """Block accounting for all groups of one pool."""

    __slots__ = (
        "_attn_groups",
        "_attn_mgrs",
        "_bs",
        "_budget",
        "_gdn_mgrs",
        "_hashes",
        "_junction",
        "_max_len",
        "_pending",
        "_pending_n",
        "_use_eagle",
        "gdn_blocks_per_request",
        "layout",
        "pool",
        "prefix_stats",
    )

    def __init__(self, layout: PoolLayout) -> None:
        self.layout = layout
        self.pool = BlockPool(layout.num_blocks, enable_caching=layout.enable_caching)
        self._bs = layout.block_size_tok
        self._attn_groups = layout.num_attn_groups
        self.gdn_blocks_per_request = layout.gdn_blocks_per_request
        self._max_len = layout.max_model_len
        self._use_eagle = layout.lookahead_tok > 0
        self._budget = layout.max_num_batched_tokens
        self.prefix_stats = PrefixCacheStats()
        self._hashes: dict[int, list[int]] = {}
        self._junction: dict[int, int] = {}
        # TreeWY deferred commit's pending window (caching on): un-hashed blocks taken on a
        # request's first allocation and held until it is freed (never cached)
        self._pending: dict[int, list[int]] = {}
        self._pending_n = layout.pending_blocks_per_request
        # group order as vLLM builds it for Qwen hybrids: the first layer is a GDN layer,
        # so the GDN groups come before the attention group
        g = layout.num_gdn_groups
        self._gdn_mgrs = [
            MambaManager(self.pool, i, self._bs, layout.num_spec_blocks) for i in range(g)
        ]
        self._attn_mgrs = [
            FullAttentionManager(self.pool, g + i, self._bs) for i in range(self._attn_groups)
        ]

    # -- gauges ---------------------------------------------------------------------
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
        return self._attn_groups * cdiv(min(num_tok, self._max_len), self._bs)

    # -- prefix cache ---------------------------------------------------------------
    def _request_hashes(self, req: Request) -> list[int]:
        """Hashes of every full block of the request's whole sequence (prompt + outputs);
        only the computed ones are ever cached."""
        h = self._hashes.get(req._slot)
        if h is None:
            total = req.prompt_tok + req.max_output_tok
            segs = req.segments or unique_segments(req._slot, total)
            h = block_hashes(segs, self._bs, total)
            self._hashes[req._slot] = h
        return h

    def find_cache_hit(self, req: Request) -> CacheHit:
        """``get_computed_blocks``: the longest prefix every group can restart from."""
        if not self.layout.enable_caching:
            return _NO_HIT
        bs = self._bs
        hashes = self._request_hashes(req)[: req.num_tokens // bs]
        max_len = req.num_tokens - 1
        attn_ids = [m.group for m in self._attn_mgrs]
        gdn_ids = [m.group for m in self._gdn_mgrs]
        hit_len = max_len
        attn: list[list[int]] = [[] for _ in attn_ids]
        if attn_ids:
            attn = FullAttentionManager.find_hit(
                self.pool, attn_ids, hashes, max_len, bs, self._use_eagle
            )
            hit_len = len(attn[0]) * bs
        gdn: list[list[int]] = [[] for _ in gdn_ids]
        longest = hit_len if attn_ids else 0
        if gdn_ids:
            gdn = MambaManager.find_hit(self.pool, gdn_ids, hashes, hit_len, bs)
            hit_len = len(gdn[0]) * bs
            for lst in attn:
                del lst[hit_len // bs :]
        junction = longest if longest > hit_len else 0
        self._junction[req._slot] = junction
        return CacheHit(num_tok=hit_len, attn=attn, gdn=gdn, junction_tok=junction)

    def record_hit(self, req: Request, hit: CacheHit) -> None:
        """``PrefixCacheStats.record`` at admission (vLLM 0.32 records then, so lookups
        of a request that stays waiting do not count)."""
        self.prefix_stats.record(req.num_tokens, hit.num_tok, req.num_preemptions > 0)

    def new_step(self) -> None:
        """``new_step_starts``: checkpoints hashed last step become usable."""
        for g in self._gdn_mgrs:
            g.cached_this_step.clear()

    def align_split(self, req: Request, num_new_tok: int, hit_tok: int = 0) -> int:
        """``Scheduler._mamba_block_aligned_split`` (vLLM 0.32, no fine-grained hits, no
        backend-internal prefill checkpoints): while prefilling, a chunk that does not
        reach the end of the prefill ends on a block boundary; a chunk never runs past
        the next block boundary when it starts mid-block, past the last cacheable
        boundary (``get_mamba_prefill_checkpoint_position``: ``num_tokens - 1`` floored
        to a block, one block less with an MTP/EAGLE drafter), or past the block-floored
        shared-prefix junction. The state at a chunk end on a boundary is the
        checkpoint that later requests restart from."""
        if not (self.layout.enable_caching and self._gdn_mgrs):
            return num_new_tok
        start = req.num_computed_tok + hit_tok
        prefill_end = max(req.prompt_tok, req.num_tokens - 1)
        if start >= prefill_end:
            return num_new_tok
        bs = self._bs
        if self._use_eagle:
            last = max(req.num_tokens // bs * bs - bs, 0)
        else:
            last = max((req.num_tokens - 1) // bs * bs, 0)
        end = start + num_new_tok
        if end < prefill_end:
            aligned = end // bs * bs
            if aligned > start or bs <= self._budget:
                end = aligned
        junction = self._junction.get(req._slot, 0)
        stops = (
            (start // bs + 1) * bs if start % bs else 0,
            last,
            start + (junction - start) // bs * bs if start < junction < end else 0,
        )
        end = min((x for x in stops if start < x < end), default=end)
        return max(end - start, 0)

    # -- admission gate -------------------------------------------------------------
    def full_sequence_fits(self, req: Request, hit: CacheHit = _NO_HIT) -> bool:
        """Admission gate (``scheduler_reserve_full_isl``): the whole current sequence
        (prompt + outputs so far, not max_tokens) plus the GDN slots plus the watermark
        must fit in the free blocks. Checks only; allocates nothing."""
        watermark = int(self.layout.watermark * self.layout.num_blocks)
        if not self.layout.enable_caching:
            need = self.attn_blocks_for(req.num_tokens) + self.gdn_blocks_per_request
            return need + watermark <= self.pool.num_free_blocks
        need = self._blocks_to_allocate(req, req.num_tokens, req.num_tokens, hit)
        return need + watermark <= self.pool.num_free_blocks

    # -- allocation -----------------------------------------------------------------
    def _blocks_to_allocate(self, req: Request, num_tok: int, num_main: int, hit: CacheHit) -> int:
        slot = req._slot
        n = 0
        for i, m in enumerate(self._attn_mgrs):
            n += m.blocks_to_allocate(slot, num_tok, hit.attn[i] if hit.attn else ())
        for i, g in enumerate(self._gdn_mgrs):
            n += g.blocks_to_allocate(slot, num_main, hit.gdn[i] if hit.gdn else ())
        if self._pending_n and slot not in self._pending:
            n += self._pending_n
        return n

    def allocate_slots(
        self, req: Request, num_new_tok: int, lookahead_tok: int, hit: CacheHit = _NO_HIT
    ) -> bool:
        """Grow ``req``'s blocks for the step; False (nothing changed) if they do not fit.
        ``hit`` is the cache hit of a request being admitted (its ``num_tok`` is not yet
        in ``num_computed_tok``)."""
        if not self.layout.enable_caching:
            need_attn = self.attn_blocks_for(req.num_computed_tok + num_new_tok + lookahead_tok)
            extra_attn = max(need_attn - req.num_attn_blocks, 0)
            extra_gdn = self.gdn_blocks_per_request if req.num_gdn_blocks == 0 else 0
            extra = extra_attn + extra_gdn
            if extra > self.pool.num_free_blocks:
                return False
            self.pool.take(extra)
            req.num_attn_blocks += extra_attn
            req.num_gdn_blocks += extra_gdn
            return True
        slot = req._slot
        computed = req.num_computed_tok + hit.num_tok
        num_tok = min(computed + num_new_tok + lookahead_tok, self._max_len)
        num_main = min(computed + num_new_tok, self._max_len)
        for g in self._gdn_mgrs:
            g.remove_skipped(slot, req.num_computed_tok)
        if self._blocks_to_allocate(req, num_tok, num_main, hit) > self.pool.num_free_blocks:
            return False
        hashes = self._request_hashes(req)
        to_cache = min(computed + num_new_tok, req.num_tokens)
        for i, g in enumerate(self._gdn_mgrs):
            g.save_hit(slot, hit.gdn[i] if hit.gdn else ())
            g.allocate_new(slot, num_tok, num_main)
        for i, m in enumerate(self._attn_mgrs):
            m.save_hit(slot, hit.attn[i] if hit.attn else ())
            m.allocate_new(slot, num_tok, num_main)
        for m in (*self._gdn_mgrs, *self._attn_mgrs):
            m.cache(slot, hashes, to_cache)
        if self._pending_n and slot not in self._pending:
            self._pending[slot] = self.pool.get_new_blocks(self._pending_n)
        req.num_attn_blocks = sum(m.num_held(slot) for m in self._attn_mgrs)
        req.num_gdn_blocks = sum(g.num_held(slot) for g in self._gdn_mgrs) + len(
            self._pending.get(slot, ())
        )
        return True

    def admit_uncached(
        self,
        cols: dict[str, np.ndarray],
        slot: int,
        num_new_tok: int,
        lookahead_tok: int,
        gate: bool,
    ) -> bool:
        """Caching off: ``full_sequence_fits`` (when ``gate``) then ``allocate_slots`` for
        the stored request in ``slot``, read straight from the store's columns (the
        scheduler's admission loop). False (nothing changed) if it does not fit."""
        free = self.pool.num_free_blocks
        if gate:
            num_tok = cols["prompt_tok"].item(slot) + cols["num_output_tok"].item(slot)
            need = self.attn_blocks_for(num_tok) + self.gdn_blocks_per_request
            if need + int(self.layout.watermark * self.layout.num_blocks) > free:
                return False
        end_tok = cols["num_computed_tok"].item(slot) + num_new_tok + lookahead_tok
        held_attn = cols["num_attn_blocks"].item(slot)
        extra_attn = max(self.attn_blocks_for(end_tok) - held_attn, 0)
        held_gdn = cols["num_gdn_blocks"].item(slot)
        extra_gdn = self.gdn_blocks_per_request if held_gdn == 0 else 0
        if extra_attn + extra_gdn > free:
            return False
        self.pool.take(extra_attn + extra_gdn)
        cols["num_attn_blocks"][slot] = held_attn + extra_attn
        cols["num_gdn_blocks"][slot] = held_gdn + extra_gdn
        return True

    def allocate_running_bulk(
        self,
        cols: dict[str, np.ndarray],
        slots: np.ndarray,
        end_tok: np.ndarray,
        active: np.ndarray | None = None,
    ) -> bool:
        """``allocate_slots`` for a whole running batch (caching off only): each active
        request (all when ``active`` is None) grows to ``end_tok`` token slots (computed +
        new + lookahead). All or nothing: False (nothing changed) if the growth does not
        fit."""
        if not slots.size:
            return True
        bs = self._bs
        if end_tok.max() > self._max_len:  # else the clip to max_model_len changes nothing
            end_tok = np.minimum(end_tok, self._max_len)
        need = end_tok + (bs - 1)
        need //= bs
        if self._attn_groups != 1:
            need *= self._attn_groups
        held_attn = cols["num_attn_blocks"][slots]
        extra_attn = need
        extra_attn -= held_attn
        np.maximum(extra_attn, 0, out=extra_attn)
        if active is not None:
            extra_attn[~active] = 0
        total = int(extra_attn.sum())
        held_gdn = cols["num_gdn_blocks"][slots]
        # GDN slots come with a request's first chunk (allocate_slots), so a running request
        # nearly always holds them already; only the exceptions are looked at
        no_gdn = None
        if self.gdn_blocks_per_request and not held_gdn.all():
            no_gdn = held_gdn == 0
            if active is not None:
                no_gdn &= active
            total += int(np.count_nonzero(no_gdn)) * self.gdn_blocks_per_request
        if total > self.pool.num_free_blocks:
            return False
        self.pool.take(total)
        held_attn += extra_attn
        cols["num_attn_blocks"][slots] = held_attn
        if no_gdn is not None:
            held_gdn[no_gdn] += self.gdn_blocks_per_request
            cols["num_gdn_blocks"][slots] = held_gdn
        return True

    def grow_attn_bulk(
        self, cols: dict[str, np.ndarray], slots: np.ndarray, attn_blocks: np.ndarray, taken: int
    ) -> None:
        """Caching off: requests ``slots`` now hold ``attn_blocks`` attention blocks, taken
        from the pool (``taken`` in all; a planned decode run's allocations)."""
        self.pool.take(taken)
        cols["num_attn_blocks"][slots] = attn_blocks

    def free(self, req: Request) -> None:
        """Return every block of ``req`` (finish or preemption)."""
        if self.layout.enable_caching:
            slot = req._slot
            for m in (*self._gdn_mgrs, *self._attn_mgrs):
                m.free(slot)
            pending = self._pending.pop(slot, None)
            if pending:
                self.pool.free_blocks(reversed(pending))
        else:
            self.pool.give(req.num_attn_blocks + req.num_gdn_blocks)
        req.num_attn_blocks = 0
        req.num_gdn_blocks = 0

    def free_bulk(self, cols: dict[str, np.ndarray], slots: np.ndarray) -> None:
        """``free`` for many finished requests (caching off only)."""
        self.pool.give(
            int(cols["num_attn_blocks"][slots].sum() + cols["num_gdn_blocks"][slots].sum())
        )
        cols["num_attn_blocks"][slots] = 0
        cols["num_gdn_blocks"][slots] = 0

    def block_ids(self, req: Request) -> dict[int, list[int]]:
        """Block table per group id (caching on), null blocks as 0 (for tests)."""
        slot = req._slot
        return {
            m.group: list(m.req_blocks.get(slot, [])) for m in (*self._gdn_mgrs, *self._attn_mgrs)
        }

    def forget(self, req: Request) -> None:
        """Drop per-request memos of a finished request."""
        self._hashes.pop(req._slot, None)
        self._junction.pop(req._slot, None)
