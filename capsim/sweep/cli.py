"""Click commands ``sweep``, ``knee``, ``report`` and ``whatif`` (the lead adds them to ``capsim``).

Commands only parse, validate, call the library and print; every bad input fails before
any simulation runs, with a message naming the flag and value.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import click
import pandas as pd

from capsim.memory_cli import pool_override_options, pool_overrides
from capsim.sweep.executors import EXECUTORS, make_executor
from capsim.sweep.grid import PUBLISHED_GRID, load_spec, restrict, with_pool


def _floats(text: str | None, flag: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers") from None
    if not values:
        raise click.BadParameter(f"{flag} is empty")
    return values


def _trees(text: str | None) -> tuple[tuple[int, ...] | None, ...]:
    """'chain;2x2x1;3x3x3' -> (None, (2,2,1), (3,3,3))."""
    if not text:
        return (None,)
    out: list[tuple[int, ...] | None] = []
    for part in text.replace(";", ",").split(","):
        part = part.strip().lower()
        if part in ("", "chain"):
            out.append(None)
            continue
        try:
            out.append(tuple(int(w) for w in part.split("x")))
        except ValueError:
            raise click.BadParameter(
                f"tree {part!r}: write widths as e.g. 2x2x1 (or 'chain')", param_hint="--tree"
            ) from None
    return tuple(out)


def _value_error(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@click.command("sweep")
@click.option(
    "--grid",
    "grid_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"grid TOML (default: the published grid, {PUBLISHED_GRID.name})",
)
@click.option("--gmu", default=None, help="keep these gmu values of each deployment, e.g. 0.6,0.9")
@click.option("--model", "models", multiple=True, help="keep only this model (repeatable)")
@click.option("--workload", "workloads", multiple=True, help="keep only this workload")
@click.option("--trees/--no-trees", default=True, help="include the tree-shape block")
@click.option("--modes", default=None, help="commit modes, e.g. storeall,reconstruct,deferred")
@click.option("--num-requests", type=int, default=None, help="requests per point (grid default)")
@click.option("--seed", type=int, default=None, help="root seed (grid default)")
@click.option("--step-time", default=None, help="step-time model: roofline | calibrated")
@click.option(
    "--enable-prefix-caching/--no-enable-prefix-caching",
    "prefix_caching",
    default=None,
    help="run every block with prefix caching on/off (default: the grid's prefix_caching)",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/sweep"),
    show_default=True,
    help="results directory; rerunning into it resumes",
)
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True)
@click.option("--scheduler", default=None, help="dask scheduler address (with --executor dask)")
@click.option("--jobs", type=int, default=None, help="local worker processes (default: cores)")
@click.option("--steps/--no-steps", default=True, help="keep per-step time series in steps/")
@click.option("--progress/--no-progress", default=True, help="show a progress bar")
@pool_override_options
def sweep_cmd(
    grid_path: Path | None,
    gmu: str | None,
    models: tuple[str, ...],
    workloads: tuple[str, ...],
    trees: bool,
    modes: str | None,
    num_requests: int | None,
    seed: int | None,
    step_time: str | None,
    prefix_caching: bool | None,
    out_dir: Path,
    executor: str,
    scheduler: str | None,
    jobs: int | None,
    steps: bool,
    progress: bool,
    **pool: Any,
) -> None:
    """Simulate the experiment grid (store-all vs TreeWY at matched points); resumable."""
    from capsim.sweep.runner import run_sweep, summary_table

    try:
        spec = load_spec(grid_path or PUBLISHED_GRID)
        spec = restrict(
            spec,
            gmu=_floats(gmu, "--gmu"),
            models=models or None,
            workloads=workloads or None,
            trees=trees,
            commit_modes=tuple(m.strip() for m in modes.split(",")) if modes else None,
            num_requests=num_requests,
            seed=seed,
            step_time=step_time,
            prefix_caching=prefix_caching,
        )
        spec = with_pool(spec, pool_overrides(pool))
        ex = make_executor(executor, jobs=jobs, scheduler=scheduler)
    except ValueError as exc:
        raise _value_error(exc) from None
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
        )
    except ValueError as exc:
        raise _value_error(exc) from None
    table = summary_table(report.matched)
    with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
        click.echo(table.to_string(index=False) if not table.empty else "(no matched points)")
    per_pt = report.point_wall_s
    mean_pt = sum(per_pt) / len(per_pt) if per_pt else math.nan
    click.echo(
        f"\n{report.num_points} points ({report.num_computed} simulated, {report.num_reused} "
        f"reused) in {report.wall_s:.1f} s wall; {mean_pt:.3f} s per simulated point on "
        f"average; {len(report.failures)} failed -> {report.out_dir}"
    )
    if report.failures:
        first = next(iter(report.failures.items()))
        raise click.ClickException(
            f"{len(report.failures)} point(s) failed (see failures.json); first "
            f"{first[0]}:\n{first[1]}"
        )


def _read_results(result_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    pts, mat = result_dir / "points.parquet", result_dir / "matched.parquet"
    if not pts.exists() or not mat.exists():
        raise click.ClickException(f"{result_dir} has no points.parquet/matched.parquet")
    return pd.read_parquet(pts), pd.read_parquet(mat)


def memory_bound_grid(matched: pd.DataFrame) -> pd.DataFrame:
    """Every matched point's class as a grid: rows (model, gmu, workload, tree), cols load."""
    if matched.empty:
        return pd.DataFrame()
    m = matched.copy()
    m["class"] = m["memory_bound"].map({True: "MEM", False: "ok"})
    return m.pivot_table(
        index=["model", "gmu", "workload", "tree", "mode"],
        columns="load",
        values="class",
        aggfunc="first",
    ).fillna("")


@click.command("knee")
@click.argument("result_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--csv", "csv_out", is_flag=True, help="also write knee.csv and memory_bound.csv")
def knee_cmd(result_dir: Path, csv_out: bool) -> None:
    """Knee per (model, gpu, gmu, workload) and the memory-bound class of every matched point."""
    from capsim.sweep.knee import format_knee, knee_table

    points, matched = _read_results(result_dir)
    table = knee_table(points)
    click.echo("Knee: smallest swept load at which peak admitted < offered concurrency")
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
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="where to write PNGs and report.html (default: RESULT_DIR/report)",
)
def report_cmd(result_dir: Path, out_dir: Path | None) -> None:
    """Figures 1-3, Table 1 and the knee table as PNGs plus one self-contained HTML page."""
    from capsim.reports.build import build_report

    try:
        html = build_report(result_dir, out_dir)
    except ValueError as exc:
        raise _value_error(exc) from None
    click.echo(f"wrote {html}")


@click.command("whatif")
@click.option("--model", required=True, help="model preset")
@click.option("--gpu", default="B200", show_default=True)
@click.option("--tp", type=int, default=1, show_default=True)
@click.option("--workload", required=True)
@click.option("--ttft-p99-ms", type=float, default=None, help="p99 TTFT target (ms)")
@click.option("--tpot-ms", type=float, default=None, help="TPOT target (ms)")
@click.option("--tpot-stat", type=click.Choice(["mean", "p99"]), default="mean")
@click.option("--gmu", default="0.9", show_default=True, help="gmu candidates, e.g. 0.6,0.75,0.9")
@click.option("--tree", default="chain", show_default=True, help="shapes, e.g. chain,2x2x1")
@click.option("--modes", default="storeall,reconstruct", show_default=True)
@click.option("--load-mode", type=click.Choice(["concurrency", "rate"]), default="concurrency")
@click.option("--max-load", type=float, default=1024.0, show_default=True)
@click.option("--num-requests", type=int, default=200, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--jobs", type=int, default=None, help="parallel searches (default: cores)")
@pool_override_options
@click.option(
    "--enable-prefix-caching/--no-enable-prefix-caching",
    "prefix_caching",
    default=False,
    show_default=True,
    help="vLLM prefix caching (GDN 'align' mode)",
)
def whatif_cmd(
    model: str,
    gpu: str,
    tp: int,
    workload: str,
    ttft_p99_ms: float | None,
    tpot_ms: float | None,
    tpot_stat: str,
    gmu: str,
    tree: str,
    modes: str,
    load_mode: str,
    max_load: float,
    num_requests: int,
    seed: int,
    jobs: int | None,
    prefix_caching: bool,
    **pool: Any,
) -> None:
    """Largest load meeting an SLO per commit mode, and the gmu/tree maximising goodput."""
    from capsim.sweep.executors import LocalExecutor
    from capsim.sweep.grid import Block, Deployment, SweepSpec, WorkloadLoads, expand
    from capsim.sweep.validate import validate_points
    from capsim.sweep.whatif import Candidate, Slo, whatif

    t0 = time.perf_counter()
    try:
        slo = Slo(
            ttft_p99_s=None if ttft_p99_ms is None else ttft_p99_ms / 1e3,
            tpot_s=None if tpot_ms is None else tpot_ms / 1e3,
            tpot_stat=tpot_stat,  # type: ignore[arg-type]
        )
        gmus = _floats(gmu, "--gmu") or ()
        pins = pool_overrides(pool)
        shapes = _trees(tree)
        mode_list = tuple(m.strip() for m in modes.split(",") if m.strip())
        # Validate everything (names, memory plans) through the sweep's fail-fast path.
        spec = SweepSpec(
            blocks=(
                Block(
                    name="whatif",
                    deployments=(Deployment(model=model, gpu=gpu, tp=tp, gmu=gmus, **pins),),
                    workloads=(WorkloadLoads(name=workload, mode=load_mode, loads=(1.0,)),),  # type: ignore[arg-type]
                    trees=shapes,
                    prefix_caching=(prefix_caching,),
                ),
            ),
            commit_modes=mode_list,
            num_requests=num_requests,
            seed=seed,
        )
        validate_points(spec, expand(spec))
        candidates = [
            Candidate(
                model=model,
                gpu=gpu,
                tp=tp,
                gmu=g,
                tree=t,
                commit=m,
                workload=workload,
                load_mode=load_mode,  # type: ignore[arg-type]
                num_requests=num_requests,
                seed=seed,
                max_load=max_load,
                pool=tuple(sorted(pins.items())),
                enable_prefix_caching=prefix_caching,
            )
            for g in gmus
            for t in shapes
            for m in mode_list
        ]
        ex = LocalExecutor(jobs) if len(candidates) > 1 else None
        allres, best = whatif(candidates, slo, executor=ex)
    except ValueError as exc:
        raise _value_error(exc) from None
    unit = "concurrent requests" if load_mode == "concurrency" else "req/s"
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        click.echo(f"All candidates (max_load in {unit}; goodput = output tok/s at max_load):")
        click.echo(allres.to_string(index=False))
        click.echo("\nBest per commit mode:")
        click.echo(
            best[
                ["commit", "gmu", "tree", "max_load", "goodput_tok_per_s", "at_search_limit"]
            ].to_string(index=False)
        )
    click.echo(
        f"\n{int(allres['num_sims'].sum())} short simulations (>= {num_requests} requests each) "
        f"in {time.perf_counter() - t0:.1f} s"
    )


# The names capsim.cli looks up when it attaches these commands to the ``capsim`` group.
sweep = sweep_cmd
knee = knee_cmd
report = report_cmd
whatif = whatif_cmd
