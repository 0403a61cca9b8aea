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

import numpy as np
import pandas as pd

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


class StepRecorder:
    """Append-only per-step rows (tuples in ``STEP_COLUMNS`` order; columns are built
    once at the end) and inter-token latencies (one array per step)."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, ...]] = []
        self._itl_chunks: list[np.ndarray] = []

    def record(self, **values: float) -> None:
        self.rows.append(tuple(values[c] for c in STEP_COLUMNS))

    def record_row(self, row: tuple[float, ...]) -> None:
        """One step's values in ``STEP_COLUMNS`` order (the engine's per-step call)."""
        self.rows.append(row)

    def add_itl(self, itl_s: np.ndarray) -> None:
        self._itl_chunks.append(itl_s)

    @property
    def itl_s(self) -> np.ndarray:
        """Every inter-token latency, in the order the steps emitted them."""
        if not self._itl_chunks:
            return np.zeros(0)
        return np.concatenate(self._itl_chunks)

    def frame(self) -> pd.DataFrame:
        """One row per step: ``num_*`` columns int64, the others float64."""
        values = zip(*self.rows, strict=True) if self.rows else ((),) * len(STEP_COLUMNS)
        return pd.DataFrame(
            {
                c: np.array(v, dtype=np.int64 if c.startswith("num_") else np.float64)
                for c, v in zip(STEP_COLUMNS, values, strict=True)
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


def phases(requests: pd.DataFrame, steps: pd.DataFrame) -> dict[str, float]:
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
    if not len(requests):
        return out
    a = float(requests["finish_s"].min())
    b = float(requests["send_s"].max())
    end = float(requests["finish_s"].max())
    t_end = (steps["t_start_s"] + steps["step_s"]).to_numpy() if len(steps) else np.zeros(0)
    emitted = steps["num_emitted_tok"].to_numpy() if len(steps) else np.zeros(0)

    def tok_rate(lo: float, hi: float) -> float:
        if not hi > lo:
            return nan
        sel = (t_end > lo) & (t_end <= hi) if lo > 0 else (t_end <= hi)
        return float(emitted[sel].sum()) / (hi - lo)

    send = requests["send_s"].to_numpy()
    ttft = requests["ttft_s"].to_numpy()[(send >= a) & (send <= b)]
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


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, itl_s: np.ndarray) -> dict[str, float]:
    """Scalar metrics of one run."""
    duration = float(requests["finish_s"].max()) if len(requests) else 0.0
    out_tok = int(requests["output_tok"].sum())
    in_tok = int(requests["prompt_tok"].sum())
    summary: dict[str, float] = {
        "num_requests": len(requests),
        "duration_s": duration,
        "total_output_tok": out_tok,
        "output_throughput_tok_per_s": out_tok / duration if duration > 0 else float("nan"),
        "total_token_throughput_tok_per_s": (out_tok + in_tok) / duration
        if duration > 0
        else float("nan"),
        "request_throughput_req_per_s": len(requests) / duration if duration > 0 else float("nan"),
    }
    summary |= _stats("ttft", requests["ttft_s"].to_numpy())
    tpot = requests["tpot_s"].dropna().to_numpy()
    summary |= _stats("tpot", tpot)
    summary |= _stats("itl", itl_s)
    summary |= _stats("e2el", requests["e2el_s"].to_numpy())
    summary |= _stats("queue", (requests["first_scheduled_s"] - requests["send_s"]).to_numpy())
    if len(steps):
        summary["peak_kv_usage"] = float(steps["kv_usage"].max())
        summary["mean_kv_usage"] = float(
            np.average(steps["kv_usage"], weights=steps["step_s"].clip(lower=1e-12))
        )
        summary["peak_running"] = int(steps["num_running"].max())
        summary["peak_waiting"] = int(steps["num_waiting"].max())
        summary["num_steps"] = len(steps)
    summary["num_preemptions"] = int(requests["num_preemptions"].sum())
    if len(steps) and "num_prefix_query_tok" in steps:
        q = int(steps["num_prefix_query_tok"].sum())
        h = int(steps["num_prefix_hit_tok"].sum())
        summary["prefix_cache_queries_tok"] = q
        summary["prefix_cache_hits_tok"] = h
        summary["prefix_cache_hit_rate"] = h / q if q else float("nan")
        summary["num_cached_block_evictions"] = int(steps["num_evictions"].iloc[-1])
    if "cached_tok" in requests:
        summary["mean_cached_tok_per_request"] = float(requests["cached_tok"].mean())
    summary |= phases(requests, steps)
    return summary
