"""The scheduler's waiting loop (vLLM ``Scheduler.schedule``'s second half): admit waiting
requests in arrival order while the token budget, ``max_num_seqs`` and the pool allow, with
prefix caching off (on the store's columns) or on (cache hit, aligned split, full-sequence gate).
Functions of the ``Scheduler`` they serve (``self``), split out of ``scheduler.py`` unchanged."""

from __future__ import annotations

from typing import TYPE_CHECKING

from capsim.core.request import Status

if TYPE_CHECKING:
    from capsim.core.scheduler import Scheduler, SchedulerOutput


def admit_uncached(
    self: Scheduler,
    budget: int,
    out: SchedulerOutput,
    new_slots: list[int],
    new_new: list[int],
    limits: tuple[int, int],
) -> None:
    """The waiting loop with caching off, on the store's columns (same rules as
    ``admit_cached`` without a cache hit). ``limits``: (the running count not to reach,
    how many waiting requests from the head may be admitted)."""
    cfg, kv, cols = self.config, self.kv, self.store.cols
    running, waiting = self.running, self.waiting
    prompt, num_out = cols.prompt_tok, cols.num_output_tok
    computed, status = cols.num_computed_tok, cols.status
    max_seqs, eligible = limits
    held = self._held_slots.size > 0
    while waiting and budget > 0 and len(running) < max_seqs and len(new_slots) < eligible:
        req = waiting[0]
        slot = req.slot
        num_new = prompt.item(slot) + num_out.item(slot) - computed.item(slot)
        if not cfg.enable_chunked_prefill and num_new > budget:
            break
        num_new = min(num_new, budget)
        if not kv.admit(cols, slot, num_new, self._lookahead, bool(running) or held):
            break
        waiting.popleft()
        status[slot] = Status.RUNNING
        running.append(req)
        new_slots.append(slot)
        new_new.append(num_new)
        out.admitted.append(req)
        budget -= num_new


def admit_cached(
    self: Scheduler,
    budget: int,
    out: SchedulerOutput,
    new_slots: list[int],
    new_new: list[int],
    limits: tuple[int, int],
) -> None:
    """The waiting loop with prefix caching on: cache hit, aligned split, gate, first
    chunk (``limits`` as in ``admit_uncached``)."""
    cfg, kv = self.config, self.kv
    running, waiting = self.running, self.waiting
    max_seqs, eligible = limits
    per_lookup = cfg.prefix_stats_per_lookup
    while waiting and budget > 0 and len(running) < max_seqs and len(new_slots) < eligible:
        req = waiting[0]
        hit = kv.find_cache_hit(req)
        if per_lookup:
            kv.record_hit(req, hit)
        hit_tok = hit.num_tok
        num_new = req.num_tokens - req.num_computed_tok - hit_tok
        if not cfg.enable_chunked_prefill and num_new > budget:
            break
        num_new = min(num_new, budget)
        num_new = kv.align_split(req, num_new, hit_tok)
        if num_new <= 0:
            break
        if (running or self._held_reqs) and not kv.full_sequence_fits(req, hit):
            break
        if not kv.allocate_slots(req, num_new, self._lookahead, hit):
            break
        if not per_lookup:
            kv.record_hit(req, hit)
        req.num_computed_tok += hit_tok
        req.num_cached_tok = hit_tok
        waiting.popleft()
        req.status = Status.RUNNING
        running.append(req)
        new_slots.append(req.slot)
        new_new.append(num_new)
        out.admitted.append(req)
        budget -= num_new
