"""One vLLM v1 scheduler step (VLLM.md s4.1), FCFS policy, prefix caching off.

``schedule()``:
1. RUNNING requests in admission order get ``num_tokens_with_spec - num_computed``
   new tokens, clipped to the token budget and ``max_model_len - num_computed - 1``.
   If the KV manager cannot grow a request, the LAST running request is preempted
   (recompute: blocks freed, counters reset, prepended to WAITING) until it fits; if the
   victim is the request itself, the running loop stops for this step.
2. WAITING requests, only if nothing was preempted this step, while budget is left and
   ``len(running) < max_num_seqs``: chunked prefill of ``num_tokens - num_computed``
   clipped to the budget; the admission gate requires the whole current sequence plus
   the GDN slots (plus the watermark) to fit when other requests are running; then the
   first chunk is allocated. A request that does not fit stops the loop (no skipping).

``update()`` advances counters: a verify step keeps ``1 + accepted`` of its tokens
(``num_computed`` rolls back over rejected drafts) and emits ``accepted + 1`` tokens; a
prefill that reaches the end of the sequence emits its first token. Finished requests
free their blocks. Requests that emitted a token get ``num_spec_tok`` drafts for the next
step (MTP runs in the same step as the verify).

NOTE(lookahead): as in vLLM's scheduler, a request with nothing computed yet is
allocated without the drafter's lookahead slots; every later allocation reserves them.
NOTE(async): vLLM's async scheduling (output placeholders) is not modelled: each step
sees the previous step's outputs, as with ``--no-async-scheduling``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from capsim.core.kv_manager import KVCacheManager
from capsim.core.request import Request, Status


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    num_spec_tok: int = 0
    enable_chunked_prefill: bool = True
    max_model_len: int = 1 << 30

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"scheduler.{name}={getattr(self, name)} must be >= 1")
        if self.num_spec_tok < 0:
            raise ValueError(f"scheduler.num_spec_tok={self.num_spec_tok} must be >= 0")


@dataclass(slots=True)
class SchedulerOutput:
    """What one step runs. ``scheduled`` keeps schedule order (running, then new)."""

    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    verify: list[bool] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    emitted: list[tuple[Request, int]] = field(default_factory=list)
    """Filled by ``Scheduler.update``: tokens each request emitted in this step."""

    @property
    def num_scheduled_tok(self) -> dict[str, int]:
        return {req.req_id: n for req, n in self.scheduled}

    @property
    def total_scheduled_tok(self) -> int:
        return sum(n for _, n in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


AcceptFn = Callable[[Request, int], int]


class Scheduler:
    """Queues, token budget and admission; memory only through ``KVCacheManager``."""

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager) -> None:
        self.config = config
        self.kv = kv
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.num_preemptions = 0
        self._lookahead = kv.layout.lookahead_tok

    def add_request(self, req: Request) -> None:
        req.status = Status.WAITING
        self.waiting.append(req)

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        self.kv.free(victim)
        victim.num_computed_tok = 0
        victim.num_spec_tok = 0
        victim.num_preemptions += 1
        victim.status = Status.PREEMPTED
        self.num_preemptions += 1
        self.waiting.appendleft(victim)
        out.preempted.append(victim)

    def schedule(self) -> SchedulerOutput:
        cfg = self.config
        out = SchedulerOutput()
        budget = cfg.max_num_batched_tokens
        running = self.running
        kv = self.kv
        max_len = cfg.max_model_len
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            num_new = req.num_tokens_with_spec - req.num_computed_tok
            num_new = min(num_new, budget, max_len - 1 - req.num_computed_tok)
            if num_new <= 0:
                i += 1
                continue
            lookahead = self._lookahead if req.num_computed_tok else 0
            scheduled = True
            while not kv.allocate_slots(req, num_new, lookahead):
                victim = running.pop()
                self._preempt(victim, out)
                if victim is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            out.scheduled.append((req, num_new))
            out.verify.append(req.num_spec_tok > 0 and req.num_computed_tok >= req.num_tokens - 1)
            budget -= num_new
            i += 1

        if not out.preempted:
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                req = waiting[0]
                num_new = req.num_tokens - req.num_computed_tok
                if not cfg.enable_chunked_prefill and num_new > budget:
                    break
                num_new = min(num_new, budget)
                if running and not kv.full_sequence_fits(req):
                    break
                lookahead = self._lookahead if req.num_computed_tok else 0
                if not kv.allocate_slots(req, num_new, lookahead):
                    break
                waiting.popleft()
                req.status = Status.RUNNING
                running.append(req)
                out.scheduled.append((req, num_new))
                out.verify.append(False)
                out.admitted.append(req)
                budget -= num_new
        return out

    def update(
        self, out: SchedulerOutput, accepted_drafts: Mapping[str, int] | AcceptFn
    ) -> list[Request]:
        """Apply one step's results; returns the requests that finished in it.

        ``accepted_drafts`` gives, per verified request, how many drafts were accepted
        (a mapping by req_id, or a function ``(req, max_drafts) -> int``); it is clipped
        to the drafts that were scheduled.
        """
        accept: AcceptFn
        if callable(accepted_drafts):
            accept = accepted_drafts
        else:
            table = accepted_drafts

            def accept(req: Request, max_drafts: int) -> int:
                return table.get(req.req_id, 0)

        finished: list[Request] = []
        num_spec = self.config.num_spec_tok
        for (req, num_new), is_verify in zip(out.scheduled, out.verify, strict=True):
            if req.status is not Status.RUNNING:
                continue  # preempted later in the same step (cannot happen under FCFS)
            emitted = 0
            if is_verify:
                drafts = min(req.num_spec_tok, num_new - 1)
                a = min(max(int(accept(req, drafts)), 0), drafts)
                req.num_computed_tok += 1 + a
                emitted = a + 1
            else:
                req.num_computed_tok += num_new
                if req.num_computed_tok >= req.num_tokens:
                    emitted = 1
            if emitted:
                remaining = req.max_output_tok - req.num_output_tok
                emitted = min(emitted, remaining)
                req.num_output_tok += emitted
                if req.num_output_tok >= req.max_output_tok:
                    req.status = Status.FINISHED
                    req.num_spec_tok = 0
                    finished.append(req)
                else:
                    req.num_spec_tok = num_spec
            if emitted:
                out.emitted.append((req, emitted))
        if finished:
            done = {id(r) for r in finished}
            self.running = [r for r in self.running if id(r) not in done]
            for r in finished:
                self.kv.free(r)
        return finished
