"""Real vLLM runs (experiments/engine/runs/) against capsim: the out-of-sample table.

Each committed run dir holds what `capsim.live.engine_runner` wrote on the GPU, made
compact by `capsim.live.engine_record`: ``job.json`` (the bench spec), ``server.json``
(the `vllm serve` settings), ``bench_summary.json`` (vllm bench serve's scalar results),
``requests.csv`` (per request: input_len, output_len, ttft_s, e2el_s), ``metrics.csv``
(/metrics every 0.5 s) and ``counters_delta.json``.

capsim runs the same configuration (`capsim simulate -m qwen3.5-35b-a3b -g h200
--vllm-version 0.26 --gmu G -k K --max-num-seqs N ...`: the same library call) on the same
request lengths and load. Three predictions (experiments/engine/PLAN.md): capsim as
shipped; capsim + delta, where delta is one constant per-step engine overhead fitted on the
single fit run of calls 1-2 (FIT_RUNS); and capsim + the engine terms
(``--engine-overhead measured-h200-vllm0.26``: host cost per step by CUDA-graph mode plus a
refitted delta, ``capsim.cost.engine_overhead``), fitted on ENGINE_FIT_RUNS only.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.cost.base import BatchShape, StepTimeModel
from capsim.traces.table import RequestTable

FIT_RUNS: tuple[str, ...] = ("g090_k3_rand_c1",)  # PLAN.md 20:01: the delta column's fit run
ENGINE_OVERHEAD = "measured-h200-vllm0.26"
METRICS: tuple[str, ...] = (
    "throughput_tok_per_s",
    "ttft_mean_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "tpot_p99_ms",
    "peak_running",
    "preemptions",
)
# prefix-caching runs only: tokens served from the prefix cache (vLLM's
# vllm:prefix_cache_hits counter over the measured run; capsim's prefix_cache_hits_tok)
PREFIX_METRIC = "prefix_hit_tok"
# and the tokens looked up (vllm:prefix_cache_queries; capsim's prefix_cache_queries_tok): more
# than the prompts hold where a waiting request is looked up on several steps (vLLM <= 0.26)
PREFIX_QUERY_METRIC = "prefix_query_tok"
# issue 21's thresholds: relative error, and an absolute floor (same unit) where one applies
THRESHOLDS: dict[str, tuple[float, float]] = {
    "throughput_tok_per_s": (0.10, 0.0),
    "tpot_mean_ms": (0.10, 0.0),
    "ttft_mean_ms": (0.20, 15.0),
    "ttft_p99_ms": (0.30, 0.0),
    "peak_running": (0.05, 0.0),
}


@dataclass(frozen=True)
class RealRun:
    name: str
    server: dict[str, Any]
    bench: dict[str, Any]
    requests: pd.DataFrame
    metrics: dict[str, float]
    run_dir: Path | None = None  # where it was loaded from (finds the data folder)


def load_run(run_dir: Path) -> RealRun:
    """One committed run dir -> RealRun (errors name the dir and the missing file)."""
    for f in ("job.json", "server.json", "bench_summary.json", "requests.csv", "metrics.csv"):
        if not (run_dir / f).exists():
            raise ValueError(f"run_dir={str(run_dir)!r}: {f} is missing")
    job = json.loads((run_dir / "job.json").read_text())
    summ = json.loads((run_dir / "bench_summary.json").read_text())
    reqs = pd.read_csv(run_dir / "requests.csv")
    samples = pd.read_csv(run_dir / "metrics.csv")
    delta = (
        json.loads((run_dir / "counters_delta.json").read_text())
        if (run_dir / "counters_delta.json").exists()
        else {}
    )
    metrics = {
        "throughput_tok_per_s": float(summ["output_throughput"]),
        "ttft_mean_ms": float(summ["mean_ttft_ms"]),
        "ttft_p99_ms": float(summ["p99_ttft_ms"]),
        "tpot_mean_ms": float(summ["mean_tpot_ms"]),
        "tpot_p99_ms": float(summ["p99_tpot_ms"]),
        "peak_running": float(samples["running"].max()),
        "preemptions": float(delta.get("vllm:num_preemptions_total", math.nan)),
        PREFIX_METRIC: float(delta.get("vllm:prefix_cache_hits_total", math.nan)),
        PREFIX_QUERY_METRIC: float(delta.get("vllm:prefix_cache_queries_total", math.nan)),
    }
    return RealRun(
        run_dir.name,
        json.loads((run_dir / "server.json").read_text()),
        job["bench"],
        reqs,
        metrics,
        run_dir,
    )


def sim_config(
    run: RealRun,
    num_gpu_blocks: int | None = None,
    engine_overhead: str | None = None,
    async_scheduling: bool | None = None,
) -> SimConfig:
    """capsim's configuration of the run; `num_gpu_blocks` pins the pool to the block
    count the real start-up reported (diagnostic: separates the memory plan's error from
    the scheduler's and the step model's); `async_scheduling` None: vLLM 0.26's default
    (on, as the real servers ran: their step logs show the next batch scheduled before the
    previous one's output in >= 98.8% of steps)."""
    s, b = run.server, run.bench
    engine = EngineConfig(
        gmu=float(s["gpu_memory_utilization"]),
        max_num_seqs=s["max_num_seqs"],
        max_num_batched_tokens=s["max_num_batched_tokens"],
        enable_prefix_caching=bool(s["enable_prefix_caching"]),
        num_gpu_blocks_override=num_gpu_blocks,
        enforce_eager="--enforce-eager" in (s.get("extra_args") or ()),
        vllm_version="0.26",
        engine_overhead=engine_overhead,
        async_scheduling=async_scheduling,
    )
    n = len(run.requests)
    if b.get("request_rate") is not None:
        load = LoadConfig(
            mode="rate",
            rate_req_per_s=float(b["request_rate"]),
            num_requests=n,
            concurrency=b.get("max_concurrency"),
        )
    else:
        load = LoadConfig(mode="concurrency", concurrency=int(b["max_concurrency"]), num_requests=n)
    return SimConfig(
        model="qwen3.5-35b-a3b",
        gpu="H200",
        engine=engine,
        spec=SpecDecodeConfig(num_spec_tok=int(s["num_speculative_tokens"])),
        workload=run.name,
        load=load,
        seed=0,
        step_time="calibrated",
    )


def default_data_root(run: RealRun) -> Path | None:
    """The data folder next to the runs root (experiments/engine/data/), if known."""
    return None if run.run_dir is None else run.run_dir.parent.parent / "data"


def dataset_segments(
    run: RealRun, data_root: Path | None = None
) -> tuple[tuple[tuple[int, int], ...], ...] | None:
    """The shared segments of the run's requests: from ``DATA/<stem of dataset_path>.csv``
    when that CSV has a ``segments`` column (``capsim.live.engine_dataset``), checked row by
    row against requests.csv (same prompt and output lengths, same order); else None."""
    from capsim.live.engine_dataset import parse_segments

    root = data_root if data_root is not None else default_data_root(run)
    path = run.bench.get("dataset_path")
    if root is None or not path:
        return None
    csv = Path(root) / f"{Path(str(path)).stem}.csv"
    if not csv.exists():
        return None
    data = pd.read_csv(csv, dtype={"segments": str, "source_id": str})
    if "segments" not in data.columns:
        return None
    got_p = run.requests["input_len"].to_numpy(np.int64)
    got_o = run.requests["output_len"].to_numpy(np.int64)
    if len(got_p) > len(data):
        raise ValueError(
            f"run {run.name}: requests.csv has {len(got_p)} rows, {csv} only {len(data)}"
        )
    want_p = data["prompt_tok"].to_numpy(np.int64)[: len(got_p)]
    want_o = data["output_tok"].to_numpy(np.int64)[: len(got_p)]
    bad = np.nonzero((want_p != got_p) | (want_o != got_o))[0]
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"run {run.name}: requests.csv row {i} has input_len={got_p[i]}, "
            f"output_len={got_o[i]}; {csv} row {i} has prompt_tok={want_p[i]}, "
            f"output_tok={want_o[i]}"
        )
    return tuple(
        parse_segments(text, f"{csv} row {i}")
        for i, text in enumerate(data["segments"].iloc[: len(got_p)])
    )


def request_table(run: RealRun, data_root: Path | None = None) -> RequestTable:
    """The run's requests as capsim simulates them: requests.csv's lengths in order, plus
    the dataset's shared segments where its CSV has them (``dataset_segments``;
    ``data_root`` None: the data folder next to the run's runs root)."""
    r = run.requests
    return RequestTable(
        name=run.name,
        prompt_tok=r["input_len"].to_numpy(np.int64),
        output_tok=r["output_len"].to_numpy(np.int64),
        segments=dataset_segments(run, data_root),
    )


@dataclass(frozen=True)
class PlusOverhead:
    """A step-time model plus a constant per-step engine overhead (the fitted delta)."""

    base: StepTimeModel
    delta_s: float

    def step_time_s(self, shape: BatchShape) -> float:
        return self.base.step_time_s(shape) + self.delta_s

    def describe(self) -> dict[str, object]:
        return {
            **self.base.describe(),
            "engine_overhead_s": self.delta_s,
            "engine_overhead_fit": list(FIT_RUNS),
        }


def replay_sends(
    cfg: SimConfig, table: RequestTable, run: RealRun
) -> tuple[SimConfig, RequestTable]:
    """An open-loop run as capsim's ``replay`` load at the real client's recorded send times
    (requests.csv ``start_s``; in an open loop they do not depend on the server: an input of
    the run). Experiments/engine/PLAN.md 2026-12-04 22:04 and arrival_replay_study.md."""
    start = run.requests["start_s"].to_numpy(np.float64)
    table = dataclasses.replace(table, arrival_s=start - start[0])
    load = LoadConfig(mode="replay", num_requests=len(start), concurrency=cfg.load.concurrency)
    return dataclasses.replace(cfg, load=load), table


def simulate_run(
    run: RealRun,
    delta_s: float = 0.0,
    num_gpu_blocks: int | None = None,
    engine_overhead: str | None = None,
    async_scheduling: bool | None = None,
    async_period: bool = True,
    data_root: Path | None = None,
    replay_open_loop: bool = True,
) -> dict[str, float]:
    """capsim's metrics for the real run's configuration (same lengths, same load, the
    dataset's shared segments if any: ``request_table``); ``async_period=False``: main
    c4fa656's engine terms (no async step period). An open-loop run replays the real
    client's send times (``replay_sends``; ``replay_open_loop=False``: capsim's own draws at
    the run's rate, the harness before session 15)."""
    from capsim.cost.factory import build_step_time_model
    from capsim.gpus import get_gpu
    from capsim.simulate import simulate

    cfg = sim_config(run, num_gpu_blocks, engine_overhead, async_scheduling)
    table = request_table(run, data_root)
    if replay_open_loop and cfg.load.mode == "rate":
        cfg, table = replay_sends(cfg, table, run)
    gpu = get_gpu(cfg.gpu)
    cost = build_step_time_model(cfg, cfg.model_spec(), gpu, async_period=async_period)
    if delta_s:
        cost = PlusOverhead(cost, delta_s)
    s = simulate(cfg, workload=table, cost=cost).summary
    return {
        "throughput_tok_per_s": s["output_throughput_tok_per_s"],
        "ttft_mean_ms": 1e3 * s["ttft_mean_s"],
        "ttft_p99_ms": 1e3 * s["ttft_p99_s"],
        "tpot_mean_ms": 1e3 * s["tpot_mean_s"],
        "tpot_p99_ms": 1e3 * s["tpot_p99_s"],
        "peak_running": float(s["peak_running"]),
        "preemptions": float(s["num_preemptions"]),
        "tokens_per_step": float(s["mean_acceptance_len_tok"]),
        PREFIX_METRIC: float(s.get("prefix_cache_hits_tok", math.nan)),
        PREFIX_QUERY_METRIC: float(s.get("prefix_cache_queries_tok", math.nan)),
    }


def fit_delta_s(fit_run: RealRun, data_root: Path | None = None) -> float:
    """PLAN.md: delta = (TPOT_real - TPOT_capsim) * capsim's tokens per step, fit run only."""
    sim = simulate_run(fit_run, data_root=data_root)
    return (fit_run.metrics["tpot_mean_ms"] - sim["tpot_mean_ms"]) * 1e-3 * sim["tokens_per_step"]


def within(metric: str, real: float, pred: float) -> bool | None:
    """Issue 21's threshold for `metric` (None where the issue sets none)."""
    if metric not in THRESHOLDS or not (math.isfinite(real) and math.isfinite(pred)):
        return None
    rel, floor = THRESHOLDS[metric]
    return abs(pred - real) <= max(rel * abs(real), floor)


def startup_blocks(startups_csv: Path, server: dict[str, Any]) -> int | None:
    """num_gpu_blocks of the real start-up with the run's gmu, k, max_num_seqs,
    max_num_batched_tokens and prefix caching (0.26's default for hybrids: off)."""
    st = pd.read_csv(startups_csv)
    mns = server["max_num_seqs"]
    mnbt = server.get("max_num_batched_tokens") or 8192  # vLLM 0.26's default on the H200
    pc = bool(server.get("enable_prefix_caching"))
    hit = st[
        (st["gmu"] == server["gpu_memory_utilization"])
        & (st["num_speculative_tokens"] == server["num_speculative_tokens"])
        & (st["max_num_seqs"].isna() if mns is None else st["max_num_seqs"] == mns)
        & (st["max_num_batched_tokens"].fillna(8192) == mnbt)
        & (st["enable_prefix_caching"].fillna(0).astype(bool) == pc)
        & st["num_gpu_blocks"].notna()
    ]
    return int(hit["num_gpu_blocks"].iloc[0]) if len(hit) else None


def table(
    runs_root: Path,
    startups_csv: Path | None = None,
    data_root: Path | None = None,
    engine_overhead: str = ENGINE_OVERHEAD,
) -> tuple[pd.DataFrame, float]:
    """One row per (run, metric): real, capsim, capsim+delta, capsim main c4fa656 (its engine
    terms: max(kernels, host) + delta), capsim+engine (the async step period, PLAN.md
    2026-12-02 05:20 / 05:44), % errors, fit/predict per column, pass; plus two diagnostic
    columns: capsim+engine on the real start-up's block count, and the engine terms with async
    scheduling off (vLLM 0.26 runs it on; PLAN.md 2026-12-02 01:57). A run whose dataset's
    CSV in ``data_root`` (default: ``runs_root.parent / "data"``) has a ``segments`` column
    is simulated with those shared segments (``request_table``). ``engine_overhead``: the
    fit of the async column and the two diagnostic ones (a `capsim engine host-fit` file
    prices your machine); the main c4fa656 column keeps the registered fit."""
    from capsim.live.client_roundtrip import FIT_RUNS as ROUND_TRIP_FIT_RUNS
    from capsim.live.engine_fit import FIT_RUNS as MAIN_FIT_RUNS
    from capsim.live.engine_period_fit import FIT_RUNS as ENGINE_FIT_RUNS

    # the async column's fits: the step period's runs and, since session 14, the client
    # round trip's (PLAN.md 2026-12-04 18:49)
    engine_fit_runs = set(ENGINE_FIT_RUNS) | set(ROUND_TRIP_FIT_RUNS)

    runs = [load_run(d) for d in sorted(p for p in runs_root.iterdir() if p.is_dir())]
    by = {r.name: r for r in runs}
    fits = [by[n] for n in FIT_RUNS if n in by]
    data = data_root if data_root is not None else runs_root.parent / "data"
    delta = fit_delta_s(fits[0], data) if fits else 0.0
    rows = []
    for r in runs:
        shipped, plus = simulate_run(r, data_root=data), simulate_run(r, delta, data_root=data)
        eng = simulate_run(r, engine_overhead=engine_overhead, data_root=data)
        main = simulate_run(r, engine_overhead=ENGINE_OVERHEAD, async_period=False, data_root=data)
        blocks = startup_blocks(startups_csv, r.server) if startups_csv else None
        diag = simulate_run(r, 0.0, blocks, engine_overhead, data_root=data) if blocks else {}
        sync = simulate_run(
            r, engine_overhead=engine_overhead, async_scheduling=False, data_root=data
        )
        prefix = (PREFIX_METRIC, PREFIX_QUERY_METRIC)
        metrics = METRICS + (prefix if r.server.get("enable_prefix_caching") else ())
        for m in metrics:
            real, a, b, e = r.metrics[m], shipped[m], plus[m], eng[m]
            rows.append(
                {
                    "run": r.name,
                    "metric": m,
                    "role": "fit" if r.name in FIT_RUNS else "predict",
                    "role_engine": "fit" if r.name in engine_fit_runs else "predict",
                    "role_main": "fit" if r.name in MAIN_FIT_RUNS else "predict",
                    "real": real,
                    "capsim": a,
                    "capsim_delta": b,
                    "capsim_main": main[m],
                    "err_main_pct": _pct(main[m], real),
                    "pass_main": within(m, real, main[m]),
                    "capsim_engine": e,
                    "err_capsim_pct": _pct(a, real),
                    "err_delta_pct": _pct(b, real),
                    "err_engine_pct": _pct(e, real),
                    "pass_delta": within(m, real, b),
                    "pass_engine": within(m, real, e),
                    "capsim_engine_real_blocks": diag.get(m, math.nan),
                    "err_real_blocks_pct": _pct(diag.get(m, math.nan), real),
                    "capsim_engine_sync": sync[m],
                    "err_engine_sync_pct": _pct(sync[m], real),
                }
            )
    return pd.DataFrame(rows), delta


def _pct(pred: float, real: float) -> float:
    return 100.0 * (pred - real) / real if real else math.nan
