"""Plan wall time by executor: serial, local pool (2), dask LocalCluster with 1 and 2 workers."""

import hashlib
import json
import os
import tempfile
import time

from capsim.plan.inputs import PlanInputs, PlanSlo, SearchSettings, SearchSpace, Traffic
from capsim.plan.output import write_plan
from capsim.plan.search import run_plan
from capsim.sweep.executors import DaskExecutor, LocalExecutor, SerialExecutor

inp = PlanInputs(
    traffic=Traffic(workload="sharegpt", rate_req_per_s=50.0),
    slo=PlanSlo(ttft_p99_s=2.0, tpot_mean_s=0.05),
    space=SearchSpace(
        gpus=("H200",),
        tps=(1,),
        ks=(3, 4),
        commit_modes=("storeall", "reconstruct", "deferred"),
        gmus=(0.85, 0.92),
    ),
    settings=SearchSettings(
        probe_min_requests=200, probe_duration_s=10.0, max_doublings=2, frontier_slack=10.0
    ),
)


def main():
    res = {}

    def go(name, ex):
        t = time.perf_counter()
        run = run_plan(inp, executor=ex)
        wall = time.perf_counter() - t
        d = tempfile.mkdtemp()
        p = write_plan(run, d)
        h = hashlib.sha256(p["candidates"].read_bytes()).hexdigest()[:16]
        res[name] = {
            "wall_s": round(wall, 1),
            "sim_cpu_s": round(run.sim_wall_s, 1),
            "candidates_sha": h,
            "load1": os.getloadavg()[0],
            "num_sims": int(run.candidates["num_sims"].fillna(0).sum()),
        }
        print(name, res[name], flush=True)

    go("serial", SerialExecutor())
    go("local-2", LocalExecutor(2))
    from distributed import Client, LocalCluster

    for n in (1, 2):
        with (
            LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cl,
            Client(cl) as c,
        ):
            go(f"dask-{n}", DaskExecutor(c))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
