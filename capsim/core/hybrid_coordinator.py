"""Prefix caching on: named blocks, one manager per group (vLLM ``HybridKVCacheCoordinator``).

GDN groups run in mamba_cache_mode "align". Blocks are named (``BlockPool``) and each
group has its manager (``single_type``). Per request:

- admission: ``find_cache_hit`` returns the longest prefix that every group can restart
  from, capped at ``num_tokens - 1`` (``get_computed_blocks``): attention blocks from the
  start (one dropped with an MTP/EAGLE drafter), then the right-most GDN checkpoint at
  or below that length (``HybridKVCacheCoordinator.find_longest_cache_hit``, the "simple
  hybrid" single pass); the attention hit is cut back to the checkpoint;
- ``allocate``: free the skipped GDN blocks (``remove_skipped_blocks``), count the
  blocks to allocate (hit blocks that sit in the free queue count, they leave it), touch
  the hit, allocate, then hash every newly full block (``cache_blocks``, up to
  ``min(computed + new, num_tokens)``); ``None`` (nothing changed) when short;
- ``free``: every group's blocks, tail first, to the back of the free queue; the hashed
  ones stay findable until reused (LRU eviction).

Requests are keyed by their store slot (``Request.slot``); every per-slot memo is dropped
when the request finishes, so a finished request's row can be reused.

Steady requests (the fast paths): after each ``allocate`` and ``free`` the coordinator
notes, per slot, the largest token counts at which the next ``allocate`` of a running
request changes nothing (no block freed, taken, moved or hashed)::

    num_computed                        <= skip_cap   (remove_skipped frees nothing)
    min(computed + new + lookahead, L)  <= attn_cap   (= attention blocks held * bs)
    min(computed + new, L)              <= main_cap   (= (GDN table length - k) * bs)
    min(computed + new, num_tokens)     <= cache_cap  (no block becomes full)

(-1: not allocated yet, or freed). ``steady_mask`` reads them for a running batch, so
the scheduler calls ``allocate`` only for the requests it would change; a decode run
stays below ``steady_context_tok``. A decode request crosses a cap about once per block
of tokens (``block_size_tok``, 1,088 on the default H200 plan).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from capsim.core.block_hash import block_hashes, unique_segments
from capsim.core.block_pool import NULL_BLOCK, BlockPool
from capsim.core.kv_blocks import NO_HIT, CacheHit, KVCacheBlocks
from capsim.core.request import Request, RequestColumns
from capsim.core.single_type import FullAttentionManager, MambaManager

if TYPE_CHECKING:
    from capsim.core.kv_manager import PoolLayout


class HybridKVCacheCoordinator:
    """Caching on: attention groups + GDN groups over one named pool."""

    __slots__ = (
        "_align_0_26",
        "_attn_mgrs",
        "_bs",
        "_budget",
        "_gdn_mgrs",
        "_hashes",
        "_junction",
        "_max_len",
        "_pending",
        "_pending_n",
        "_steady",
        "_use_eagle",
        "layout",
        "pool",
        "watermark_blocks",
    )

    def __init__(self, layout: PoolLayout, pool: BlockPool) -> None:
        self.layout = layout
        self.pool = pool
        self._bs = layout.block_size_tok
        self._max_len = layout.max_model_len
        self._use_eagle = layout.lookahead_tok > 0
        self._budget = layout.max_num_batched_tokens
        self._align_0_26 = layout.align_split_before_0_27
        self.watermark_blocks = int(layout.watermark * layout.num_blocks)
        self._hashes: dict[int, list[int]] = {}
        self._junction: dict[int, int] = {}
        # TreeWY deferred commit's pending window: un-hashed blocks taken on a request's
        # first allocation and held until it is freed (never cached)
        self._pending: dict[int, list[int]] = {}
        self._pending_n = layout.pending_blocks_per_request
        # group order as vLLM builds it for Qwen hybrids: the first layer is a GDN layer,
        # so the GDN groups come before the attention group
        g = layout.num_gdn_groups
        self._gdn_mgrs = [MambaManager(pool, i, self._bs, layout.num_spec_blocks) for i in range(g)]
        self._attn_mgrs = [
            FullAttentionManager(pool, g + i, self._bs) for i in range(layout.num_attn_groups)
        ]
        # per slot: skip_cap, attn_cap, main_cap, cache_cap (module docstring); -1 = none
        self._steady = np.full((4, 64), -1, dtype=np.int64)

    # -- prefix cache ---------------------------------------------------------------------
    def _request_hashes(self, req: Request) -> list[int]:
        """Hashes of every full block of the request's whole sequence (prompt + outputs);
        only the computed ones are ever cached."""
        slot = req.slot
        h = self._hashes.get(slot)
        if h is None:
            total = req.prompt_tok + req.max_output_tok
            # (keyed by add order: a reused row must not inherit the last owner's blocks)
            segs = req.segments or unique_segments(req.uid, total)
            h = block_hashes(segs, self._bs, total)
            self._hashes[slot] = h
        return h

    def find_cache_hit(self, req: Request) -> CacheHit:
        """``get_computed_blocks``: the longest prefix every group can restart from."""
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
        self._junction[req.slot] = junction
        return CacheHit(num_tok=hit_len, attn=attn, gdn=gdn, junction_tok=junction)

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
        if not self._gdn_mgrs:
            return num_new_tok
        start = req.num_computed_tok + hit_tok
        prefill_end = max(req.prompt_tok, req.num_tokens - 1)
        if start >= prefill_end:
            return num_new_tok
        bs = self._bs
        if self._align_0_26:
            return self._align_split_0_26(req, start, num_new_tok)
        if self._use_eagle:
            last = max(req.num_tokens // bs * bs - bs, 0)
        else:
            last = max((req.num_tokens - 1) // bs * bs, 0)
        end = start + num_new_tok
        if end < prefill_end:
            aligned = end // bs * bs
            if aligned > start or bs <= self._budget:
                end = aligned
        junction = self._junction.get(req.slot, 0)
        stops = (
            (start // bs + 1) * bs if start % bs else 0,
            last,
            start + (junction - start) // bs * bs if start < junction < end else 0,
        )
        end = min((x for x in stops if start < x < end), default=end)
        return max(end - start, 0)

    def _align_split_0_26(self, req: Request, start: int, num_new_tok: int) -> int:
        """vLLM 0.26.0's ``_mamba_block_aligned_split`` (read in the wheel 2026-12-04; 0.27
        moved to the rule above): the last cacheable position is ``num_tokens`` floored to a
        block (one block less with a drafter); only a chunk ending before it is floored to a
        block boundary, so a prompt's last partial block (a whole prompt shorter than a
        block) is cut anywhere the token budget ends; a chunk that starts mid-block stops at
        the next boundary only when that boundary is cacheable."""
        bs = self._bs
        last = req.num_tokens - req.num_tokens % bs
        if self._use_eagle:
            last = max(last - bs, 0)
        end = start + num_new_tok
        if end < last:
            end = end // bs * bs
        nxt = (start // bs + 1) * bs
        junction = self._junction.get(req.slot, 0)
        stops = (
            nxt if start % bs and nxt <= last else 0,
            last,
            start + (junction - start) // bs * bs if start < junction < end else 0,
        )
        end = min((x for x in stops if start < x < end), default=end)
        return max(end - start, 0)

    # -- allocation -----------------------------------------------------------------------
    def full_sequence_fits(self, req: Request, hit: CacheHit = NO_HIT) -> bool:
        need = self._blocks_to_allocate(req, req.num_tokens, req.num_tokens, hit)
        return need + self.watermark_blocks <= self.pool.num_free_blocks

    def _blocks_to_allocate(self, req: Request, num_tok: int, num_main: int, hit: CacheHit) -> int:
        slot = req.slot
        n = 0
        for i, m in enumerate(self._attn_mgrs):
            n += m.blocks_to_allocate(slot, num_tok, hit.attn[i] if hit.attn else ())
        for i, g in enumerate(self._gdn_mgrs):
            n += g.blocks_to_allocate(slot, num_main, hit.gdn[i] if hit.gdn else ())
        if self._pending_n and slot not in self._pending:
            n += self._pending_n
        return n

    def allocate(
        self, req: Request, num_new_tok: int, lookahead_tok: int, hit: CacheHit = NO_HIT
    ) -> KVCacheBlocks | None:
        """Grow ``req``'s blocks for the step. ``hit`` is the cache hit of a request being
        admitted (its ``num_tok`` is not yet in ``num_computed_tok``)."""
        slot = req.slot
        computed = req.num_computed_tok + hit.num_tok
        num_tok = min(computed + num_new_tok + lookahead_tok, self._max_len)
        num_main = min(computed + num_new_tok, self._max_len)
        for g in self._gdn_mgrs:
            g.remove_skipped(slot, req.num_computed_tok)
        if self._blocks_to_allocate(req, num_tok, num_main, hit) > self.pool.num_free_blocks:
            self._note_steady(slot)  # (remove_skipped may have freed blocks)
            return None
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
        held_attn = sum(m.num_held(slot) for m in self._attn_mgrs)
        held_gdn = sum(g.num_held(slot) for g in self._gdn_mgrs) + len(self._pending.get(slot, ()))
        added = KVCacheBlocks(held_attn - req.num_attn_blocks, held_gdn - req.num_gdn_blocks)
        req.num_attn_blocks = held_attn
        req.num_gdn_blocks = held_gdn
        self._note_steady(slot)
        return added

    # -- steady requests (module docstring) -------------------------------------------------
    def _note_steady(self, slot: int) -> None:
        """Record ``slot``'s caps from its block tables as they are now."""
        steady = self._steady
        if slot >= steady.shape[1]:
            grown = np.full((4, max(2 * steady.shape[1], slot + 1)), -1, dtype=np.int64)
            grown[:, : steady.shape[1]] = steady
            self._steady = steady = grown
        bs, none = self._bs, 1 << 62
        k = self._gdn_mgrs[0].num_spec_blocks if self._gdn_mgrs else 0
        mgrs = (*self._gdn_mgrs, *self._attn_mgrs)
        if any(slot not in m.num_cached for m in mgrs) or (
            self._pending_n and slot not in self._pending
        ):
            steady[:, slot] = -1  # the first allocation (hit, GDN slots, pending) is to come
            return
        skip_cap = attn_cap = main_cap = none
        for g in self._gdn_mgrs:
            blocks = g.req_blocks[slot]
            main_cap = min(main_cap, (len(blocks) - k) * bs)
            if not blocks:
                continue
            first = g.retired.get(slot, 0)
            if first < len(blocks):  # the generic pass frees below (num_computed - 1) // bs
                skip_cap = min(skip_cap, (first + 1) * bs)
            last = g.last_state_idx.get(slot)
            if last is not None and blocks[last] != NULL_BLOCK:  # the align pass frees it
                skip_cap = min(skip_cap, (last + 1) * bs)
        for m in self._attn_mgrs:
            attn_cap = min(attn_cap, len(m.req_blocks[slot]) * bs)
        cache_cap = min((m.num_cached[slot] + 1) * bs - 1 for m in mgrs)
        steady[0, slot] = skip_cap
        steady[1, slot] = attn_cap
        steady[2, slot] = main_cap
        steady[3, slot] = cache_cap

    def _caps(self, slots: np.ndarray) -> np.ndarray:
        steady = self._steady
        if slots.size and int(slots.max()) >= steady.shape[1]:
            return np.full((4, slots.size), -1, dtype=np.int64)
        return steady[:, slots]

    def steady_mask(
        self, cols: RequestColumns, slots: np.ndarray, new_tok: np.ndarray, lookahead_tok: int
    ) -> np.ndarray:
        """Running requests (store ``slots``) whose ``align_split`` and ``allocate`` would
        change nothing for any ``num_new <= new_tok``: not prefilling (GDN groups), every
        cap respected (module docstring)."""
        caps = self._caps(slots)
        comp = cols.num_computed_tok[slots]
        num_tok = cols.prompt_tok[slots] + cols.num_output_tok[slots]
        end = comp + new_tok
        max_len = self._max_len
        ok = comp <= caps[0]
        ok &= np.minimum(end + lookahead_tok, max_len) <= caps[1]
        ok &= np.minimum(end, max_len) <= caps[2]
        ok &= np.minimum(end, num_tok) <= caps[3]
        if self._gdn_mgrs:  # align_split passes a chunk through once the prefill is done
            ok &= comp >= np.maximum(cols.prompt_tok[slots], num_tok - 1)
        return ok

    def steady_context_tok(
        self, slots: np.ndarray, window_tok: int, lookahead_tok: int
    ) -> np.ndarray:
        """Per decoding request (computed = num_tokens - 1, ``window_tok`` new, no
        ``max_model_len`` clip): the largest computed count at which a decode step
        changes no block (``steady_mask`` with the decode's numbers)."""
        caps = self._caps(slots)
        out = np.minimum(caps[0], caps[1] - window_tok - lookahead_tok)
        np.minimum(out, caps[2] - window_tok, out=out)
        np.minimum(out, caps[3] - 1, out=out)  # min(computed + window, num_tokens) = computed + 1
        return out

    def free(self, req: Request) -> None:
        slot = req.slot
        for m in (*self._gdn_mgrs, *self._attn_mgrs):
            m.free(slot)
        pending = self._pending.pop(slot, None)
        if pending:
            self.pool.free_blocks(reversed(pending))
        req.num_attn_blocks = 0
        req.num_gdn_blocks = 0
        if slot < self._steady.shape[1]:
            self._steady[:, slot] = -1

    def block_ids(self, req: Request) -> dict[int, list[int]]:
        """Block table per group id, null blocks as 0 (for tests)."""
        slot = req.slot
        return {
            m.group: list(m.req_blocks.get(slot, [])) for m in (*self._gdn_mgrs, *self._attn_mgrs)
        }

    def forget(self, req: Request) -> None:
        """Drop per-request memos of a finished request."""
        self._hashes.pop(req.slot, None)
        self._junction.pop(req.slot, None)

    def commit_growth(
        self, cols: RequestColumns, slots: np.ndarray, attn_blocks: np.ndarray, taken: int
    ) -> None:
        """A planned decode run's end state: with named blocks a run is planned only over
        steady steps (``steady_context_tok``), which take no block."""
        if taken or not np.array_equal(attn_blocks, cols.num_attn_blocks[slots]):
            raise RuntimeError(f"a decode run with prefix caching on took {taken} blocks")

    def _batch_unsupported(self, *_: object) -> None:
        raise NotImplementedError("batch allocation needs prefix caching off (named blocks)")

    allocate_batch = free_batch = _batch_unsupported
