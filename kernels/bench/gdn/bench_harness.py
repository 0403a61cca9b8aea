"""What the one-call device benches (stream_ceiling.py, ladder.py) share: the budget
guard, the timer, the flags, the compile warm-up (processes of the bench's own module),
the metadata's common fields, the start of a run and the atomic output writes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..timing import atomic_write, write_csv

Item = TypeVar("Item")
Timer = Callable[[Callable[[], Any]], tuple[float, float, float]]


class Budget:
    """The --budget-s guard: a launch starts only if the slowest of the last few launches
    would still end inside the budget (counted from ``start`` on ``clock``)."""

    def __init__(self, budget_s: float, start: float, clock: Callable[[], float] = time.monotonic,
                 first_estimate_s: float = 1.0):  # fmt: skip
        self.budget_s, self.start, self.clock = budget_s, start, clock
        self.durations: list[float] = []
        self.first_estimate_s = first_estimate_s

    def elapsed(self) -> float:
        return self.clock() - self.start

    def estimate(self) -> float:
        return max(self.durations[-5:], default=self.first_estimate_s)

    def allows(self) -> bool:
        return self.elapsed() + self.estimate() <= self.budget_s

    def record(self, seconds: float) -> None:
        self.durations.append(seconds)


def make_timer(device: str, rep_ms: float) -> Timer:
    """``fn -> (p20, p50, p80)`` in us: timing.time_graph_us on CUDA, else one wall call."""
    if device == "cuda":
        from ..timing import time_graph_us

        return lambda fn: time_graph_us(fn, rep_ms=rep_ms)

    def wall(fn):  # the interpreter: one call's wall time (no meaning as a speed)
        t = time.perf_counter()
        fn()
        us = (time.perf_counter() - t) * 1e6
        return us, us, us

    return wall


def base_parser(doc: str, budget_s: float, workers: int, groups: str,
                dry_help: str) -> argparse.ArgumentParser:  # fmt: skip
    """--out, --budget-s, --workers, --rep-ms, --groups, --commit, --dry-run, --warm-worker."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=budget_s)
    ap.add_argument("--workers", type=int, default=workers,
                    help="compile warm-up processes (0: none)")  # fmt: skip
    ap.add_argument("--rep-ms", type=float, default=10.0, help="replay time per launch")
    ap.add_argument("--groups", default=groups)
    ap.add_argument("--commit", default=None, help="default: the stage's COMMIT file")
    ap.add_argument("--dry-run", action="store_true", help=dry_help)
    ap.add_argument("--warm-worker", default=None, help=argparse.SUPPRESS)
    return ap


def run_warm_share(spec: str, items: Sequence[Item], launch: Callable[[Item], object]) -> int:
    """Worker ``i/n`` (``spec``): ``launch`` (compile, run once) ``items[i::n]``, count failures."""
    i, n = (int(x) for x in spec.split("/"))
    todo = list(items)[i::n]
    t0, errors = time.monotonic(), 0
    for it in todo:
        try:
            launch(it)
        except Exception:  # the main process notes it when it builds the launch
            errors += 1
    print(f"warm {i}/{n}: {len(todo)} launches in {time.monotonic() - t0:.1f}s, {errors} failed",
          flush=True)  # fmt: skip
    return 0


def warm(module: str, workers: int, deadline: float, dry: bool, notes: list[str]) -> float:
    """Start ``workers`` processes of ``python -m module --warm-worker i/n`` and wait for them
    until ``deadline`` (monotonic); returns the seconds it took."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", module, "--warm-worker",
                               f"{i}/{workers}", "--out", "."] + (["--dry-run"] if dry else []),
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
             for i in range(workers)]  # fmt: skip
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            notes.append(f"warm-up worker {p.pid} killed at its deadline")
    bad = [p.returncode for p in procs if p.returncode not in (0, None, -9)]
    if bad:
        notes.append(f"warm-up workers exited {bad}")
    return time.monotonic() - t0


def base_meta(args: argparse.Namespace, device: str, module: str, **fields: Any) -> dict:
    """The metadata's common fields (command naming ``module``, commit, dirty, date, versions,
    gpu, timing), then ``fields`` in order, then an empty ``notes``."""
    import platform

    import torch
    import triton

    stage = Path(__file__).resolve().parents[3]
    commit = args.commit or ((stage / "COMMIT").read_text().strip()
                             if (stage / "COMMIT").is_file() else None)  # fmt: skip
    return {
        "command": " ".join([f"python3 -m {module}", *sys.argv[1:]]),
        "commit": commit, "dirty": (stage / "DIRTY").is_file(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "dry_run": args.dry_run,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "timing": "timing.time_graph_us: CUDA graph replay, L2 flushed per replay "
        f"(triton.testing.do_bench quantiles 0.2/0.5/0.8, rep {args.rep_ms} ms)",
        **fields, "notes": [],
    }  # fmt: skip


def open_device(dry_run: bool, out: Path) -> str | None:
    """``"cpu"`` (dry run) or ``"cuda"``, None without a CUDA device; creates ``out``."""
    import torch

    device = "cpu" if dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device (use --dry-run on a CPU)", file=sys.stderr)
        return None
    out.mkdir(parents=True, exist_ok=True)
    return device


def begin(argv: list[str] | None, parser: argparse.ArgumentParser,
          warm_worker: Callable[[str, bool], int], runner: Callable[..., Any],
          save: Callable[[Path, list[dict], dict], None], *, module: str, name: str,
          warm_share: float, bytes_note: str, **fields: Any) -> int | tuple:  # fmt: skip
    """A bench's main up to its runner: a --warm-worker's exit code, 2 without CUDA, else
    ``(args, meta, runner)``: base_meta naming ``name`` (bytes, budget_s, ``fields``), the
    warm-up (``module``, to ``warm_share`` of the budget), copy_gbps, ``runner(...)``."""
    args = parser.parse_args(argv)
    if args.warm_worker is not None:
        return warm_worker(args.warm_worker, args.dry_run)
    t0 = time.monotonic()
    device = open_device(args.dry_run, args.out)
    if device is None:
        return 2
    meta = base_meta(args, device, name, bytes=bytes_note, budget_s=args.budget_s, **fields)
    if args.workers > 0:
        meta["warm_s"] = round(warm(module, args.workers, t0 + warm_share * args.budget_s,
                                    args.dry_run, meta["notes"]), 1)  # fmt: skip
    from ..timing import measure_copy_gbps

    meta["copy_gbps"] = round(measure_copy_gbps(), 1) if device == "cuda" else 1000.0
    print(f"copy bandwidth {meta['copy_gbps']:.1f} GB/s (read + write)", flush=True)
    budget = Budget(args.budget_s, t0)
    return args, meta, runner(device, make_timer(device, args.rep_ms), meta["copy_gbps"], budget,
                              lambda rows: save(args.out, rows, meta))  # fmt: skip


def end_fields(budget: Budget, not_reached: list[str], keep: int) -> dict:
    """The metadata's closing fields: elapsed time and what the budget left unmeasured."""
    return {"elapsed_s": round(budget.elapsed(), 1), "stopped_by_budget": bool(not_reached),
            "num_not_reached": len(not_reached), "not_reached": not_reached[:keep]}  # fmt: skip


def print_summary(prefix: str, meta: dict, not_reached: list[str]) -> None:
    """The closing line: rows timed, rows, launches not reached, seconds."""
    print(f"{prefix}: {meta['num_timed']} timed of {meta['num_rows']} rows, "
          f"{len(not_reached)} not reached, {meta['elapsed_s']} s", flush=True)  # fmt: skip


def write_outputs(out: Path, prefix: str, csv_name: str, rows: list[dict],
                  columns: Sequence[str], table: str, meta: dict) -> None:  # fmt: skip
    """``out/csv_name``, ``out/{prefix}_table.md`` (``table``) and ``out/{prefix}_meta.json``
    (``meta`` with the row counts and the checks summary), each written atomically."""
    write_csv(out / csv_name, rows, columns)
    atomic_write(out / f"{prefix}_table.md", table)
    meta["num_rows"] = len(rows)
    meta["num_timed"] = sum(1 for r in rows if r["p50_us"])
    meta["checks_ok"] = all(r["check_ok"] in ("", True, "True") for r in rows) and any(
        r["p50_us"] for r in rows)  # fmt: skip
    atomic_write(out / f"{prefix}_meta.json", json.dumps(meta, indent=1, default=str) + "\n")
