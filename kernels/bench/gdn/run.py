"""Measure every GDN verify kernel on one GPU in one run; check them against float64 first.

    python -m capsim_kernels.bench.gdn.run --out DIR [--commit SHA] [--quick]
    python -m capsim_kernels.bench.gdn.run --render DIR/gdn_verify.csv   # markdown table
    python -m capsim_kernels.bench.gdn.run --out DIR --shapes qwen3.5-35b-a3b-tp1 --window
    python -m capsim_kernels.bench.gdn.run --out DIR --sweep    # launch configs first

``--shapes`` measures (and checks) a subset of the model shapes; ``--window`` first times
the per-head window kernel (``treewy_prep_kernel``) alone into DIR/window.csv (its own
schema, WINDOW_COLUMNS; the calibration never reads it), with the round-2 serial solve
and other warp counts at W > 32 side by side. ``--sweep`` first times the candidate
launch configurations (SWEEP_CELLS, sweep_parts) side by side into DIR/sweep.csv, applies
the fastest per part, re-checks against float64, then runs the grid; ``--two-launch``
turns the single-launch kernel off.

Writes DIR/gdn_verify.csv (one row per measured cell, the calibration schema below) and
DIR/meta.json (GPU, driver, versions, commit, date, command, copy bandwidth, correctness
checks, notes). Times are CUDA-graph replays of one GDN layer call, L2 flushed before each
replay (triton.testing.do_bench), random inputs, p20/p50/p80 in microseconds. The memory
floor is bytes_moved (shapes.py) over the device-to-device copy bandwidth measured in the
same run (bytes read plus written).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from ..timing import atomic_write, measure_copy_gbps, time_graph_us, write_csv
from .checks import CHECK_TOL, COLUMNS, Cell, checked_kernels, kernel_fn, run_checks
from .render import render_markdown, summarize_targets
from .shapes import (
    BATCHES,
    CHAIN_ONLY,
    KERNELS,
    MODEL_SHAPES,
    STATE_DTYPES,
    WINDOWS,
    bytes_moved,
)
from .sweep import pick_window_config, run_sweep, run_window

__all__ = ["COLUMNS", "main", "render_markdown", "run_grid", "summarize_targets", "write_csv"]


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable ({e.__class__.__name__})"


def collect_meta(commit: str) -> dict:
    import torch
    import triton

    try:
        import fla

        fla_version = getattr(fla, "__version__", "unknown")
    except ImportError:
        fla_version = None
    return {
        "gpu": torch.cuda.get_device_name(),
        "driver": _sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "fla_core": fla_version,
        "python": sys.version.split()[0],
        "commit": commit,
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(
            [Path(sys.executable).name, "-m", "capsim_kernels.bench.gdn.run", *sys.argv[1:]]
        ),
        "timing": (
            "CUDA graph replay, L2 flushed per replay, "
            "triton.testing.do_bench quantiles 0.2/0.5/0.8"
        ),
    }


def run_grid(
    copy_gbps: float,
    csv_path: Path,
    quick: bool,
    notes: list[str],
    budget_s: float,
    shapes=MODEL_SHAPES,
    checked: dict | None = None,
    storeall_config: dict | None = None,
    policy=None,
) -> list[dict]:
    """Measure the grid; stop (keeping what is measured) once time.monotonic() > budget_s.

    ``checked`` (checked_kernels): only kernels whose float64 checks passed for the
    (shape, state dtype, tree) are timed (None: no checks ran, all are timed).
    ``storeall_config``: state dtype -> store-all launch configuration (default: its own).
    ``policy``: the TreeWY launch policy (None: DEFAULT_POLICY).
    """
    import time

    import torch

    rows: list[dict] = []
    batches = (1, 256) if quick else BATCHES
    for shape in shapes:
        for sd in STATE_DTYPES:
            for batch in batches:
                for tree in WINDOWS:
                    if time.monotonic() > budget_s:
                        notes.append(
                            "time budget spent: grid stopped before "
                            f"{shape.name} {sd} B={batch} {tree.label}"
                        )
                        print(notes[-1], flush=True)
                        return rows
                    w = tree.num_nodes
                    c = Cell(shape, sd, batch, tree, seed=batch * 1000 + w)
                    sa_pool, sa_init, sa_slots = _storeall_pools(c, batch, w)
                    for kernel in KERNELS:
                        if kernel in CHAIN_ONLY and not tree.is_chain:
                            continue
                        if checked is not None and kernel not in checked.get(
                            (shape.name, sd, tree.label), set()
                        ):
                            notes.append(f"not timed (float64 check failed or missing): "
                                         f"{kernel} {shape.name} {sd} {tree.label}")  # fmt: skip
                            print(notes[-1], flush=True)
                            continue
                        try:
                            cfg = (storeall_config or {}).get(sd)
                            fn = kernel_fn(
                                kernel, c, sa_pool, sa_init, sa_slots, cfg, policy=policy
                            )
                            p20, p50, p80 = time_graph_us(fn)
                        except Exception as e:
                            note = f"{kernel} {shape.name} {sd} B={batch} {tree.label} W={w}: {e!r}"
                            notes.append(note[:400])
                            print("FAILED", note[:400], flush=True)
                            continue
                        rows.append(_grid_row(kernel, c, sd, (p20, p50, p80), copy_gbps))
                    del c, sa_pool
                    torch.cuda.empty_cache()
                    write_csv(csv_path, rows, COLUMNS)
                print(f"grid {shape.name} {sd} B={batch} done ({len(rows)} rows)", flush=True)
    return rows


def _storeall_pools(c: Cell, batch: int, w: int):  # type: ignore[no-untyped-def]
    """The store-all kernel's pool for one cell: the committed states in slots 0..B-1
    (``c.pool``), then W fresh slots per request; (pool, initial slots, [B, W] slots)."""
    import torch

    sa_pool = torch.empty(
        (batch * (w + 1), *c.pool.shape[1:]),
        dtype=c.pool.dtype,
        device="cuda",
    )
    sa_pool[:batch] = c.pool
    sa_init = torch.arange(batch, dtype=torch.int32, device="cuda")
    sa_slots = (batch + torch.arange(batch * w, dtype=torch.int32, device="cuda")).view(batch, w)
    return sa_pool, sa_init, sa_slots


def _grid_row(kernel: str, c: Cell, sd: str, pct_us: tuple, copy_gbps: float) -> dict:
    """One grid row (the calibration schema, COLUMNS) of ``kernel`` timed at ``pct_us`` =
    (p20, p50, p80) on cell ``c``."""
    p20, p50, p80 = pct_us
    shape, tree, batch = c.shape, c.tree, c.batch
    w = tree.num_nodes
    nbytes = bytes_moved(kernel, shape, sd, w, batch)
    return {
        "kernel": kernel,
        "model_shape": shape.name,
        "state_dtype": sd,
        "T": w,
        "tree": tree.label,
        "B": batch,
        "Hv": shape.num_v_heads,
        "Hk": shape.num_k_heads,
        "dk": shape.dk,
        "dv": shape.dv,
        "p20_us": round(p20, 2),
        "p50_us": round(p50, 2),
        "p80_us": round(p80, 2),
        "bytes_moved": nbytes,
        "achieved_gbps": round(nbytes / (p50 * 1e-6) / 1e9, 1),
        "floor_us": round(nbytes / (copy_gbps * 1e9) * 1e6, 2),
        "copy_gbps": round(copy_gbps, 1),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="directory for gdn_verify.csv and meta.json")
    p.add_argument("--commit", default="unknown", help="git commit of the measured code")
    p.add_argument("--quick", action="store_true", help="B in {1, 256} only")
    p.add_argument("--no-checks", action="store_true", help="skip the correctness checks")
    p.add_argument("--budget-s", type=float, default=1e9, help="grid deadline (s)")
    p.add_argument("--render", type=Path, help="print the markdown table of a CSV and exit")
    p.add_argument(
        "--shapes", nargs="+", choices=[m.name for m in MODEL_SHAPES], help="subset of shapes"
    )
    p.add_argument("--window", action="store_true", help="also time the window kernel alone")
    p.add_argument(
        "--two-launch", action="store_true",
        help="every window on the two-launch path of rounds 2-3 (no single-launch kernel)",
    )  # fmt: skip
    p.add_argument(
        "--sweep", action="store_true",
        help="time the round-4 kernel configurations first (sweep.csv) and use the fastest",
    )  # fmt: skip
    p.add_argument(
        "--storeall-config", type=json.loads, default=None,
        help='JSON {state dtype: {"block_v", "num_warps", "num_stages"}} for store-all',
    )  # fmt: skip
    return p


def _rechecked(chosen, fallback, checks_fn, meta: dict, key: str, notes: list[str]):
    """``chosen`` if its float64 re-checks pass (recorded under ``key``), else ``fallback``."""
    rechecks = checks_fn(chosen)
    meta[key] = rechecks
    if all(c["ok"] for c in rechecks):
        return chosen
    notes.append(f"{key}: the chosen configuration failed its checks: defaults kept")
    print(notes[-1], flush=True)
    return fallback


def _window_step(args, shapes, policy, meta: dict, notes: list[str]):
    """--window: time the window kernel alone and pick its configuration (a diagnostic:
    never lose the grid over it)."""
    batches = (1, 256) if args.quick else BATCHES
    try:
        wrows = run_window(shapes, batches, args.out / "window.csv", notes, policy)
        meta["window_rows"] = len(wrows)
        meta["window_choice"], chosen = pick_window_config(wrows, policy)
        if meta["window_choice"] is not None and not args.no_checks:
            w40 = [t for t in WINDOWS if t.num_nodes == 40]
            chosen = _rechecked(
                chosen, policy, lambda p: run_checks(shapes=shapes, windows=w40, policy=p),
                meta, "checks_window_choice", notes,
            )  # fmt: skip
        return chosen
    except Exception as e:
        notes.append(f"window timing failed: {e!r}"[:400])
        print("WINDOW FAILED", repr(e)[:400], flush=True)
        return policy


def _sweep_step(args, shapes, policy, meta: dict, notes: list[str]):
    """--sweep: time the launch configurations, keep the fastest that passes its checks."""
    try:
        choice, chosen = run_sweep(shapes[0], args.out / "sweep.csv", notes, policy)
        meta["sweep_choice"] = choice
        if not args.no_checks:
            chosen = _rechecked(
                chosen, policy, lambda p: run_checks(shapes=shapes[:1], policy=p),
                meta, "checks_sweep_choice", notes,
            )  # fmt: skip
        return chosen
    except Exception as e:
        notes.append(f"sweep failed: {e!r}"[:400])
        print("SWEEP FAILED", repr(e)[:400], flush=True)
        return policy


def _checks(args, shapes, policy, meta: dict) -> list[dict]:
    try:
        checks = [] if args.no_checks else run_checks(shapes=shapes, policy=policy)
    except Exception as e:
        checks = [{"ok": False, "error": repr(e)[:400]}]
        print("CHECKS FAILED", repr(e)[:400], flush=True)
    meta.update(checks=checks, checks_ok=all(c["ok"] for c in checks), check_tolerances=CHECK_TOL)
    atomic_write(args.out / "meta.json", json.dumps(meta, indent=1))
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.render is not None:
        with open(args.render) as f:
            print(render_markdown(list(csv.DictReader(f))))
        return 0
    if args.out is None:
        parser.error("--out is required unless --render is given")
    import dataclasses
    import time

    import torch

    from ...gdn_verify.policy import DEFAULT_POLICY

    deadline_s = time.monotonic() + args.budget_s
    policy = DEFAULT_POLICY
    if args.two_launch:
        policy = dataclasses.replace(policy, single_launch=False)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    meta = collect_meta(args.commit)
    print(json.dumps(meta), flush=True)
    notes: list[str] = []
    copy_gbps = measure_copy_gbps()
    meta["copy_gbps"] = round(copy_gbps, 1)
    print(f"copy bandwidth {copy_gbps:.1f} GB/s (read + write)", flush=True)
    shapes = tuple(m for m in MODEL_SHAPES if args.shapes is None or m.name in args.shapes)
    checks = _checks(args, shapes, policy, meta)
    for flag, step in ((args.window, _window_step), (args.sweep, _sweep_step)):
        if flag:
            policy = step(args, shapes, policy, meta, notes)
            atomic_write(args.out / "meta.json", json.dumps(meta, indent=1))
    meta["storeall_config"] = args.storeall_config
    meta["launch_policy"] = policy.as_dict()
    rows = run_grid(
        copy_gbps, args.out / "gdn_verify.csv", args.quick, notes, deadline_s, shapes=shapes,
        checked=None if args.no_checks else checked_kernels(checks),
        storeall_config=args.storeall_config, policy=policy,
    )  # fmt: skip
    meta.update(notes=notes, num_rows=len(rows))
    atomic_write(args.out / "meta.json", json.dumps(meta, indent=1))
    print(render_markdown([{k: str(v) for k, v in r.items()} for r in rows]))
    print(summarize_targets(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
