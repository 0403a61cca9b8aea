"""Run a sweep: validate, skip finished points, simulate the rest, write, consolidate.

The point function (default ``capsim.simulate.simulate``) is a parameter so the machinery
can be exercised with a cheap stand-in; it must be a picklable top-level function for the
process-pool and dask executors. Workers return plain data; only this process writes.
"""

from __future__ import annotations

import contextlib
import math
import os
import textwrap
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.config import SimConfig
from capsim.gpus import get_gpu
from capsim.models import get_model
from capsim.sweep.executors import Executor, SerialExecutor
from capsim.sweep.grid import Point, SweepSpec, expand
from capsim.sweep.matched import matched_table
from capsim.sweep.store import (
    SweepStore,
    SweepWriteError,
    atomic_write_json,
    atomic_write_parquet,
    now_utc,
)
from capsim.sweep.validate import PlanFn, default_plan_fn, validate_points

PointFn = Callable[[SimConfig], Any]


def default_point_fn() -> PointFn:
    from capsim.simulate import simulate

    return simulate


@dataclass(frozen=True, slots=True)
class Task:
    point: Point
    point_fn: PointFn
    keep_steps: bool = True


@dataclass(frozen=True, slots=True)
class Outcome:
    point_id: str
    row: dict[str, Any] | None
    steps: pd.DataFrame | None
    step_time_model: dict[str, Any] | None
    wall_s: float
    error: str | None = None


def _scalar(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def result_row(point: Point, result: Any, plan_fn: PlanFn | None = None) -> dict[str, Any]:
    """Point keys + the result's summary + derived columns used by matched/knee/report."""
    row: dict[str, Any] = point.keys()
    for k, v in result.summary.items():
        if k not in row:
            row[k] = _scalar(v)
    req = result.requests
    s = result.summary
    mean_prompt = (
        float(req["prompt_tok"].mean())
        if "prompt_tok" in req
        else s.get("mean_prompt_tok", math.nan)
    )
    row["mean_prompt_tok"] = mean_prompt
    row["mean_output_tok"] = (
        float(req["output_tok"].mean())
        if "output_tok" in req
        else s.get("mean_output_tok", math.nan)
    )
    usable = float(row.get("usable_blocks", math.nan))
    row["peak_kv_blocks"] = float(row.get("peak_kv_usage", math.nan)) * usable
    c = point.cfg
    model = c.engine.model_for(get_model(c.model))
    plan = (plan_fn or default_plan_fn())(model, get_gpu(c.gpu), c.engine, c.spec)
    row["bytes_per_block"] = int(plan.bytes_per_block)
    row["blocks_per_mean_request"] = (
        float(plan.blocks_per_request(math.ceil(mean_prompt)))
        if math.isfinite(mean_prompt)
        else math.nan
    )
    return row


def execute_point(task: Task) -> Outcome:
    """Simulate one point (in a worker); never raises, errors come back as text."""
    t0 = time.perf_counter()
    try:
        result = task.point_fn(task.point.cfg)
        row = result_row(task.point, result)
        steps = result.steps if task.keep_steps else None
        return Outcome(
            point_id=task.point.point_id,
            row=row,
            steps=steps,
            step_time_model=dict(result.step_time_model),
            wall_s=time.perf_counter() - t0,
        )
    except Exception:  # reported per point; the sweep goes on
        return Outcome(
            point_id=task.point.point_id,
            row=None,
            steps=None,
            step_time_model=None,
            wall_s=time.perf_counter() - t0,
            error=traceback.format_exc(limit=8),
        )


@dataclass(slots=True)
class SweepReport:
    out_dir: Path
    num_points: int
    num_computed: int
    num_reused: int
    wall_s: float
    failures: dict[str, str] = field(default_factory=dict)
    points: pd.DataFrame = field(default_factory=pd.DataFrame)
    matched: pd.DataFrame = field(default_factory=pd.DataFrame)
    point_wall_s: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def consolidate(store: SweepStore, points: list[Point]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rebuild points.parquet and matched.parquet from the finished point files."""
    df = store.read_rows(p.point_id for p in points)
    matched = matched_table(df)
    atomic_write_parquet(store.out_dir / "points.parquet", df)
    atomic_write_parquet(store.out_dir / "matched.parquet", matched)
    store.record_file("points.parquet")
    store.record_file("matched.parquet")
    return df, matched


def run_sweep(
    spec: SweepSpec,
    out_dir: Path | str,
    *,
    executor: Executor | None = None,
    point_fn: PointFn | None = None,
    keep_steps: bool = True,
    progress: bool = True,
    workloads: frozenset[str] | None = None,
    plan_fn: PlanFn | None = None,
    command: str = "",
    warn: Callable[[str], None] | None = None,
) -> SweepReport:
    """Simulate every missing point of ``spec`` into ``out_dir`` and consolidate.

    ``warn`` receives one line per stored point that cannot be reused (it is recomputed).
    """
    t0 = time.perf_counter()
    points = expand(spec)
    validate_points(spec, points, workloads=workloads, plan_fn=plan_fn)
    say = warn or (lambda msg: warnings.warn(msg, stacklevel=2))
    with SweepStore.open(out_dir, spec) as store:
        todo = []
        for p in points:
            why = store.reusable(p, keep_steps)
            if why is None:
                continue
            if why:
                say(f"{why}; recomputing this point")
            todo.append(p)
        return _run_locked(
            spec, store, points, todo, executor, point_fn, keep_steps, progress, command, t0
        )


def _record_outcome(store, out, by_id, failures: dict[str, str]) -> bool:  # type: ignore[no-untyped-def]
    """Write one point's outcome to the store; True if it was computed, else it failed."""
    if out.error is not None:
        failures[out.point_id] = out.error
        return False
    store.check_calibration(out.step_time_model or {})
    try:
        store.write_point(
            out.point_id,
            out.row or {},
            out.steps,
            out.wall_s,
            by_id.get(out.point_id),
        )
    except SweepWriteError:
        raise
    except ValueError as exc:  # an implausible result: this point failed
        failures[out.point_id] = str(exc)
        return False
    return True


def _close_run_entry(  # type: ignore[no-untyped-def]
    store, run_entry: dict[str, Any], points, num_done: int, num_failed: int
) -> None:
    """Record the run's end in the manifest and write it."""
    run_entry["finished_utc"] = now_utc()
    run_entry["num_computed"] = num_done
    run_entry["num_failed"] = num_failed
    store.manifest["num_points"] = len(points)
    store.manifest["complete"] = all(store.has(p.point_id) for p in points)
    try:
        store.write_manifest()
    except SweepWriteError:
        # the disk that refused a point may refuse the manifest too: the first error
        # is the one raised; the run stays 'running' on disk and the next run (taking
        # the lock) marks it 'killed'. A finished run must record itself, so it raises.
        if run_entry["status"] == "finished":
            raise


def _run_locked(  # type: ignore[no-untyped-def]
    spec, store, points, todo, executor, point_fn, keep_steps, progress, command, t0
) -> SweepReport:
    fn = point_fn or default_point_fn()
    ex = executor or SerialExecutor()
    run_entry: dict[str, Any] = {
        "started_utc": now_utc(),
        "pid": os.getpid(),
        "status": "running",
        "executor": ex.name,
        "command": command,
        "num_todo": len(todo),
    }
    store.manifest.setdefault("runs", []).append(run_entry)
    store.write_manifest()
    failures: dict[str, str] = {}
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc="capsim sweep", unit="pt", smoothing=0.1)
    num_done = 0
    by_id = {p.point_id: p for p in todo}
    try:
        tasks = (Task(p, fn, keep_steps) for p in todo)
        # closing(): on any error here the executor stops its workers at once, instead of
        # when the traceback (which keeps this frame and the generator alive) is freed.
        with contextlib.closing(ex.map_unordered(execute_point, tasks)) as outcomes:
            for out in outcomes:
                if _record_outcome(store, out, by_id, failures):
                    num_done += 1
                if bar is not None:
                    bar.update(1)
        run_entry["status"] = "finished"
    except BaseException as exc:
        run_entry["status"] = f"failed: {type(exc).__name__}"
        if isinstance(exc, SweepWriteError):
            run_entry["error"] = str(exc)
        raise
    finally:
        if bar is not None:
            bar.close()
        _close_run_entry(store, run_entry, points, num_done, len(failures))
    if failures:
        atomic_write_json(store.out_dir / "failures.json", failures)
    df, matched = consolidate(store, points)
    return SweepReport(
        out_dir=store.out_dir,
        num_points=len(points),
        num_computed=num_done,
        num_reused=len(points) - len(todo),
        wall_s=time.perf_counter() - t0,
        failures=failures,
        points=df,
        matched=matched,
        point_wall_s=store.read_wall_s(p.point_id for p in todo),
    )


SUMMARY_KEYS: tuple[str, ...] = (
    "model",
    "gpu",
    "tp",
    "gmu",
    "workload",
    "load_mode",
    "tree",
    "prefix_caching",
    "mode",
)
SUMMARY_RATIOS: dict[str, str] = {
    "throughput_ratio": "thru",
    "kv_reduction": "KV",
    "admitted_ratio": "admit",
    "tpot_ratio": "TPOT",
    "ttft_p99_ratio": "p99TTFT",
}
SUMMARY_LEGEND = (
    "geometric means over the row's loads, > 1 better for TreeWY: thru = output throughput "
    "TW/SA, KV = peak pool SA/TW, admit = peak running TW/SA, TPOT = mean TPOT SA/TW, "
    "p99TTFT = p99 TTFT SA/TW; p99@max = p99 TTFT SA/TW at the highest load"
)


def summary_table(matched: pd.DataFrame) -> pd.DataFrame:
    """One row per (deployment, workload, load mode, tree, caching, TreeWY mode): matched
    points, memory-bound points and the geometric-mean ratios (``SUMMARY_LEGEND``)."""
    from capsim.sweep.matched import geomean

    if matched.empty:
        return pd.DataFrame()
    keys = [c for c in SUMMARY_KEYS if c in matched.columns]
    out = []
    for key, g in matched.groupby(keys, sort=True, dropna=False):
        row = dict(zip(keys, key, strict=True))
        row["matched"] = len(g)
        row["mem-bound"] = int(g["memory_bound"].sum())
        for c, name in SUMMARY_RATIOS.items():
            row[name] = geomean(g[c])
        row["p99@max"] = geomean(g.loc[g["load"] == g["load"].max(), "ttft_p99_ratio"])
        out.append(row)
    return pd.DataFrame(out)


def format_summary(table: pd.DataFrame) -> str:
    """The summary as text: one block per deployment (model, GPU, TP, gmu), columns that
    are the same in every row named once above the blocks."""
    if table.empty:
        return "(no matched points)"
    dep = [c for c in ("model", "gpu", "tp", "gmu") if c in table.columns]
    same = [
        c
        for c in ("load_mode", "tree", "prefix_caching", "mode")
        if c in table.columns and table[c].nunique(dropna=False) == 1
    ]
    lines = textwrap.wrap(SUMMARY_LEGEND, 100)
    if same:
        lines.append("every row: " + ", ".join(f"{c}={table[c].iloc[0]}" for c in same))
    show = table.drop(columns=same).rename(columns={"prefix_caching": "caching"})
    if "load_mode" in show.columns:
        show["load_mode"] = show["load_mode"].map({"concurrency": "conc"}).fillna(show["load_mode"])
    for key, g in show.groupby(dep, sort=True):
        model, gpu, tp, gmu = key
        lines.append(f"\n{model} on {gpu} TP{tp}, gmu {gmu:g}:")
        with pd.option_context("display.width", 200, "display.float_format", "{:.3f}".format):
            lines.append(g.drop(columns=dep).to_string(index=False))
    return "\n".join(lines)
