"""Round 6's cells and their measurement: what round6.py runs, one cell at a time.

A cell is one (shape, state dtype, window, B) with the registry kernels it times; each is
checked against a float64 recurrence over all requests before it is timed (CUDA-graph
replays, L2 flushed), and its row carries the worst per-(request, head) error and the
floor ratio (bytes moved over the copy bandwidth measured in the same run).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ...gdn_verify.tree import TreeSpec
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
# the benchmark's B first (both shapes, issue 19's "Done when" B = 256 / 64 / 1), then the
# calibration's extra batch sizes (gdn_cal: the step model's kernels only)
BATCHES = (256, 64, 1)
CAL_BATCHES = (8, 32, 128)
TP_BATCHES = (256, 1, 64)
# the kernels the step model reads (capsim.commit_modes kernel_series + k = 0's vllm_decode)
STEP_KERNELS = ("vllm_storeall", "vllm_decode", "treewy_verify", "treewy_commit", "deferred",
                "replay")  # fmt: skip
TREE_STEP_KERNELS = ("storeall", "treewy_verify", "treewy_commit", "deferred", "replay")
TP_KERNELS = STEP_KERNELS
# TP head counts: the windows of the first pass (the step model interpolates T in between,
# labelled as such), then the rest of T = 1..9
TP_WINDOWS_FIRST = (1, 2, 4, 9)
TP_WINDOWS_REST = (3, 6, 5, 7, 8)
GATE_KERNELS = ("treewy_verify_commit", "fused_chain", "deferred", "replay", "vllm_storeall")
# B = 256: the first call (2026-12-01 20:53, the default kernels' code unchanged since
# 33e00e7) timed every default kernel there; this run times there what it lacked (replay),
# vLLM's store-all (the same-run reference of every speed-up) and the defaults of kcode's
# variant families (verify, verify+commit, deferred) where gdn_kc does not time them;
# commit, fused, capsim store-all and vLLM's decode keep the first call's rows
B256_KERNELS = ("treewy_verify", "treewy_verify_commit", "deferred", "replay", "vllm_storeall")
# the tuned capsim store-all (round 5's sweep, BENCHMARKS.md)
STOREALL_CONFIG = {"float32": {"block_v": 8, "num_warps": 1, "num_stages": 3},
                   "bfloat16": {"block_v": 16, "num_warps": 1, "num_stages": 3}}  # fmt: skip
# (model, tp) of the TP phase in priority order, aligned with the step operators'
# (round6_ops.STEP_SHAPES / FP8_SHAPES: a deployment needs both): the 80B at TP2 (bf16
# needs two GPUs) and TP1 (FP8), the 397B at TP4 (FP8), then the rest; 35B TP2 last
# (measured in the first call at B = 1/64/256 but for replay)
TP_ORDER = (
    ("qwen3-next-80b-a3b", 2), ("qwen3-next-80b-a3b", 1), ("qwen3.5-397b-a17b", 4),
    ("qwen3-next-80b-a3b", 4), ("qwen3.5-35b-a3b", 4), ("qwen3-next-80b-a3b", 8),
    ("qwen3.5-35b-a3b", 8), ("qwen3.5-35b-a3b", 2),
)  # fmt: skip
P2_KERNELS = ("treewy_verify_p2", "treewy_verify_commit_p2")
# do_bench milliseconds of replays per timed kernel: the benchmark's B = 256 cells keep
# round 5's 25 ms, the rest 10 ms (>= ~80 replays at B = 64, ~140 at B = 1 with the flush)
REP_MS = {256: 25.0}
REP_MS_OTHER = 10.0


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


def tp_pairs(dry: bool) -> list[tuple[ModelShape, str]]:
    """The per-GPU head counts of TP 1/2/4/8 of every preset not in the main phase, at each
    preset's state dtype (the 80B keeps a bf16 state), in TP_ORDER. The 397B at TP1/TP2
    is left out: its weights cannot fit one or two GPUs."""
    from capsim.models import PRESETS

    if dry:
        return [(ModelShape("tiny-c", 2, 2, 16, 16), "bfloat16")]
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
    return pairs


def tp_cells(dry: bool) -> list[Cell]:
    """Phase gdn_tp: chains at the TP head counts (tp_pairs), the step model's kernels.
    Pass 1: B = 256 and 1 at TP_WINDOWS_FIRST for every pair (two batch sizes make a
    curve); pass 2: B = 64 there; pass 3: the other windows of T = 1..9."""
    pairs = tp_pairs(dry)
    first = (1, 2) if dry else TP_WINDOWS_FIRST
    rest = (3,) if dry else TP_WINDOWS_REST
    big, one, mid = (2, 1, 3) if dry else TP_BATCHES
    cells = [Cell(s, sd, TreeSpec.chain(t), b, TP_KERNELS, "gdn_tp") for s, sd in pairs
             for b in (big, one) for t in first]  # fmt: skip
    cells += [Cell(s, sd, TreeSpec.chain(t), mid, TP_KERNELS, "gdn_tp") for s, sd in pairs
              for t in first]  # fmt: skip
    cells += [Cell(s, sd, TreeSpec.chain(t), b, TP_KERNELS, "gdn_tp") for s, sd in pairs
              for b in (big, one, mid) for t in rest]  # fmt: skip
    return cells


def main_kernels() -> tuple[str, ...]:
    """Every registry kernel but the opt-in persistent variants (their own phase)."""
    from .registry import KERNELS

    return tuple(k.name for k in KERNELS if k.name not in P2_KERNELS)


def kc_cells(dry: bool) -> list[Cell]:
    """Phase gdn_kc: kcode's launch variants next to the defaults of their families
    (variants.variant_cells: B = 256 at T = 4 for both shapes, the 35B's other windows to
    T = 15 and (2,2,2), B = 64 at T = 4)."""
    from .variants import variant_cells

    return variant_cells(dry)


def b256_kernels(shape: ModelShape, tree: TreeSpec, dry: bool) -> tuple[str, ...]:
    """B256_KERNELS, less the default kernels gdn_kc already times at this (shape, window)."""
    from .variants import FAMILIES

    kc = {(c.shape.name, c.tree.parent) for c in kc_cells(dry) if c.batch == (3 if dry else 256)}
    if (shape.name, tree.parent) in kc:
        return tuple(k for k in B256_KERNELS if k not in FAMILIES)
    return B256_KERNELS


def main_windows(dry: bool) -> tuple[TreeSpec, ...]:
    return (*(TreeSpec.chain(t) for t in (4, 1, 2)), TreeSpec((2, 2))) if dry else WINDOWS


def main_cells(dry: bool) -> list[Cell]:
    """Phase gdn_main: both shapes, every window; B = 256 first (b256_kernels), then the
    slow-gate accuracy cell, then B = 64 and 1 (every kernel)."""
    batches = (3, 2, 1) if dry else BATCHES
    cells = [Cell(s, "float32", t, batches[0], b256_kernels(s, t, dry), "gdn_main")
             for s in main_shapes(dry) for t in main_windows(dry)]  # fmt: skip
    # the accuracy contract with slow-decaying gates too (kcode: 0.9-1 at the T = 40 chain)
    slow = TreeSpec.chain(4 if dry else 40)
    cells.append(Cell(main_shapes(dry)[0], "float32", slow, batches[0], GATE_KERNELS,
                      "gdn_main_gates09", gate_floor=0.9))  # fmt: skip
    cells += [Cell(s, "float32", t, b, main_kernels(), "gdn_main") for b in batches[1:]
              for s in main_shapes(dry) for t in main_windows(dry)]  # fmt: skip
    return cells


def cal_cells(dry: bool) -> list[Cell]:
    """Phase gdn_cal: the calibration's extra batch sizes at both main shapes, every
    window, the step model's kernels only (chains: STEP_KERNELS; trees: capsim's
    store-all in place of vLLM's chain-only op)."""
    batches = (2,) if dry else CAL_BATCHES
    return [Cell(s, "float32", t, b, STEP_KERNELS if t.is_chain else TREE_STEP_KERNELS,
                 "gdn_cal") for b in batches for s in main_shapes(dry)
            for t in main_windows(dry)]  # fmt: skip


def p2_cells(dry: bool) -> list[Cell]:
    """kcode's opt-in persistent verify stream next to the default, at the largest B."""
    windows = (TreeSpec.chain(4),) if dry else (
        TreeSpec.chain(4), TreeSpec.chain(15), TreeSpec((2, 2, 2)), TreeSpec.chain(40),
        TreeSpec((3, 3, 3)))  # fmt: skip
    b = 128 if dry else BATCHES[0]
    return [Cell(s, "float32", t, b, P2_KERNELS, "gdn_p2") for s in main_shapes(dry)
            for t in windows]  # fmt: skip


CELLS = {"gdn_kc": kc_cells, "gdn_main": main_cells, "gdn_tp": tp_cells, "gdn_cal": cal_cells,
         "gdn_p2": p2_cells}  # fmt: skip


def smoke(cells: list[Cell]) -> list[Cell]:
    """The first cell of every (kernel set, phase label, state dtype): each code path of a
    phase once (R6_SMOKE=1, the CPU check of the command path before the device call)."""
    seen: set = set()
    out = []
    for c in cells:
        key = (c.kernels, c.phase, c.state_dtype, c.tree.is_chain)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def phase_cells(phase: str, dry: bool) -> list[Cell]:
    cells = CELLS[phase](dry)
    return smoke(cells) if os.environ.get("R6_SMOKE") == "1" else cells


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
    from .variants import VARIANT_KERNELS

    names = cell.kernels
    # kcode's launch variants (variants.py) only where a cell names them
    return [k for k in KERNELS if names is None or k.name in names] + [
        k for k in VARIANT_KERNELS if names is not None and k.name in names]  # fmt: skip


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
                p20, p50, p80 = (time_graph_us(prep.fn, REP_MS.get(b, REP_MS_OTHER))
                                 if device == "cuda" else _host_us(prep.fn))  # fmt: skip
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
