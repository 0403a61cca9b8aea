"""The shared block pool: free queue, null block, cached-block hash map.

Modelled on vLLM 0.33 ``v1/core/block_pool.py:BlockPool`` (read at the vLLM commit the
prefix-caching notes in ``docs/prefix_caching.md`` cite):

- block 0 is the **null block**: never free, never allocated, stands for "no block" in a
  GDN block table (``BlockPool.null_block``);
- the **free queue** is vLLM's ``FreeKVCacheBlockQueue`` (``kv_cache_utils.py``): new
  blocks are taken from its front; a freed block that carries no hash is put back at the
  FRONT (LIFO reuse, ``prepend_n``), a freed block with a hash at the BACK
  (``append_n``), so cached blocks are evicted last and in LRU order (vLLM 0.32
  ``BlockPool.free_blocks``; earlier releases appended every block). A cached block hit
  while free (ref count 0) is taken out of the middle (``touch``). Taking a free block
  that still carries a hash evicts that cache entry (``_maybe_evict_cached_block``);
- the **hash map** ``(group, block hash) -> block ids`` (``BlockHashToBlockMap``): the
  same content may be cached in more than one block; a lookup returns the first one.

Two ways to use it, chosen once per pool:

- ``enable_caching=False``: blocks are anonymous (capsim never needs their ids when
  nothing can be shared), so ``take``/``give`` only move a counter. This keeps the
  vectorised scheduler path as fast as plain arithmetic;
- ``enable_caching=True``: every block is named; ``get_new_blocks``/``touch``/
  ``free_blocks``/``cache_block`` keep ref counts, the LRU free queue and the hash map.

Only ``capsim.core.kv_manager`` (through the per-type managers) writes to a pool.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable

NULL_BLOCK = 0


class BlockPool:
    """``num_blocks`` blocks, id 0 the null block; ``num_free_blocks`` counts cached
    blocks with ref count 0 as free (vLLM ``get_num_free_blocks``)."""

    __slots__ = (
        "_block_key",
        "_cached",
        "_free",
        "_ref",
        "enable_caching",
        "num_blocks",
        "num_cached_free",
        "num_evictions",
        "num_free_blocks",
    )

    def __init__(self, num_blocks: int, *, enable_caching: bool = False) -> None:
        if num_blocks < 2:
            raise ValueError(f"pool.num_blocks={num_blocks} must be >= 2 (null block + 1)")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.num_free_blocks = num_blocks - 1
        self.num_cached_free = 0
        """Free blocks that still hold a cached hash (evictable prefix-cache entries)."""
        self.num_evictions = 0
        """Cached blocks whose hash was dropped because the block was reused."""
        if enable_caching:
            self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
            self._ref = [0] * num_blocks
            self._block_key: list[Hashable | None] = [None] * num_blocks
            self._cached: dict[Hashable, dict[int, None]] = {}

    @property
    def usable_blocks(self) -> int:
        return self.num_blocks - 1

    # -- anonymous blocks (caching off) ---------------------------------------------
    def take(self, n: int) -> None:
        """Take ``n`` anonymous blocks; the caller has checked ``n <= num_free_blocks``."""
        self.num_free_blocks -= n

    def give(self, n: int) -> None:
        self.num_free_blocks += n

    # -- named blocks (caching on) --------------------------------------------------
    def get_new_blocks(self, n: int) -> list[int]:
        """``n`` blocks from the front of the free queue, ref count 1, hashes evicted."""
        if n > self.num_free_blocks:
            raise ValueError(f"cannot get {n} blocks, {self.num_free_blocks} free")
        out: list[int] = []
        free, ref, keys = self._free, self._ref, self._block_key
        for _ in range(n):
            b = next(iter(free))
            del free[b]
            key = keys[b]
            if key is not None:
                self._evict(b, key)
                self.num_cached_free -= 1
                self.num_evictions += 1
            ref[b] = 1
            out.append(b)
        self.num_free_blocks -= n
        return out

    def _evict(self, block: int, key: Hashable) -> None:
        ids = self._cached[key]
        del ids[block]
        if not ids:
            del self._cached[key]
        self._block_key[block] = None

    def touch(self, blocks: Iterable[int]) -> None:
        """A cache hit: one more user; a free block leaves the free queue."""
        free, ref, keys = self._free, self._ref, self._block_key
        for b in blocks:
            if b == NULL_BLOCK:
                continue
            if ref[b] == 0:
                del free[b]
                self.num_free_blocks -= 1
                if keys[b] is not None:
                    self.num_cached_free -= 1
            ref[b] += 1

    def free_blocks(self, blocks: Iterable[int]) -> None:
        """One user less. Blocks that reach 0, in the order given (callers pass a
        request's blocks tail first, as vLLM does): unhashed ones to the front of the
        free queue (the first given first), hashed ones to the back."""
        free, ref, keys = self._free, self._ref, self._block_key
        fresh: list[int] = []
        for b in blocks:
            if b == NULL_BLOCK:
                continue
            ref[b] -= 1
            if ref[b] == 0:
                self.num_free_blocks += 1
                if keys[b] is not None:
                    self.num_cached_free += 1
                    free[b] = None
                else:
                    fresh.append(b)
        for b in reversed(fresh):
            free[b] = None
            free.move_to_end(b, last=False)

    def cache_block(self, block: int, key: Hashable) -> None:
        """Give a full, in-use block its content key (``cache_full_blocks``)."""
        if block == NULL_BLOCK or self._block_key[block] is not None:
            return
        self._block_key[block] = key
        self._cached.setdefault(key, {})[block] = None

    def get_cached_block(self, key: Hashable) -> int | None:
        ids = self._cached.get(key)
        return next(iter(ids)) if ids else None

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    def block_key(self, block: int) -> Hashable | None:
        return self._block_key[block]

    def free_queue(self) -> list[int]:
        """Free block ids, next to be taken first (for tests and debugging)."""
        return list(self._free)
