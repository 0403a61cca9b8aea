"""Round 6: one device call, one timing method, for the benchmark and the calibration tables.

    python3 -m capsim_kernels.bench.gdn.round6 --out DIR [--budget-s 450] [--workers 15]
    TRITON_INTERPRET=1 python3 -m capsim_kernels.bench.gdn.round6 --out DIR --dry-run [--smoke]

Under its own deadline, in priority order (each phase must stop at its share of the
budget, PHASE_END, so a slow phase cannot starve the next; one that ends early leaves its
time to the next; whatever is not reached is listed in the metadata):

1. compile warm-up: worker processes run every kernel of every compile key of the GDN
   phases once (heads, state dtype, parent array, B = 1 or 256: the launch policy's two
   sides), in the phases' priority order, filling Triton's cache in parallel;
2. copy bandwidth (2 GiB device-to-device, read + write), the floor of every row;
3. gdn_kc: kcode's launch variants (variants.py) next to the defaults of their families,
   B = 256 (T = 4 both shapes, the 35B's T = 2..9, 15, (2,2,2)) and B = 64 at T = 4;
   gdn_main, the benchmark (35B TP1 and 397B TP8 shapes, fp32, T = 1..9, 15, 40 chains and
   the trees (2,2,2), (3,3,3)): B = 256 (replay, vLLM's store-all and the defaults gdn_kc
   did not time), the slow-gate (0.9-1) accuracy cell, then
   B = 64 and 1 with every kernel. Every kernel is checked against a float64 recurrence
   over all requests before it is timed (worst per-(request, head) error in the row),
   then CUDA-graph replays with the L2 flushed;
4. step_ops: operators at per-GPU TP shapes the step model lacks (vLLM 0.33's kernels
   through step.points.measure_shapes; classes already in capsim's table are skipped),
   vLLM's Triton FP8 fused MoE (w8a8, 128x128 blocks) and FP8 GEMMs;
5. gdn_tp: the step model's kernels at the per-GPU head counts of TP 1/2/4/8 of every
   preset (chains; two batch sizes at T = 1, 2, 4, 9 for every pair first);
6. gdn_cal: B = 8, 32, 128 at the main shapes, the step model's kernels;
(gdn_p2, kcode's persistent verify stream of the first call, only when named).

Each phase runs in child processes (a CUDA fault in one cell cannot take the rest of the
call: the phase resumes after the cell that crashed). Writes DIR/round6_<phase>.csv
(GDN_COLUMNS, after every cell), DIR/round6_step_ops.csv (model_step's schema),
DIR/round6_meta.json (checks_ok, notes, phase times); progress files go to R6_WORK.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..timing import atomic_write, write_csv
from .bench_harness import open_device
from .round6_cells import (
    CELLS,
    CONTRACT_TOL,
    GDN_COLUMNS,
    O_TOL,
    STATE_TOL,
    STOREALL_CONFIG,
    Cell,
    _ctx,
    main_kernels,
    measure_cell,
    phase_cells,
)

# share of the budget at which each phase must stop (fractions of --budget-s); a phase
# that ends early leaves its time to the next
PHASE_END = {
    "warm": 0.17, "gdn_kc": 0.35, "gdn_main": 0.65, "step_ops": 0.80, "gdn_tp": 0.93,
    "gdn_cal": 0.98, "gdn_p2": 1.0,
}  # fmt: skip
PHASE_ORDER = ("gdn_kc", "gdn_main", "step_ops", "gdn_tp", "gdn_cal", "gdn_p2")
DEFAULT_PHASES = "warm,gdn_kc,gdn_main,step_ops,gdn_tp,gdn_cal"
# --plan r7 (round 7, round7_cells.py / step/round7_ops.py): the step operators first (what
# keeps capsim simulate refusing deployments), then the GDN coverage cells, kcode's variants
# and the interpolation points; files round7_<phase>.csv, round7_meta.json
PHASE_END_R7 = {
    "warm": 0.17, "step_ops": 0.60, "gdn_cov": 0.65, "gdn_kc": 0.78, "gdn_tp64": 0.84,
    "gdn_cal": 0.92, "gdn_tpT": 0.98,
}  # fmt: skip
PHASE_ORDER_R7 = ("step_ops", "gdn_cov", "gdn_kc", "gdn_tp64", "gdn_cal", "gdn_tpT")
DEFAULT_PHASES_R7 = "warm," + ",".join(PHASE_ORDER_R7)
# --plan r8 (round 8, round8_cells.py): the owed coverage cells under their own deadline,
# kcode's deferred variants, then round 7's unfinished points; no step operators
PHASE_END_R8 = {
    "warm": 0.28, "gdn_cov": 0.56, "gdn_kc": 0.80, "gdn_tp64": 0.85, "gdn_tpT": 0.89,
    "gdn_cal": 0.93,
}  # fmt: skip
PHASE_ORDER_R8 = ("gdn_cov", "gdn_kc", "gdn_tp64", "gdn_tpT", "gdn_cal")
# --plan r9 (round 9, round9_cells.py): the session-5 stream variants first, then round
# 7's unfinished points, their compiles in the warm-up after gdn_kc's (WARM9); sized for
# --budget-s 420 (the lead, 08:06: timeout_s 480 on a fresh machine)
PHASE_END_R9 = {"warm": 0.30, "gdn_kc": 0.45, "gdn_tpT": 0.75, "gdn_cal": 0.93}
PHASE_ORDER_R9 = ("gdn_kc", "gdn_tpT", "gdn_cal")
# --plan r10 (round 10, round10_cells.py): the session-6 stream variants only, a short call
# (round 9: warm-up 79.6 s with gdn_tpT's and gdn_cal's compiles too, gdn_kc 11.5 s); sized
# for --budget-s 260 under timeout_s 330 (the warm-up must end by 117 s, gdn_kc by 239 s)
PHASE_END_R10 = {"warm": 0.45, "gdn_kc": 0.92}
PHASE_ORDER_R10 = ("gdn_kc",)
# --plan r11 (round 11, round11_cells.py): the deferred commit only, 7 kernels x 6 cells, a
# very short call (round 10: warm-up 26.5 s for 15 keys x 14 kernels, gdn_kc 9.9 s for 126
# rows); sized for --budget-s 85 under python's timeout 100: the warm-up must end by 47 s,
# gdn_kc by 75 s (+15 s child kill grace = 90 s, + ~5 s of imports before the clock < 100)
PHASE_END_R11 = {"warm": 0.55, "gdn_kc": 0.88}
PHASE_ORDER_R11 = ("gdn_kc",)
# --plan r12 (round 12, round12_cells.py): the deferred state stream, 8 kernels x 6 cells
# (round 11: warm-up 17.5 s for 7 kernels, gdn_kc 6.1 s for 42 rows); sized for --budget-s
# 110 under python's timeout 130: the warm-up must end by 60.5 s, gdn_kc by 99 s (+15 s
# child kill grace = 114 s, + ~5 s of imports before the clock < 130)
PHASE_END_R12 = {"warm": 0.55, "gdn_kc": 0.90}
PHASE_ORDER_R12 = ("gdn_kc",)
PLANS = {
    "r6": {"end": PHASE_END, "order": PHASE_ORDER, "phases": DEFAULT_PHASES, "prefix": "round6"},
    "r7": {"end": PHASE_END_R7, "order": PHASE_ORDER_R7, "phases": DEFAULT_PHASES_R7,
           "prefix": "round7"},
    "r8": {"end": PHASE_END_R8, "order": PHASE_ORDER_R8,
           "phases": "warm," + ",".join(PHASE_ORDER_R8), "prefix": "round8"},
    "r9": {"end": PHASE_END_R9, "order": PHASE_ORDER_R9,
           "phases": "warm," + ",".join(PHASE_ORDER_R9), "prefix": "round9"},
    "r10": {"end": PHASE_END_R10, "order": PHASE_ORDER_R10,
            "phases": "warm," + ",".join(PHASE_ORDER_R10), "prefix": "round10"},
    "r11": {"end": PHASE_END_R11, "order": PHASE_ORDER_R11,
            "phases": "warm," + ",".join(PHASE_ORDER_R11), "prefix": "round11"},
    "r12": {"end": PHASE_END_R12, "order": PHASE_ORDER_R12,
            "phases": "warm," + ",".join(PHASE_ORDER_R12), "prefix": "round12"},
}  # fmt: skip
WORK = Path(os.environ.get("R6_WORK", "/tmp/r6work"))  # progress files (not returned)


def warm_batch(cell: Cell, dry: bool) -> int:
    """The batch a cell's compiles are warmed at: 1 for B = 1; else 64 where B * Hv >= 512
    at B = 64 (the launch policy's switch of tiles and kernels: 64 and 256 sit on the same
    side, and 64 keeps 15 concurrent workers' store-all pools small), else 256 (3 dry)."""
    if cell.batch == 1:
        return 1
    if dry:
        return 3
    return 64 if 64 * cell.shape.num_v_heads >= 512 else 256


def warm_key(cell: Cell, batch: int) -> tuple:
    """What a compile depends on: heads, state dtype, the window's parent array (a label
    such as 'chain' does not name T) and the batch's specialisation."""
    return (cell.shape.heads_key, cell.state_dtype, cell.tree.parent, batch)


WARM_PHASES = ("gdn_kc", "gdn_main", "gdn_tp", "gdn_cal")


def plan_cells(phase: str, dry: bool, plan: str | None = None) -> list[Cell]:
    """A phase's cells under ``plan`` (default: env R6_PLAN, else r6); R6_SMOKE=1: the
    first cell per kernel set (round6_cells.smoke)."""
    plan = plan or os.environ.get("R6_PLAN", "r6")
    if plan == "r6":
        return phase_cells(phase, dry)
    from .round6_cells import smoke

    cells = _cell_table(plan)[phase](dry)
    return smoke(cells) if os.environ.get("R6_SMOKE") == "1" else cells


def _cell_table(plan: str) -> dict:
    """The plan's phase -> cells function (r7: round7_cells, r8: round8_cells, r9 .. r12)."""
    if plan == "r6":
        return CELLS
    if plan == "r12":
        from .round12_cells import CELLS12

        return CELLS12
    if plan == "r11":
        from .round11_cells import CELLS11

        return CELLS11
    if plan == "r10":
        from .round10_cells import CELLS10

        return CELLS10
    if plan == "r7":
        from .round7_cells import CELLS7

        return CELLS7
    if plan == "r9":
        from .round9_cells import CELLS9

        return CELLS9
    from .round8_cells import CELLS8

    return CELLS8


def cell_phases(plan: str) -> tuple[str, ...]:
    """The phases of ``plan`` that have GDN cells."""
    return tuple(_cell_table(plan))


def warm_phases(plan: str) -> tuple[str, ...]:
    """The phases whose compiles the warm-up covers (r8: WARM8, r9: WARM9, r10: WARM10,
    r11: WARM11, r12: WARM12; else every cell phase)."""
    if plan == "r12":
        from .round12_cells import WARM12

        return WARM12
    if plan == "r11":
        from .round11_cells import WARM11

        return WARM11
    if plan == "r10":
        from .round10_cells import WARM10

        return WARM10
    if plan == "r8":
        from .round8_cells import WARM8

        return WARM8
    if plan == "r9":
        from .round9_cells import WARM9

        return WARM9
    return cell_phases(plan)
# vLLM's GDN ops take the batch as a tl.constexpr (fused_sigmoid_gating.py, the packed
# decode's strides): one compile per batch size, so they are warmed at every B of the run
PER_BATCH_KERNELS = ("vllm_storeall", "vllm_decode")
# ... except where a store-all pool passes this size (15 workers at once must fit the GPU):
# those compile in line (~1 s each)
WARM_POOL_MAX_BYTES = 6 * 2**30


def _pool_bytes(c: Cell) -> int:
    per = c.shape.num_v_heads * c.shape.dk * c.shape.dv * (4 if c.state_dtype == "float32" else 2)
    return c.batch * (c.tree.num_nodes + 1) * per


def warm_cells(dry: bool, phases: tuple[str, ...] = WARM_PHASES) -> list[Cell]:
    """The warm-up's cells: every distinct compile of the run's phases, in their priority
    order, each with the union of the kernels timed at that compile key (capsim's and
    kcode's kernels per warm_batch; vLLM's per batch size, PER_BATCH_KERNELS)."""
    kernels: dict[tuple, list[str]] = {}
    first: dict[tuple, Cell] = {}
    for phase in phases:
        for c in plan_cells(phase, dry):
            names = c.kernels or main_kernels()
            for key, part in (
                (warm_key(c, warm_batch(c, dry)), [k for k in names if k not in PER_BATCH_KERNELS]),
                ((*warm_key(c, c.batch), "vllm"), [k for k in names if k in PER_BATCH_KERNELS
                                                   and _pool_bytes(c) <= WARM_POOL_MAX_BYTES]),
            ):  # fmt: skip
                if not part:
                    continue
                have = kernels.setdefault(key, [])
                have += [k for k in part if k not in have]
                first.setdefault(key, c)
    return [Cell(c.shape, c.state_dtype, c.tree, key[3], tuple(kernels[key]), "warm",
                 c.gate_floor) for key, c in first.items()]  # fmt: skip


def warm_worker(spec: str, vllm_src: Path) -> int:
    """Worker ``i/n``: run every kernel of its share of the cells once (B = 1 and 64)."""
    i, n = (int(x) for x in spec.split("/"))
    dry = os.environ.get("R6_DRY") == "1"
    listed = os.environ.get("R6_WARM_PHASES", ",".join(WARM_PHASES)).split(",")
    phases = tuple(p for p in listed if p)  # none listed: nothing to warm
    todo = warm_cells(dry, phases)
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


def warm_step_worker(args) -> int:
    """The step operators' compile warm-up process (plan r7; vLLM's files from
    CAPSIM_VLLM_SRC, as the step phase's child)."""
    from ..step.round7_ops import warm_step7

    t0 = time.monotonic()
    n = warm_step7("cpu" if args.dry_run else "cuda", args.dry_run)
    print(f"warm step: {n} points visited in {time.monotonic() - t0:.0f}s", flush=True)
    return 0


def warm(workers: int, vllm_src: Path, deadline: float, dry: bool, notes: list[str],
         phases: tuple[str, ...]) -> float:  # fmt: skip
    """Start ``workers`` warm-up processes and wait for them (at most until ``deadline``)."""
    t0 = time.monotonic()
    plan = os.environ.get("R6_PLAN", "r6")
    env = {**os.environ, "R6_DRY": "1" if dry else "0", "PYTHONUNBUFFERED": "1",
           "R6_WARM_PHASES": ",".join(p for p in phases if p in warm_phases(plan)),
           "CAPSIM_VLLM_SRC": str(vllm_src)}  # fmt: skip
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
                "--plan",
                plan,
            ],
            env=env,
        )
        for i in range(workers)
    ]
    if plan == "r7" and "step_ops" in phases:  # the step operators' Triton kernels, beside
        procs.append(subprocess.Popen(  # the GDN workers (step/round7_ops.warm_step7)
            [sys.executable, "-m", __spec__.name, "--warm-step", "--vllm-src", str(vllm_src),
             "--out", ".", "--plan", plan] + (["--dry-run"] if dry else []), env=env))  # fmt: skip
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


# ------------------------------------------------------------------------------ phases
def _read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def run_phase(phase: str, args, start: int) -> int:
    """Child process: the cells of ``phase`` from index ``start`` until the phase deadline
    (epoch seconds); rows appended to DIR/round6_<phase>.csv after every cell; the index
    of the cell being measured in WORK/<phase>.progress (a crash is resumed after it)."""
    device = "cpu" if args.dry_run else "cuda"
    notes: list[str] = []
    cells = plan_cells(phase, args.dry_run, args.plan)
    out = args.out / f"{PLANS[args.plan]['prefix']}_{phase}.csv"  # round6_gdn_main.csv, ...
    rows = _read_rows(out) if start else []
    ctx = _ctx(args.vllm_src, notes)
    i = start
    for i in range(start, len(cells)):
        cell = cells[i]
        if time.time() > args.deadline_epoch:
            left = f"{cell.shape.name} {cell.tree.label} B={cell.batch}"
            notes.append(f"{phase}: deadline before {len(cells) - i} of {len(cells)} cells "
                         f"(first left: {left})")  # fmt: skip
            print(notes[-1], flush=True)
            break
        atomic_write(WORK / f"{phase}.progress", str(i))
        if os.environ.get("R6_FAULT") == f"{phase}:{i}":  # fault injection (CPU tests)
            os._exit(3)
        new = measure_cell(cell, ctx, args.copy_gbps, device, notes)
        rows.extend(new)
        write_csv(out, rows, GDN_COLUMNS)
        for r in new:
            print("r6", r["kernel"], r["model_shape"], r["tree"], f"T={r['T']}", f"B={r['B']}",
                  r.get("p50_us", "-"), r["err_max_req_head"], flush=True)  # fmt: skip
    else:
        i = len(cells)
    atomic_write(WORK / f"{phase}.progress", f"done {i}")
    with (WORK / f"{phase}.notes.jsonl").open("a") as f:
        f.write(json.dumps({"start": start, "stop": i, "notes": notes}) + "\n")
    return 0


def run_step_phase(args) -> int:
    """Child process of the step-operator phase. r7: its jobs from ``args.start`` (a crash
    is resumed after the job that crashed: WORK/step_ops.progress), the metadata saved
    after every job."""
    from ..step.round6_ops import run_step_ops
    from ..step.round7_ops import run_step7

    device = "cpu" if args.dry_run else "cuda"
    deadline = time.monotonic() + args.deadline_epoch - time.time()
    path = WORK / "step_ops.json"
    if args.plan == "r6":
        notes: list[str] = []
        meta = run_step_ops(args.out, device, deadline, args.dry_run, notes)
        atomic_write(path, json.dumps({"meta": meta, "notes": notes}, default=str))
        return 0
    prior = json.loads(path.read_text()) if args.start and path.is_file() else {}
    notes = prior.get("notes", [])

    def save(meta: dict, job: int) -> None:
        if prior:  # a resumed attempt: the jobs of the one before it first
            meta = {**meta, "jobs": prior["meta"]["jobs"] + meta["jobs"],
                    "rows": prior["meta"].get("rows", 0) + meta.get("rows", 0)}  # fmt: skip
        atomic_write(path, json.dumps({"meta": meta, "notes": notes}, default=str))
        if job >= 0:  # the job about to run (a crash resumes after it)
            atomic_write(WORK / "step_ops.progress", str(job))

    run_step7(args.out, device, deadline, args.dry_run, notes, start=args.start, save=save)
    atomic_write(WORK / "step_ops.progress", "done")
    return 0


def _child(args, phase: str, start: int, deadline: float) -> int:
    """Run one phase attempt in a fresh process (a CUDA fault there cannot take the rest of
    the call with it); returns its exit code (-9: killed at the deadline)."""
    cmd = [sys.executable, "-m", __spec__.name, "--out", str(args.out), "--phase", phase,
           "--start", str(start), "--copy-gbps", str(args.copy_gbps), "--deadline-epoch",
           str(deadline), "--vllm-src", str(args.vllm_src), "--plan", args.plan] + (
               ["--dry-run"] if args.dry_run else [])  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CAPSIM_VLLM_SRC": str(args.vllm_src),
           "R6_DRY": "1" if args.dry_run else "0", "R6_PLAN": args.plan}  # fmt: skip
    proc = subprocess.Popen(cmd, env=env)
    try:
        return proc.wait(timeout=max(1.0, deadline - time.time() + 15.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


def orchestrate_phase(args, phase: str, deadline: float, meta: dict) -> None:
    """A phase in child processes: after a crash, resume at the cell after the one that
    crashed while the phase has time."""
    attempts, start = [], 0
    while time.time() < deadline:
        rc = _child(args, phase, start, deadline)
        prog = (
            (WORK / f"{phase}.progress").read_text()
            if (WORK / f"{phase}.progress").is_file()
            else ""
        )
        attempts.append({"start": start, "rc": rc, "progress": prog})
        r6_step = phase == "step_ops" and args.plan == "r6"  # r6: no resume
        if rc == 0 or r6_step or prog.startswith("done") or not prog:
            break
        meta["notes"].append(f"{phase}: child exited {rc} at cell {prog}; resuming after it")
        print(meta["notes"][-1], flush=True)
        start = int(prog) + 1
    meta.setdefault("attempts", {})[phase] = attempts


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--budget-s", type=float, default=450.0)
    p.add_argument("--workers", type=int, default=15, help="compile warm-up processes")
    p.add_argument("--vllm-src", type=Path, default=Path(".vllmwheel/src"))
    p.add_argument("--commit", default="unknown")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes (TRITON_INTERPRET=1)")
    p.add_argument("--smoke", action="store_true",
                   help="each phase's first cell per kernel set only (R6_SMOKE=1)")  # fmt: skip
    p.add_argument("--plan", choices=tuple(PLANS), default="r6",
                   help="r6: round 6's phases; r7: round 7's (round7_cells.py); r8: round "
                   "8's (round8_cells.py); r9: round 9's (round9_cells.py); r10: round 10's "
                   "(round10_cells.py); r11: round 11's (round11_cells.py); r12: round 12's "
                   "(round12_cells.py)")  # fmt: skip
    p.add_argument("--phases", default=None, help="comma list (default: the plan's)")
    p.add_argument("--phase-end", default="",
                   help="override shares of the budget, e.g. warm=0.2,gdn_kc=0.8")  # fmt: skip
    p.add_argument("--warm-worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--warm-step", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--copy-gbps", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--deadline-epoch", type=float, default=0.0, help=argparse.SUPPRESS)
    return p


def parse_shares(text: str, known: dict[str, float]) -> dict[str, float]:
    """``--phase-end`` ("phase=share,..."): shares of the budget in (0, 1], known phases."""
    out: dict[str, float] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, _, value = item.partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if name not in known or not 0.0 < share <= 1.0:
            raise SystemExit(f"--phase-end: {item!r} must be phase=share with phase in "
                             f"{sorted(known)} and 0 < share <= 1")  # fmt: skip
        out[name] = share
    return out


def _meta(args, device: str) -> dict:
    import platform

    import torch
    import triton

    return {
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


def _collect(args, meta: dict) -> None:
    """Phase notes and the checks summary from the children's files (recomputed whole at
    every call: idempotent)."""
    notes: list[str] = []
    for path in sorted(WORK.glob("*.notes.jsonl")):
        for line in path.read_text().splitlines():
            notes += json.loads(line)["notes"]
    if (WORK / "step_ops.json").is_file():
        step = json.loads((WORK / "step_ops.json").read_text())
        meta["step_ops"] = step["meta"]
        notes += step["notes"]
    meta["phase_notes"] = notes
    prefix = PLANS[args.plan]["prefix"]
    rows = [r for p in sorted(args.out.glob(f"{prefix}_gdn_*.csv")) for r in _read_rows(p)]
    timed = [r for r in rows if r.get("p50_us")]
    # a kernel whose float64 check failed is never timed: every timed row passed its check
    meta["num_rows"], meta["num_timed"] = len(rows), len(timed)
    meta["checks_ok"] = bool(timed) and all(r["check_ok"] == "True" for r in timed)
    meta["failed_checks"] = [f"{r['kernel']} {r['model_shape']} {r['tree']} B={r['B']}"
                             for r in rows if r["check_ok"] != "True"]  # fmt: skip
    meta["contract_misses"] = [f"{r['kernel']} {r['model_shape']} {r['tree']} B={r['B']} "
                               f"{r['err_max_req_head']}" for r in rows
                               if r["contract_ok"] != "True"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.smoke:  # children and warm-up workers inherit it
        os.environ["R6_SMOKE"] = "1"
    os.environ["R6_PLAN"] = args.plan
    plan = PLANS[args.plan]
    if args.phases is None:
        args.phases = plan["phases"]
    if args.warm_worker is not None:
        return warm_worker(args.warm_worker, args.vllm_src)
    if args.warm_step:
        return warm_step_worker(args)
    WORK.mkdir(parents=True, exist_ok=True)
    if args.phase is None:  # the orchestrator starts from a clean progress folder
        for stale in WORK.glob("*"):
            stale.unlink()
    if args.phase == "step_ops":
        return run_step_phase(args)
    if args.phase is not None:
        return run_phase(args.phase, args, args.start)
    device = open_device(args.dry_run, args.out)
    if device is None:
        return 2
    t0 = time.time()
    phases = args.phases.split(",")
    meta = _meta(args, device)
    meta["plan"] = args.plan
    shares = {**plan["end"], **parse_shares(args.phase_end, plan["end"])}
    meta["phase_end"] = shares
    end = {k: t0 + f * args.budget_s for k, f in shares.items()}

    def save() -> None:
        # the checks summary after every phase: a run killed later still returns a meta
        # that says whether its rows passed their float64 checks
        _collect(args, meta)
        meta["elapsed_s"] = round(time.time() - t0, 1)
        atomic_write(args.out / f"{plan['prefix']}_meta.json",
                     json.dumps(meta, indent=1, default=str))  # fmt: skip

    if "warm" in phases and args.workers > 0:
        meta["phase_s"]["warm"] = round(
            warm(args.workers, args.vllm_src, time.monotonic() + end["warm"] - time.time(),
                 args.dry_run, meta["notes"], tuple(phases)), 1)  # fmt: skip
        save()
    from ..timing import measure_copy_gbps

    args.copy_gbps = measure_copy_gbps() if device == "cuda" else 1000.0
    meta["copy_gbps"] = round(args.copy_gbps, 1)
    print(f"copy bandwidth {args.copy_gbps:.1f} GB/s (read + write)", flush=True)
    save()
    for phase in plan["order"]:
        if phase in phases:
            t1 = time.time()
            orchestrate_phase(args, phase, end[phase], meta)
            meta["phase_s"][phase] = round(time.time() - t1, 1)
            save()
    save()
    print(f"{plan['prefix']} done: {meta['num_timed']} timed GDN rows, {meta['elapsed_s']} s",
          flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
