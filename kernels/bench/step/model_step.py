"""Measure the operators of a GDN-hybrid decoder step on one GPU (issue #6).

Writes, under ``--out``:

- ``model_step.csv``: one row per (operator, shape, size) point: p20/p50/p80 in
  microseconds per call, with the floor FLOPs and bytes of the call;
- ``model_step_validation.csv``: whole decode/mixed steps of the 35B model (all layers,
  every operator except the GDN recurrence kernel, lm_head and greedy sampling), captured
  as one CUDA graph: the held-back check of the additive step model;
- ``model_step_meta.json``: device, versions, measured copy bandwidth and bf16 GEMM rate,
  date and the command line.

GPU timing: every point is captured in a CUDA graph that runs all weight copies back to
back (vLLM replays decode steps as graphs), replayed ``--replays`` times between CUDA
events; the per-call time is the replay time over the number of calls. Off CUDA
(``--smoke``) tiny shapes are timed with the host clock to test the plumbing on CPU.

Usage (on the H200; ``capsim_kernels`` linked to ``kernels/``)::

    python3 -m capsim_kernels.bench.step.model_step --out $OUT
    python3 -m capsim_kernels.bench.step.model_step --smoke --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from capsim.calibration.shapes import StepShapes, step_shapes
from capsim.models import PRESETS

from .grids import (
    COLUMNS,
    DEFAULT_MODELS,
    FULL_GRID,
    GDN_COLUMNS,
    SCHEMA_VERSION,
    SMOKE_GRID,
    SMOKE_MODEL,
    VAL_COLUMNS,
    VLLM_VAL,
)
from .measure import Writer, _row, time_calls, time_host_roundtrip
from .points import measure_shapes, measure_vllm_gdn
from .validation import measure_validation


def measure_ceilings(dev: str, smoke: bool) -> dict:
    if dev != "cuda":
        return {}
    n = 2**30 if not smoke else 2**20
    a = torch.empty(n, dtype=torch.float32, device=dev).normal_()
    b = torch.empty_like(a)
    _, pct = time_calls([lambda: b.copy_(a)], 20)
    copy_gbps = 2 * 4 * n / (pct[1] * 1e-6) / 1e9
    s = 8192
    x = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    y = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    _, pct = time_calls([lambda: x @ y], 10)
    tflops = 2 * s**3 / (pct[1] * 1e-6) / 1e12
    return {"copy_gbps_read_plus_write": copy_gbps, "bf16_gemm_8192_tflops": tflops}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes; runs on CPU")
    ap.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS), help="name:tp ...")
    ap.add_argument("--replays", type=int, default=15)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop new points after")
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--no-validation", action="store_true")
    ap.add_argument("--ops", default="", help="comma list: measure only these op classes")
    ap.add_argument("--no-host", action="store_true", help="skip the host round trip")
    ap.add_argument(
        "--kernels", choices=("vllm", "torch"), default=None,
        help="vllm: vLLM 0.33's kernels from .vllmwheel/src (default on CUDA); torch: stand-ins",
    )  # fmt: skip
    return ap


def _shapes(args) -> list[StepShapes]:
    if args.smoke:
        return [step_shapes(SMOKE_MODEL, 1)]
    out = []
    for spec in args.models:
        name, _, tp = spec.partition(":")
        out.append(step_shapes(PRESETS[name], int(tp or 1)))
    return out


def _meta(args, dev: str, shapes: list[StepShapes], kernels: str) -> dict:
    meta: dict = {
        "schema_version": SCHEMA_VERSION,
        "started_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "device": torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor(),
        "torch": torch.__version__, "python": platform.python_version(),
        "replays": args.replays, "seed": args.seed, "smoke": args.smoke,
        "models": [f"{s.model}:tp{s.tp}" for s in shapes], "ops": args.ops or "all",
        "kernels": kernels,
    }  # fmt: skip
    try:
        import triton

        meta["triton"] = triton.__version__
        import fla

        meta["fla"] = getattr(fla, "__version__", "?")
    except Exception as exc:
        meta["import_note"] = repr(exc)
    return meta


def _vllm_meta(meta: dict, shapes: list[StepShapes], dev: str, gen) -> None:
    from .. import vllm_shim as vl
    from . import vllm_ops as vops

    meta["vllm_sources"] = vl.sources()
    meta["vllm_standins"] = vl.STANDIN
    meta["vllm_moe_config"] = {
        s.key: dict(zip(("file", "found"), vops.moe_config_file(s), strict=True)) for s in shapes
    }
    meta["vllm_checks"] = vops.checks(dev, gen)
    print("vllm", json.dumps(meta["vllm_moe_config"]), json.dumps(meta["vllm_checks"]))


def _validate(shp, grid, kernels: str, val_out, dev, gen, replays: int, deadline: float):
    if kernels == "vllm":
        from . import whole_step

        pts = [whole_step.StepPoint(r, c, tree, pre) for r, c, tree, pre in VLLM_VAL]
        whole_step.measure(shp, pts, val_out, dev, gen, replays, deadline + 120, time_calls)
    else:
        measure_validation(shp, grid, val_out, dev, gen, replays, deadline + 60)


def _finish(meta: dict, out: Path, dev: str, t_start: float, writers) -> None:
    for w in writers:
        if w is not None:
            w.close()
    meta["finished_utc"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    meta["op_rows"], meta["validation_rows"] = writers[0].rows, writers[1].rows
    meta["elapsed_s"] = round(time.monotonic() - t_start, 1)
    if dev == "cuda":
        meta["cuda"] = torch.version.cuda
        meta["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    tmp = out / "model_step_meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    tmp.replace(out / "model_step_meta.json")
    print(json.dumps({k: meta[k] for k in ("op_rows", "validation_rows", "elapsed_s")}))


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if not args.smoke and dev != "cuda":
        ap.error("a full run needs CUDA; use --smoke on CPU")
    grid = SMOKE_GRID if args.smoke else FULL_GRID
    kernels = args.kernels or ("torch" if args.smoke or dev != "cuda" else "vllm")
    if kernels == "vllm" and dev != "cuda":
        ap.error("--kernels vllm needs CUDA")
    shapes = _shapes(args)
    args.out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    t_start = time.monotonic()
    deadline = t_start + args.budget_s
    meta = _meta(args, dev, shapes, kernels)
    meta["ceilings"] = measure_ceilings(dev, args.smoke)
    print("ceilings", meta["ceilings"], flush=True)
    gdn_out = None
    if kernels == "vllm":
        _vllm_meta(meta, shapes, dev, gen)
        gdn_out = Writer(args.out / "vllm_gdn_verify.csv", GDN_COLUMNS)
    ops_out = Writer(args.out / "model_step.csv", COLUMNS)
    val_out = Writer(args.out / "model_step_validation.csv", VAL_COLUMNS)
    done: set = set()
    only = frozenset(o for o in args.ops.split(",") if o)
    for i, shp in enumerate(shapes):
        measure_shapes(shp, grid, ops_out, done, dev, gen, args.replays, deadline, only, kernels)
        print(f"{shp.key}: {ops_out.rows} op rows, {time.monotonic() - t_start:.0f}s", flush=True)
        if i == 0 and not args.no_validation:
            _validate(shp, grid, kernels, val_out, dev, gen, args.replays, deadline)
            print(f"validation: {val_out.rows} rows, {time.monotonic() - t_start:.0f}s", flush=True)
        if gdn_out is not None:
            measure_vllm_gdn(shp, gdn_out, dev, gen, args.replays, deadline + 150)
    for m in [] if args.no_host else grid["host_m"]:
        how, pct = time_host_roundtrip(m, 200, dev)
        ops_out.write(_row("host", "roundtrip", how, pct, flops=0, bytes_=8 * m, copies=1, m_tok=m))
    _finish(meta, args.out, dev, t_start, (ops_out, val_out, gdn_out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
