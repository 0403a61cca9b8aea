"""Send times like ``vllm bench serve`` (NOTES.md s2).

- concurrency C, rate inf: every request is released at t=0; a semaphore of C lets a
  request be sent only when one of the C in flight finishes (closed loop);
- rate r: gaps ~ Gamma(shape=burstiness, scale=1/(r*burstiness)), cumulative times
  rescaled so the last request goes out at exactly N/r (as vLLM 0.33 does);
  an optional max concurrency still gates sending;
- replay: the trace's own arrival offsets.
"""

from __future__ import annotations

import numpy as np

from capsim.config import LoadConfig


def release_times_s(
    load: LoadConfig,
    num_requests: int,
    rng: np.random.Generator,
    trace_arrival_s: np.ndarray | None,
) -> np.ndarray:
    """When each request becomes ready to send (before any concurrency gate)."""
    if load.mode == "concurrency":
        return np.zeros(num_requests, dtype=np.float64)
    if load.mode == "replay":
        if trace_arrival_s is None:
            raise ValueError("load.mode='replay': the workload has no arrival timestamps")
        arr = np.asarray(trace_arrival_s[:num_requests], dtype=np.float64)
        return arr - arr[0]
    rate = float(load.rate_req_per_s or 0.0)
    theta = 1.0 / (rate * load.burstiness)
    gaps = rng.gamma(shape=load.burstiness, scale=theta, size=num_requests)
    times = np.cumsum(gaps)
    target_end = num_requests / rate
    if times[-1] > 0:
        times = times * (target_end / times[-1])
    return times


RELEASE_CHUNK = 65536
"""Release times generated per block of this many requests (512 KiB)."""


class ChunkedReleaseTimes:
    """``release_times_s`` for a closed loop or an open-loop rate, generated block by
    block as the client reads them in order (a streaming run keeps no array of them).

    Open loop: the gaps are drawn twice from the same generator state: once to total
    them (the rescale to end at N/r needs the last cumulative time), then block by block.
    Gamma draws and the running sum give the same values in blocks as in one call, so
    every time is bit-identical to ``release_times_s``.
    """

    def __init__(
        self,
        load: LoadConfig,
        num_requests: int,
        rng: np.random.Generator,
        *,
        chunk: int = RELEASE_CHUNK,
    ) -> None:
        if load.mode not in ("concurrency", "rate"):
            raise ValueError(
                f"load.mode={load.mode!r}: chunked release times need concurrency or rate"
            )
        self._n = int(num_requests)
        self._chunk = int(chunk)
        self._zeros = load.mode == "concurrency"
        self._rng = rng
        self._block_lo = 0
        self._block = np.zeros(0, dtype=np.float64)
        self._carry = 0.0  # cumulative time before the next block
        self._next = 0  # first request of the next block
        if self._zeros:
            return
        rate = float(load.rate_req_per_s or 0.0)
        self._shape = load.burstiness
        self._theta = 1.0 / (rate * load.burstiness)
        self._target_end = self._n / rate
        state = rng.bit_generator.state
        total = 0.0
        for lo in range(0, self._n, self._chunk):
            gaps = rng.gamma(
                shape=self._shape, scale=self._theta, size=min(self._chunk, self._n - lo)
            )
            total = float(np.cumsum(np.concatenate([[total], gaps]))[-1])
        rng.bit_generator.state = state
        self._last = total

    def __len__(self) -> int:
        return self._n

    def _advance(self) -> None:
        lo = self._next
        size = min(self._chunk, self._n - lo)
        if self._zeros:
            self._block = np.zeros(size, dtype=np.float64)
        else:
            gaps = self._rng.gamma(shape=self._shape, scale=self._theta, size=size)
            times = np.cumsum(np.concatenate([[self._carry], gaps]))[1:]
            self._carry = float(times[-1])
            if self._last > 0:
                times = times * (self._target_end / self._last)
            self._block = times
        self._block_lo = lo
        self._next = lo + size

    def __getitem__(self, i: int) -> float:
        """Request ``i``'s release time; reads go forward (the client's order)."""
        if not 0 <= i < self._n:
            raise IndexError(i)
        if i < self._block_lo:
            raise IndexError(f"release time {i} was read already (blocks go forward only)")
        while i >= self._next:
            self._advance()
        return float(self._block[i - self._block_lo])
