"""One block manager per layer type: full attention and GDN (mamba) state.

Modelled on vLLM 0.33 ``v1/core/single_type_kv_cache_manager.py``. Each manager serves
one KV-cache group and keeps, per request (keyed by its store slot), the list of block
ids in that group, null blocks included. They are used only with prefix caching on
(named blocks); with caching off the counting rules in ``kv_manager`` apply (same block
counts, no ids).

Full attention (``FullAttentionManager``):
- blocks needed for ``n`` token slots: ``cdiv(n, bs)``; a running request never gets
  fewer than it holds (rejected draft slots stay allocated);
- a cache hit is the longest run of cached block hashes from the start, up to
  ``max_length // bs`` blocks; with an EAGLE/MTP drafter the last hit block is dropped
  (``find_longest_cache_hit``: the drafter needs the hidden states of the last block);
- ``cache`` names every newly full block (``cache_blocks`` -> ``cache_full_blocks``).

GDN state, mamba_cache_mode "align" (``MambaManager``, prefix caching on):
- the block table has ``cdiv(num_tokens_main_model, bs) + k`` entries (k =
  ``num_speculative_blocks``: the store-all slots; 0 for reconstruct/deferred), almost
  all null. Live entries: the running state block, the k speculative blocks after it,
  and the previous step's state block (``last_state_block_idx``) until the next step
  frees it (``remove_skipped_blocks``). Lookahead tokens are ignored (the drafter has no
  GDN layers);
- a request's first allocation takes ``1 + k`` new blocks, every later one at most 1:
  when the running index moves, the speculative blocks are reused (moved right) and one
  new block is taken (``allocate_new_blocks``);
- every non-null block that is full when ``cache`` runs gets the block's hash: it holds
  the state at that block boundary, a **checkpoint**. Freed, it stays an evictable
  cached block;
- a hit is the right-most block index ``i`` below ``max_length // bs`` whose hash is
  cached in every GDN group; the hit list is ``[null] * i + [block]``
  (``MambaManager.find_longest_cache_hit``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from capsim.core.block_pool import NULL_BLOCK, BlockPool
from capsim.units import cdiv


def _key(group: int, block_hash: int) -> Hashable:
    return (group, block_hash)


class FullAttentionManager:
    """Block lists of one full-attention group."""

    __slots__ = ("block_size_tok", "group", "num_cached", "pool", "req_blocks")

    def __init__(self, pool: BlockPool, group: int, block_size_tok: int) -> None:
        self.pool = pool
        self.group = group
        self.block_size_tok = block_size_tok
        self.req_blocks: dict[int, list[int]] = {}
        self.num_cached: dict[int, int] = {}

    @staticmethod
    def find_hit(
        pool: BlockPool,
        groups: Sequence[int],
        hashes: Sequence[int],
        max_length_tok: int,
        block_size_tok: int,
        use_eagle: bool,
    ) -> list[list[int]]:
        """Hit blocks per group (all groups must hold a block's hash)."""
        hit: list[list[int]] = [[] for _ in groups]
        if use_eagle:
            # match one block more, then drop it (vLLM 0.32 ``eagle_proof_margin``)
            max_length_tok = min(max_length_tok + block_size_tok, len(hashes) * block_size_tok)
        for h in hashes[: max_length_tok // block_size_tok]:
            found = [pool.get_cached_block(_key(g, h)) for g in groups]
            if any(b is None for b in found):
                break
            for lst, b in zip(hit, found, strict=True):
                lst.append(b)  # type: ignore[arg-type]
        if use_eagle and hit and hit[0]:
            for lst in hit:
                lst.pop()
        return hit

    def blocks_to_allocate(self, slot: int, num_tok: int, hit: Sequence[int]) -> int:
        need = cdiv(num_tok, self.block_size_tok)
        held = self.req_blocks.get(slot)
        if held is not None and slot in self.num_cached:
            return max(need - len(held), 0)
        evictable = sum(1 for b in hit if self.pool.ref_count(b) == 0)
        return max(need - len(hit) - (len(held) if held else 0), 0) + evictable

    def save_hit(self, slot: int, hit: Sequence[int]) -> None:
        if slot in self.num_cached:
            return
        self.pool.touch(hit)
        blocks = self.req_blocks.setdefault(slot, [])
        blocks.extend(hit)
        self.num_cached[slot] = len(blocks)

    def allocate_new(self, slot: int, num_tok: int, num_tok_main: int) -> None:
        blocks = self.req_blocks.setdefault(slot, [])
        n = cdiv(num_tok, self.block_size_tok) - len(blocks)
        if n > 0:
            blocks.extend(self.pool.get_new_blocks(n))

    def remove_skipped(self, slot: int, num_computed_tok: int) -> None:
        """Full attention skips nothing."""

    def cache(self, slot: int, hashes: Sequence[int], num_tok: int) -> None:
        done = self.num_cached.get(slot, 0)
        full = num_tok // self.block_size_tok
        if done >= full:
            return
        blocks = self.req_blocks[slot]
        for i in range(done, full):
            b = blocks[i]
            if b != NULL_BLOCK:
                self._cache_block(b, _key(self.group, hashes[i]))
        self.num_cached[slot] = full

    def _cache_block(self, block: int, key: Hashable) -> None:
        self.pool.cache_block(block, key)

    def num_held(self, slot: int) -> int:
        blocks = self.req_blocks.get(slot)
        return 0 if blocks is None else sum(1 for b in blocks if b != NULL_BLOCK)

    def free(self, slot: int) -> None:
        blocks = self.req_blocks.pop(slot, [])
        self.pool.free_blocks(reversed(blocks))
        self.num_cached.pop(slot, None)


class MambaManager(FullAttentionManager):
    """Block lists of one GDN group in mamba_cache_mode "align"."""

    __slots__ = ("allocated", "cached_this_step", "last_state_idx", "num_spec_blocks", "retired")

    def __init__(
        self, pool: BlockPool, group: int, block_size_tok: int, num_spec_blocks: int
    ) -> None:
        super().__init__(pool, group, block_size_tok)
        self.num_spec_blocks = num_spec_blocks
        self.last_state_idx: dict[int, int] = {}
        self.allocated: set[int] = set()
        self.retired: dict[int, int] = {}
        self.cached_this_step: set[Hashable] = set()
        """Checkpoints hashed in the current step: a hit on one waits a step."""

    @staticmethod
    def find_hit(  # type: ignore[override]
        pool: BlockPool,
        groups: Sequence[int],
        hashes: Sequence[int],
        max_length_tok: int,
        block_size_tok: int,
        use_eagle: bool = False,
    ) -> list[list[int]]:
        """Right-most cached checkpoint below ``max_length_tok`` (all groups)."""
        for i in range(max_length_tok // block_size_tok - 1, -1, -1):
            found = [pool.get_cached_block(_key(g, hashes[i])) for g in groups]
            if all(b is not None for b in found):
                return [[NULL_BLOCK] * i + [b] for b in found]  # type: ignore[list-item]
        return [[] for _ in groups]

    def blocks_to_allocate(self, slot: int, num_tok: int, hit: Sequence[int]) -> int:
        """``num_tok`` is the main model's token count (lookahead excluded)."""
        k = self.num_spec_blocks
        if hit and self.pool.block_key(hit[-1]) in self.cached_this_step:
            return self.pool.num_blocks + 1  # vLLM: "can't rely on blocks of this step"
        need = cdiv(num_tok, self.block_size_tok) + k
        held = self.req_blocks.get(slot)
        n = need - len(hit) - (len(held) if held else 0)
        if n > 0:
            n = 1 if slot in self.allocated else 1 + k
        evictable = sum(1 for b in hit if b != NULL_BLOCK and self.pool.ref_count(b) == 0)
        return max(n, 0) + evictable

    def remove_skipped(self, slot: int, num_computed_tok: int) -> None:
        blocks = self.req_blocks.get(slot)
        if not blocks:
            return
        bs = self.block_size_tok
        # generic pass: a GDN layer needs only the state of the last computed token;
        # align mode frees every live block below it, skipping null gaps
        # (``MambaManager._remove_blocks_in_range``)
        if num_computed_tok - 1 > 0:
            last = min((num_computed_tok - 1) // bs, len(blocks))
            first = self.retired.get(slot, 0)
            if first < last:
                removed: list[int] = []
                for i in range(last - 1, first - 1, -1):
                    if blocks[i] != NULL_BLOCK:
                        removed.append(blocks[i])
                        blocks[i] = NULL_BLOCK
                self.pool.free_blocks(removed)
                self.retired[slot] = last
        # align pass: the previous step's state block
        last = self.last_state_idx.get(slot)
        if (
            last is not None
            and last < cdiv(num_computed_tok, bs) - 1
            and blocks[last] != NULL_BLOCK
        ):
            self.pool.free_blocks([blocks[last]])
            blocks[last] = NULL_BLOCK

    def allocate_new(self, slot: int, num_tok: int, num_tok_main: int) -> None:
        k = self.num_spec_blocks
        blocks = self.req_blocks.setdefault(slot, [])
        need = cdiv(num_tok_main, self.block_size_tok) + k
        prev = len(blocks)
        if need <= prev:
            return
        was_allocated = slot in self.allocated
        if was_allocated:
            self.last_state_idx[slot] = prev - 1 - k
        elif prev > 0:
            self.last_state_idx[slot] = prev - 1  # the hit checkpoint
        running = need - k - 1
        if prev < running:
            blocks.extend([NULL_BLOCK] * (running - prev))
        if was_allocated:
            for i in range(prev - k, prev):
                if i >= running:
                    break
                blocks.append(blocks[i])
                blocks[i] = NULL_BLOCK
        blocks.extend(self.pool.get_new_blocks(need - len(blocks)))
        self.allocated.add(slot)

    def _cache_block(self, block: int, key: Hashable) -> None:
        """Keys only blocks that hold none yet, and records them in cached_this_step."""
        if self.pool.block_key(block) is None:
            self.pool.cache_block(block, key)
            self.cached_this_step.add(key)

    def free(self, slot: int) -> None:
        self.allocated.discard(slot)
        self.last_state_idx.pop(slot, None)
        self.retired.pop(slot, None)
        super().free(slot)
