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
    """The step figures a summary needs when the step table is not kept: duration and
    pool usage per step (growable float64 columns, for the usage mean weighted by step
    time), plus running maxima and sums of the other gauges. 16 bytes per step.

    ``phase_columns`` (a run whose requests table is kept: ``metrics.phases`` reads the
    arrays) also keeps each step's start and tokens emitted (32 bytes per step).
    Otherwise the tokens emitted in phases' three windows are summed as steps are
    recorded: the engine reports the run's first finish (``finished_at``) and each send
    (``sent_at``), and a step ends at ``t_start_s + step_s`` = the clock when it is
    recorded, so "ended by the first finish" / "ended by the last send" are known then.
    """

    def __init__(self, *, phase_columns: bool = True) -> None:
        self.phase_columns = phase_columns
        self.t_start_s = array("d")
        self.step_s = array("d")
        self.kv_usage = array("d")
        self.num_emitted_tok = array("q")
        self.peak_running = 0
        self.peak_waiting = 0
        self.prefix_query_tok = 0
        self.prefix_hit_tok = 0
        self.num_evictions = 0
        self._first_finish_s = math.nan
        self._last_send_s = math.nan
        self.warmup_emitted_tok = 0
        """Tokens of steps ending at or before the first finish."""
        self.load_emitted_tok = 0
        """Tokens of steps ending at or before the latest send so far."""
        self.cooldown_emitted_tok = 0
        """Tokens of steps ending after the latest send so far."""

    def add(self, row: tuple[float, ...]) -> None:
        """One row in ``metrics.STEP_COLUMNS`` order."""
        self.step_s.append(row[1])
        self.kv_usage.append(row[8])
        emitted = int(row[11])
        if self.phase_columns:
            self.t_start_s.append(row[0])
            self.num_emitted_tok.append(emitted)
        else:
            t_end = row[0] + row[1]
            if not t_end > self._first_finish_s:  # (NaN: no finish yet)
                self.warmup_emitted_tok += emitted
            if t_end <= self._last_send_s:
                self.load_emitted_tok += emitted
            else:
                self.cooldown_emitted_tok += emitted
        self.peak_running = max(self.peak_running, int(row[2]))
        self.peak_waiting = max(self.peak_waiting, int(row[3]))
        self.prefix_query_tok += int(row[13])
        self.prefix_hit_tok += int(row[14])
        self.num_evictions = int(row[15])

    def finished_at(self, now: float) -> None:
        if math.isnan(self._first_finish_s):
            self._first_finish_s = now

    def sent_at(self, now: float) -> None:
        """A request was sent at ``now``: every step recorded so far ended by then."""
        self.load_emitted_tok += self.cooldown_emitted_tok
        self.cooldown_emitted_tok = 0
        self._last_send_s = now

    def __len__(self) -> int:
        return len(self.step_s)

    @property
    def nbytes(self) -> int:
        return 8 * (4 if self.phase_columns else 2) * len(self.step_s)

    def column(self, name: str) -> np.ndarray:
        if not self.phase_columns and name in ("t_start_s", "num_emitted_tok"):
            raise ValueError(f"step column {name!r} was summed, not kept (phase_columns=False)")
        return np.frombuffer(
            getattr(self, name), dtype=np.int64 if name.startswith("num_") else np.float64
        )


class RequestResults:
    """A streaming run's per-request figures, stored when each request finishes.

    The engine keeps a request's timestamps only while it is in flight (per store slot);
    when it finishes, its TTFT, TPOT, E2EL and queue time (float64, by workload index, the
    same arithmetic as the requests table) and whether it was sent at or after the run's
    first finish (``steady``, for ``phases``) go here, and its counters go to running
    sums. 33 bytes per request: the floor for exact medians and p99s of four latencies.
    """

    def __init__(self, num_requests: int) -> None:
        n = int(num_requests)
        self.ttft_s = np.full(n, np.nan)
        self.tpot_s = np.full(n, np.nan)
        self.e2el_s = np.full(n, np.nan)
        self.queue_s = np.full(n, np.nan)
        self.steady = np.zeros(n, dtype=bool)
        self.num_finished = 0
        self.first_finish_s = math.nan
        self.last_finish_s = math.nan
        self.last_send_s = math.nan
        self.num_preemptions = 0
        self.cached_tok = 0

    def __len__(self) -> int:
        return int(self.ttft_s.size)

    @property
    def nbytes(self) -> int:
        return sum(
            a.nbytes for a in (self.ttft_s, self.tpot_s, self.e2el_s, self.queue_s, self.steady)
        )

    def add(
        self,
        index: np.ndarray,
        *,
        send_s: np.ndarray,
        first_scheduled_s: np.ndarray,
        first_token_s: np.ndarray,
        finish_s: np.ndarray,
        output_tok: np.ndarray,
        num_preemptions: np.ndarray,
        cached_tok: np.ndarray,
    ) -> None:
        """Finished requests ``index`` (workload rows) with their stamps and counters."""
        ttft = first_token_s - send_s
        e2el = finish_s - send_s
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = np.where(output_tok > 1, (e2el - ttft) / (output_tok - 1), np.nan)
        self.ttft_s[index] = ttft
        self.e2el_s[index] = e2el
        self.tpot_s[index] = tpot
        self.queue_s[index] = first_scheduled_s - send_s
        # phases' steady window: sent in [first finish, last send]; the first finish has
        # happened before any request is settled, and every send is <= the last one
        self.steady[index] = send_s >= self.first_finish_s
        self.num_finished += int(index.size)
        self.num_preemptions += int(num_preemptions.sum())
        self.cached_tok += int(cached_tok.sum())

    def finished_at(self, now: float) -> None:
        """A request finished at ``now`` (called in time order, before ``add``)."""
        if math.isnan(self.first_finish_s):
            self.first_finish_s = now
        self.last_finish_s = now

    def sent_at(self, now: float) -> None:
        self.last_send_s = now
