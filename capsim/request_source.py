"""Request handles built when the client sends them, not all before the run.

A ``Request`` handle costs a few hundred bytes (its object, its counter dict, its id
string); building one per workload row up front made memory grow with the run length.
``LazyRequests`` is the sequence the engine's client reads in order: row ``i`` becomes
``Request(req_id=f"r{i}", ...)`` (the handle ``Request.many`` would have built) when it
is first read, and nothing keeps it once the engine has finished it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np

from capsim.core.request import Request


class LazyRequests(Sequence[Request]):
    """Row ``i`` of (prompt, output, segments) as a fresh ``Request`` on each read."""

    def __init__(
        self,
        prompt_tok: np.ndarray,
        max_output_tok: np.ndarray,
        segments: Sequence[tuple[tuple[int, int], ...] | None] | None = None,
    ) -> None:
        if len(prompt_tok) != len(max_output_tok):
            raise ValueError("prompt_tok and max_output_tok differ in length")
        if segments is not None and len(segments) != len(prompt_tok):
            raise ValueError("segments and prompt_tok differ in length")
        # any integer dtype (a compact run's are int16/int32): read back as Python ints
        self._prompt = np.asarray(prompt_tok)
        self._output = np.asarray(max_output_tok)
        self._segments = segments

    def __len__(self) -> int:
        return int(self._prompt.size)

    @overload
    def __getitem__(self, i: int) -> Request: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Request]: ...
    def __getitem__(self, i: int | slice) -> Request | Sequence[Request]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return Request(
            req_id=f"r{i}",
            prompt_tok=int(self._prompt[i]),
            max_output_tok=int(self._output[i]),
            index=i,
            segments=None if self._segments is None else self._segments[i],
        )
