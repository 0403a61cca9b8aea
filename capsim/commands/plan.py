"""``capsim plan``: the cheapest fleet meeting latency SLOs (a thin layer over capsim.plan).

Parses flags into ``capsim.plan.inputs`` configs (bad input: one line naming the flag),
runs ``capsim.plan.search.run_plan`` on a sweep executor, writes the plan directory
(``candidates.parquet``, ``plan.json``, ``advice.csv``, ``plan.html``, ``day.csv``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from capsim.commands.options import FiniteFloat, options
from capsim.sweep.executors import make_executor

_MS = FiniteFloat(0.0, None, min_open=True)
_INT_OR_DEFAULT = click.STRING


def _ints_or_default(value: tuple[str, ...] | None, flag: str) -> tuple[int | None, ...]:
    if value is None:
        return (None,)
    out: list[int | None] = []
    for v in value:
        if v in ("default", "none", ""):
            out.append(None)
            continue
        try:
            n = int(v)
        except ValueError:
            raise click.BadParameter(f"{v!r} is not an int or 'default'", param_hint=flag) from None
        if n < 1:
            raise click.BadParameter(f"{n} must be >= 1", param_hint=flag)
        out.append(n)
    return tuple(out)


def plan_inputs(p: dict[str, Any]) -> Any:
    """Flags -> ``PlanInputs`` (config errors become one-line usage errors)."""
    from capsim.plan.inputs import PlanInputs, PlanSlo, SearchSettings, SearchSpace, Traffic

    ms = lambda k: None if p.get(k) is None else p[k] / 1e3  # noqa: E731
    trees = p["tree"] or (None,)
    pc = {"off": (False,), "on": (True,), "both": (False, True)}[p["prefix_caching"]]
    try:
        return PlanInputs(
            model=p["model"],
            traffic=Traffic(
                workload=p["workload"],
                rate_req_per_s=p["rate"],
                burstiness=p["burstiness"],
                trace=p["trace"],
            ),
            slo=PlanSlo(
                ttft_p50_s=ms("ttft_p50_ms"),
                ttft_p99_s=ms("ttft_p99_ms"),
                tpot_mean_s=ms("tpot_ms"),
                tpot_p99_s=ms("tpot_p99_ms"),
                e2el_p99_s=ms("e2el_p99_ms"),
                goodput_frac=p["goodput"],
            ),
            space=SearchSpace(
                gpus=p["gpus"],
                tps=p["tps"],
                gmus=p["gmus"],
                max_num_seqs=_ints_or_default(p["max_num_seqs"], "--max-num-seqs"),
                max_num_batched_tokens=_ints_or_default(
                    p["max_num_batched_tokens"], "--max-num-batched-tokens"
                ),
                ks=p["ks"],
                trees=trees,
                commit_modes=p["modes"],
                prefix_caching=pc,
                kv_cache_dtypes=p["kv_cache_dtype"],
                max_model_len=p["max_model_len"],
                max_replicas=p["max_replicas"],
                step_time=p["step_time"],
                fallback=p["fallback"],
            ),
            settings=SearchSettings(
                headroom_frac=p["headroom"],
                probe_min_requests=p["probe_requests"],
                probe_duration_s=p["probe_duration_s"],
                rel_tol=p["rel_tol"],
                frontier_slack=p["frontier_slack"],
                seed=p["seed"],
                prune=p["prune"],
            ),
            prices_path=p["prices"],
        )
    except ValueError as exc:
        raise click.UsageError(str(exc).splitlines()[0]) from None


@click.command("plan")
@options(
    "model",
    "dataset",
    "request_rate",
    "burstiness",
    burstiness={
        "default": None,
        "show_default": False,
        "help": "gamma shape of gaps (1 = Poisson; default 1, or the trace's with --trace)",
    },
)
@options("plan.plan_cmd.trace")
@options("plan.plan_cmd.ttft_p50_ms")
@options("ttft_p99_ms")
@options("plan.plan_cmd.tpot_ms")
@options("plan.plan_cmd.tpot_p99_ms")
@options("plan.plan_cmd.e2el_p99_ms")
@options("plan.plan_cmd.goodput")
@options("plan.plan_cmd.gpus")
@options("plan.plan_cmd.tps")
@options("plan.plan_cmd.gmus")
@options("plan.plan_cmd.max_num_seqs")
@options("plan.plan_cmd.max_num_batched_tokens")
@options("plan.plan_cmd.ks")
@options("plan.plan_cmd.tree")
@options("plan.plan_cmd.modes")
@options("plan.plan_cmd.prefix_caching")
@options("plan.plan_cmd.kv_cache_dtype")
@options("max_model_len")
@options("plan.plan_cmd.max_replicas")
@options("plan.plan_cmd.step_time")
@options("plan.plan_cmd.fallback")
@options("plan.plan_cmd.headroom")
@options("plan.plan_cmd.probe_requests")
@options("plan.plan_cmd.probe_duration_s")
@options("plan.plan_cmd.rel_tol")
@options("plan.plan_cmd.frontier_slack")
@options("plan.plan_cmd.prune")
@options("plan.plan_cmd.prices")
@options("plan.plan_cmd.day_profile")
@options("plan.plan_cmd.day_standin")
@options("executor", "scheduler")
@options("jobs", "seed")
@options("plan.plan_cmd.out")
@options("plan.plan_cmd.as_json")
@options("progress")
@options("plan.plan_cmd.report")
@options("plan.plan_cmd.fleet_check")
def plan_cmd(**p: Any) -> None:
    """Cheapest fleet (GPU, TP, replicas, speculation, commit mode) meeting every SLO."""
    from capsim.io.atomic import write_json_atomic
    from capsim.plan.output import answer_text, dumps, plan_answer, write_plan
    from capsim.plan.search import run_plan

    inputs = plan_inputs(p)
    try:
        ex = make_executor(p["executor"], jobs=p["jobs"], scheduler=p["scheduler"])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    bar = None
    if p["progress"]:
        from tqdm import tqdm

        bar = tqdm(desc="capsim plan", unit="cand", leave=False)
    try:
        run = run_plan(inputs, executor=ex, progress=(lambda n, _s: bar.update(n)) if bar else None)
    except ValueError as exc:
        raise click.UsageError(str(exc).splitlines()[0]) from None
    finally:
        if bar is not None:
            bar.close()
    out = Path(p["out"])
    paths = write_plan(run, out)
    ans = plan_answer(run)
    if p["day_profile"] or p["day_standin"]:
        ans["day"] = write_day(run, ans, out, p["day_profile"])
    if p["fleet_check"] != "none" and ans["cheapest"] is not None:
        ans["fleet_check"] = fleet_check(run, ans, p["fleet_check"])
        write_json_atomic(out / "fleet_check.json", ans["fleet_check"])
    if p["report"]:
        from capsim.reports.plan_report import build_plan_report

        paths["html"] = build_plan_report(out)
    if p["as_json"]:
        click.echo(
            dumps(ans | {"files": {k: str(v) for k, v in paths.items()}, "wall_s": run.wall_s})
        )
    else:
        click.echo(answer_text(ans))
        fc = ans.get("fleet_check")
        if fc:
            click.echo(
                f"fleet check ({fc['replicas']} replicas, {fc['router']}, "
                f"{fc['fleet_req_per_s']:g} req/s jointly): p99 TTFT "
                f"{fc['ttft_p99_s'] * 1e3:.0f} ms (one replica at the "
                f"operating point: {fc['predicted_op_ttft_p99_s'] * 1e3:.0f} ms), mean TPOT "
                f"{fc['tpot_mean_s'] * 1e3:.1f} ms; misses: {fc['misses'] or 'none'}"
            )
        click.echo(f"wall {run.wall_s:.1f} s; files in {out}")


def fleet_check(run: Any, ans: dict[str, Any], router: str) -> dict[str, Any]:
    """The cheapest fleet simulated jointly, as long as its steady run."""
    from capsim.plan.verify import verify_fleet

    best = ans["cheapest"]
    row = run.candidates.set_index("cand_id").loc[best["cand_id"]]
    cand = next(c for c in expand_for(run) if c.cand_id == best["cand_id"])
    st = run.inputs.settings
    rate = run.traffic.rate_req_per_s
    m = int(row.get("run_multiplier", 1) or 1)
    n = max(st.probe_min_requests * 2 * m, math.ceil(st.probe_duration_s * 2 * m * rate))
    out = verify_fleet(
        cand,
        int(best["replicas"]),
        workload=run.traffic.workload,
        rate_req_per_s=rate,
        burstiness=run.traffic.burstiness,
        slo=run.inputs.slo,
        num_requests=n,
        seed=st.seed,
        router=router,
        step_time=str(row["step_time_used"]),
    )
    out["predicted_op_ttft_p99_s"] = best["op_ttft_p99_s"]
    out["predicted_op_tpot_mean_s"] = best["op_tpot_mean_s"]
    return out


def expand_for(run: Any) -> list[Any]:
    from capsim.plan.space import expand_space

    return expand_space(run.inputs.model, run.inputs.space, run.traffic.max_model_len)


def write_day(run: Any, ans: dict[str, Any], out: Path, profile: str | None) -> dict[str, Any]:
    """Replicas per hour for the cheapest configuration (the plan's rate = the peak hour)."""
    from capsim.io.atomic import write_bytes_atomic, write_json_atomic
    from capsim.plan.day import day_plan
    from capsim.traces.diurnal import STANDIN, load_profile

    best = ans["cheapest"]
    if best is None:
        return {"error": "no configuration met the SLO"}
    rates = load_profile(profile, peak_req_per_s=run.traffic.rate_req_per_s)
    table, summ = day_plan(
        rates,
        best["capacity_req_per_s"],
        run.inputs.settings.headroom_frac,
        int(best["tp"]),
        run.prices[best["gpu"]].usd_per_gpu_hour,
    )
    summ["label"] = f"{best['cand_id']}, profile {Path(profile or STANDIN).name}"
    write_bytes_atomic(out / "day.csv", table.to_csv(index=False).encode())
    write_json_atomic(out / "day.json", summ)
    return json.loads(json.dumps(summ, default=str))


plan = plan_cmd
