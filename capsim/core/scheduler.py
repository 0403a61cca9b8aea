"""One vLLM v1 scheduler step (VLLM.md s4.1), FCFS policy, prefix caching off or on.

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

Prefix caching on (``PoolLayout.enable_caching``, docs/prefix_caching.md): each step
starts with ``kv.new_step()``; a waiting request first gets its cache hit
(``kv.find_cache_hit``), its chunk starts after the hit, and on hybrids every prefill
chunk is cut by ``kv.align_split`` (GDN "align" mode); the hit is recorded in the
prefix-cache stats when the request is admitted. Memory is only touched through
``KVCacheManager`` (``allocate_slots``, ``allocate_slots_batch``, ``free``,
``free_batch``); the victim choice and reset live in ``capsim.core.preemption``.

``update()`` advances counters: a verify step keeps ``1 + accepted`` of its tokens
(``num_computed`` rolls back over rejected drafts) and emits ``accepted + 1`` tokens; a
prefill that reaches the end of the sequence emits its first token. Finished requests
free their blocks. Requests that emitted a token get ``num_spec_tok`` drafts for the next
step (MTP runs in the same step as the verify).

Speed: with caching off the running loop is evaluated for the whole batch at once
(numpy over the request store, ``kv.allocate_slots_batch``) whenever every running
request's growth fits in the free blocks, which is exactly when the sequential loop
would preempt nobody; otherwise the sequential loop runs. Both give identical results
(tested). With caching on (named blocks) the sequential loop runs, but the KV manager is
called only for the requests whose blocks would change (``kv.steady_mask``: a steady
request's ``align_split`` and ``allocate_slots`` change nothing); when every running
request is steady the step is pure numpy. When nobody waits and every running request is
decoding, ``plan_decode_run`` computes the next steps up to the first finish or pool
shortfall (caching on: the first step that would change a block) at once
(``capsim.core.decode_run``), and ``apply_decode_run`` commits them; identical results
again (tests/core/test_fast_paths.py, tests/core/test_steady_requests.py).

NOTE(lookahead): every allocation, a newly admitted request's first chunk included,
reserves the drafter's lookahead slots (vLLM 0.32 ``effective_lookahead_tokens`` is the
full ``num_lookahead_tokens`` unless KV is loaded asynchronously; checked step by step
against a live engine, experiments/live).
Async scheduling (``SchedulerConfig.async_scheduling``, vLLM ``--async-scheduling``): vLLM
0.14+ keeps two batches in flight (``EngineCore.step_with_batch_queue``, batch queue of 2,
``AsyncScheduler``'s output placeholders): step n+1 is scheduled right after step n-1's
output was processed, while step n runs. Two things a user sees change, both modelled here
(the engine calls ``schedule`` for step n+1 after ``update`` of step n, so the running
requests' counters are the ones the GPU runs with):
- a request that finished in step n still holds its ``max_num_seqs`` slot and its blocks
  while step n+1 is scheduled (``update`` defers the free; the end of the next ``schedule``
  returns them);
- a request that reached the engine after step n-1's output was processed (while step n
  ran, or sent because of step n-1's or n's output) is not admitted before step n+2
  (``mark_arrivals``, called by the engine after each ``update``, before the client reacts).
When nothing is running the real engine schedules afresh (no step in flight): held blocks
are returned first and every waiting request is eligible.
Not modelled: the placeholders' optimistic KV reservation (``num_computed_tokens`` counts
step n's drafts as accepted until its output arrives: up to k tokens more reserved), and the
extra verify step a request gets when step n may or may not finish it (vLLM skips it only
when even an all-rejected step n reaches ``max_tokens``); each is at most one request-step
per finish. With async off each step sees the previous step's outputs
(``--no-async-scheduling``; the CPU backend always runs this way).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from capsim.core.acceptance import AcceptanceDraws
from capsim.core.admission import admit_cached, admit_uncached
from capsim.core.decode_run import DecodeRun, RunLimits, plan_decode_run
from capsim.core.kv_manager import KVCacheManager
from capsim.core.preemption import pick_victim, preempt
from capsim.core.request import Request, RequestStore, Status

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    num_spec_tok: int = 0
    enable_chunked_prefill: bool = True
    max_model_len: int = 1 << 30
    async_scheduling: bool = False
    # vLLM <= 0.26 records the prefix-cache stats on every lookup of a waiting request, not
    # once at admission (capsim.vllm_rules "prefix_stats_at_admission")
    prefix_stats_per_lookup: bool = False

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"scheduler.{name}={getattr(self, name)} must be >= 1")
        if self.num_spec_tok < 0:
            raise ValueError(f"scheduler.num_spec_tok={self.num_spec_tok} must be >= 0")


@dataclass(slots=True)
class SchedulerOutput:
    """What one step runs, as store slots in schedule order (running, then new)."""

    store: RequestStore
    slots: np.ndarray = field(default_factory=lambda: _EMPTY)
    num_new: np.ndarray = field(default_factory=lambda: _EMPTY)
    verify: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    computed_before: np.ndarray = field(default_factory=lambda: _EMPTY)
    preempted: list[Request] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    emitted_slots: np.ndarray = field(default_factory=lambda: _EMPTY)
    emitted_tok: np.ndarray = field(default_factory=lambda: _EMPTY)
    """Filled by ``Scheduler.update``: tokens each listed request emitted in this step."""

    @property
    def scheduled(self) -> list[tuple[Request, int]]:
        h = self.store.handles
        return [
            (h[s], int(n)) for s, n in zip(self.slots.tolist(), self.num_new.tolist(), strict=True)
        ]

    @property
    def num_scheduled_tok(self) -> dict[str, int]:
        return {req.req_id: n for req, n in self.scheduled}

    @property
    def emitted(self) -> list[tuple[Request, int]]:
        h = self.store.handles
        return [
            (h[s], int(n))
            for s, n in zip(self.emitted_slots.tolist(), self.emitted_tok.tolist(), strict=True)
        ]

    @property
    def total_scheduled_tok(self) -> int:
        return int(self.num_new.sum())

    @property
    def is_empty(self) -> bool:
        return self.slots.size == 0


AcceptFn = Callable[[Request, int], int]


class Scheduler:
    """Queues, token budget and admission; memory only through ``KVCacheManager``."""

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager) -> None:
        self.config = config
        self.kv = kv
        self.store = RequestStore()
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.num_preemptions = 0
        self.vectorized = True
        self._lookahead = kv.layout.lookahead_tok
        self._run_slots: np.ndarray | None = None
        # chosen once, like the KV manager's coordinator: named blocks (caching on) have no
        # batch path and admit with a cache hit
        self._caching = kv.enable_caching
        self._admit = partial(admit_cached if self._caching else admit_uncached, self)
        # async scheduling: finished requests whose blocks and slots are held until the next
        # schedule, and how many requests at the tail of `waiting` arrived too late for it
        self._async = config.async_scheduling
        self._held_slots: np.ndarray = _EMPTY
        self._held_reqs: list[Request] = []
        self._late_prev = 0  # added between the last two marks
        self._late = 0  # added since the last mark
        self._released: list[np.ndarray] = []
        self.count_late_arrivals = True
        """Async: hold requests that arrived after the last mark one schedule more (False: an
        engine whose step model is vLLM's two-batch pipeline already; capsim.engine)."""
        self.keep_released = False
        """Async: collect the rows whose held blocks come back, for ``take_released`` (set
        by an engine that recycles store rows)."""

    def add_request(self, req: Request) -> None:
        if not req.is_stored:
            self.store.add(req)
        req.status = Status.WAITING
        self.waiting.append(req)
        self._late += 1

    def mark_arrivals(self) -> None:
        """Async: the moment vLLM schedules the step after next (step n-1's output just
        processed): requests added from now on wait one step more."""
        self._late_prev = self._late
        self._late = 0

    @property
    def num_held(self) -> int:
        """Async: finished requests still holding their slot and blocks."""
        return int(self._held_slots.size) + len(self._held_reqs)

    def _release_held(self) -> None:
        if self._held_slots.size:
            self.kv.free_batch(self.store.cols, self._held_slots)
            if self.keep_released:
                self._released.append(self._held_slots)
            self._held_slots = _EMPTY
        if self._held_reqs:
            for req in self._held_reqs:
                self.kv.free(req)
                self.kv.forget(req)
            if self.keep_released:
                self._released.append(
                    np.fromiter((r.slot for r in self._held_reqs), dtype=np.int64)
                )
            self._held_reqs = []

    def take_released(self) -> np.ndarray:
        """Async: store rows of finished requests whose blocks were returned since the last
        call (the engine recycles a finished request's row only then)."""
        if not self._released:
            return _EMPTY
        out = np.concatenate(self._released)
        self._released = []
        return out

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def _running_slots(self) -> np.ndarray:
        if self._run_slots is None or len(self._run_slots) != len(self.running):
            self._run_slots = np.fromiter(
                (r.slot for r in self.running), dtype=np.int64, count=len(self.running)
            )
        return self._run_slots

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        preempt(victim, self.kv, self.waiting)
        self.num_preemptions += 1
        out.preempted.append(victim)
        self._run_slots = None

    # -- running requests ---------------------------------------------------------------
    def _schedule_running_vectorized(self, budget: int) -> tuple[np.ndarray, np.ndarray] | None:
        """All running requests at once; None if someone would need a preemption.

        Each clip (``max_model_len``, token budget, inactive requests) is applied only when
        it can change something, tested by one reduction: the same numbers as applying it
        always, with fewer array operations on the common step."""
        cols = self.store.cols
        slots = self._running_slots()
        comp = cols.num_computed_tok[slots]
        total = cols.prompt_tok[slots]
        total += cols.num_output_tok[slots]
        total += cols.num_spec_tok[slots]  # num_tokens_with_spec
        new = total - comp
        limit = self.config.max_model_len - 1
        if total.max() > limit:  # else new <= limit - comp already
            np.minimum(new, limit - comp, out=new)
        np.maximum(new, 0, out=new)
        if new.sum() > budget:  # else every request's prefix sum fits the budget
            before = np.cumsum(new) - new
            new = np.minimum(new, np.maximum(budget - before, 0))
        num_active = np.count_nonzero(new)  # new >= 0: nonzero = active
        active = None if num_active == new.size else new > 0
        comp += new
        comp += self._lookahead
        if not self.kv.allocate_slots_batch(cols, slots, comp, active):
            return None
        if active is None:
            return slots, new
        return slots[active], new[active]

    def _schedule_running_cached(
        self, budget: int, out: SchedulerOutput
    ) -> tuple[np.ndarray, np.ndarray]:
        """The sequential loop with prefix caching on, calling the KV manager only for
        the requests it would change (``HybridKVCacheCoordinator.steady_mask``: a steady
        request's ``align_split`` and ``allocate`` change nothing, and it can be neither
        cut nor short of blocks); every other request gets exactly the sequential loop's
        numbers, in the same order (a preemption victim is the last running request)."""
        cols, kv = self.store.cols, self.kv
        slots = self._running_slots()
        comp = cols.num_computed_tok[slots]
        new = cols.prompt_tok[slots] + cols.num_output_tok[slots]
        new += cols.num_spec_tok[slots]
        new -= comp  # num_tokens_with_spec - num_computed
        np.minimum(new, self.config.max_model_len - 1 - comp, out=new)
        np.maximum(new, 0, out=new)
        steady = kv.steady_mask(cols, slots, new, self._lookahead)
        if steady.all():  # the vectorised running loop's budget clip, nothing else
            if new.sum() > budget:
                before = np.cumsum(new) - new
                new = np.minimum(new, np.maximum(budget - before, 0))
            active = new > 0
            return slots[active], new[active]
        running, lookahead = self.running, self._lookahead
        new_l, steady_l, slots_l = new.tolist(), steady.tolist(), slots.tolist()
        sched_slots: list[int] = []
        sched_new: list[int] = []
        i = 0
        while i < len(running) and budget > 0:
            num_new = min(new_l[i], budget)
            if num_new > 0 and not steady_l[i]:
                req = running[i]
                num_new = kv.align_split(req, num_new)
                if num_new > 0 and not self._allocate_or_preempt(req, num_new, lookahead, out):
                    break
            if num_new > 0:
                sched_slots.append(slots_l[i])
                sched_new.append(num_new)
                budget -= num_new
            i += 1
        return np.asarray(sched_slots, dtype=np.int64), np.asarray(sched_new, dtype=np.int64)

    def _allocate_or_preempt(
        self, req: Request, num_new: int, lookahead: int, out: SchedulerOutput
    ) -> bool:
        """Grow ``req``, preempting the last running request until it fits; False when
        ``req`` itself was preempted."""
        while not self.kv.allocate_slots(req, num_new, lookahead):
            victim = pick_victim(self.running)
            self._preempt(victim, out)
            if victim is req:
                return False
        return True

    def _schedule_running_sequential(
        self, budget: int, out: SchedulerOutput
    ) -> tuple[np.ndarray, np.ndarray]:
        running, kv = self.running, self.kv
        caching = self._caching
        max_len = self.config.max_model_len
        sched_slots: list[int] = []
        sched_new: list[int] = []
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req.num_computed_tok
            num_new = min(req.num_tokens_with_spec - computed, budget, max_len - 1 - computed)
            if num_new > 0 and caching:
                num_new = kv.align_split(req, num_new)
            if num_new <= 0:
                i += 1
                continue
            if not self._allocate_or_preempt(req, num_new, self._lookahead, out):
                break
            sched_slots.append(req.slot)
            sched_new.append(num_new)
            budget -= num_new
            i += 1
        return np.asarray(sched_slots, dtype=np.int64), np.asarray(sched_new, dtype=np.int64)

    def schedule(self) -> SchedulerOutput:
        cfg = self.config
        out = SchedulerOutput(store=self.store)
        budget = cfg.max_num_batched_tokens
        kv = self.kv
        cols = self.store.cols
        run_slots, run_new = _EMPTY, _EMPTY
        if self._caching:
            kv.new_step()
        fresh = self._async and not self.running
        if fresh:  # nothing in flight in vLLM: finished requests are gone, all may enter
            self._release_held()
            self._late_prev = self._late = 0
        if self.running:
            fast = None
            if self.vectorized and self._caching:
                fast = self._schedule_running_cached(budget, out)
            elif self.vectorized:
                fast = self._schedule_running_vectorized(budget)
            if fast is None:
                fast = self._schedule_running_sequential(budget, out)
            run_slots, run_new = fast
            budget -= int(run_new.sum())

        new_slots: list[int] = []
        new_new: list[int] = []
        if not out.preempted:
            self._admit(budget, out, new_slots, new_new, self._admit_limits())
        if self._async and not fresh:
            self._release_held()
        if new_slots:
            added = np.asarray(new_slots, dtype=np.int64)
            cached = self._run_slots
            # the admitted requests were appended to `running`: extend its slot array
            ok = cached is not None and len(cached) + len(new_slots) == len(self.running)
            self._run_slots = np.concatenate([cached, added]) if ok else None  # type: ignore[list-item]
            out.slots = np.concatenate([run_slots, added])
            out.num_new = np.concatenate([run_new, np.asarray(new_new, dtype=np.int64)])
        else:
            out.slots, out.num_new = run_slots, run_new
        out.computed_before = cols.num_computed_tok[out.slots]
        spec = cols.num_spec_tok[out.slots]
        out.verify = spec > 0
        if new_slots:
            out.verify[len(run_slots) :] = False
        return out

    def _admit_limits(self) -> tuple[int, int]:
        """(running count not to reach, waiting requests admissible from the head)."""
        n = len(self.waiting)
        if not self._async:
            return self.config.max_num_seqs, n
        if not self.count_late_arrivals:
            return self.config.max_num_seqs - self.num_held, n
        late = min(self._late_prev + self._late, n)
        return self.config.max_num_seqs - self.num_held, n - late

    # -- decode-only runs ---------------------------------------------------------------
    def plan_decode_run(
        self, draws: AcceptanceDraws, window_tok: int, drain: bool = False
    ) -> DecodeRun | None:
        """Several decode-only steps at once (``capsim.core.decode_run``), or None. Only
        on the vectorised path, and nobody waiting; the caller makes sure no request
        arrives before the run ends (``drain``: none ever will). With prefix caching on
        the run takes no block and stops before the first finish (named blocks are
        allocated, hashed and freed step by step)."""
        if self.waiting or not self.running or not self.vectorized:
            return None
        if self._async:
            if self.num_held:  # their blocks come back at the next schedule
                return None
            drain = False  # a finish inside the run would hold its blocks one step

        if not isinstance(draws, AcceptanceDraws):  # per-step acceptance: no plan ahead
            return None
        kv, cfg = self.kv, self.config
        steady = None
        if self._caching:
            steady = kv.steady_context_tok(self._running_slots(), window_tok, self._lookahead)
            drain = False
        lim = RunLimits(
            num_spec_tok=cfg.num_spec_tok,
            window_tok=window_tok,
            lookahead_tok=self._lookahead,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_model_len=min(cfg.max_model_len, kv.layout.max_model_len),
            rule=kv.rule,
            gdn_blocks_per_request=kv.gdn_blocks_per_request,
            free_blocks=kv.num_free_blocks,
            max_context_tok=steady,
        )
        return plan_decode_run(self.store.cols, self._running_slots(), draws, lim, drain)

    def apply_decode_run(self, run: DecodeRun) -> list[Request]:
        """Commit a planned run: the counters and blocks its last step leaves; finished
        requests leave ``running`` and free their blocks. Returns them."""
        cols, slots = self.store.cols, run.slots
        cols.num_computed_tok[slots] = run.end_computed_tok
        cols.num_output_tok[slots] = run.end_output_tok
        cols.num_accept_draws_used[slots] = run.end_draws_used
        self.kv.commit_growth(cols, slots, run.end_attn_blocks, run.num_blocks_taken)
        gone = run.finish_step < run.num_steps
        if not gone.any():
            return []
        fin_slots = slots[gone]
        cols.status[fin_slots] = int(Status.FINISHED)
        cols.num_spec_tok[fin_slots] = 0
        self.kv.free_batch(cols, fin_slots)
        running = self.running
        for i in reversed(np.flatnonzero(gone).tolist()):
            del running[i]
        self._run_slots = slots[~gone]
        h = self.store.handles
        return [h[s] for s in fin_slots.tolist()]

    # -- results ------------------------------------------------------------------------
    def _accepted(
        self,
        slots: np.ndarray,
        drafts: np.ndarray,
        accepted: Mapping[str, int] | AcceptFn | AcceptanceDraws,
    ) -> np.ndarray:
        cols = self.store.cols
        if isinstance(accepted, AcceptanceDraws):
            used = cols.num_accept_draws_used[slots]
            a = accepted.draw_many(cols.index[slots], used)
            used += 1
            cols.num_accept_draws_used[slots] = used
            return a
        h = self.store.handles
        if callable(accepted):
            return np.fromiter(
                (accepted(h[s], d) for s, d in zip(slots.tolist(), drafts.tolist(), strict=True)),
                dtype=np.int64,
                count=slots.size,
            )
        return np.fromiter(
            (accepted.get(h[s].req_id, 0) for s in slots.tolist()),
            dtype=np.int64,
            count=slots.size,
        )

    def update(
        self,
        out: SchedulerOutput,
        accepted_drafts: Mapping[str, int] | AcceptFn | AcceptanceDraws,
    ) -> list[Request]:
        """Apply one step's results; returns the requests that finished in it.

        ``accepted_drafts`` gives, per verified request, how many drafts were accepted:
        a mapping by req_id, a function ``(req, max_drafts) -> int``, or pre-drawn
        ``AcceptanceDraws``; it is clipped to the drafts that were scheduled.
        """
        cols = self.store.cols
        slots, new, ver = out.slots, out.num_new, out.verify
        computed = cols.num_computed_tok
        num_verify = int(np.count_nonzero(ver))
        all_verify = num_verify == slots.size
        # verify steps
        if all_verify:
            vs, new_v = slots, new
        else:
            vs, new_v = slots[ver], new[ver]
        if num_verify:
            drafts = np.minimum(cols.num_spec_tok[vs], new_v - 1)
            a = np.minimum(np.maximum(self._accepted(vs, drafts, accepted_drafts), 0), drafts)
            a += 1  # tokens kept (and emitted) = accepted drafts + the bonus token
            computed[vs] += a
            emit_v = a
        else:
            emit_v = _EMPTY
        # prefill chunks and plain decodes
        if all_verify:
            em_slots, emitted = vs, emit_v  # every verify emits >= 1 token
        else:
            plain = ~ver
            ps = slots[plain]
            computed[ps] += new[plain]
            emit_p = (computed[ps] >= cols.prompt_tok[ps] + cols.num_output_tok[ps]).astype(
                np.int64
            )
            em_slots = np.concatenate([vs, ps])
            emitted = np.concatenate([emit_v, emit_p])
            keep = emitted > 0
            em_slots, emitted = em_slots[keep], emitted[keep]
        out_tok = cols.num_output_tok
        num_out = out_tok[em_slots]
        max_out = cols.max_output_tok[em_slots]
        emitted = np.minimum(emitted, max_out - num_out)
        num_out += emitted
        out_tok[em_slots] = num_out
        done = num_out >= max_out
        num_done = int(np.count_nonzero(done))
        cols.num_spec_tok[em_slots] = self.config.num_spec_tok
        out.emitted_slots, out.emitted_tok = em_slots, emitted
        finished: list[Request] = []
        if num_done:
            h = self.store.handles
            fin_slots = em_slots[done]
            cols.num_spec_tok[fin_slots] = 0
            status = cols.status
            status[fin_slots] = int(Status.FINISHED)
            finished = [h[s] for s in fin_slots.tolist()]
            run_slots = self._running_slots()
            gone = status[run_slots] == int(Status.FINISHED)
            running = self.running
            for i in reversed(np.flatnonzero(gone).tolist()):
                del running[i]
            self._run_slots = run_slots[~gone]
            self._free_finished(finished, fin_slots)
        return finished

    def _free_finished(self, finished: list[Request], fin_slots: np.ndarray) -> None:
        """Return finished requests' blocks; with async scheduling hold them until the next
        schedule (vLLM has planned it already) unless nothing runs (it is a fresh one)."""
        if self._async:
            if self._caching:
                self._held_reqs += finished
            else:
                self._held_slots = np.concatenate([self._held_slots, fin_slots])
            if not self.running:
                self._release_held()
        elif self._caching:
            for req in finished:
                self.kv.free(req)
                self.kv.forget(req)
        else:
            self.kv.free_batch(self.store.cols, fin_slots)
