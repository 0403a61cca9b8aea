"""Check a plan's answer on the joint fleet: N replicas + a router on one clock.

The search simulates one replica at rate / N (Poisson); ``verify_fleet`` simulates the
whole fleet at the full rate behind ``router`` (``capsim.fleet``) for as long as the
answer's steady run, and reports the fleet's SLO statistics next to the single-replica
prediction at the operating point.
"""

from __future__ import annotations

import math
from typing import Any

from capsim.plan.inputs import PlanSlo
from capsim.plan.point import stats_of
from capsim.plan.space import Candidate


def verify_fleet(
    cand: Candidate,
    replicas: int,
    *,
    workload: str,
    rate_req_per_s: float,
    burstiness: float,
    slo: PlanSlo,
    num_requests: int,
    seed: int = 0,
    router: str = "round_robin",
    step_time: str | None = None,
) -> dict[str, Any]:
    from capsim.fleet.sim import simulate_fleet

    cfg = cand.sim_config(
        workload=workload,
        rate_req_per_s=rate_req_per_s,
        num_requests=num_requests,
        burstiness=burstiness,
        seed=seed,
        step_time=step_time,
    )
    res = simulate_fleet(cfg, replicas, router)
    st = stats_of(_Joined(res), slo)
    st["misses"] = ",".join(slo.misses(st))  # type: ignore[assignment]
    st |= {"router": router, "replicas": replicas, "fleet_req_per_s": rate_req_per_s}
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in st.items()
    }


class _Joined:
    """The fleet result seen through ``stats_of``'s ``SimResult`` fields."""

    def __init__(self, res: Any) -> None:
        import pandas as pd

        self.requests = res.requests
        self.summary = res.summary
        self.steps = pd.concat(res.steps, ignore_index=True)
