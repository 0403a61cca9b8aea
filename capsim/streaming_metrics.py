"""Compact recorders for long runs: inter-token latencies as (value, count) runs, engine
steps as a few float columns, and numpy's quantiles computed exactly from the runs.

Why runs: every request that emits in a step gets the same inter-token latency unless it
skipped steps (prefill chunks, preemption), so a step contributes one or a few distinct
values. ``ItlRuns`` stores each step's distinct values with their counts (16 bytes per
run instead of 8 per token); ``weighted_percentile`` gives exactly what ``np.percentile``
(linear method) and ``np.median`` give on the expanded array: the same order statistics,
the same interpolation arithmetic. The mean is ``sum(value * count) / n`` (``math.fsum``),
which can differ from numpy's pairwise sum of the expanded array in the last bits: that
is why the exact path (every value kept) stays the default for runs up to
``capsim.simulate.STREAMING_MIN_REQUESTS`` requests.
"""

from __future__ import annotations

import math
from array import array

import numpy as np


class ItlRuns:
    """Inter-token latencies of a run as (value, count) pairs, in emission order."""

    def __init__(self) -> None:
        self._values = array("d")
        self._counts = array("q")

    def add(self, itl_s: np.ndarray) -> None:
        if not itl_s.size:
            return
        lo, hi = itl_s.min(), itl_s.max()
        if lo == hi:
            self._values.append(float(lo))
            self._counts.append(int(itl_s.size))
            return
        values, counts = np.unique(itl_s, return_counts=True)
        self._values.extend(values.tolist())
        self._counts.extend(counts.tolist())

    @property
    def num_values(self) -> int:
        return int(sum(self._counts))

    @property
    def nbytes(self) -> int:
        return self._values.itemsize * len(self._values) + self._counts.itemsize * len(self._counts)

    def stats(self, prefix: str) -> dict[str, float]:
        """``{prefix}_mean_s, _median_s, _p99_s`` as ``metrics._stats`` names them."""
        values = np.frombuffer(self._values, dtype=np.float64)
        counts = np.frombuffer(self._counts, dtype=np.int64)
        nan = float("nan")
        n = int(counts.sum())
        if n == 0:
            return {f"{prefix}_mean_s": nan, f"{prefix}_median_s": nan, f"{prefix}_p99_s": nan}
        order = np.argsort(values, kind="stable")
        v, c = values[order], counts[order]
        return {
            f"{prefix}_mean_s": math.fsum((values * counts).tolist()) / n,
            f"{prefix}_median_s": weighted_median(v, c),
            f"{prefix}_p99_s": weighted_percentile(v, c, 99.0),
        }


def _order_stat(sorted_values: np.ndarray, cum_counts: np.ndarray, rank: int) -> np.float64:
    """The ``rank``-th (0-based) value of the expanded sorted array."""
    return sorted_values[int(np.searchsorted(cum_counts, rank, side="right"))]


def weighted_percentile(sorted_values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(sorted_values, counts), q)`` without the repeat.

    The same steps as numpy's linear method: virtual index ``(n - 1) * q/100``, its floor
    and the next order statistic, and numpy's two-sided interpolation (``_lerp``).
    """
    cum = np.cumsum(counts)
    n = int(cum[-1])
    quantile = np.true_divide(q, 100)
    virtual = np.float64(n - 1) * quantile
    if virtual >= n - 1:
        return float(_order_stat(sorted_values, cum, n - 1))
    prev = np.floor(virtual)
    a = _order_stat(sorted_values, cum, int(prev))
    b = _order_stat(sorted_values, cum, int(prev) + 1)
    gamma = virtual - prev
    diff = b - a
    return float(b - diff * (1 - gamma)) if gamma >= 0.5 else float(a + diff * gamma)


def weighted_median(sorted_values: np.ndarray, counts: np.ndarray) -> float:
    """``np.median(np.repeat(sorted_values, counts))``: the middle value, or the mean of
    the two middle ones."""
    cum = np.cumsum(counts)
    n = int(cum[-1])
    if n % 2:
        return float(_order_stat(sorted_values, cum, n // 2))
    a = _order_stat(sorted_values, cum, n // 2 - 1)
    b = _order_stat(sorted_values, cum, n // 2)
    return float(np.mean(np.array([a, b])))


class StepColumns:
    """The step figures a summary needs when the step table is not kept: start and
    duration, pool usage and tokens emitted per step (growable float64/int64 columns),
    plus running maxima and sums of the other gauges. 32 bytes per step."""

    def __init__(self) -> None:
        self.t_start_s = array("d")
        self.step_s = array("d")
        self.kv_usage = array("d")
        self.num_emitted_tok = array("q")
        self.peak_running = 0
        self.peak_waiting = 0
        self.prefix_query_tok = 0
        self.prefix_hit_tok = 0
        self.num_evictions = 0

    def add(self, row: tuple[float, ...]) -> None:
        """One row in ``metrics.STEP_COLUMNS`` order."""
        self.t_start_s.append(row[0])
        self.step_s.append(row[1])
        self.kv_usage.append(row[8])
        self.num_emitted_tok.append(int(row[11]))
        self.peak_running = max(self.peak_running, int(row[2]))
        self.peak_waiting = max(self.peak_waiting, int(row[3]))
        self.prefix_query_tok += int(row[13])
        self.prefix_hit_tok += int(row[14])
        self.num_evictions = int(row[15])

    def __len__(self) -> int:
        return len(self.step_s)

    @property
    def nbytes(self) -> int:
        return 8 * 4 * len(self.step_s)

    def column(self, name: str) -> np.ndarray:
        return np.frombuffer(
            getattr(self, name), dtype=np.int64 if name.startswith("num_") else np.float64
        )
