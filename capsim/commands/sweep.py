"""Click commands ``sweep``, ``knee``, ``report`` and ``whatif`` (the lead adds them to ``capsim``).

Commands only parse, validate, call the library and print; every bad input fails before
any simulation runs, with a message naming the flag and value.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click
import pandas as pd

from capsim.commands.options import ListOf, collect, options
from capsim.commit_modes import COMMIT_MODES
from capsim.sweep.executors import make_executor
from capsim.sweep.grid import PUBLISHED_GRID, SweepSpec, restrict, with_pool
from capsim.sweep.grid_toml import load_spec
from capsim.vllm_rules import resolve_gmu, rules_for

MODES = ListOf(click.Choice(COMMIT_MODES))

POOL_OPTIONS = (
    "vllm_version",
    "kv_cache_memory",
    "num_gpu_blocks_override",
    "limit_mm_per_prompt",
    "enforce_eager",
    "quantization",
)
"""vLLM's pool flags (``capsim.commands.options.OPTIONS``), on ``sweep`` and ``whatif``."""

# On ``sweep`` a flag left out keeps the grid TOML's value: no defaults.
_GRID_OVERRIDE = {name: {"default": None, "show_default": False} for name in POOL_OPTIONS}


def pool_pins(params: dict[str, Any]) -> dict[str, Any]:
    """The pool flags given (not None), as Deployment/EngineConfig field -> value."""
    return collect("engine", params, given_only=True)


def _value_error(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


def skipped_gmu(spec: SweepSpec, gmu: tuple[float, ...] | None) -> list[str]:
    """One line per deployment that lacks a requested gmu value (it is not run there)."""
    if gmu is None:
        return []
    notes = []
    for block in spec.blocks:
        for dep in block.deployments:
            missing = [g for g in gmu if all(abs(g - x) > 1e-9 for x in dep.gmu)]
            if missing:
                notes.append(
                    f"note: block {block.name!r}: {dep.model} on {dep.gpu} tp={dep.tp} has no "
                    f"gmu {', '.join(f'{g:g}' for g in missing)} in the grid (its list: "
                    f"{', '.join(f'{g:g}' for g in dep.gmu)}); not run there"
                )
    return notes


@click.command("sweep")
@options("sweep.grid")
@options("gmu_list")
@options("sweep.model")
@options("sweep.workload")
@options("sweep.tree_block")
@options("sweep.modes")
@options(
    "num_prompts",
    "seed",
    "step_time",
    num_prompts={"default": None, "help": "requests per point (default: the grid's rule)"},
    seed={"default": None, "help": "root seed (default: the grid's)"},
    step_time={"default": None, "help": "step-time model (default: the grid's)"},
)
@options(
    "prefix_caching",
    prefix_caching={
        "default": None,
        "show_default": False,
        "help": "run every block with prefix caching on/off (default: the grid's prefix_caching)",
    },
)
@options("sweep.out")
@options("executor", "scheduler")
@options("jobs")
@options("sweep.steps")
@options("progress")
@options(*POOL_OPTIONS, **_GRID_OVERRIDE)  # type: ignore[arg-type]
def sweep_cmd(
    grid_path: Path | None,
    gmu: tuple[float, ...] | None,
    models: tuple[str, ...],
    workloads: tuple[str, ...],
    trees: bool,
    modes: tuple[str, ...] | None,
    num_requests: int | None,
    seed: int | None,
    step_time: str | None,
    enable_prefix_caching: bool | None,
    out_dir: Path,
    executor: str,
    scheduler: str | None,
    jobs: int | None,
    steps: bool,
    progress: bool,
    **pool: Any,
) -> None:
    """Simulate the experiment grid (store-all vs TreeWY at matched points); resumable."""
    from capsim.sweep.runner import format_summary, run_sweep, summary_table

    try:
        full = load_spec(grid_path or PUBLISHED_GRID)
        spec = restrict(
            full,
            gmu=gmu,
            models=models or None,
            workloads=workloads or None,
            trees=trees,
            commit_modes=modes,
            num_requests=num_requests,
            seed=seed,
            step_time=step_time,
            prefix_caching=enable_prefix_caching,
        )
        spec = with_pool(spec, pool_pins(pool))
        ex = make_executor(executor, jobs=jobs, scheduler=scheduler)
    except ValueError as exc:
        raise _value_error(exc) from None
    for note in skipped_gmu(spec, gmu):
        click.echo(note, err=True)
    ctx = click.get_current_context()
    command = f"{ctx.command_path} " + json.dumps(
        {k: str(v) if isinstance(v, Path) else v for k, v in ctx.params.items()}, sort_keys=True
    )
    try:
        report = run_sweep(
            spec,
            out_dir,
            executor=ex,
            keep_steps=steps,
            progress=progress,
            command=command,
            warn=lambda msg: click.echo(f"warning: {msg}", err=True),
        )
    except ValueError as exc:
        raise _value_error(exc) from None
    click.echo(format_summary(summary_table(report.matched)))
    per_pt = report.point_wall_s
    timing = (
        f"{sum(per_pt) / len(per_pt):.3f} s per simulated point on average"
        if per_pt
        else "nothing left to simulate"
    )
    click.echo(
        f"\n{report.num_points} points ({report.num_computed} simulated, {report.num_reused} "
        f"reused) in {report.wall_s:.1f} s wall; {timing}; {len(report.failures)} failed "
        f"-> {report.out_dir}"
    )
    if report.failures:
        pid, err = next(iter(report.failures.items()))
        last = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or [""]
        raise click.ClickException(
            f"{len(report.failures)} point(s) failed (tracebacks in "
            f"{report.out_dir}/failures.json); first {pid}: {last[0].strip()}"
        )


def _read_results(result_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    pts, mat = result_dir / "points.parquet", result_dir / "matched.parquet"
    if not pts.exists() or not mat.exists():
        raise click.ClickException(f"{result_dir} has no points.parquet/matched.parquet")
    return pd.read_parquet(pts), pd.read_parquet(mat)


def memory_bound_grid(matched: pd.DataFrame) -> pd.DataFrame:
    """Every matched point's class as a grid: rows (deployment, workload, tree, caching,
    mode), columns the loads."""
    if matched.empty:
        return pd.DataFrame()
    m = matched.copy()
    m["class"] = m["memory_bound"].map({True: "MEM", False: "ok"})
    index = ["model", "gpu", "tp", "gmu", "workload", "tree", "prefix_caching", "mode"]
    return m.pivot_table(
        index=[c for c in index if c in m.columns],
        columns="load",
        values="class",
        aggfunc="first",
    ).fillna("")


@click.command("knee")
@click.argument("result_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@options("knee.csv")
def knee_cmd(result_dir: Path, csv_out: bool) -> None:
    """Knee per deployment, workload and setting, and the memory-bound class of every
    matched point."""
    from capsim.sweep.knee import format_knee, knee_table

    points, matched = _read_results(result_dir)
    table = knee_table(points)
    click.echo(
        "Knee: smallest swept load at which peak admitted < offered concurrency because of the"
        " pool (memory-bound)"
    )
    click.echo("(rate workloads: first rate at which store-all is memory-bound); cap = memory plan")
    click.echo(format_knee(table))
    grid = memory_bound_grid(matched)
    click.echo("\nMemory-bound classification (MEM = store-all had no pool headroom):")
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        click.echo(grid.to_string() if not grid.empty else "(no matched points)")
    if not matched.empty:
        n_mem = int(matched["memory_bound"].sum())
        click.echo(f"\n{n_mem} of {len(matched)} matched points are memory-bound")
    if csv_out:
        table.to_csv(result_dir / "knee.csv", index=False)
        grid.to_csv(result_dir / "memory_bound.csv")


@click.command("report")
@click.argument("result_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@options("report.out")
def report_cmd(result_dir: Path, out_dir: Path | None) -> None:
    """Figures 1-5, Table 1 and the knee table as PNGs plus one self-contained, responsive
    HTML page; every point of the grid is drawn in some figure."""
    from capsim.reports.build import build_report

    try:
        html = build_report(result_dir, out_dir)
    except ValueError as exc:
        raise _value_error(exc) from None
    click.echo(f"wrote {html}")


@click.command("whatif")
@options("model", "gpu", "tp", "dataset")
@options("ttft_p99_ms")
@options("whatif.tpot_ms")
@options("whatif.tpot_stat")
@options(
    "gmu_list",
    gmu_list={"help": "gmu candidates, e.g. 0.6,0.75,0.9 (default: --vllm-version's gmu)"},
)
@options("whatif.tree")
@options("whatif.modes")
@options("whatif.load_mode")
@options("whatif.max_load")
@options(
    "num_prompts",
    "seed",
    "jobs",
    num_prompts={"default": 200, "help": "requests per short simulation (at least)"},
)
@options("progress")
@options(*POOL_OPTIONS, "prefix_caching")
@options("sweep.whatif_cmd.ks")
@options("step_time", "max_model_len", "max_num_seqs")
@options("sweep.whatif_cmd.as_json")
def whatif_cmd(
    model: str,
    gpu: str,
    tp: int,
    workload: str,
    ttft_p99_ms: float | None,
    tpot_ms: float | None,
    tpot_stat: str,
    gmu: tuple[float, ...] | None,
    tree: tuple[tuple[int, ...] | None, ...],
    modes: tuple[str, ...],
    load_mode: str,
    max_load: float,
    num_requests: int,
    seed: int,
    jobs: int | None,
    progress: bool,
    enable_prefix_caching: bool | None,
    ks: tuple[int, ...],
    step_time: str,
    max_model_len: int | None,
    max_num_seqs: int | None,
    as_json: bool,
    **pool: Any,
) -> None:
    """Largest load meeting an SLO per commit mode, and the gmu/tree maximising goodput.

    The plan's special case: one configuration, one replica. Rate mode runs the plan's
    capacity search (capsim.plan.whatif); both modes keep an answer only when it holds in
    a steady-state run (doubling the run moves p99 TTFT by < 10%; see docs/planning.md)."""
    t0 = time.perf_counter()
    slo = _whatif_slo(ttft_p99_ms, tpot_ms, tpot_stat)
    pins = pool_pins(pool)
    if gmu is None:
        gmu = (resolve_gmu(None, pins["vllm_version"]),)
    if enable_prefix_caching is None:  # the release's default for hybrids, as EngineConfig
        enable_prefix_caching = rules_for(pins["vllm_version"]).hybrid_prefix_caching_default
    if max_model_len is None and max_num_seqs is None and ks == (3,) and step_time == "calibrated":
        _validate_whatif(
            model,
            gpu,
            tp,
            gmu,
            pins,
            workload,
            load_mode,
            tree,
            modes,
            enable_prefix_caching,
            num_requests,
            seed,
        )
    fixed = {
        "model": model,
        "gpu": gpu,
        "tp": tp,
        "workload": workload,
        "load_mode": load_mode,
        "num_requests": num_requests,
        "seed": seed,
        "max_load": max_load,
        "pool": tuple(sorted(pins.items())),
        "enable_prefix_caching": enable_prefix_caching,
        "step_time": step_time,
        "max_model_len": max_model_len,
        "max_num_seqs": max_num_seqs,
    }
    candidates = _whatif_candidates(fixed, gmu, tree, ks, modes)
    _validate_candidates(candidates)
    allres, best = _run_whatif(candidates, slo, jobs, progress, load_mode)
    if as_json:
        click.echo(allres.to_json(orient="records", indent=1))
        return
    _print_whatif(allres, best, load_mode, num_requests, time.perf_counter() - t0)


def _print_whatif(allres: Any, best: Any, load_mode: str, num_requests: int, wall_s: float) -> None:
    """Every candidate's row, the best per commit mode, and the simulation count."""
    unit = "concurrent requests" if load_mode == "concurrency" else "req/s"
    click.echo(f"All candidates (max_load in {unit}; goodput = output tok/s at max_load):")
    click.echo(format_whatif(allres).to_string(index=False))
    click.echo("\nBest per commit mode:")
    cols = ["commit", "gmu", "tree", "max_load", "goodput_tok_per_s", "at_search_limit"]
    click.echo(format_whatif(best[cols]).to_string(index=False))
    click.echo(
        f"\n{int(allres['num_sims'].sum())} short simulations (>= {num_requests} requests each) "
        f"in {wall_s:.1f} s"
    )


def _whatif_slo(ttft_p99_ms: float | None, tpot_ms: float | None, tpot_stat: str) -> Any:
    from capsim.sweep.whatif import Slo

    try:
        return Slo(
            ttft_p99_s=None if ttft_p99_ms is None else ttft_p99_ms / 1e3,
            tpot_s=None if tpot_ms is None else tpot_ms / 1e3,
            tpot_stat=tpot_stat,  # type: ignore[arg-type]
        )
    except ValueError:
        raise click.UsageError("give --ttft-p99-ms, --tpot-ms or both") from None


def _whatif_candidates(
    fixed: dict[str, Any],
    gmu: tuple[float, ...],
    tree: tuple[tuple[int, ...] | None, ...],
    ks: tuple[int, ...],
    modes: tuple[str, ...],
) -> list[Any]:
    """gmu x tree x k x commit mode (k = 0 has no commit mode: one candidate)."""
    from capsim.sweep.whatif import Candidate

    return [
        Candidate(gmu=g, tree=t, commit=m, num_spec_tok=k, **fixed)
        for g in dict.fromkeys(gmu)
        for t in dict.fromkeys(tree)
        for k in dict.fromkeys(ks)
        for m in (dict.fromkeys(modes) if k > 0 or t is not None else (modes[0],))
    ]


def _validate_candidates(candidates: list[Any]) -> None:
    """Every candidate's memory plan and step-time model build (one-line errors)."""
    from capsim.cost.factory import build_step_time_model
    from capsim.gpus import get_gpu
    from capsim.memory.memory_plan import plan_memory
    from capsim.memory.term_lookup import measured_term

    for c in candidates:
        try:
            cfg = c.config(1.0)
            model, gpu = cfg.model_spec(), get_gpu(cfg.gpu)
            plan_memory(model, gpu, cfg.engine, cfg.spec, lookup=measured_term)
            build_step_time_model(cfg, model, gpu)
        except ValueError as exc:
            raise click.UsageError(str(exc).splitlines()[0]) from None


def _run_whatif(
    candidates: list[Any], slo: Any, jobs: int | None, progress: bool, load_mode: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Search every candidate (a process pool when more than one worker), with a bar.
    Rate mode: the plan's capacity search (``capsim.plan.whatif``)."""
    from capsim.sweep.executors import LocalExecutor
    from capsim.sweep.whatif import whatif

    if load_mode == "rate":
        from capsim.plan.whatif import whatif_rate as whatif  # type: ignore[assignment]

    workers = min(jobs or os.cpu_count() or 1, len(candidates))
    ex = LocalExecutor(workers) if workers > 1 else None
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(candidates), desc="capsim whatif", unit="candidate", leave=False)
    try:
        return whatif(candidates, slo, executor=ex, on_done=bar.update if bar else None)
    finally:
        if bar is not None:
            bar.close()


def _validate_whatif(
    model: str,
    gpu: str,
    tp: int,
    gmu: tuple[float, ...],
    pins: dict[str, Any],
    workload: str,
    load_mode: str,
    tree: tuple[tuple[int, ...] | None, ...],
    modes: tuple[str, ...],
    enable_prefix_caching: bool,
    num_requests: int,
    seed: int,
) -> None:
    """Validate everything (names, memory plans, pricing) through the sweep's fail-fast path."""
    from capsim.sweep.grid import Block, Deployment, SweepSpec, WorkloadLoads, expand
    from capsim.sweep.validate import validate_points

    spec = SweepSpec(
        blocks=(
            Block(
                name="whatif",
                deployments=(Deployment(model=model, gpu=gpu, tp=tp, gmu=gmu, **pins),),
                workloads=(WorkloadLoads(name=workload, mode=load_mode, loads=(1.0,)),),  # type: ignore[arg-type]
                trees=tree,
                prefix_caching=(enable_prefix_caching,),
            ),
        ),
        commit_modes=tuple(dict.fromkeys(modes)),
        num_requests=num_requests,
        seed=seed,
    )
    validate_points(spec, expand(spec))


WHATIF_FORMATS: dict[str, str] = {
    "gmu": "{:.2f}",
    "max_load": "{:.1f}",
    "goodput_tok_per_s": "{:.0f}",
    "ttft_p99_s": "{:.4f}",
    "tpot_mean_s": "{:.4f}",
    "peak_running": "{:.0f}",
    "analytical_capacity_req": "{:.0f}",
}
"""One fixed-point format per column (no '4813' next to '1.472e+04')."""


def format_whatif(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for col, fmt in WHATIF_FORMATS.items():
        if col in out:
            out[col] = [fmt.format(v) if pd.notna(v) else "n/a" for v in out[col]]
    return out


# The names capsim.commands.main looks up when it attaches these commands to the ``capsim`` group.
sweep = sweep_cmd
knee = knee_cmd
report = report_cmd
whatif = whatif_cmd
