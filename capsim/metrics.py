"""Recording during a run, and the reductions vLLM / ``vllm bench serve`` report.

Definitions (VLLM.md s5): TTFT = send -> first token; E2EL = send -> last token;
TPOT = (E2EL - TTFT) / (output_tok - 1) for output_tok > 1; ITL per streamed chunk
(one chunk per step that emitted tokens, so ITL ~ step time under speculation);
output throughput = output tokens / benchmark duration (t=0 to the last finish);
kv_cache_usage = 1 - free / (num_blocks - 1), sampled every step; peaks = max of samples.

Prefix caching (vLLM ``PrefixCacheStats``, Prometheus ``vllm:prefix_cache_queries`` and
``vllm:prefix_cache_hits``, counters in tokens, one record per cache lookup of a waiting
request that was never preempted): per step ``num_prefix_query_tok``/``num_prefix_hit_tok``
(hit rate over time = their ratio over a window), ``num_evictions`` (cached blocks reused,
cumulative), ``num_cached_free_blocks`` (free blocks still holding a cached prefix:
evictable). vLLM's ``kv_usage`` counts those as free; ``kv_cached_usage`` is their share.

Warm-up, steady state and cool-down are reported separately as well (``phases``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from capsim.streaming_metrics import ItlRuns, RequestResults, StepColumns

STEP_COLUMNS: tuple[str, ...] = (
    "t_start_s",
    "step_s",
    "num_running",
    "num_waiting",
    "num_scheduled_tok",
    "num_prefill_tok",
    "num_decode_req",
    "num_free_blocks",
    "kv_usage",
    "num_preempted",
    "num_admitted",
    "num_emitted_tok",
    "num_cached_free_blocks",
    "num_prefix_query_tok",
    "num_prefix_hit_tok",
    "num_evictions",
)


STEP_BLOCK_ROWS = 8192
"""Steps per block of the step table (16 float64 columns: 1 MiB per block)."""


class StepRecorder:
    """Per-step rows in ``STEP_COLUMNS`` order and inter-token latencies.

    ``keep_steps``: the step table is kept, in float64 blocks of ``STEP_BLOCK_ROWS`` rows
    (128 bytes a step; every count is an integer below 2**53, so the int64 columns built
    at the end are exact); otherwise only ``StepColumns`` (32 bytes a step).
    ``exact_itl``: every inter-token latency is kept (8 bytes a token); otherwise
    ``ItlRuns`` (value, count) runs, whose quantiles are exact and whose mean is not
    bit-identical (``capsim.streaming_metrics``).
    """

    def __init__(
        self, *, keep_steps: bool = True, exact_itl: bool = True, phase_columns: bool = True
    ) -> None:
        from capsim.streaming_metrics import ItlRuns, StepColumns

        self.keep_steps = keep_steps
        self._blocks: list[np.ndarray] = []
        self._block = np.empty((STEP_BLOCK_ROWS, len(STEP_COLUMNS)), dtype=np.float64)
        self._num_in_block = 0
        self.columns: StepColumns | None = (
            None if keep_steps else StepColumns(phase_columns=phase_columns)
        )
        self._itl_chunks: list[np.ndarray] | None = [] if exact_itl else None
        self.itl_runs: ItlRuns | None = None if exact_itl else ItlRuns()

    def record(self, **values: float) -> None:
        self.record_row(tuple(values[c] for c in STEP_COLUMNS))

    def record_row(self, row: tuple[float, ...]) -> None:
        """One step's values in ``STEP_COLUMNS`` order (the engine's per-step call)."""
        if self.columns is not None:
            self.columns.add(row)
            return
        self._block[self._num_in_block] = row
        self._num_in_block += 1
        if self._num_in_block == STEP_BLOCK_ROWS:
            self._blocks.append(self._block)
            self._block = np.empty_like(self._block)
            self._num_in_block = 0

    def finished_at(self, now: float) -> None:
        """A request finished at ``now`` (``StepColumns`` sums phases' windows)."""
        if self.columns is not None:
            self.columns.finished_at(now)

    def sent_at(self, now: float) -> None:
        if self.columns is not None:
            self.columns.sent_at(now)

    @property
    def num_steps(self) -> int:
        if self.columns is not None:
            return len(self.columns)
        return len(self._blocks) * STEP_BLOCK_ROWS + self._num_in_block

    def add_itl(self, itl_s: np.ndarray) -> None:
        if self._itl_chunks is not None:
            self._itl_chunks.append(itl_s)
        else:
            self.itl_runs.add(itl_s)  # type: ignore[union-attr]

    @property
    def itl_s(self) -> np.ndarray:
        """Every inter-token latency, in the order the steps emitted them (exact_itl)."""
        if self._itl_chunks is None:
            raise ValueError("inter-token latencies were recorded as runs (exact_itl=False)")
        if not self._itl_chunks:
            return np.zeros(0)
        return np.concatenate(self._itl_chunks)

    def frame(self) -> pd.DataFrame:
        """One row per step: ``num_*`` columns int64, the others float64 (keep_steps;
        otherwise an empty table with the step columns)."""
        blocks = [*self._blocks, self._block[: self._num_in_block]]
        return pd.DataFrame(
            {
                c: np.concatenate([b[:, j] for b in blocks]).astype(
                    np.int64 if c.startswith("num_") else np.float64
                )
                for j, c in enumerate(STEP_COLUMNS)
            }
        )


def _stats(prefix: str, values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {
            f"{prefix}_mean_s": float("nan"),
            f"{prefix}_median_s": float("nan"),
            f"{prefix}_p99_s": float("nan"),
        }
    return {
        f"{prefix}_mean_s": float(values.mean()),
        f"{prefix}_median_s": float(np.median(values)),
        f"{prefix}_p99_s": float(np.percentile(values, 99)),
    }


def hit_rate_over_time(steps: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Prefix-cache hit rate per time window: ``t_s`` (window start), queries, hits, rate."""
    if window_s <= 0:
        raise ValueError(f"window_s={window_s} must be > 0")
    b = (steps["t_start_s"] // window_s).astype(np.int64)
    g = steps.groupby(b)[["num_prefix_query_tok", "num_prefix_hit_tok"]].sum()
    rate = g["num_prefix_hit_tok"] / g["num_prefix_query_tok"].where(g["num_prefix_query_tok"] > 0)
    return pd.DataFrame(
        {
            "t_s": g.index.to_numpy() * window_s,
            "queries_tok": g["num_prefix_query_tok"].to_numpy(),
            "hits_tok": g["num_prefix_hit_tok"].to_numpy(),
            "hit_rate": rate.to_numpy(),
        }
    )


def phases(requests: RequestCols, steps: StepCols) -> dict[str, float]:
    """Warm-up, load and cool-down of one run, reported separately from the whole run.

    - warm-up: [0, first finish): the run fills from empty (closed loop: the burst of C
      sends at t=0; open loop: the queue building up);
    - cool-down: (last send, end]: the drain, fewer and fewer requests in flight, the tail
      of the longest outputs alone;
    - under load: [0, last send]: every client busy (closed loop) or arrivals still coming
      (open loop). ``load_output_throughput`` = tokens emitted by steps ending in it / its
      length: the whole-run figure without the drain, which with heavy-tailed outputs and
      few requests per client dominates ``vllm bench``'s duration.
    - ``steady_ttft_*``: over requests sent in [first finish, last send], i.e. without the
      initial burst (NaN when every request was sent in the burst, N <= C).
    """
    nan = float("nan")
    out: dict[str, float] = {}
    if not _num_rows(requests, "finish_s"):
        return out
    finish_s = _col(requests, "finish_s")
    a = float(finish_s.min())
    b = float(_col(requests, "send_s").max())
    end = float(finish_s.max())
    has_steps = _num_rows(steps, "step_s") > 0
    t_end = _col(steps, "t_start_s") + _col(steps, "step_s") if has_steps else np.zeros(0)
    emitted = _col(steps, "num_emitted_tok") if has_steps else np.zeros(0)

    def tok_rate(lo: float, hi: float) -> float:
        if not hi > lo:
            return nan
        sel = (t_end > lo) & (t_end <= hi) if lo > 0 else (t_end <= hi)
        return float(emitted[sel].sum()) / (hi - lo)

    send = _col(requests, "send_s")
    ttft = _col(requests, "ttft_s")[(send >= a) & (send <= b)]
    out["warmup_s"] = a
    out["warmup_output_throughput_tok_per_s"] = tok_rate(0.0, a)
    out["cooldown_s"] = end - b
    out["cooldown_output_throughput_tok_per_s"] = tok_rate(b, end)
    out["load_window_s"] = b
    out["load_output_throughput_tok_per_s"] = tok_rate(0.0, b)
    out["steady_num_requests"] = int(ttft.size)
    out["steady_ttft_mean_s"] = float(ttft.mean()) if ttft.size else nan
    out["steady_ttft_p99_s"] = float(np.percentile(ttft, 99)) if ttft.size else nan
    return out


def _totals(n: int, duration_s: float, out_tok: int, in_tok: int) -> dict[str, float]:
    """The first block of a summary: counts and throughputs over the run's duration."""
    nan = float("nan")
    return {
        "num_requests": n,
        "duration_s": duration_s,
        "total_output_tok": out_tok,
        "output_throughput_tok_per_s": out_tok / duration_s if duration_s > 0 else nan,
        "total_token_throughput_tok_per_s": (out_tok + in_tok) / duration_s
        if duration_s > 0
        else nan,
        "request_throughput_req_per_s": n / duration_s if duration_s > 0 else nan,
    }


def _latencies(
    ttft_s: np.ndarray,
    tpot_s: np.ndarray,
    itl_s: np.ndarray | ItlRuns,
    e2el_s: np.ndarray,
    queue_s: np.ndarray,
) -> dict[str, float]:
    """Mean / median / p99 of each latency (TPOT of requests with more than one token)."""
    from capsim.streaming_metrics import ItlRuns

    out = _stats("ttft", ttft_s)
    out |= _stats("tpot", tpot_s[~np.isnan(tpot_s)])
    out |= itl_s.stats("itl") if isinstance(itl_s, ItlRuns) else _stats("itl", itl_s)
    out |= _stats("e2el", e2el_s)
    out |= _stats("queue", queue_s)
    return out


def _step_figures(steps: StepCols, num_steps: int) -> dict[str, float]:
    """KV usage (peak, step-time weighted mean), the step gauges and the step count."""
    if not num_steps:
        return {}
    kv = _col(steps, "kv_usage")
    out: dict[str, float] = {
        "peak_kv_usage": float(kv.max()),
        "mean_kv_usage": float(np.average(kv, weights=np.maximum(_col(steps, "step_s"), 1e-12))),
    }
    out |= _step_gauges(steps)
    out["num_steps"] = num_steps
    return out


def _prefix_figures(steps: StepCols, num_steps: int) -> dict[str, float]:
    """Prefix-cache queries, hits, hit rate and evictions (steps that record them)."""
    if not (num_steps and _has(steps, "num_prefix_query_tok")):
        return {}
    q, h, ev = _prefix_counts(steps)
    return {
        "prefix_cache_queries_tok": q,
        "prefix_cache_hits_tok": h,
        "prefix_cache_hit_rate": h / q if q else float("nan"),
        "num_cached_block_evictions": ev,
    }


def summarize(
    requests: RequestCols, steps: StepCols, itl_s: np.ndarray | ItlRuns
) -> dict[str, float]:
    """Scalar metrics of one run.

    ``requests``/``steps``: tables or mappings of numpy columns (``StepColumns`` when the
    step table was not kept); ``itl_s``: every inter-token latency, or their runs.
    """

    n = _num_rows(requests, "finish_s")
    finish_s = _col(requests, "finish_s")
    duration = float(finish_s.max()) if n else 0.0
    out_tok = int(_col(requests, "output_tok").sum())
    in_tok = int(_col(requests, "prompt_tok").sum())
    summary = _totals(n, duration, out_tok, in_tok)
    queue_s = _col(requests, "first_scheduled_s") - _col(requests, "send_s")
    summary |= _latencies(
        _col(requests, "ttft_s"), _col(requests, "tpot_s"), itl_s, _col(requests, "e2el_s"), queue_s
    )
    num_steps = _num_rows(steps, "step_s")
    summary |= _step_figures(steps, num_steps)
    summary["num_preemptions"] = int(_col(requests, "num_preemptions").sum())
    summary |= _prefix_figures(steps, num_steps)
    if _has(requests, "cached_tok"):
        summary["mean_cached_tok_per_request"] = float(np.mean(_col(requests, "cached_tok")))
    summary |= phases(requests, steps)
    return summary


def summarize_results(
    results: RequestResults,
    steps: StepCols,
    itl_s: np.ndarray | ItlRuns,
    *,
    total_output_tok: int,
    total_input_tok: int,
) -> dict[str, float]:
    """``summarize`` for a streaming run whose requests are ``RequestResults`` (their
    latencies by workload index, counters summed): the same figures, key order and
    arithmetic, bit for bit (integer sums are exact below 2**53)."""

    n = results.num_finished
    duration = float(results.last_finish_s) if n else 0.0
    summary = _totals(n, duration, int(total_output_tok), int(total_input_tok))
    summary |= _latencies(results.ttft_s, results.tpot_s, itl_s, results.e2el_s, results.queue_s)
    num_steps = _num_rows(steps, "step_s")
    summary |= _step_figures(steps, num_steps)
    summary["num_preemptions"] = results.num_preemptions
    summary |= _prefix_figures(steps, num_steps)
    summary["mean_cached_tok_per_request"] = results.cached_tok / n if n else float("nan")
    if n:
        summary |= _results_phases(results, steps)
    return summary


def _results_phases(results: RequestResults, steps: StepCols) -> dict[str, float]:
    """``phases`` from ``RequestResults`` and the steps (summed windows or columns)."""
    nan = float("nan")
    a = float(results.first_finish_s)
    b = float(results.last_send_s)
    end = float(results.last_finish_s)
    if hasattr(steps, "column") and not steps.phase_columns:
        warm, load = steps.warmup_emitted_tok, steps.load_emitted_tok
        # every step ends by the last finish; with every send at t=0 nothing ends by b
        cool = steps.cooldown_emitted_tok + (0 if b > 0 else load)
    else:
        has_steps = _num_rows(steps, "step_s") > 0
        t_end = _col(steps, "t_start_s") + _col(steps, "step_s") if has_steps else np.zeros(0)
        emitted = _col(steps, "num_emitted_tok") if has_steps else np.zeros(0)

        def tok(lo: float, hi: float) -> int:
            sel = (t_end > lo) & (t_end <= hi) if lo > 0 else (t_end <= hi)
            return emitted[sel].sum()  # type: ignore[no-any-return]

        warm, cool, load = tok(0.0, a), tok(b, end), tok(0.0, b)

    def rate(tokens: int, lo: float, hi: float) -> float:
        return float(tokens) / (hi - lo) if hi > lo else nan

    ttft = results.ttft_s[results.steady]
    return {
        "warmup_s": a,
        "warmup_output_throughput_tok_per_s": rate(warm, 0.0, a),
        "cooldown_s": end - b,
        "cooldown_output_throughput_tok_per_s": rate(cool, b, end),
        "load_window_s": b,
        "load_output_throughput_tok_per_s": rate(load, 0.0, b),
        "steady_num_requests": int(ttft.size),
        "steady_ttft_mean_s": float(ttft.mean()) if ttft.size else nan,
        "steady_ttft_p99_s": float(np.percentile(ttft, 99)) if ttft.size else nan,
    }


# -- tables, mappings of columns and StepColumns alike ------------------------------------
RequestCols = pd.DataFrame | Mapping[str, np.ndarray]
StepCols = Union[pd.DataFrame, Mapping[str, np.ndarray], "StepColumns"]


def _col(table: Any, name: str) -> np.ndarray:
    if hasattr(table, "column"):  # StepColumns
        return table.column(name)
    if name not in table:
        have = ", ".join(map(str, table.columns if isinstance(table, pd.DataFrame) else table))
        raise ValueError(f"metrics: column {name!r} is missing (columns: {have})")
    if isinstance(table, pd.DataFrame):
        return table[name].to_numpy()
    return np.asarray(table[name])


def _num_rows(table: Any, name: str) -> int:
    if isinstance(table, pd.DataFrame) or hasattr(table, "column"):
        return len(table)
    return len(table[name]) if name in table else 0


def _has(table: Any, name: str) -> bool:
    if hasattr(table, "column"):
        return name == "num_prefix_query_tok"
    return name in table


def _step_gauges(steps: Any) -> dict[str, int]:
    if hasattr(steps, "column"):
        return {"peak_running": steps.peak_running, "peak_waiting": steps.peak_waiting}
    return {
        "peak_running": int(_col(steps, "num_running").max()),
        "peak_waiting": int(_col(steps, "num_waiting").max()),
    }


def _prefix_counts(steps: Any) -> tuple[int, int, int]:
    if hasattr(steps, "column"):
        return steps.prefix_query_tok, steps.prefix_hit_tok, steps.num_evictions
    return (
        int(_col(steps, "num_prefix_query_tok").sum()),
        int(_col(steps, "num_prefix_hit_tok").sum()),
        int(_col(steps, "num_evictions")[-1]),
    )
