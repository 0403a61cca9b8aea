"""Summary statistics of a request table, as ``capsim traces stats`` prints them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capsim.traces.sharing import ideal_hit_rate
from capsim.traces.table import RequestTable


@dataclass(frozen=True, slots=True)
class LengthStats:
    mean_tok: float
    median_tok: float
    p99_tok: float
    max_tok: int


@dataclass(frozen=True, slots=True)
class ArrivalStats:
    span_s: float
    rate_req_per_s: float
    gap_mean_s: float
    gap_cv: float


@dataclass(frozen=True, slots=True)
class WorkloadStats:
    name: str
    num_requests: int
    prompt: LengthStats
    output: LengthStats
    arrival: ArrivalStats | None  # None for closed-loop workloads
    ideal_hit_rate: float | None = None
    """Prefix-cache hit rate with an infinite cache, token granularity (None: no sharing)."""
    ideal_hit_rate_block: float | None = None
    block_size_tok: int = 1


def _lengths(x: np.ndarray) -> LengthStats:
    return LengthStats(
        mean_tok=float(np.mean(x)),
        median_tok=float(np.median(x)),
        p99_tok=float(np.percentile(x, 99)),
        max_tok=int(np.max(x)),
    )


def workload_stats(table: RequestTable, block_size_tok: int = 1) -> WorkloadStats:
    """Counts, mean/median/p99/max of lengths, arrival rate and gap CV when timed, and
    the ideal prefix hit rate when requests share content (``capsim.traces.sharing``),
    also at ``block_size_tok`` granularity."""
    arrival = None
    if table.arrival_s is not None and table.num_requests >= 2:
        gaps = np.diff(table.arrival_s)
        span = float(table.arrival_s[-1] - table.arrival_s[0])
        mean_gap = float(gaps.mean())
        arrival = ArrivalStats(
            span_s=span,
            rate_req_per_s=(table.num_requests - 1) / span if span > 0 else float("inf"),
            gap_mean_s=mean_gap,
            gap_cv=float(gaps.std() / mean_gap) if mean_gap > 0 else float("nan"),
        )
    return WorkloadStats(
        name=table.name,
        num_requests=table.num_requests,
        prompt=_lengths(table.prompt_tok),
        output=_lengths(table.output_tok),
        arrival=arrival,
        ideal_hit_rate=None if table.segments is None else ideal_hit_rate(table),
        ideal_hit_rate_block=None
        if table.segments is None
        else ideal_hit_rate(table, block_size_tok),
        block_size_tok=block_size_tok,
    )


def format_stats(stats: WorkloadStats) -> str:
    """Plain-text block, one line per quantity."""
    lines = [f"workload {stats.name}: {stats.num_requests} requests"]
    for label, s in (("input tokens", stats.prompt), ("output tokens", stats.output)):
        lines.append(
            f"  {label:<14} mean {s.mean_tok:9.1f}  median {s.median_tok:8.1f}  "
            f"p99 {s.p99_tok:8.1f}  max {s.max_tok}"
        )
    if stats.arrival is None:
        lines.append("  arrivals       none (closed loop: the load generator sends requests)")
    else:
        a = stats.arrival
        lines.append(
            f"  arrivals       span {a.span_s:.1f} s  rate {a.rate_req_per_s:.3f} req/s  "
            f"gap mean {a.gap_mean_s:.4f} s  gap CV {a.gap_cv:.2f}"
        )
    if stats.ideal_hit_rate is None:
        lines.append("  prefix sharing none (every request's tokens are its own)")
    else:
        lines.append(
            f"  ideal prefix hit rate {stats.ideal_hit_rate:.4f} (token granularity, "
            "infinite cache)"
        )
        if stats.block_size_tok > 1:
            lines.append(
                f"  ideal prefix hit rate {stats.ideal_hit_rate_block:.4f} "
                f"({stats.block_size_tok}-token blocks)"
            )
    return "\n".join(lines)
