"""Per-replica capacity: the largest arrival rate one replica serves within the SLO.

The rates searched lie on one geometric grid anchored at the rate asked for::

    rate_j = top_req_per_s x (1 + rel_tol) ** -j,   j = 0 .. num_grid

(``top`` = fleet rate x (1 + headroom): one replica at ``top`` would serve the whole
fleet; ``rate_num_grid`` ~ top / max_replicas). Whether a replica meets the SLO is assumed
monotone in the rate, so the answer is the smallest j that meets it: probe ``j_min`` (the
analytic ceiling's index, 0 without pruning), step out by 1, 2, 4, ... then bisect. The
replicas a fleet needs follow without more simulation: ``ceil(top / rate_j) =
ceil((1 + rel_tol) ** j)``. Pruning only moves ``j_min`` (the same grid, the same answer).

**Steady state.** A probe simulates ``max(probe_min_requests x m, probe_duration_s x m x
rate)`` requests (run-length multiplier m = 1, 2, 4, ...). At the answer j*, the run is
doubled (m -> 2m); the answer holds when the doubled run still meets the SLO and its p99
TTFT is within ``steady_tol`` (10%) of the shorter run's. Otherwise m doubles and the
search continues from j* at the longer length (a longer run never raises capacity here),
at most ``max_doublings`` times; a row that never settles says ``steady=False``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from capsim.plan.bounds import build_cost
from capsim.plan.inputs import PlanSlo, SearchSettings
from capsim.plan.point import run_point
from capsim.plan.space import Candidate


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityTask:
    cand: Candidate
    workload: str
    burstiness: float
    slo: PlanSlo
    settings: SearchSettings
    top_req_per_s: float
    num_grid: int
    j_min: int = 0
    fallback: str = "roofline"
    fleet_req_per_s: float = 0.0
    """The fleet's rate without headroom (the operating point); 0: top / (1 + 0)."""


def grid_rate(top: float, rel_tol: float, j: int) -> float:
    return float(top * (1.0 + rel_tol) ** (-j))


def replicas_for(rate_req_per_s: float, capacity_req_per_s: float) -> int:
    """Replicas so that each sees at most its capacity (a tiny epsilon absorbs rounding)."""
    if not capacity_req_per_s > 0:
        return 0
    return max(1, math.ceil(rate_req_per_s / capacity_req_per_s - 1e-9))


def num_grid_for(rel_tol: float, max_replicas: int) -> int:
    return max(0, math.ceil(math.log(max_replicas) / math.log1p(rel_tol)))


class _Prober:
    """Probe cache for one candidate: (j, m) -> stats (None when the run failed)."""

    def __init__(self, task: CapacityTask, cost: Any) -> None:
        self.t = task
        self.cost = cost
        self.cache: dict[tuple[int, int], dict[str, float]] = {}

    def requests(self, j: int, m: int) -> int:
        s = self.t.settings
        rate = grid_rate(self.t.top_req_per_s, s.rel_tol, j)
        return max(s.probe_min_requests * m, math.ceil(s.probe_duration_s * m * rate))

    def stats(self, j: int, m: int) -> dict[str, float]:
        if (j, m) not in self.cache:
            t = self.t
            cfg = t.cand.sim_config(
                workload=t.workload,
                rate_req_per_s=grid_rate(t.top_req_per_s, t.settings.rel_tol, j),
                num_requests=self.requests(j, m),
                burstiness=t.burstiness,
                seed=t.settings.seed,
            )
            st = run_point(cfg, self.cost, t.slo)
            st["misses"] = ",".join(t.slo.misses(st))  # type: ignore[assignment]
            self.cache[(j, m)] = st
        return self.cache[(j, m)]

    def meets(self, j: int, m: int) -> bool:
        return not self.stats(j, m)["misses"]


def _smallest_meeting(pr: _Prober, lo: int, hi: int, m: int) -> int | None:
    """Smallest j in [lo, hi] meeting the SLO at length m (monotone), or None."""
    if pr.meets(lo, m):
        return lo
    fail, step, j = lo, 1, None
    while True:
        cand = min(lo + step, hi)
        if pr.meets(cand, m):
            j = cand
            break
        fail = cand
        if cand >= hi:
            return None
        step *= 2
    while j - fail > 1:
        mid = (fail + j) // 2
        if pr.meets(mid, m):
            j = mid
        else:
            fail = mid
    return j


def _double_until_steady(  # type: ignore[no-untyped-def]
    pr, task: CapacityTask, j: int, m: int
) -> tuple[int | None, int, bool, float]:
    """Double the run length until p99 TTFT at capacity stops moving: (j, m, steady, change)."""
    s = task.settings
    steady, p99_change = False, math.nan
    jj: int | None = j
    for _ in range(s.max_doublings + 1):
        a, b = pr.stats(j, m), pr.stats(j, 2 * m)
        p99_change = abs(b["ttft_p99_s"] / a["ttft_p99_s"] - 1.0) if a["ttft_p99_s"] > 0 else 0.0
        if not b["misses"] and p99_change < s.steady_tol:
            steady = True
            break
        if m >= 2**s.max_doublings:
            break
        m *= 2
        nj = _smallest_meeting(pr, j, task.num_grid, m)
        if nj is None:
            jj = None
            break
        j = jj = nj
    return jj, m, steady, p99_change


def _probe_rows(pr, task: CapacityTask) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Every simulation the search ran, in (j, m) order."""
    s = task.settings
    return [
        {
            "j": jj,
            "m": mm,
            "rate": grid_rate(task.top_req_per_s, s.rel_tol, jj),
            "n": int(st["num_requests"]),
            "ttft_p99_s": st["ttft_p99_s"],
            "tpot_mean_s": st["tpot_mean_s"],
            "misses": st["misses"],
        }
        for (jj, mm), st in sorted(pr.cache.items())
    ]


def _run_operating_point(task: CapacityTask, cost, j: int, m: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Simulate the operating point: the fleet's rate split over the replicas it needs."""
    s = task.settings
    n = replicas_for(task.top_req_per_s, grid_rate(task.top_req_per_s, s.rel_tol, j))
    op_rate = (task.fleet_req_per_s or task.top_req_per_s) / n
    cfg = task.cand.sim_config(
        workload=task.workload,
        rate_req_per_s=op_rate,
        num_requests=max(
            s.probe_min_requests * 2 * m, math.ceil(s.probe_duration_s * 2 * m * op_rate)
        ),
        burstiness=task.burstiness,
        seed=s.seed,
    )
    return run_point(cfg, cost, task.slo)


def search_capacity(task: CapacityTask) -> dict[str, Any]:
    """One candidate's capacity row (a top-level function: runs in executor workers)."""
    t0 = time.perf_counter()
    cand, s = task.cand, task.settings
    row: dict[str, Any] = cand.keys()
    cost, used, note = build_cost(cand, task.fallback)
    row |= {"step_time_used": used, "step_time_note": note}
    if cost is None:
        return row | {"status": "refused", "reason": note, "num_sims": 0, "sim_wall_s": 0.0}
    pr = _Prober(task, cost)
    m, j = 1, _smallest_meeting(pr, task.j_min, task.num_grid, 1)
    steady, p99_change = False, math.nan
    if j is not None:
        j, m, steady, p99_change = _double_until_steady(pr, task, j, m)
    probes = _probe_rows(pr, task)
    row |= {
        "num_sims": len(pr.cache),
        "sim_wall_s": time.perf_counter() - t0,
        "probes_json": json.dumps(probes, sort_keys=True),
        "steady": steady,
        "steady_p99_change": p99_change,
        "run_multiplier": m,
    }
    if j is None:
        low = grid_rate(task.top_req_per_s, s.rel_tol, task.num_grid)
        return row | {
            "status": "infeasible",
            "reason": f"SLO missed even at {low:.3g} req/s per replica (more than the "
            f"replica limit needed)",
        }
    st = pr.stats(j, 2 * m) if (j, 2 * m) in pr.cache else pr.stats(j, m)
    row |= {f"at_cap_{k}": v for k, v in st.items() if k != "misses"}
    # the operating point: the fleet's rate split over the replicas it needs
    op = _run_operating_point(task, cost, j, m)
    row |= {f"op_{k}": v for k, v in op.items()}
    row["op_misses"] = ",".join(task.slo.misses(op))
    row["num_sims"] = len(pr.cache) + 1
    row["sim_wall_s"] = time.perf_counter() - t0
    return row | {
        "status": "ok",
        "reason": ""
        if steady
        else f"not steady: p99 TTFT still moved by {p99_change:.0%} when the run was doubled",
        "grid_j": j,
        "capacity_req_per_s": grid_rate(task.top_req_per_s, s.rel_tol, j),
    }
