"""N replicas and a router on one SimPy clock.

Each replica is a whole ``EngineSim`` (its own scheduler, KV pool and step-time model)
in fed mode on the shared ``simpy.Environment``; the router process releases the
workload's requests at their times and hands each to the replica its policy picks.
Acceptance draws, release times and the request sample come from ``simulate.prepare``
with the same seed streams, so one replica with any router is exactly ``simulate``.
Results: one request frame for the fleet (with the replica of each request) and one
summary per replica plus the fleet's (vLLM bench definitions, ``capsim.metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import simpy

from capsim.config import SimConfig
from capsim.cost.base import StepTimeModel
from capsim.engine import EngineSim
from capsim.fleet.router import Router
from capsim.metrics import summarize
from capsim.simulate import make_scheduler, point_summary, prepare, request_frame
from capsim.traces.table import RequestTable


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetResult:
    requests: pd.DataFrame = field(metadata={"help": "one row per request, with its replica"})
    summary: dict[str, Any] = field(metadata={"help": "fleet-wide metrics"})
    replica_summaries: list[dict[str, Any]] = field(metadata={"help": "one per replica"})
    steps: list[pd.DataFrame] = field(metadata={"help": "engine steps, one frame per replica"})


def simulate_fleet(
    cfg: SimConfig,
    num_replicas: int,
    router: str = "round_robin",
    *,
    workload: RequestTable | None = None,
    cost: StepTimeModel | None = None,
    prefix_tok: int = 256,
    load_factor: float = 1.25,
) -> FleetResult:
    """Simulate ``num_replicas`` copies of ``cfg``'s deployment behind ``router`` at
    ``cfg.load`` (the fleet's load). Conversation turns (a workload with parents) and a
    concurrency gate are not routed yet: refused with the field named."""
    p = prepare(cfg, workload=workload, cost=cost)
    if p.parent is not None:
        raise ValueError(
            f"fleet: workload={cfg.workload!r} has conversation turns (not routed yet)"
        )
    if cfg.load.concurrency is not None:
        raise ValueError("fleet: load.concurrency is not supported (open-loop rate or replay only)")
    route = Router(router, num_replicas, prefix_tok=prefix_tok, load_factor=load_factor)
    env = simpy.Environment()
    n = len(p.requests)
    scheds = [make_scheduler(cfg, p.plan) for _ in range(num_replicas)]
    engines = [
        EngineSim(
            scheduler=s,
            cost=p.step_model,
            acceptance=p.draws,
            requests=p.requests,
            release_s=p.release,
            max_concurrency=None,
            window_tok=cfg.spec.window_tok,
            recycle_slots=True,
            env=env,
            fed=True,
        )
        for s in scheds
    ]
    where = np.full(n, -1, dtype=np.int64)

    def client():  # type: ignore[no-untyped-def]
        i = 0
        while i < n:
            t = p.release[i]
            if t > env.now:
                yield env.timeout(t - env.now)
            while i < n and p.release[i] <= env.now:
                req = p.requests[i]  # built now (LazyRequests), kept by its replica
                r = route.pick(req, [e.num_outstanding for e in engines])
                where[i] = r
                engines[r].submit(req)
                i += 1
        for e in engines:
            e.close()

    env.process(client())
    for e in engines:
        e.start()
    env.run()
    return _collect(cfg, p, engines, scheds, where, num_replicas, router)


def _collect(  # type: ignore[no-untyped-def]
    cfg: SimConfig,
    p,
    engines: list[EngineSim],
    scheds,
    where: np.ndarray,
    num_replicas: int,
    router: str,
) -> FleetResult:
    """Per-request frame of the whole fleet, per-replica and fleet summaries."""
    n = len(p.requests)
    done = sum(e._num_finished for e in engines)
    if done != n:
        raise RuntimeError(f"fleet simulation ended with {done} of {n} finished")
    # every replica's per-index stamps and final counters, merged by where each request went
    stamps = {
        k: np.full(n, np.nan) for k in ("send_s", "first_scheduled_s", "first_token_s", "finish_s")
    }
    counters = {
        "max_output_tok": p.output.astype(np.int64),
        "num_preemptions": np.zeros(n, dtype=np.int64),
        "num_cached_tok": np.zeros(n, dtype=np.int64),
    }
    used = np.zeros(n, dtype=np.int64)
    for r, e in enumerate(engines):
        idx = np.nonzero(where == r)[0]
        for k, col in stamps.items():
            col[idx] = getattr(e, k)[idx]
        counters["num_preemptions"][idx] = e.num_preemptions[idx]
        counters["num_cached_tok"][idx] = e.num_cached_tok[idx]
        used[idx] = e.num_accept_draws_used[idx]
    req_df = request_frame(p, stamps, counters)
    steps = [e.recorder.frame() for e in engines]
    per = []
    for r, e in enumerate(engines):
        sel = where == r
        if not sel.any():
            per.append({"replica": r, "num_requests": 0})
            continue
        s = summarize(req_df[sel].reset_index(drop=True), steps[r], np.asarray(e.recorder.itl_s))
        per.append({"replica": r, **s})
    if num_replicas == 1:
        fleet = point_summary(cfg, p, req_df, steps[0], np.asarray(engines[0].recorder.itl_s), used)
    else:
        all_steps = pd.concat(steps, ignore_index=True)
        itl = np.concatenate([np.asarray(e.recorder.itl_s) for e in engines])
        fleet = summarize(req_df, all_steps, itl)
        q = int(all_steps["num_prefix_query_tok"].sum())
        h = int(all_steps["num_prefix_hit_tok"].sum())
        fleet["prefix_cache_hit_rate"] = h / q if q else float("nan")
    fleet |= {"num_replicas": num_replicas, "router": router}
    return FleetResult(
        requests=req_df.assign(replica=where), summary=fleet, replica_summaries=per, steps=steps
    )
