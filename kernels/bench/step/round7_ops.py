"""Round 7's step operators: the rows without which the step model refuses a deployment,
in the order of what each closes (``scripts/calibrated_coverage.py`` before the call).

Jobs, each until the phase deadline (a job that the deadline cuts keeps the rows it
wrote; every row is flushed as it is measured):

1. bf16 35B TP4: its MoE shard (e256_k8_i128) and lm_head (62080 x 2048) are the only
   classes it lacks; the GDN prefill class of its heads (hv8_hk4, shared with the 80B
   TP4) holds one point (256 tokens: longer prefill chunks are refused) and is measured
   again whole (``ONE_POINT``: a one-point class is no curve);
2. the FP8 check (vLLM's w8a8 block MoE against float32 on the dequantised weights), then
   per FP8 deployment its ``moe_fp8`` class and the ``gemm_fp8`` classes of its linears
   (shared ones once): 35B TP1, 80B TP1, 397B TP4, 397B TP8, 35B TP2, 80B TP2, 35B TP4,
   80B TP4 (35B / 80B at TP8 cannot load a 128-block FP8 checkpoint: not measured);
3. bf16 80B TP8 and 35B TP8 (the TP8 shard of every class but those measured).

The timing, schema and kernels are round 6's (``round6_ops``, ``points.measure_shapes``);
the GDN prefill grid adds 1024 tokens (``GRID7``). Writes DIR/round7_step_ops.csv.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from capsim.calibration.shapes import step_shapes
from capsim.models import PRESETS

from .grids import COLUMNS, SMOKE_GRID, SMOKE_MODEL
from .measure import Writer
from .round6_ops import FP8_SMOKE_MODEL, GRID, OPS, committed_classes, fp8_points, moe_fp8_check

BF16_FIRST = (("qwen3.5-35b-a3b", 4),)
FP8_ORDER = (
    ("qwen3.5-35b-a3b", 1), ("qwen3-next-80b-a3b", 1), ("qwen3.5-397b-a17b", 4),
    ("qwen3.5-397b-a17b", 8), ("qwen3.5-35b-a3b", 2), ("qwen3-next-80b-a3b", 2),
    ("qwen3.5-35b-a3b", 4), ("qwen3-next-80b-a3b", 4),
)  # fmt: skip
BF16_LAST = (("qwen3-next-80b-a3b", 8), ("qwen3.5-35b-a3b", 8))
GRID7 = {**GRID, "gdn_t": [256, 1024, 4096, 16384]}
# committed classes with fewer rows than this are measured again whole (capsim calibrate
# --build replaces a class with the newest run's rows)
MIN_CLASS_ROWS = 2


def _class_counts() -> dict[tuple, int]:
    import csv

    import capsim.calibration as calibration

    path = Path(calibration.__file__).parent / "data" / "h200_model_step.csv"
    counts: dict[tuple, int] = {}
    if path.is_file():
        with path.open(newline="") as fh:
            for r in csv.DictReader(fh):
                cls = ((r["op"], int(float(r["n"])), int(float(r["k"])))
                       if r["op"] in ("gemm", "gemm_fp8") else (r["op"], r["key"]))  # fmt: skip
                counts[cls] = counts.get(cls, 0) + 1
    return counts


def skip_classes() -> frozenset[tuple]:
    """committed_classes() less those with fewer than MIN_CLASS_ROWS rows."""
    counts = _class_counts()
    return frozenset(c for c in committed_classes() if counts.get(c, 0) >= MIN_CLASS_ROWS)


def jobs(dry: bool) -> list[tuple[str, object]]:
    """(kind, StepShapes) in priority order; kind: bf16, fp8_check or fp8."""
    if dry:
        return [("bf16", step_shapes(SMOKE_MODEL, 1)), ("fp8_check", step_shapes(FP8_SMOKE_MODEL, 1)),
                ("fp8", step_shapes(FP8_SMOKE_MODEL, 1))]  # fmt: skip
    out: list[tuple[str, object]] = [("bf16", step_shapes(PRESETS[n], tp)) for n, tp in BF16_FIRST]
    out.append(("fp8_check", step_shapes(PRESETS[FP8_ORDER[0][0]], FP8_ORDER[0][1])))
    out += [("fp8", step_shapes(PRESETS[n], tp)) for n, tp in FP8_ORDER]
    out += [("bf16", step_shapes(PRESETS[n], tp)) for n, tp in BF16_LAST]
    return out


# the classes whose kernels Triton compiles (vLLM's MoE, conv, attention, GDN prefill); the
# GEMMs, norms and sampling are torch/cuBLAS and need no warm-up
COMPILED_OPS = frozenset({"moe", "conv", "attn_decode", "attn_prefill", "gdn_prefill"})


def warm_step7(device: str, dry: bool) -> int:
    """Compile warm-up of the jobs' Triton kernels, in their order: every compiled point
    once (no timing, nothing written), FP8 MoE with one weight copy. Runs beside the GDN
    warm-up workers (round6.warm), which stop it at their deadline; returns the points run."""
    from .points import measure_shapes
    from .round6_ops import make_moe_fp8

    gen = torch.Generator(device=device).manual_seed(70)
    grid = SMOKE_GRID if dry else GRID7
    skip = frozenset() if dry else skip_classes()
    done: set = set()
    n = 0
    for kind, shp in jobs(dry):
        t0 = time.monotonic()
        if kind == "bf16":
            before = len(done)
            measure_shapes(shp, grid, None, done, device, gen, 1, float("inf"), OPS,
                           "torch" if dry else "vllm", skip=skip, warm_ops=COMPILED_OPS)  # fmt: skip
            n += len(done) - before
        elif kind == "fp8":
            for m in grid["m"]:
                if ("moe_fp8", shp.moe_key, m) in done:
                    continue
                done.add(("moe_fp8", shp.moe_key, m))
                try:
                    fns = make_moe_fp8(m, shp, device, gen, ncopy=1)[0]
                    fns[0]()
                    if device == "cuda":
                        torch.cuda.synchronize()
                    n += 1
                except Exception as e:
                    print(f"warm FAILED moe_fp8 {shp.key} M={m}: {e!r}"[:300], flush=True)
                fns = None
                if device == "cuda":
                    torch.cuda.empty_cache()
        print(f"warm step {kind} {shp.key}: {time.monotonic() - t0:.1f} s", flush=True)
    return n


def _resumed(path: Path) -> tuple[set, frozenset[tuple]]:
    """What an earlier attempt of the phase wrote to ``path``: FP8 point tags (fp8_points'
    ``done``) and the bf16 classes (skipped whole: measure_shapes' ``skip``)."""
    import csv

    tags: set = set()
    classes: set = set()
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            m = int(float(r["m_tok"]))
            if r["op"] == "moe_fp8":
                tags.add(("moe_fp8", r["key"], m))
            elif r["op"] == "gemm_fp8":
                tags.add(("gemm_fp8", int(float(r["n"])), int(float(r["k"])), m))
            elif r["op"] == "gemm":
                classes.add(("gemm", int(float(r["n"])), int(float(r["k"]))))
            else:
                classes.add((r["op"], r["key"]))
    return tags, frozenset(classes)


def run_step7(out_dir: Path, device: str, deadline: float, dry: bool, notes: list[str], *,
              start: int = 0, save=None) -> dict:  # fmt: skip
    """The jobs from index ``start`` until ``deadline`` (monotonic); ``save(meta, i)`` is
    called before job i starts (the index a crash is resumed after) and at the end with
    i = -1. Returns the phase's metadata (per job: rows written and seconds)."""
    from .points import measure_shapes

    gen = torch.Generator(device=device).manual_seed(7 + start)
    path = out_dir / "round7_step_ops.csv"
    done: set = set()
    skip = frozenset() if dry else skip_classes()
    if start and path.is_file():  # a resumed attempt appends to the rows written so far
        done, written = _resumed(path)
        skip |= written
    out = Writer(path, COLUMNS, append=bool(start))
    grid = SMOKE_GRID if dry else GRID7
    meta: dict = {"grid": grid, "jobs": [], "fp8": {}, "skipped_committed_classes": len(skip),
                  "start": start}  # fmt: skip
    save = save or (lambda meta, i: None)
    t_phase = time.monotonic()
    for i, (kind, shp) in enumerate(jobs(dry)):
        if i < start:
            continue
        if time.monotonic() > deadline:
            notes.append(f"step_ops: deadline before {kind} {shp.key}")
            break
        save(meta, i)
        if os.environ.get("R6_FAULT") == f"step_ops:{i}":  # fault injection (CPU tests)
            out.close()
            os._exit(3)
        t0, rows0 = time.monotonic(), out.rows
        if kind == "bf16":
            measure_shapes(shp, grid, out, done, device, gen, 15, deadline, OPS,
                           "torch" if dry else "vllm", skip=skip)  # fmt: skip
        elif kind == "fp8_check":
            try:
                meta["fp8"]["moe_check_rel_err"] = moe_fp8_check(shp, device, gen)
            except Exception as e:
                meta["fp8"]["moe_check_error"] = repr(e)[:300]
                notes.append(f"fp8 MoE check failed: {e!r}"[:300])
        else:
            fp8_points([shp], grid, out, device, gen, deadline, notes, done)
        job = {"kind": kind, "shape": shp.key, "rows": out.rows - rows0,
               "s": round(time.monotonic() - t0, 1),
               "at_s": round(time.monotonic() - t_phase, 1)}  # fmt: skip
        meta["jobs"].append(job)
        print(f"step_ops {kind} {shp.key}: {job['rows']} rows in {job['s']} s "
              f"(phase {job['at_s']} s)", flush=True)  # fmt: skip
    out.close()
    meta["rows"] = out.rows  # this attempt's
    with path.open() as fh:  # every attempt's (a resumed phase appends)
        meta["rows_in_file"] = sum(1 for _ in fh) - 1
    save(meta, -1)
    return meta
