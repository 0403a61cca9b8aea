"""A request as vLLM v1 sees it: counters that catch up, no prefill/decode phase enum.

::

    |<-------------- num_tokens = prompt + outputs -------------->|<- drafts ->|
    |<------ num_computed_tok (KV/state computed) ------>|        |  num_spec  |
                                                          ^ scheduled next step

``num_new_tok = num_tokens_with_spec - num_computed_tok`` is all the scheduler needs:
a prefill (or a recompute after preemption) is a long run of new tokens, a decode
with k drafts is ``1 + k``.

Storage: once a request is added to a scheduler its counters live in that scheduler's
``RequestStore`` (``RequestColumns``: one named numpy array per counter, one row per
request), so a step over the running batch
is a handful of vector operations. ``Request`` stays the handle everyone else uses; its
counter properties read and write the store row (or its own fields before it is added).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum

import numpy as np


class Status(IntEnum):
    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3


@dataclass(slots=True)
class RequestColumns:
    """The store's counters, one named int64 array per counter (row = slot). Arrays are
    replaced in place of the same object when the store grows, so a reference to the
    columns stays valid."""

    prompt_tok: np.ndarray
    max_output_tok: np.ndarray
    num_output_tok: np.ndarray
    num_computed_tok: np.ndarray
    num_spec_tok: np.ndarray
    num_attn_blocks: np.ndarray
    num_gdn_blocks: np.ndarray
    num_preemptions: np.ndarray
    num_accept_draws_used: np.ndarray
    num_cached_tok: np.ndarray
    index: np.ndarray
    status: np.ndarray

    @classmethod
    def zeros(cls, capacity: int) -> RequestColumns:
        return cls(*(np.zeros(capacity, dtype=np.int64) for _ in _COUNTERS))

    @property
    def capacity(self) -> int:
        return len(self.prompt_tok)

    def grow(self, capacity: int) -> None:
        for name in _COUNTERS:
            col = getattr(self, name)
            grown = np.zeros(capacity, dtype=np.int64)
            grown[: len(col)] = col
            setattr(self, name, grown)

    def __getitem__(self, name: str) -> np.ndarray:
        """``cols["index"]``: the column by name (readers outside ``core``)."""
        if name not in _COUNTERS:
            raise KeyError(f"request column {name!r} is unknown: one of {', '.join(_COUNTERS)}")
        return getattr(self, name)


_COUNTERS: tuple[str, ...] = tuple(f.name for f in fields(RequestColumns))


class RequestStore:
    """Column store of request counters; row = slot, assigned in add order.

    ``release(slot)`` hands a finished request's row back for the next ``add`` (the
    engine does so once the request's memos are dropped; content it shares with nobody
    is keyed by ``uid``, not the row), so the store holds the requests in flight, not
    every request of the run.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.size = 0
        self.num_added = 0
        """Requests added so far: a request's ``uid`` (its slot when no row is reused)."""
        self.cols = RequestColumns.zeros(max(capacity, 1))
        self.handles: list[Request] = []
        self._free: list[int] = []

    def release(self, slot: int) -> None:
        """Row ``slot`` (a finished request's) is reused by a later ``add`` (its handle is
        kept until then)."""
        self._free.append(slot)

    def add(self, req: Request) -> int:
        """Store ``req``'s counters in a free or the next row; ``req.slot`` is that row."""
        cols = self.cols
        if self._free:
            slot = self._free.pop()
            self.handles[slot] = req
        else:
            if self.size == cols.capacity:
                cols.grow(2 * cols.capacity)
            slot = self.size
            self.size += 1
            self.handles.append(req)
        own = req._own  # ints (the counter setters store int(value))
        for name in _COUNTERS:
            getattr(cols, name)[slot] = own[name]
        req._store = self
        req._slot = slot
        req._uid = self.num_added
        self.num_added += 1
        return slot


def _counter(name: str) -> property:
    def get(self: Request) -> int:
        store = self._store
        if store is None:
            return self._own[name]
        return int(getattr(store.cols, name)[self._slot])

    def set_(self: Request, value: int) -> None:
        store = self._store
        if store is None:
            self._own[name] = int(value)
        else:
            getattr(store.cols, name)[self._slot] = int(value)

    return property(get, set_, doc=f"``{name}`` counter")


class Request:
    """Handle of one request. Timestamps are ``None`` until they happen (token times are
    kept by the engine, per workload index)."""

    __slots__ = (
        "_own",
        "_slot",
        "_store",
        "_uid",
        "arrival_s",
        "finish_s",
        "first_scheduled_s",
        "req_id",
        "segments",
    )

    def __init__(
        self,
        *,
        req_id: str,
        prompt_tok: int,
        max_output_tok: int,
        arrival_s: float = 0.0,
        index: int = 0,
        segments: tuple[tuple[int, int], ...] | None = None,
    ) -> None:
        if prompt_tok < 1:
            raise ValueError(f"request {req_id}: prompt_tok={prompt_tok} must be >= 1")
        if max_output_tok < 1:
            raise ValueError(f"request {req_id}: max_output_tok={max_output_tok} must be >= 1")
        self.req_id = req_id
        self._own: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        self._own.update(prompt_tok=prompt_tok, max_output_tok=max_output_tok, index=index)
        self._store: RequestStore | None = None
        self._slot = -1
        self._uid = -1
        self.arrival_s = arrival_s
        self.first_scheduled_s: float | None = None
        self.finish_s: float | None = None
        self.segments = segments
        """Content of prompt + outputs as ``(segment_id, num_tok)`` runs (``block_hash``);
        ``None``: shared with no other request."""

    @classmethod
    def many(
        cls,
        prompt_tok: list[int],
        max_output_tok: list[int],
        segments: tuple[tuple[tuple[int, int], ...] | None, ...],
    ) -> list[Request]:
        """``Request(req_id=f"r{i}", prompt_tok=p, max_output_tok=o, index=i,
        segments=s)`` for each row: the same objects, built without a call per row."""
        for i, (p, o) in enumerate(zip(prompt_tok, max_output_tok, strict=True)):
            if p < 1 or o < 1:  # the constructor names the first bad row
                cls(req_id=f"r{i}", prompt_tok=p, max_output_tok=o, index=i)
        base = dict.fromkeys(_COUNTERS, 0)
        out = []
        new = cls.__new__
        for i, (p, o, seg) in enumerate(zip(prompt_tok, max_output_tok, segments, strict=True)):
            req = new(cls)
            req.req_id = f"r{i}"
            own = base.copy()
            own.update(prompt_tok=p, max_output_tok=o, index=i)
            req._own = own
            req._store = None
            req._slot = -1
            req._uid = -1
            req.arrival_s = 0.0
            req.first_scheduled_s = None
            req.finish_s = None
            req.segments = seg
            out.append(req)
        return out

    prompt_tok = _counter("prompt_tok")
    max_output_tok = _counter("max_output_tok")
    num_output_tok = _counter("num_output_tok")
    num_computed_tok = _counter("num_computed_tok")
    num_spec_tok = _counter("num_spec_tok")
    num_attn_blocks = _counter("num_attn_blocks")
    num_gdn_blocks = _counter("num_gdn_blocks")
    num_preemptions = _counter("num_preemptions")
    num_accept_draws_used = _counter("num_accept_draws_used")
    num_cached_tok = _counter("num_cached_tok")
    index = _counter("index")

    @property
    def slot(self) -> int:
        """Row of this request in its scheduler's ``RequestStore`` (-1 before it is added)."""
        return self._slot

    @property
    def uid(self) -> int:
        """Add order in its scheduler's store, unique in a run even when rows are reused
        (-1 before it is added): the identity of content it shares with nobody."""
        return self._uid

    @property
    def is_stored(self) -> bool:
        """The request was added to a scheduler's store (its counters live there)."""
        return self._store is not None

    @property
    def status(self) -> Status:
        return Status(
            self._own["status"] if self._store is None else self._store.cols.status[self._slot]
        )

    @status.setter
    def status(self, value: Status) -> None:
        if self._store is None:
            self._own["status"] = int(value)
        else:
            self._store.cols.status[self._slot] = int(value)

    @property
    def num_tokens(self) -> int:
        return self.prompt_tok + self.num_output_tok

    @property
    def num_tokens_with_spec(self) -> int:
        return self.prompt_tok + self.num_output_tok + self.num_spec_tok

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def __repr__(self) -> str:
        return (
            f"Request({self.req_id}, {self.status.name.lower()}, "
            f"computed={self.num_computed_tok}, tokens={self.num_tokens}+{self.num_spec_tok})"
        )
