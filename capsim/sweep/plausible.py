"""Plausibility of one sweep result row: the one check the writer and the reader share.

A row is written only if it passes, and a stored row is reused (and carried into
``points.parquet``/``matched.parquet``) only if it passes again, so a damaged or edited
point file cannot put an impossible number into a table. Rules, each naming the field
and value it refuses:

- the point's keys are the point's (``Point.keys()``);
- the required metrics are present, numbers, finite (no null / NaN);
- the fields every run defines (TTFT, E2EL, queue, pool usage, counts) are not null;
- every number is finite or null, and non-negative (no field of a row is signed);
- fractions of the pool (``peak_kv_usage``, ``mean_kv_usage``, ``kv_cached_usage``...) in
  [0, 1]; ``mean_kv_usage <= peak_kv_usage``;
- counts of requests within what was offered: ``num_requests <= num_requests offered``,
  ``steady_num_requests <= num_requests``, ``peak_waiting <= num_requests``;
- ``peak_running <= max_num_seqs`` and ``<= num_requests``;
- for each latency: ``median <= p99`` (a mean is not compared: one outlier can lift it
  above the p99);
- ``prefix_cache_hits_tok <= prefix_cache_queries_tok``;
- ``mean_acceptance_len_tok`` in [1, depth + 1] (a verify keeps at most depth drafts);
- ``wall_s`` finite and >= 0;
- the row's column set equals the one recorded for the sweep (``columns``), when given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

REQUIRED_METRICS: tuple[str, ...] = (
    "num_requests",
    "duration_s",
    "output_throughput_tok_per_s",
    "ttft_p99_s",
    "peak_kv_usage",
)
"""Row fields that must be finite numbers (the downstream tables need them)."""

NON_NULL_IF_PRESENT: tuple[str, ...] = (
    *(f"{m}_{s}_s" for m in ("ttft", "e2el", "queue") for s in ("mean", "median", "p99")),
    "mean_kv_usage",
    "peak_running",
    "peak_waiting",
    "num_steps",
    "num_preemptions",
    "total_output_tok",
    "num_blocks",
    "usable_blocks",
)
"""Fields every finished run defines (a request has a TTFT and an E2EL, a run has steps):
null (NaN) there means a damaged row. TPOT/ITL stay nullable (every output 1 token)."""
FRACTIONS: tuple[str, ...] = ("peak_kv_usage", "mean_kv_usage", "prefix_cache_hit_rate")
LATENCIES: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el", "queue")
_EPS = 1e-9


def _num(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _keys_problem(row: Mapping[str, Any], keys: Mapping[str, Any]) -> str | None:
    for key, want in keys.items():
        got = row.get(key)
        if isinstance(want, float) and isinstance(got, int | float):
            same = math.isclose(got, want, rel_tol=1e-12) or (math.isnan(got) and math.isnan(want))
        else:
            same = got == want
        if not same:
            return f"{key}={got!r}, expected {want!r}"
    return None


def _value_problem(row: Mapping[str, Any]) -> str | None:
    for key in REQUIRED_METRICS:
        v = row.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return f"{key}={v!r} is not a finite number"
    for key in NON_NULL_IF_PRESENT:
        if key in row and _num(row, key) is None:
            return f"{key}={row[key]!r} is null or not a finite number"
    for key, value in row.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            continue  # null / NaN: an undefined figure (e.g. TPOT of 1-token outputs)
        if not math.isfinite(value):
            return f"{key}={value!r} is not finite"
        if value < 0:
            return f"{key}={value!r} is negative"
    return None


def _range_problem(
    row: Mapping[str, Any], offered_requests: int | None, k: int | None
) -> str | None:
    for key in FRACTIONS:
        v = _num(row, key)
        if v is not None and v > 1 + _EPS:
            return f"{key}={row[key]!r} is above 1 (a fraction of the pool)"
    mean, peak = _num(row, "mean_kv_usage"), _num(row, "peak_kv_usage")
    if mean is not None and peak is not None and mean > peak + _EPS:
        return (
            f"mean_kv_usage={row['mean_kv_usage']!r} exceeds peak_kv_usage={row['peak_kv_usage']!r}"
        )
    n = _num(row, "num_requests")
    if n is not None and offered_requests is not None and n > offered_requests:
        return f"num_requests={row['num_requests']!r} exceeds the {offered_requests} offered"
    if n is not None:
        for key in ("steady_num_requests", "peak_waiting", "peak_running"):
            v = _num(row, key)
            if v is not None and v > n:
                return f"{key}={row[key]!r} exceeds num_requests={row['num_requests']!r}"
    seqs, running = _num(row, "max_num_seqs"), _num(row, "peak_running")
    if seqs is not None and running is not None and running > seqs:
        return f"peak_running={row['peak_running']!r} exceeds max_num_seqs={row['max_num_seqs']!r}"
    for m in LATENCIES:
        med, p99 = _num(row, f"{m}_median_s"), _num(row, f"{m}_p99_s")
        if med is not None and p99 is not None and med > p99 * (1 + 1e-12):
            return f"{m}_median_s={row[f'{m}_median_s']!r} exceeds {m}_p99_s={row[f'{m}_p99_s']!r}"
    q, h = _num(row, "prefix_cache_queries_tok"), _num(row, "prefix_cache_hits_tok")
    if q is not None and h is not None and h > q:
        return f"prefix_cache_hits_tok={row['prefix_cache_hits_tok']!r} exceeds the {q:g} queried"
    acc = _num(row, "mean_acceptance_len_tok")
    if acc is not None and k is not None and not 1 - _EPS <= acc <= k + 1 + _EPS:
        return f"mean_acceptance_len_tok={row['mean_acceptance_len_tok']!r} is outside [1, {k + 1}]"
    return None


def row_problem(
    row: Any,
    *,
    keys: Mapping[str, Any] | None = None,
    offered_requests: int | None = None,
    num_draft_tok: int | None = None,
    wall_s: Any = 0.0,
    columns: Iterable[str] | None = None,
) -> str | None:
    """Why ``row`` is not a plausible result row (None if it is)."""
    if not isinstance(row, Mapping):
        return f"row is {type(row).__name__}, expected an object"
    if isinstance(wall_s, bool) or not isinstance(wall_s, int | float) or not math.isfinite(wall_s):
        return f"wall_s={wall_s!r} is not a finite number"
    if wall_s < 0:
        return f"wall_s={wall_s!r} is negative"
    if keys is not None and (why := _keys_problem(row, keys)):
        return why
    if columns is not None:
        want, got = set(columns), set(row)
        if want != got:
            extra, missing = sorted(got - want), sorted(want - got)
            return f"columns differ from the sweep's: extra {extra}, missing {missing}"
    return _value_problem(row) or _range_problem(row, offered_requests, num_draft_tok)


def point_row_problem(
    row: Any, point: Any, wall_s: Any, columns: Iterable[str] | None = None
) -> str | None:
    """``row_problem`` with the limits a sweep point implies (its keys, the requests it
    offered, its draft tokens per verify step)."""
    cfg = point.cfg
    return row_problem(
        row,
        keys=point.keys(),
        offered_requests=int(cfg.load.num_requests),
        num_draft_tok=int(cfg.spec.depth),
        wall_s=wall_s,
        columns=columns,
    )
