"""The only SimPy module: a client that sends requests and an engine that steps.

Engine loop (one process): ``schedule()`` -> price the batch -> ``timeout(step_s)`` ->
``update()`` -> stamp tokens -> let the client send more. Client (one process): releases
requests at their release times; a concurrency gate (``vllm bench serve
--max-concurrency``) holds a request until one in flight finishes. A request's send time
is when it passes the gate: TTFT and E2EL are measured from there, as the bench client does.

Once the client has released every request (only finishes send more), a run of
decode-only steps can be planned at once (``Scheduler.plan_decode_run``); the engine still
prices each of its steps and yields one timeout per step, so times and step rows are the
ones step-by-step scheduling gives (``decode_runs=False`` switches it off).

Async scheduling (the scheduler's ``async_scheduling``, vLLM's default since 0.14 on GPUs):
after a step's ``update`` the engine marks the moment (``Scheduler.mark_arrivals``) before
the client hears of the finishes, so what the client sends then, and what arrives during
the next step, is admitted one step later; finished requests' rows are recycled only once
the scheduler has returned their blocks (``Scheduler.take_released``). With a step model that
says so (``output_deferred``: ``capsim.cost.engine_period``, the real engine's async step
period) step n's output (token stamps, finishes, the client's resulting sends) is handed over
when step n+1 ends, as vLLM processes it after launching n+1; the step-by-step path is used.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import simpy

from capsim.acceptance_stream import StreamingAcceptanceDraws
from capsim.core.acceptance import AcceptanceDraws
from capsim.core.decode_run import DecodeRun
from capsim.core.inbound import Inbound
from capsim.core.request import Request
from capsim.core.scheduler import Scheduler, SchedulerOutput
from capsim.cost.base import BatchShape, StepTimeModel
from capsim.loadgen import ChunkedReleaseTimes
from capsim.metrics import StepRecorder
from capsim.request_source import LazyRequests
from capsim.streaming_metrics import RequestResults

_EMPTY = np.zeros(0, dtype=np.int64)
_add = np.add.reduce  # what ndarray.sum() calls, without its Python wrapper


class EngineSim:
    """Runs one point to completion; results stay on the Request objects and recorder."""

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        cost: StepTimeModel,
        acceptance: AcceptanceDraws,
        requests: Sequence[Request],
        release_s: np.ndarray | ChunkedReleaseTimes,
        max_concurrency: int | None,
        window_tok: int,
        parent: np.ndarray | None = None,
        keep_steps: bool = True,
        exact_itl: bool = True,
        recycle_slots: bool = False,
        compact: bool = False,
        env: simpy.Environment | None = None,
        fed: bool = False,
    ) -> None:
        if len(requests) != len(release_s):
            raise ValueError("requests and release_s differ in length")
        self.env = env if env is not None else simpy.Environment()
        # fed: requests arrive through ``submit`` (a fleet's router on a shared clock);
        # ``requests`` then only sizes the per-request arrays (indexed by Request.index)
        self.fed = fed
        self._expected = 0 if fed else len(requests)
        self.scheduler = scheduler
        self.cost = cost
        self.acceptance = acceptance
        # a LazyRequests builds each handle when the client sends it (bounded memory)
        self.requests = requests if isinstance(requests, LazyRequests) else list(requests)
        # (a ChunkedReleaseTimes is read in order, block by block)
        self.release_s = (
            release_s
            if isinstance(release_s, ChunkedReleaseTimes)
            else np.asarray(release_s, dtype=np.float64)
        )
        self.max_concurrency = max_concurrency
        self.window_tok = window_tok
        if compact and fed:
            raise ValueError("compact needs the engine's own client (not fed mode)")
        self.compact = compact
        """Streaming: timestamps kept per store slot while a request is in flight; a
        finished request's figures go to ``results`` (``RequestResults``)."""
        self.recorder = StepRecorder(
            keep_steps=keep_steps, exact_itl=exact_itl, phase_columns=not compact
        )
        self.recycle_slots = recycle_slots
        self._async = scheduler.config.async_scheduling
        self._async_recycle = recycle_slots and self._async
        scheduler.keep_released = self._async_recycle
        """Hand a finished request's store row back (its memos are dropped when it
        finishes; block hashes of unshared content are keyed by add order, not slot)."""
        # a step model of the real async engine (capsim.cost.engine_period) says step n's
        # output reaches the client at the end of step n+1 (two batches in flight: vLLM
        # processes output n after launching n+1); the step-by-step path then holds each
        # step's token stamps, finishes and client sends back one step
        self._defer = self._async and bool(getattr(cost, "output_deferred", False))
        if self._defer and compact:
            raise ValueError(
                "engine.engine_overhead with async scheduling holds each step's output one "
                "step (capsim.cost.engine_period); the compact streaming path does not: "
                "keep the requests table (streaming=False) or use --no-async-scheduling"
            )
        self._held: tuple[np.ndarray, list[int]] | None = None
        self._init_pipeline(cost, scheduler)
        self._pending: deque[Request] = deque()
        # conversation turns: a request with a parent waits until the parent finished,
        # then goes to the head of the send queue (the same user continues)
        self._parent = parent
        self._children: dict[int, list[Request]] = {}
        self._done = np.zeros(len(self.requests) if parent is not None else 0, dtype=bool)
        self._in_flight = 0
        self._num_finished = 0
        self._wake: simpy.Event | None = None
        self._client_done = False  # every request released: only finishes send more
        self.decode_runs = True
        """Plan runs of decode-only steps at once when nothing can change the schedule
        (``capsim.core.decode_run``); False steps one at a time (the reference path)."""
        self._init_request_arrays(len(self.requests), compact)

    def _init_pipeline(self, cost: StepTimeModel, scheduler: Scheduler) -> None:
        """Deferred output (capsim.cost.engine_period): the client round trip and the pipeline."""
        # send -> scheduler: the client round trip (and the ingest queue when set), no async
        # lateness on top of the deferred output (capsim.core.inbound)
        self._inbound = Inbound.of(cost, self._defer)
        if self._defer:
            scheduler.count_late_arrivals = False
        # the two-batch pipeline (PLAN.md 2026-12-04 19:35): batch m+1 is scheduled when batch
        # m's launch returns or when batch m-1's output is consumed, whichever is later; the GPU
        # runs a batch after the previous one. The step model gives each batch's host and GPU
        # seconds; the engine keeps when the GPU frees (``_gpu_end_s``)
        self._pipelined = self._defer and hasattr(cost, "host_s") and hasattr(cost, "gpu_s")
        self._gpu_end_s = float("-inf")

    def _init_request_arrays(self, num_requests: int, compact: bool) -> None:
        """The per-request stamps and counters (compact: ``RequestResults`` instead)."""
        # per workload index (compact: per store slot, reset when a request is sent): first
        # and latest token times (NaN until they happen)
        n = num_requests
        self.results = RequestResults(n) if compact else None
        if compact:
            n = self.scheduler.store.cols.capacity
        self.first_token_s = np.full(n, np.nan)
        self.last_emit_s = np.full(n, np.nan)
        # per workload index, stamped as they happen (the handles need not be kept)
        self.send_s = np.full(n, np.nan)
        self.first_scheduled_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        # int32: per-request counts (tokens of one request, its verify steps) < 2**31
        # (compact: summed into ``results`` instead)
        if compact:
            n = 0
        self.num_preemptions = np.zeros(n, dtype=np.int32)
        self.num_cached_tok = np.zeros(n, dtype=np.int32)
        self.num_accept_draws_used = np.zeros(n, dtype=np.int32)

    # -- client -------------------------------------------------------------------------
    def _send_ready(self) -> None:
        now = self.env.now
        gate = self.max_concurrency
        while self._pending and (gate is None or self._in_flight < gate):
            req = self._pending.popleft()
            req.arrival_s = now
            self._in_flight += 1
            delay_s = self._inbound.delay_s(now, req.prompt_tok)
            if delay_s > 0.0:
                arrive = self.env.timeout(delay_s, value=req)
                arrive.callbacks.append(self._arrive)
            else:
                self.scheduler.add_request(req)
            if self.compact:
                self._stamp_sent(req.slot, now)
            else:
                self.send_s[req.index] = now
        self._wake_engine()

    def _arrive(self, event: simpy.Event) -> None:
        """A sent request reaches the scheduler (the client round trip after its send)."""
        self.scheduler.add_request(event.value)
        self._wake_engine()

    def _wake_engine(self) -> None:
        if self._wake is not None and not self._wake.triggered and self.scheduler.has_work:
            self._wake.succeed()

    _STAMPS = ("first_token_s", "last_emit_s", "send_s", "first_scheduled_s", "finish_s")

    def _stamp_sent(self, slot: int, now: float) -> None:
        """Compact: a request sent into store row ``slot`` (grown with the store)."""
        if slot >= self.send_s.size:
            cap = self.scheduler.store.cols.capacity
            for name in self._STAMPS:
                old = getattr(self, name)
                grown = np.full(cap, np.nan)
                grown[: old.size] = old
                setattr(self, name, grown)
        for name in self._STAMPS:
            getattr(self, name)[slot] = np.nan
        self.send_s[slot] = now
        self.results.sent_at(now)  # type: ignore[union-attr]
        self.recorder.sent_at(now)

    def _client(self):  # type: ignore[no-untyped-def]
        env = self.env
        i, n = 0, len(self.requests)
        while i < n:
            t = self.release_s[i]
            if t > env.now:
                yield env.timeout(t - env.now)
            while i < n and self.release_s[i] <= env.now:
                req = self.requests[i]
                par = -1 if self._parent is None else int(self._parent[i])
                if par >= 0 and not self._done[par]:
                    self._children.setdefault(par, []).append(req)
                else:
                    self._pending.append(req)
                i += 1
            self._send_ready()
        self._client_done = True

    # -- engine -------------------------------------------------------------------------
    def _shape(self, out: SchedulerOutput) -> BatchShape:
        cols = self.scheduler.store.cols
        comp = out.computed_before
        w = self.window_tok
        if w > 1:
            # a decode is a full verify window; anything else (a 1-token prompt, a window
            # clipped by the token budget or max_model_len) is priced as the chunk it is, so
            # the priced token count is the scheduled one and never exceeds the budget
            is_dec = out.verify & (out.num_new == w)
        else:
            # no speculation: one token on an otherwise computed sequence
            is_dec = (out.num_new == 1) & (
                comp == cols.prompt_tok[out.slots] + cols.num_output_tok[out.slots] - 1
            )
        num_dec = int(np.count_nonzero(is_dec))
        if num_dec == comp.size:  # decodes only (the common step): no masking
            return BatchShape(
                num_decode_req=num_dec,
                query_tok_per_decode=w,
                decode_context_tok=comp,
                prefill_new_tok=_EMPTY,
                prefill_computed_tok=_EMPTY,
            )
        is_pre = ~is_dec
        return BatchShape(
            num_decode_req=num_dec,
            query_tok_per_decode=w,
            decode_context_tok=comp[is_dec],
            prefill_new_tok=out.num_new[is_pre],
            prefill_computed_tok=comp[is_pre],
        )

    def _engine(self):  # type: ignore[no-untyped-def]
        env, sched, rec = self.env, self.scheduler, self.recorder
        kv = sched.kv
        stats, pool = kv.prefix_stats, kv.pool
        compact = self.compact
        while not (self._client_done and self._num_finished >= self._expected):
            if self._held is not None and not sched.has_work:
                yield from self._release_when_idle()
                continue
            if not sched.has_work:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            if self.decode_runs and self._client_done and not self._defer:
                # drain: nothing left to send, now or after any finish
                drain = not self._pending and not self._children
                run = sched.plan_decode_run(self.acceptance, self.window_tok, drain)
                if run is not None:
                    yield from self._decode_run(run)
                    continue
            q0, h0 = stats.queries_tok, stats.hits_tok
            out = self._schedule()
            if out.is_empty:
                head = sched.waiting[0] if sched.waiting else None
                raise RuntimeError(
                    f"scheduler made no progress at t={env.now:.6f}s: {head!r} cannot be "
                    f"admitted with {kv.num_free_blocks} free blocks and nothing running"
                )
            shape = self._shape(out)
            t0 = env.now
            step_s = self._period_s(shape, t0)
            # Pool and queue gauges are sampled right after scheduling: the step's
            # allocation peak (finished requests free their blocks after the step).
            num_running, num_waiting = len(sched.running), len(sched.waiting)
            free_blocks, usage = kv.num_free_blocks, kv.usage
            cached_free = kv.num_cached_free_blocks
            for req in out.admitted:
                if req.first_scheduled_s is None:
                    req.first_scheduled_s = t0
                    self.first_scheduled_s[req.slot if compact else req.index] = t0
            yield env.timeout(step_s)
            finished = self._update(out)
            now = env.now
            if self._defer:
                self._release_held(now)
                # workload indices, read now: a finished request's row (and handle) may be
                # recycled before the held stamps are written
                self._held = (self._emit_index(out), [req.index for req in finished])
            else:
                self._stamp_index(self._emit_index(out), now)
                self._finish(finished, now)
            self._settle(finished)
            if self._async_recycle:
                self._recycle(sched.take_released())
            rec.record_row(  # STEP_COLUMNS order
                (
                    t0,
                    step_s,
                    num_running,
                    num_waiting,
                    int(_add(out.num_new)),
                    int(_add(shape.prefill_new_tok)) if shape.prefill_new_tok.size else 0,
                    shape.num_decode_req,
                    free_blocks,
                    usage,
                    len(out.preempted),
                    len(out.admitted),
                    int(_add(out.emitted_tok)),
                    cached_free,
                    stats.queries_tok - q0,
                    stats.hits_tok - h0,
                    pool.num_evictions,
                )
            )
            if finished and not self._defer:
                self._send_ready()

    def _release_when_idle(self):  # type: ignore[no-untyped-def]
        """Nothing to schedule: the last batch's output is out once its GPU work ends."""
        env = self.env
        if self._pipelined and self._gpu_end_s > env.now:
            # (an arrival meanwhile is scheduled first; the output then follows that step)
            yield env.timeout(self._gpu_end_s - env.now)
            return
        self._release_held(env.now)

    def _period_s(self, shape: BatchShape, t0: float) -> float:
        """Seconds from this step's schedule to the next one's: the step model's price, or
        with the two-batch pipeline max(host_m, GPU busy until) (0 right after a host-bound
        step whose GPU work already covers the next one's)."""
        if not self._pipelined:
            step_s = float(self.cost.step_time_s(shape))
            if not step_s > 0:
                raise ValueError(f"step-time model returned {step_s!r} s for {shape}")
            return step_s
        host_s = float(self.cost.host_s(shape))  # type: ignore[attr-defined]
        gpu_s = float(self.cost.gpu_s(shape))  # type: ignore[attr-defined]
        if not (host_s >= 0 and gpu_s >= 0 and host_s + gpu_s > 0):
            raise ValueError(
                f"step-time model returned host {host_s!r} s, GPU {gpu_s!r} s for {shape}"
            )
        prev_end = self._gpu_end_s
        self._gpu_end_s = max(t0 + host_s, prev_end + gpu_s)
        return max(host_s, prev_end - t0)

    def _release_held(self, now: float) -> None:
        """Deferred output: the previous step's stamps, finishes and the client's sends."""
        if self._held is None:
            return
        idx, finished = self._held
        self._held = None
        self._stamp_index(idx, now)
        self._finish_index(finished, now)
        if finished:
            self._send_ready()

    def _emit_index(self, out: SchedulerOutput) -> np.ndarray:
        """Stamp-array index of this step's emitters (compact: store slot; else workload
        index, read now: a finished request's row may be recycled before a held stamp)."""
        emitted = out.emitted_slots
        return emitted if self.compact else self.scheduler.store.cols.index[emitted]

    def _stamp_index(self, idx: np.ndarray, now: float) -> None:
        """First-token times of the requests that emitted their first token this step, ITLs
        of the others, and every emitter's last-emit time."""
        # (read here: a send may have grown the compact stamp arrays)
        first_token, last_emit, rec = self.first_token_s, self.last_emit_s, self.recorder
        fresh = np.isnan(first_token[idx])
        num_fresh = int(np.count_nonzero(fresh))
        if num_fresh:
            first_token[idx[fresh]] = now
            if num_fresh < idx.size:
                rec.add_itl(now - last_emit[idx[~fresh]])
        elif idx.size:
            rec.add_itl(now - last_emit[idx])
        last_emit[idx] = now

    def _schedule(self) -> SchedulerOutput:
        out = self.scheduler.schedule()
        if self._async_recycle:
            self._recycle(self.scheduler.take_released())
        return out

    def _update(self, out: SchedulerOutput) -> list[Request]:
        """Apply a step's results; async: mark the moment vLLM plans the step after next
        (before the client hears of the finishes)."""
        finished = self.scheduler.update(out, self.acceptance)
        if self._async and not self._defer:
            self.scheduler.mark_arrivals()
        return finished

    def _decode_run(self, run: DecodeRun):  # type: ignore[no-untyped-def]
        """The steps of a planned decode-only run, one timeout each: the same times, step
        rows, inter-token latencies and finish times as scheduling them one by one (no
        request is admitted or preempted in between, no prefill, no prefix cache)."""
        env, sched, rec = self.env, self.scheduler, self.recorder
        kv, w = sched.kv, self.window_tok
        idx = run.slots if self.compact else sched.store.cols.index[run.slots]
        handles = sched.store.handles
        done_in_run: list[Request] = []
        num_waiting = len(sched.waiting)
        cached_free, evictions = kv.num_cached_free_blocks, kv.pool.num_evictions
        for j in range(run.num_steps):
            ctx, emit_idx = run.context_tok[j], idx
            if run.active is not None:
                act = run.active[j]
                ctx, emit_idx = ctx[act], idx[act]
            num_req = run.num_running[j]
            shape = BatchShape(
                num_decode_req=num_req,
                query_tok_per_decode=w,
                decode_context_tok=ctx,
                prefill_new_tok=_EMPTY,
                prefill_computed_tok=_EMPTY,
            )
            step_s = float(self.cost.step_time_s(shape))
            if not step_s > 0:
                raise ValueError(f"step-time model returned {step_s!r} s for {shape}")
            t0 = env.now
            yield env.timeout(step_s)
            if self._async:
                sched.mark_arrivals()
            now = env.now
            last_emit = self.last_emit_s  # (a send may have grown the compact arrays)
            rec.add_itl(now - last_emit[emit_idx])
            last_emit[emit_idx] = now
            finished = (
                [handles[s] for s in run.slots[run.finish_step == j].tolist()]
                if run.active is not None
                else []
            )
            self._finish(finished, now)
            done_in_run += finished
            free = run.free_blocks[j]
            rec.record_row(  # STEP_COLUMNS order
                (
                    t0,
                    step_s,
                    num_req,
                    num_waiting,
                    num_req * w,
                    0,
                    num_req,
                    free,
                    kv.usage_at(free),
                    0,
                    0,
                    run.emitted_tok[j],
                    cached_free,
                    0,
                    0,
                    evictions,
                )
            )
            if finished:
                self._send_ready()
        sched.apply_decode_run(run)
        # counters of the run's finished requests are final only now (and their rows are
        # handed back only now: a request sent during the run must not take one)
        self._settle(done_in_run)

    def _settle(self, finished: list[Request]) -> None:
        """Copy finished requests' final counters to the per-index arrays, tell streaming
        acceptance draws, and (``recycle_slots``) hand their store rows back."""
        if not finished:
            return
        store = self.scheduler.store
        cols = store.cols
        slots = np.fromiter((r.slot for r in finished), dtype=np.int64, count=len(finished))
        idx = cols.index[slots]
        used = cols.num_accept_draws_used[slots]
        if self.results is not None:
            self.results.add(
                idx,
                send_s=self.send_s[slots],
                first_scheduled_s=self.first_scheduled_s[slots],
                first_token_s=self.first_token_s[slots],
                finish_s=self.finish_s[slots],
                output_tok=cols.max_output_tok[slots],
                num_preemptions=cols.num_preemptions[slots],
                cached_tok=cols.num_cached_tok[slots],
            )
        else:
            self.num_accept_draws_used[idx] = used
            self.num_preemptions[idx] = cols.num_preemptions[slots]
            self.num_cached_tok[idx] = cols.num_cached_tok[slots]
        if isinstance(self.acceptance, StreamingAcceptanceDraws):
            self.acceptance.finished(idx, used)
        if self.recycle_slots and not self._async:
            self._recycle(slots)

    def _recycle(self, slots: np.ndarray) -> None:
        store = self.scheduler.store
        for s in slots.tolist():
            store.release(s)

    def _finish(self, finished: list[Request], now: float) -> None:
        """Finish times, conversation children to the head of the send queue, counts."""
        if finished and self.results is not None:
            self.results.finished_at(now)
            self.recorder.finished_at(now)
        for req in finished:
            req.finish_s = now
            self.finish_s[req.slot if self.compact else req.index] = now
            self._release_children(req.index)
        self._num_finished += len(finished)
        self._in_flight -= len(finished)

    def _finish_index(self, finished: list[int], now: float) -> None:
        """``_finish`` of held finishes, by workload index (not compact mode)."""
        for i in finished:
            self.finish_s[i] = now
            self._release_children(i)
        self._num_finished += len(finished)
        self._in_flight -= len(finished)

    def _release_children(self, index: int) -> None:
        """Conversation turns: a finished parent's children go to the head of the queue."""
        if self._parent is not None:
            self._done[index] = True
            for child in reversed(self._children.pop(index, [])):
                self._pending.appendleft(child)

    # -- fed mode (capsim.fleet) --------------------------------------------------------
    def submit(self, req: Request) -> None:
        """A router hands this replica one request now (fed mode)."""
        self._expected += 1
        self._pending.append(req)
        self._send_ready()

    def close(self) -> None:
        """The router has sent everything: drain and stop (fed mode)."""
        self._client_done = True
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    @property
    def num_outstanding(self) -> int:
        """Requests handed to this replica and not finished (queued or running)."""
        return self._expected - self._num_finished

    def start(self) -> None:
        """Register the engine process only (fed mode: the router is the client)."""
        self.env.process(self._engine())

    def run(self) -> None:
        self.env.process(self._client())
        self.env.process(self._engine())
        self.env.run()
        if self._num_finished != len(self.requests):
            raise RuntimeError(
                f"simulation ended with {self._num_finished} of {len(self.requests)} finished"
            )
