"""The flags of ``capsim plan`` and ``capsim whatif``: entries of the one option registry
(``capsim.commands.options.OPTIONS`` merges them), keyed ``<module>.<command>.<dest>``."""

from __future__ import annotations

import click

from capsim.commands.opt import Opt, raw_opt
from capsim.commands.param_types import FiniteFloat, ListOf, TreeShapes
from capsim.commit_modes import COMMIT_MODES
from capsim.gpus import GPUS

_MS = FiniteFloat(0.0, None, min_open=True)  # a latency target in ms, > 0
_INT_OR_DEFAULT = click.STRING

PLAN_FLAGS: dict[str, Opt] = {
    "plan.plan_cmd.trace": raw_opt(
        "--trace", is_flag=True, help="take rate and burstiness from the workload's timestamps"
    ),
    "plan.plan_cmd.ttft_p50_ms": raw_opt(
        "--ttft-p50-ms", type=_MS, default=None, help="median TTFT target (ms)"
    ),
    "plan.plan_cmd.tpot_ms": raw_opt(
        "--tpot-ms",
        "--tpot-mean-ms",
        "tpot_ms",
        type=_MS,
        default=None,
        help="mean TPOT target (ms)",
    ),
    "plan.plan_cmd.tpot_p99_ms": raw_opt(
        "--tpot-p99-ms", type=_MS, default=None, help="p99 TPOT target (ms)"
    ),
    "plan.plan_cmd.e2el_p99_ms": raw_opt(
        "--e2el-p99-ms", type=_MS, default=None, help="p99 end-to-end latency target (ms)"
    ),
    "plan.plan_cmd.goodput": raw_opt(
        "--goodput",
        type=FiniteFloat(0.0, 1.0, min_open=True),
        default=None,
        help="least fraction of requests meeting their own TTFT and TPOT targets",
    ),
    "plan.plan_cmd.gpus": raw_opt(
        "--gpus",
        type=ListOf(click.Choice(sorted(GPUS), case_sensitive=False)),
        default="H100,H200,B200",
        show_default=True,
        help="GPU kinds to consider",
    ),
    "plan.plan_cmd.tps": raw_opt(
        "--tp",
        "tps",
        type=ListOf(click.IntRange(1, 64)),
        default="1,2,4,8",
        show_default=True,
        help="tensor-parallel sizes to try",
    ),
    "plan.plan_cmd.gmus": raw_opt(
        "--gmu",
        "gmus",
        type=ListOf(FiniteFloat(0.0, 1.0, min_open=True)),
        default="0.92",
        show_default=True,
        help="gpu_memory_utilization values",
    ),
    "plan.plan_cmd.max_num_seqs": raw_opt(
        "--max-num-seqs",
        type=ListOf(click.STRING),
        default=None,
        help="values to try, e.g. 128,256,default (default: vLLM's)",
    ),
    "plan.plan_cmd.max_num_batched_tokens": raw_opt(
        "--max-num-batched-tokens",
        type=ListOf(click.STRING),
        default=None,
        help="values to try (default: vLLM's)",
    ),
    "plan.plan_cmd.ks": raw_opt(
        "-k",
        "--num-speculative-tokens",
        "ks",
        type=ListOf(click.IntRange(0, 64)),
        default="0,1,2,3,4",
        show_default=True,
        help="MTP depths to try (0 = off)",
    ),
    "plan.plan_cmd.tree": raw_opt(
        "--tree", type=TreeShapes(), default="chain", show_default=True, help="draft shapes"
    ),
    "plan.plan_cmd.modes": raw_opt(
        "--modes",
        type=ListOf(click.Choice(COMMIT_MODES)),
        default=",".join(COMMIT_MODES),
        show_default=True,
        help="commit modes",
    ),
    "plan.plan_cmd.prefix_caching": raw_opt(
        "--prefix-caching",
        type=click.Choice(["off", "on", "both"]),
        default="off",
        show_default=True,
        help="enable_prefix_caching: off, on, or both",
    ),
    "plan.plan_cmd.kv_cache_dtype": raw_opt(
        "--kv-cache-dtype",
        type=ListOf(click.STRING),
        default="bfloat16",
        show_default=True,
        help="KV cache dtypes to try (FP8: memory plan only, see docs)",
    ),
    "plan.plan_cmd.max_replicas": raw_opt(
        "--max-replicas",
        type=click.IntRange(1, 100_000),
        default=64,
        show_default=True,
        help="most replicas a fleet may have",
    ),
    "plan.plan_cmd.step_time": raw_opt(
        "--step-time",
        type=click.Choice(["calibrated", "roofline"]),
        default="calibrated",
        show_default=True,
        help="step-time model (calibrated: measured tables)",
    ),
    "plan.plan_cmd.fallback": raw_opt(
        "--fallback",
        type=click.Choice(["roofline", "skip"]),
        default="roofline",
        show_default=True,
        help="where the calibrated model refuses a shape",
    ),
    "plan.plan_cmd.headroom": raw_opt(
        "--headroom",
        type=FiniteFloat(0.0, 10.0),
        default=0.2,
        show_default=True,
        help="meet the SLO at (1 + this) x the rate",
    ),
    "plan.plan_cmd.probe_requests": raw_opt(
        "--probe-requests",
        type=click.IntRange(20, 10**7),
        default=400,
        show_default=True,
        help="requests per capacity probe, at least",
    ),
    "plan.plan_cmd.probe_duration_s": raw_opt(
        "--probe-duration-s",
        type=_MS,
        default=30.0,
        show_default=True,
        help="seconds of arrivals per capacity probe",
    ),
    "plan.plan_cmd.rel_tol": raw_opt(
        "--rel-tol",
        type=FiniteFloat(0.0, 1.0, min_open=True, max_open=True),
        default=0.05,
        show_default=True,
        help="capacity grid step (relative)",
    ),
    "plan.plan_cmd.frontier_slack": raw_opt(
        "--frontier-slack",
        type=FiniteFloat(0.0, 100.0),
        default=1.0,
        show_default=True,
        help="search candidates whose cost floor is within (1+this) x the cheapest",
    ),
    "plan.plan_cmd.prune": raw_opt(
        "--prune/--no-prune", default=True, help="use the analytic bounds"
    ),
    "plan.plan_cmd.prices": raw_opt(
        "--prices",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help="CSV gpu,usd_per_gpu_hour overriding the shipped list prices",
    ),
    "plan.plan_cmd.day_profile": raw_opt(
        "--day",
        "day_profile",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help="hourly profile CSV (hour,rate_frac|rate_req_per_s); rate = the peak",
    ),
    "plan.plan_cmd.day_standin": raw_opt(
        "--day-standin", is_flag=True, help="plan a day on the shipped STAND-IN profile"
    ),
    "plan.plan_cmd.out": raw_opt(
        "--out",
        "-o",
        type=click.Path(file_okay=False),
        default="runs/plan",
        show_default=True,
        help="plan directory",
    ),
    "plan.plan_cmd.as_json": raw_opt(
        "--json", "as_json", is_flag=True, help="print the answer as JSON"
    ),
    "plan.plan_cmd.report": raw_opt("--report/--no-report", default=True, help="write plan.html"),
    "plan.plan_cmd.fleet_check": raw_opt(
        "--fleet-check",
        type=click.Choice(["none", "round_robin", "least_outstanding", "prefix_affinity"]),
        default="none",
        show_default=True,
        help="simulate the cheapest fleet jointly (N replicas + this router) at the full rate",
    ),
    "sweep.whatif_cmd.ks": raw_opt(
        "-k",
        "--num-speculative-tokens",
        "ks",
        type=ListOf(click.IntRange(0, 64)),
        default="3",
        show_default=True,
        help="MTP chain depths to try (0 = off), e.g. 3,4",
    ),
    "sweep.whatif_cmd.as_json": raw_opt(
        "--json", "as_json", is_flag=True, help="print every candidate's row as JSON"
    ),
}
