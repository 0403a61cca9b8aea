"""The scheduler's only view of memory: one shared block pool, hybrid groups.

One block id belongs to one group at a time (VLLM.md s2.5). Per request (s2.6, mode
"none", prefix caching off):

    attention groups : num_attn_groups * cdiv(min(computed + new + lookahead, max_len), bs)
    GDN groups       : num_gdn_groups * gdn_slots_per_request, all taken with the first
                       chunk and held until the request finishes or is preempted

Blocks are counted, not named: capsim needs free counts, never block ids. The null
block (id 0) is not part of ``usable_blocks``.

``allocate_slots`` returns False when memory is short (and changes nothing); the
scheduler then preempts. That boolean is the whole contract, as in vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.core.request import Request
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


class KVCacheManager:
    """Block accounting for all groups of one pool."""

    __slots__ = (
        "_attn_groups",
        "_bs",
        "_max_len",
        "gdn_blocks_per_request",
        "layout",
        "num_free_blocks",
    )

    def __init__(self, layout: PoolLayout) -> None:
        self.layout = layout
        self.num_free_blocks = layout.usable_blocks
        self._bs = layout.block_size_tok
        self._attn_groups = layout.num_attn_groups
        self.gdn_blocks_per_request = layout.gdn_blocks_per_request
        self._max_len = layout.max_model_len

    @property
    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc`` = 1 - free / (num_blocks - 1)."""
        return 1.0 - self.num_free_blocks / self.layout.usable_blocks

    def attn_blocks_for(self, num_tok: int) -> int:
        return self._attn_groups * cdiv(min(num_tok, self._max_len), self._bs)

    def full_sequence_fits(self, req: Request) -> bool:
        """Admission gate (``scheduler_reserve_full_isl``): the whole current sequence
        (prompt + outputs so far, not max_tokens) plus the GDN slots plus the watermark
        must fit in the free blocks. Checks only; allocates nothing."""
        need = self.attn_blocks_for(req.num_tokens) + self.gdn_blocks_per_request
        watermark = int(self.layout.watermark * self.layout.num_blocks)
        return need + watermark <= self.num_free_blocks

    def allocate_slots(self, req: Request, num_new_tok: int, lookahead_tok: int) -> bool:
        """Grow ``req``'s blocks for the step; False (nothing changed) if they do not fit."""
        need_attn = self.attn_blocks_for(req.num_computed_tok + num_new_tok + lookahead_tok)
        extra_attn = max(need_attn - req.num_attn_blocks, 0)
        extra_gdn = self.gdn_blocks_per_request if req.num_gdn_blocks == 0 else 0
        extra = extra_attn + extra_gdn
        if extra > self.num_free_blocks:
            return False
        self.num_free_blocks -= extra
        req.num_attn_blocks += extra_attn
        req.num_gdn_blocks += extra_gdn
        return True

    def free(self, req: Request) -> None:
        """Return every block of ``req`` (finish or preemption)."""
        self.num_free_blocks += req.num_attn_blocks + req.num_gdn_blocks
        req.num_attn_blocks = 0
        req.num_gdn_blocks = 0
