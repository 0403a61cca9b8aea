"""Accepted-draft counts drawn chunk by chunk as requests are sent, freed once they finish.

``AcceptanceDraws`` draws every request's sequence up front: about
``1.25 * output_tok / E[tokens per step] + 8`` int64 values per request (3 KB for a
1024-token output), which dominates a long run's memory. ``StreamingAcceptanceDraws``
gives the same draws (the same generator calls, in the same order, one block of
``chunk_requests`` requests at a time, so every value is bit-identical) but stores them
as int8 and only for a window of chunks: a chunk is drawn when one of its requests is
first asked for, and dropped once all of its requests finished (``finished``), after
adding what its requests used to the running totals ``mean_tokens_over_used`` reads.

Memory: the window (a few chunks in flight): its draws and, per request of those chunks,
an offset, a step count and the steps used. Nothing is kept per request of the run
(``num_held_requests``).
"""

from __future__ import annotations

import numpy as np

from capsim.config import SpecDecodeConfig
from capsim.core.acceptance import AcceptanceDraws, depth_acceptance, expected_tokens_per_step

CHUNK_REQUESTS = 16384
"""Requests per drawn block (a block of 1024-token outputs is about 6.5 MB as int8)."""


class StreamingAcceptanceDraws(AcceptanceDraws):
    """``AcceptanceDraws`` with the same values, drawn lazily and freed per chunk."""

    __slots__ = (
        "_accepted",
        "_base",
        "_chunk",
        "_end",
        "_hi",
        "_left",
        "_lo",
        "_mean_tok",
        "_out",
        "_q32",
        "_rng",
        "_steps_used",
        "_used",
        "_window",
    )

    def __init__(
        self,
        spec: SpecDecodeConfig,
        output_tok: np.ndarray,
        rng: np.random.Generator,
        *,
        chunk_requests: int = CHUNK_REQUESTS,
    ) -> None:
        if chunk_requests < 1:
            raise ValueError(f"chunk_requests={chunk_requests!r}: must be >= 1")
        q = depth_acceptance(spec)
        self._out = np.asarray(output_tok)  # (any integer dtype; int64 per chunk)
        self._mean_tok = expected_tokens_per_step(spec)
        self._draws = np.zeros(0, dtype=np.int64)  # unused: the window holds the values
        self._q32 = q.astype(np.float32)
        self._rng = rng
        self._chunk = chunk_requests
        n = self._out.size
        num_chunks = -(-n // chunk_requests)
        self._left = np.diff(np.minimum(np.arange(num_chunks + 1) * chunk_requests, n))
        self._lo = 0  # first chunk still held
        self._hi = 0  # chunks drawn so far
        self._base = 0  # offset of the window's first value
        self._window = np.zeros(0, dtype=np.int8)
        # per request of the held chunks (requests lo*chunk .. hi*chunk): the offset of its
        # first draw, its step count (>= 1) and the verify steps it used; _end = offset
        # after the last drawn request
        self._offsets = np.zeros(0, dtype=np.int64)
        self._nsafe = np.zeros(0, dtype=np.int64)
        self._used = np.zeros(0, dtype=np.int64)
        self._end = 0
        self._accepted = 0
        self._steps_used = 0

    @property
    def num_requests(self) -> int:
        return int(self._out.size)

    @property
    def num_held_requests(self) -> int:
        """Requests whose bookkeeping is held (those of the chunks in the window)."""
        return int(self._offsets.size)

    # -- drawing ------------------------------------------------------------------------
    def _draw_chunk(self) -> None:
        c = self._hi
        a, b = c * self._chunk, min((c + 1) * self._chunk, self.num_requests)
        out = self._out[a:b].astype(np.int64)
        # the same per-request step counts as AcceptanceDraws (every output is >= 1), and
        # the same offsets (an integer running sum, chunk by chunk: exact)
        steps = np.minimum(out, np.ceil(out / self._mean_tok * 1.25).astype(np.int64) + 8)
        ends = self._end + np.cumsum(steps)
        start = ends - steps
        total = int(ends[-1] - self._end) if ends.size else 0
        q32 = self._q32
        lead = np.zeros(total, dtype=np.int8)
        if q32.size and total:
            u = self._rng.random((total, q32.size), dtype=np.float32)
            alive = u[:, 0] < q32[0]
            lead += alive
            for d in range(1, q32.size):
                alive &= u[:, d] < q32[d]
                lead += alive
        self._window = np.concatenate([self._window, lead])
        self._offsets = np.concatenate([self._offsets, start])
        self._nsafe = np.concatenate([self._nsafe, np.maximum(steps, 1)])
        self._used = np.concatenate([self._used, np.zeros(b - a, dtype=np.int64)])
        if ends.size:
            self._end = int(ends[-1])
        self._hi = c + 1

    def draw_many(self, indices: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """As ``AcceptanceDraws.draw_many`` (broadcasting ``indices`` against ``steps``)."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size:
            need = int(idx.max()) // self._chunk
            while self._hi <= need:
                self._draw_chunk()
            if int(idx.min()) // self._chunk < self._lo:
                raise RuntimeError("acceptance draws of a finished chunk were asked for again")
        row = idx - self._lo * self._chunk
        pos = self._offsets[row] + steps % self._nsafe[row] - self._base
        return self._window[pos].astype(np.int64)

    # -- finishing ----------------------------------------------------------------------
    def finished(self, indices: np.ndarray, used_steps: np.ndarray) -> None:
        """Requests ``indices`` finished after ``used_steps`` verify steps each."""
        idx = np.asarray(indices, dtype=np.int64)
        if not idx.size:
            return
        self._used[idx - self._lo * self._chunk] = used_steps
        np.subtract.at(self._left, idx // self._chunk, 1)
        while self._lo < self._hi and self._left[self._lo] == 0:
            self._free_first_chunk()

    def _chunk_rows(self, c: int) -> tuple[int, int]:
        """Rows of chunk ``c`` in the held bookkeeping arrays."""
        a = (c - self._lo) * self._chunk
        return a, min(a + self._chunk, self._offsets.size)

    def _chunk_accepted(self, c: int) -> tuple[int, int]:
        """Accepted drafts and verify steps of chunk ``c``'s requests (draws in the window)."""
        a, b = self._chunk_rows(c)
        used = self._used[a:b]
        start = self._offsets[a:b] - self._base
        end = start + self._nsafe[a:b]
        run = np.concatenate([[0], np.cumsum(self._window[: int(end[-1])], dtype=np.int64)])
        full, rest = np.divmod(used, end - start)
        accepted = int((full * (run[end] - run[start]) + run[start + rest] - run[start]).sum())
        return accepted, int(used.sum())

    def _free_first_chunk(self) -> None:
        c = self._lo
        acc, num = self._chunk_accepted(c)
        self._accepted += acc
        self._steps_used += num
        _, b = self._chunk_rows(c)
        nxt = int(self._offsets[b]) if b < self._offsets.size else self._end
        cut = nxt - self._base
        self._window = self._window[cut:].copy()
        self._offsets = self._offsets[b:].copy()
        self._nsafe = self._nsafe[b:].copy()
        self._used = self._used[b:].copy()
        self._base = nxt
        self._lo = c + 1

    def mean_tokens_over_used(self, used_steps: np.ndarray | None = None) -> float:
        """Mean tokens per verify step over the draws used (the freed chunks' totals plus
        the held ones', from the counts given to ``finished``; ``used_steps`` is ignored).
        """
        accepted, num = self._accepted, self._steps_used
        for c in range(self._lo, self._hi):
            acc, n = self._chunk_accepted(c)
            accepted, num = accepted + acc, num + n
        if num == 0:
            return float("nan")
        return 1.0 + accepted / num
