"""Preemption policy: which running request gives its blocks back, and what it loses.

vLLM 0.33 FCFS (``v1/core/sched/scheduler.py``, ``_preempt_request``): the victim is the
last request in ``running`` (the most recently admitted); all its blocks are freed
(recompute semantics: ``num_computed_tokens = 0``, drafts cleared), its preemption count
grows and it goes to the FRONT of the waiting queue. With prefix caching on, its hashed
blocks stay in the pool as evictable cache entries, so readmission may hit them.
"""

from __future__ import annotations

from collections import deque

from capsim.core.kv_manager import KVCacheManager
from capsim.core.request import Request, Status


def pick_victim(running: list[Request]) -> Request:
    """FCFS: the last running request (removed from ``running``)."""
    return running.pop()


def preempt(victim: Request, kv: KVCacheManager, waiting: deque[Request]) -> None:
    """Free the victim's blocks, reset it for recompute, put it at the head of waiting."""
    kv.free(victim)
    victim.num_computed_tok = 0
    victim.num_spec_tok = 0
    victim.num_preemptions += 1
    victim.status = Status.PREEMPTED
    waiting.appendleft(victim)
