"""Diagnostic (no fit): the real engine's step period by batch shape vs capsim's step model.

    PYTHONPATH=. python3 experiments/engine/step_diagnostic.py [RUN ...]

For each committed run with a step log (runs/<run>/steps.csv): every step's cost on the real
engine, read as the gap between its schedule and the next schedule (``t_sched_s[i+1] -
t_sched_s[i]``). vLLM 0.26 keeps two batches in flight and, on one GPU, launches a batch in
the scheduling thread: the next batch is scheduled once this one is launched and (queue
full) the one before it is done, so the gap is max(this batch's host launch, the GPU wait).
The gap between consecutive outputs (``t_done_s``) is shifted by one: a decode step followed
by an eager one shows the eager launch in its own output gap. Steps after an idle engine
(gap > 1 s) are dropped. Compared with capsim's kernel price of the same shape (calibrated tables,
k of the run), main c4fa656's engine terms (capsim.cost.engine_overhead: max(kernels, host)
+ delta) and the async step period (capsim.cost.engine_period: max(host, kernels - excess),
fitted on four of these logs, PLAN.md 2026-12-02 05:20 / 05:44). Shapes
are rebuilt from the log's counts: decode contexts at their mean, the prefill tokens split
evenly over the step's prefill requests, each at 0 computed tokens (the log does not say
how far each chunk is into its prompt: an approximation, stated). Grouped by CUDA-graph
mode, requests and tokens (groups of >= 2 steps); medians. Writes step_diagnostic.md here.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.config import SpecDecodeConfig
from capsim.cost.calibrated import CalibratedStepTime
from capsim.cost.engine_overhead import MEASURED_H200_VLLM026, HostBoundStepTime, graph_mode
from capsim.cost.engine_period import MEASURED_H200_VLLM026_ASYNC, AsyncStepPeriod
from capsim.gpus import get_gpu
from capsim.live.engine_period_fit import step_shapes
from capsim.memory.cudagraph import capture_descs
from capsim.models import get_model

HERE = Path(__file__).resolve().parent
RUNS = (
    "g090_k0_rand_c64",
    "g090_k0_rand_c256",
    "g090_k0_rand_c1",
    "g090_k3_rand_c1_steps",
    # calls 6-7 (2026-12-02): k=1, and the loaded k=3 step logs at max_num_batched_tokens 16384
    "g090_k1_rand_c1",
    "g090_k1_rand_c64",
    "g090m16_k3_rand_c64",
    "g090m16_k3_rand_c256",
    "g090m16_k3_sg_c64",
    "g090m16_k3_rand_r8",
    # calls 22-23 (session 7, predict runs read here only after their comparison): k=2 and k=5
    "g090_k2_rand_c16",
    "g090_k2_sg_c64",
    "g090_k2_sg_r12",
    "g090_k5_rand_c1",
    "g090_k5_sg_c64",
)


def diagnose(run: str) -> pd.DataFrame:
    d = HERE / "runs" / run
    steps = pd.read_csv(d / "steps.csv")
    srv = json.loads((d / "server.json").read_text())
    k = int(srv["num_speculative_tokens"])
    base = CalibratedStepTime.from_config(
        get_model("qwen3.5-35b-a3b"), get_gpu("H200"), 1, SpecDecodeConfig(num_spec_tok=k)
    )
    descs = capture_descs(  # vLLM 0.26's defaults on the H200 where the server set none
        vllm_version="0.26",
        max_num_seqs=int(srv["max_num_seqs"] or 1024),
        num_spec_tok=k,
        max_num_batched_tokens=int(srv["max_num_batched_tokens"] or 8192),
    )
    eng = HostBoundStepTime(base, MEASURED_H200_VLLM026, descs)
    per = AsyncStepPeriod(base, MEASURED_H200_VLLM026_ASYNC, descs, k)
    sh = step_shapes(steps, k)
    df = pd.DataFrame(
        {
            "mode": [graph_mode(s, descs) for s in sh],
            "num_req": steps["num_req"],
            "num_tok": steps["num_tok"],
            "prefill": steps["num_prefill_tok"] > 0,
            "period_ms": 1e3 * (steps["t_sched_s"].shift(-1) - steps["t_sched_s"]),
            "capsim_ms": [1e3 * base.step_time_s(s) for s in sh],
            "engine_ms": [1e3 * eng.step_time_s(s) for s in sh],
            "async_ms": [1e3 * per.step_time_s(s) for s in sh],
        }
    ).iloc[:-1]
    return df[df["period_ms"] < 1e3]


def summary(run: str, df: pd.DataFrame) -> str:
    bins = [0, 1, 2, 8, 16, 32, 48, 64, 128, 256, 512, 1024]
    tok_bins = [0, 512, 2048, 8192]
    df = df.assign(req_bin=pd.cut(df["num_req"], bins), tok_bin=pd.cut(df["num_tok"], tok_bins))
    g = df.groupby(["mode", "prefill", "req_bin", "tok_bin"], observed=True).agg(
        steps=("period_ms", "size"),
        tokens=("num_tok", "median"),
        real_ms=("period_ms", "median"),
        capsim_ms=("capsim_ms", "median"),
        engine_ms=("engine_ms", "median"),
        async_ms=("async_ms", "median"),
    )
    g = g[g["steps"] >= 2].reset_index()
    lines = [
        f"### {run}",
        "",
        "| mode | prefill in step | requests | tokens | steps | tokens (median) | "
        "real sched-to-sched ms | capsim ms (err) | main c4fa656 engine ms (err) | "
        "async step period ms (err) |",
        "|" + "---|" * 10,
    ]
    for r in g.itertuples():
        e1, e2 = (100 * (r.capsim_ms / r.real_ms - 1), 100 * (r.engine_ms / r.real_ms - 1))
        e3 = 100 * (r.async_ms / r.real_ms - 1)
        lines.append(
            f"| {r.mode} | {'yes' if r.prefill else 'no'} | {r.req_bin} | {r.tok_bin} | "
            f"{r.steps} | "
            f"{r.tokens:.0f} | {r.real_ms:.2f} | {r.capsim_ms:.2f} ({e1:+.0f}%) | "
            f"{r.engine_ms:.2f} ({e2:+.0f}%) | {r.async_ms:.2f} ({e3:+.0f}%) |"
        )
    return "\n".join(lines) + "\n"


def decomposition(runs: list[str], frames: dict[str, pd.DataFrame]) -> str:
    """Where capsim + engine terms' step time departs from the real engine's, summed over
    each run's logged steps, by CUDA-graph mode: kernel price - real, plus the host term
    (max(kernels, host) - kernels), plus delta on every step."""
    delta_ms = 1e3 * MEASURED_H200_VLLM026.delta_s
    lines = [
        "### Where main c4fa656's engine column's step time goes wrong (sums over the logged "
        "steps)",
        "",
        "Seconds; excess = capsim+engine - real = (kernels - real) + host term + delta.",
        "",
        "| run | mode | steps | real s | kernels - real s | host term s | delta s | excess s "
        "(% of the run's real total) |",
        "|" + "---|" * 8,
    ]
    for run in runs:
        df = frames[run]
        total = df["period_ms"].sum()
        for mode, g in df.groupby("mode"):
            host = (g["engine_ms"] - delta_ms - g["capsim_ms"]).sum()
            kern = (g["capsim_ms"] - g["period_ms"]).sum()
            d = delta_ms * len(g)
            ex = kern + host + d
            lines.append(
                f"| {run} | {mode} | {len(g)} | {g['period_ms'].sum() / 1e3:.2f} | "
                f"{kern / 1e3:+.2f} | {host / 1e3:+.2f} | {d / 1e3:+.2f} | "
                f"{ex / 1e3:+.2f} ({100 * ex / total:+.1f}%) |"
            )
    return "\n".join(lines) + "\n"


def _modes(num_tok: pd.Series, prefill_tok: pd.Series, largest_tok: int) -> np.ndarray:
    return np.where(num_tok > largest_tok, "NONE", np.where(prefill_tok > 0, "PIECEWISE", "FULL"))


def step_mix(runs: list[str]) -> str:
    """The run as capsim + engine terms simulates it (its own schedule, async scheduling as
    the table) against the real step log: steps and seconds by CUDA-graph mode (modes by
    tokens and prefill; the capture limit is 512 tokens in every logged run)."""
    from capsim.cost.factory import build_step_time_model
    from capsim.live import engine_oos as eo
    from capsim.simulate import simulate

    lines = [
        "### Step mix: capsim + the async step period's own schedule vs the real engine",
        "",
        "Steps and seconds per CUDA-graph mode (real: sched-to-sched periods, idle gaps "
        "> 1 s dropped).",
        "",
        "| run | mode | real steps | capsim steps | real s | capsim s | capsim / real time |",
        "|" + "---|" * 7,
    ]
    for run in runs:
        r = eo.load_run(HERE / "runs" / run)
        cfg = eo.sim_config(r, engine_overhead=eo.ENGINE_OVERHEAD)
        cost = build_step_time_model(cfg, cfg.model_spec(), get_gpu(cfg.gpu))
        sim = simulate(cfg, workload=eo.request_table(r), cost=cost).steps
        sm = _modes(sim["num_scheduled_tok"], sim["num_prefill_tok"], 512)
        real = pd.read_csv(HERE / "runs" / run / "steps.csv")
        rm = _modes(real["num_tok"], real["num_prefill_tok"], 512)
        per = (real["t_sched_s"].shift(-1) - real["t_sched_s"]).to_numpy()
        keep = per < 1.0
        for mode in ("FULL", "PIECEWISE", "NONE"):
            rs, cs = float(per[(rm == mode) & keep].sum()), float(sim["step_s"][sm == mode].sum())
            if not (rm == mode).any() and not (sm == mode).any():
                continue
            ratio = f"{cs / rs:.2f}" if rs else "-"
            lines.append(
                f"| {run} | {mode} | {int((rm == mode).sum())} | {int((sm == mode).sum())} | "
                f"{rs:.2f} | {cs:.2f} | {ratio} |"
            )
    return "\n".join(lines) + "\n"


def replay_open_loop(run: str) -> str:
    """An open-loop run with the bench's own send times (``requests.csv`` start_s) instead
    of capsim's own Poisson draw: separates the arrival draw from the model (diagnostic)."""
    import dataclasses

    from capsim.config import LoadConfig
    from capsim.cost.factory import build_step_time_model
    from capsim.live import engine_oos as eo
    from capsim.simulate import simulate
    from capsim.traces.table import RequestTable

    r = eo.load_run(HERE / "runs" / run)
    req = r.requests.sort_values("start_s", kind="stable")
    cfg = eo.sim_config(r, engine_overhead=eo.ENGINE_OVERHEAD)
    cfg = dataclasses.replace(cfg, load=LoadConfig(mode="replay", num_requests=len(req)))
    table = RequestTable(
        name=run,
        prompt_tok=req["input_len"].to_numpy(np.int64),
        output_tok=req["output_len"].to_numpy(np.int64),
        arrival_s=req["start_s"].to_numpy(np.float64),
    )
    cost = build_step_time_model(cfg, cfg.model_spec(), get_gpu(cfg.gpu))
    s = simulate(cfg, workload=table, cost=cost).summary
    m = r.metrics
    got = {
        "out tok/s": (m["throughput_tok_per_s"], s["output_throughput_tok_per_s"]),
        "TTFT mean ms": (m["ttft_mean_ms"], 1e3 * s["ttft_mean_s"]),
        "TTFT p99 ms": (m["ttft_p99_ms"], 1e3 * s["ttft_p99_s"]),
        "TPOT mean ms": (m["tpot_mean_ms"], 1e3 * s["tpot_mean_s"]),
        "peak running": (m["peak_running"], float(s["peak_running"])),
    }
    lines = [
        f"### {run} with the bench's send times replayed (capsim + the async step period)",
        "",
        "| metric | real | capsim, replayed arrivals | err % |",
        "|---|---|---|---|",
    ]
    for k, (a, b) in got.items():
        lines.append(f"| {k} | {a:.4g} | {b:.4g} | {100 * (b / a - 1):+.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    runs = argv or list(RUNS)
    frames = {r: diagnose(r) for r in runs}
    text = (
        "# Step periods of the real engine vs capsim (diagnostic, no fit)\n\n"
        + __doc__.split("\n\n", 2)[2].split("    PYTHONPATH")[0]
        + "\n"
        + "\n".join(summary(r, frames[r]) for r in runs)
        + "\n"
        + decomposition(runs, frames)
        + "\n"
        + step_mix([r for r in runs if not r.endswith("_c1") and "_c1_" not in r])
        + "\n"
        + "".join(replay_open_loop(r) for r in runs if re.search(r"_r\d+$", r))
    )
    if not argv:
        tmp = HERE / "step_diagnostic.md.tmp"
        tmp.write_text(text)
        os.replace(tmp, HERE / "step_diagnostic.md")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
