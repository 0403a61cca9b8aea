"""Summary statistics of a request table, as ``capsim traces stats`` prints them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def _lengths(x: np.ndarray) -> LengthStats:
    return LengthStats(
        mean_tok=float(np.mean(x)),
        median_tok=float(np.median(x)),
        p99_tok=float(np.percentile(x, 99)),
        max_tok=int(np.max(x)),
    )


def workload_stats(table: RequestTable) -> WorkloadStats:
    """Counts, mean/median/p99/max of lengths, and arrival rate and gap CV when timed."""
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
    return "\n".join(lines)
