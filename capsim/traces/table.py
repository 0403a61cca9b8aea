"""The one request table every workload produces and the simulator consumes.

Invariants (checked in ``__post_init__``):
- ``prompt_tok`` and ``output_tok`` are int64 arrays of equal length, every value >= 1;
- ``arrival_s`` is ``None`` (closed-loop workloads: the load generator decides when a
  request is sent) or a float64 array of the same length, non-decreasing, starting at >= 0;
- ``source_id`` names each row's origin (e.g. ``"sharegpt:QWJhYvA_0"``), same length;
- ``segments`` is ``None`` (no request shares tokens with another) or, per request, the
  content of prompt + output as ``(segment_id, num_tok)`` runs summing to
  ``prompt_tok + output_tok`` (``capsim.core.block_hash``: equal segments = equal tokens);
- ``parent`` is ``None`` or, per request, the row that must finish before it is sent (the
  previous turn of a conversation), ``-1`` for none, always an earlier row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestTable:
    """A workload as plain token counts (and optional arrival offsets in seconds)."""

    name: str = field(metadata={"help": "workload name, e.g. 'sharegpt'"})
    prompt_tok: np.ndarray = field(metadata={"help": "prompt tokens per request (int64)"})
    output_tok: np.ndarray = field(metadata={"help": "output tokens per request (int64)"})
    arrival_s: np.ndarray | None = field(
        default=None, metadata={"help": "arrival offset per request in seconds, or None"}
    )
    source_id: tuple[str, ...] = field(
        default=(), metadata={"help": "origin of each row; empty means 'name:index'"}
    )
    segments: tuple[tuple[tuple[int, int], ...], ...] | None = field(
        default=None, metadata={"help": "content runs (segment_id, num_tok) per request"}
    )
    parent: np.ndarray | None = field(
        default=None, metadata={"help": "row that must finish first, -1 for none (int64)"}
    )

    def __post_init__(self) -> None:
        prompt = np.asarray(self.prompt_tok, dtype=np.int64)
        output = np.asarray(self.output_tok, dtype=np.int64)
        object.__setattr__(self, "prompt_tok", prompt)
        object.__setattr__(self, "output_tok", output)
        if prompt.ndim != 1 or output.shape != prompt.shape:
            raise ValueError(
                f"RequestTable {self.name!r}: prompt_tok and output_tok must be 1-D of equal "
                f"length, got shapes {prompt.shape} and {output.shape}"
            )
        if prompt.size == 0:
            raise ValueError(f"RequestTable {self.name!r}: no requests")
        for col, arr in (("prompt_tok", prompt), ("output_tok", output)):
            if (arr < 1).any():
                raise ValueError(
                    f"RequestTable {self.name!r}: {col} must be >= 1, "
                    f"got {int(arr.min())} at row {int(np.argmin(arr))}"
                )
        if self.arrival_s is not None:
            arr = np.asarray(self.arrival_s, dtype=np.float64)
            object.__setattr__(self, "arrival_s", arr)
            if arr.shape != prompt.shape:
                raise ValueError(
                    f"RequestTable {self.name!r}: arrival_s has shape {arr.shape}, "
                    f"expected {prompt.shape}"
                )
            if not np.isfinite(arr).all() or (arr < 0).any() or (np.diff(arr) < 0).any():
                raise ValueError(
                    f"RequestTable {self.name!r}: arrival_s must be finite, >= 0 and sorted"
                )
        if self.source_id:
            if len(self.source_id) != prompt.size:
                raise ValueError(
                    f"RequestTable {self.name!r}: source_id has {len(self.source_id)} "
                    f"entries, expected {prompt.size}"
                )
        else:
            object.__setattr__(
                self, "source_id", tuple(f"{self.name}:{i}" for i in range(prompt.size))
            )

        if self.segments is not None:
            if len(self.segments) != prompt.size:
                raise ValueError(
                    f"RequestTable {self.name!r}: segments has {len(self.segments)} entries, "
                    f"expected {prompt.size}"
                )
            for i, segs in enumerate(self.segments):
                total = sum(n for _, n in segs)
                if total != prompt[i] + output[i] or any(n < 1 for _, n in segs):
                    raise ValueError(
                        f"RequestTable {self.name!r}: segments of row {i} cover {total} "
                        f"tokens, expected prompt+output={int(prompt[i] + output[i])}"
                    )
        if self.parent is not None:
            par = np.asarray(self.parent, dtype=np.int64)
            object.__setattr__(self, "parent", par)
            if par.shape != prompt.shape or (par >= np.arange(par.size)).any() or (par < -1).any():
                raise ValueError(
                    f"RequestTable {self.name!r}: parent must give an earlier row or -1 per row"
                )

    @property
    def num_requests(self) -> int:
        return int(self.prompt_tok.size)

    def take(self, indices: np.ndarray) -> RequestTable:
        """Rows ``indices`` in that order (arrivals, if any, are kept as they are)."""
        idx = np.asarray(indices, dtype=np.int64)
        arrival = None if self.arrival_s is None else self.arrival_s[idx]
        parent = None
        if self.parent is not None:
            # a parent outside the selection (or after its child) no longer gates it
            where = np.full(self.num_requests, -1, dtype=np.int64)
            where[idx] = np.arange(idx.size)
            par = self.parent[idx]
            parent = np.where(par >= 0, where[np.maximum(par, 0)], -1)
            parent = np.where(parent < np.arange(idx.size), parent, -1)
        return RequestTable(
            name=self.name,
            prompt_tok=self.prompt_tok[idx],
            output_tok=self.output_tok[idx],
            arrival_s=arrival,
            source_id=tuple(self.source_id[i] for i in idx),
            segments=None if self.segments is None else tuple(self.segments[i] for i in idx),
            parent=parent,
        )
