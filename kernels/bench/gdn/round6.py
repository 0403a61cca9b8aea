"""Round 6: one device call, one timing method, for the benchmark and the calibration tables.

    python3 -m capsim_kernels.bench.gdn.round6 --out DIR [--budget-s 430] [--workers 14]
    TRITON_INTERPRET=1 python3 -m capsim_kernels.bench.gdn.round6 --out DIR --dry-run

Under its own deadline, in priority order (each phase has its own share, so a slow phase
cannot starve the next; whatever is not reached is listed in the metadata):

1. compile warm-up: worker processes run every registry kernel once at B = 1 and 64 for
   every GDN cell of the run, filling Triton's cache in parallel (CPU-bound compiles);
2. copy bandwidth (2 GiB device-to-device, read + write), the floor of every row;
3. GDN (registry.KERNELS) at the 35B TP1 and 397B TP8 shapes, T = 1..9, 15, 40 chains and
   the shipped trees (2,2,2), (3,3,3), B = 1, 8, 32, 64, 128, 256: every kernel checked
   against a float64 recurrence over all requests before it is timed (worst per-(request,
   head) error in the row), then CUDA-graph replays with the L2 flushed;
4. step operators at per-GPU TP shapes the step model lacks (vLLM 0.33's kernels through
   step.points.measure_shapes: fused MoE, attention, conv, GDN prefill; torch GEMM, norm,
   sampling), vLLM's Triton FP8 fused MoE (w8a8, 128x128 blocks) and FP8 GEMMs;
5. GDN at the remaining per-GPU head counts of TP 1/2/4/8 of every preset (chains).

Writes DIR/round6_gdn.csv (GDN_COLUMNS), DIR/round6_step_ops.csv (model_step's schema),
DIR/round6_meta.json; all atomically, after every cell.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ...gdn_verify.tree import TreeSpec
from ..timing import atomic_write, write_csv
from .shapes import ModelShape, gdn_shape

GDN_COLUMNS = (
    "kernel", "label", "model_shape", "state_dtype", "math", "T", "tree", "B", "Hv", "Hk",
    "dk", "dv", "p20_us", "p50_us", "p80_us", "bytes_moved", "floor_us", "floor_ratio",
    "achieved_gbps", "copy_gbps", "err_max_req_head", "state_err", "o_err", "vt_err",
    "check_ok", "contract_ok", "worst_req", "worst_head", "requests_checked", "gate_floor",
    "config", "phase",
)  # fmt: skip
# committed-state tolerance (norm-wise, all requests) gating the timing, by state dtype;
# the per-(request, head) contract of issue 19 (1e-6, fp32) is reported as contract_ok
STATE_TOL = {"float32": 1e-6, "bfloat16": 1.5e-2}
CONTRACT_TOL = {"float32": 1e-6, "bfloat16": 1.5e-2}
O_TOL = 1e-2
WINDOWS = (
    *(TreeSpec.chain(t) for t in (4, 1, 2, 3, 5, 6, 7, 8, 9)),
    TreeSpec.chain(15), TreeSpec((2, 2, 2)), TreeSpec.chain(40), TreeSpec((3, 3, 3)),
)  # fmt: skip
# the benchmark's B first (both shapes), then the calibration's extra batch sizes
BATCHES = (256, 1, 64, 8, 32, 128)
TP_BATCHES = (256, 1, 64)
TP_KERNELS = ("vllm_storeall", "vllm_decode", "treewy_verify", "treewy_commit", "deferred",
              "replay")  # fmt: skip
GATE_KERNELS = ("treewy_verify_commit", "fused_chain", "deferred", "replay", "vllm_storeall")
# the tuned capsim store-all (round 5's sweep, BENCHMARKS.md)
STOREALL_CONFIG = {"float32": {"block_v": 8, "num_warps": 1, "num_stages": 3},
                   "bfloat16": {"block_v": 16, "num_warps": 1, "num_stages": 3}}  # fmt: skip
TP_ORDER = (
    ("qwen3.5-35b-a3b", 2), ("qwen3.5-35b-a3b", 4), ("qwen3-next-80b-a3b", 1),
    ("qwen3.5-397b-a17b", 4), ("qwen3.5-35b-a3b", 8), ("qwen3-next-80b-a3b", 2),
    ("qwen3-next-80b-a3b", 4), ("qwen3-next-80b-a3b", 8),
)  # fmt: skip
# share of the budget at which each phase must stop (fractions of --budget-s)
PHASE_END = {"warm": 0.28, "gdn_main": 0.58, "step_ops": 0.78, "gdn_tp": 0.97}


@dataclass(frozen=True)
class Cell:
    shape: ModelShape
    state_dtype: str
    tree: TreeSpec
    batch: int
    kernels: tuple[str, ...] | None  # None: every registry kernel that applies
    phase: str
    gate_floor: float = 0.3  # gates a = floor + (1 - floor) U(0, 1)


def main_shapes(dry: bool) -> tuple[ModelShape, ...]:
    if dry:
        return (ModelShape("tiny-a", 4, 2, 16, 16), ModelShape("tiny-b", 2, 1, 16, 16))
    return (gdn_shape("qwen3.5-35b-a3b", 1), gdn_shape("qwen3.5-397b-a17b", 8))


def tp_cells(dry: bool) -> list[Cell]:
    """Phase 5: the per-GPU head counts of TP 1/2/4/8 of every preset not in phase 3, at
    each preset's state dtype (the 80B keeps a bf16 state), chains T = 1..9, in TP_ORDER.
    The 397B at TP1/TP2 is left out: its weights cannot fit one or two GPUs."""
    from capsim.models import PRESETS

    if dry:
        pairs = [(ModelShape("tiny-c", 2, 2, 16, 16), "bfloat16")]
    else:
        main = {s.heads_key for s in main_shapes(False)}
        seen: set = set()
        pairs = []
        for name, tp in TP_ORDER:
            sd = PRESETS[name].ssm_state_dtype
            shp = gdn_shape(name, tp)
            key = (shp.heads_key, sd)
            if key in seen or (sd == "float32" and shp.heads_key in main):
                continue
            seen.add(key)
            pairs.append((shp, sd))
    windows = [t for t in WINDOWS if t.is_chain and t.num_nodes <= 9]
    batches = (2, 1) if dry else TP_BATCHES
    return [Cell(s, sd, t, b, TP_KERNELS, "gdn_tp") for s, sd in pairs for b in batches
            for t in windows]  # fmt: skip


def main_cells(dry: bool) -> list[Cell]:
    windows = [TreeSpec.chain(t) for t in (4, 1, 2)] + [TreeSpec((2, 2))] if dry else WINDOWS
    batches = (3, 1) if dry else BATCHES
    cells = [Cell(s, "float32", t, b, None, "gdn_main") for b in batches
             for s in main_shapes(dry) for t in windows]  # fmt: skip
    # the accuracy contract with slow-decaying gates too (kcode: 0.9-1 at the T = 40 chain)
    slow = TreeSpec.chain(4 if dry else 40)
    cells.append(Cell(main_shapes(dry)[0], "float32", slow, batches[0], GATE_KERNELS,
                      "gdn_main_gates09", gate_floor=0.9))  # fmt: skip
    return cells


# ------------------------------------------------------------------------------ GDN cells
def _ctx(vllm_src: Path, notes: list[str]) -> dict:
    from . import vllm_storeall as vs

    ctx: dict = {"storeall_config": STOREALL_CONFIG}
    try:
        if os.environ.get("TRITON_INTERPRET") == "1":  # CPU dry run
            from .. import vllm_shim

            vllm_shim.install(vllm_src)
            vllm_shim.interpreter_aliases()
        ctx["vllm_op"] = vs.load_fused_sigmoid_gating(vllm_src)
        ctx["vllm_decode_op"] = vs.load_packed_decode(vllm_src)
    except Exception as e:  # the capsim kernels still run
        ctx["vllm_error"] = repr(e)[:300]
        notes.append(f"vLLM ops not loaded: {e!r}"[:300])
    return ctx


def _kernels(cell: Cell):
    from .registry import KERNELS

    names = cell.kernels
    return [k for k in KERNELS if names is None or k.name in names]


def measure_cell(cell: Cell, ctx: dict, copy_gbps: float, device: str, notes: list[str],
                 time_it: bool = True) -> list[dict]:  # fmt: skip
    """Check every applicable kernel of ``cell`` against float64 over all requests, then
    time those that pass (``time_it=False``: the compile warm-up, no reference, no rows)."""
    import torch

    from ..timing import time_graph_us
    from .cases import make_case
    from .registry import truth_all

    w, b = cell.tree.num_nodes, cell.batch
    case = make_case(cell.shape, cell.state_dtype, b, cell.tree, seed=1000 * b + w,
                     device=device, gate_floor=cell.gate_floor)  # fmt: skip
    ctx["truth"] = truth_all(case, with_vt=True) if time_it else _no_truth(case)
    rows = []
    for kern in _kernels(cell):
        if not kern.applies(case):
            continue
        tag = f"{kern.name} {cell.shape.name} {cell.state_dtype} {cell.tree.label} B={b}"
        try:
            prep = kern.build(case, ctx)
        except LookupError as e:
            notes.append(f"{tag}: {e}"[:300])
            continue
        except Exception as e:
            notes.append(f"{tag}: build failed {e!r}"[:400])
            print("FAILED", notes[-1], flush=True)
            continue
        if not time_it:
            continue
        row = _row(cell, kern, prep, copy_gbps)
        if row["check_ok"]:
            try:
                p20, p50, p80 = time_graph_us(prep.fn) if device == "cuda" else _host_us(prep.fn)
            except Exception as e:
                notes.append(f"{tag}: timing failed {e!r}"[:400])
                print("FAILED", notes[-1], flush=True)
                continue
            _timed(row, p20, p50, p80, copy_gbps)
        else:
            notes.append(f"not timed (float64 check failed): {tag} {prep.check}"[:400])
        rows.append(row)
        del prep
    ctx.pop("truth", None)
    for key in [k for k in ctx if isinstance(k, tuple)]:
        del ctx[key]
    del case
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def _no_truth(case):
    """A stand-in truth for the warm-up (no float64 work): checks come out meaningless and
    are discarded."""
    from .registry import Truth

    b, w, hv, dv = case.batch, case.num_nodes, case.shape.num_v_heads, case.shape.dv
    o = case.v.double()
    return Truth(o=o.reshape(b, w, hv, dv), accepted_state=case.state0().double())


def _host_us(fn) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    fn()
    us = (time.perf_counter() - t0) * 1e6
    return us, us, us


def _row(cell: Cell, kern, prep, copy_gbps: float) -> dict:
    c, sd = prep.check, cell.state_dtype
    sh = cell.shape
    state_ok = not kern.state_check or c["state_err"] <= STATE_TOL[sd]
    o_ok = not (c.get("o_err", 0.0) > O_TOL)
    contract = (not kern.state_check) or c["err_max_req_head"] <= CONTRACT_TOL[sd]
    worst = c.get("worst", ("", ""))
    return {
        "kernel": kern.name, "label": kern.label, "model_shape": sh.name, "state_dtype": sd,
        "math": prep.math, "T": cell.tree.num_nodes, "tree": cell.tree.label, "B": cell.batch,
        "Hv": sh.num_v_heads, "Hk": sh.num_k_heads, "dk": sh.dk, "dv": sh.dv,
        "bytes_moved": kern.bytes_moved(sh, sd, cell.tree.num_nodes, cell.batch, cell.tree),
        "copy_gbps": round(copy_gbps, 1),
        "err_max_req_head": f"{c['err_max_req_head']:.3g}",
        "state_err": f"{c['state_err']:.3g}",
        "o_err": f"{c.get('o_err', float('nan')):.3g}",
        "vt_err": f"{c.get('vt_err', float('nan')):.3g}",
        "check_ok": bool(state_ok and o_ok), "contract_ok": bool(contract),
        "worst_req": worst[0], "worst_head": worst[1], "requests_checked": cell.batch,
        "gate_floor": cell.gate_floor, "config": prep.config, "phase": cell.phase,
    }  # fmt: skip


def _timed(row: dict, p20: float, p50: float, p80: float, copy_gbps: float) -> None:
    floor = row["bytes_moved"] / (copy_gbps * 1e3)
    row.update(p20_us=round(p20, 2), p50_us=round(p50, 2), p80_us=round(p80, 2),
               floor_us=round(floor, 2), floor_ratio=round(p50 / floor, 3),
               achieved_gbps=round(row["bytes_moved"] / (p50 * 1e3), 1))  # fmt: skip


def run_cells(cells: list[Cell], ctx: dict, copy_gbps: float, device: str, deadline: float,
              rows: list[dict], out: Path, notes: list[str]) -> int:  # fmt: skip
    """Measure ``cells`` in order until ``deadline``; returns the number measured."""
    for i, cell in enumerate(cells):
        if time.monotonic() > deadline:
            left = f"{cell.shape.name} {cell.tree.label} B={cell.batch}"
            notes.append(
                f"{cell.phase}: deadline before {len(cells) - i} of {len(cells)} cells "
                f"(first left: {left})"
            )
            print(notes[-1], flush=True)
            return i
        new = measure_cell(cell, ctx, copy_gbps, device, notes)
        rows.extend(new)
        write_csv(out / "round6_gdn.csv", rows, GDN_COLUMNS)
        for r in new:
            print("r6", r["kernel"], r["model_shape"], r["tree"], f"T={r['T']}", f"B={r['B']}",
                  r.get("p50_us", "-"), r["err_max_req_head"], flush=True)  # fmt: skip
    return len(cells)


# ------------------------------------------------------------------------------ warm-up
def warm_worker(spec: str, vllm_src: Path) -> int:
    """Worker ``i/n``: run every kernel of its share of the cells once (B = 1 and 64)."""
    i, n = (int(x) for x in spec.split("/"))
    dry = os.environ.get("R6_DRY") == "1"
    cells = main_cells(dry) + tp_cells(dry)
    keys, todo = set(), []
    for c in cells:
        for b in (1, 64 if not dry else 2):
            key = (c.shape.heads_key, c.state_dtype, c.tree.label, b, c.kernels)
            if key not in keys:
                keys.add(key)
                todo.append(Cell(c.shape, c.state_dtype, c.tree, b, c.kernels, "warm"))
    notes: list[str] = []
    ctx = _ctx(vllm_src, notes) | {"warm": True}
    device = "cuda" if not dry else "cpu"
    t0 = time.monotonic()
    for cell in todo[i::n]:
        measure_cell(cell, ctx, 1.0, device, notes, time_it=False)
    print(f"warm {i}/{n}: {len(todo[i::n])} cells in {time.monotonic() - t0:.0f}s; "
          f"{len(notes)} notes", flush=True)  # fmt: skip
    for note in notes[:5]:
        print("warm note", note, flush=True)
    return 0


def warm(workers: int, vllm_src: Path, deadline: float, dry: bool, notes: list[str]) -> float:
    """Start ``workers`` warm-up processes and wait for them (at most until ``deadline``)."""
    t0 = time.monotonic()
    env = {**os.environ, "R6_DRY": "1" if dry else "0", "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                __spec__.name,
                "--warm-worker",
                f"{i}/{workers}",
                "--vllm-src",
                str(vllm_src),
                "--out",
                ".",
            ],
            env=env,
        )
        for i in range(workers)
    ]
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            notes.append("warm-up worker killed at its deadline")
    bad = [p.returncode for p in procs if p.returncode not in (0, None)]
    if bad:
        notes.append(f"warm-up workers exited {bad}")
    return time.monotonic() - t0


# ------------------------------------------------------------------------------ driver
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--budget-s", type=float, default=450.0)
    p.add_argument("--workers", type=int, default=14, help="compile warm-up processes")
    p.add_argument("--vllm-src", type=Path, default=Path(".vllmwheel/src"))
    p.add_argument("--commit", default="unknown")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes (TRITON_INTERPRET=1)")
    p.add_argument("--phases", default="warm,gdn_main,step_ops,gdn_tp")
    p.add_argument("--warm-worker", default=None, help=argparse.SUPPRESS)
    return p


def _meta(args, device: str) -> dict:
    import platform

    import torch
    import triton

    meta = {
        "command": " ".join(["python3 -m capsim_kernels.bench.gdn.round6", *sys.argv[1:]]),
        "commit": args.commit, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "dry_run": args.dry_run,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "timing": "CUDA graph replay, L2 flushed per replay (triton.testing.do_bench "
        "quantiles 0.2/0.5/0.8); floor = bytes_moved / copy bandwidth of this run",
        "checks": "float64 recurrence over all requests of every cell; rows carry the worst "
        "per-(request, head) committed-state error", "state_tol": STATE_TOL,
        "contract_tol": CONTRACT_TOL, "o_tol": O_TOL, "storeall_config": STOREALL_CONFIG,
        "notes": [], "phase_s": {},
    }  # fmt: skip
    return meta


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.warm_worker is not None:
        return warm_worker(args.warm_worker, args.vllm_src)
    import torch

    t0 = time.monotonic()
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device (use --dry-run on a CPU)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    phases = set(args.phases.split(","))
    meta = _meta(args, device)
    notes = meta["notes"]
    end = {k: t0 + f * args.budget_s for k, f in PHASE_END.items()}

    def save() -> None:
        meta["elapsed_s"] = round(time.monotonic() - t0, 1)
        atomic_write(args.out / "round6_meta.json", json.dumps(meta, indent=1, default=str))

    if "warm" in phases and args.workers > 0:
        meta["phase_s"]["warm"] = round(warm(args.workers, args.vllm_src, end["warm"],
                                             args.dry_run, notes), 1)  # fmt: skip
        save()
    from ..timing import measure_copy_gbps

    copy_gbps = measure_copy_gbps() if device == "cuda" else 1000.0
    meta["copy_gbps"] = round(copy_gbps, 1)
    print(f"copy bandwidth {copy_gbps:.1f} GB/s (read + write)", flush=True)
    ctx = _ctx(args.vllm_src, notes)
    rows: list[dict] = []
    for phase, cells in (("gdn_main", main_cells), ("step_ops", None), ("gdn_tp", tp_cells)):
        if phase not in phases:
            continue
        t1 = time.monotonic()
        if cells is None:
            from ..step.round6_ops import run_step_ops

            meta["step_ops"] = run_step_ops(args.out, device, end[phase], args.dry_run, notes)
        else:
            todo = cells(args.dry_run)
            meta[f"{phase}_cells"] = [run_cells(todo, ctx, copy_gbps, device, end[phase], rows,
                                                args.out, notes), len(todo)]  # fmt: skip
        meta["phase_s"][phase] = round(time.monotonic() - t1, 1)
        save()
    meta["num_rows"] = len(rows)
    # a kernel whose float64 check failed is never timed: every timed row passed its check
    timed = [r for r in rows if r.get("p50_us") not in (None, "")]
    meta["checks_ok"] = bool(timed) and all(r["check_ok"] for r in timed)
    meta["failed_checks"] = [f"{r['kernel']} {r['model_shape']} {r['tree']} B={r['B']}"
                             for r in rows if not r["check_ok"]]  # fmt: skip
    meta["contract_misses"] = sum(1 for r in rows if not r["contract_ok"])
    save()
    print(f"round6 done: {len(rows)} GDN rows, {meta['elapsed_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
