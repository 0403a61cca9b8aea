"""Arrival helpers: give a length-only workload the bursty timing of a real trace.

BurstGPT's timestamps are not available (and vLLM ignores them anyway); the Azure 2023 traces
are the real, bursty arrival processes capsim has. ``rescale_rate`` stretches or compresses a
timed table to a target mean rate (the shape of its gaps, hence its burstiness, is kept:
the gap CV does not change), and ``attach_arrivals`` puts one table's arrival times on another
table's requests, e.g. ``burstgpt-standin`` lengths on ``azure-code`` timing.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from capsim.traces.table import RequestTable


def rescale_rate(table: RequestTable, rate_req_per_s: float) -> RequestTable:
    """Scale ``arrival_s`` so the mean rate, (n - 1) / span, is ``rate_req_per_s``."""
    if table.arrival_s is None:
        raise ValueError(f"rescale_rate: table {table.name!r} has no arrival_s")
    if not (isinstance(rate_req_per_s, int | float) and math.isfinite(rate_req_per_s)):
        raise ValueError(f"rescale_rate: rate_req_per_s={rate_req_per_s!r} must be finite")
    if rate_req_per_s <= 0:
        raise ValueError(f"rescale_rate: rate_req_per_s={rate_req_per_s!r} must be > 0")
    span_s = float(table.arrival_s[-1] - table.arrival_s[0])
    if table.num_requests < 2 or span_s <= 0:
        raise ValueError(f"rescale_rate: table {table.name!r} needs >= 2 distinct arrival times")
    factor = (table.num_requests - 1) / (rate_req_per_s * span_s)
    arrival = (table.arrival_s - table.arrival_s[0]) * factor
    return dataclasses.replace(table, arrival_s=arrival)


def attach_arrivals(requests: RequestTable, timing: RequestTable) -> RequestTable:
    """``requests``' lengths and ids with ``timing``'s arrival offsets (same row count)."""
    if timing.arrival_s is None:
        raise ValueError(f"attach_arrivals: timing table {timing.name!r} has no arrival_s")
    if timing.num_requests != requests.num_requests:
        raise ValueError(
            f"attach_arrivals: {requests.name!r} has {requests.num_requests} requests, "
            f"timing {timing.name!r} has {timing.num_requests}"
        )
    return dataclasses.replace(
        requests,
        name=f"{requests.name}@{timing.name}",
        arrival_s=np.asarray(timing.arrival_s - timing.arrival_s[0], dtype=np.float64),
    )
