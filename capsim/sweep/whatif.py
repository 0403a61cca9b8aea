"""Capacity what-if: the largest load that meets an SLO, per commit mode and deployment.

For each candidate (gmu, tree shape, commit mode) a search over short simulations finds
the largest concurrency (integers) or arrival rate (to a relative tolerance) whose
p99 TTFT and/or TPOT meet the SLO. It assumes the SLO is met below some load and missed
above it (latency grows with load). The search is guided by the analytical capacity of
the memory plan: the first probe above load 1 is the pool's capacity for the sample's
mean context (``analytical_capacity_req``), then it doubles up or bisects down, until the
bracket is within ``rel_tol`` (5%) of the load: the answer is a lower bound, off by at most
that fraction.

Goodput of a candidate = output throughput (tok/s) at its largest SLO-meeting load. The
best candidate per commit mode maximises goodput; ties go to the earlier candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class Slo:
    """Latency targets; a point meets the SLO when every given target holds."""

    ttft_p99_s: float | None = field(default=None, metadata={"help": "p99 TTFT target"})
    tpot_s: float | None = field(default=None, metadata={"help": "TPOT target"})
    tpot_stat: Literal["mean", "p99"] = field(
        default="mean", metadata={"help": "which TPOT statistic the target applies to"}
    )

    def __post_init__(self) -> None:
        if self.ttft_p99_s is None and self.tpot_s is None:
            raise ValueError("slo: give a p99 TTFT target, a TPOT target, or both")
        for name in ("ttft_p99_s", "tpot_s"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"slo.{name}={v!r}: must be a finite time > 0")
        if self.tpot_stat not in ("mean", "p99"):
            raise ValueError(f"slo.tpot_stat={self.tpot_stat!r}: must be 'mean' or 'p99'")

    def meets(self, summary: dict[str, Any]) -> bool:
        if self.ttft_p99_s is not None and not summary["ttft_p99_s"] <= self.ttft_p99_s:
            return False
        if self.tpot_s is not None:
            key = "tpot_mean_s" if self.tpot_stat == "mean" else "tpot_p99_s"
            if not summary[key] <= self.tpot_s:
                return False
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One deployment variant to search: everything but the load."""

    model: str
    gpu: str
    tp: int
    gmu: float
    tree: tuple[int, ...] | None
    commit: str
    workload: str
    load_mode: Literal["concurrency", "rate"]
    num_spec_tok: int = 3
    num_requests: int = 200
    requests_per_load: float = 2.0
    seed: int = 0
    max_load: float = 1024.0
    rel_tol: float = 0.05
    """Stop when the bracket is within this fraction of the load (0: exact integers)."""
    pool: tuple[tuple[str, Any], ...] = ()
    """vLLM pool flags as (EngineConfig field, value) pairs: --kv-cache-memory etc."""
    enable_prefix_caching: bool = False
    step_time: str = "calibrated"
    max_model_len: int | None = None
    max_num_seqs: int | None = None

    def requests_at(self, load: float) -> int:
        """At least ``num_requests``; more at high load so the load is really offered.

        Closed loop: ``requests_per_load`` requests per client slot (fewer requests than
        slots would never reach the concurrency). Open loop: ``requests_per_load x 10``
        seconds of arrivals.
        """
        per = (
            self.requests_per_load
            if self.load_mode == "concurrency"
            else 10 * self.requests_per_load
        )
        return max(self.num_requests, math.ceil(per * load))

    def config(self, load: float) -> SimConfig:
        n = self.requests_at(load)
        if self.load_mode == "concurrency":
            lc = LoadConfig(mode="concurrency", concurrency=int(load), num_requests=n)
        else:
            lc = LoadConfig(mode="rate", rate_req_per_s=float(load), num_requests=n)
        return SimConfig(
            model=self.model,
            gpu=self.gpu,
            engine=EngineConfig(
                tp=self.tp,
                gmu=self.gmu,
                enable_prefix_caching=self.enable_prefix_caching,
                max_model_len=self.max_model_len,
                max_num_seqs=self.max_num_seqs,
                **dict(self.pool),
            ),
            spec=SpecDecodeConfig(
                num_spec_tok=self.num_spec_tok, tree_widths=self.tree, commit=self.commit
            ),
            workload=self.workload,
            load=lc,
            seed=self.seed,
            step_time=self.step_time,
        )


@dataclass(frozen=True, slots=True)
class SearchTask:
    candidate: Candidate
    slo: Slo
    point_fn: Callable[[SimConfig], Any]


STEADY_TOL = 0.10
"""Doubling the run may move p99 TTFT by less than this (capsim.plan.capacity's rule)."""
MAX_DOUBLINGS = 3


def search_max_load(task: SearchTask) -> dict[str, Any]:
    """Largest SLO-meeting load of one candidate that holds in a steady-state run.

    The bisection's answer is re-run with twice the requests; it holds when the longer
    run still meets the SLO and its p99 TTFT moved by less than ``STEADY_TOL``. Otherwise
    the run length doubles and the search repeats below the previous answer, at most
    ``MAX_DOUBLINGS`` times (``steady`` says whether it settled)."""
    import dataclasses

    cand, total = task.candidate, 0
    row: dict[str, Any] = {}
    for m in range(MAX_DOUBLINGS + 1):
        row = _search_once(SearchTask(cand, task.slo, task.point_fn))
        total += row["num_sims"]
        longer = dataclasses.replace(
            cand, num_requests=2 * cand.num_requests, requests_per_load=2 * cand.requests_per_load
        )
        row["run_multiplier"] = 2**m
        if row["max_load"] <= 0:
            row["steady"] = False
            break
        s2 = dict(task.point_fn(longer.config(row["max_load"])).summary)
        total += 1
        p99 = row["ttft_p99_s"]
        change = abs(float(s2["ttft_p99_s"]) / p99 - 1.0) if p99 > 0 else 0.0
        row["steady_p99_change"] = change
        row["steady"] = bool(task.slo.meets(s2) and change < STEADY_TOL)
        if row["steady"] or m == MAX_DOUBLINGS:
            break
        cand = dataclasses.replace(longer, max_load=row["max_load"] * (1 + cand.rel_tol) + 1)
    row["num_sims"] = total
    return row


def _search_once(task: SearchTask) -> dict[str, Any]:
    cand, slo, fn = task.candidate, task.slo, task.point_fn
    cache: dict[float, dict[str, Any]] = {}

    def probe(load: float) -> bool:
        if load not in cache:
            cache[load] = dict(fn(cand.config(load)).summary)
        return slo.meets(cache[load])

    integer = cand.load_mode == "concurrency"
    lo_start = 1.0 if integer else min(0.1, cand.max_load)
    if not probe(lo_start):
        best = 0.0
        hit_limit = False
    else:
        lo = lo_start
        cap = float(cache[lo_start].get("analytical_capacity_req", math.nan))
        guess = cap if math.isfinite(cap) and cap > lo else 2 * lo
        # Rates are not concurrencies: a capacity of C requests drains at roughly
        # C / mean E2E req/s, the rate guess.
        if not integer:
            e2el = float(cache[lo_start].get("e2el_mean_s", math.nan))
            guess = cap / e2el if math.isfinite(cap) and math.isfinite(e2el) and e2el > 0 else 1
        guess = min(max(guess, lo * 2), cand.max_load)
        hi = math.nan
        x = guess
        while True:
            x = min(round(x) if integer else x, cand.max_load)
            if probe(x):
                lo = x
                if x >= cand.max_load:
                    break
                x = x * 2
            else:
                hi = x
                break
        while math.isfinite(hi) and (hi - lo > max(1 if integer else 0, cand.rel_tol * lo)):
            mid = math.floor((lo + hi) / 2) if integer else math.sqrt(lo * hi)
            if integer and mid <= lo:
                break
            if probe(mid):
                lo = mid
            else:
                hi = mid
        best = lo
        hit_limit = not math.isfinite(hi)
    at = cache.get(best, {})
    return {
        "model": cand.model,
        "gpu": cand.gpu,
        "tp": cand.tp,
        "gmu": cand.gmu,
        "tree": "chain" if cand.tree is None else "x".join(map(str, cand.tree)),
        "commit": cand.commit,
        "workload": cand.workload,
        "load_mode": cand.load_mode,
        "max_load": best,
        "at_search_limit": hit_limit,
        "goodput_tok_per_s": float(at.get("output_throughput_tok_per_s", 0.0)),
        "ttft_p99_s": float(at.get("ttft_p99_s", math.nan)),
        "tpot_mean_s": float(at.get("tpot_mean_s", math.nan)),
        "peak_running": float(at.get("peak_running", math.nan)),
        "analytical_capacity_req": float(at.get("analytical_capacity_req", math.nan)),
        "num_sims": len(cache),
        "num_spec_tok": cand.num_spec_tok,
        "step_time": cand.step_time,
    }


def whatif(
    candidates: list[Candidate],
    slo: Slo,
    *,
    point_fn: Callable[[SimConfig], Any] | None = None,
    executor: Any = None,
    on_done: Callable[[], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every candidate's result, the goodput-maximising candidate per commit mode).

    ``on_done`` is called once per finished candidate (a progress bar)."""
    from capsim.sweep.executors import SerialExecutor
    from capsim.sweep.runner import default_point_fn

    if not candidates:
        raise ValueError("whatif: no candidates to search")
    fn = point_fn or default_point_fn()
    ex = executor or SerialExecutor()
    order = {c: i for i, c in enumerate(candidates)}
    results = []
    for res in ex.map_unordered(search_max_load, [SearchTask(c, slo, fn) for c in candidates]):
        results.append(res)
        if on_done is not None:
            on_done()
    df = pd.DataFrame(results)
    df["_order"] = [order[next(c for c in candidates if _same(c, r))] for r in results]
    df = df.sort_values("_order").drop(columns="_order").reset_index(drop=True)
    best_rows = []
    for _, g in df.groupby("commit", sort=False):
        best_rows.append(g.loc[g["goodput_tok_per_s"].idxmax()])
    best = pd.DataFrame(best_rows).reset_index(drop=True)
    return df, best


def _same(c: Candidate, r: dict[str, Any]) -> bool:
    tree = "chain" if c.tree is None else "x".join(map(str, c.tree))
    return (
        c.gmu == r["gmu"]
        and tree == r["tree"]
        and c.commit == r["commit"]
        and c.num_spec_tok == r["num_spec_tok"]
    )
