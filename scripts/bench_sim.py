"""Simulator speed: one 256-concurrency, 2,000-request point, store-all and reconstruct.

Prints wall time and simulated requests per wall-second (single process, one core).
Usage: python scripts/bench_sim.py [--workload sharegpt] [--num-requests 2000]
"""

from __future__ import annotations

import argparse
import time

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.simulate import simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", default="sharegpt")
    ap.add_argument("--num-requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--gmu", type=float, default=0.9)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--step-time", default="calibrated")
    args = ap.parse_args()
    print(
        f"{'commit':<12}{'wall_s':>8}{'cpu_s':>8}{'req/wall-s':>12}"
        f"{'steps':>8}{'preempt':>9}{'peak_run':>9}   (best of {args.repeat})"
    )
    for commit in ("storeall", "reconstruct"):
        cfg = SimConfig(
            workload=args.workload,
            engine=EngineConfig(gmu=args.gmu),
            spec=SpecDecodeConfig(commit=commit),  # type: ignore[arg-type]
            load=LoadConfig(concurrency=args.concurrency, num_requests=args.num_requests),
            step_time=args.step_time,
        )
        best, best_cpu = float("inf"), float("inf")
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            res = simulate(cfg)
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        s = res.summary
        print(
            f"{commit:<12}{best:>8.3f}{best_cpu:>8.3f}{args.num_requests / best:>12.0f}"
            f"{s['num_steps']:>8}{s['num_preemptions']:>9}{s['peak_running']:>9}"
        )


if __name__ == "__main__":
    main()
