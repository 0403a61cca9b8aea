"""The client round trip of a real vLLM engine, read from its step log (a fit; session 14).

Under a closed loop (``vllm bench serve --max-concurrency C``) the client sends a new request
as soon as one ends. The engine's step log (``capsim/live/engine_steplog``) has, per batch,
the schedule time ``t_sched_s``, the time its output was consumed ``t_done_s``, the running
count after scheduling and the new requests admitted. With async scheduling vLLM keeps two
batches in flight: schedule(n+1) < update(n) < schedule(n+2), so the requests that finished
in update(n) leave the running count of schedule(n+2):

    finished(n) = running(n+1) + new(n+2) - running(n+2)

(no preemption). The k-th finish is paired with the (C+k)-th admission (the client replaces
finishes in order). A replacement admitted at schedule a reached the engine after schedule
a-1 and before schedule a, so the round trip r (the finish's output to the API server and
client, the new request back through HTTP, tokenization and the engine's input queue) lies
in ``(t_sched[a-1] - t_done[f], t_sched[a] - t_done[f]]``. ``fit_round_trip_s`` returns the
constant r inside the most such intervals over the given runs: the middle of the best
plateau. It is used by ``capsim.cost.engine_period`` (``client_round_trip_s``); the fit
runs are named in experiments/engine/PLAN.md (2026-12-04 18:49).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

# the FIT runs of ``CLIENT_ROUND_TRIP_S`` (experiments/engine/PLAN.md 2026-12-04 18:49)
FIT_RUNS: tuple[str, ...] = (
    "g090_k2_sg_c64",
    "g090_k2_sg_c64_r2",
    "g090_k2_sg_c64_r3",
    "g090_k2_sg_c64_r4",
)


@dataclass(frozen=True, slots=True)
class Intervals:
    """Per closed-loop replacement: the bounds of the round trip (seconds) and the step gap."""

    lower_s: np.ndarray
    upper_s: np.ndarray
    step_gap: np.ndarray  # admission schedule index - finishing step index


def replacement_intervals(steps: pd.DataFrame, concurrency: int) -> Intervals:
    """The round-trip bounds of every replacement of a closed-loop run's step log."""
    if concurrency < 1:
        raise ValueError(f"concurrency={concurrency}: must be >= 1")
    for col in ("t_sched_s", "t_done_s", "running", "num_new_req", "num_preempted"):
        if col not in steps.columns:
            raise ValueError(f"step log: column {col!r} missing")
    if int(steps["num_preempted"].sum()):
        raise ValueError("step log: preemptions break the finish count (a run without them only)")
    ts = steps["t_sched_s"].to_numpy(np.float64)
    td = steps["t_done_s"].to_numpy(np.float64)
    running = steps["running"].to_numpy(np.int64)
    new = steps["num_new_req"].to_numpy(np.int64)
    n = len(steps)
    fin = np.zeros(n, dtype=np.int64)  # fin[m]: finished in update(m - 2), seen by schedule m
    fin[2:] = running[1:-1] + new[2:] - running[2:]
    if n > 2 and fin.min() < 0:
        raise ValueError("step log: running count rises without admissions (not a closed loop)")
    finish_step = np.repeat(np.arange(n) - 2, fin)
    admit_step = np.repeat(np.arange(n), new)
    m = min(finish_step.size, admit_step.size - concurrency)
    if m <= 0:
        return Intervals(np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64))
    f, a = finish_step[:m], admit_step[concurrency : concurrency + m]
    ok = a >= 1
    f, a = f[ok], a[ok]
    return Intervals(ts[a - 1] - td[f], ts[a] - td[f], a - f)


def fit_round_trip_s(intervals: Sequence[Intervals], resolution_s: float = 1e-4) -> float:
    """The constant round trip inside the most intervals (the middle of the best plateau)."""
    lo = np.concatenate([iv.lower_s for iv in intervals])
    hi = np.concatenate([iv.upper_s for iv in intervals])
    if lo.size == 0:
        raise ValueError("round-trip fit: no closed-loop replacement in the fit runs")
    grid = np.arange(0.0, float(np.percentile(hi, 90)) + resolution_s, resolution_s)
    count = (lo[None, :] < grid[:, None]).astype(np.int32)
    count &= grid[:, None] <= hi[None, :]
    inside = count.sum(axis=1)
    best = np.flatnonzero(inside == inside.max())
    # the first maximal plateau (consecutive grid points)
    end = best[0]
    while end + 1 < grid.size and inside[end + 1] == inside.max():
        end += 1
    return round(float(0.5 * (grid[best[0]] + grid[end])), 4)


def run_intervals(run_dir: Path) -> Intervals:
    """``replacement_intervals`` of a committed run (its job.json's max_concurrency)."""
    job = json.loads((run_dir / "job.json").read_text())
    conc = (job.get("bench") or {}).get("max_concurrency")
    if not conc:
        raise ValueError(f"{run_dir.name}: not a closed-loop run (no bench.max_concurrency)")
    return replacement_intervals(pd.read_csv(run_dir / "steps.csv"), int(conc))


def main(argv: Sequence[str] | None = None) -> None:
    """``python3 -m capsim.live.client_roundtrip RUN_DIR...``: the fit and each run's spread."""
    dirs = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    ivs = [run_intervals(d) for d in dirs]
    for d, iv in zip(dirs, ivs, strict=True):
        gaps = np.bincount(iv.step_gap, minlength=6)[3:6]
        print(f"{d.name}: {iv.lower_s.size} replacements, step gap 3/4/5: {gaps.tolist()}")
    print(f"round trip r = {1e3 * fit_round_trip_s(ivs):.1f} ms")


if __name__ == "__main__":
    main()
